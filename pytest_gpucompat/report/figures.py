"""What a matrix cell says at a glance: its state (an outcome, skips told apart by why) and its key figures.

A skipped cell's state is told apart by the start of its reason (the plugin writes them): `known bad here: [rule]
...` (a rule says it crashes or hangs here), `cannot run here: [rule] DETAIL` (this runner is too small: the detail
says whether it has no GPU, too few GPUs or too little memory), `not covered here ...` (another runner's cell), `no
GPU...` (a test that needs a GPU); any other skip is *unavailable* (engine not installed, unsupported). Matrix rows
sort by their most serious cell (`row_rank`), in every renderer.
A key figure (metrics.KEY_FIGURES) is written as its metric's declaration says (`Metric.display`) and coloured by its
margin to the limit its kind declares (the dtype's threshold from matrices/thresholds.yaml, the memory suite's leak
tolerance, a recorded throughput floor); a figure without one (throughput) is shown plain. Pure: no page markup.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..common.checkkinds import Display, limit_source, load
from ..common.metrics import KEY_FIGURES, METRICS, KeyFigure
from .model import CellRecord

#: state -> (word in a cell, legend text). Outcomes first, then the four kinds of skip.
STATES: dict[str, tuple[str, str]] = {
    "passed": ("passed", "passed"),
    "failed": ("failed", "failed"),
    "error": ("error", "error"),
    "xfailed": ("xfail", "xfail (known bad, ran)"),
    "xpassed": ("XPASS", "XPASS (a rule said it fails)"),
    "known-bad": ("known bad", "skipped: known bad (rule)"),
    "unavailable": ("unavailable", "skipped: unavailable (not installed, unsupported)"),
    "no-gpu": ("no GPU", "cannot run here: no GPU"),
    "needs-gpus": ("needs more GPUs", "cannot run here: needs more GPUs than visible"),
    "too-little-memory": ("too little memory", "cannot run here: too little GPU memory"),
    "too-big": ("cannot run", "cannot run here (another limit of this runner)"),
    "not-covered": ("not covered", "not covered here (another runner's cell)"),
}
#: The states of a skip a rule decided: the cell names the rule (`[rule-id]` in its reason).
RULE_SKIPS: frozenset[str] = frozenset({"known-bad", "no-gpu", "needs-gpus", "too-little-memory", "too-big"})
_RULE = re.compile(r"\[([^\]\s]+)\]")
# the knowledge base's need details (kb/match.py describe_runner): "needs 2 GPUs (tensor_parallel_size=2), 1 visible",
# "needs 102,400 MiB of weights per GPU (split by tensor_parallel_size=1), the smallest GPU has 81,559 MiB"
_NEEDS_GPUS = re.compile(r"needs (\d+) GPUs?\b[^;]*?, (\d+) visible")
_NO_GPU = re.compile(r"\bno GPU\b", re.I)


def _cannot_run_kind(reason: str) -> str:
    gpus = _NEEDS_GPUS.search(reason)
    if gpus and int(gpus.group(2)) < int(gpus.group(1)):
        return "no-gpu" if int(gpus.group(2)) == 0 else "needs-gpus"
    if "MiB of weights" in reason or "GPU memory" in reason:
        return "too-little-memory"
    if _NO_GPU.search(reason):
        return "no-gpu"
    return "needs-gpus" if gpus else "too-big"


def cell_state(cell: CellRecord) -> str:
    """The cell's state: its outcome, or for a skipped cell the kind of skip."""
    if cell.outcome == "not-covered":
        return "not-covered"
    if cell.outcome != "skipped":
        return cell.outcome
    reason = (cell.reason or "").lstrip()
    if reason.startswith("known bad here"):
        return "known-bad"
    if reason.startswith("cannot run here"):
        return _cannot_run_kind(reason)
    if reason.startswith("not covered here"):
        return "not-covered"
    if reason.lower().startswith("no gpu"):
        return "no-gpu"
    return "unavailable"


def cell_word(cell: CellRecord, state: str | None = None) -> str:
    """The word a matrix cell shows: its state's, with the count where a cell needs more GPUs (`needs 2 GPUs`)."""
    state = state or cell_state(cell)
    if state == "needs-gpus":
        gpus = _NEEDS_GPUS.search(cell.reason or "")
        if gpus:
            return f"needs {gpus.group(1)} GPUs"
    return STATES[state][0]


# Matrix rows, regressions first: a row sorts by its most serious cell, then in test order.
_ROW_RANK = {"failed": 0, "error": 0, "xpassed": 1, "known-bad": 2, "xfailed": 2, "passed": 3}
ROW_ORDER = ("Rows with a failed or errored cell first, then XPASS, then known bad (skipped or xfailed), then "
             "passed; the rest after.")


def row_rank(row: Mapping[str, CellRecord]) -> int:
    """Where a matrix row (runner -> cell) sorts: by its most serious cell (ROW_ORDER)."""
    return min((_ROW_RANK.get(cell_state(cell), 4) for cell in row.values()), default=4)


def rows_failures_first(rows: Iterable[tuple[str, Mapping[str, CellRecord]]]) -> list[Any]:
    """Matrix rows (nodeid, runner -> cell), sorted by `row_rank`: stable, so test order within a rank."""
    return sorted(rows, key=lambda item: row_rank(item[1]))


def rule_of(cell: CellRecord) -> str | None:
    """The rule id a known-bad or too-big skip names (`[rule-id]` in its reason)."""
    found = _RULE.search(cell.reason or "")
    return found.group(1) if found else None


