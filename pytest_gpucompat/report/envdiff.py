"""What differed between two runs, beside their cells: the header of `gpucompat diff`.

A figure that moved means little until the reader knows what else changed between the runs: the engine release, a
package installed or not (vLLM with or without FlashInfer), the driver, CUDA, the GPU, what the harness set. Like
pytest-benchmark's machine info, every fingerprint field that differs is listed, generically (a field the
fingerprint gains later is compared too), with these exceptions: names and the fingerprint's `schema` (no property
of the stack), a GPU's `uuid` and `index` and GPU UUIDs in any value (the same model in another slot is the same
hardware), and `workers` (each pytest-xdist worker's copy of the runner's fingerprint). A
list of plain values (an install's missing requirements) is compared as a set: what only one run had. The harness's
deviations from the engines' defaults (`CellRecord.deviations` not set by the cell itself) are compared per engine.

Pure functions: nothing here reads files or clocks.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .model import Report

_IGNORED_TOP = frozenset({"schema", "workers"})
_IGNORED = frozenset({"name", "uuid"})
_IGNORED_GPU = frozenset({"index"})
_GPU_UUID = re.compile(r"\b(GPU|MIG)-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b")
_MAX_VALUE = 300


@dataclass(frozen=True)
class RunSide:
    """One side of the comparison, as the header names it."""

    source: str | None
    runners: tuple[str, ...]
    created: str
    cells: int
    tool_version: str

    def describe(self) -> str:
        where = f"{self.source}: " if self.source else ""
        runners = ", ".join(self.runners) or "no runner"
        return (f"{where}runner{'s' if len(self.runners) > 1 else ''} {runners}, {self.created}, {self.cells} cells, "
                f"gpucompat {self.tool_version}")


@dataclass(frozen=True)
class EnvChange:
    """`what: before → after`; for a set-valued field `before` and `after` are the entries only one run had."""

    what: str
    before: str
    after: str

    @property
    def line(self) -> str:
        return f"{self.what}: {self.before} → {self.after}"


def run_side(report: Report, source: str | None = None) -> RunSide:
    return RunSide(source, tuple(report.runners), report.created, len(report.cells), report.tool_version)


def _text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    text = " ".join(str(value).split())
    return text if len(text) <= _MAX_VALUE else text[: _MAX_VALUE - 1] + "…"


def _flatten(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Dotted paths to leaves; a list of mappings by index, a list of plain values as a frozenset leaf."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            key = str(key)
            if key in _IGNORED or (not path and key in _IGNORED_TOP):
                continue
            if path.startswith("gpus[") and key in _IGNORED_GPU:
                continue
            yield from _flatten(inner, f"{path}.{key}" if path else key)
    elif isinstance(value, (list, tuple)):
        if all(isinstance(v, Mapping) for v in value) and value:
            for i, inner in enumerate(value):
                yield from _flatten(inner, f"{path}[{i}]")
        else:
            yield path, frozenset(_text(v) for v in value)
    elif isinstance(value, str):
        yield path, _GPU_UUID.sub(r"\1-…", value)
    else:
        yield path, value


def fingerprint_changes(before: Mapping[str, Any], after: Mapping[str, Any], prefix: str = "") -> list[EnvChange]:
    """Every field of two fingerprints that differs (module doc), in the order the newer one lists them."""
    old = dict(_flatten(before, ""))
    new = dict(_flatten(after, ""))
    changes = []
    for path in [*new, *(p for p in old if p not in new)]:
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        what = f"{prefix}{path}"
        if isinstance(a, frozenset) or isinstance(b, frozenset):
            a_set = a if isinstance(a, frozenset) else frozenset() if a is None else frozenset({_text(a)})
            b_set = b if isinstance(b, frozenset) else frozenset() if b is None else frozenset({_text(b)})
            gone, came = sorted(a_set - b_set), sorted(b_set - a_set)
            changes.append(EnvChange(f"{what} (entries only one run has)", _text(", ".join(gone)) if gone else "—",
                                     _text(", ".join(came)) if came else "—"))
        else:
            changes.append(EnvChange(what, "absent" if path not in old else _text(a),
                                     "absent" if path not in new else _text(b)))
    return changes


def _harness_deviations(report: Report, runner: str | None) -> dict[str, set[str]]:
    """engine -> the deviations the harness or the environment (not the cell's own parameters) set on its cells."""
    out: dict[str, set[str]] = {}
    for cell in report.cells:
        if runner is not None and cell.runner != runner:
            continue
        for d in cell.deviations:
            if d.get("by") == "cell":
                continue
            out.setdefault(cell.engine or "", set()).add(f"{d.get('name')}={d.get('value')!r} ({d.get('by')})")
    return out


def _deviation_changes(baseline: Report, current: Report, pair: tuple[str | None, str | None],
                       prefix: str) -> list[EnvChange]:
    old = _harness_deviations(baseline, pair[0])
    new = _harness_deviations(current, pair[1])
    changes = []
    for engine in sorted(set(old) | set(new)):
        gone, came = sorted(old.get(engine, set()) - new.get(engine, set())), sorted(
            new.get(engine, set()) - old.get(engine, set()))
        if gone or came:
            changes.append(EnvChange(f"{prefix}harness deviations of {engine or 'no engine'} (only one run has)",
                                     ", ".join(gone) or "—", ", ".join(came) or "—"))
    return changes


def environment_changes(baseline: Report, current: Report) -> tuple[EnvChange, ...]:
    """What differs between the runs: the tool's version, each paired runner's fingerprint and harness deviations,
    and the runners only one report has. One runner on each side pairs them whatever their names; otherwise runners
    pair by name."""
    changes: list[EnvChange] = []
    if baseline.tool_version != current.tool_version:
        changes.append(EnvChange("gpucompat", baseline.tool_version, current.tool_version))
    if len(baseline.runners) == 1 and len(current.runners) == 1:
        (a,), (b,) = baseline.runners, current.runners
        pairs = [(a, b, "")]
    else:
        pairs = [(name, name, f"{name}: ") for name in current.runners if name in baseline.runners]
        changes += [EnvChange(f"runner {name}", "present", "absent") for name in baseline.runners
                    if name not in current.runners]
        changes += [EnvChange(f"runner {name}", "absent", "present") for name in current.runners
                    if name not in baseline.runners]
    for a, b, prefix in pairs:
        changes += fingerprint_changes(baseline.runners[a], current.runners[b], prefix)
        changes += _deviation_changes(baseline, current, (a, b), prefix)
    return tuple(changes)
