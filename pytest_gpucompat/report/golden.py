"""`gpucompat golden REPORT --golden PATH`: a report's precision cells judged against golden files after the run.

Golden outputs are often recorded after the runs a team wants to judge (a new reference runner, a second recording
on other hardware), and a runner can check against only one recording per run. Each precision cell keeps what the
model said (outputs.py), so judging it again needs no GPU: the same golden matching (by model content digest and
prompt ids; another model or prompt set is refused with the reason), the same verdict (checks.golden.judge) and
the same thresholds as a run with ``--gpucompat-golden``; a recording made on another attention backend or KV-cache
dtype than the cell's (its ``engine_info``) is named with both. Pure but for reading the files.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..checks import outputs
from ..checks.golden import CELL_PREFIX, PREFIX, judge, threshold_class
from ..checks.golden_files import GoldenFile, match_kept
from ..workload.matrix import MatrixCell
from .model import CellRecord, Report

STATUSES = ("passed", "failed", "refused", "missing", "not compared")


@dataclass(frozen=True)
class GoldenCheck:
    """One cell's kept outputs against the golden files: the status, one line, the figures (``golden_*``)."""

    cell: CellRecord
    status: str
    message: str
    file: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    backends: Mapping[str, str] = field(default_factory=dict)
    """checks.golden.GoldenVerdict.backends: the attention backends and KV-cache dtypes that differ."""

    @property
    def bad(self) -> bool:
        """A verdict that did not pass, or a file refused for this cell (the run would have failed it too)."""
        return self.status in ("failed", "refused")


def check_cell(cell: CellRecord, files: Sequence[GoldenFile], where: str, source: str = "report",
               table: Mapping[str, Mapping[str, Any]] | None = None) -> GoldenCheck | None:
    """The cell judged against ``files``; None for a cell that kept no outputs. A malformed ``outputs`` entry
    raises errors.InputError naming the field."""
    kept = outputs.from_cell(cell.extra, f"{source}: cell {cell.nodeid}")
    if kept is None:
        return None
    found = match_kept(files, kept.model, kept.prompts, kept.max_tokens, kept.top_n, where)
    golden, reason = found.golden, found.reason
    if golden is None:
        return GoldenCheck(cell, found.status, reason)
    asked = len(golden.prompts) or len(golden.reference.generations if golden.reference else kept.generations)
    if len(kept.generations) != asked:  # the same prompt digest, another count: a report edited by hand
        return GoldenCheck(cell, "refused", f"the cell kept {len(kept.generations)} generations, {reason} holds "
                                            f"{asked} prompts", reason)
    ran = cell.extra.get("engine_info")
    ran = ran if isinstance(ran, Mapping) else {}

    def said(key: str) -> str | None:
        value = ran.get(key)
        return str(value) if isinstance(value, str) and value else None

    try:
        verdict = judge(golden, MatrixCell(cell.engine or "", cell.params, cell.axes).id, kept.generations,
                        threshold_class(cell.params, said("dtype")), table, engine=said("engine") or cell.engine,
                        attention_backend=said("attention_backend"), kv_cache_dtype=said("kv_cache_dtype"))
    except ValueError as exc:  # outputs that cannot be compared (lengths), or no thresholds for the cell's dtype
        return GoldenCheck(cell, "refused", f"not comparable with {reason}: {exc}", reason)
    status = ("passed" if verdict.passed else "failed") if verdict.compared else "not compared"
    return GoldenCheck(cell, status, verdict.message, reason, verdict.metrics, verdict.backends)


def check_report(report: Report, files: Sequence[GoldenFile], where: str, source: str = "report",
                 table: Mapping[str, Mapping[str, Any]] | None = None) -> tuple[GoldenCheck, ...]:
    """Every cell of the report that kept its outputs, in report order."""
    found = (check_cell(cell, files, where, source, table) for cell in report.cells)
    return tuple(check for check in found if check is not None)


def with_checks(report: Report, checks: Sequence[GoldenCheck], where: str) -> Report:
    """The report with each checked cell's ``golden`` entry and ``golden_*`` figures replaced by this check's (the
    entry says it was judged after the run, against what)."""
    by_cell = {id(check.cell): check for check in checks}
    cells = []
    for cell in report.cells:
        check = by_cell.get(id(cell))
        if check is None:
            cells.append(cell)
            continue
        metrics = {k: v for k, v in cell.metrics.items() if not k.startswith((PREFIX, CELL_PREFIX))}
        metrics.update(check.metrics)
        entry = {"status": check.status, "file": check.file, "message": check.message, "checked": "after the run",
                 "golden": where, **check.backends}
        cells.append(replace(cell, metrics=metrics, extra={**cell.extra, "golden": entry}))
    return replace(report, cells=tuple(cells))


def format_checks(checks: Sequence[GoldenCheck], source: str, where: str) -> str:
    """One line per cell, then the counts."""
    lines = [f"{source} against {where}:"]
    for check in checks:
        runner = f" [{check.cell.runner}]" if check.cell.runner else ""
        lines.append(f"  {check.status:<12} {check.cell.nodeid}{runner}")
        lines.append(f"               {check.message}")
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no cell kept its outputs"
    lines.append(f"{len(checks)} cells: {summary}")
    return "\n".join(lines) + "\n"


def checks_json(checks: Sequence[GoldenCheck]) -> list[dict[str, Any]]:
    return [{"nodeid": c.cell.nodeid, "runner": c.cell.runner, "status": c.status, "file": c.file,
             "message": c.message, "metrics": dict(c.metrics), **c.backends} for c in checks]


__all__ = ["GoldenCheck", "check_cell", "check_report", "checks_json", "format_checks", "with_checks"]
