"""``kb.paramkey``: the writers of a cell's exact parameter key, which one a machine gets, and what each tells apart.

Pure functions, plain pytest; ``tests/test_kb_index_cache.py`` runs the index's answers with each writer.
"""

from __future__ import annotations

import enum
import importlib
import math
import types
from typing import Any, cast

import pytest

from pytest_gpucompat.kb import paramkey

_msgpack = importlib.import_module("msgpack")  # a declared requirement: its absence fails here, not skips
WRITERS = {"msgpack": paramkey.choose(_msgpack, True)[0], "marshal": paramkey.choose(None, True)[0]}


class _Level(enum.IntEnum):
    TWO = 2


class _Shouty(str):
    def __str__(self) -> str:
        return "FP8-SHOUTY"


def test_the_key_writer_is_msgpacks_compiled_packer_only_where_it_is_safe_and_faster() -> None:
    """msgpack's compiled packer where it is installed and the GIL is on; marshal without msgpack, with its
    pure-Python fallback (slower than marshal), with a packer that lacks the options or without the GIL (one shared
    packer)."""
    fallback = importlib.import_module("msgpack.fallback")
    assert "msgpack " + ".".join(map(str, _msgpack.version)) == paramkey.KEY_WRITER  # what this install runs
    assert paramkey.choose(_msgpack, True)[1].startswith("msgpack ")
    class Old:  # a packer without strict_types, compiled
        __module__ = "msgpack._cmsgpack"

        def __init__(self, use_bin_type: bool) -> None:
            pass

    for module, gil in ((None, True), (_msgpack, False), (types.SimpleNamespace(Packer=fallback.Packer), True),
                        (types.SimpleNamespace(Packer=Old), True)):
        write, name = paramkey.choose(module, gil)
        assert name == "marshal 2" and write({"a": 1}) == paramkey.choose(None, True)[0]({"a": 1})


def test_keys_tell_apart_every_value_the_conditions_tell_apart() -> None:
    """Values equal in Python but not to the conditions get other keys from each writer; what a writer cannot write
    exactly it refuses with one of ``KEY_ERRORS``, and a refused dict is judged without a key."""
    values: list[Any] = ["1", 1, 1.0, True, None, -0.0, 0.0, float("nan"), "true", 2**63, -(2**63), "\u00e9"]
    for name, write in WRITERS.items():
        keys = [write({"p": v}) for v in values]
        assert len(set(keys)) == len(values), name
        assert write({"p": 1, "q": 2}) != write({"q": 2, "p": 1})  # another order: another key, never a wrong one
        # marshal writes long integers and lone surrogates exactly; msgpack refuses them too
        for refused in (_Shouty("fp8"), _Level.TWO, *((10**30, "\ud800") if name == "msgpack" else ())):
            with pytest.raises(paramkey.KEY_ERRORS):
                write({"p": refused})
        assert paramkey.exact_key({"p": _Shouty("fp8")}, write)[1] is None
        proxy_params, proxy_key = paramkey.exact_key(types.MappingProxyType({"p": 1}), write)
        assert type(proxy_params) is dict and proxy_key == write({"p": 1})
    assert not paramkey.written_exactly({"p": b"1"}) and not paramkey.written_exactly(cast("dict[str, Any]", {1: "p"}))
    assert paramkey.written_exactly({"p": math.inf, "q": None, "r": True, "s": "x", "t": 3})
