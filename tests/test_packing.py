"""Cells sharing a GPU, the pure part: what each engine needs, what fits, who waits for whom."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gpucompat.catalog import registry
from pytest_gpucompat.gpushare.packing import (
    Request,
    auto_workers_per_gpu,
    blocker,
    budget_mib,
    cache_mib,
    engine_need,
    first_waiter,
    gpu_of_worker,
    load_dtype,
    shared_since,
)
from pytest_gpucompat.session.xdist_support import engine_scope

H200 = 143771.0


def test_vllm_needs_its_utilization_of_the_whole_gpu() -> None:
    need = engine_need("vllm", {"gpu_memory_utilization": 0.08}, H200, None)
    assert need.mib == pytest.approx(0.08 * H200 + 512)
    assert "gpu_memory_utilization 0.08" in need.why


def test_defaults_are_the_adapters_own() -> None:
    """The descriptor's default fraction is what the adapter starts the engine with: its declared harness default."""
    from pytest_gpucompat.engines.deviations import harness_settings
    from pytest_gpucompat.engines.trtllm import llm_kwargs

    memory = {d.name: d.gpu_memory for d in registry.descriptors()}
    assert memory["vllm"].default == harness_settings("vllm", {})["gpu_memory_utilization"]
    assert memory["sglang"].default == harness_settings("sglang", {})["mem_fraction_static"]
    assert memory["tensorrt-llm"].default == llm_kwargs("m", {})[1]["free_gpu_memory_fraction"]
    for d in registry.descriptors():  # every memory setting the ledger reads has the harness's declared default
        if d.gpu_memory is not None and d.gpu_memory.params:
            assert d.harness_defaults[d.gpu_memory.params[0]].value == d.gpu_memory.default, d.name
    assert engine_need("vllm", {}, 1000.0, None).mib == pytest.approx(0.2 * 1000 + 512)


def test_sglang_and_trtllm() -> None:
    assert engine_need("sglang", {"mem_fraction_static": 0.1}, H200, None).mib == pytest.approx(0.1 * H200 + 1024)
    # TensorRT-LLM: the weights, then its fraction of what they leave
    need = engine_need("trtllm", {"kv_cache_free_gpu_memory_fraction": 0.5}, 10000.0, 2000.0)
    assert need.mib == pytest.approx(2000 + 0.5 * 8000 + 1024)
    assert engine_need("tensorrt-llm", {}, 10000.0, None).mib is None  # weights unknown: the whole GPU


def test_hf_needs_its_weights_in_the_cells_dtype() -> None:
    assert engine_need("hf", {"dtype": "float32"}, H200, 300.0).mib == pytest.approx(300 + 1024)
    assert engine_need("hf", {"device": "cpu"}, H200, None).mib == 0.0
    assert load_dtype("hf", {}) == "float32"
    assert load_dtype("hf", {"dtype": "fp8"}) == "bfloat16"  # quantized after loading in bfloat16
    assert load_dtype("vllm", {}) is None  # the checkpoint's own
    assert load_dtype("vllm", {"dtype": "bf16"}) == "bfloat16"


def test_openai_needs_its_servers_share() -> None:
    server = engine_need("openai", {"server": "vllm", "gpu_memory_utilization": 0.08}, H200, None)
    assert server.mib == pytest.approx(0.08 * H200 + 512)
    default = engine_need("openai", {}, 1000.0, None)  # vllm serve with the server's default 0.2
    assert default.mib == pytest.approx(0.2 * 1000 + 512)
    assert engine_need("openai", {"endpoint": "http://x:8000"}, H200, None).mib == 0.0
    assert engine_need("openai", {"server_command": "my-server {port}"}, H200, None).mib is None


def test_unknown_needs_take_the_whole_gpu() -> None:
    assert engine_need("my.engines:Factory", {}, H200, None).mib is None
    assert engine_need("no-such-engine", {}, H200, None).mib is None
    assert engine_need("vllm", {"gpu_memory_utilization": "lots"}, H200, None).mib is None


