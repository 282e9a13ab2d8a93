"""What matching rules do to a cell: pure functions from rules to findings to one decision.

The policy (see docs/knowledge-base.md): a known crash or hang with upstream or verified evidence
is skipped so it cannot stall a runner; known wrong output is a strict xfail; a rule that only the
seed documents support never stops a cell from running, so the run produces evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .rules import Rule

STOPPING_FAILURES = ("crash", "hang", "error-at-start", "oom")
_ORDER = {"skip": 0, "xfail-strict": 1, "xfail": 2, "annotate": 3}
_SEVERITY_ORDER = {"broken": 0, "degraded": 1, "advice": 2}


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "severity": self.severity, "confidence": self.confidence, "failure": self.failure,
            "engine": self.engine, "summary": self.summary, "workaround": self.workaround,
            "symptom": self.symptom, "note": self.note, "claims": list(self.claims),
            "sources": [{"kind": k, "ref": r} for k, r in self.sources], "action": self.action,
        }


@dataclass(frozen=True)
class Decision:
    action: str  # "run", "skip", "xfail"
    strict: bool
    reason: str
    findings: tuple[Finding, ...]
    known_bad_run: bool = False  # a skipped known-bad cell run anyway (--gpucompat-run-known-bad)


def action_for(rule: Rule, run_known_bad: bool = False) -> str:
    if rule.severity != "broken":
        return "annotate"
    if rule.confidence == "documents":
        return "xfail"
    if rule.failure in STOPPING_FAILURES:
        return "xfail-strict" if run_known_bad else "skip"
    return "xfail-strict"


def finding_for(rule: Rule, run_known_bad: bool = False) -> Finding:
    return Finding(
        id=rule.id, severity=rule.severity, confidence=rule.confidence, failure=rule.failure,
        engine=rule.engine, summary=rule.summary, workaround=rule.workaround, symptom=rule.symptom,
        note=rule.note, claims=rule.claims, sources=tuple((s.kind, s.ref) for s in rule.sources),
        action=action_for(rule, run_known_bad),
    )


def findings_for(rules: Iterable[Rule], run_known_bad: bool = False) -> list[Finding]:
    found = [finding_for(r, run_known_bad) for r in rules]
    return sorted(found, key=lambda f: (_SEVERITY_ORDER[f.severity], _ORDER[f.action], f.id))


def decide(findings: Sequence[Finding], run_known_bad: bool = False) -> Decision:
    """The strongest action wins; the reason names the rule that decided it."""
    if not findings:
        return Decision("run", False, "", ())
    top = min(findings, key=lambda f: (_ORDER[f.action], f.id))
    reason = f"[{top.id}] {top.summary} ({top.confidence})"
    if top.action == "skip":
        return Decision("skip", False, f"known bad here: {reason}", tuple(findings))
    if top.action in ("xfail-strict", "xfail"):
        strict = top.action == "xfail-strict"
        return Decision("xfail", strict, f"known bad here: {reason}", tuple(findings),
                        known_bad_run=strict and run_known_bad and top.failure in STOPPING_FAILURES)
    return Decision("run", False, reason, tuple(findings))
