"""Memory measurement: host RSS, the torch allocator, NVML per process (ours and others') and per device.

The verdicts over cycles live in `checks.leaks`. Following PyTorch's CudaMemoryLeakCheck, `settle()` collects
garbage and empties the cache, re-querying up to three times, before a sample is trusted. psutil is not needed:
RSS comes from /proc (or `resource` elsewhere).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import gc
import math
import os
import sys
from dataclasses import dataclass, fields
from typing import Any

from .ownership import Scope, as_dicts, current_scope, device_snapshot, nvml_index, owned_pids, rss_mib

__all__ = ["MemorySample", "host_rss_mib", "nvml_index", "sample", "settle"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class MemorySample:
    """One measurement; a field is None when that source is not available here."""

    cycle: int
    host_rss_mib: float | None = None
    torch_allocated_mib: float | None = None
    torch_reserved_mib: float | None = None
    nvml_process_mib: float | None = None
    """GPU memory of the measured process and every process started under its owner scope (workers, helpers
    left running, re-parented or not)."""
    nvml_device_used_mib: float | None = None
    """The whole device: a cross-check only, since other tenants of the GPU move it too."""
    nvml_others_mib: float | None = None
    """GPU memory held by processes that are not ours (they existed before, or were started by someone else)."""
    started_processes: int | None = None
    """Live processes started under the owner scope, the measured process not counted."""
    started_rss_mib: float | None = None
    """Host memory of those processes."""
    others: tuple[dict[str, Any], ...] = ()
    """The GPU processes that are not ours: pid, MiB, owner ("before", "other", "unknown") and command."""
    pid: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def host_rss_mib() -> float | None:
    """Resident set size of this process, from /proc/self/status (VmRSS), else `resource` (peak RSS)."""
    rss = rss_mib("self")
    if rss is not None:
        return rss
    try:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    except (ImportError, OSError):
        return None
    # Linux reports kB, macOS bytes.
    return float(peak) / (MIB if sys.platform == "darwin" else 1024.0)


def _torch_cuda() -> Any | None:
    """torch, only if it is already imported and CUDA is initialized: sampling must not create a context, nor
    count the devices (`torch.cuda.is_available` does, and a process forked after it cannot use CUDA)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if torch.cuda.is_initialized():
            return torch
    except Exception:
        return None
    return None


def sample(device_index: int | None = None, cycle: int = 0, pid: int | None = None,
           scope: Scope | None = None) -> MemorySample:
    """Measure now. `device_index` is the CUDA ordinal (None: host memory only); `pid` defaults to this process
    (give an engine child's pid to read its share; torch numbers are always this process's). `scope` says which
    processes are ours: by default the measured process, its descendants and, inside an `owner_scope`, every
    process that carries its token."""
    own_pid = os.getpid()
    target_pid = own_pid if pid is None else pid
    inherited = current_scope()
    if scope is None:
        scope = Scope(inherited.token if inherited else "", target_pid, None)
    rss = host_rss_mib() if target_pid == own_pid else rss_mib(target_pid)
    allocated = reserved = None
    torch = _torch_cuda() if target_pid == own_pid else None
    if torch is not None and device_index is not None:
        try:
            allocated = float(torch.cuda.memory_allocated(device_index)) / MIB
            reserved = float(torch.cuda.memory_reserved(device_index)) / MIB
        except Exception:
            allocated = reserved = None
    started = [p for p in owned_pids(scope) if p != target_pid] if scope.token else None
    started_rss = None if started is None else math.fsum(rss_mib(p) or 0.0 for p in started)
    process = device_used = others_mib = None
    others: tuple[dict[str, Any], ...] = ()
    snapshot = device_snapshot(device_index, scope) if device_index is not None else None
    if snapshot is not None:
        device_used = snapshot.used_mib
        ours = [p for p in snapshot.processes if p.owner == "ours"]
        foreign = [p for p in snapshot.processes if p.owner != "ours"]
        others_mib = math.fsum(p.mib for p in foreign)
        others = tuple(as_dicts(foreign))
        if ours or not snapshot.processes:
            process = math.fsum(p.mib for p in ours)  # nothing listed at all: nothing is ours either
        elif not any(p.owner == "unknown" for p in foreign):
            process = 0.0  # every listed process is known to be someone else's
        # else: listed processes we cannot place (another PID namespace): unknown, not 0
    return MemorySample(
        cycle=cycle,
        host_rss_mib=rss,
        torch_allocated_mib=allocated,
        torch_reserved_mib=reserved,
        nvml_process_mib=process,
        nvml_device_used_mib=device_used,
        nvml_others_mib=others_mib,
        started_processes=None if started is None else len(started),
        started_rss_mib=started_rss,
        others=others,
        pid=target_pid,
    )


def settle(device_index: int | None = None, cycle: int = 0, pid: int | None = None, attempts: int = 3,
           scope: Scope | None = None) -> MemorySample:
    """Collect garbage, empty the CUDA cache, and sample until the allocator stops shrinking (at most `attempts`)."""
    previous: MemorySample | None = None
    current = sample(device_index, cycle, pid, scope)
    for _ in range(max(1, attempts)):
        gc.collect()
        torch = _torch_cuda()
        if torch is not None:
            try:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            except Exception:
                pass
        previous, current = current, sample(device_index, cycle, pid, scope)
        if previous is not None and _not_shrinking(previous, current):
            break
    return current


def _not_shrinking(before: MemorySample, after: MemorySample) -> bool:
    for metric in ("torch_allocated_mib", "nvml_process_mib"):
        a, b = getattr(before, metric), getattr(after, metric)
        if a is not None and b is not None and b < a - 0.5:
            return False
    return True
