"""Merge the reports of several runners into one matrix; pure functions, deterministic in the input order.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .model import CellRecord, Report

# pytest exit statuses, most serious first: the merged run is as bad as its worst input.
_EXIT_SERIOUSNESS = (3, 2, 4, 1, 5, 0)


def _worst_exitstatus(statuses: Sequence[int | None]) -> int | None:
    known = [s for s in statuses if s is not None]
    if not known:
        return None

    def rank(status: int) -> tuple[int, int]:
        if status in _EXIT_SERIOUSNESS:
            return (_EXIT_SERIOUSNESS.index(status), 0)
        return (-1, -status)  # an unknown non-standard status is more serious than any known one

    return min(known, key=rank)


def _unique_name(name: str, taken: set[str]) -> str:
    """`runner-a`, then `runner-a#2`, `runner-a#3`, ...: the first report keeps the plain name."""
    if name not in taken:
        return name
    n = 2
    while f"{name}#{n}" in taken:
        n += 1
    return f"{name}#{n}"


def merge_reports(reports: Sequence[Report]) -> Report:
    """One report with every runner of the inputs; duplicate runner names get `#2`, `#3`, ... in input order.

    Cells are concatenated (a nodeid appears once per runner that reported it); `interrupted` is true if any
    input was interrupted, `exitstatus` is the most serious one, `created` the newest, so merging is pure.
    """
    if not reports:
        raise ValueError("nothing to merge: no reports given")
    runners: dict[str, dict[str, Any]] = {}
    cells: list[CellRecord] = []
    taken: set[str] = set()
    for report in reports:
        renamed: dict[str, str] = {}
        for name, fingerprint in report.runners.items():
            new = _unique_name(name, taken)
            taken.add(new)
            renamed[name] = new
            runners[new] = dict(fingerprint)
        for cell in report.cells:
            new = renamed[cell.runner]
            cells.append(cell if new == cell.runner else replace(cell, runner=new))
    return Report(
        runners=runners,
        cells=tuple(cells),
        interrupted=any(r.interrupted for r in reports),
        exitstatus=_worst_exitstatus([r.exitstatus for r in reports]),
        created=max(r.created for r in reports),
    )


def cell_matrix(report: Report) -> dict[str, dict[str, CellRecord]]:
    """nodeid -> runner -> cell, nodeids in first-seen order: what a renderer needs for one matrix row.

    Should a runner report a nodeid twice (it should not), the cell that ran wins over one that did not,
    and otherwise the later one.
    """
    matrix: dict[str, dict[str, CellRecord]] = {}
    for cell in report.cells:
        row = matrix.setdefault(cell.nodeid, {})
        old = row.get(cell.runner)
        if old is None or cell.ran or not old.ran:
            row[cell.runner] = cell
    return matrix


def outcomes_by_nodeid(report: Report) -> dict[str, dict[str, str]]:
    """nodeid -> runner -> outcome, for every runner of the report (`missing` where a runner has no such cell)."""
    return {
        nodeid: {name: (row[name].outcome if name in row else "missing") for name in report.runners}
        for nodeid, row in cell_matrix(report).items()
    }


def uncovered_cells(report: Report) -> list[str]:
    """Nodeids no runner ran: every runner that has the cell says not-covered (the rest do not have it)."""
    return [
        nodeid
        for nodeid, row in cell_matrix(report).items()
        if all(cell.outcome == "not-covered" for cell in row.values())
    ]


def matrix_rows(report: Report) -> list[tuple[str, dict[str, CellRecord]]]:
    """Matrix rows (nodeid, runner -> cell) grouped by test function, each group in first-seen order."""
    matrix = cell_matrix(report)
    first_test: dict[str, int] = {}
    for row in matrix.values():
        test = next(iter(row.values())).test
        first_test.setdefault(test, len(first_test))
    order = {nodeid: i for i, nodeid in enumerate(matrix)}
    return sorted(
        matrix.items(),
        key=lambda item: (first_test[next(iter(item[1].values())).test], order[item[0]]),
    )
