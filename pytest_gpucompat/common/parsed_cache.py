"""The shipped YAML data files, parsed once per content rather than once per process.

Parsing the shipped rule files is most of what a ``--gpucompat`` start spends on the knowledge base (libyaml and
PyYAML's constructor). Their data, when JSON holds it exactly (mappings with text keys, lists, text, ints, finite
floats, booleans, null), is kept as strict JSON in the per-user cache (``common.paths.cache_dir``), one file per
content: named by the SHA-256 of the file's text and of what parses it (this module and ``common.inputs``, and the
PyYAML found), so an edited file, another parser or another release finds no entry and parses anew.

A cache is something another program may have written, so an entry is only data: it is read bounded and regular
from a directory of this user that no one else can write, judged on the objects opened rather than on paths
(``_read_trusted``: no check-then-open race for another user to win), parsed by the strict JSON reader, must name
its own key (the hash of the source's bytes read now), and passes ``check_tree`` like any data file; the caller
validates the data as it validates what YAML gave (a rule file's rules are checked field by field either way). Any
problem reading or writing an entry is a miss: the file is parsed as before, and nothing is said.

The same cache keeps sets of texts a pure judgement found good (``remembered_texts``, ``remember_texts``): the
signatures' patterns that ``kb.regex_safety`` passed, keyed by what judged them, so a start does not judge the same
pattern text again. An entry is a list of texts, bounded in count and length, read under the same rules; anything
else is an empty set (every text is judged again).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import math
import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import inputs
from .errors import InputError
from .paths import cache_dir, check_cache_entry

_MISS = object()
_ENTRY_MODE = 0o600
_DIR_MODE = 0o700
_SALT: list[bytes] = []  # computed once per process
MAX_TEXTS = 4096
"""The most texts one remembered set keeps (``remember_texts``): more start it anew."""
MAX_TEXT_CHARS = 4096
"""The longest text a remembered set keeps."""
_TEXT_SETS: dict[Path, frozenset[str]] = {}  # entry -> its texts, read once per process


def load_yaml_cached(path: str | os.PathLike[str], limit: int = inputs.MAX_FILE_BYTES) -> Any:
    """``inputs.load_file(path, "yaml", limit)``: the same data, or the same ``InputError``."""
    source = os.fspath(path)
    text = inputs.read_text(path, limit)
    key = hashlib.sha256(_salt() + text.encode("utf-8", "surrogatepass")).hexdigest()
    entry = _entry_dir() / f"{key}.json"
    data = _read_entry(entry, key, limit)
    if data is _MISS:
        data = inputs.parse_yaml(text, source)
        bad = inputs.check_tree(data)
        if bad is None and _json_exact(data, 0):
            _write_entry(entry, key, data)
    else:
        bad = inputs.check_tree(data)
    if bad is not None:
        raise InputError(source, inputs.dotted(bad[0]) or None, bad[1])
    return data


def _salt() -> bytes:
    """What the parsed data depends on besides the file: this module, ``common.inputs`` and the PyYAML found."""
    if not _SALT:
        digest = hashlib.sha256()
        for module_file in (__file__, inputs.__file__):
            with contextlib.suppress(OSError):
                digest.update(Path(module_file).read_bytes())
        with contextlib.suppress(Exception):
            spec = importlib.util.find_spec("yaml")
            origin = spec.origin if spec is not None else None
            if origin:
                st = os.stat(origin)
                digest.update(f"{origin}\0{st.st_size}\0{st.st_mtime_ns}\0".encode("utf-8", "replace"))
        _SALT.append(digest.digest())
    return _SALT[0]


def _entry_dir() -> Path:
    return cache_dir() / "parsed"


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_TRUSTED = hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY") and os.open in os.supports_dir_fd
"""Whether this platform can read an entry without a check-then-open race (Linux, macOS): elsewhere nothing is read
from the cache (every file is parsed)."""


def _ours(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _read_trusted(entry: Path, limit: int) -> bytes | None:
    """The bytes of ``entry`` (cache root / directory / file), or None unless every step is this user's and no one
    else's to write: each directory is opened without following a link and judged by ``fstat`` on what was opened,
    the next step opened relative to it, and the file judged the same way (regular, this user's, one link, not
    writable by others, at most ``limit`` bytes). Another user who controls a parent directory can swap paths
    between a check and an open; here the check is of the object opened, so a swap is a miss, never a load."""
    fds: list[int] = []
    try:
        fds.append(os.open(entry.parent.parent, _DIR_FLAGS))
        for name, flags in ((entry.parent.name, _DIR_FLAGS), (entry.name, _FILE_FLAGS)):
            if not _ours(os.fstat(fds[-1])):  # the directory opened, whatever its path names now
                return None
            fds.append(os.open(name, flags, dir_fd=fds[-1]))
        st = os.fstat(fds[-1])
        if not stat.S_ISREG(st.st_mode) or not _ours(st) or st.st_nlink != 1 or st.st_size > limit:
            return None
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fds[-1], min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return None if size > limit else b"".join(chunks)
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


def _read_entry(entry: Path, key: str, limit: int) -> Any:
    if not _TRUSTED:
        return _MISS
    raw = _read_trusted(entry, 2 * limit + 4096)
    if raw is None:
        return _MISS
    try:
        wrapper = inputs.parse_json(raw.decode("utf-8"), str(entry))
    except (ValueError, InputError, UnicodeError, RecursionError):
        return _MISS
    if not isinstance(wrapper, dict) or set(wrapper) != {"key", "data"} or wrapper["key"] != key:
        return _MISS
    return wrapper["data"] if _json_exact(wrapper["data"], 0) else _MISS


def _write_entry(entry: Path, key: str, data: Any) -> None:
    from . import files  # only when writing: a start that finds its entries never needs it
    try:
        for directory in (entry.parent.parent, entry.parent):
            check_cache_entry(directory, "the cache directory")
            if not directory.is_dir():
                os.makedirs(directory, mode=_DIR_MODE, exist_ok=True)
                check_cache_entry(directory, "the cache directory")
        text = inputs.json.dumps({"key": key, "data": data}, ensure_ascii=False, allow_nan=False,
                                 separators=(",", ":"))
        files.write_atomic(entry, text, mode=_ENTRY_MODE)
    except (OSError, ValueError, TypeError, RecursionError):
        pass


def _json_exact(data: Any, depth: int) -> bool:
    """Whether strict JSON gives back exactly ``data``: dicts with str keys, lists, str, int, finite float, bool,
    None, of exactly those types (a YAML date or a subclass is not)."""
    if depth > inputs.MAX_DEPTH:
        return False
    cls = data.__class__
    if cls is str or cls is int or cls is bool or data is None:
        return True
    if cls is float:
        return math.isfinite(data)
    if cls is list:
        return all(_json_exact(item, depth + 1) for item in data)
    if cls is dict:
        return all(k.__class__ is str and _json_exact(v, depth + 1) for k, v in data.items())
    return False


def remembered_texts(name: str, salt: bytes) -> frozenset[str]:
    """The texts remembered under ``name`` for ``salt`` (what judged them: a change to it finds no entry), read once
    per process; empty where there is no entry or one that is not a list of at most ``MAX_TEXTS`` texts of at most
    ``MAX_TEXT_CHARS`` characters each, read from a trusted directory."""
    entry, key = _text_entry(name, salt)
    known = _TEXT_SETS.get(entry)
    if known is None:
        data = _read_entry(entry, key, MAX_TEXTS * (MAX_TEXT_CHARS + 8))
        good = (data.__class__ is list and len(data) <= MAX_TEXTS
                and all(t.__class__ is str and len(t) <= MAX_TEXT_CHARS for t in data))
        known = _TEXT_SETS[entry] = frozenset(data) if good else frozenset()
    return known


def remember_texts(name: str, salt: bytes, texts: Iterable[str]) -> None:
    """Add ``texts`` to those remembered under ``name`` for ``salt`` (those too long are left out; a set that would
    grow past ``MAX_TEXTS`` starts anew). Written only where something is new; a failure to write is nothing."""
    known = remembered_texts(name, salt)
    new = {t for t in texts if t.__class__ is str and len(t) <= MAX_TEXT_CHARS} - known
    if not new:
        return
    kept = known | new if len(known) + len(new) <= MAX_TEXTS else frozenset(sorted(new)[:MAX_TEXTS])
    entry, key = _text_entry(name, salt)
    _TEXT_SETS[entry] = kept
    _write_entry(entry, key, sorted(kept))


def _text_entry(name: str, salt: bytes) -> tuple[Path, str]:
    key = hashlib.sha256(salt + b"\0" + name.encode("utf-8", "surrogatepass")).hexdigest()
    return _entry_dir() / f"{name}-{key}.json", key
