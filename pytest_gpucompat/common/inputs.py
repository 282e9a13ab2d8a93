"""Reading user files safely: bounded size, strict UTF-8, bounded nesting, plain data only, no YAML aliases.

Every file the product reads comes from a user or from another machine's CI artifact, so it may be binary, huge,
nested a million levels deep, a YAML alias bomb ("billion laughs") or hold numbers no float can represent. Each of
those must become one ``InputError`` naming the file (and the field where there is one), never a traceback, a
hang or a blow-up of memory: the loaders of fingerprints, rule files, matrices, thresholds and reports all read
through here.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import sys
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any, BinaryIO, cast

from .errors import InputError

MAX_FILE_BYTES = 16 * 1024 * 1024  # fingerprints, rule files, matrices, thresholds: hand-written, a few KiB
MAX_DEPTH = 64  # the deepest real input (a report's cell extras) is under 10 levels
MAX_DIGITS = 400  # more digits than any float can hold: such a number is refused, not converted
_FLOAT_MAX_INT = int(sys.float_info.max)


class _OutOfRange(float):
    """Stands for a number too large to convert (a 5,000-digit integer), so the tree check can name its field."""


_OUT_OF_RANGE = _OutOfRange("inf")


# --------------------------------------------------------------------------- reading


def read_text(path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES) -> str:
    """The file's text; a missing, unreadable, too large or non-UTF-8 file is an InputError naming it."""
    source = os.fspath(path)
    try:
        raw = read_bytes(path, limit)
    except FileNotFoundError:
        raise InputError(source, None, "no such file") from None
    except IsADirectoryError:
        raise InputError(source, None, "is a directory, not a file") from None
    except (NotRegularFileError, TooLargeError) as exc:
        raise InputError(source, None, str(exc)) from None
    except OSError as exc:
        raise InputError(source, None, f"cannot read: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(source, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


class TooLargeError(OSError):
    """The file holds more than the reader's limit: read no further (/dev/zero behind a symlink never ends)."""


def read_bytes(path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES, part: str | None = None) -> bytes:
    """The bytes of a regular file, at most ``limit``: the one bounded read of every file the package reads.

    ``part``: None refuses a file over ``limit`` (TooLargeError, read no further); "head" or "tail" returns its
    first or last ``limit`` bytes (metadata headers, a log's end). Other OSErrors: a missing file, a directory
    (IsADirectoryError), a FIFO, socket or device (NotRegularFileError, decided on what was opened, without waiting
    for a FIFO's writer)."""
    with open_regular(path) as handle:
        if part == "tail":
            size = os.fstat(handle.fileno()).st_size
            if size > limit:
                handle.seek(size - limit)
            return handle.read(limit)
        raw = handle.read(limit if part == "head" else limit + 1)
    if len(raw) > limit:
        raise TooLargeError(f"too large (more than {limit} bytes)")
    return raw


MAX_MODEL_FILE_BYTES = 256 * 1024 * 1024  # a checkpoint's tokenizer.json: tens of MiB for large vocabularies


def read_json(path: str | os.PathLike[str], limit: int = MAX_FILE_BYTES) -> Any:
    """A JSON file of another program (a checkpoint's config.json or tokenizer.json, a cache entry, a file a worker
    left) read through ``read_bytes`` and ``parse_json``: OSError when it cannot be read (a FIFO, a device, over
    ``limit``), ValueError naming it when it is not JSON (deep nesting included), as ``json.loads`` callers expect."""
    raw = read_bytes(path, limit)
    try:
        return parse_json(raw.decode("utf-8-sig"), os.fspath(path))
    except InputError as exc:
        raise ValueError(str(exc)) from None


class NotRegularFileError(OSError):
    """The path is a FIFO, a socket or a device: reading it could block forever or never end."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """The file opened for reading in binary, if it is a regular file: opening does not wait for a FIFO's writer
    (O_NONBLOCK) and ``fstat`` of what was opened decides; a directory is IsADirectoryError, a FIFO, socket or
    device NotRegularFileError, with its kind in the message."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path))
        if not stat.S_ISREG(mode):
            kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                    else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
            raise NotRegularFileError(f"is {kind}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def load_file(path: str | os.PathLike[str], fmt: str | None = None, limit: int = MAX_FILE_BYTES) -> Any:
    """Read, parse (JSON for ``*.json`` unless ``fmt`` says, else YAML) and check a data file (see ``check_tree``)."""
    source = os.fspath(path)
    text = read_text(path, limit)
    is_json = fmt == "json" or (fmt is None and source.endswith(".json"))
    data = parse_json(text, source) if is_json else parse_yaml(text, source)
    bad = check_tree(data)
    if bad is not None:
        raise InputError(source, dotted(bad[0]) or None, bad[1])
    return data


# --------------------------------------------------------------------------- parsing


def parse_json(text: str, source: str) -> Any:
    """``json.loads`` that refuses what Python's parser would accept or crash on: deep nesting, huge numbers."""
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_float,
                          object_pairs_hook=_unique_pairs)
    except DuplicateKeyError as exc:
        raise InputError(source, None, f"not valid JSON (duplicate key {exc.key!r})") from None
    except json.JSONDecodeError as exc:
        raise InputError(source, None, f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") \
            from None
    except RecursionError:
        raise InputError(source, None, f"not valid JSON (nested more than {MAX_DEPTH} levels deep)") from None


class DuplicateKeyError(ValueError):
    def __init__(self, key: Any) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different: ``json`` would keep the last of two equal keys, silently."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return out


def _parse_int(text: str) -> int | float:
    return int(text) if len(text) <= MAX_DIGITS else _OUT_OF_RANGE


def _parse_float(text: str) -> float:
    number = float(text)
    return _OUT_OF_RANGE if math.isinf(number) and text.lstrip("+-")[:1].isdigit() else number


def parse_yaml(text: str, source: str) -> Any:
    """Safe YAML without aliases and with bounded nesting, through libyaml when PyYAML has it.

    libyaml composes about ten times faster than the pure-Python loader; its node graph is checked for aliases and
    depth before anything is built from it. On any problem the strict pure-Python loader parses the text again, so
    error messages and line numbers are those of ``yaml.safe_load`` (plus this module's refusals).
    """
    import yaml

    loaders = _loaders()
    fast = loaders[1]
    if fast is not None:
        try:
            loader = fast(text)
            try:
                node = loader.get_single_node()
                if node is not None and _plain_graph(node):
                    data = _plain_data(loader, node)
                    return loader.construct_document(node) if data is _NOT_PLAIN else data
            finally:
                loader.dispose()
        except (yaml.YAMLError, ValueError, RecursionError):
            pass
    try:
        return yaml.load(text, Loader=loaders[0])
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(source, None, f"invalid YAML{where}: {' '.join(str(problem).split())}") from None
    except RecursionError:  # pragma: no cover - the depth limit comes first
        raise InputError(source, None, f"invalid YAML: nested more than {MAX_DEPTH} levels deep") from None


def _plain_graph(root: Any) -> bool:
    """True when the composed node graph is a tree (no alias) no deeper than MAX_DEPTH; iterative, so any depth."""
    seen: set[int] = set()
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen or depth > MAX_DEPTH:
            return False
        seen.add(id(node))
        value = node.value
        if isinstance(value, list):
            for item in value:
                if isinstance(item, tuple):
                    stack.append((item[0], depth + 1))
                    stack.append((item[1], depth + 1))
                else:
                    stack.append((item, depth + 1))
    return True


_STR_TAG, _SEQ_TAG, _MAP_TAG = "tag:yaml.org,2002:str", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"
_KEY_TAGS = frozenset({"tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"})  # keys flatten_mapping rewrites
_NOT_PLAIN = object()


class _NotPlain(Exception):
    pass


def _plain_data(loader: Any, root: Any) -> Any:
    """What ``loader.construct_document(root)`` builds, for a tree (`_plain_graph`) of plain mappings, sequences and
    scalars: strings taken as they are, any other scalar made by the loader's own constructor; ``_NOT_PLAIN`` where
    the tree has anything else (merge keys, other collection tags, a key that is no scalar, two keys of the same
    text), which the loader then builds (or refuses) itself. PyYAML's constructor goes through a generator and
    several calls per node; rule files are mostly strings."""
    try:
        return _plain_node(loader, root)
    except _NotPlain:
        return _NOT_PLAIN


def _plain_node(loader: Any, node: Any) -> Any:
    kind, tag = node.id, node.tag
    if kind == "scalar":
        return node.value if tag == _STR_TAG else loader.construct_object(node, deep=True)
    if kind == "sequence" and tag == _SEQ_TAG:
        return [_plain_node(loader, item) for item in node.value]
    if kind != "mapping" or tag != _MAP_TAG:
        raise _NotPlain
    out: dict[Any, Any] = {}
    seen: set[str] = set()
    for key_node, value_node in node.value:
        if key_node.id != "scalar" or key_node.tag in _KEY_TAGS:
            raise _NotPlain
        key = _plain_node(loader, key_node)
        try:
            name = str(key)
            hash(key)
        except Exception:  # noqa: BLE001 - the loader's own way says what is wrong with it
            raise _NotPlain from None
        if name in seen:  # the loader's construct_mapping refuses it, saying where
            raise _NotPlain
        seen.add(name)
        out[key] = _plain_node(loader, value_node)
    return out


_LOADERS: tuple[Any, Any] | None = None


def _loaders() -> tuple[Any, Any]:
    """(strict pure-Python loader, libyaml loader or None), built once: PyYAML is imported only when needed."""
    global _LOADERS
    if _LOADERS is not None:
        return _LOADERS
    import yaml
    from yaml.composer import ComposerError
    from yaml.constructor import SafeConstructor
    from yaml.error import Mark

    def construct_int(self: Any, node: Any) -> Any:
        if sum(c.isdigit() for c in str(node.value)) > MAX_DIGITS:
            return _OUT_OF_RANGE
        return SafeConstructor.construct_yaml_int(self, node)

    class StrictLoader(yaml.SafeLoader):
        """SafeLoader that refuses aliases (the schema has no use for them, a bomb does) and deep nesting."""

        _depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            if isinstance(event, yaml.AliasEvent):
                # a pure-Python loader's marks are yaml.error.Mark (the stubs allow libyaml's too)
                mark = cast("Mark | None", event.start_mark)
                raise ComposerError(None, None, f"aliases (*{event.anchor}) are not allowed", mark)
            if self._depth >= MAX_DEPTH:
                raise ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
            self._depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    from yaml.constructor import ConstructorError
    from yaml.nodes import MappingNode

    def construct_mapping(self: Any, node: Any, deep: bool = False) -> Any:
        """SafeConstructor's, refusing two keys that are the same text (``1:`` and ``'1':`` are one runner)."""
        if isinstance(node, MappingNode):
            self.flatten_mapping(node)
            seen: set[str] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    name = str(key) if not isinstance(key, (list, dict)) else None
                except Exception:  # noqa: BLE001 - a key that has no text is refused by check_tree
                    name = None
                if name is not None and name in seen:
                    raise ConstructorError("while constructing a mapping", node.start_mark,
                                           f"duplicate key {name!r}", key_node.start_mark)
                if name is not None:
                    seen.add(name)
        return SafeConstructor.construct_mapping(self, node, deep)

    StrictLoader.construct_mapping = construct_mapping  # type: ignore[method-assign]
    StrictLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    fast = None
    if getattr(yaml, "CSafeLoader", None) is not None:

        class FastLoader(yaml.CSafeLoader):
            pass

        FastLoader.construct_mapping = construct_mapping  # type: ignore[method-assign]
        FastLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
        fast = FastLoader
    _LOADERS = (StrictLoader, fast)
    return _LOADERS


# --------------------------------------------------------------------------- checking


def check_tree(data: Any) -> tuple[tuple[Any, ...], str] | None:
    """(path, problem) of the first value that is not plain JSON-able data, or None.

    Refused: nesting deeper than MAX_DEPTH (consumers recurse), numbers that are not finite or do not fit a float
    (NaN cannot be written back as JSON, 10**400 overflows on the first float()), and YAML's dates, sets, bytes and
    pairs (JSON cannot encode them, so the report writer would fail at the end of a run). Iterative, so any depth.
    """
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if len(path) > MAX_DEPTH:
            return path[:MAX_DEPTH], f"nested more than {MAX_DEPTH} levels deep"
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    return path, f"a key of type {_kind(key)} is not allowed"
                if isinstance(key, str) and _SURROGATE.search(key):
                    return (*path, _escaped(key)), _surrogate_problem(key)
                stack.append((item, (*path, key)))
        elif isinstance(value, list):
            stack.extend((item, (*path, i)) for i, item in enumerate(value))
        else:
            problem = scalar_problem(value)
            if problem is not None:
                return path, problem
    return None


def scalar_problem(value: Any) -> str | None:
    """Why a leaf value is not plain data (None when it is): the one number check every loader shares."""
    if isinstance(value, str):
        return _surrogate_problem(value) if _SURROGATE.search(value) else None
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, _OutOfRange) or (isinstance(value, int) and abs(value) > _FLOAT_MAX_INT):
        return "number out of range"
    if isinstance(value, float):
        return None if math.isfinite(value) else "not a finite number"
    if isinstance(value, int):
        return None
    if isinstance(value, date):
        return "a date is not allowed here (quote it to make it a string)"
    return f"a value of type {_kind(value)} is not allowed here"


def _kind(value: Any) -> str:
    return type(value).__name__


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone UTF-16 surrogate (JSON's ``"\\ud800"``, YAML's ``"\\ud800"``): not a character, it cannot be written as
UTF-8, so printing or saving the text would fail far from the file it came from."""


def _surrogate_problem(text: str) -> str:
    found = _SURROGATE.search(text)
    code = ord(found.group()) if found else 0
    return f"holds a lone surrogate (\\u{code:04x} at character {found.start() if found else 0}), which is not text"


def _escaped(text: str) -> str:
    """Text with its surrogates written as escapes, so that it can be printed in an error."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def dotted(path: Sequence[Any]) -> str:
    """``gpus[0].name`` for ("gpus", 0, "name"): the field notation of fingerprint and rule errors."""
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) and not isinstance(key, bool) else (f".{key}" if out else str(key))
    return out


