"""Memory sampling without a GPU, and the pure leak verdict on made-up series."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Sequence

import pytest

from pytest_gpucompat.checks import leaks, memory, ownership
from pytest_gpucompat.checks.leaks import leak_verdict
from pytest_gpucompat.checks.memory import MemorySample, nvml_index, sample, settle


def series(values: Sequence[float | None], metric: str = "nvml_process_mib") -> list[MemorySample]:
    return [MemorySample(cycle=i, **{metric: v}) for i, v in enumerate(values)]


def test_host_sample_without_gpu() -> None:
    s = sample(None, cycle=3)
    assert s.cycle == 3 and s.pid == os.getpid()
    assert s.host_rss_mib is not None and s.host_rss_mib > 1.0
    assert s.nvml_process_mib is None and s.nvml_device_used_mib is None
    assert set(s.as_dict()) >= set(leaks.MEMORY_METRICS)


def test_settle_returns_a_sample() -> None:
    s = settle(None, cycle=1)
    assert s.cycle == 1 and s.host_rss_mib is not None


def test_rss_falls_back_to_resource(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_proc(*args: object, **kwargs: object) -> None:
        raise OSError("no /proc here")

    monkeypatch.setattr(memory, "open", no_proc, raising=False)
    value = memory.host_rss_mib()
    assert value is not None and value > 1.0


def test_steady_growth_is_a_leak() -> None:
    v = leak_verdict(series([500, 520, 540, 560, 580, 600]), warmup=1, threshold_mib_per_cycle=8)
    assert v.leaked
    assert v.slope_mib_per_cycle == pytest.approx(20.0)
    assert v.total_growth_mib == pytest.approx(80.0)
    assert v.message.startswith("leak: nvml_process_mib: slope +20.00 MiB/cycle")


def test_flat_and_noisy_is_not_a_leak() -> None:
    v = leak_verdict(series([900, 1000, 1001, 999, 1002, 1000, 1001]), warmup=1)
    assert not v.leaked and v.message.startswith("no leak")


def test_warm_up_cycle_is_not_blamed() -> None:
    values = [100, 1400, 1400, 1401, 1400]
    assert not leak_verdict(series(values), warmup=1).leaked
    counted = leak_verdict(series(values), warmup=0, threshold_mib_per_cycle=8)
    # counted in, the warm-up is a jump the message shows; the headline figure follows the verdict (no growth)
    assert counted.message.startswith("no steady growth (jumps, not a trend)") and not counted.leaked
    assert counted.slope_mib_per_cycle is not None and counted.slope_mib_per_cycle < 8


def test_one_jump_is_not_a_trend() -> None:
    v = leak_verdict(series([1000, 1000, 1000, 1200, 1200, 1200]), warmup=0, threshold_mib_per_cycle=8)
    assert v.slope_mib_per_cycle is not None and v.slope_mib_per_cycle > 8
    assert not v.leaked
    assert "jumps, not a trend" in v.message


def test_too_few_samples_and_missing_values() -> None:
    v = leak_verdict(series([1, 2, 3]), warmup=1)
    assert not v.leaked and v.slope_mib_per_cycle is None and "need 3" in v.message
    v = leak_verdict(series([10, None, 30, None, 50, 60], metric="host_rss_mib"), metric="host_rss_mib", warmup=0)
    assert v.cycles == 4 and v.slope_mib_per_cycle == pytest.approx(10.0)
    assert v.leaked  # 10 MiB/cycle, growth spread over the cycles

def test_staircase_growth_is_a_leak_but_one_jump_is_not() -> None:
    # NVML grows in 2 MiB steps: 1 MiB/cycle shows as +2 every other cycle
    assert leak_verdict(series([100, 102, 102, 104, 104, 106, 106, 108]), warmup=0).leaked
    assert not leak_verdict(series([100, 100, 100, 100, 140, 140, 140, 140]), warmup=0).leaked
    assert not leak_verdict(series([100.0, 100.03, 100.06, 100.08, 100.1, 100.12]), warmup=0).leaked
    with pytest.raises(ValueError, match="unknown memory metric"):
        leak_verdict(series([1, 2, 3, 4]), metric="vram")


def test_unordered_samples_are_sorted_by_cycle() -> None:
    samples = series([0, 10, 20, 30, 40])
    v = leak_verdict(list(reversed(samples)), warmup=1, threshold_mib_per_cycle=5)
    assert v.leaked and v.slope_mib_per_cycle == pytest.approx(10.0)


def test_nvml_index_follows_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert nvml_index(1) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert (nvml_index(0), nvml_index(1)) == (3, 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234")
    assert nvml_index(0) == 0


class _Proc:
    def __init__(self, pid: int, used: int | None) -> None:
        self.pid = pid
        self.usedGpuMemory = used


def _fake_pynvml(procs: list[_Proc]) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: ("handle", i),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=2048 * memory.MIB),
        nvmlDeviceGetComputeRunningProcesses=lambda h: procs,
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [],
    )


def test_nvml_process_memory_is_matched_on_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    me = os.getpid()
    other = 1  # init: never this process nor one of its descendants (me + 1 could be a helper process we started)
    procs = [_Proc(other, 10 * memory.MIB), _Proc(me, 300 * memory.MIB)]
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(procs))
    s = sample(0)
    assert s.nvml_process_mib == pytest.approx(300.0)
    assert s.nvml_device_used_mib == pytest.approx(2048.0)
    # listed: only init, which has no GPU open, so NVML's pid 1 is another namespace's: unknown, not zero (where
    # init's descriptors cannot be read, it is another user's process: then ours hold nothing)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([_Proc(other, 10 * memory.MIB)]))
    assert sample(0).nvml_process_mib == (None if ownership.uses_gpu(other) is False else 0.0)
    # nothing runs on the device: this process holds nothing
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([]))
    assert sample(0).nvml_process_mib == 0.0
    # a pid that is not in this PID namespace's /proc (containers): unknown, whoever asks
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml([_Proc(4 * 1024 * 1024 + 7, 64 * memory.MIB)]))
    assert sample(0).nvml_process_mib is None


def test_nvml_failure_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom() -> None:
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=boom))
    s = sample(0)
    assert s.nvml_process_mib is None and s.nvml_device_used_mib is None


def test_nvml_process_memory_includes_worker_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine's GPU memory often lives in its worker processes; a worker that outlives the engine is a leak."""
    import subprocess

    me = os.getpid()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert ownership.descends_from(worker.pid, me) and not ownership.descends_from(me, worker.pid)
        procs = [_Proc(me, 300 * memory.MIB), _Proc(worker.pid, 14_000 * memory.MIB)]
        monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(procs))
        assert sample(0).nvml_process_mib == pytest.approx(14_300.0)
        assert sample(0, pid=worker.pid).nvml_process_mib == pytest.approx(14_000.0)
    finally:
        worker.kill()
        worker.wait()
