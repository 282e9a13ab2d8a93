"""The report format's version and enums, and the check of a loaded report against the rules of `schema.json`
that matter, by hand: reading needs no `jsonschema`.

`check_report_dict` stops at the first bad field and names it by its JSON path (`$.cells[3].findings[0].severity`),
so that `load_report` can say what is wrong in one line. Which keys a cell and a finding have, and the JSON types
of each, come from the records (`record.py`): what is written here is only what a type cannot say (enums, the
items of lists and maps, a runner that must exist). `schema.json` is the documented contract and the tests check
that all three agree.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..kb.schema import ACTIONS, CONFIDENCES, SEVERITIES  # the knowledge base's vocabularies, defined once
from .record import CELL_EXTRA, CELL_KEYS, FINDING_KEYS, OUTCOMES, CellRecord, FindingRecord, required_keys

#: Version of the report format this code reads and writes; a reader refuses another one rather than guess.
SCHEMA_VERSION = 1

# The format's other enum (OUTCOMES is the record's): the same list as schema.json's.
DEVIATION_SOURCES: tuple[str, ...] = ("cell", "harness", "environment")

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class InvalidField(Exception):
    """The first field of a report that breaks the schema: where (`path`, JSONPath-style) and what (`problem`)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _child(path: str, key: str | int) -> str:
    """JSONPath-style location: `$.cells[3].findings[0].severity`, `$.runners["runner-a#2"]`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENT.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _type(value: Any, path: str, *kinds: str) -> None:
    kind = _kind(value)
    if kind in kinds or (kind == "integer" and "number" in kinds):
        return
    raise InvalidField(path, f"expected {' or '.join(kinds)}, got {kind} {_show(value)}")


def _enum(value: Any, path: str, allowed: tuple[str, ...], nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if value not in allowed:
        raise InvalidField(path, f"{_show(value)} is not one of {', '.join(allowed)}")


def _required(obj: Mapping[str, Any], path: str, keys: Iterable[str]) -> None:
    for key in keys:
        if key not in obj:
            raise InvalidField(_child(path, key), "required field is missing")


def _optional(obj: Mapping[str, Any], path: str, key: str, *kinds: str) -> None:
    if key in obj:
        _type(obj[key], _child(path, key), *kinds)


def _check_fingerprint(fp: Any, path: str) -> None:
    _type(fp, path, "object")
    _optional(fp, path, "name", "string", "null")
    for key in ("driver", "cuda_driver", "cuda_runtime", "interconnect", "os", "libc", "python"):
        _optional(fp, path, key, "string", "null")
    _optional(fp, path, "packages", "object")
    for name, version in (fp.get("packages") or {}).items():
        _type(version, _child(_child(path, "packages"), name), "string", "null")
    _optional(fp, path, "env", "object")
    for name, value in (fp.get("env") or {}).items():
        _type(value, _child(_child(path, "env"), name), "string")
    _optional(fp, path, "installs", "object")
    for engine, install in (fp.get("installs") or {}).items():
        ipath = _child(_child(path, "installs"), engine)
        _type(install, ipath, "object")
        _optional(install, ipath, "version", "string", "null")
        _optional(install, ipath, "complete", "boolean", "null")
        _optional(install, ipath, "missing", "array")
        for i, item in enumerate(install.get("missing") or ()):
            _type(item, _child(_child(ipath, "missing"), i), "string")
        _optional(install, ipath, "acceleration", "object")
        for name, version in (install.get("acceleration") or {}).items():
            _type(version, _child(_child(ipath, "acceleration"), name), "string")
    _optional(fp, path, "what_if", "string")
    _optional(fp, path, "host", "string")
    _optional(fp, path, "reasons", "array")
    for i, reason in enumerate(fp.get("reasons") or ()):
        _type(reason, _child(_child(path, "reasons"), i), "string")
    _optional(fp, path, "links", "array")
    for i, link in enumerate(fp.get("links") or ()):
        _type(link, _child(_child(path, "links"), i), "object")
    _optional(fp, path, "gpus", "array")
    for i, gpu in enumerate(fp.get("gpus") or ()):
        gpath = _child(_child(path, "gpus"), i)
        _type(gpu, gpath, "object")
        _optional(gpu, gpath, "name", "string", "null")
        _optional(gpu, gpath, "index", "integer", "null")
        _optional(gpu, gpath, "memory_mib", "number", "null")


def _check_finding(finding: Any, path: str) -> None:
    _type(finding, path, "object")
    _required(finding, path, _FINDING_REQUIRED)
    _check_keys(finding, path, FINDING_KEYS, _FINDING_ENUMS, _FINDING_VALUES)


def _check_explanation(entry: Any, path: str) -> None:
    _type(entry, path, "object")
    _required(entry, path, ("id",))
    _type(entry["id"], _child(path, "id"), "string")
    _enum(entry.get("severity"), _child(path, "severity"), SEVERITIES, nullable=True)
    _enum(entry.get("confidence"), _child(path, "confidence"), CONFIDENCES, nullable=True)
    for key in ("failure", "summary", "workaround"):
        _optional(entry, path, key, "string", "null")


def _check_deviation(entry: Any, where: str) -> None:
    _type(entry, where, "object")
    for key in ("name", "by"):
        if key not in entry:
            raise InvalidField(_child(where, key), "is missing")
        _type(entry[key], _child(where, key), "string")
    if entry["by"] not in DEVIATION_SOURCES:
        known = ", ".join(DEVIATION_SOURCES)
        raise InvalidField(_child(where, "by"), f"{_show(entry['by'])} is not one of {known}")
    _optional(entry, where, "why", "string", "null")


def _items(check: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    """A check of every item of a list that has been checked to be one."""
    def each(values: Any, path: str) -> None:
        for i, value in enumerate(values):
            check(value, _child(path, i))
    return each


def _values(check: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    """A check of every value of an object that has been checked to be one."""
    def each(values: Any, path: str) -> None:
        for name, value in values.items():
            check(value, _child(path, name))
    return each


def _number(value: Any, path: str) -> None:
    _type(value, path, "number", "null")


def _nonempty(value: Any, path: str) -> None:
    if not value:
        raise InvalidField(path, "must not be empty")


def _count(value: Any, path: str) -> None:
    if value < 0:
        raise InvalidField(path, f"{_show(value)} is negative: a count is 0 or more")


def _series(values: Any, path: str) -> None:
    _type(values, path, "array")
    _items(_number)(values, path)


def _string(value: Any, path: str) -> None:
    _type(value, path, "string")


def _check_keys(obj: Mapping[str, Any], path: str, keys: Mapping[str, tuple[str, ...]],
                enums: Mapping[str, tuple[tuple[str, ...], bool]],
                values: Mapping[str, Callable[[Any, str], None]]) -> None:
    """Each key of ``keys`` that ``obj`` has: of its JSON types, or for a key of ``enums`` one of its vocabulary
    (null too where it says so); then what ``values`` says of the value beyond its type."""
    for key, kinds in keys.items():
        if key not in obj:
            continue
        where = _child(path, key)
        if key in enums:
            allowed, nullable = enums[key]
            _enum(obj[key], where, allowed, nullable)
        else:
            _type(obj[key], where, *kinds)
        check = values.get(key)
        if check is not None:
            check(obj[key], where)


# What the records' types cannot say: each key's vocabulary (and whether null is allowed), what a value holds.
_FINDING_REQUIRED = required_keys(FindingRecord)
_FINDING_ENUMS: dict[str, tuple[tuple[str, ...], bool]] = {
    "severity": (SEVERITIES, False),
    "confidence": (CONFIDENCES, True),
    "action": (ACTIONS, True),
}
_FINDING_VALUES: dict[str, Callable[[Any, str], None]] = {}
_CELL_REQUIRED = required_keys(CellRecord)
_CELL_KEYS: dict[str, tuple[str, ...]] = {**CELL_KEYS, **CELL_EXTRA}
_CELL_ENUMS: dict[str, tuple[tuple[str, ...], bool]] = {"outcome": (OUTCOMES, False)}
_CELL_VALUES: dict[str, Callable[[Any, str], None]] = {
    "nodeid": _nonempty,
    "rules": _items(_string),
    "findings": _items(_check_finding),
    "explained_by": _items(_check_explanation),
    "deviations": _items(_check_deviation),
    "metrics": _values(_number),
    "series": _values(_series),
    "reruns": _count,
}

#: Every key the validator knows of a cell and of a finding: the records' (and the cell's typed extra keys).
KNOWN_CELL_KEYS: frozenset[str] = frozenset(_CELL_KEYS)
KNOWN_FINDING_KEYS: frozenset[str] = frozenset(FINDING_KEYS)
#: Every key the validator says more of than its type: a test checks each is a known key.
CHECKED_KEYS: frozenset[str] = frozenset({*_FINDING_ENUMS, *_FINDING_VALUES, *_CELL_ENUMS, *_CELL_VALUES})


def _check_cell(cell: Any, path: str, runners: Mapping[str, Any]) -> None:
    _type(cell, path, "object")
    _required(cell, path, _CELL_REQUIRED)
    _check_keys(cell, path, _CELL_KEYS, _CELL_ENUMS, _CELL_VALUES)
    if cell["runner"] not in runners:
        raise InvalidField(_child(path, "runner"), f"{_show(cell['runner'])} is not a key of $.runners")


def check_report_dict(data: Any) -> None:
    """Raise `InvalidField(path, problem)` at the first field that breaks the schema's rules that matter."""
    _type(data, "$", "object")
    _required(data, "$", ("schema_version", "tool_version", "created", "runners", "cells"))
    _type(data["schema_version"], "$.schema_version", "integer")
    if data["schema_version"] != SCHEMA_VERSION:
        raise InvalidField(
            "$.schema_version",
            f"unsupported schema version {data['schema_version']} (this version of pytest-gpucompat reads "
            f"{SCHEMA_VERSION})",
        )
    _type(data["tool_version"], "$.tool_version", "string")
    _type(data["created"], "$.created", "string")
    _optional(data, "$", "interrupted", "boolean")
    _optional(data, "$", "exitstatus", "integer", "null")
    _optional(data, "$", "summary", "object")
    _type(data["runners"], "$.runners", "object")
    for name, fp in data["runners"].items():
        _check_fingerprint(fp, _child("$.runners", name))
    _type(data["cells"], "$.cells", "array")
    for i, cell in enumerate(data["cells"]):
        _check_cell(cell, _child("$.cells", i), data["runners"])


def json_path(keys: Iterable[Any]) -> str:
    """The JSON path of a key sequence (`("cells", 3, "reason")` -> `$.cells[3].reason`)."""
    path = "$"
    for key in keys:
        path = _child(path, key if isinstance(key, int) and not isinstance(key, bool) else str(key))
    return path

