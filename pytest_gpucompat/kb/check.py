"""`gpucompat check` output: the findings for one fingerprint (``kb.evaluate.evaluate_machine``) as text or JSON,
the verdict line and the `--fail-on` gate.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from ..common.textfit import fit, terminal_width
from ..machine.fingerprint import Fingerprint
from .schema import SEVERITIES
from .verdicts import Finding, confirmed, problems_text, severity_heading


def to_json(fp: Fingerprint, findings: Sequence[Finding], severity: str | None = None) -> dict[str, Any]:
    """``severity`` (``--severity``) leaves out the milder findings; the verdict still judges them all, as
    ``--fail-on`` does."""
    shown = at_least(findings, severity)
    return {"fingerprint": fp.to_dict(), "verdict": verdict(findings), "findings": [f.to_dict() for f in shown]}


def at_least(findings: Sequence[Finding], severity: str | None) -> list[Finding]:
    """The findings of ``severity`` or worse (``advice``, or None: all of them), unconfirmed claims included."""
    if severity is None:
        return list(findings)
    worst = SEVERITIES[: SEVERITIES.index(severity) + 1]
    return [f for f in findings if f.severity in worst]


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
    return problems_text({s: sum(1 for f in evidence if f.severity == s) for s in ("broken", "degraded")})


def format_findings(fp: Fingerprint, findings: Sequence[Finding], width: int | None = None,
                    severity: str | None = None, why_hidden: str | None = None) -> str:
    """The readable answer, no line wider than `width` (default: the terminal's, textfit.terminal_width).

    ``severity`` (``--severity``) lists only findings that severe or worse; the verdict line still counts every
    finding, as ``--fail-on`` judges them all, and a line says what was left out so a filtered view never reads as
    a clean machine."""
    width = width or terminal_width()
    lines = [f"{fp.name or 'fingerprint'}: {fp.summary()}"]
    for reason in fp.reasons:
        lines.append(f"  note: {reason}")
    shown = at_least(findings, severity)
    evidence = confirmed(shown)
    for level in ("broken", "degraded"):
        group = [f for f in evidence if f.severity == level]
        if not group:
            continue
        lines.append("")
        lines.append(severity_heading(level, len(group)))
        for f in group:
            lines.extend(_finding_lines(f, width))
    advice = [f for f in evidence if f.severity == "advice"]
    if advice:
        lines.append("")
        lines.append(f"RECOMMENDATIONS for this hardware ({len(advice)})")
        for f in advice:
            lines.extend(_advice_lines(f, width))
    claims = [f for f in shown if f.unconfirmed]
    if claims:
        lines.append("")
        lines.append(f"UNCONFIRMED CLAIMS ({len(claims)}): only the seed documents say so; kept as evidence to "
                     "test, never counted as a problem")
        for f in claims:
            what = "" if f.severity == "advice" else f" would be {f.severity} ({f.failure}):"
            lines.append(_wrap(f"- [{f.id}]{what} {f.summary}", "    ", width))
    hidden = _hidden(findings, shown)
    if hidden:
        lines.append("")
        lines.append(f"not shown ({why_hidden or f'--severity {severity}'}): {hidden}")
    lines.append("")
    lines.append(verdict_line(findings))
    return fit("\n".join(lines), width, hanging="    ")


def verdict_line(findings: Sequence[Finding]) -> str:
    """The last line of the answer, alone under ``--quiet``: the problems, then how much advice and how many
    unconfirmed claims there are besides."""
    evidence = confirmed(findings)
    advice = sum(1 for f in evidence if f.severity == "advice")
    claims = sum(1 for f in findings if f.unconfirmed)
    return (f"verdict: {verdict(findings)} ({_count(advice, 'recommendation')}, "
            f"{_count(claims, 'unconfirmed claim')})")


FLEET_FOLD = "degraded"
"""A fleet's listing shows broken and degraded findings; its advice and unconfirmed claims are counted per runner
(the same for every runner of one GPU model, they would bury the problems), unless `--severity advice`."""


def format_fleet(fleet: Sequence[tuple[Fingerprint, Sequence[Finding]]], width: int | None = None,
                 severity: str | None = None) -> str:
    """A fleet's answer: each runner's findings (folded: FLEET_FOLD), then one verdict line per runner."""
    shown = severity or FLEET_FOLD
    why = None if severity else "a fleet lists broken and degraded findings; --severity advice lists all"
    parts = [format_findings(fp, found, width, shown, why) for fp, found in fleet]
    parts.append(f"fleet of {len(fleet)} runners:\n" + format_quiet(fleet, width))
    return "\n\n".join(parts)


def format_quiet(fleet: Sequence[tuple[Fingerprint, Sequence[Finding]]], width: int | None = None) -> str:
    """``--quiet``: the verdict line alone; for a fleet one line per runner, named, so a script or a CI log can
    read each runner's answer without the listing."""
    if len(fleet) == 1:
        return fit(verdict_line(fleet[0][1]), width, hanging="    ")
    return fit("\n".join(f"{fp.name or 'fingerprint'}: {verdict_line(found)}" for fp, found in fleet), width,
               hanging="    ")


def _hidden(findings: Sequence[Finding], shown: Sequence[Finding]) -> str:
    """What ``--severity`` left out, counted by kind ("2 degraded, 1 recommendation"); ``""`` when nothing."""
    kept = {id(f) for f in shown}
    left = [f for f in findings if id(f) not in kept]
    evidence = confirmed(left)
    degraded = sum(1 for f in evidence if f.severity == "degraded")
    advice = sum(1 for f in evidence if f.severity == "advice")
    claims = sum(1 for f in left if f.unconfirmed)
    counts = [f"{degraded} degraded" if degraded else "", _count(advice, "recommendation") if advice else "",
              _count(claims, "unconfirmed claim") if claims else ""]
    return ", ".join(c for c in counts if c)


def _advice_lines(f: Finding, width: int) -> list[str]:
    """Advice with what it is about, when it applies and what to do: the summary, the rule's condition (or what
    this runner has for it), then the workaround; the bare workaround read as an instruction for any machine."""
    out = [_wrap(f"- {f.summary}", "  ", width)]
    if f.detail:
        condition = f.detail if f.detail.startswith("when: ") else f"here: {f.detail}"
        out.append(_wrap(f"    {condition}", "      ", width))
    if f.workaround:
        out.append(_wrap(f"    do: {f.workaround}", "      ", width))
    out.append(f"    [{f.id}, {f.confidence}]")
    return out


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
