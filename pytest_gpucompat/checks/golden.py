"""A cell's generations judged against golden outputs recorded on another runner (or engine, or version).

The same metrics and thresholds as the precision suite (checks.compare, matrices/thresholds.yaml per dtype class),
recorded under their own names so that a report keeps both: ``golden_*`` against the golden file's reference
(widened to the `bfloat16-reference` class when that reference ran in bfloat16), ``golden_cell_*`` against the
same cell as recorded there (informative: how far this runner moved from the recording runner's run of the very
same engine and parameters). A comparison with a recording made on another attention backend or KV-cache dtype
says which two (``backends``), where both sides said what they ran. Pure: no engine, no file.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.base import Generation
from .compare import DriftMetrics, compare_generations, thresholds_for, verdict_drift
from .golden_files import GoldenFile, Recorded

PREFIX = "golden_"
CELL_PREFIX = "golden_cell_"


@dataclass(frozen=True)
class GoldenVerdict:
    """The cell against a golden file: passed or not, one line, and the figures to record."""

    compared: bool
    """False when the file holds neither a reference nor this cell: nothing was judged."""
    passed: bool
    message: str
    metrics: Mapping[str, float] = field(default_factory=dict)
    backends: Mapping[str, str] = field(default_factory=dict)
    """`backends` (against the golden reference) and `cell_backends` (against the same cell as recorded): the
    attention backends and KV-cache dtypes that differ, `attention vllm FLASH_ATTN vs hf sdpa, KV cache ...`;
    absent when they are the same or a side did not say."""


def threshold_class(params: Mapping[str, Any], ran_dtype: str | None = None) -> str:
    """The thresholds a precision cell is judged by (matrices/thresholds.yaml): `fp8` for a quantized KV cache,
    else the asked dtype, or the one the engine ran when it was asked `auto`."""
    kv = params.get("kv_cache_dtype")
    if kv not in (None, "auto"):
        return "fp8"
    dtype = str(params.get("dtype", "auto"))
    return str(ran_dtype) if dtype == "auto" and ran_dtype else dtype


def drift_figures(metrics: DriftMetrics, prefix: str) -> dict[str, float]:
    """The figures a report keeps of one comparison; `first_divergence` is the earliest position where any prompt
    diverged (the generation length when none did)."""
    earliest = min((p.first_divergence if p.first_divergence is not None else p.compared_positions
                    for p in metrics.per_prompt), default=0)
    return {
        prefix + "max_abs_logprob_delta": float(metrics.max_abs_logprob_delta),
        prefix + "mean_abs_logprob_delta": float(metrics.mean_abs_logprob_delta),
        prefix + "token_agreement": float(metrics.token_agreement),
        prefix + "logprobs_close": 1.0 if metrics.logprobs_close else 0.0,
        prefix + "first_divergence": float(earliest),
    }


def _plain_dtype(value: str) -> str:
    return value.strip().lower().removeprefix("torch.")


def backend_difference(engine: str | None, attention_backend: str | None, kv_cache_dtype: str | None,
                       rec: Recorded) -> str | None:
    """`attention vllm FLASH_ATTN vs hf sdpa, KV cache fp8_e4m3 vs float32`: what ran here against what ran for the
    recording, where both are known and differ; None otherwise (an older file keeps neither)."""
    parts = []
    if attention_backend and rec.attention_backend and attention_backend.lower() != rec.attention_backend.lower():
        here = f"{engine} {attention_backend}" if engine else attention_backend
        parts.append(f"attention {here} vs {rec.engine} {rec.attention_backend}")
    if kv_cache_dtype and rec.kv_cache_dtype and _plain_dtype(kv_cache_dtype) != _plain_dtype(rec.kv_cache_dtype):
        parts.append(f"KV cache {kv_cache_dtype} vs {rec.kv_cache_dtype}")
    return ", ".join(parts) or None


def _origin(rec: Recorded) -> str:
    """`float32-cpu reference, hf 5.24.0, on ci-cpu`: what the cell was compared with."""
    parts = [f"{rec.kind} reference" if rec.kind else "the same cell as recorded"]
    if rec.version:
        parts.append(f"{rec.engine} {rec.version}")
    if rec.runner:
        parts.append(f"on {rec.runner}")
    return ", ".join(parts)


def judge(golden: GoldenFile, cell_id: str, candidate: Sequence[Generation], dtype_key: str,
          table: Mapping[str, Mapping[str, Any]] | None = None, *, engine: str | None = None,
          attention_backend: str | None = None, kv_cache_dtype: str | None = None) -> GoldenVerdict:
    """Compare ``candidate`` with the golden reference (the verdict) and with the golden run of the same cell
    (figures only); without a golden reference, the golden cell gives the verdict. ``engine``,
    ``attention_backend`` and ``kv_cache_dtype``: what ran the candidate (RunInfo), compared with what the
    recordings ran."""
    name = Path(golden.source).name or "golden"
    figures: dict[str, float] = {}
    backends: dict[str, str] = {}
    same = golden.cells.get(cell_id)
    if same is not None:
        figures.update(drift_figures(compare_generations(same.generations, candidate, golden.top_n), CELL_PREFIX))
        if (differ := backend_difference(engine, attention_backend, kv_cache_dtype, same)) is not None:
            backends["cell_backends"] = differ
    target = golden.reference if golden.reference is not None else same
    if target is None:
        return GoldenVerdict(False, True, f"{name} has no reference and no cell {cell_id}: nothing to compare", figures,
                             backends)
    if target is golden.reference and (
            differ := backend_difference(engine, attention_backend, kv_cache_dtype, target)) is not None:
        backends["backends"] = differ
    metrics = compare_generations(target.generations, candidate, golden.top_n)
    if target is golden.reference:
        figures.update(drift_figures(metrics, PREFIX))
        thresholds = thresholds_for(dtype_key, table, reference=target.dtype or "float32")
    else:
        thresholds = thresholds_for(dtype_key, table)
    ok, message = verdict_drift(metrics, thresholds)
    differ = backends.get("backends" if target is golden.reference else "cell_backends")
    recorded_on = f"; recorded on another backend: {differ}" if differ else ""
    return GoldenVerdict(True, ok, f"against {name} ({_origin(target)}{recorded_on}): {message}", figures, backends)
