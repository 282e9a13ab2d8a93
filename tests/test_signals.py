"""A run stopped by a signal: SIGINT and SIGTERM (what CI systems and `timeout` send first) leave a report marked
interrupted and no engine process; SIGKILL of pytest or of an xdist worker leaves no engine process either.

Each test runs pytest in a subprocess (its own session, so signals reach only it) on a small test file whose
isolated child starts a grandchild and sleeps; the pids come back through a file, and /proc says who is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _procs import default_signals, wait_dead

SLEEPING_RUN = """
import os, subprocess, sys, time
import pytest

PIDS = {pids!r}


def sleeper():
    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(PIDS + ".tmp", "w") as fh:
        fh.write(f"{{os.getpid()}} {{grandchild.pid}}\\n")
    os.replace(PIDS + ".tmp", PIDS)
    time.sleep(600)


@pytest.mark.gpucompat(engine="hf", params={{"n": [1]}})
def test_first(gpucompat_cell):
    pass


@pytest.mark.gpucompat(engine="hf", params={{"n": [2]}})
def test_sleeps(gpucompat_cell, gpucompat_isolated):
    gpucompat_isolated(sleeper)
"""


def _start_run(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    """pytest on SLEEPING_RUN, once its isolated child and the child's own subprocess are up: their pids."""
    pids = tmp_path / "pids"
    (tmp_path / "test_sleeping_run.py").write_text(SLEEPING_RUN.format(pids=str(pids)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--gpucompat", "--gpucompat-report", "r.json",
         "--gpucompat-log-dir", "logs", "test_sleeping_run.py", *args],  # a killed run cannot clean up its logs
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 120  # polled: a loaded machine may take long to start pytest and its child
    while not pids.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the run did not reach its isolated child: {proc.communicate()[0].decode()[-2000:]}")
        time.sleep(0.05)
    return proc, [int(p) for p in pids.read_text().split()]


def _finish(proc: subprocess.Popen[bytes], timeout: float = 20) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("pytest did not stop after the signal")
    return out.decode(errors="replace")


def _none_left(pids: list[int]) -> None:
    left = [p for p in pids if not wait_dead(p)]
    for pid in left:  # do not leave them to the next test either
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes started by the run are still alive: {left}"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_writes_the_report_and_stops_the_engines(tmp_path: Path, sig: signal.Signals) -> None:
    proc, pids = _start_run(tmp_path)
    proc.send_signal(sig)
    out = _finish(proc, timeout=120)  # the busy child sleeps 600 s: a shutdown that waited for it never ends here
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out[-2000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["interrupted"] is True
    cells = [(c["outcome"], c.get("reason")) for c in report["cells"]]
    assert cells == [("passed", None), ("error", "did not finish: the run was stopped before the cell ended")], cells
    _none_left(pids)


def test_sigkill_of_pytest_takes_its_engine_children_along(tmp_path: Path) -> None:
    proc, pids = _start_run(tmp_path)
    proc.kill()
    proc.wait(timeout=60)
    _none_left(pids)  # no report is possible (but for the last checkpoint); no process may be left


def test_sigkill_of_an_xdist_worker_takes_its_engine_children_along(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    proc, pids = _start_run(tmp_path, "-n", "1")
    with open(f"/proc/{pids[0]}/stat") as fh:
        worker = int(fh.read().rsplit(")", 1)[1].split()[1])  # the child's parent: the worker
    assert worker != proc.pid
    os.kill(worker, signal.SIGKILL)
    _none_left(pids)
    out = _finish(proc, timeout=30)
    report = json.loads((tmp_path / "r.json").read_text())
    outcomes = {c["nodeid"].split("::")[1]: c["outcome"] for c in report["cells"]}
    assert outcomes == {"test_first[hf-n=1]": "passed", "test_sleeps[hf-n=2]": "failed"}, out[-2000:]


def test_sigterm_handler_is_restored_after_the_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    before = signal.getsignal(signal.SIGTERM)
    pytester.runpytest("--gpucompat").assert_outcomes(passed=1)
    assert signal.getsignal(signal.SIGTERM) is before
