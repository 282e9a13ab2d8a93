"""Compile once, then share (gpushare/first_start.py): the first start of a configuration fills its compile caches
and the other workers wait for it. The key comes from the engine descriptors; the gate is the run's ledger, tested
here with real processes (spawned, waiting on one another through the ledger file, one killed while it holds)."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
from test_sharing import CONFTEST as ONE_GPU_CONFTEST  # a fake GPU of 1000 MiB in the fingerprint

from pytest_gpucompat.catalog.params import compile_key
from pytest_gpucompat.gpushare.first_start import FirstStarts, Turn
from pytest_gpucompat.gpushare.ledger import FirstStart, Ledger, State, holder_id

# ---------------------------------------------------------------------------------------------- the key


def test_the_key_is_engine_release_model_and_the_settings_that_key_the_caches() -> None:
    base = {"dtype": "bfloat16", "kv_cache_dtype": "auto", "gpu_memory_utilization": 0.2, "seed": 0}
    key = compile_key("vllm", "/models/tiny", base)
    assert key is not None and key.startswith("vllm ") and "/models/tiny" in key
    assert "dtype='bfloat16'" in key and "gpu_memory_utilization" not in key and "seed" not in key
    # memory sizes, the seed and the harness's bookkeeping do not key the caches: the same configuration
    sized = {**base, "gpu_memory_utilization": 0.08, "kv_cache_memory_bytes": 2**30, "seed": 3,
             "harness_set": {"kv_cache_memory_bytes": "shared"}, "start_timeout_s": 5, "isolated": True}
    assert compile_key("vllm", "/models/tiny", sized) == key
    # what is compiled does change with the dtypes, the model, the environment
    assert compile_key("vllm", "/models/tiny", {**base, "kv_cache_dtype": "fp8"}) != key
    assert compile_key("vllm", "/models/other", base) != key
    assert compile_key("vllm", "/models/tiny", {**base, "env": {"VLLM_X": "1"}}) != key
    # an alias is the engine it names
    assert compile_key("sglang", "/m", {"dtype": "bfloat16", "mem_fraction_static": 0.1}) == \
        compile_key("sglang", "/m", {"dtype": "bfloat16", "mem_fraction_static": 0.3})


def test_no_key_where_nothing_is_compiled_or_nothing_is_declared() -> None:
    assert compile_key("vllm", "/m", {"enforce_eager": True}) is None  # no graph compiled: waits for nobody
    assert compile_key("vllm", "/m", {"enforce_eager": False}) is not None
    assert compile_key("sglang", "/m", {"disable_cuda_graph": True}) is None  # compiles at its first request
    assert compile_key("hf", "/m", {"dtype": "float32"}) is None  # transformers declares no compile cache
    assert compile_key("my_engine:Factory", "/m", {}) is None  # an import path: unknown, nothing declared
    assert compile_key("no-such-engine", "/m", {}) is None


def test_an_unknown_setting_keys_the_caches() -> None:
    """A setting the descriptor does not name is taken to change what is compiled: a needless wait at worst, never
    a start from caches filled for another configuration."""
    assert compile_key("vllm", "/m", {"new_option": 1}) != compile_key("vllm", "/m", {"new_option": 2})


# ---------------------------------------------------------------------------------------------- the ledger


def test_first_starts_survive_the_ledger_file_and_a_strangers_rows_are_dropped() -> None:
    state = State(first_starts={"k": FirstStart("1:2", "vllm on m", 5.0, filled=True)})
    assert State.from_json(state.to_json()).first_starts == state.first_starts
    bad = json.dumps({"first_starts": {"a": {"holder": "1:2"}, "b": "x", "c": {"holder": "3:4", "what": "w",
                                                                               "since": 1, "filled": False}}})
    assert list(State.from_json(bad).first_starts) == ["c"]


def test_a_dead_workers_unfinished_first_start_is_reclaimed_a_filled_one_kept() -> None:
    state = State(first_starts={"running": FirstStart("dead", "w", 0.0), "done": FirstStart("dead", "w", 0.0, True),
                                "live": FirstStart("live", "w", 0.0)})
    state.reclaim(lambda holder: holder != "dead")
    assert set(state.first_starts) == {"done", "live"}


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def _gate(tmp_path: Path, holder: str, clock: _Clock, timeout_s: float = 10.0, said: list[str] | None = None
          ) -> FirstStarts:
    ledger = Ledger(tmp_path, holder, clock=clock, sleep=clock.sleep, alive=lambda h: True)
    return FirstStarts(ledger, timeout_s, clock=clock, sleep=clock.sleep, say=None if said is None else said.append)


def test_the_first_claims_the_others_wait_and_a_filled_key_waits_for_nobody(tmp_path: Path) -> None:
    clock = _Clock()
    said: list[str] = []
    a, b = _gate(tmp_path, "1:1", clock), _gate(tmp_path, "2:2", clock, said=said)
    with a.first("k", "vllm on m") as fill:
        assert a.turns == [Turn("k", first=True)]
        turn = b.claim("k", "vllm on m")  # held by a, which never finishes here: b gives up after its timeout
        assert (turn.first, turn.gave_up, turn.waited_for) == (False, True, "vllm on m (pid 1)")
        assert turn.waited_s >= 10.0
        assert said == ["vllm on m waits for the first start of its configuration to fill the compile caches: "
                        "vllm on m (pid 1), up to 10 s"]  # one line, not one per poll
        fill()  # a's child said its first engine has generated: the caches are filled before the block ends
        assert b.claim("k", "vllm on m") == Turn("k", first=False)
    assert Ledger(tmp_path, "3:3").snapshot().first_starts["k"].filled


def test_a_first_start_that_fails_hands_the_key_to_the_next(tmp_path: Path) -> None:
    clock = _Clock()
    a, b = _gate(tmp_path, "1:1", clock), _gate(tmp_path, "2:2", clock)
    with pytest.raises(RuntimeError), a.first("k", "vllm on m"):
        raise RuntimeError("engine failed at start")
    assert "k" not in Ledger(tmp_path, "3:3").snapshot().first_starts
    assert b.claim("k", "vllm on m").first


def test_a_start_without_a_key_waits_for_nobody(tmp_path: Path) -> None:
    clock = _Clock()
    gate = _gate(tmp_path, "1:1", clock)
    with gate.first(None, "hf on m") as fill:
        fill()
    assert gate.turns == [] and Ledger(tmp_path, "3:3").snapshot().first_starts == {}


# ---------------------------------------------------------------------------------------------- real processes


def _worker(directory: str, key: str, hold_s: float, out: str) -> None:
    """One worker process: wait for (or run) the first start of ``key``; the first holds it ``hold_s`` seconds."""
    gate = FirstStarts(Ledger(directory), timeout_s=60.0)
    asked = time.time()
    with gate.first(key, "engine on m"):
        began = time.time()
        if gate.turns[0].first:
            time.sleep(hold_s)
        ended = time.time()
    Path(out).write_text(json.dumps({"pid": os.getpid(), "asked": asked, "began": began, "ended": ended,
                                     **gate.turns[0].to_dict()}))


def _run(tmp_path: Path, n: int, key: str, hold_s: float) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"out-{i}.json" for i in range(n)]
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), key, hold_s, str(o))) for o in outs]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    return [json.loads(o.read_text()) for o in outs]


def test_three_processes_one_compiles_the_others_start_after_it(tmp_path: Path) -> None:
    rows = _run(tmp_path, 3, "vllm 0.26.0 on m {}", hold_s=2.0)
    first = [r for r in rows if r["first_start"]]
    assert len(first) == 1, rows
    (fill,) = first
    for row in rows:
        if row is fill:
            continue
        if row["asked"] < fill["ended"]:  # it came while the first start ran: it waited for it to end
            assert row["began"] >= fill["ended"] - 0.05, (row, fill)
            assert row["waited_s"] > 0 and row["waited_for"].startswith("engine on m (pid ")
        assert not row["first_start"]
    assert Ledger(tmp_path).snapshot().first_starts["vllm 0.26.0 on m {}"].filled


def _hold_forever(directory: str, key: str, ready: str) -> None:
    gate = FirstStarts(Ledger(directory), timeout_s=60.0)
    with gate.first(key, "engine on m"):
        Path(ready).touch()
        time.sleep(600)


def test_a_killed_first_start_is_reclaimed_and_the_waiter_runs_its_own(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready = tmp_path / "ready"
    holder = ctx.Process(target=_hold_forever, args=(str(tmp_path), "k", str(ready)))
    holder.start()
    try:
        deadline = time.time() + 60
        while not ready.exists():
            assert time.time() < deadline and holder.is_alive()
            time.sleep(0.05)
        assert Ledger(tmp_path).snapshot().first_starts["k"].holder == holder_id(holder.pid)
        waiter = FirstStarts(Ledger(tmp_path), timeout_s=30.0)
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        turn = waiter.claim("k", "engine on m")
        assert turn.first and not turn.gave_up  # the dead holder's claim was dropped, not waited out
    finally:
        if holder.is_alive():
            holder.kill()


# ---------------------------------------------------------------------------------------------- a packed run

# Harness test: transformers compiles nothing at start, so the real hf adapter is registered here under a descriptor
# that declares a compile cache (the declaration is the test's; the engine, its child processes, the workers, the
# ledger and the report are real). One worker runs whole engine lives in a child process (a memory test's cycles),
# the other asks its pool for the same configuration meanwhile: it waits for the child's first engine, not for the
# whole test, and both cells say so in the report.
COMPILING_CONFTEST = ONE_GPU_CONFTEST + '''
import compiling_engine  # noqa: E402,F401  the registration, which the engine lives' child imports too
'''

COMPILING_ENGINE = '''
import os

from pytest_gpucompat import create_destroy_cycles
from pytest_gpucompat.catalog.registry import CompileCache, EngineDescriptor, GpuMemory, register
from pytest_gpucompat.engines.hf import HFEngine

class MarkingHF(HFEngine):
    """The hf engine, saying when a start of it begins: by then its worker holds the configuration's first start."""

    def start(self, spec):
        open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "starting.mark"), "w").close()
        return super().start(spec)


