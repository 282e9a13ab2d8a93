"""The harness's side of a spec: the parameters the harness reads itself (never handed to an engine), what an
adapter may hand on, and the lookups every adapter and the layers below the adapters share (installed release,
importability, compile-cache key).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

from ..common.installed import version as installed_version
from .base import EngineUnavailable
from .loglines import exception_line
from .registry import descriptor


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
