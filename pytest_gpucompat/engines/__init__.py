"""Engines: lazy creation of adapters. What each engine is (its name, aliases, distribution, module, ...) lives in
the catalog (`pytest_gpucompat.catalog`), the ground floor under the adapters.

Nothing here imports an engine (or torch): an adapter module is imported only when its engine is created, so a
machine without vLLM can still collect and skip vLLM cells.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ..catalog.base import Engine
from ..catalog.registry import descriptor

__all__ = ["create"]


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