register(EngineDescriptor(name="hf-compiling", adapter="compiling_engine:MarkingHF",
                          distribution="transformers", module="transformers",
                          gpu_memory=GpuMemory(overhead_mib=100.0), compile_cache=CompileCache(ignores=("seed",))))


def cycles(*args):
    return create_destroy_cycles(*args)
'''

PACKED_TESTS = '''
import json, os, time

import pytest

from compiling_engine import cycles
from pytest_gpucompat import EngineSpec, fixed_prompts

HERE = os.path.dirname(os.path.abspath(__file__))
SPEC = EngineSpec(engine="hf-compiling", model=MODEL, params={"dtype": "float32", "device": "cpu"})


def mark(name):
    open(os.path.join(HERE, name + ".mark"), "w").close()


def wait_for(name, timeout=120.0):
    deadline = time.time() + timeout
    while not os.path.exists(os.path.join(HERE, name + ".mark")):
        assert time.time() < deadline, f"{name} never came: were the two tests given the same worker?"
        time.sleep(0.05)


def record(name, **row):
    with open(os.path.join(HERE, name + ".json"), "w") as fh:
        json.dump(row, fh)


@pytest.mark.gpucompat(engine="hf", params={"lives": [0]})
def test_lives(gpucompat_cell, gpucompat_isolated):
    mark("lives")
    began = time.time()
    gpucompat_isolated(cycles, SPEC, 8, fixed_prompts(2, 4, 64, seed=1), 2)
    record("lives", began=began, ended=time.time())


