"""`gpucompat check` output: the findings for one fingerprint (``kb.evaluate.evaluate_machine``) as text or JSON,
the verdict line and the `--fail-on` gate."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from ..fingerprint import Fingerprint
from ..textfit import fit, terminal_width
from .verdicts import Finding, confirmed

_HEADINGS = {
    "broken": "BROKEN: known to crash, hang, refuse to start or give wrong output here",
    "degraded": "DEGRADED: runs, but slower, bigger, or silently on another kernel or precision",
}


def to_json(fp: Fingerprint, findings: Sequence[Finding]) -> dict[str, Any]:
    return {"fingerprint": fp.to_dict(), "verdict": verdict(findings), "findings": [f.to_dict() for f in findings]}


def exceeds(findings: Sequence[Finding], fail_on: str | None) -> bool:
    """``--fail-on broken`` fails on broken findings; ``--fail-on degraded`` on broken or degraded. Only upstream
    and verified evidence counts: an unconfirmed claim never fails a gate."""
    if fail_on is None:
        return False
    levels = ("broken",) if fail_on == "broken" else ("broken", "degraded")
    return any(f.severity in levels for f in confirmed(findings))


def verdict(findings: Sequence[Finding]) -> str:
    """One line: the known problems, counting only evidence; "no known problems" when there is none."""
    evidence = confirmed(findings)
    counts = [(n, s) for s in ("broken", "degraded") if (n := sum(1 for f in evidence if f.severity == s))]
    return ", ".join(f"{n} {s}" for n, s in counts) if counts else "no known problems"


def format_findings(fp: Fingerprint, findings: Sequence[Finding], width: int | None = None) -> str:
    """The readable answer, no line wider than `width` (default: the terminal's, textfit.terminal_width)."""
    width = width or terminal_width()
    lines = [f"{fp.name or 'fingerprint'}: {fp.summary()}"]
    for reason in fp.reasons:
        lines.append(f"  note: {reason}")
    evidence = confirmed(findings)
    for severity in ("broken", "degraded"):
        group = [f for f in evidence if f.severity == severity]
        if not group:
            continue
        lines.append("")
        lines.append(f"{_HEADINGS[severity]} ({len(group)})")
        for f in group:
            lines.extend(_finding_lines(f, width))
    advice = [f for f in evidence if f.severity == "advice"]
    if advice:
        lines.append("")
        lines.append(f"RECOMMENDATIONS for this hardware ({len(advice)})")
        for f in advice:
            text = f.workaround or f.summary
            lines.append(_wrap(f"- {text}", "  ", width))
            lines.append(f"    [{f.id}, {f.confidence}]")
    claims = [f for f in findings if f.unconfirmed]
    if claims:
        lines.append("")
        lines.append(f"UNCONFIRMED CLAIMS ({len(claims)}): only the seed documents say so; kept as evidence to "
                     "test, never counted as a problem")
        for f in claims:
            what = "" if f.severity == "advice" else f" would be {f.severity} ({f.failure}):"
            lines.append(_wrap(f"- [{f.id}]{what} {f.summary}", "    ", width))
    lines.append("")
    lines.append(f"verdict: {verdict(findings)} ({_count(len(advice), 'recommendation')}, "
                 f"{_count(len(claims), 'unconfirmed claim')})")
    return fit("\n".join(lines), width, hanging="    ")


def _finding_lines(f: Finding, width: int) -> list[str]:
    engine = f"{f.engine}: " if f.engine else ""
    out = [_wrap(f"- [{f.id}] {engine}{f.summary}", "    ", width)]
    out.append(f"    how it fails: {f.failure}; confidence: {f.confidence}")
    if f.detail:
        out.append(_wrap(f"    here: {f.detail}", "      ", width))
    if f.symptom:
        out.append(_wrap(f"    symptom: {f.symptom}", "      ", width))
    if f.workaround:
        out.append(_wrap(f"    workaround: {f.workaround}", "      ", width))
    out.append("    sources: " + "; ".join(ref for _, ref in f.sources))
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _wrap(text: str, indent: str, width: int) -> str:
    return textwrap.fill(text, width=width, subsequent_indent=indent, break_long_words=False,
                         break_on_hyphens=False)
