"""Memory measurement (host RSS, torch allocator, NVML) and a pure leak verdict over start/stop cycles.

The verdict judges a trend, not one sample: after a warm-up (first CUDA context, allocator pools, lazy imports),
memory that keeps growing cycle after cycle is a leak; memory that is merely higher than at the start is not.
Following PyTorch's CudaMemoryLeakCheck, `settle()` collects garbage and empties the cache, re-querying up to three
times, before a sample is trusted. psutil is not needed: RSS comes from /proc (or `resource` elsewhere).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

MIB = 1024 * 1024

METRICS = ("host_rss_mib", "torch_allocated_mib", "torch_reserved_mib", "nvml_process_mib", "nvml_device_used_mib")

DEFAULT_THRESHOLD_MIB_PER_CYCLE: dict[str, float] = {
    # Growth per cycle below these is noise (allocator rounding, Python caches, driver bookkeeping).
    # Measured on clean create/destroy cycles: host RSS creeps by ~0.03 MiB/cycle, the allocator not at all.
    "host_rss_mib": 0.25,
    "torch_allocated_mib": 0.25,
    "torch_reserved_mib": 0.5,
    "nvml_process_mib": 0.5,
    "nvml_device_used_mib": 0.5,
}


@dataclass(frozen=True)
class MemorySample:
    """One measurement; a field is None when that source is not available here."""

    cycle: int
    host_rss_mib: float | None = None
    torch_allocated_mib: float | None = None
    torch_reserved_mib: float | None = None
    nvml_process_mib: float | None = None
    nvml_device_used_mib: float | None = None
    pid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class LeakVerdict:
    metric: str
    slope_mib_per_cycle: float | None
    """Least-squares slope of the metric over the cycles after warm-up; None when it cannot be computed."""
    leaked: bool
    message: str
    total_growth_mib: float | None = None
    cycles: int = 0


def host_rss_mib() -> float | None:
    """Resident set size of this process, from /proc/self/status (VmRSS), else `resource` (peak RSS)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    parts = line.split()
                    return float(parts[1]) / 1024.0  # kB -> MiB
    except OSError:
        pass
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return None
    # Linux reports kB, macOS bytes.
    return float(peak) / (MIB if sys.platform == "darwin" else 1024.0)


def _torch_cuda() -> Any | None:
    """torch, only if it is already imported and CUDA is initialized: sampling must not create a context."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch
    except Exception:
        return None
    return None


def _parent_pid(pid: int) -> int | None:
    """The parent of `pid` from /proc/PID/stat (field 4, after the parenthesised command name); None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def descends_from(pid: int, ancestor: int, max_depth: int = 64) -> bool:
    """Whether `pid` is `ancestor` or one of its descendants (Linux /proc; elsewhere only `pid == ancestor`)."""
    for _ in range(max_depth):
        if pid == ancestor:
            return True
        parent = _parent_pid(pid)
        if parent is None or parent in (0, pid):
            return False
        pid = parent
    return False


