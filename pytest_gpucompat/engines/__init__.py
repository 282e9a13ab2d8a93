"""Engines: lazy creation of adapters, and the helpers every adapter shares. What each engine is (its name,
aliases, distribution, module, ...) lives in `registry` (one EngineDescriptor per engine).

Nothing here imports an engine (or torch): an adapter module is imported only when its engine is created, so a
machine without vLLM can still collect and skip vLLM cells.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import importlib
import importlib.util
import linecache
import os
import re
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..common.installed import version as installed_version
from .base import Engine, EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo
from .registry import (
    EngineDescriptor,
    canonical_name,
    descriptor,
    descriptors,
    engine_names,
    kb_engine_names,
    normalize_dtype,
    register,
    runs_in_process,
)

__all__ = [
    "Unsupported",
    "EngineDescriptor",
    "HARNESS_PARAMS",
    "Engine",
    "EngineFailed",
    "EngineSpec",
    "EngineUnavailable",
    "Generation",
    "RunInfo",
    "canonical_name",
    "compile_key",
    "create",
    "descriptor",
    "descriptors",
    "distribution",
    "engine_names",
    "engine_params",
    "engine_version",
    "exception_line",
    "import_failure",
    "kb_engine_names",
    "normalize_dtype",
    "missing_module",
    "register",
    "runs_in_process",
    "unit_vector",
    "wants_embeddings",
]


class Unsupported(EngineUnavailable, NotImplementedError):
    """This engine, started this way, cannot do that call (e.g. embed on a generation engine): a skip, not a
    failure. Both `except EngineUnavailable` and `except NotImplementedError` catch it."""


HARNESS_PARAMS: frozenset[str] = frozenset({"env", "task", "start_timeout_s", "call_timeout_s", "isolated",
                                            "harness_set"})
"""Spec params read by the harness, never passed on to an engine's own constructor. ``harness_set`` maps each
engine setting the harness added to the spec for this run (``sharing.sized_for_sharing``) to why."""


def distribution(name: str) -> str | None:
    """Distribution name of an engine, for version lookups; None for import-path engines."""
    found = descriptor(name)
    return found.distribution if found is not None else None


def engine_version(name: str) -> str | None:
    """Installed version of the engine's distribution, without importing it; None when not installed."""
    dist = distribution(name)
    if dist is None:
        return None
    return installed_version(dist)


def missing_module(name: str, params: Mapping[str, Any] | None = None) -> str | None:
    """`"vllm is not importable: ModuleNotFoundError: ..."` when the engine's package cannot be found from here, else
    None: a cell can be skipped without spawning a child that would only find out the same (about a second each).

    Not decided here (None) when the spec sets its own environment, which may change what the child can import.
    """
    if ":" in name or (params and params.get("env")):
        return None
    module = descriptor(name).module  # type: ignore[union-attr]
    if module is None:
        return None
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else str(import_failure(module, ModuleNotFoundError(f"No module named '{module}'")))


def import_failure(module: str, exc: BaseException) -> EngineUnavailable:
    """The skip for an engine that cannot be imported: `vllm is not importable: ModuleNotFoundError: ...`, or for
    one that breaks while importing (a CUDA library mismatch raised as OSError) `... cannot be imported here: ...`."""
    how = "is not importable" if isinstance(exc, ImportError) else "cannot be imported here"
    return EngineUnavailable(f"{module} {how}: {exception_line(exc)}")


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
    found = descriptor(name)
    target = found.adapter if found is not None else name
    try:
        factory = _load(target)
    except (ImportError, AttributeError) as exc:
        if ":" in name:
            raise ValueError(f"cannot import engine factory {name!r}: {exc}") from None
        raise
    engine = factory()
    return engine  # type: ignore[no-any-return]


_BOOKKEEPING = HARNESS_PARAMS - {"env", "task"}  # the environment and the task change what is compiled


def compile_key(engine: str, model: str, params: Mapping[str, Any]) -> str | None:
    """The configuration whose compile caches a start of `engine` on `model` with `params` fills (its descriptor's
    `compile_cache`), as one line: engine, installed release, model and the settings that key the caches, sorted.
    None when the engine declares no compile cache or these settings compile nothing: such a start waits for none."""
    try:
        found = descriptor(engine)
    except ValueError:
        return None
    cache = found.compile_cache if found is not None else None
    if found is None or cache is None or any(params.get(k) == v for k, v in cache.uncompiled.items()):
        return None
    keyed = {k: v for k, v in params.items() if k not in _BOOKKEEPING and k not in cache.ignores}
    settings = ", ".join(f"{k}={keyed[k]!r}" for k in sorted(keyed))
    return f"{found.name} {engine_version(found.name) or '?'} on {model} {{{settings}}}"


def engine_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """`params` without the harness keys: what an adapter may hand to its engine."""
    return {k: v for k, v in params.items() if k not in HARNESS_PARAMS}


def wants_embeddings(params: Mapping[str, Any]) -> bool:
    """`task: embed` in the spec: the engine is started as an embedding (pooling) model."""
    return str(params.get("task", "generate")).lower() in ("embed", "embedding", "embeddings", "pooling")


def unit_vector(values: Sequence[Any]) -> list[float]:
    """An embedding as floats scaled to length 1 (a zero vector stays as it is): what every adapter returns."""
    vec = [float(x) for x in values]
    norm = sum(x * x for x in vec) ** 0.5
    return [x / norm for x in vec] if norm > 0 else vec


_HEADER_ONLY = re.compile(r"^\d+ validation errors? for \S+$")
_CAUSE_LIMIT = 600


def exception_line(exc: BaseException) -> str:
    """`Type: first line of the message`, the form every EngineFailed/EngineUnavailable message takes; a first line
    that is only a header ("1 validation error for ModelConfig") is followed by the lines naming the cause. An exception
    without a message (a bare `assert` deep in an engine) says where it was raised instead: `AssertionError at
    vllm/v1/worker/gpu/attn_utils.py:232: assert kv_cache_shape[0] == num_blocks`, as failures.last_error reads it
    from a log."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    name = type(exc).__name__
    rest = [line for line in lines[1:] if not line.startswith("For further information")]
    if first and rest and (first.endswith(":") or _HEADER_ONLY.match(first)):
        # a header that says nothing by itself ("1 validation error for ModelConfig"): the lines that name the
        # field and the cause follow it; keep them, bounded (the whole traceback stays in the engine's log)
        first = f"{first.rstrip(':')}: {'; '.join(rest[:6])}"
        if len(first) > _CAUSE_LIMIT:
            first = first[: _CAUSE_LIMIT - 1] + "…"
    if first:
        return f"{name}: {first}"
    where = raised_at(exc)
    return f"{name} at {where}" if where else name


def raised_at(exc: BaseException) -> str | None:
    """The innermost frame of ``exc``'s traceback as `package/module.py:line: source line`: the module's dotted
    name gives the path, so it reads the same from any site directory."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    if not frames:
        return None
    frame, lineno = frames[-1]
    module = str(frame.f_globals.get("__name__") or "")
    filename = frame.f_code.co_filename
    if module and module != "__main__":
        package = os.path.basename(filename) == "__init__.py"
        path = module.replace(".", "/") + ("/__init__.py" if package else ".py")
    else:
        path = os.path.basename(filename)
    source = linecache.getline(filename, lineno).strip()
    return f"{path}:{lineno}" + (f": {source[:120]}" if source else "")
