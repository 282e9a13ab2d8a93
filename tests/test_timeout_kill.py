"""pytest-timeout stopping a cell inside an engine start (its signal method raises in the wait): the harness's
limit ran out, no engine failed. The cell says so; an isolated engine's child is stopped, so the next cells start
afresh; after an in-process start was stopped, the cells this process runs next say its state is unknown."""

from __future__ import annotations

import json
import os

import pytest
from conftest import requires

from pytest_gpucompat.fixtures import timeout_kill_text

ENGINES = """
import os, time
from pytest_gpucompat.catalog.base import RunInfo

class Slow:
    name = "slow"

    def start(self, spec):
        with open(f"slow-{os.getpid()}.pid", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)

    def shutdown(self):
        pass

class Quick:
    name = "quick"

    def start(self, spec):
        return RunInfo(engine="quick", version="1", device="cpu")

    def shutdown(self):
        pass
"""

TESTS = """
import pytest

@pytest.mark.gpucompat(engine="engines_here:Quick", params={"isolated": [False]})
def test_0_first(gpucompat_cell, gpucompat_engine):  # the tiny model is built here, with no time limit
    pass

@pytest.mark.timeout(4)
@pytest.mark.gpucompat(engine="engines_here:Slow", params={"isolated": [ISOLATED]})
def test_a_start(gpucompat_cell, gpucompat_engine):
    pass

@pytest.mark.gpucompat(engine="engines_here:Quick", params={"isolated": [False]})
def test_b_after(gpucompat_cell, gpucompat_engine):
    pass
"""


@pytest.mark.parametrize("isolated", [True, False])
def test_a_timeout_in_an_engine_start_is_a_harness_error(pytester, monkeypatch, isolated):
    requires("pytest_timeout")
    pytester.makepyfile(engines_here=ENGINES, test_cells=TESTS.replace("ISOLATED", str(isolated)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pytester.path),
                                                                    os.environ.get("PYTHONPATH")])))
    result = pytester.runpytest_subprocess("--gpucompat", "--gpucompat-report", "r.json",
                                           "-p", "no:randomly", "-p", "no:cacheprovider", timeout=120)
    cells = {c["test"].rsplit("::", 1)[1]: c for c in json.loads((pytester.path / "r.json").read_text())["cells"]}
    killed, after = cells["test_a_start"], cells["test_b_after"]
    assert killed["outcome"] == "error", killed
    assert killed["reason"].startswith("harness: pytest-timeout killed the test during the engines_here:Slow engine "
                                       "start after 4 s (limit 4.0s)"), killed["reason"]
    assert "engine failed" not in killed["reason"] and "log_tail" not in killed or not killed["log_tail"]
    assert after["outcome"] == "passed"
    if isolated:
        assert "its engine process was stopped" in killed["reason"]
        assert "harness_state" not in after
        pid = int(next(pytester.path.glob("slow-*.pid")).read_text())
        with pytest.raises(ProcessLookupError):  # the child that was starting is gone, not left holding the GPU
            os.kill(pid, 0)
    else:
        assert "what its start left here is unknown" in killed["reason"]
        assert after["harness_state"].startswith("an earlier engines_here:Slow start in this process was stopped")
        result.stdout.fnmatch_lines(["1 cell(s) ran in a process whose state is unknown: an earlier engines_here*"])
    result.stdout.fnmatch_lines(["  ERROR test_cells.py::test_a_sta*: harness: pytest-tim*"])


def test_timeout_kill_text_reads_only_pytest_timeouts_message():
    assert timeout_kill_text("Timeout (>5.0s) from pytest-timeout.", "vllm", 5.2, False) == (
        "harness: pytest-timeout killed the test during the vllm engine start after 5 s (limit 5.0s); its engine "
        "process was stopped, the next cells start afresh")
    assert timeout_kill_text("assert 1 == 2", "vllm", 1.0, False) is None
    assert timeout_kill_text("Timeout waiting for the GPU", "vllm", 1.0, True) is None
