"""Workers sharing one GPU, end to end through pytest-xdist on the CPU: a fake GPU in the fingerprint, engines
whose need a conftest hook gives, the ledger and the start gate for real. Two workers are pinned to the one GPU
and share its ledger, an exclusive test never overlaps another, and a reservation that cannot fit fails its cell
with the reason after --gpucompat-gpu-wait instead of hanging."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

CONFTEST = textwrap.dedent("""
    import dataclasses

    import pytest_gpucompat.machine.fingerprint as fingerprint

    _collect = fingerprint.collect


    def _one_gpu(*args, **kwargs):  # a GPU of 1000 MiB, whatever this machine has
        fp = _collect(*args, **kwargs)
        gpu = fingerprint.GPU(index=0, name="NVIDIA H200", uuid="GPU-fake-0", memory_mib=1000)
        return dataclasses.replace(fp, gpus=(gpu,))


    fingerprint.collect = _one_gpu


    def pytest_gpucompat_gpu_need(config, spec, total_mib):
        return spec.params.get("mib")
""")

FAKE_ENGINE = textwrap.dedent("""
    from pytest_gpucompat.catalog.base import RunInfo


    class Engine:
        name = "fake"

        def start(self, spec):
            return RunInfo(engine="fake", version="0", device="cuda")

        def generate(self, prompts, max_tokens, top_n):
            return []

        def embed(self, prompts):
            return []

        def shutdown(self):
            pass
""")

HELPERS = textwrap.dedent("""
    import json, os, time

    import pytest

    from pytest_gpucompat import EngineSpec

    HERE = os.path.dirname(os.path.abspath(__file__))


    def engine(pool, mib, n):
        return pool.get(EngineSpec(engine="fake_engine:Engine", model="m", params={"isolated": False, "mib": mib,
                                                                                  "n": n}))


    def mark(name):
        open(os.path.join(HERE, name + ".mark"), "w").close()


    def wait_for(name, timeout=60.0):
        deadline = time.time() + timeout
        while not os.path.exists(os.path.join(HERE, name + ".mark")):
            assert time.time() < deadline, f"{name} never came: were the two tests given the same worker?"
            time.sleep(0.05)


    def record(request, began):
        row = {"test": request.node.nodeid, "start": began, "end": time.time(),
               "worker": os.environ.get("PYTEST_XDIST_WORKER"), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
               "ledger": os.environ.get("GPUCOMPAT_SHARED_RUN")}
        with open(os.path.join(HERE, "intervals.jsonl"), "a") as fh:
            fh.write(json.dumps(row) + "\\n")
""")

SHARED = HELPERS + textwrap.dedent("""

    @pytest.mark.gpucompat(engine="hf", params={"meet": [0, 1]})
    def test_meet(gpucompat_cell, gpucompat_pool, request):
        n = gpucompat_cell.params["meet"]
        engine(gpucompat_pool, 300, f"meet{n}")
        began = time.time()
        mark(f"meet{n}")  # both engines are up at once: two workers, one GPU
        wait_for(f"meet{1 - n}")
        time.sleep(0.3)
        record(request, began)


    @pytest.mark.gpucompat(engine="hf", params={"x": [0, 1]}, exclusive=True)
    def test_exclusive(gpucompat_cell, gpucompat_pool, request):
        began = time.time()
        engine(gpucompat_pool, 200, "own")  # its own engine starts inside its hold
        time.sleep(0.5)
        record(request, began)


    @pytest.mark.gpucompat(engine="hf", params={"n": [0, 1, 2, 3]})
    def test_shared(gpucompat_cell, gpucompat_pool, request):
        engine(gpucompat_pool, 300, gpucompat_cell.params["n"])
        began = time.time()
        time.sleep(0.3)
        record(request, began)
""")

STARVED = HELPERS + textwrap.dedent("""

    @pytest.mark.gpucompat(engine="hf", params={"hog": [0]})
    def test_hog(gpucompat_cell, gpucompat_pool):
        engine(gpucompat_pool, 800, "hog")
        mark("hog")
        wait_for("starved", timeout=60)


    @pytest.mark.gpucompat(engine="hf", params={"starve": [0]})
    def test_starved(gpucompat_cell, gpucompat_pool):
        wait_for("hog")
        try:
            engine(gpucompat_pool, 500, "starved")
        finally:
            mark("starved")