@pytest.mark.gpucompat(engine="hf", params={"pool": [0]})
def test_pool(gpucompat_cell, gpucompat_pool):
    import transformers  # noqa: F401  this worker's first imports are not the wait measured here
    wait_for("starting")  # the other worker's child starts its first engine: it holds the first start
    asked = time.time()
    gpucompat_pool.get(EngineSpec(SPEC.engine, SPEC.model, {**SPEC.params, "isolated": False}))  # its worker knows it
    record("pool", asked=asked, started=time.time())
'''


def test_a_packed_run_compiles_a_configuration_once_and_the_report_says_who_waited(
        pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("xdist")
    pytest.importorskip("transformers")
    from pytest_gpucompat.workload.models import build_tiny_model

    model = build_tiny_model("qwen2", tmp_path_factory.mktemp("models"))
    pytester.makeconftest(COMPILING_CONFTEST)
    pytester.makepyfile(compiling_engine=COMPILING_ENGINE)
    pytester.makepyfile(test_packed=f"MODEL = {str(model)!r}\n" + PACKED_TESTS)
    result = pytester.runpytest_subprocess("--gpucompat", "-n", "2", "--gpucompat-workers-per-gpu", "2",
                                           "-p", "no:randomly", "--gpucompat-report", "r.json")
    result.assert_outcomes(passed=2)
    lives = json.loads((pytester.path / "lives.json").read_text())
    pool = json.loads((pytester.path / "pool.json").read_text())
    cells = {c["nodeid"].split("::")[1].partition("[")[0]: c for c in
             json.loads((pytester.path / "r.json").read_text())["cells"]}
    first, waiter = cells["test_lives"], cells["test_pool"]
    (filled,) = first["compile_caches"]
    assert filled["first_start"] is True and "waited_for" not in filled  # it waited for nobody
    assert filled["configuration"].startswith("hf-compiling ") and str(model) in filled["configuration"]
    (waited,) = waiter["compile_caches"]
    assert waited["first_start"] is False and waited["configuration"] == filled["configuration"]
    assert waited["waited_for"].startswith("hf-compiling on ") and "gave_up_waiting" not in waited
    assert waited["waited_s"] > 0.1
    # it waited for the child's first engine, not for the whole test: its wait ended while later cycles ran
    assert pool["asked"] + waited["waited_s"] < lives["ended"], (pool, lives, waited)
    assert waiter["metrics"]["compile_wait_s"] == pytest.approx(waited["waited_s"], abs=1e-3)
