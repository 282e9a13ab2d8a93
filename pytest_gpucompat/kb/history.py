"""Each engine release's flags, environment variables, attention backends and pins, read from the released wheels
(``matrices/history/<engine>.json``, written by ``tools/engine_history.py``), and the questions asked of them.

Which flag, choice or backend exists in which release is a fact of the released artifacts that no one keeps right by
hand across a hundred releases; rules (``kb.lint``), a user's own command line (``kb.cmdline``) and the matrices'
engine settings (``kb.evaluate``) are checked against it without the engine installed.

The file holds *runs*: for each item, the maximal stretches of consecutive releases in which it exists with the same
attributes. A release the tool could not read is listed with an ``error``; what it had is unknown, never "absent".

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..common.errors import InputError
from ..common.inputs import bool_field, describe_value, load_file, text_field
from ..common.paths import matrices_dir
from ..common.versions import normalize_package, parse_version

KINDS = ("flags", "env", "backends", "requires", "anchors", "stack")
"""``anchors``: per code anchor of a rule (its digest, ``kb.anchors``), the releases where it holds; ``stack``: per
release build fact (CUDA, TensorRT, base container, driver floor) of an engine whose history is its release notes."""
FORMAT = 1
_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")
UNREAD_RELEASE: Mapping[str, Any] = {"unknown": True}
"""What ``History.item`` returns for a release whose artifact could not be read: neither present nor absent."""


def norm_flag(flag: str) -> str:
    """``--kv_cache_dtype=fp8`` -> ``--kv-cache-dtype``: the engines' parsers take dashes and underscores alike."""
    return flag.split("=", 1)[0].strip().replace("_", "-").lower()


def is_env_name(name: str) -> bool:
    return bool(_ENV_NAME.match(name))


@dataclass(frozen=True)
class Release:
    version: Version
    text: str
    file: str = ""
    sha256: str = ""
    uploaded: str = ""
    yanked: bool = False
    error: str | None = None

    @property
    def read(self) -> bool:
        return self.error is None


@dataclass(frozen=True, eq=False)
class History:
    """One engine's releases in version order and, per kind and item, its runs as (first, last) release indexes.
    Compared and hashed by identity: one object per loaded file, the key of the caches below."""

    engine: str
    package: str
    source: str
    releases: tuple[Release, ...]
    runs: Mapping[str, Mapping[str, tuple[tuple[int, int, Mapping[str, Any]], ...]]] = field(hash=False)
    tool_version: str = ""

    # -- releases

    def index_of(self, version: str | Version) -> int | None:
        """The release a version is: itself, else its public release (``0.26.0+cu130``, ``0.26.0.dev3`` are not
        releases of the index; their release is 0.26.0 when the history has it). None: not in the history."""
        v = version if isinstance(version, Version) else parse_version(str(version))
        for candidate in (v, Version(v.base_version)):
            i = self._by_version().get(candidate)
            if i is not None:
                return i
        return None

    def _by_version(self) -> dict[Version, int]:
        return _version_index(self)

    def span(self) -> str:
        read = [r.text for r in self.releases if r.read]
        return f"{read[0]}-{read[-1]}" if read else "no release read"

    def in_range(self, spec: SpecifierSet | None) -> list[int]:
        """Indexes of the read releases a specifier accepts (all read releases for None); pre-releases count."""
        return [i for i, r in enumerate(self.releases)
                if r.read and (spec is None or spec.contains(r.version, prereleases=True))]

    # -- items

    def item(self, kind: str, name: str, index: int) -> Mapping[str, Any] | None:
        """The attributes of ``name`` in release ``index``; None when that release does not have it; ``UNREAD_RELEASE``
        when the release could not be read."""
        if not self.releases[index].read:
            return UNREAD_RELEASE
        for first, last, attrs in self.runs.get(kind, {}).get(self.key(kind, name), ()):
            if first <= index <= last:
                return attrs
        return None

    def key(self, kind: str, name: str) -> str:
        if kind == "flags":
            return norm_flag(name)
        if kind == "requires":
            return normalize_package(name)
        return name

    def known(self, kind: str, name: str) -> bool:
        """Whether any release has ``name``."""
        return bool(self.runs.get(kind, {}).get(self.key(kind, name)))

    def where(self, kind: str, name: str) -> str:
        """The releases that have ``name``, as ranges of consecutive releases: ``0.3.0-0.26.0, 0.28.0``; "none"."""
        have = sorted({i for first, last, _ in self.runs.get(kind, {}).get(self.key(kind, name), ())
                       for i in range(first, last + 1)})
        return self.ranges(have) or "none"

    def ranges(self, indexes: Iterable[int]) -> str:
        """Release indexes as ``first-last`` stretches of consecutive read releases."""
        out: list[str] = []
        start = prev = None
        for i in sorted(i for i in indexes if self.releases[i].read):
            if prev is not None and self._next_read(prev) == i:
                prev = i
                continue
            if start is not None and prev is not None:
                out.append(self._stretch(start, prev))
            start = prev = i
        if start is not None and prev is not None:
            out.append(self._stretch(start, prev))
        return ", ".join(out)

    def _next_read(self, i: int) -> int | None:
        for j in range(i + 1, len(self.releases)):
            if self.releases[j].read:
                return j
        return None

    def _stretch(self, a: int, b: int) -> str:
        return self.releases[a].text if a == b else f"{self.releases[a].text}-{self.releases[b].text}"

    def flags_at(self, index: int) -> dict[str, Mapping[str, Any]]:
        """Every flag of release ``index`` with its attributes."""
        return {name: attrs for name, runs in self.runs.get("flags", {}).items()
                for first, last, attrs in runs if first <= index <= last}

    def flag_for_dest(self, dest: str, index: int) -> tuple[str, Mapping[str, Any]] | None:
        """The flag that sets engine setting ``dest`` (a keyword of the engine's Python API) in release ``index``.
        Looked up in the runs of that setting alone (``_by_dest``): asked per release and per setting, a scan of
        every flag would make a lint quadratic in the size of the history."""
        for name, first, last, attrs in _by_dest(self).get(dest, ()):
            if first <= index <= last:
                return name, attrs
        return None

    def dest_known(self, dest: str) -> bool:
        return dest in _dests(self)

    def dest_where(self, dest: str) -> str:
        return self.ranges({i for _, first, last, _ in _dests(self).get(dest, ()) for i in range(first, last + 1)})


