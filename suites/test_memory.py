"""Memory leaks: repeated engine create -> generate -> destroy cycles, and repeated whole-process runs.

Measured in child processes so each number belongs to one test: the torch allocator's live bytes, the GPU memory
(NVML) of the engine's processes and of every process it started (found by an owner token in their environment,
wherever they were re-parented), host RSS, and the processes left running; sampled after settling (gc +
empty_cache, re-query) and judged on the trend over cycles, not on one sample (PyTorch's CudaMemoryLeakCheck
method). Device-wide memory is a cross-check: other tenants of the GPU move it, so they are named, never blamed.
So these tests share a GPU with other workers' cells (``--gpucompat-workers-per-gpu``); each is a scheduling unit
of its own, dealt out first. On a machine without a GPU the cycles measure host memory and processes.
"""

from __future__ import annotations

import pytest

from pytest_gpucompat import (
    CyclePolicy,
    MemorySample,
    create_destroy_cycles,
    describe_processes,
    engine_spec,
    env_int,
    finished_process_runs,
    fixed_prompts,
    memory_verdict,
    model_vocab_size,
    one_process_run,
)

PROCESS_RUNS = env_int("GPUCOMPAT_PROCESS_RUNS", 3, minimum=0)
# What a finished process may leave on the device before it counts as left behind (driver bookkeeping jitters).
LEFT_BEHIND_TOLERANCE_MIB = 64.0
_FIELDS = set(MemorySample.__dataclass_fields__)
_SERIES = ("nvml_process_mib", "torch_allocated_mib", "torch_reserved_mib", "host_rss_mib", "started_processes",
           "nvml_device_used_mib", "nvml_others_mib")
_AFTER_LAST = ("nvml_process_mib", "torch_allocated_mib", "torch_reserved_mib", "host_rss_mib", "started_processes")


def _samples(rows):
    return [MemorySample(**{k: v for k, v in row.items() if k in _FIELDS}) for row in rows]


@pytest.mark.gpucompat(matrix="memory")
def test_create_destroy_cycles_do_not_leak(gpucompat_cell, gpucompat_model, gpucompat_record, gpucompat_isolated,
                                           gpucompat_record_series, request):
    spec = engine_spec(request.config, gpucompat_cell, gpucompat_model)
    prompts = fixed_prompts(2, 12, model_vocab_size(gpucompat_model), seed=5)
    rows = gpucompat_isolated(create_destroy_cycles, spec, CyclePolicy.from_env(), prompts, 8)
    samples = _samples(rows)
    verdict = memory_verdict(samples, warmup=1)
    worst = verdict.worst
    gpucompat_record("leak_mib_per_cycle", (worst.slope_mib_per_cycle or 0.0) if worst else 0.0)
    if worst is not None:
        gpucompat_record("leak_limit_mib_per_cycle", worst.threshold)
    processes = next((v for v in verdict.judged if v.metric == "started_processes"), None)
    if processes is not None:
        gpucompat_record("leaked_processes_per_cycle", processes.slope_mib_per_cycle or 0.0)
    gpucompat_record("cycles", float(len(samples) - 1))
    gpucompat_record("cycle_s", sum(r["cycle_s"] for r in rows[1:]) / max(1, len(rows) - 1))
    for name in _SERIES:
        series = [getattr(s, name) for s in samples]  # cycle 0 (before the first engine) to the last
        if any(v is not None for v in series):
            gpucompat_record_series(name, series)
            if name in _AFTER_LAST:
                gpucompat_record(f"{name}_after_last_cycle", [v for v in series if v is not None][-1])
    device = next((v for v in verdict.cross_checks if v.metric == "nvml_device_used_mib"), None)
    if device is not None:
        gpucompat_record("device_leak_mib_per_cycle", device.slope_mib_per_cycle or 0.0)
    note = verdict.foreign_note()
    if note:
        print(f"[gpucompat] {gpucompat_cell.engine}: {note}")
    left = rows[-1].get("left_running") or []
    running = ", ".join(f"pid {p['pid']} ({p['command']})" for p in left)
    assert not verdict.leaked, verdict.message(gpucompat_cell.engine) + (
        f"; left running after the last cycle (now stopped): {running}" if running else "")


@pytest.mark.gpucompat(matrix="memory")
def test_finished_processes_leave_no_device_memory(gpucompat_cell, gpucompat_model, gpucompat_fingerprint,
                                                   gpucompat_record, gpucompat_isolated, request):
    """The seeds claim a "CUDA context leak": memory left on the GPU after processes exit (claim S55). Only what
    this test's processes hold, or what no live process explains, is left behind by the engine."""
    if not gpucompat_fingerprint.gpus:
        pytest.skip("no GPU: device memory left behind by finished processes (claim S55) is a GPU measurement")
    spec = engine_spec(request.config, gpucompat_cell, gpucompat_model)
    prompts = fixed_prompts(2, 12, model_vocab_size(gpucompat_model), seed=6)
    # what the engine left running is stopped inside (same start time: never a recycled pid), not left on the GPU
    runs = finished_process_runs(lambda: gpucompat_isolated(one_process_run, spec, prompts, 8), PROCESS_RUNS, 0)
    if runs.before is None:
        pytest.skip("NVML gives no device memory figure on this GPU")
    before, while_up, lefts, found = runs.before, runs.while_up, runs.lefts, runs.found
    worst = max(lefts, key=lambda x: x.blamed_mib)
    gpucompat_record("device_used_before_mib", before.used_mib)
    gpucompat_record("process_mib_while_up", max(while_up))
    gpucompat_record("device_left_behind_mib", worst.blamed_mib)
    gpucompat_record("others_growth_mib", max(x.others_growth_mib for x in lefts))
    if worst.others:
        print(f"[gpucompat] not the engine's, not blamed: {describe_processes(worst.others)}")
    assert worst.blamed_mib <= LEFT_BEHIND_TOLERANCE_MIB, (
        f"{worst.blamed_mib:.0f} MiB stayed on the device after {PROCESS_RUNS} finished {gpucompat_cell.engine} "
        f"processes: still running {describe_processes(worst.ours)}; {worst.unexplained_growth_mib:.0f} MiB held "
        f"by no live process (before {before.used_mib:.0f} MiB); other processes' growth, not blamed: "
        f"{worst.others_growth_mib:.0f} MiB ({describe_processes(worst.others)})"
        + ("; left running after the runs (now stopped): " + ", ".join(
            f"pid {p['pid']} ({p['command']})" for p in found) if found else "")
    )
