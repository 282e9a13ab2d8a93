"""Test matrices: from a marker or a named matrix in matrices/ to cells with stable ids.

Cells come from data only, never from the local machine, so every pytest-xdist worker collects
the same ids in the same order; the fingerprint decides marks, not ids.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..common.errors import InputError
from ..common.inputs import load_file
from ..common.paths import matrices_dir
from ..common.versions import parse_specifier
from ..kb.load import file_stamp

_MARKER_KEYS = {"engine", "params", "axes", "matrix"}
_GLOB_AXES = ("gpu", "arch")
_NO_AXES: Mapping[str, str] = MappingProxyType({})
MAX_CELLS = 100_000  # cells of one block: far above a real matrix, far below what exhausts the memory


@dataclass(frozen=True, slots=True)
class MatrixCell:
    """A planned point of the matrix: an engine, its launch parameters, and the fleet axes it is meant to run on;
    what a test's ``gpucompat_cell`` is. Not the item's state while it runs (``session.state.LiveCell``) nor what
    the report says of it (``report.record.CellRecord``); public as ``pytest_gpucompat.MatrixCell`` and, by its
    earlier name, ``pytest_gpucompat.Cell``. (Slots, and one shared empty mapping for the cells of a block without
    axes: a matrix may hold 100,000 cells for the whole run.)"""

    engine: str
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    axes: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def id(self) -> str:
        parts = [self.engine]
        parts += [f"{k}={_id_value(v)}" for k, v in self.params.items()]
        parts += [f"{k}={v}" for k, v in self.axes.items()]
        return "-".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "params": dict(self.params), "axes": dict(self.axes)}


def _id_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def expand_block(block: Mapping[str, Any], source: str, where: str) -> list[MatrixCell]:
    """Cartesian product over engines, parameter values and axis values; order follows the data."""
    unknown = set(map(str, block)) - (_MARKER_KEYS - {"matrix"})
    if unknown:
        raise InputError(source, f"{where}.{sorted(unknown)[0]}", "unknown key (engine, params, axes)")
    engines = _as_list(block.get("engine") or [])
    if not engines:
        raise InputError(source, f"{where}.engine", "required: an engine name or a list of them")
    for i, engine in enumerate(engines):
        if not isinstance(engine, str):
            raise InputError(source, f"{where}.engine[{i}]", f"an engine name must be a string, not {engine!r:.40}")
    params = block.get("params") or {}
    axes = block.get("axes") or {}
    for name, value in (("params", params), ("axes", axes)):
        if not isinstance(value, Mapping):
            raise InputError(source, f"{where}.{name}", "must be a mapping of name -> list of values")
    for axis, values in axes.items():
        if not isinstance(axis, str):
            raise InputError(source, f"{where}.axes.{axis}", "an axis name must be a string")
        for v in _as_list(values):
            _check_axis(axis, v, source, f"{where}.axes.{axis}")
    p_names = list(params)
    a_names = list(axes)
    count = len(engines)
    for values in [*(params[n] for n in p_names), *(axes[n] for n in a_names)]:
        count *= len(_as_list(values))
        if count > MAX_CELLS:  # checked before expanding: 20 parameters of 10 values would never finish
            raise InputError(source, where, f"expands to more than {MAX_CELLS} cells")
    cells = []
    no_axes = not a_names
    for engine in engines:
        for p_values in itertools.product(*(_as_list(params[n]) for n in p_names)):
            for a_values in itertools.product(*(_as_list(axes[n]) for n in a_names)):
                cells.append(MatrixCell(engine=str(engine), params=dict(zip(p_names, p_values)),
                                  axes=_NO_AXES if no_axes else {n: str(v) for n, v in zip(a_names, a_values)}))
    return cells


def _check_axis(axis: str, value: Any, source: str, where: str) -> None:
    if axis in _GLOB_AXES:
        return
    try:
        parse_specifier(str(value))
    except ValueError as exc:
        raise InputError(source, where, str(exc)) from None


def load_named_matrices(path: str | None = None) -> dict[str, tuple[MatrixCell, ...]]:
    """The named matrices of ``path`` (default: ``matrices.yaml`` in the matrices directory, which
    ``GPUCOMPAT_MATRICES_DIR`` overrides); remembered per file version, so a changed directory or file is read."""
    file = Path(path) if path else matrices_dir() / "matrices.yaml"
    return _load_named_matrices(str(file), file_stamp(file))


@lru_cache(maxsize=4)
def _load_named_matrices(source: str, stamp: Any) -> dict[str, tuple[MatrixCell, ...]]:
    if stamp is None:  # no such file
        return {}
    file = Path(source)
    data = load_file(file, "yaml") or {}
    matrices = data.get("matrices") if isinstance(data, Mapping) else None
    if not isinstance(matrices, Mapping):
        raise InputError(source, "matrices", "a mapping of matrix name -> list of blocks is required")
    out: dict[str, tuple[MatrixCell, ...]] = {}
    for name, blocks in matrices.items():
        cells: list[MatrixCell] = []
        for i, block in enumerate(_as_list(blocks)):
            if not isinstance(block, Mapping):
                raise InputError(source, f"matrices.{name}[{i}]", "must be a mapping")
            cells.extend(expand_block(block, source, f"matrices.{name}[{i}]"))
        out[str(name)] = tuple(cells)
    return out


def cells_from_marker(args: Sequence[Any], kwargs: Mapping[str, Any], where: str) -> list[MatrixCell]:
    """``@pytest.mark.gpucompat(engine=..., params=..., axes=...)`` or ``(matrix="name")``; ``exclusive=True`` (the
    test has its GPU to itself when workers share GPUs, sharing.py) changes no cell."""
    unknown = set(kwargs) - _MARKER_KEYS - {"exclusive"}
    if unknown or args:
        bad = sorted(unknown)[0] if unknown else "positional arguments"
        raise InputError(where, f"gpucompat({bad})",
                         "unknown marker argument (engine, params, axes, matrix, exclusive)")
    if not isinstance(kwargs.get("exclusive", False), bool):
        raise InputError(where, "gpucompat(exclusive)", "must be True or False")
    kwargs = {k: v for k, v in kwargs.items() if k != "exclusive"}
    if "matrix" in kwargs:
        named = load_named_matrices()
        name = kwargs["matrix"]
        if name not in named:
            known = ", ".join(sorted(named)) or "none"
            raise InputError(where, "gpucompat(matrix)", f"no matrix named '{name}' (known: {known})")
        cells = list(named[name])
        if "engine" in kwargs:
            wanted = set(_as_list(kwargs["engine"]))
            cells = [c for c in cells if c.engine in wanted]
        return cells
    return expand_block(kwargs, where, "gpucompat")

