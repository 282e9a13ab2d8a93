"""A cell's parameters as one exact key: bytes that two parameter mappings share only when every condition treats
them alike, made once per cell by ``kb.index.matching_rules`` (a third of a remembered cell's cost).

Equal bytes must mean equal names and values of the same exact types: ``True``, ``1``, ``1.0`` and ``"1"`` are
other values to the conditions ("true" against "1"), and so are ``-0.0`` and ``0.0``. Both writers used here give
every type they write its own marker and write only exact built-in types:

- msgpack's compiled packer with ``strict_types`` (with the key's lookup, about 60 % of marshal's time over a
  matrix's parameters: it writes each string's UTF-8 in place, where marshal's version 2 makes an encoded copy):
  nil, true and false, integers, IEEE doubles (``use_single_float`` off), strings (str), binary (bytes,
  bytearray, memoryview: ``use_bin_type``), arrays (exact lists) and maps (exact dicts); a subclass of any of those
  (``IntEnum``, a str subclass, a dict subclass), a tuple, a set, an enum or any other object raises ``TypeError``,
  an integer past 64 bits ``OverflowError``, a string with a lone surrogate ``UnicodeEncodeError`` and nesting past
  its limit ``ValueError``;
- marshal (version 2: no back-references, so equal content gives equal bytes) where that packer is missing, is
  msgpack's pure-Python fallback (slower than marshal) or lacks these options, or where the interpreter runs without
  the GIL (one packer, with one buffer, serves every call: safe only while one thread runs Python at a time).

A key is only ever remembered for parameters whose names are str and whose values are str, int, bool, float or
None (``written_exactly``), so bytes equal to a remembered key come from parameters of those same types whatever
else a writer accepts (msgpack writes bytes and lists; marshal also tuples, sets and anything with the buffer
protocol): their markers differ from these.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import importlib
import marshal
import sys
from collections.abc import Callable, Mapping
from typing import Any

KEY_ERRORS = (TypeError, ValueError, OverflowError)  # what a writer raises for parameters it cannot write exactly
_EXACT_TYPES = frozenset((str, int, bool, type(None), float))  # values whose key is remembered
_STR_TYPE = frozenset((str,))


def _marshal_key(params: Any) -> bytes:
    return marshal.dumps(params, 2)


def choose(msgpack: Any, gil_enabled: bool) -> tuple[Callable[[Any], bytes], str]:
    """The key writer and its name: msgpack's compiled packer where ``msgpack`` (the module, or None where it is not
    installed) has one and the GIL is on, otherwise marshal."""
    packer = getattr(msgpack, "Packer", None)
    if packer is None or not gil_enabled or getattr(packer, "__module__", "") != "msgpack._cmsgpack":
        return _marshal_key, "marshal 2"
    try:
        pack: Callable[[Any], bytes] = packer(use_bin_type=True, use_single_float=False, strict_types=True,
                                              autoreset=True).pack
    except TypeError:  # a release without these options (msgpack < 1.0 is not what this package declares)
        return _marshal_key, "marshal 2"
    return pack, "msgpack " + ".".join(map(str, getattr(msgpack, "version", ("?",))))


def _installed_msgpack() -> Any:
    try:
        return importlib.import_module("msgpack")
    except ImportError:  # a declared requirement, but the keys stay exact without it: only slower
        return None


def _gil_enabled() -> bool:
    is_enabled = getattr(sys, "_is_gil_enabled", None)  # Python 3.13 and later
    return bool(is_enabled()) if callable(is_enabled) else True


key_of, KEY_WRITER = choose(_installed_msgpack(), _gil_enabled())


def exact_key(params: Mapping[str, Any], write: Callable[[Any], bytes]) -> tuple[Mapping[str, Any], bytes | None]:
    """Parameters ``write`` refused: as a plain dict, and their key if it writes that (None: a value it cannot
    write, judged every time)."""
    if type(params) is not dict:
        params = dict(params)
        try:
            return params, write(params)
        except KEY_ERRORS:
            pass
    return params, None


def written_exactly(params: Mapping[str, Any]) -> bool:
    """Whether these parameters' key may be remembered: str names, values of the exact types above."""
    return _STR_TYPE.issuperset(map(type, params)) and _EXACT_TYPES.issuperset(map(type, params.values()))
