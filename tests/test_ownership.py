"""Which processes a memory test started, found wherever they were re-parented; who holds the device's memory."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pytest_gpucompat.checks.ownership import (
    DeviceSnapshot,
    GpuProcess,
    Scope,
    carries_token,
    left_behind,
    owned_pids,
    owner_of,
    owner_scope,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# Starts a grandchild in a new session and exits at once: the grandchild is re-parented away from us.
ESCAPE = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    print(os.getpid(), flush=True)\n"
    "    null = os.open(os.devnull, os.O_RDWR)\n"
    "    os.dup2(null, 1); os.dup2(null, 2)\n"
    "    time.sleep(60)\n"
    "    os._exit(0)\n"
    "os._exit(0)\n"
)


def _escaped_helper() -> int:
    out = subprocess.run([sys.executable, "-c", ESCAPE], capture_output=True, text=True, timeout=30)
    return int(out.stdout.split()[0])


def test_a_helper_that_escaped_is_still_ours() -> None:
    with owner_scope() as scope:
        pid = _escaped_helper()
    try:
        time.sleep(0.1)
        assert carries_token(pid, scope.token)
        assert pid in owned_pids(scope)
        assert owner_of(pid, scope) == "ours"
    finally:
        os.kill(pid, 9)
    assert "GPUCOMPAT_MEMORY_OWNER" not in os.environ or os.environ["GPUCOMPAT_MEMORY_OWNER"] != scope.token


def test_processes_from_before_and_from_others_are_not_ours() -> None:
    neighbour = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                                 env={k: v for k, v in os.environ.items() if k != "GPUCOMPAT_MEMORY_OWNER"})
    try:
        time.sleep(1.1)  # a clock tick or more after the neighbour started
        with owner_scope() as scope:
            stranger = Scope("not-our-token", 2**22 + 11, scope.since)  # a root nothing descends from
            assert owner_of(1, scope) in ("before", "unknown")
            # our child by descent, but started before the scope: not the test's (on a shared GPU, a worker's idle
            # engine from an earlier cell must be neither blamed nor stopped by a memory test run beside it)
            assert neighbour.pid not in owned_pids(scope)
            assert owner_of(neighbour.pid, scope) in ("before", "unknown")
            assert owner_of(neighbour.pid, stranger) in ("before", "unknown")  # and someone else's is "before" too
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True,
                                     env={k: v for k, v in os.environ.items() if k != "GPUCOMPAT_MEMORY_OWNER"})
            try:
                assert child.pid in owned_pids(scope)  # started under the scope: ours by descent alone
            finally:
                child.kill()
                child.wait()
        assert owner_of(2**22 + 11, scope) == "unknown"  # not in this namespace
    finally:
        neighbour.kill()
        neighbour.wait()


def _snap(used: float, *procs: tuple[int, float, str]) -> DeviceSnapshot:
    return DeviceSnapshot(used, tuple(GpuProcess(pid, mib, owner, f"cmd{pid}") for pid, mib, owner in procs), True)


def test_left_behind_blames_only_ours_and_memory_no_process_holds() -> None:
    before = _snap(1000, (10, 400, "before"), (20, 100, "ours"))
    # our old process grew by 50, a helper of ours holds 300, the neighbour grew by 200, 30 MiB nobody holds
    after = _snap(1680, (10, 600, "before"), (20, 150, "ours"), (30, 300, "ours"))
    left = left_behind(before, after)
    assert left.ours_mib == 350 and [p.pid for p in left.ours] == [20, 30]
    assert left.others_growth_mib == 200
    assert left.unexplained_growth_mib == pytest.approx((1680 - 1050) - (1000 - 500))
    assert left.blamed_mib == pytest.approx(350 + max(0.0, left.unexplained_growth_mib))
    # NVML that lists nothing cannot attribute: unexplained growth is not counted against us
    unlisted = DeviceSnapshot(5000, (), False)
    assert left_behind(_snap(1000), unlisted).blamed_mib == 0.0


def test_a_tenant_allocating_between_reads_is_not_memory_no_process_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from pytest_gpucompat.checks import ownership

    neighbour = {"mib": 1000.0}
    calls = {"n": 0}

    def processes(handle):  # the neighbour grows by 64 MiB between the first two reads only
        calls["n"] += 1
        if calls["n"] == 2:
            neighbour["mib"] += 64
        return [types.SimpleNamespace(pid=1, usedGpuMemory=int(neighbour["mib"] * ownership.MIB))]

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=int((neighbour["mib"] + 500) * ownership.MIB)),
        nvmlDeviceGetComputeRunningProcesses=processes)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with owner_scope() as scope:
        snap = ownership.device_snapshot(0, scope)
    assert snap is not None and snap.listed
    assert snap.unexplained_mib == pytest.approx(500.0)  # the device's own reserve, not the neighbour's growth
