"""The one evaluation pipeline: rules -> findings -> decision, for a test cell or for a whole machine.

Pure functions (no pytest): the plugin (``state.RunState.evaluate``, which then asks the ``pytest_gpucompat_decide``
hook), the fleet preview and ``gpucompat check`` all call these.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ..machine.fingerprint import Fingerprint
from .index import index_for, matching_rules
from .match import axis_mismatch
from .schema import KnowledgeBase
from .settings import setting_rules
from .verdicts import Decision, Finding, cell_findings, decide, findings_for, with_details

_MAX_VERDICTS = 16384  # distinct sets of matched rules remembered per knowledge base


class CellVerdict(NamedTuple):
    """What the knowledge base says about one cell on one runner: ``not_covered`` (the runner is not one of the
    cell's fleet axes: no findings, no decision), or the findings that concern the cell and the default decision.
    (A named tuple: one is made per cell, and it is cheaper to make than a frozen dataclass.)"""

    findings: tuple[Finding, ...] = ()
    decision: Decision | None = None
    not_covered: str | None = None


def evaluate_cell(
    kb: KnowledgeBase,
    fingerprint: Fingerprint,
    engine: str | None,
    params: Mapping[str, Any],
    *,
    axes: Mapping[str, str] | None = None,
    run_known_bad: bool = False,
    measured: Mapping[str, Any] | None = None,
) -> CellVerdict:
    """Axes, matching rules (and the cell's settings that its engine's release lacks or refuses: kb.settings), the
    findings that concern the cell, the default decision; a stopped cell's findings say what this runner has ("needs
    2 GPUs, 1 visible"). ``measured`` holds facts of the cell's model that rules may need (``model_weights_mib``).

    Many cells of a matrix match the same rules, and findings and decision are pure functions of the rules: they
    are computed once per distinct set of matched rules (per knowledge base and ``run_known_bad``).
    """
    own = params
    if measured:
        params = {**params, **measured}
    if axes:
        not_covered = axis_mismatch(axes, fingerprint)
        if not_covered:
            return CellVerdict(not_covered=not_covered)
    rules = matching_rules(kb, fingerprint, engine, params)
    if engine is not None and engine in fingerprint.packages:  # the cell's settings against the release's history
        refused = setting_rules(engine, fingerprint.packages[engine], own)
        if refused:
            rules = [*rules, *refused]
    cache = index_for(kb).verdicts
    key = (run_known_bad, *map(id, rules))
    verdict = cache.get(key)
    if verdict is None:
        findings = tuple(cell_findings(rules, run_known_bad))
        verdict = (findings, decide(findings, run_known_bad))
        if len(cache) < _MAX_VERDICTS:
            cache[key] = verdict
    findings, decision = verdict
    if decision.action != "run":  # a stopped cell says what this runner has ("needs 2 GPUs, 1 visible")
        findings = tuple(with_details(findings, rules, fingerprint, {**fingerprint.params, **params}))
        decision = decide(findings, run_known_bad)
    return CellVerdict(findings, decision)


def evaluate_machine(kb: KnowledgeBase, fingerprint: Fingerprint) -> list[Finding]:
    """``gpucompat check``: every rule that matches the machine (its installed engines, its ``params``), not only
    those that concern a cell, each explained with what the runner has."""
    rules = matching_rules(kb, fingerprint)
    return with_details(findings_for(rules), rules, fingerprint, fingerprint.params)
