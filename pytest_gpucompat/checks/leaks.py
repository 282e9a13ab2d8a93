"""Leak verdicts over create/destroy cycles: one pure function per metric, one that weighs every signal.

A verdict judges a trend, not one sample: after a warm-up (first CUDA context, allocator pools, lazy imports),
memory that keeps growing cycle after cycle is a leak; memory that is merely higher than at the start is not.
Each signal catches a class the others miss (PyTorch's CudaMemoryLeakCheck judges the allocator first, then the
driver): live tensors inside the allocator's cached segments show only in `torch_allocated_mib`; a helper process
left running per cycle shows in `started_processes` and in the GPU memory of our processes, wherever it was
re-parented; the whole device moves with other tenants of the GPU, so it is a cross-check and never blamed.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MEMORY_METRICS = ("host_rss_mib", "torch_allocated_mib", "torch_reserved_mib", "nvml_process_mib",
                  "nvml_device_used_mib", "nvml_others_mib", "started_processes", "started_rss_mib")

#: The signals a leak is judged on, each with what it catches (the failure message names the one that fired).
JUDGED: dict[str, str] = {
    "torch_allocated_mib": "live CUDA tensors in the torch allocator",
    "nvml_process_mib": "GPU memory of the engine's processes, helpers left running included",
    "started_processes": "processes the engine started and left running",
    "started_rss_mib": "host memory of the processes the engine started",
    "host_rss_mib": "host memory of the measuring process",
}
#: Reported beside the verdict, never a reason to fail: other processes move them.
CROSS_CHECKS = ("nvml_device_used_mib", "nvml_others_mib", "torch_reserved_mib")

DEFAULT_THRESHOLD_MIB_PER_CYCLE: dict[str, float] = {
    # Growth per cycle below these is noise (allocator rounding, Python caches, driver bookkeeping).
    # Measured on clean create/destroy cycles: host RSS creeps by ~0.03 MiB/cycle, the allocator not at all;
    # NVML moves in 2 MiB steps. started_processes counts processes, not MiB.
    "host_rss_mib": 0.25,
    "torch_allocated_mib": 0.25,
    "torch_reserved_mib": 0.5,
    "nvml_process_mib": 0.5,
    "nvml_device_used_mib": 0.5,
    "nvml_others_mib": 0.5,
    "started_processes": 0.5,
    "started_rss_mib": 0.5,
}


@dataclass(frozen=True)
class LeakVerdict:
    metric: str
    slope_mib_per_cycle: float | None
    """Least-squares slope of the metric over the cycles after warm-up (for a signal that did not leak, the smaller
    of that and the latest cycles' slope: a one-time jump is not growth per cycle); None when it cannot be
    computed."""
    leaked: bool
    message: str
    total_growth_mib: float | None = None
    cycles: int = 0
    recent_slope: float | None = None
    """The slope over the latest cycles alone: a warm-up that lasts past the first cycle does not hide a leak."""
    latest_only: bool = False
    """Leaked over the latest cycles but not over all of them: a short window, evidence that more cycles confirm."""

    @property
    def threshold(self) -> float:
        return DEFAULT_THRESHOLD_MIB_PER_CYCLE[self.metric]

    @property
    def undecided(self) -> bool:
        """Growing over the latest cycles, but not (yet) steadily: more cycles would tell."""
        return not self.leaked and self.recent_slope is not None and self.recent_slope > self.threshold


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    mx = math.fsum(xs) / n
    my = math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    if sxx == 0.0:
        return 0.0
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


@dataclass(frozen=True)
class _Trend:
    slope: float
    positive: int
    deltas: int
    growth: float
    steady: bool


def _trend(xs: Sequence[float], ys: Sequence[float], threshold: float, min_positive_fraction: float) -> _Trend:
    """Allocators grow in pages and segments (NVML in 2 MiB steps), so a steady leak can look like a staircase:
    count the cycles that did not shrink, and require the growth to be spread over cycles, not one jump."""
    slope = _slope(xs, ys)
    deltas = [b - a for a, b in zip(ys, ys[1:])]
    positive = sum(1 for d in deltas if d >= -threshold)
    growth = ys[-1] - ys[0]
    spread = growth > 0 and max(deltas) <= 0.5 * growth
    steady = slope > threshold and positive / len(deltas) >= min_positive_fraction and spread
    return _Trend(slope, positive, len(deltas), growth, steady)


def leak_verdict(
    samples: Sequence[Any],
    metric: str = "nvml_process_mib",
    warmup: int = 1,
    threshold_mib_per_cycle: float | None = None,
    min_positive_fraction: float = 0.6,
) -> LeakVerdict:
    """Leak when, over the cycles after `warmup` (or over the latest four or more of them, so that a warm-up
    that lasts a cycle longer hides nothing), the least-squares slope exceeds the threshold AND most
    cycle-to-cycle deltas are positive AND the growth is spread over the cycles (one jump is not a trend).

    `samples` are MemorySample-like (a `cycle` and the metric as attributes). Needs at least 3 usable samples
    after warm-up; fewer gives leaked=False with a message saying so.
    """
    if metric not in MEMORY_METRICS:
        raise ValueError(f"unknown memory metric {metric!r}; known: {', '.join(MEMORY_METRICS)}")
    threshold = DEFAULT_THRESHOLD_MIB_PER_CYCLE[metric] if threshold_mib_per_cycle is None else threshold_mib_per_cycle
    ordered = sorted(samples, key=lambda s: s.cycle)
    usable = [(float(s.cycle), float(v)) for s in ordered[max(0, warmup):]
              if (v := getattr(s, metric, None)) is not None and math.isfinite(float(v))]
    if len(usable) < 3:
        return LeakVerdict(metric, None, False,
                           f"{metric}: not enough samples after warm-up ({len(usable)}; need 3) to judge a trend",
                           cycles=len(usable))
    xs = [x for x, _ in usable]
    ys = [y for _, y in usable]
    whole = _trend(xs, ys, threshold, min_positive_fraction)
    recent_n = max(4, len(ys) // 2 + 1)
    recent = _trend(xs[-recent_n:], ys[-recent_n:], threshold, min_positive_fraction) if len(ys) > recent_n else whole
    leaked = whole.steady or recent.steady
    shown = whole if whole.steady or not recent.steady else recent
    unit = "processes" if metric == "started_processes" else "MiB"
    detail = (f"{metric}: slope {shown.slope:+.2f} {unit}/cycle over {shown.deltas + 1} cycles "
              f"(threshold {threshold:g}), {shown.positive}/{shown.deltas} cycles did not shrink, "
              f"{shown.growth:+.1f} {unit} in total")
    if leaked:
        message = "leak: " + detail
    elif whole.slope > threshold or recent.slope > threshold:
        message = "no steady growth (jumps, not a trend): " + detail
    else:
        message = "no leak: " + detail
    # the headline figure agrees with the verdict: a leak's slope, else the smaller of the two windows' (a jump
    # that stopped is not growth per cycle; the message keeps the whole window's detail)
    headline = shown.slope if leaked else min(whole.slope, recent.slope)
    return LeakVerdict(metric, headline, leaked, message, total_growth_mib=shown.growth, cycles=len(ys),
                       recent_slope=recent.slope, latest_only=leaked and not whole.steady)


@dataclass(frozen=True)
class MemoryVerdict:
    """Every signal that applied, the ones that fired, and the cross-checks with who moved them."""

    judged: tuple[LeakVerdict, ...]
    cross_checks: tuple[LeakVerdict, ...]
    others: tuple[dict[str, Any], ...]
    """GPU processes that are not the engine's, as seen after the last cycle."""

    @property
    def fired(self) -> tuple[LeakVerdict, ...]:
        return tuple(v for v in self.judged if v.leaked)

    @property
    def leaked(self) -> bool:
        return bool(self.fired)

    @property
    def undecided(self) -> bool:
        return not self.leaked and any(v.undecided for v in self.judged)

    @property
    def unconfirmed(self) -> bool:
        """Every signal that fired did so over the latest cycles alone (a few deltas, after a jump): on an H200 the
        same vLLM engine was judged leaking in one run and clean in another on such a window, so more cycles
        confirm it or clear it before it is reported."""
        return self.leaked and all(v.latest_only for v in self.fired)

    @property
    def worst(self) -> LeakVerdict | None:
        """The MiB signal closest to (or furthest over) its threshold: the figure a report shows."""
        mib = [v for v in self.judged if v.slope_mib_per_cycle is not None and v.metric != "started_processes"]
        return max(mib, key=lambda v: (v.leaked, (v.slope_mib_per_cycle or 0.0) / v.threshold), default=None)

    def message(self, engine: str) -> str:
        if self.leaked:
            head = "; ".join(f"{JUDGED[v.metric]}: {v.message}" for v in self.fired)
            return f"{engine} leaks: {head}"
        parts = [v.message for v in self.judged if v.slope_mib_per_cycle is not None]
        return f"{engine}: no leak ({'; '.join(parts) or 'no signal could be measured'})"

    def foreign_note(self) -> str | None:
        """Device memory that grew in processes that are not the engine's: said, never blamed."""
        device = next((v for v in self.cross_checks if v.metric == "nvml_device_used_mib"), None)
        others = next((v for v in self.cross_checks if v.metric == "nvml_others_mib"), None)
        if not self.others or (device is None and others is None):
            return None
        moved = max((v.slope_mib_per_cycle or 0.0) for v in (device, others) if v is not None)
        held = ", ".join(f"pid {p['pid']} ({p['command']}) {p['mib']:.0f} MiB, {p['owner']}" for p in self.others)
        return f"not the engine's: device {moved:+.1f} MiB/cycle; held by {held}"


def memory_verdict(samples: Sequence[Any], warmup: int = 1) -> MemoryVerdict:
    """Judge every signal that was measured; cross-check the device-wide figures."""
    def measured(metric: str) -> bool:
        return any(getattr(s, metric, None) is not None for s in samples)

    judged = tuple(leak_verdict(samples, m, warmup) for m in JUDGED if measured(m))
    cross = tuple(leak_verdict(samples, m, warmup) for m in CROSS_CHECKS if measured(m))
    last = max(samples, key=lambda s: s.cycle, default=None)
    others = tuple(getattr(last, "others", ()) or ()) if last is not None else ()
    return MemoryVerdict(judged, cross, others)


@dataclass(frozen=True)
class CyclePolicy:
    """How many create/destroy cycles: at least `min_cycles`; more while a signal is undecided or a leak is seen
    over the latest cycles alone, up to `max_cycles`, and no new cycle once `budget_s` seconds have gone into
    cycles. When the bounds stop the cycles, the verdict is the one the cycles so far give."""

    min_cycles: int = 5
    max_cycles: int = 12
    budget_s: float = 300.0

    def more(self, samples: Sequence[Any], cycles_done: int, elapsed_s: float, warmup: int = 1) -> bool:
        if cycles_done < self.min_cycles:
            return True
        if cycles_done >= self.max_cycles or elapsed_s >= self.budget_s:
            return False
        verdict = memory_verdict(samples, warmup)
        return verdict.undecided or verdict.unconfirmed

    @classmethod
    def from_env(cls, environ: Any = None) -> CyclePolicy:
        """GPUCOMPAT_MEMORY_CYCLES (the minimum), GPUCOMPAT_MEMORY_MAX_CYCLES, GPUCOMPAT_MEMORY_BUDGET_S."""
        import os

        env = os.environ if environ is None else environ
        default = cls()
        values: dict[str, Any] = {}
        for name, field, kind in (("GPUCOMPAT_MEMORY_CYCLES", "min_cycles", int),
                                  ("GPUCOMPAT_MEMORY_MAX_CYCLES", "max_cycles", int),
                                  ("GPUCOMPAT_MEMORY_BUDGET_S", "budget_s", float)):
            raw = env.get(name)
            if raw in (None, ""):
                continue
            try:
                value = kind(raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r}: not a number") from None
            if not (isinstance(value, int) or math.isfinite(value)) or value < (3 if kind is int else 0):
                wanted = "an integer >= 3" if kind is int else "a finite number >= 0"
                raise ValueError(f"{name}={raw!r}: must be {wanted}")
            values[field] = value
        policy = cls(**{**{f: getattr(default, f) for f in ("min_cycles", "max_cycles", "budget_s")}, **values})
        if policy.max_cycles < policy.min_cycles:  # asking for N cycles means at least N
            policy = cls(policy.min_cycles, policy.min_cycles, policy.budget_s)
        return policy
