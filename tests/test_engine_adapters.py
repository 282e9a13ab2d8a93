"""Engine adapters on a machine without the engine: a skip with the import error, never a crash.

Where an engine is installed (a GPU runner), these checks do not apply and are skipped; the suites exercise it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from pytest_gpucompat.catalog.base import EngineSpec, EngineUnavailable
from pytest_gpucompat.catalog.params import distribution, engine_params, engine_version, missing_module
from pytest_gpucompat.catalog.registry import canonical_name, descriptors, engine_names, normalize_dtype
from pytest_gpucompat.engines import create
from pytest_gpucompat.engines.pool import EnginePool

ADAPTERS = [(d.name, d.module, d.adapter.partition(":")[2]) for d in descriptors() if d.module is not None]
"""(name, module, adapter class) of every engine whose package may be missing: the registry's, asked live."""


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize(("name", "module", "cls"), ADAPTERS)
def test_missing_engine_is_unavailable_with_the_import_error(name: str, module: str, cls: str,
                                                             tmp_path: Path) -> None:
    if _installed(module):
        pytest.skip(f"{module} is installed here")
    engine = create(name)
    assert type(engine).__name__ == cls and engine.name == name
    saved = dict(os.environ)
    try:
        with pytest.raises(EngineUnavailable) as skip:
            engine.start(EngineSpec(name, str(tmp_path), {"dtype": "bfloat16"}))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    message = str(skip.value)
    assert f"No module named '{module}'" in message
    assert "\n" not in message
    engine.shutdown()  # shutting down an engine that never started is harmless


def test_missing_engine_through_the_isolated_pool(tmp_path: Path) -> None:
    if _installed("vllm"):
        pytest.skip("vllm is installed here")
    pool = EnginePool(tmp_path / "logs", start_timeout_s=60)
    spec = EngineSpec("vllm", str(tmp_path), {"dtype": "bfloat16"})
    for _ in range(2):  # the second time from the pool's memory, without a new child
        with pytest.raises(EngineUnavailable, match="vllm is not importable: ModuleNotFoundError"):
            pool.get(spec)
    pool.close_all()


def test_the_vllm_adapter_sets_no_environment_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """vLLM runs with its own process model and sampler: the adapter sets no VLLM_* variable of its own."""
    if _installed("vllm"):
        pytest.skip("vllm is installed here")
    for name in [k for k in os.environ if k.startswith("VLLM_")]:
        monkeypatch.delenv(name)
    with pytest.raises(EngineUnavailable):
        create("vllm").start(EngineSpec("vllm", str(tmp_path)))
    assert [k for k in os.environ if k.startswith("VLLM_")] == []


def test_registry() -> None:
    assert engine_names() == ("hf", "vllm", "sglang", "tensorrt-llm", "openai")
    assert all(distribution(name) for name in engine_names())
    assert canonical_name("trtllm") == canonical_name("TensorRT_LLM") == "tensorrt-llm"
    assert distribution("trtllm") == "tensorrt-llm" and distribution("hf") == "transformers"
    assert distribution("pkg.mod:Factory") is None
    assert engine_version("openai") is not None  # requests is installed for the tests
    with pytest.raises(ValueError, match="unknown engine 'tgi'"):
        create("tgi")
    with pytest.raises(ValueError, match="cannot import engine factory"):
        create("no_such_module_xyz:Engine")


def test_param_helpers() -> None:
    assert engine_params({"dtype": "bf16", "env": {"A": "1"}, "task": "embed", "start_timeout_s": 5}) == {
        "dtype": "bf16"
    }
    assert [normalize_dtype(d) for d in ("bf16", "torch.float16", "fp32", "half", "auto", "FP8")] == [
        "bfloat16", "float16", "float32", "float16", "auto", "fp8"
    ]


def test_a_missing_engine_package_is_known_without_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else real(name, *a))
    assert missing_module("sglang") == "sglang is not importable: ModuleNotFoundError: No module named 'sglang'"
    assert missing_module("sglang", {"env": {"PYTHONPATH": "/opt/sglang"}}) is None  # the child may see it
    assert missing_module("hf") is None and missing_module("openai") is None
    assert missing_module("tests.fake:Engine") is None