def test_budget() -> None:
    assert budget_mib(1000.0, 0.9, None) == 900.0
    assert budget_mib(1000.0, 0.9, 300.0) == 600.0
    assert budget_mib(1000.0, 0.9, 5000.0) == 0.0


def req(id: str, holder: str, mib: float | None, ticket: int, held: bool = True, gpus: tuple[str, ...] = ("G",),
        since: float = 0.0) -> Request:
    return Request(id=id, holder=holder, gpus=gpus, mib=mib, what=id, ticket=ticket, held=held, since=since)


def test_fits_beside_what_is_held() -> None:
    held = [req("a", "1:1", 400.0, 1), req("b", "2:2", 300.0, 2)]
    assert blocker(held, req("c", "3:3", 200.0, 3, held=False), {"G": 900.0}) is None
    reason = blocker(held, req("c", "3:3", 250.0, 3, held=False), {"G": 900.0})
    assert reason is not None and "needs 250 MiB of G, 200 of its 900 MiB budget free" in reason
    assert "pid 1" in reason and "pid 2" in reason
    assert blocker(held, req("c", "3:3", 5000.0, 3, held=False), {"G": None}) is None  # no budget known
    assert blocker(held, req("c", "3:3", 250.0, 3, held=False, gpus=("H",)), {"G": 900.0, "H": 900.0}) is None


def test_queue_order_keeps_a_large_request_from_starving() -> None:
    held = req("a", "1:1", 600.0, 1)
    big = req("big", "2:2", 500.0, 2, held=False)
    small = req("small", "3:3", 100.0, 3, held=False)
    assert blocker([held, big, small], small, {"G": 900.0}) is not None  # 600 + 500 ahead + 100 > 900
    assert blocker([held, big, small], big, {"G": 900.0}) is not None
    assert blocker([big, small], big, {"G": 900.0}) is None
    assert first_waiter([held, big, small], ("G",), "1:1") == big


def test_exclusive_waits_for_an_empty_gpu_and_keeps_others_out() -> None:
    exclusive = req("x", "1:1", None, 5, held=False)
    assert "hold no other engine" in blocker([req("a", "2:2", 100.0, 1), exclusive], exclusive, {"G": 900.0})
    assert blocker([exclusive], exclusive, {"G": 900.0}) is None
    later = req("b", "2:2", 1.0, 6, held=False)
    assert "needs G whole" in blocker([exclusive, later], later, {"G": 900.0})  # queued behind it
    held = req("x", "1:1", None, 5)
    assert "held whole" in blocker([held, later], later, {"G": 900.0})
    # the exclusive test's own engines start beside it
    own = req("own", "1:1", 100.0, 7, held=False)
    assert blocker([held, own], own, {"G": 900.0}) is None


def test_a_worker_holding_an_engine_is_not_queued_behind_an_exclusive_waiter() -> None:
    """Seen on the H200 with 16 workers: worker A held its vLLM engine (in use by a precision test) and asked for
    the hf reference; B's exclusive memory test, queued earlier, waited for A to hold nothing; A waited behind B."""
    vllm = req("v", "1:1", 12000.0, 7)
    exclusive = req("x", "2:2", None, 10, held=False)
    reference = req("r", "1:1", 1000.0, 11, held=False)
    stranger = req("s", "3:3", 1000.0, 12, held=False)
    budget = {"G": 100000.0}
    assert blocker([vllm, exclusive, reference, stranger], reference, budget) is None  # no wait for itself
    assert "needs G whole" in blocker([vllm, exclusive, reference, stranger], stranger, budget)  # others queue
    assert "hold no other engine" in blocker([vllm, exclusive], exclusive, budget)  # it waits for A to finish
    # room still counts: what others hold
    other = req("o", "3:3", 98000.0, 3)
    assert "needs 1000 MiB" in blocker([vllm, other, reference], reference, budget)


