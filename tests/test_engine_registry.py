"""The engine registry: one descriptor per engine, asked by every module that needs to know about engines; and where
the pool runs an engine (its descriptor, the spec's own `isolated` param, aliases)."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path

import pytest
from conftest import requires

from pytest_gpucompat.catalog.base import EngineSpec
from pytest_gpucompat.catalog.params import unit_vector
from pytest_gpucompat.catalog.registry import (
    EngineDescriptor,
    canonical_name,
    default_dtype,
    descriptor,
    descriptors,
    drives_server,
    engine_environment,
    engine_names,
    help_commands,
    kb_engine_names,
    normalize_dtype,
    reference_name,
    register,
    runs_in_process,
    server_names,
    stack_packages,
    tracked_packages,
)
from pytest_gpucompat.engines import create
from pytest_gpucompat.engines.isolation import IsolatedEngine
from pytest_gpucompat.engines.pool import EnginePool
from pytest_gpucompat.engines.servers import engine_server_command, servers

FAKE = "test_isolation:FakeEngine"


def test_one_descriptor_per_engine() -> None:
    assert tuple(d.name for d in descriptors()) == engine_names()
    for d in descriptors():
        assert dataclasses.is_dataclass(d) and d.adapter.count(":") == 1
        module, _, cls = d.adapter.partition(":")
        assert hasattr(importlib.import_module(module), cls)  # adapter modules import no engine
        assert create(d.name).name == d.name
    assert [name for name in engine_names() if runs_in_process(name)] == ["hf"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        descriptor("vllm").name = "x"  # type: ignore[misc, union-attr]


def test_what_other_modules_ask() -> None:
    assert kb_engine_names() == ("vllm", "sglang", "tensorrt-llm")
    assert server_names() == ("vllm", "sglang", "tensorrt-llm")
    assert servers() == ("vllm", "sglang", "tensorrt-llm", "command")
    assert tracked_packages() == {"vllm": ("vllm",), "sglang": ("sglang",), "tensorrt-llm": ("tensorrt-llm",)}
    assert help_commands("vllm") == (("vllm", "--help"), ("vllm", "serve", "--help=all"))
    assert help_commands("sglang") == ((sys.executable, "-m", "sglang.launch_server", "--help"),)
    assert help_commands("trtllm")[1] == ("trtllm-serve", "serve", "--help")
    assert help_commands("hf") == () and help_commands("tgi") == ()
    assert descriptor("sglang").parallel_params == ("tp_size", "pp_size", "dp_size")  # type: ignore[union-attr]
    assert descriptor("pkg.mod:Factory") is None


def test_what_the_harness_asks_instead_of_naming_an_engine() -> None:
    assert reference_name() == "hf" and [d.name for d in descriptors() if d.reference] == ["hf"]
    assert drives_server("openai") and drives_server("openai-compatible")
    assert not drives_server("vllm") and not drives_server("pkg.mod:Factory") and not drives_server("tgi")
    assert default_dtype("transformers") == "float32"
    assert default_dtype("vllm") is None and default_dtype("pkg.mod:Factory") is None and default_dtype("tgi") is None
    assert stack_packages() == {"transformers": ("transformers",), "sglang-kernel": ("sglang-kernel", "sgl-kernel"),
                                "tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu13")}


@pytest.mark.parametrize("d", descriptors(), ids=lambda d: d.name)
def test_what_a_descriptor_names_exists(d: EngineDescriptor) -> None:
    """A default server is a registered server; a default dtype is one of the names reports use."""
    assert d.default_server is None or d.default_server in server_names()
    assert d.default_dtype is None or normalize_dtype(d.default_dtype) == d.default_dtype
    assert not (d.reference and d.default_server)  # the reference runs a model itself


def test_aliases_and_where_engines_run() -> None:
    assert canonical_name("transformers") == canonical_name("HuggingFace") == "hf"
    assert canonical_name("trt-llm") == "tensorrt-llm" and canonical_name("openai-compatible") == "openai"
    assert runs_in_process("hf") and runs_in_process("transformers")
    assert not runs_in_process("vllm") and not runs_in_process(FAKE)
    with pytest.raises(ValueError, match="unknown engine 'tgi'; known: hf, vllm"):
        canonical_name("tgi")


def test_a_name_or_alias_is_registered_once() -> None:
    with pytest.raises(ValueError, match="'trtllm' is already registered"):
        register(EngineDescriptor(name="other", adapter="x:Y", distribution="x", aliases=("trtllm",)))
    assert "other" not in engine_names() and "other" not in (d.name for d in descriptors())


def test_one_dtype_table_and_one_embedding_normalisation() -> None:
    assert [normalize_dtype(d) for d in ("BF16", "torch.float16", "float", "float8_e4m3fn", "int8")] == [
        "bfloat16", "float16", "float32", "fp8", "int8"
    ]
    assert normalize_dtype("bf16", engine="vllm") == "bfloat16"
    assert unit_vector([3, 4]) == [0.6, 0.8] and unit_vector([0, 0]) == [0.0, 0.0]


def test_engine_environment_leaves_credentials_out() -> None:
    env = {"VLLM_USE_V1": "1", "SGLANG_X": "a", "HF_TOKEN": "secret", "HF_HUB_OFFLINE": "1", "PATH": "/bin"}
    assert engine_environment(env) == {"HF_HUB_OFFLINE": "1", "SGLANG_X": "a", "VLLM_USE_V1": "1"}


def test_server_commands_come_from_the_descriptors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import shutil

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "vllm" else f"/bin/{name}")
    cmd = engine_server_command("vllm", "/m", "127.0.0.1", 8000, {"max_model_len": 64})
    assert cmd == [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "/m", "--host", "127.0.0.1",
                   "--port", "8000", "--max-model-len", "64"]
    cmd = engine_server_command("sglang", "/m", "h", 1, {})
    assert cmd == [sys.executable, "-m", "sglang.launch_server", "--model-path", "/m", "--host", "h", "--port", "1"]
    options = tmp_path / "o.yaml"
    cmd = engine_server_command("trtllm", "/m", "h", 1, {"backend": "pytorch", "attn_backend": "TRTLLM"},
                                lambda: options)
    assert cmd == ["/bin/trtllm-serve", "serve", "/m", "--host", "h", "--port", "1", "--backend", "pytorch",
                   "--extra_llm_api_options", str(options)]
    assert "attn_backend: TRTLLM" in options.read_text()
    cmd = engine_server_command("trtllm", "/m", "h", 1, {"free_gpu_memory_fraction": 0.5, "tensor_parallel_size": 2},
                                lambda: options)
    assert cmd[7:] == ["--kv_cache_free_gpu_memory_fraction", "0.5", "--extra_llm_api_options", str(options)]
    assert "tensor_parallel_size: 2" in options.read_text()  # an LLM-API field; no `serve` option in 1.0


# --------------------------------------------------------------------------------------------------------------
# Where the pool runs an engine


def test_the_isolated_param_overrides_the_descriptor(tmp_path: Path) -> None:
    with EnginePool(tmp_path, start_timeout_s=30, call_timeout_s=30) as pool:
        here, info = pool.get(EngineSpec(FAKE, "m", {"isolated": False}))
        assert not isinstance(here, IsolatedEngine) and info.extra["pid"] == __import__("os").getpid()
        there, _ = pool.get(EngineSpec(FAKE, "m", {"mode": "x"}))  # import-path engines: isolated by default
        assert isinstance(there, IsolatedEngine)


def test_a_cell_may_run_the_reference_in_a_child_and_name_it_by_alias(pytester: pytest.Pytester) -> None:
    """fixtures.start_engine leaves the choice to the pool: `isolated: true` puts hf in a child, an alias resolves."""
    requires("transformers")
    pytester.makepyfile("""
        import os
        import pytest
        from pytest_gpucompat.engines.isolation import IsolatedEngine

        @pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"], "isolated": [True]})
        def test_child(gpucompat_cell, gpucompat_engine):
            inner = gpucompat_engine.engine._engine
            assert isinstance(inner, IsolatedEngine) and inner.pid != os.getpid()
            assert gpucompat_engine.info.engine == "hf"
            assert len(gpucompat_engine.engine.generate([[5, 6, 7]], 2, 2)[0].token_ids) == 2

        @pytest.mark.gpucompat(engine="transformers", params={"dtype": ["float32"]})
        def test_alias(gpucompat_cell, gpucompat_engine):
            assert not isinstance(gpucompat_engine.engine._engine, IsolatedEngine)
            assert gpucompat_engine.info.engine == "hf"
    """)
    result = pytester.runpytest("--gpucompat", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_an_engine_registered_later_is_asked_live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry is asked at use, never copied at import: an engine a conftest registers after the package was
    imported is accepted by rule files and by `gpucompat rules --engine`."""
    from pytest_gpucompat.catalog import registry
    from pytest_gpucompat.cli import main
    from pytest_gpucompat.kb import load_kb

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    register(EngineDescriptor(name="tgi", adapter="x:Y", distribution="text-generation", kb=True))
    rules = tmp_path / "tgi.yaml"
    rules.write_text("rules: [{id: tgi-x, summary: s, severity: advice, failure: none, confidence: documents, "
                     "engine: tgi, sources: [{kind: seed, ref: r}]}]\n")
    assert [r.engine for r in load_kb([rules], builtin=False).rules] == ["tgi"]
    assert main(["rules", "--kb", str(rules), "--no-builtin-rules", "--engine", "tgi"]) == 0
