"""Memory cycles, run inside a child process so that what they measure belongs to one process alone.

``create_destroy_cycles`` repeats create -> generate -> destroy of one engine in the same process and
samples memory after each destroy (PyTorch's CudaMemoryLeakCheck way: settle first, then read), as many cycles as
the policy asks for (more while a signal is undecided); every process the engine starts is marked as ours, so a
helper left running is found wherever it was re-parented, named in the result, and stopped at the end.
``one_process_run`` is one whole engine life in a process that then exits, for measuring what a finished process
leaves behind on the device (the seeds' "CUDA context leak", claim S55); ``finished_process_runs`` repeats it and
compares the device before and after each, and stops whatever the runs left running.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..catalog.base import EngineSpec
from ..engines import create
from ..engines.child import caches_filled
from ..machine.procfs import start_time
from .leaks import CyclePolicy
from .memory import MemorySample, settle
from .ownership import (
    DeviceSnapshot,
    LeftBehind,
    Scope,
    command_line,
    device_snapshot,
    is_zombie,
    left_behind,
    owned_pids,
    owner_scope,
    rss_mib,
)


def _device_index(spec: EngineSpec) -> int | None:
    """CUDA ordinal 0 of this process when the engine runs on a GPU, None for host-only runs.

    Asked of NVML, never of torch.cuda: this is the process the engine is started from, and a torch.cuda call
    here (even `is_available`, which counts the devices) marks every process it forks later as unable to use CUDA.
    vLLM forks its engine core by default, which then fails with "Cannot re-initialize CUDA in forked subprocess":
    seen on an H200 with every memory cell of vLLM 0.26.0 as shipped."""
    device = str(spec.params.get("device", ""))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if device.startswith("cpu") or (visible is not None and visible.strip() in ("", "-1")):
        return None
    from ..machine.fingerprint import nvml

    with nvml() as pynvml:  # None without NVML (no driver): no GPU to measure
        try:
            return 0 if pynvml is not None and pynvml.nvmlDeviceGetCount() > 0 else None
        except Exception:
            return None


def left_running(scope: Scope) -> list[dict[str, Any]]:
    """The processes started under the scope that still run: pid, start time, command and host memory."""
    return [{"pid": pid, "start": start_time(pid), "command": command_line(pid), "rss_mib": rss_mib(pid)}
            for pid in owned_pids(scope)]


def _same(proc: dict[str, Any]) -> bool:
    return proc["start"] is not None and start_time(proc["pid"]) == proc["start"] and not is_zombie(proc["pid"])


def stop_left_running(found: Sequence[dict[str, Any]], wait_s: float = 5.0) -> None:
    """Kill what the cycles left running, each only if it is still the process we found (same start time), and
    wait until they are gone, so that the next measurement does not see their memory."""
    for proc in found:
        if _same(proc):
            with contextlib.suppress(OSError):
                os.kill(proc["pid"], signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while any(_same(p) for p in found) and time.monotonic() < deadline:
        time.sleep(0.02)


def create_destroy_cycles(
    spec: EngineSpec,
    cycles: int | CyclePolicy,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    on_cycle: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Samples before the first engine (cycle 0) and after each destroy (cycles 1..N), as plain dicts; the last
    row also lists the processes left running (`left_running`).

    ``cycles`` is a fixed count or a CyclePolicy. ``on_cycle`` runs after each destroy, before sampling: the
    detection benchmark plants leaks through it.
    """
    policy = cycles if isinstance(cycles, CyclePolicy) else CyclePolicy(cycles, cycles, float("inf"))
    device = _device_index(spec)
    with owner_scope() as scope:
        samples: list[MemorySample] = [settle(device, cycle=0, scope=scope)]
        timings: list[float] = []
        found: list[dict[str, Any]] = []
        try:
            while policy.more(samples, len(timings), sum(timings)):
                cycle = len(timings) + 1
                t0 = time.perf_counter()
                engine = create(spec.engine)
                engine.start(spec)
                engine.generate(prompts, max_tokens, 1)
                if cycle == 1:
                    caches_filled()  # what it compiled is on disk: others waiting for this configuration may start
                engine.shutdown()
                del engine
                timings.append(time.perf_counter() - t0)
                if on_cycle is not None:
                    on_cycle(cycle)
                samples.append(settle(device, cycle=cycle, scope=scope))
            found = left_running(scope)
        finally:
            stop_left_running(found or left_running(scope))
    rows = [dict(dataclasses.asdict(s), cycle_s=t) for s, t in zip(samples, [0.0, *timings])]
    rows[-1]["left_running"] = found
    return rows


def one_process_run(spec: EngineSpec, prompts: Sequence[Sequence[int]], max_tokens: int) -> dict[str, Any]:
    """Start, generate, sample while up; the caller measures the device after this process has exited."""
    device = _device_index(spec)
    engine = create(spec.engine)
    engine.start(spec)
    engine.generate(prompts, max_tokens, 1)
    caches_filled()
    up = settle(device, cycle=0)
    engine.shutdown()
    return dataclasses.asdict(up)


@dataclass(frozen=True)
class FinishedRuns:
    """What ``finished_process_runs`` saw: the device before the first run (None: NVML gives no figure, and nothing
    ran), each run's own device memory while up, what stayed on the device after each run, and the processes the
    runs left running (already stopped when the caller sees them)."""

    before: DeviceSnapshot | None
    while_up: list[float]
    lefts: list[LeftBehind]
    found: list[dict[str, Any]]


def finished_process_runs(
    run_one: Callable[[], Mapping[str, Any]],
    runs: int,
    device: int = 0,
    snapshot: Callable[[int, Scope], DeviceSnapshot | None] = device_snapshot,
    recheck_s: float = 2.0,
    sleep: Callable[[float], None] = time.sleep,
) -> FinishedRuns:
    """Run ``run_one`` (one whole engine life in a process that exits, e.g. ``one_process_run`` in an isolated
    child; it returns the sample taken while up) ``runs`` times inside one owner scope, and attribute what stays on
    ``device`` after each (``left_behind`` against the snapshot before the first run).

    Where a run seems to leave memory behind, the device is looked at once more ``recheck_s`` later and the smaller
    blame kept: a context being torn down (a finished process's, or a neighbour's on a shared GPU) is held by no
    listed process for a moment, and must not be blamed on the engine.

    Here rather than in the suite so that the bookkeeping, above all that whatever the runs left running is found,
    named and stopped (same start time: never a recycled pid) even when a run fails, is tested on a CPU with a fake
    ``snapshot`` and a real helper process.
    """
    with owner_scope() as scope:
        settle(device, scope=scope)
        before = snapshot(device, scope)
        if before is None:
            return FinishedRuns(None, [], [], [])
        while_up: list[float] = []
        lefts: list[LeftBehind] = []
        found: list[dict[str, Any]] = []
        try:
            for _ in range(runs):
                up = run_one()
                while_up.append(up.get("nvml_process_mib") or 0.0)
                after = snapshot(device, scope)
                if after is None:
                    continue
                left = left_behind(before, after)
                if left.blamed_mib > 0 and recheck_s > 0:
                    sleep(recheck_s)
                    again = snapshot(device, scope)
                    if again is not None:
                        left = min(left, left_behind(before, again), key=lambda x: x.blamed_mib)
                lefts.append(left)
            found = left_running(scope)
        finally:  # what the engine left running is stopped, not left on the GPU for the next measurement
            stop_left_running(found or left_running(scope))
    return FinishedRuns(before, while_up, lefts, found)