def test_a_need_beyond_the_budget_is_a_need_for_the_whole_gpu() -> None:
    huge = req("huge", "1:1", 1000.0, 2, held=False)
    assert "hold no other engine" in blocker([req("a", "2:2", 1.0, 1), huge], huge, {"G": 900.0})
    assert blocker([huge], huge, {"G": 900.0}) is None  # alone it runs, as it would without sharing


def test_shared_since() -> None:
    mine = req("m", "1:1", 10.0, 1)
    assert not shared_since([mine], {}, ("G",), "1:1", since=100.0)
    assert shared_since([mine, req("o", "2:2", 10.0, 2)], {}, ("G",), "1:1", since=100.0)
    assert not shared_since([req("o", "2:2", 10.0, 2, held=False)], {}, ("G",), "1:1", since=100.0)
    assert shared_since([], {"G": {"2:2": 150.0}}, ("G",), "1:1", since=100.0)  # stopped during the test
    assert not shared_since([], {"G": {"2:2": 50.0, "1:1": 150.0}}, ("G",), "1:1", since=100.0)
    assert not shared_since([req("o", "2:2", 10.0, 2, gpus=("H",))], {}, ("G",), "1:1", since=100.0)


def test_workers_per_gpu() -> None:
    assert auto_workers_per_gpu(16, 1) == 4
    assert auto_workers_per_gpu(8, 1) == 2
    assert auto_workers_per_gpu(2, 1) == 1
    assert auto_workers_per_gpu(128, 8) == 4
    assert auto_workers_per_gpu(None, 0) == 1
    assert [gpu_of_worker(i, 2, 2) for i in range(5)] == [0, 0, 1, 1, 0]
    assert [gpu_of_worker(i, 1, 3) for i in range(4)] == [0, 1, 2, 0]  # the default: one GPU per worker


def test_engine_scope_keeps_one_engine_configuration_together() -> None:
    smoke = "suites/test_smoke.py::test_generates_requested_tokens[tiny-qwen2-vllm-dtype=bfloat16-max_model_len=512]"
    precision = "suites/test_precision.py::test_logprobs_close[tiny-qwen2-vllm-dtype=bfloat16-max_model_len=512]"
    assert engine_scope(smoke) == engine_scope(precision)
    assert engine_scope("tests/test_a.py::test_plain") == "tests/test_a.py::test_plain"
    assert engine_scope("t.py::test[a]") != engine_scope("t.py::test[b]")


def test_exclusive_is_a_declaration_of_the_mark_not_a_cell() -> None:
    from pytest_gpucompat.common.errors import InputError
    from pytest_gpucompat.workload.matrix import cells_from_marker

    plain = cells_from_marker((), {"engine": "hf", "params": {"dtype": ["float32"]}}, "t")
    alone = cells_from_marker((), {"engine": "hf", "params": {"dtype": ["float32"]}, "exclusive": True}, "t")
    assert [c.id for c in alone] == [c.id for c in plain]
    with pytest.raises(InputError, match="must be True or False"):
        cells_from_marker((), {"engine": "hf", "exclusive": "yes"}, "t")


