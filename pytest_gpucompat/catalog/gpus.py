"""NVIDIA GPU models by name: compute capability, architecture and nominal memory, from ``matrices/gpus.yaml``.

A pasted environment or a hand-written fingerprint names a GPU as NVML spells it ("NVIDIA A100-SXM4-80GB",
"Tesla V100-PCIE-32GB") or as a user types it ("V100", "4090", "A100 80GB"); ``lookup`` finds its model, or None for a
name the table does not know. The table is data (``GPUCOMPAT_MATRICES_DIR`` may point at a team's own), loaded once
and validated: a bad entry is one ``InputError`` naming the file and the field.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import re2

from ..common.errors import InputError
from ..common.inputs import load_file, text_field
from ..common.paths import matrices_dir
from ..common.versions import is_version

ARCHITECTURES = ("kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell")
"""The architecture names the table may use: those machine/fingerprint.py gives NVML's architecture codes."""

_ENTRY_KEYS = {"patterns", "compute_capability", "architecture", "memory_mib"}
_MAX_NAME = 256  # a GPU name is tens of characters; a longer text is no name to look up
_SEPARATORS = str.maketrans({"-": " ", "_": " ", "/": " "})
# GeForce names as users type them run together: "rtx3090", "RTX4090D", "1080ti": the family, the number and its
# suffix are words of their own, as NVML spells them ("NVIDIA GeForce RTX 4090 D")
_RUN_TOGETHER = ((re.compile(r"\b(rtx|gtx)(\d)"), r"\1 \2"), (re.compile(r"\b(\d{4})(ti|d)\b"), r"\1 \2"))


@dataclass(frozen=True)
class GpuModel:
    pattern: str
    compute_capability: str
    architecture: str
    memory_mib: int | None = None


def glob_regex(pattern: str) -> str:
    """An fnmatch glob (``*``, ``?``, ``[...]``, ``[!...]``) as an RE2 pattern: matched in linear time."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        i += 1
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            body = pattern[i:end]
            i = end + 1
            negate = body.startswith("!")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\").replace("^", "\\^") + "]")
        else:
            out.append(re2.escape(char))
    return "".join(out)


def table_path() -> Path:
    return matrices_dir() / "gpus.yaml"


def normalize_name(name: str) -> str:
    """The text patterns match: lower case, "-", "_" and "/" as spaces, one space between words and one at each end
    (" nvidia a100 sxm4 80gb "), so that a space in a pattern is a word's end; a GeForce family or number run
    together with the next word is taken apart first ("rtx3090" as "rtx 3090")."""
    text = name.lower().translate(_SEPARATORS)
    for pattern, spaced in _RUN_TOGETHER:
        text = pattern.sub(spaced, text)
    return " " + " ".join(text.split()) + " "


def lookup(name: str, path: str | Path | None = None) -> GpuModel | None:
    """The model of the GPU ``name`` (NVML's spelling or a short one), or None: the longest matching pattern wins."""
    if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME:
        return None
    return _lookup(normalize_name(name), str(Path(path) if path is not None else table_path()))


@functools.lru_cache(maxsize=1024)
def _lookup(text: str, source: str) -> GpuModel | None:
    for model, compiled in _load(source):
        if compiled.fullmatch(text) is not None:
            return model
    return None


def load_models(path: str | Path | None = None) -> tuple[GpuModel, ...]:
    """Every pattern of the table as a model, longest pattern first (the table's order among equals)."""
    return tuple(model for model, _ in _load(str(Path(path) if path is not None else table_path())))


@functools.cache
def _load(source: str) -> tuple[tuple[GpuModel, Any], ...]:
    """(model, its compiled pattern), longest pattern first."""
    data = load_file(source, "yaml")
    if not isinstance(data, Mapping) or set(map(str, data)) != {"gpus"}:
        raise InputError(source, None, "a mapping with one key, 'gpus', is required")
    entries = data["gpus"]
    if not isinstance(entries, list) or not entries:
        raise InputError(source, "gpus", "must be a list of {patterns, compute_capability, architecture, memory_mib}")
    models: list[tuple[GpuModel, Any]] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        for model, compiled in _entry(entry, source, f"gpus[{i}]"):
            if model.pattern in seen:
                raise InputError(source, f"gpus[{i}].patterns", f"'{model.pattern}' is listed twice")
            seen.add(model.pattern)
            models.append((model, compiled))
    return tuple(sorted(models, key=lambda m: -len(m[0].pattern)))  # sorted() is stable: the table's order among equals


def _entry(raw: Any, source: str, where: str) -> list[tuple[GpuModel, Any]]:
    if not isinstance(raw, Mapping):
        raise InputError(source, where, "must be a mapping with patterns, compute_capability and architecture")
    unknown = set(map(str, raw)) - _ENTRY_KEYS
    if unknown:
        raise InputError(source, f"{where}.{sorted(unknown)[0]}", "unknown key")
    patterns = raw.get("patterns")
    if not isinstance(patterns, list) or not patterns:
        raise InputError(source, f"{where}.patterns", "must be a non-empty list of glob patterns")
    cc = text_field(raw.get("compute_capability"), source, f"{where}.compute_capability")
    if cc is None or not is_version(cc) or cc.count(".") != 1:
        raise InputError(source, f"{where}.compute_capability", f"'{cc}' is not a compute capability such as 8.0")
    arch = raw.get("architecture")
    if arch not in ARCHITECTURES:
        raise InputError(source, f"{where}.architecture", f"'{arch}' is not one of {', '.join(ARCHITECTURES)}")
    memory = raw.get("memory_mib")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory <= 0):
        raise InputError(source, f"{where}.memory_mib", "must be a whole number of MiB above 0")
    out = []
    for j, pattern in enumerate(patterns):
        if not isinstance(pattern, str) or not pattern.startswith("* ") or not pattern.endswith(" *"):
            raise InputError(source, f"{where}.patterns[{j}]", "must be a glob text of the form '* words *'")
        if pattern != pattern.lower() or "  " in pattern:
            raise InputError(source, f"{where}.patterns[{j}]", "must be lower case with single spaces")
        try:
            compiled = re2.compile(glob_regex(pattern))
        except re2.error:
            raise InputError(source, f"{where}.patterns[{j}]", f"'{pattern}' is not a glob pattern") from None
        out.append((GpuModel(pattern, cc, str(arch), memory), compiled))
    return out
