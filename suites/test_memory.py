"""Memory leaks: repeated engine create -> generate -> destroy cycles, and repeated whole-process runs.

Measured in child processes so each number belongs to one process: NVML memory of that process and its
descendants (engines keep their GPU memory in worker processes) and of the device, the torch allocator and
host RSS, sampled after settling (gc + empty_cache, re-query), and judged on the trend over cycles, not on
one sample (PyTorch's CudaMemoryLeakCheck method). On a machine without a GPU the cycles measure host RSS.
"""

from __future__ import annotations

import os

import pytest

from pytest_gpucompat import (
    MemorySample,
    create_destroy_cycles,
    engine_spec,
    fixed_prompts,
    leak_verdict,
    model_vocab_size,
    one_process_run,
    sample_memory,
    settle,
)

CYCLES = int(os.environ.get("GPUCOMPAT_MEMORY_CYCLES", "5"))
PROCESS_RUNS = int(os.environ.get("GPUCOMPAT_PROCESS_RUNS", "3"))
# What a finished process may leave on the device before it counts as left behind (driver bookkeeping jitters).
LEFT_BEHIND_TOLERANCE_MIB = 64.0
_FIELDS = set(MemorySample.__dataclass_fields__)


def _samples(rows):
    return [MemorySample(**{k: v for k, v in row.items() if k in _FIELDS}) for row in rows]


@pytest.mark.gpucompat(matrix="memory")
def test_create_destroy_cycles_do_not_leak(gpucompat_cell, gpucompat_model, gpucompat_record, gpucompat_isolated,
                                           gpucompat_record_series, request):
    spec = engine_spec(request.config, gpucompat_cell, gpucompat_model)
    prompts = fixed_prompts(2, 12, model_vocab_size(gpucompat_model), seed=5)
    rows = gpucompat_isolated(create_destroy_cycles, spec, CYCLES, prompts, 8)
    samples = _samples(rows)
    on_gpu = any(s.nvml_process_mib is not None for s in samples)
    metric = "nvml_process_mib" if on_gpu else "host_rss_mib"
    verdict = leak_verdict(samples, metric, warmup=1)
    gpucompat_record("leak_mib_per_cycle", verdict.slope_mib_per_cycle or 0.0)
    gpucompat_record("cycles", float(len(samples) - 1))
    gpucompat_record("cycle_s", sum(r["cycle_s"] for r in rows[1:]) / max(1, len(rows) - 1))
    for name in ("nvml_process_mib", "nvml_device_used_mib", "torch_reserved_mib", "host_rss_mib"):
        series = [getattr(s, name) for s in samples]  # cycle 0 (before the first engine) to the last
        if any(v is not None for v in series):
            gpucompat_record_series(name, series)
            gpucompat_record(f"{name}_after_last_cycle", [v for v in series if v is not None][-1])
    if on_gpu:
        device = leak_verdict(samples, "nvml_device_used_mib", warmup=1)
        gpucompat_record("device_leak_mib_per_cycle", device.slope_mib_per_cycle or 0.0)
    assert not verdict.leaked, f"{gpucompat_cell.engine}: {verdict.message}"


@pytest.mark.gpucompat(matrix="memory")
def test_finished_processes_leave_no_device_memory(gpucompat_cell, gpucompat_model, gpucompat_fingerprint,
                                                   gpucompat_record, gpucompat_isolated, request):
    """The seeds claim a "CUDA context leak": memory left on the GPU after processes exit (claim S55)."""
    if not gpucompat_fingerprint.gpus:
        pytest.skip("no GPU: device memory left behind by finished processes (claim S55) is a GPU measurement")
    spec = engine_spec(request.config, gpucompat_cell, gpucompat_model)
    prompts = fixed_prompts(2, 12, model_vocab_size(gpucompat_model), seed=6)
    before = settle(0).nvml_device_used_mib
    if before is None:
        pytest.skip("NVML gives no device memory figure on this GPU")
    after = []
    while_up = []
    for _ in range(PROCESS_RUNS):
        up = gpucompat_isolated(one_process_run, spec, prompts, 8)
        while_up.append(up.get("nvml_process_mib") or 0.0)
        after.append(sample_memory(0).nvml_device_used_mib)
    left = max(a - before for a in after)
    gpucompat_record("device_used_before_mib", before)
    gpucompat_record("process_mib_while_up", max(while_up))
    gpucompat_record("device_left_behind_mib", left)
    assert left <= LEFT_BEHIND_TOLERANCE_MIB, (
        f"{left:.0f} MiB stayed on the device after {PROCESS_RUNS} finished {gpucompat_cell.engine} processes "
        f"(before {before:.0f} MiB, after each: {', '.join(f'{a:.0f}' for a in after)})"
    )