def as_text(value: Any, numbers: bool = True) -> str:
    """A scalar as text; ValueError for a list, a mapping, a boolean, or a number where ``numbers`` is False.

    YAML reads ``driver: 550`` or ``compute_capability: 8.0`` as numbers, and their text is what was meant; a GPU
    name of 123 is a mistake in the file, not a name.
    """
    if isinstance(value, str):
        return value
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"must be a string, not {describe_value(value)}")


def text_field(value: Any, source: str, field: str, rule_id: str | None = None, numbers: bool = True) -> str | None:
    """A string field of a file: None stays None, a scalar becomes its text (see ``as_text``), else InputError."""
    if value is None:
        return None
    try:
        return as_text(value, numbers)
    except ValueError as exc:
        raise InputError(source, field, str(exc), rule_id) from None


def int_field(value: Any, source: str, field: str, minimum: int = 0) -> int | None:
    """A whole-number field (booleans are not numbers here)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(source, field, f"must be a whole number >= {minimum}, not {describe_value(value)}")
    return value


def bool_field(value: Any, source: str, field: str) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise InputError(source, field, f"must be true or false, not {describe_value(value)}")


def describe_value(value: Any) -> str:
    """A value as an error says what was found instead: "a list", "the number 3", "'text'" (shortened)."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r:.40}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
