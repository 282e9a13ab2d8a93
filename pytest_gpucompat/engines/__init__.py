"""Engine registry: names, the distribution each one is installed as, and lazy creation of adapters.

Nothing here imports an engine (or torch): an adapter module is imported only when its engine is created, so a
machine without vLLM can still collect and skip vLLM cells.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any

from .base import Engine, EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo

__all__ = [
    "ENGINE_NAMES",
    "Unsupported",
    "DISTRIBUTIONS",
    "HARNESS_PARAMS",
    "IN_PROCESS_ENGINES",
    "Engine",
    "EngineFailed",
    "EngineSpec",
    "EngineUnavailable",
    "Generation",
    "RunInfo",
    "canonical_name",
    "create",
    "distribution",
    "engine_params",
    "engine_version",
    "normalize_dtype",
    "missing_module",
    "one_line",
    "wants_embeddings",
]


class Unsupported(EngineUnavailable, NotImplementedError):
    """This engine, started this way, cannot do that call (e.g. embed on a generation engine): a skip, not a
    failure. Both `except EngineUnavailable` and `except NotImplementedError` catch it."""


ENGINE_NAMES: tuple[str, ...] = ("hf", "vllm", "sglang", "tensorrt-llm", "openai")

_ADAPTERS: dict[str, str] = {
    "hf": "pytest_gpucompat.engines.hf:HFEngine",
    "vllm": "pytest_gpucompat.engines.vllm:VLLMEngine",
    "sglang": "pytest_gpucompat.engines.sglang:SGLangEngine",
    "tensorrt-llm": "pytest_gpucompat.engines.trtllm:TRTLLMEngine",
    "openai": "pytest_gpucompat.engines.openai:OpenAIEngine",
}

DISTRIBUTIONS: dict[str, str] = {
    "hf": "transformers",
    "vllm": "vllm",
    "sglang": "sglang",
    "tensorrt-llm": "tensorrt-llm",
    "openai": "requests",
}
"""The distribution whose version identifies each engine (what `importlib.metadata.version` is asked)."""

_MODULES: dict[str, str] = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "tensorrt_llm"}
"""The top-level module each isolated engine imports first."""

_ALIASES: dict[str, str] = {
    "transformers": "hf",
    "huggingface": "hf",
    "trtllm": "tensorrt-llm",
    "tensorrt_llm": "tensorrt-llm",
    "trt-llm": "tensorrt-llm",
    "openai-compatible": "openai",
}

IN_PROCESS_ENGINES: frozenset[str] = frozenset({"hf"})
"""Engines that run in the pytest process by default; every other engine runs isolated in a child process."""

HARNESS_PARAMS: frozenset[str] = frozenset({"env", "task", "start_timeout_s", "call_timeout_s", "isolated"})
"""Spec params read by the harness, never passed on to an engine's own constructor."""


def canonical_name(name: str) -> str:
    """The registry name for `name` (aliases such as `trtllm` accepted); import paths are returned unchanged."""
    if ":" in name:
        return name
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _ADAPTERS:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINE_NAMES)}")
    return key


def distribution(name: str) -> str | None:
    """Distribution name of an engine, for version lookups; None for import-path engines."""
    if ":" in name:
        return None
    return DISTRIBUTIONS[canonical_name(name)]


def engine_version(name: str) -> str | None:
    """Installed version of the engine's distribution, without importing it; None when not installed."""
    dist = distribution(name)
    if dist is None:
        return None
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def missing_module(name: str, params: Mapping[str, Any] | None = None) -> str | None:
    """`"vllm is not importable: ModuleNotFoundError: ..."` when the engine's package cannot be found from here, else
    None: a cell can be skipped without spawning a child that would only find out the same (about a second each).

    Not decided here (None) when the spec sets its own environment, which may change what the child can import.
    """
    if ":" in name or (params and params.get("env")):
        return None
    module = _MODULES.get(canonical_name(name))
    if module is None:
        return None
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"{module} is not importable: ModuleNotFoundError: No module named '{module}'"


def _load(target: str) -> Callable[[], Any]:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[no-any-return]


def create(name: str) -> Engine:
    """A fresh, not yet started adapter for `name`.

    `name` is a registry name or alias, or an import path `package.module:Factory` (a class or a function that
    takes no argument): the latter lets tests and in-house engines plug in without being registered here.
    """
    target = _ADAPTERS[canonical_name(name)] if ":" not in name else name
    try:
        factory = _load(target)
    except (ImportError, AttributeError) as exc:
        if ":" in name:
            raise ValueError(f"cannot import engine factory {name!r}: {exc}") from None
        raise
    engine = factory()
    return engine  # type: ignore[no-any-return]


def engine_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` without the harness keys: what an adapter may hand to its engine."""
    return {k: v for k, v in params.items() if k not in HARNESS_PARAMS}


_DTYPE_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "float": "float32",
    "float32": "float32",
    "torch.float32": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float16": "float16",
    "torch.float16": "float16",
    "auto": "auto",
    "fp8": "fp8",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "float8_e4m3fn": "fp8",
}


def normalize_dtype(value: Any) -> str:
    """`bf16`, `torch.bfloat16`, `bfloat16` -> `bfloat16` (and so on); unknown strings pass through lower-cased."""
    text = str(value).strip().lower()
    return _DTYPE_ALIASES.get(text, text)


def wants_embeddings(params: Mapping[str, Any]) -> bool:
    """`task: embed` in the spec: the engine is started as an embedding (pooling) model."""
    return str(params.get("task", "generate")).lower() in ("embed", "embedding", "embeddings", "pooling")


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, the form every EngineFailed/EngineUnavailable message takes."""
    text = str(exc).strip().splitlines()
    first = text[0].strip() if text else ""
    name = type(exc).__name__
    return f"{name}: {first}" if first else name