def _nvml(device_index: int, pid: int) -> tuple[float | None, float | None]:
    """(MiB of this process and its descendants, whole device used MiB) from NVML; (None, None) without NVML or
    device. Descendants count because engines keep their GPU memory in worker processes (SGLang's scheduler,
    vLLM's EngineCore): the engine's own process alone would not show their memory, nor a worker left alive."""
    try:
        import pynvml
    except ImportError:
        return None, None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None, None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        used = float(pynvml.nvmlDeviceGetMemoryInfo(handle).used) / MIB
        process: float | None = None
        listed = False
        for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            fn = getattr(pynvml, getter, None)
            if fn is None:
                continue
            try:
                procs = fn(handle)
            except Exception:
                continue
            listed = listed or bool(procs)
            for proc in procs:
                if proc.usedGpuMemory is not None and descends_from(int(proc.pid), pid):
                    process = (process or 0.0) + float(proc.usedGpuMemory) / MIB
            if process is not None:
                break
        if process is None and not listed:
            process = 0.0  # NVML lists no process at all: this one holds no device memory
        # Processes listed but none with this pid: maybe another PID namespace (containers); unknown, not 0.
        return process, used
    except Exception:
        return None, None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def nvml_index(device_index: int) -> int:
    """NVML numbers GPUs in PCI order and ignores CUDA_VISIBLE_DEVICES: map a CUDA ordinal to an NVML index.

    Only plain integer lists are mapped (UUID lists are left as given); without the variable the index is kept.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return device_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if device_index < len(entries) and entries[device_index].isdigit():
        return int(entries[device_index])
    return device_index


def sample(device_index: int | None = None, cycle: int = 0, pid: int | None = None) -> MemorySample:
    """Measure now. `device_index` is the CUDA ordinal (None: host memory only); `pid` defaults to this process
    (give an engine child's pid to read its NVML share; torch numbers are always this process's). The NVML
    process figure covers the process and its descendants."""
    own_pid = os.getpid()
    target_pid = own_pid if pid is None else pid
    rss = host_rss_mib() if target_pid == own_pid else _proc_rss_mib(target_pid)
    allocated = reserved = None
    torch = _torch_cuda() if target_pid == own_pid else None
    if torch is not None and device_index is not None:
        try:
            allocated = float(torch.cuda.memory_allocated(device_index)) / MIB
            reserved = float(torch.cuda.memory_reserved(device_index)) / MIB
        except Exception:
            allocated = reserved = None
    process = device_used = None
    if device_index is not None:
        process, device_used = _nvml(nvml_index(device_index), target_pid)
    return MemorySample(
        cycle=cycle,
        host_rss_mib=rss,
        torch_allocated_mib=allocated,
        torch_reserved_mib=reserved,
        nvml_process_mib=process,
        nvml_device_used_mib=device_used,
        pid=target_pid,
    )


def _proc_rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def settle(device_index: int | None = None, cycle: int = 0, pid: int | None = None, attempts: int = 3) -> MemorySample:
    """Collect garbage, empty the CUDA cache, and sample until the allocator stops shrinking (at most `attempts`)."""
    previous: MemorySample | None = None
    current = sample(device_index, cycle, pid)
    for _ in range(max(1, attempts)):
        gc.collect()
        torch = _torch_cuda()
        if torch is not None:
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception:
                pass
        previous, current = current, sample(device_index, cycle, pid)
        if previous is not None and _not_shrinking(previous, current):
            break
    return current


def _not_shrinking(before: MemorySample, after: MemorySample) -> bool:
    for metric in ("torch_allocated_mib", "nvml_process_mib"):
        a, b = getattr(before, metric), getattr(after, metric)
        if a is not None and b is not None and b < a - 0.5:
            return False
    return True


def _slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    n = len(xs)
    mx = math.fsum(xs) / n
    my = math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    if sxx == 0.0:
        return 0.0
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def leak_verdict(
    samples: Sequence[MemorySample],
    metric: str = "nvml_process_mib",
    warmup: int = 1,
    threshold_mib_per_cycle: float | None = None,
    min_positive_fraction: float = 0.6,
) -> LeakVerdict:
    """Leak when, over the cycles after `warmup`, the least-squares slope exceeds the threshold AND most
    cycle-to-cycle deltas are positive (a single jump, e.g. a lazily grown pool, is not a trend).

    Needs at least 3 usable samples after warm-up; fewer gives leaked=False with a message saying so.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown memory metric {metric!r}; known: {', '.join(METRICS)}")
    threshold = DEFAULT_THRESHOLD_MIB_PER_CYCLE[metric] if threshold_mib_per_cycle is None else threshold_mib_per_cycle
    ordered = sorted(samples, key=lambda s: s.cycle)
    usable = [(float(s.cycle), float(v)) for s in ordered[max(0, warmup):]
              if (v := getattr(s, metric)) is not None and math.isfinite(float(v))]
    if len(usable) < 3:
        return LeakVerdict(metric, None, False,
                           f"{metric}: not enough samples after warm-up ({len(usable)}; need 3) to judge a trend",
                           cycles=len(usable))
    xs = [x for x, _ in usable]
    ys = [y for _, y in usable]
    slope = _slope(xs, ys)
    deltas = [b - a for a, b in zip(ys, ys[1:])]
    # Allocators grow in pages and segments (NVML in 2 MiB steps), so a steady leak can look like a staircase:
    # count the cycles that did not shrink, and require the growth to be spread over cycles, not one jump.
    positive = sum(1 for d in deltas if d >= -threshold)
    fraction = positive / len(deltas)
    growth = ys[-1] - ys[0]
    spread = growth > 0 and max(deltas) <= 0.5 * growth
    leaked = slope > threshold and fraction >= min_positive_fraction and spread
    detail = (f"{metric}: slope {slope:+.2f} MiB/cycle over {len(ys)} cycles (threshold {threshold:g}), "
              f"{positive}/{len(deltas)} cycles did not shrink, {growth:+.1f} MiB in total")
    if leaked:
        message = "leak: " + detail
    elif slope > threshold:
        message = "no steady growth (jumps, not a trend): " + detail
    else:
        message = "no leak: " + detail
    return LeakVerdict(metric, slope, leaked, message, total_growth_mib=growth, cycles=len(ys))
