"""Real create/destroy cycles of the transformers engine on the CPU, with a helper process left running per cycle:
found although it escaped into a new session, named, judged a leak, and stopped at the end. Then the finished-process
runs (claim S55) with a fake device snapshot: their leftovers found, named and stopped, a recycled pid spared."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.catalog.base import EngineSpec
from pytest_gpucompat.checks.cycles import FinishedRuns, create_destroy_cycles, finished_process_runs, stop_left_running
from pytest_gpucompat.checks.leaks import CyclePolicy, memory_verdict
from pytest_gpucompat.checks.memory import MemorySample
from pytest_gpucompat.checks.ownership import DeviceSnapshot, GpuProcess, Scope, current_scope, owned_pids
from pytest_gpucompat.machine.procfs import start_time
from pytest_gpucompat.workload.models import build_tiny_model, fixed_prompts, model_vocab_size

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
ESCAPE = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(120)\nos._exit(0)\n"


def _leave_a_helper(cycle: int) -> None:
    subprocess.run([sys.executable, "-c", ESCAPE], check=True, timeout=30)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return build_tiny_model("qwen2", tmp_path_factory.mktemp("models"))


def _run(model: Path, on_cycle, policy: CyclePolicy):
    spec = EngineSpec("hf", str(model), {"dtype": "float32", "device": "cpu"})
    rows = create_destroy_cycles(spec, policy, fixed_prompts(2, 8, model_vocab_size(str(model)), seed=1), 4,
                                 on_cycle=on_cycle)
    fields = set(MemorySample.__dataclass_fields__)
    return rows, memory_verdict([MemorySample(**{k: v for k, v in r.items() if k in fields}) for r in rows])


def test_a_helper_left_per_cycle_is_found_named_and_stopped(model: Path) -> None:
    rows, verdict = _run(model, _leave_a_helper, CyclePolicy(5, 5, 60.0))
    assert "started_processes" in [v.metric for v in verdict.fired]
    assert [r["started_processes"] for r in rows] == [0, 1, 2, 3, 4, 5]
    left = rows[-1]["left_running"]
    assert len(left) == 5 and all("time.sleep(120)" in p["command"] for p in left)
    assert not any(_alive(p["pid"]) for p in left)  # stopped once measured
    assert "processes the engine started and left running" in verdict.message("hf")


def test_clean_cycles_stop_at_the_minimum_and_flag_nothing(model: Path) -> None:
    rows, verdict = _run(model, None, CyclePolicy(5, 12, 60.0))
    assert not verdict.leaked, verdict.message("hf")
    assert len(rows) - 1 >= 5 and rows[-1]["left_running"] == []
    assert os.environ.get("GPUCOMPAT_MEMORY_OWNER") is None


class FakeDevice:
    """NVML stand-in: 1000 MiB used before the runs, 40 MiB more (held by no process) after each, one stranger."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def __call__(self, device: int, scope: Scope) -> DeviceSnapshot:
        self.calls.append((device, scope.token))
        stranger = GpuProcess(1, 100.0 + 5 * (len(self.calls) - 1), "other", "neighbour")
        return DeviceSnapshot(1000.0 + 40 * (len(self.calls) - 1) + stranger.mib, (stranger,), listed=True)


def test_finished_runs_find_name_and_stop_what_they_left_running() -> None:
    device = FakeDevice()
    tokens: list[str | None] = []

    def run_one() -> dict[str, Any]:
        tokens.append(os.environ.get("GPUCOMPAT_MEMORY_OWNER"))
        _leave_a_helper(len(tokens))
        return {"nvml_process_mib": 300.0 + len(tokens), "torch_allocated_mib": None}

    runs = finished_process_runs(run_one, 2, 3, snapshot=device, recheck_s=0)
    assert runs.before is not None and runs.before.used_mib == 1100.0
    assert runs.while_up == [301.0, 302.0]
    assert [d for d, _ in device.calls] == [3, 3, 3]
    assert tokens[0] and {t for _, t in device.calls} == set(tokens) == {tokens[0]}  # one scope for all runs
    assert [x.unexplained_growth_mib for x in runs.lefts] == [40.0, 80.0]
    assert [x.others_growth_mib for x in runs.lefts] == [5.0, 10.0] and runs.lefts[0].ours_mib == 0.0
    assert len(runs.found) == 2 and all("time.sleep(120)" in p["command"] and p["pid"] > 1 for p in runs.found)
    assert not any(_alive(p["pid"]) for p in runs.found)  # stopped before the function returned
    assert os.environ.get("GPUCOMPAT_MEMORY_OWNER") is None


def test_memory_held_by_nobody_for_a_moment_is_looked_at_again_not_blamed() -> None:
    """On a shared GPU a neighbour's context being torn down is held by no listed process for a moment: the run is
    looked at again after a pause, and only what is still unexplained then is blamed; a real leftover stays blamed."""
    readings = iter([1000.0, 1400.0, 1000.0, 1400.0, 1400.0])  # before; run 1: transient; run 2: stays
    slept: list[float] = []

    def device(index: int, scope: Scope) -> DeviceSnapshot:
        return DeviceSnapshot(next(readings), (), listed=True)

    runs = finished_process_runs(lambda: {"nvml_process_mib": 1.0}, 2, 0, snapshot=device, recheck_s=1.5,
                                 sleep=slept.append)
    assert [x.blamed_mib for x in runs.lefts] == [0.0, 400.0]
    assert slept == [1.5, 1.5]


def _owned() -> list[int]:
    """This scope's live processes, asked of ownership directly (the helper's pid, to check it was stopped)."""
    scope = current_scope()
    assert scope is not None
    return owned_pids(scope)


def test_a_failing_run_still_stops_what_was_left_running() -> None:
    left: list[int] = []

    def run_one() -> dict[str, Any]:
        before = set(_owned())
        _leave_a_helper(1)
        left.extend(set(_owned()) - before)
        raise RuntimeError("engine crashed")

    with pytest.raises(RuntimeError):
        finished_process_runs(run_one, 3, snapshot=FakeDevice())
    assert len(left) == 1 and not _alive(left[0])


def test_without_a_device_figure_nothing_runs() -> None:
    runs = finished_process_runs(lambda: pytest.fail("ran without a device figure"), 3, snapshot=lambda d, s: None)
    assert runs == FinishedRuns(None, [], [], [])


def test_a_recycled_pid_is_not_killed() -> None:
    """A found entry whose start time is not the live process's: another process now has that pid."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        real = start_time(proc.pid)
        assert real is not None
        stop_left_running([{"pid": proc.pid, "start": real + 1, "command": "recycled"}], wait_s=0.2)
        assert proc.poll() is None and _alive(proc.pid)
        stop_left_running([{"pid": proc.pid, "start": real, "command": "ours"}])
        assert proc.wait(timeout=10) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

