"""What-if evaluation: the knowledge base against one fingerprint, and its readable form."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from .fingerprint import Fingerprint
from .rules import KnowledgeBase, matching_rules
from .verdicts import Finding, findings_for

_HEADINGS = {
    "broken": "BROKEN: known to crash, hang, refuse to start or give wrong output here",
    "degraded": "DEGRADED: runs, but slower, bigger, or silently on another kernel or precision",
}


def evaluate(kb: KnowledgeBase, fp: Fingerprint) -> list[Finding]:
    return findings_for(matching_rules(kb, fp))


def to_json(fp: Fingerprint, findings: Sequence[Finding]) -> dict[str, Any]:
    return {"fingerprint": fp.to_dict(), "findings": [f.to_dict() for f in findings]}


def exceeds(findings: Sequence[Finding], fail_on: str | None) -> bool:
    """``--fail-on broken`` fails on broken findings; ``--fail-on degraded`` on broken or degraded."""
    if fail_on is None:
        return False
    levels = ("broken",) if fail_on == "broken" else ("broken", "degraded")
    return any(f.severity in levels for f in findings)


def format_findings(fp: Fingerprint, findings: Sequence[Finding]) -> str:
    lines = [f"{fp.name or 'fingerprint'}: {fp.summary()}"]
    for reason in fp.reasons:
        lines.append(f"  note: {reason}")
    if not findings:
        lines.append("")
        lines.append("No known problem matches this fingerprint.")
    for severity in ("broken", "degraded"):
        group = [f for f in findings if f.severity == severity]
        if not group:
            continue
        lines.append("")
        lines.append(f"{_HEADINGS[severity]} ({len(group)})")
        for f in group:
            lines.extend(_finding_lines(f))
    advice = [f for f in findings if f.severity == "advice" and f.confidence != "documents"]
    hearsay = [f for f in findings if f.severity == "advice" and f.confidence == "documents"]
    if hearsay:
        lines.append("")
        lines.append(f"UNCONFIRMED ADVICE from the seed documents, kept for evidence, not recommended ({len(hearsay)})")
        for f in hearsay:
            lines.append(_wrap(f"- [{f.id}] {f.summary}", "    "))
    if advice:
        lines.append("")
        lines.append(f"RECOMMENDATIONS for this hardware ({len(advice)})")
        for f in advice:
            text = f.workaround or f.summary
            lines.append(_wrap(f"- {text}", "  "))
            lines.append(f"    [{f.id}, {f.confidence}]")
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("broken", "degraded", "advice")}
    lines.append("")
    lines.append(f"{counts['broken']} broken, {counts['degraded']} degraded, {counts['advice']} advice")
    return "\n".join(lines)


def _finding_lines(f: Finding) -> list[str]:
    engine = f"{f.engine}: " if f.engine else ""
    out = [_wrap(f"- [{f.id}] {engine}{f.summary}", "    ")]
    out.append(f"    how it fails: {f.failure}; confidence: {f.confidence}"
               + ("" if f.confidence != "documents" else " (only the seed documents say so)"))
    if f.symptom:
        out.append(_wrap(f"    symptom: {f.symptom}", "      "))
    if f.workaround:
        out.append(_wrap(f"    workaround: {f.workaround}", "      "))
    if f.note and f.confidence == "documents":
        out.append(_wrap(f"    note: {f.note}", "      "))
    out.append("    sources: " + "; ".join(ref for _, ref in f.sources))
    return out


def _wrap(text: str, indent: str) -> str:
    return textwrap.fill(text, width=110, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)