""")


@pytest.fixture
def shared_gpu(pytester: pytest.Pytester) -> pytest.Pytester:
    pytest.importorskip("xdist")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(fake_engine=FAKE_ENGINE)
    return pytester


def intervals(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "intervals.jsonl").read_text().splitlines()]


def test_two_workers_share_one_gpu_and_an_exclusive_test_runs_alone(shared_gpu: pytest.Pytester) -> None:
    shared_gpu.makepyfile(test_share=SHARED)
    result = shared_gpu.runpytest("--gpucompat", "-n", "2", "--gpucompat-workers-per-gpu", "2", "-p", "no:randomly",
                                  "--gpucompat-report", "r.json")
    result.assert_outcomes(passed=8)
    rows = intervals(shared_gpu.path)
    assert {r["worker"] for r in rows} == {"gw0", "gw1"}
    assert {r["gpu"] for r in rows} == {"GPU-fake-0"}  # both pinned to the one GPU
    assert len({r["ledger"] for r in rows}) == 1 and None not in {r["ledger"] for r in rows}
    exclusive = [r for r in rows if "test_exclusive" in r["test"]]
    assert len(exclusive) == 2
    for alone in exclusive:
        for other in rows:
            if other is not alone:
                assert other["end"] <= alone["start"] or other["start"] >= alone["end"], (alone, other)
    cells = {c["nodeid"].split("::")[1]: c for c in json.loads((shared_gpu.path / "r.json").read_text())["cells"]}
    assert cells["test_meet[hf-meet=0]"]["metrics"]["measured_under_sharing"] == 1.0
    assert "measured_under_sharing" not in cells["test_exclusive[hf-x=0]"]["metrics"]


def test_a_reservation_that_cannot_fit_fails_after_the_wait(shared_gpu: pytest.Pytester) -> None:
    shared_gpu.makepyfile(test_starve=STARVED)
    result = shared_gpu.runpytest("--gpucompat", "-n", "2", "--gpucompat-workers-per-gpu", "2", "-p", "no:randomly",
                                  "--gpucompat-gpu-wait", "1", "--gpucompat-report", "r.json")
    result.assert_outcomes(passed=1, failed=1)
    (starved,) = [c for c in json.loads((shared_gpu.path / "r.json").read_text())["cells"]
                  if "test_starved" in c["nodeid"]]
    assert starved["outcome"] == "failed"
    reason = starved["reason"]
    assert "no room on the GPU for fake_engine:Engine on m after waiting 1 s (--gpucompat-gpu-wait)" in reason
    assert "needs 500 MiB of GPU-fake-0, 100 of its 900 MiB budget free" in reason
    assert "fake_engine:Engine on m (pid" in reason


@pytest.mark.parametrize("gpu", [True, False], ids=["one-worker-per-gpu", "no-gpu"])
def test_without_sharing_nothing_changes(shared_gpu: pytest.Pytester, gpu: bool) -> None:
    """The default (one worker per GPU), or no GPU at all: no ledger, no gate, no figure added."""
    args = ["--gpucompat-workers-per-gpu", "1"]
    if not gpu:
        shared_gpu.makeconftest(CONFTEST.replace("fingerprint.collect = _one_gpu", ""))
        args = ["--gpucompat-workers-per-gpu", "2"]
    shared_gpu.makepyfile(test_share=SHARED.replace('wait_for(f"meet{1 - n}")', "pass"))
    result = shared_gpu.runpytest("--gpucompat", "-n", "2", "-p", "no:randomly", "--gpucompat-report", "r.json", *args)
    result.assert_outcomes(passed=8)
    assert {r["ledger"] for r in intervals(shared_gpu.path)} == {None}
    report = json.loads((shared_gpu.path / "r.json").read_text())
    assert not [c for c in report["cells"] if "measured_under_sharing" in c["metrics"]]


def test_memory_of_processes_outside_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget leaves out what strangers hold: the run's workers and what they started are not strangers."""
    import os
    import subprocess
    import sys
    import types

    from pytest_gpucompat.session.sharing import foreign_mib

    mib = 1024 * 1024
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # a process this worker started
    try:
        listing = [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=500 * mib),
                   types.SimpleNamespace(pid=child.pid, usedGpuMemory=2000 * mib),
                   types.SimpleNamespace(pid=1, usedGpuMemory=3000 * mib)]  # not ours
        fake = types.SimpleNamespace(
            nvmlInit=lambda: None, nvmlShutdown=lambda: None,
            nvmlDeviceGetHandleByUUID=lambda uuid: {"GPU-a": "a"}[uuid],
            nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=6000 * mib),
            nvmlDeviceGetComputeRunningProcesses=lambda h: listing)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        assert foreign_mib("GPU-a", [os.getpid()], reserved_mib=0.0) == pytest.approx(3500.0)  # 3000 + unlisted 500
        assert foreign_mib("GPU-missing", [os.getpid()], reserved_mib=0.0) is None
        # NVML's pids from another pid namespace: the run is taken to hold what it reserved
        listing[:] = [types.SimpleNamespace(pid=2**22 + 7, usedGpuMemory=6000 * mib)]
        assert foreign_mib("GPU-a", [os.getpid()], reserved_mib=4000.0) == pytest.approx(2000.0)
    finally:
        child.kill()
        child.wait()
    monkeypatch.delitem(sys.modules, "pynvml")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVML at all
    assert foreign_mib("GPU-a", [os.getpid()], reserved_mib=0.0) is None


