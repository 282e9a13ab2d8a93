"""What matching rules do to a cell: pure functions from rules to findings to one decision.

The policy (see docs/knowledge-base.md): a known crash or hang with upstream or verified evidence
is skipped so it cannot stall a runner; known wrong output is a strict xfail. A rule that only the
seed documents support is an *unconfirmed claim*: it never stops, xfails or colours a cell and never
fails a gate; the cell runs and its outcome is evidence for or against the claim.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .match import describe_runner
from .schema import ACTIONS, NO_CONDITIONS, SEVERITIES, Rule

if TYPE_CHECKING:
    from ..machine.fingerprint import Fingerprint

STOPPING_FAILURES = ("crash", "hang", "error-at-start", "oom")
_ORDER = {action: i for i, action in enumerate(ACTIONS)}
_SEVERITY_ORDER = {severity: i for i, severity in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Finding:
    """A rule that matched, with the action it takes on a cell."""

    id: str
    severity: str
    confidence: str
    failure: str
    engine: str | None
    summary: str
    workaround: str | None
    symptom: str | None
    note: str | None
    claims: tuple[str, ...]
    sources: tuple[tuple[str, str], ...]
    action: str
    detail: str | None = None  # what this runner has for the rule's conditions ("needs 2 GPUs, 1 visible")
    need: bool = False  # the rule is a need of the cell (GPUs, memory) that this runner does not meet

    @property
    def unconfirmed(self) -> bool:
        """Only the seed documents say so: listed apart, never counted as a problem."""
        return self.confidence == "documents"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "severity": self.severity, "confidence": self.confidence, "failure": self.failure,
            "engine": self.engine, "summary": self.summary, "workaround": self.workaround,
            "symptom": self.symptom, "note": self.note, "claims": list(self.claims),
            "sources": [{"kind": k, "ref": r} for k, r in self.sources], "action": self.action,
            "unconfirmed": self.unconfirmed, "detail": self.detail,
        }


@dataclass(frozen=True)
class Decision:
    action: str  # "run", "skip", "xfail"
    strict: bool
    reason: str
    findings: tuple[Finding, ...]
    known_bad_run: bool = False  # a skipped known-bad cell run anyway (--gpucompat-run-known-bad)
    rule_id: str | None = None  # the rule that decided it


#: The words for the findings of each severity wherever findings are judged: `gpucompat check`'s headings and verdict
#: and the pytest session's summary say the same thing of the same finding (one owner of the wording).
SEVERITY_HEADINGS: Mapping[str, str] = {
    "broken": "BROKEN: known to crash, hang, refuse to start or give wrong output here",
    "degraded": "DEGRADED: runs, but slower, bigger, or silently on another kernel or precision",
}


def severity_heading(severity: str, count: int) -> str:
    """`BROKEN: known to crash, ... (2)`: the heading over the findings of one severity."""
    return f"{SEVERITY_HEADINGS[severity]} ({count})"


def problems_text(counts: Mapping[str, int]) -> str:
    """`2 broken, 1 degraded`, or `no known problems`: the known problems by severity (evidence only)."""
    parts = [f"{counts[s]} {s}" for s in SEVERITY_HEADINGS if counts.get(s)]
    return ", ".join(parts) if parts else "no known problems"


def action_for(rule: Rule, run_known_bad: bool = False) -> str:
    if rule.severity != "broken" or rule.confidence == "documents":
        return "annotate"
    if rule.failure in STOPPING_FAILURES:
        return "xfail-strict" if run_known_bad else "skip"
    return "xfail-strict"


def finding_for(rule: Rule, run_known_bad: bool = False) -> Finding:
    return Finding(
        id=rule.id, severity=rule.severity, confidence=rule.confidence, failure=rule.failure,
        engine=rule.engine, summary=rule.summary, workaround=rule.workaround, symptom=rule.symptom,
        note=rule.note, claims=rule.claims, sources=tuple((s.kind, s.ref) for s in rule.sources),
        action=action_for(rule, run_known_bad),
        need=bool(rule.when.needs_gpus or rule.when.needs_memory),
    )


def findings_for(rules: Iterable[Rule], run_known_bad: bool = False) -> list[Finding]:
    found = [finding_for(r, run_known_bad) for r in rules]
    return sorted(found, key=lambda f: (f.unconfirmed, _SEVERITY_ORDER[f.severity], _ORDER[f.action], f.id))


def concerns_cell(rule: Rule) -> bool:
    """Whether a rule that matched a cell's machine and engine says something about that cell.

    A rule with no condition at all (general knowledge of an engine or a tool: metric names, CLI usage) and a
    machine-wide rule that is not broken (nvidia-smi advice, a driver's quirk) are about the runner, shown once
    per run by ``gpucompat check`` and the report, not attached to every cell. A cell keeps the rules of its
    engine that have a condition, the rules on its parameters or model, and machine-wide breakage.
    """
    when = rule.when
    if when == NO_CONDITIONS:
        return False
    if rule.engine is not None:
        return True
    return rule.severity == "broken" or bool(when.params or when.model)


def cell_findings(rules: Iterable[Rule], run_known_bad: bool = False) -> list[Finding]:
    """The findings a cell carries: the matched rules that concern it."""
    return findings_for((r for r in rules if concerns_cell(r)), run_known_bad)


def confirmed(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that count as problems: upstream or verified evidence."""
    return [f for f in findings if not f.unconfirmed]


def decide(findings: Sequence[Finding], run_known_bad: bool = False) -> Decision:
    """The strongest action wins; the reason names the rule that decided it (never an unconfirmed claim)."""
    evidence = confirmed(findings)
    if not evidence:
        return Decision("run", False, "", tuple(findings))
    top = min(evidence, key=lambda f: (_ORDER[f.action], f.id))
    if top.need and top.detail:  # not a fault of the stack: this runner is too small for the cell
        reason = f"cannot run here: [{top.id}] {top.detail}"
    else:
        reason = ("known bad here: " if top.action != "annotate" else "") + (
            f"[{top.id}] {top.summary} ({top.confidence})" + (f": {top.detail}" if top.detail else ""))
    if top.action == "skip":
        return Decision("skip", False, reason, tuple(findings), rule_id=top.id)
    if top.action in ("xfail-strict", "xfail"):
        strict = top.action == "xfail-strict"
        return Decision("xfail", strict, reason, tuple(findings),
                        known_bad_run=strict and run_known_bad and top.failure in STOPPING_FAILURES, rule_id=top.id)
    return Decision("run", False, reason, tuple(findings), rule_id=top.id)


def with_details(findings: Sequence[Finding], rules: Iterable[Rule], fp: Fingerprint,
                 params: Mapping[str, Any]) -> list[Finding]:
    """The findings with what this runner has for their rules' conditions; only evidence of a problem (broken or
    degraded, not an unconfirmed claim) is explained, the rest is shown as the rule says it. Advice gets its rule's
    condition instead ("when: no GPU visible"): without it, advice reads as meant for every machine."""
    from .describe import describe_when

    by_id = {r.id: r for r in rules}
    out = []
    for f in findings:
        rule = by_id.get(f.id)
        if rule is not None and not f.unconfirmed and f.severity != "advice":
            f = replace(f, detail=describe_runner(rule, fp, params) or None)
        elif rule is not None and not f.unconfirmed and f.detail is None:
            condition = describe_when(rule)
            f = replace(f, detail=f"when: {condition}" if condition else None)
        out.append(f)
    return out