def _bench() -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / "run.py"
    spec = importlib.util.spec_from_file_location("bench_run", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_each_packing_run_compiles_from_empty_caches(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The first run must not warm the kernels of the next: every compile cache is a folder of that run's own,
    while the built models (the runs' input) stay where both find them."""
    from pytest_gpucompat.common.paths import cache_dir

    monkeypatch.delenv("GPUCOMPAT_CACHE_DIR", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    bench = _bench()
    models = cache_dir()
    one, two = bench.fresh_caches(tmp_path / "one"), bench.fresh_caches(tmp_path / "two")
    for name in ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT", "CUDA_CACHE_PATH"):
        assert one[name].startswith(str(tmp_path / "one")) and two[name].startswith(str(tmp_path / "two"))
    assert one["GPUCOMPAT_CACHE_DIR"] == two["GPUCOMPAT_CACHE_DIR"] == str(models)
    assert one["HF_HOME"] == str(tmp_path / "home-cache" / "huggingface")
    for name, value in one.items():
        monkeypatch.setenv(name, value)
    assert cache_dir() == models  # a run under those variables finds the same models


def test_the_benchmark_compares_cells_and_outcomes() -> None:
    bench = _bench()

    def cell(nodeid: str, outcome: str, engine_s: float, duration: float = 1.0, **metrics: float) -> dict:
        return {"nodeid": nodeid, "outcome": outcome, "duration_s": duration,
                "metrics": {"engine_s": engine_s, **metrics}}

    serial = {"cells": [cell("suites/test_smoke.py::a", "passed", 10.0),
                        cell("suites/test_memory.py::m", "passed", 50.0, duration=60.0)]}
    packed = {"cells": [cell("suites/test_smoke.py::a", "passed", 12.0, measured_under_sharing=1.0),
                        cell("suites/test_memory.py::m", "passed", 51.0)]}
    summary = bench.packing_summary(serial, packed)
    assert summary["same_cells"] and summary["same_outcomes"]
    assert (summary["serial_engine_s"], summary["packed_engine_s"]) == (60.0, 63.0)
    assert summary["longest_cell"] == "suites/test_memory.py::m" and summary["longest_cell_s"] == 60.0
    assert summary["shared_cells"] == 1
    packed["cells"][1]["outcome"] = "failed"
    changed = bench.packing_summary(serial, packed)
    assert not changed["same_outcomes"]
    assert changed["changed_outcomes"] == {"suites/test_memory.py::m": ["passed", "failed"]}


def test_n_auto_starts_workers_per_gpu(monkeypatch: pytest.MonkeyPatch, pytester: pytest.Pytester) -> None:
    import dataclasses

    from pytest_gpucompat.machine import fingerprint
    from pytest_gpucompat.session import xdist_support

    gpus = (fingerprint.GPU(index=0, name="H200", uuid="GPU-a"), fingerprint.GPU(index=1, name="H200", uuid="GPU-b"))
    collect = fingerprint.collect
    monkeypatch.setattr(fingerprint, "collect", lambda *a, **k: dataclasses.replace(collect(*a, **k), gpus=gpus))
    assert xdist_support.auto_num_workers(pytester.parseconfig()) == 2  # the default: one per GPU
    config = pytester.parseconfig("--gpucompat-workers-per-gpu", "3")
    assert xdist_support.auto_num_workers(config) == 6 and xdist_support.packing(config)
    assert not xdist_support.packing(pytester.parseconfig())
    monkeypatch.setattr(fingerprint, "collect", lambda *a, **k: dataclasses.replace(collect(*a, **k), gpus=()))
    assert xdist_support.auto_num_workers(config) == 1 and not xdist_support.packing(config)


def test_n_auto_is_ours_whatever_order_the_plugins_load_in(pytester: pytest.Pytester) -> None:
    """Loaded with `-p` (before pytest-xdist registers), the plugin's answer to `-n auto` must still win over
    xdist's CPU count: on this machine without a GPU, one worker, not one per core."""
    pytest.importorskip("xdist")
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:gpucompat", "-p", "no:gpucompat_fixtures",
                                           "-p", "pytest_gpucompat.plugin", "-p", "pytest_gpucompat.fixtures",
                                           "-p", "no:randomly", "--gpucompat", "-n", "auto")
    result.stdout.fnmatch_lines(["*created: 1/1 worker*"])
    assert result.ret == 0


def test_a_shared_gpu_gives_vllm_half_of_what_its_fraction_leaves_after_the_weights() -> None:
    vllm = registry.descriptor("vllm")
    assert vllm is not None and vllm.gpu_memory is not None and vllm.gpu_memory.cache_bytes == "kv_cache_memory_bytes"
    memory = vllm.gpu_memory
    assert cache_mib(memory, {}, 143_000.0, 1000.0) == pytest.approx((0.2 * 143_000.0 - 1000.0) / 2)
    assert cache_mib(memory, {"gpu_memory_utilization": 0.08}, 100_000.0, 0.0) == pytest.approx(4000.0)
    assert cache_mib(memory, {}, 143_000.0, None) is None  # weights unknown: no size, the start measures
    assert cache_mib(memory, {"gpu_memory_utilization": 0.01}, 1000.0, 500.0) is None  # nothing left


@pytest.mark.parametrize(("engine", "params", "quiet"), [
    ("vllm", {}, True),  # profiles the GPU at start
    ("vllm", {"kv_cache_memory_bytes": 2**30}, False),  # given its cache size: measures nothing
    ("hf", {"dtype": "float32"}, False),
    ("sglang", {}, True),
    ("tensorrt-llm", {}, True),
    ("openai", {"server": "vllm"}, True),  # the server it starts profiles
    ("openai", {"endpoint": "http://127.0.0.1:8000/v1"}, False),  # a server elsewhere: nothing starts here
    ("mypkg.engine:Factory", {}, True),  # unknown memory: counted as measuring
])
def test_which_starts_need_a_quiet_gpu(engine: str, params: dict[str, Any], quiet: bool) -> None:
    assert registry.quiet_start(engine, params) is quiet


def test_a_shared_gpu_sizes_the_cache_of_an_engine_that_takes_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpucompat.catalog.base import EngineSpec
    from pytest_gpucompat.catalog.params import engine_params
    from pytest_gpucompat.engines.deviations import deviations
    from pytest_gpucompat.session import sharing
    from pytest_gpucompat.workload import checkpoint

    monkeypatch.setattr(checkpoint, "weights_mib", lambda model, dtype: 1000.0)
    monkeypatch.setattr(sharing, "_release_has", lambda engine, since: engine == "vllm" and since == "0.10.2")
    share = sharing.GpuShare(None, None, None, {"G": 143_000.0}, 0.9, 10.0)  # type: ignore[arg-type]
    spec = share.sized(EngineSpec("vllm", "m", {"dtype": "bfloat16"}))
    size = spec.params["kv_cache_memory_bytes"]
    assert size == int((0.2 * 143_000.0 - 1000.0) / 2 * 2**20)
    assert not registry.quiet_start(spec.engine, spec.params)
    assert "harness_set" not in engine_params(spec.params)  # never handed to the engine
    found = {d.name: d for d in deviations("vllm", spec.params)}
    assert found["kv_cache_memory_bytes"].by == "harness" and "shared" in (found["kv_cache_memory_bytes"].why or "")
    assert found["dtype"].by == "cell"
    assert share.sized(spec) == spec  # sized once; the pool's key is stable
    given = EngineSpec("vllm", "m", {"kv_cache_memory_bytes": 123})
    assert share.sized(given) == given  # the cell's own size is kept
    assert share.sized(EngineSpec("sglang", "m", {})).params == {}  # takes no size: starts on a quiet GPU
    monkeypatch.setattr(sharing, "_release_has", lambda engine, since: False)  # a release before the setting
    assert share.sized(EngineSpec("vllm", "m", {})).params == {}


def test_a_release_has_the_cache_size_setting_only_from_its_first_release() -> None:
    pytest.importorskip("transformers")
    from pytest_gpucompat.session import sharing

    sharing._release_has.cache_clear()
    assert sharing._release_has("hf", None) and sharing._release_has("hf", "0.0.1")
    assert not sharing._release_has("hf", "9999")
    assert not sharing._release_has("mypkg.engine:Factory", None)  # no distribution: nothing installed to ask
    sharing._release_has.cache_clear()


def test_a_users_own_auto_num_workers_is_not_shadowed(pytester: pytest.Pytester) -> None:
    """A conftest's `pytest_xdist_auto_num_workers` decides `-n auto`; the plugin's answer is only the default."""
    pytest.importorskip("xdist")
    pytester.makeconftest("def pytest_xdist_auto_num_workers(config):\n    return 2\n")
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:randomly", "--gpucompat", "-n", "auto")
    result.stdout.fnmatch_lines(["*created: 2/2 workers*"])
    assert result.ret == 0