def test_alone_an_exclusive_test_still_gets_the_gpu_to_itself(pytester: pytest.Pytester) -> None:
    """Without workers sharing the GPU, the run's idle engines (kept for the next test of their configuration)
    are stopped before an exclusive test, as they are when sharing: the memory suite's engines need their room."""
    pytester.makepyfile(test_alone='''
import pytest


@pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
def test_a_first(gpucompat_engine, gpucompat_pool):
    assert gpucompat_pool.live == 1


@pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
def test_b_shared(gpucompat_cell, gpucompat_pool):
    assert gpucompat_pool.live == 1  # kept: the next test of this configuration does not start it again


@pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]}, exclusive=True)
def test_c_exclusive(gpucompat_cell, gpucompat_pool):
    assert gpucompat_pool.live == 0
''')
    result = pytester.runpytest("--gpucompat", "-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(passed=3)


class _Node:
    """What xdist's scheduler asks of a worker: the indexes of the tests it is sent, in order."""

    def __init__(self, name: str) -> None:
        self.name, self.sent, self.shutting_down = name, [], False
        self.gateway = type("Gateway", (), {"id": name})()

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_exclusive_tests_are_dealt_out_after_every_shared_one(pytester: pytest.Pytester) -> None:
    """The order of an H200 run: the transformers float32 configuration had its two exclusive memory tests in the
    same work unit as its three shared ones, the largest unit, dealt out first: every other worker stalled behind
    them and gave its engines back. Now they are units of their own, last."""
    pytest.importorskip("xdist")
    from pytest_gpucompat.session.xdist_support import EXCLUSIVE_SCOPE, engine_scope_scheduling

    shared = [f"suites/test_smoke.py::test_{t}[tiny-qwen2-{e}]" for e in ("hf-dtype=float32", "vllm-dtype=bf16",
                                                                           "vllm-dtype=fp16") for t in ("a", "b")]
    memory = [f"suites/test_memory.py::test_{t}[tiny-qwen2-{e}]" for e in ("hf-dtype=float32", "vllm-dtype=bf16")
              for t in ("cycles", "finished")]
    collection = memory[:2] + shared + memory[2:]  # exclusive ones first, as a module order may have them
    config = pytester.parseconfig("--tx=2*popen")
    scheduler = engine_scope_scheduling()(config, None, lambda: dict.fromkeys(memory, "exclusive"))
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    assert all(scope.startswith(EXCLUSIVE_SCOPE) for scope in scheduler.workqueue)  # no shared unit waits
    assert all(collection[node.sent[0]] in shared for node in nodes)  # every worker starts on shared work
    assert set(shared) <= {collection[i] for node in nodes for i in node.sent}  # every shared test dealt out
    for node in nodes:  # as the shared tests finish, the exclusive units follow
        for index in list(node.sent):
            scheduler.mark_test_complete(node, index)
    order = [collection[i] for node in nodes for i in node.sent]
    assert sorted(order) == sorted(collection)
    for node in nodes:
        names = [collection[i] for i in node.sent]
        firsts = [n for n in names if n in memory]
        assert names[len(names) - len(firsts):] == firsts, names  # on each worker, after its shared tests
    # a test of one unit stays on one worker: the exclusive tests of one configuration together
    by_node = {collection[i]: node.name for node in nodes for i in node.sent}
    assert by_node[memory[0]] == by_node[memory[1]] and by_node[memory[2]] == by_node[memory[3]]


def test_without_exclusive_notes_the_scheduler_is_the_engine_scope_one(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    from pytest_gpucompat.session.xdist_support import engine_scope_scheduling

    config = pytester.parseconfig("--tx=2*popen")
    scheduler = engine_scope_scheduling()(config, None, dict)
    assert scheduler._split_scope("t.py::test_a[x]") == scheduler._split_scope("u.py::test_b[x]") == "[x]"


def test_tests_apart_are_units_of_their_own_dealt_out_first(pytester: pytest.Pytester) -> None:
    """Memory tests run whole engine lives in child processes and use no engine of their configuration's scope: each
    is a unit of its own, and the first dealt out (the run's longest), so shared scopes fill the workers beside them
    instead of the memory tests trailing at the end of the run."""
    pytest.importorskip("xdist")
    from pytest_gpucompat.session.xdist_support import APART_SCOPE, engine_scope_scheduling

    shared = [f"suites/test_smoke.py::test_{t}[tiny-qwen2-{e}]" for e in ("hf-dtype=float32", "vllm", "vllm-x=1")
              for t in ("a", "b")]
    memory = [f"suites/test_memory.py::test_{t}[tiny-qwen2-{e}]" for e in ("hf-dtype=float32", "vllm")
              for t in ("cycles", "finished")]
    collection = shared + memory  # the memory suite is collected last
    config = pytester.parseconfig("--tx=4*popen")
    scheduler = engine_scope_scheduling()(config, None, lambda: dict.fromkeys(memory, "apart"))
    nodes = [_Node(f"gw{i}") for i in range(4)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    assert scheduler._split_scope(memory[2]) == APART_SCOPE + memory[2] != scheduler._split_scope(memory[3])
    firsts = sorted(collection[node.sent[0]] for node in nodes)
    assert firsts == sorted(memory)  # each worker begins with one memory test
    for node in nodes:
        for index in list(node.sent):
            scheduler.mark_test_complete(node, index)
    assert sorted(collection[i] for node in nodes for i in node.sent) == sorted(collection)


FIRST_EXCLUSIVE = HELPERS + textwrap.dedent("""

    @pytest.mark.gpucompat(engine="hf", params={"n": [0]}, exclusive=True)
    def test_a_exclusive(gpucompat_cell, gpucompat_pool, request):
        began = time.time()
        time.sleep(0.2)
        record(request, began)


    @pytest.mark.gpucompat(engine="hf", params={"n": [0, 1, 2, 3]})
    def test_b_shared(gpucompat_cell, gpucompat_pool, request):
        engine(gpucompat_pool, 300, gpucompat_cell.params["n"])
        began = time.time()
        time.sleep(0.2)
        record(request, began)
""")


def test_an_exclusive_test_collected_first_runs_after_the_shared_ones(shared_gpu: pytest.Pytester) -> None:
    shared_gpu.makepyfile(test_first=FIRST_EXCLUSIVE)
    result = shared_gpu.runpytest("--gpucompat", "-n", "2", "--gpucompat-workers-per-gpu", "2", "-p", "no:randomly")
    result.assert_outcomes(passed=5)
    rows = intervals(shared_gpu.path)
    (alone,) = [r for r in rows if "test_a_exclusive" in r["test"]]
    mine = [r for r in rows if r["worker"] == alone["worker"] and r is not alone]
    assert mine and all(r["start"] < alone["start"] for r in mine), rows  # its worker's shared tests came first