@lru_cache(maxsize=16)
def _version_index(history: History) -> dict[Version, int]:
    return {r.version: i for i, r in enumerate(history.releases)}


Runs = list[tuple[str, int, int, Mapping[str, Any]]]


def _by_dest(history: History) -> Mapping[str, Runs]:
    """Per setting, the runs of the flags that set it (``--no-X`` left out), flags in name order."""
    return _dest_index(history)[0]


def _dests(history: History) -> Mapping[str, Runs]:
    """Per setting, the runs of every flag that sets it, ``--no-X`` included (what ``dest_known`` and
    ``dest_where`` ask)."""
    return _dest_index(history)[1]


@lru_cache(maxsize=16)
def _dest_index(history: History) -> tuple[dict[str, Runs], dict[str, Runs]]:
    """Both indexes in one pass over the flags' runs, nothing expanded per release."""
    setting: dict[str, Runs] = {}
    every: dict[str, Runs] = {}
    for name, runs in history.runs.get("flags", {}).items():
        negative = name.startswith("--no-")
        for first, last, attrs in runs:
            dest = attrs.get("dest")
            if isinstance(dest, str):
                run = (name, first, last, attrs)
                every.setdefault(dest, []).append(run)
                if not negative:
                    setting.setdefault(dest, []).append(run)
    for found in setting.values():
        if len(found) > 1:
            found.sort(key=lambda run: run[:3])
    return setting, every


# --------------------------------------------------------------------------------------------------------------
# loading


def history_dir() -> Path:
    return matrices_dir() / "history"


