"""`gpucompat explain REPORT`: which known issue each failed or errored cell is, and a proposed rule for the rest.

The cells are judged with the knowledge base as it is now (``kb.signatures.explaining_rules``), not with the
``explained_by`` recorded at run time, so an old report is explained by rules written since. Each cell is judged
against its own runner's fingerprint, so merged fleet reports work as single runs do. Failures no rule explains are
grouped by engine and signature, one proposed rule per group (``kb.propose``). A cell that only says the run was
stopped before it ended (a timeout, a signal) is listed apart: that is a fact about the run, and no rule is proposed.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..common.textfit import fit, terminal_width
from ..kb.failure_modes import FailureMode
from ..kb.propose import error_line, group_failures, proposals_yaml, propose_rule
from ..kb.schema import KnowledgeBase, Rule
from ..kb.signatures import Failure, explained_by_entry, explaining_rules
from ..machine.fingerprint import Fingerprint, from_report
from .model import CellRecord, Report
from .text import one_line

FAILED = ("failed", "error")


@dataclass(frozen=True)
class KnownIssue:
    """Cells whose failure one rule explains (the first rule of each cell's ``explained_by``)."""

    rule: Rule
    cells: tuple[tuple[CellRecord, tuple[str, ...]], ...]  # each cell with every rule that explains it


@dataclass(frozen=True)
class Unexplained:
    """Failures of one kind that no rule explains, and the rule that would."""

    error: str
    cells: tuple[CellRecord, ...]
    proposal: Mapping[str, Any] = field(hash=False)


@dataclass(frozen=True)
class Explanation:
    source: str
    failed: int
    known: tuple[KnownIssue, ...]
    unexplained: tuple[Unexplained, ...]
    stopped: tuple[CellRecord, ...] = ()
    """Errored cells that did not finish because the run was stopped: neither explained nor unexplained."""

    @property
    def explained(self) -> int:
        return self.failed - len(self.stopped) - sum(len(u.cells) for u in self.unexplained)


def runner_fingerprints(report: Report, source: str) -> dict[str, Fingerprint]:
    """Each runner's fingerprint, validated like a fingerprint file (``InputError`` naming ``runners.NAME``)."""
    return {name: from_report(fp, source, name) for name, fp in report.runners.items()}


def failure_of(cell: CellRecord, fingerprint: Fingerprint) -> Failure:
    return Failure(fingerprint=fingerprint, engine=cell.engine, params=cell.params, reason=cell.reason,
                   log_tail=cell.log_tail, phase=cell.when, runner=cell.runner, nodeid=cell.nodeid)


def explain_report(report: Report, kb: KnowledgeBase, source: str,
                   modes: Sequence[FailureMode] = ()) -> Explanation:
    """Group the failed and errored cells by the rule that explains them; propose a rule for each group of the
    others (ids new to ``kb``, ``source`` as their evidence)."""
    fingerprints = runner_fingerprints(report, source)
    known: dict[str, tuple[Rule, list[tuple[CellRecord, tuple[str, ...]]]]] = {}
    rest: list[tuple[CellRecord, Failure]] = []
    cells = [c for c in report.cells if c.outcome in FAILED]
    stopped = tuple(c for c in cells if c.stopped_by_run(report.interrupted))
    for cell in cells:
        if cell.stopped_by_run(report.interrupted):
            continue
        failure = failure_of(cell, fingerprints[cell.runner])
        rules = explaining_rules(kb.rules, failure)
        if rules:
            known.setdefault(rules[0].id, (rules[0], []))[1].append((cell, tuple(r.id for r in rules)))
        else:
            rest.append((cell, failure))
    taken = {r.id for r in kb.rules}
    by_failure = {id(f): c for c, f in rest}
    unexplained = []
    for group in group_failures(f for _, f in rest):
        unexplained.append(Unexplained(error=error_line(group[0]), cells=tuple(by_failure[id(f)] for f in group),
                                       proposal=propose_rule(group, source, taken, modes)))
    return Explanation(source=source, failed=len(cells),
                       known=tuple(KnownIssue(rule, tuple(found)) for rule, found in known.values()),
                       unexplained=tuple(unexplained), stopped=stopped)


def with_explanations(report: Report, result: Explanation, kb: KnowledgeBase) -> Report:
    """``report`` with each failed cell's ``explained_by`` as ``result`` found it: the rules of ``kb`` that explain
    it, best first, or none (a rule that no longer matches is dropped); every other cell as it was."""
    by_id = kb.by_id()
    found = {id(cell): ids for issue in result.known for cell, ids in issue.cells}
    cells = tuple(
        replace(cell, explained_by=tuple(explained_by_entry(by_id[i]) for i in found.get(id(cell), ()) if i in by_id))
        if cell.outcome in FAILED else cell
        for cell in report.cells
    )
    return replace(report, cells=cells)


def _cell_line(cell: CellRecord) -> str:
    return f"  - {cell.runner}: {cell.nodeid}: {cell.outcome}: {one_line(cell.reason or 'no reason recorded', 240)}"


def format_explanation(result: Explanation, width: int | None = None) -> str:
    """The readable answer: one block per known issue with its workaround, one per kind of unexplained failure,
    then the proposed rules as one rule file. No line of prose is wider than `width` (default: the terminal's);
    the rule file is YAML, folded by its dumper where it can be."""
    width = width or terminal_width()
    if not result.failed:
        return f"{result.source}: no failed or errored cell\n"
    unexplained = sum(len(u.cells) for u in result.unexplained)
    lines = [f"{result.source}: {result.failed} failed or errored cell{'s' if result.failed != 1 else ''}: "
             f"{result.explained} explained by known issues, {unexplained} not explained"
             + (f", {len(result.stopped)} stopped with the run" if result.stopped else "")]
    for issue in result.known:
        rule = issue.rule
        lines += ["", f"matches known issue {rule.id} ({rule.severity}, {rule.confidence}): {rule.summary}"]
        if rule.workaround:
            lines.append(f"  workaround: {one_line(rule.workaround)}")
        for cell, ids in issue.cells:
            lines.append(_cell_line(cell) + (f" (also matches {', '.join(ids[1:])})" if len(ids) > 1 else ""))
    for group in result.unexplained:
        n = len(group.cells)
        lines += ["", f"not explained: {group.error or 'no error text recorded'} ({n} cell{'s' if n != 1 else ''}; "
                      f"proposed rule {group.proposal['id']})"]
        lines += [_cell_line(cell) for cell in group.cells]
    if result.stopped:
        n = len(result.stopped)
        lines += ["", f"not judged: the run was stopped before {'these cells' if n != 1 else 'this cell'} ended "
                      f"(a timeout or a signal: a fact about the run, not the stack; run {'them' if n != 1 else 'it'} "
                      "again)"]
        lines += [_cell_line(cell) for cell in result.stopped]
    if result.unexplained:
        lines += ["", "proposed rules (a rule file: check the cause, narrow when:, add a workaround, then use it with "
                      "--kb FILE or put it under matrices/rules/):"]
    text = fit("\n".join(lines) + "\n", width, hanging="    ")
    if result.unexplained:
        rules = proposals_yaml([u.proposal for u in result.unexplained], width=max(width - 24, 40))
        text += "\n" + rules.rstrip() + "\n"
    return text


def _cell_json(cell: CellRecord, ids: Sequence[str] = ()) -> dict[str, Any]:
    return {"runner": cell.runner, "nodeid": cell.nodeid, "outcome": cell.outcome, "reason": cell.reason,
            **({"explained_by": list(ids)} if ids else {})}


def explanation_json(result: Explanation) -> dict[str, Any]:
    """``gpucompat explain --json``."""
    return {
        "report": result.source,
        "failed": result.failed,
        "explained": result.explained,
        "unexplained": sum(len(u.cells) for u in result.unexplained),
        "stopped": [_cell_json(c) for c in result.stopped],
        "known_issues": [{"rule": explained_by_entry(issue.rule), "cells": [_cell_json(c, ids) for c, ids in
                                                                             issue.cells]}
                         for issue in result.known],
        "unexplained_failures": [{"error": group.error, "cells": [_cell_json(c) for c in group.cells],
                                  "proposed_rule": dict(group.proposal)} for group in result.unexplained],
    }
