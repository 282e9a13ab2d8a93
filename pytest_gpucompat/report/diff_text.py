"""`gpucompat diff` as text: the verdict line, the cell counts, the two runs and what differed between them, the
regressions, the compare table, then the other lists of what moved.

Every line fits the terminal (pytest_gpucompat.common.textfit): a cell is named by its test and the parameters that
tell it apart from its siblings (report/cellnames.py), words that wrap rather than a node id cut in the middle.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..common.textfit import fit, terminal_width
from .compare import format_table

if TYPE_CHECKING:
    from .diff import Change, DiffResult


def _section(title: str, lines: Sequence[str], limit: int) -> list[str]:
    if not lines:
        return []
    out = [f"{title} ({len(lines)}):"]
    out.extend(f"  - {line}" for line in lines[:limit])
    if len(lines) > limit:
        out.append(f"  ... and {len(lines) - limit} more")
    return out


def change_where(change: Change, result: DiffResult) -> str:
    """The cell of a change by its name; its runner added where the key does not say it."""
    where = result.name(change.key)
    one_runner = result.runs is not None and len(result.runs[1].runners) == 1
    return where if one_runner or change.key.startswith(f"{change.runner}: ") else f"{where} [{change.runner}]"


def _change_line(change: Change, result: DiffResult) -> str:
    where = change_where(change, result)
    if change.kind == "metric":
        return f"{where}: {change.metric} {change.before} → {change.after} ({change.detail})"
    tail = f": {change.detail}" if change.detail else ""
    return f"{where}: {change.before} → {change.after}{tail}"


def _cell_counts(result: DiffResult) -> str:
    """The summary line: how many cells were compared, changed (an outcome or a figure moved), regressed, missing
    and new."""
    new = set(result.new_cells)  # a new cell is counted as new (and regressed where it fails), not as changed
    changed = {row.key for row in result.changed}
    changed |= {c.key for c in (*result.regressions, *result.improvements, *result.outcome_changes)
                if c.kind == "outcome" and c.key not in new}
    regressed = {c.key for c in result.regressions} | {n.key for n in result.new_broken}
    if not result.allow_missing:
        regressed |= {c.key for c in result.lost}
    if result.fail_on_changed:
        regressed |= {row.key for row in result.changed}
    return (f"cells: {result.compared} compared, {len(changed)} changed, {len(regressed)} regressed, "
            f"{len(result.missing_cells)} missing, {len(result.new_cells)} new (matched {result.matching})")


def verdict_line(result: DiffResult) -> str:
    """The headline: REGRESSED and what, or no regressions; then the figures worse, better and changed."""
    if result.regressed:
        parts = [f"{len(result.regressions)} regression(s)", f"{len(result.new_broken)} new broken finding(s)"]
        if result.lost and not result.allow_missing:
            parts.append(f"{len(result.lost)} lost (passed in the baseline, not run or not measured now)")
        if result.incomplete:
            parts.append(result.incomplete)
        if result.fail_on_changed and result.changed:
            parts.append(f"{len(result.changed)} changed figure(s) (--fail-on changed)")
        verdict = "REGRESSED: " + ", ".join(parts)
    elif result.clean:
        verdict = "clean: no differences"
    else:
        verdict = "no regressions"
    if result.within_noise:  # a gate that passed on noise should say so on its first line
        verdict += f"; {len(result.within_noise)} change(s) beyond a threshold but within the runs' noise"
    moved = [row.verdict for row in result.changed]
    counts = [f"{moved.count('regressed') + moved.count('worse')} worse", f"{moved.count('better')} better"]
    if moved.count("changed"):
        counts.append(f"{moved.count('changed')} changed")
    if moved:
        verdict += f"; figures beyond the runs' noise: {', '.join(counts)}"
    if result.outcome_changes:
        verdict += f"; {len(result.outcome_changes)} outcome(s) changed"
    return f"gpucompat diff: {verdict}"


def header_lines(result: DiffResult) -> list[str]:
    """Both reports (file, runners, date) and every difference between the runs (report/envdiff.py)."""
    lines = []
    if result.runs is not None:
        lines += [f"baseline: {result.runs[0].describe()}", f"current:  {result.runs[1].describe()}"]
    if result.environment:
        lines += _section("What differs between the runs", [c.line for c in result.environment], 100)
    elif result.runs is not None:
        lines.append("What differs between the runs: nothing in the runners' fingerprints or the harness's settings")
    return lines


def format_diff(result: DiffResult, limit: int = 50, width: int | None = None) -> str:
    """Human-readable diff for a terminal or a CI log, no line wider than `width` (default: the terminal's); the
    first line is the verdict, the second the cell counts, then the runs, the regressions and the compare table."""
    width = width or terminal_width()
    lines = [verdict_line(result), _cell_counts(result), *header_lines(result)]
    lines += _section("Regressions", [_change_line(c, result) for c in result.regressions], limit)
    lost_title = "Lost coverage" + (" (allowed: --allow-missing)" if result.allow_missing else
                                    " (a regression; --allow-missing accepts it)")
    lines += _section(lost_title, [_change_line(c, result) for c in result.lost], limit)
    lines += _section(
        "New broken findings",
        [
            f"{result.name(n.key)}: {n.finding_id}" + (f" ({n.confidence})" if n.confidence else "")
            + f": {n.summary}"
            for n in result.new_broken
        ],
        limit,
    )
    lines += format_table(result.rows, width, result.names)
    lines += _section("Changed outcomes", [_change_line(c, result) for c in result.outcome_changes], limit)
    lines += _section("Improvements", [_change_line(c, result) for c in result.improvements], limit)
    lines += _section(
        "Within noise (beyond a threshold, not beyond the runs' spread: not a regression)",
        [_change_line(c, result) for c in result.within_noise],
        limit,
    )
    lines += _section(
        "Stale rules (a known-bad cell passed)",
        [
            f"{s.rule_id}: {s.suggestion}; XPASS on {len(s.cells)} cell(s), e.g. {s.cells[0]}"
            for s in result.stale_rules
        ],
        limit,
    )
    lines += _section("New cells", [result.name(k) for k in result.new_cells], limit)
    lines += _section("Missing cells", [result.name(k) for k in result.missing_cells], limit)
    return fit("\n".join(lines) + "\n", width)