def load_history(engine: str, directory: str | Path | None = None) -> History | None:
    """The history of ``engine`` (its registry name), or None when there is none. A malformed file is an
    ``InputError`` naming the file and field."""
    path = Path(directory) / f"{engine}.json" if directory is not None else history_dir() / f"{engine}.json"
    try:
        st = path.stat()
    except OSError:
        return None
    return _load(str(path), (st.st_ino, st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=8)
def _load(source: str, stamp: Any) -> History:
    del stamp  # part of the cache key only
    data = load_file(source, "json")
    if not isinstance(data, Mapping):
        raise InputError(source, None, "must be a JSON object")
    if data.get("format") != FORMAT:
        raise InputError(source, "format", f"must be {FORMAT} (re-make it with tools/engine_history.py)")
    releases = _releases(data.get("releases"), source)
    index = {r.text: i for i, r in enumerate(releases)}
    runs: dict[str, dict[str, tuple[tuple[int, int, Mapping[str, Any]], ...]]] = {}
    for kind in KINDS:
        items = data.get(kind) or {}
        if not isinstance(items, Mapping):
            raise InputError(source, kind, "must be an object of item -> runs")
        parsed: dict[str, tuple[tuple[int, int, Mapping[str, Any]], ...]] = {}
        for name, item_runs in items.items():
            where = f"{kind}.{name}"
            if not isinstance(item_runs, list):
                raise InputError(source, where, "must be a list of runs")
            out = []
            for j, run in enumerate(item_runs):
                if not isinstance(run, Mapping):
                    raise InputError(source, f"{where}[{j}]", "must be an object with first and last")
                ends = [index.get(end) if isinstance(end := run.get(k), str) else None for k in ("first", "last")]
                if ends[0] is None or ends[1] is None or ends[0] > ends[1]:
                    raise InputError(source, f"{where}[{j}]", "first and last must be releases listed, in order")
                attrs = {k: v for k, v in run.items() if k not in ("first", "last")}
                _check_attrs(kind, attrs, source, f"{where}[{j}]")
                out.append((ends[0], ends[1], attrs))
            key = norm_flag(name) if kind == "flags" else normalize_package(name) if kind == "requires" else name
            # `--preemption_mode` and `--preemption-mode` both exist in some releases: one flag to the parser
            parsed[key] = tuple(sorted((*parsed.get(key, ()), *out), key=lambda run: run[:2]))
        runs[kind] = parsed
    engine = data.get("engine")
    if not isinstance(engine, str) or not engine:
        raise InputError(source, "engine", "required, a string")
    named = data.get("package")
    if named is not None and not isinstance(named, str):
        raise InputError(source, "package", "must be a string")
    package = named if isinstance(named, str) else engine
    tool_version = data.get("tool_version", "")
    if not isinstance(tool_version, str):
        raise InputError(source, "tool_version", "must be a string")
    return History(engine=engine, package=normalize_package(package), source=source, releases=releases,
                   runs=runs, tool_version=tool_version)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _scalars(value: Any) -> bool:
    return isinstance(value, list) and all(_scalar(v) for v in value)


def _flag_default(value: Any) -> bool:  # argparse defaults: scalars, lists and (vLLM's config objects) mappings
    return _scalar(value) or isinstance(value, (list, Mapping))


_ATTRS: Mapping[str, Mapping[str, tuple[Any, str]]] = {
    "flags": {"action": (_text, "a string"), "dest": (_text, "a string"), "type": (_text, "a string"),
              "choices": (lambda v: v is None or _scalars(v), "a list of values"),
              "deprecated": (lambda v: isinstance(v, bool), "true or false"),
              "default": (_flag_default, "a value")},
    "env": {"default": (_scalar, "a string, number or boolean")},
    "backends": {"class": (_text, "a string"), "dtypes": (_scalars, "a list of values"),
                 "kv_cache_dtypes": (_scalars, "a list of values"),
                 "head_sizes": (lambda v: _text(v) or _scalars(v), "a list of values or a string"),
                 "block_sizes": (lambda v: _text(v) or _scalars(v), "a list of values or a string"),
                 "enum": (lambda v: isinstance(v, bool), "true or false"),
                 "compute_capability": (_text, "a string")},
    "requires": {"specifier": (_text, "a string"), "major": (_text, "a string")},
}
"""The type of every attribute a run may carry, by kind: what the readers of a history compare, hash and look up
(a flag's ``action`` is looked up in a set: a list there was a TypeError, not a line naming the field)."""


def _check_attrs(kind: str, attrs: Mapping[str, Any], source: str, where: str) -> None:
    known = _ATTRS.get(kind, {})
    for name, value in attrs.items():
        check = known.get(name)
        if check is not None and not check[0](value):
            raise InputError(source, f"{where}.{name}", f"must be {check[1]}, not {describe_value(value)}")


def _releases(raw: Any, source: str) -> tuple[Release, ...]:
    if not isinstance(raw, list) or not raw:
        raise InputError(source, "releases", "must be a non-empty list")
    out = []
    for i, r in enumerate(raw):
        if not isinstance(r, Mapping) or not isinstance(r.get("version"), str):
            raise InputError(source, f"releases[{i}].version", "required")
        try:
            version = parse_version(r["version"])
        except ValueError as exc:
            raise InputError(source, f"releases[{i}].version", str(exc)) from None
        for name in ("file", "sha256", "uploaded", "error"):
            text_field(r.get(name), source, f"releases[{i}].{name}", numbers=False)
        bool_field(r.get("yanked"), source, f"releases[{i}].yanked")
        error = r.get("error")
        out.append(Release(version=version, text=r["version"], file=r.get("file") or "",
                           sha256=r.get("sha256") or "", uploaded=r.get("uploaded") or "",
                           yanked=r.get("yanked") is True, error=error or None))
    ordered = tuple(sorted(out, key=lambda r: r.version))
    if [r.text for r in ordered] != [r.text for r in out]:
        raise InputError(source, "releases", "must be in version order")
    if len({r.version for r in out}) != len(out):
        raise InputError(source, "releases", "lists a version twice")
    return ordered


def cached_history(engine: str) -> History | None:
    """``load_history`` without a stat per call, for the per-cell path (kb.settings): a history file does not
    change while a run judges its cells; a changed GPUCOMPAT_MATRICES_DIR is another key."""
    return _cached(engine, str(history_dir()))


@lru_cache(maxsize=32)
def _cached(engine: str, directory: str) -> History | None:
    return load_history(engine, directory)


def histories(engines: Sequence[str] | None = None) -> dict[str, History]:
    """The histories that exist, per engine registry name (every engine rules may name when not given)."""
    from ..catalog.registry import kb_engine_names

    out = {}
    for engine in engines if engines is not None else kb_engine_names():
        found = load_history(engine)
        if found is not None:
            out[engine] = found
    return out