# --- key figures ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """One key figure of one cell: its value, its limit (None: plain) and how much of the limit it uses."""

    key: KeyFigure
    value: float
    limit: float | None = None
    limit_from: str = ""  # "bfloat16", "leak tolerance (nvml_process_mib)"
    used: float | None = None  # share of the limit used: <= 1 within it

    @property
    def margin(self) -> str:
        """`plain`, `good` (at most half the limit), `near` (within it) or `over`."""
        if self.used is None:
            return "plain"
        return "good" if self.used <= 0.5 else "near" if self.used <= 1.0 else "over"

    @property
    def text(self) -> str:
        return format_value(self.key.metric, self.value)

    @property
    def title(self) -> str:
        unit = METRICS[self.key.metric].unit if self.key.metric in METRICS else ""
        text = f"{self.key.label}: {self.value:.6g} {unit}".rstrip()
        if self.limit is not None and self.used is not None:
            bound = "at most" if _lower_is_better(self.key) else "at least"
            text += f" · limit {bound} {self.limit:g} ({self.limit_from}) · {self.used * 100:.0f} % of the allowance"
        return text


_FRACTIONS = ("fraction", "cosine", "0/1")
"""Units of a higher-is-better figure whose allowance is measured from 1."""


def _lower_is_better(key: KeyFigure) -> bool:
    metric = METRICS.get(key.metric)
    return metric is None or metric.better != "higher"


def format_value(metric: str, value: float) -> str:
    """Short text for a matrix cell, as the metric's kind declares it (`Metric.display`, common.checkkinds):
    `Δlp 0.121`, `agree 98 %`, `cos 0.99998`, `812 tok/s`, `TTFT 12 ms`, `+0.03 MiB/cycle`; 4 significant digits
    for a figure no kind declares."""
    declared = METRICS.get(metric)
    return (declared.display if declared is not None else Display()).text(value)


def threshold_dtype(cell: CellRecord) -> str | None:
    """The thresholds.yaml dtype a precision cell was judged with (as suites/test_precision.py picks it)."""
    kv = cell.params.get("kv_cache_dtype")
    if kv not in (None, "auto"):
        return "fp8"
    dtype = cell.params.get("dtype")
    return None if dtype in (None, "auto") else str(dtype)


@lru_cache(maxsize=64)
def _dtype_thresholds(dtype: str) -> Mapping[str, Any] | None:
    from ..checks.compare import thresholds_for  # the loaded table; the report layer itself needs no engines

    try:
        return thresholds_for(dtype)
    except ValueError:
        return None


def _leak_tolerance(cell: CellRecord) -> tuple[float, str] | None:
    from ..checks.leaks import DEFAULT_THRESHOLD_MIB_PER_CYCLE

    recorded = cell.metrics.get("leak_limit_mib_per_cycle")  # the limit of the signal the figure is from
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and recorded > 0:
        return float(recorded), "leak tolerance of the signal nearest its limit"
    on_gpu = cell.metrics.get("nvml_process_mib_after_last_cycle") is not None or any(
        v is not None for v in cell.series.get("nvml_process_mib", ())
    )
    source = "nvml_process_mib" if on_gpu else "host_rss_mib"  # what earlier reports judged the leak on
    tolerance = DEFAULT_THRESHOLD_MIB_PER_CYCLE.get(source)
    return None if tolerance is None else (float(tolerance), f"leak tolerance of {source}")


def threshold_limit(key: str, cell: CellRecord) -> tuple[float, str] | None:
    """`thresholds:KEY`: KEY of the thresholds of the dtype the cell was judged with."""
    dtype = threshold_dtype(cell)
    table = _dtype_thresholds(dtype) if dtype else None
    value = (table or {}).get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), str(dtype)
    return None


def leak_limit(_key: str, cell: CellRecord) -> tuple[float, str] | None:
    """`leak`: the memory suite's leak tolerance of the signal the cell's figure is from."""
    return _leak_tolerance(cell)


def limit_of(key: KeyFigure, cell: CellRecord) -> tuple[float, str] | None:
    """The limit a cell's figure is held to, and where it comes from (the limit source its kind declares,
    common.checkkinds); None where it has none."""
    if not key.limit:
        return None
    name, _, argument = key.limit.partition(":")
    source = limit_source(name)
    return None if source is None else load(source.resolver)(argument, cell)


def _used(key: KeyFigure, value: float, limit: float) -> float | None:
    """Share of the allowance used. A higher-is-better fraction (agreement, cosine) is measured from 1."""
    if _lower_is_better(key):
        return value / limit if limit > 0 else (0.0 if value <= 0 else math.inf)
    # a floor on a rate (tokens/s): the share of the figure the floor takes
    if getattr(METRICS.get(key.metric), "unit", "fraction") not in _FRACTIONS:
        return limit / value if value > 0 else math.inf
    allowance = 1.0 - limit
    gap = 1.0 - value
    return gap / allowance if allowance > 0 else (0.0 if gap <= 0 else math.inf)


def key_figures(cell: CellRecord) -> list[Figure]:
    """The cell's key figures it recorded, in KEY_FIGURES order (none for a cell that did not run)."""
    out = []
    for key in KEY_FIGURES:
        value = cell.metrics.get(key.metric)
        if value is None:
            continue
        found = limit_of(key, cell)
        if found is None:
            out.append(Figure(key, float(value)))
        else:
            limit, source = found
            out.append(Figure(key, float(value), limit, source, _used(key, float(value), limit)))
    return out
