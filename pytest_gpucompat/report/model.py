"""The report of a run (or of several merged runs): plain frozen data and its JSON form.

`Report` holds `CellRecord`s (one test item as one runner saw it), which hold `FindingRecord`s (a knowledge-base
rule that matched the cell, as recorded; not the knowledge base's own `Finding`, nor the matrix's `MatrixCell`). Both
records are defined in `record.py` and re-exported here, where their readers have always found them. The format's
enums and the check of a loaded dict live in `validate.py`, reading and writing files in `io.py`; `schema.json`
next to this module is the documented contract.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from itertools import islice
from json import encoder as json_encoder
from typing import Any

from pytest_gpucompat import __version__

from ..common.jsontext import encoder_once
from .record import (
    NOT_STARTED_REASON,
    OUTCOMES,
    RAN_OUTCOMES,
    STOPPED_IN_SETUP,
    STOPPED_REASON,
    WORKER_DIED_REASON,
    CellRecord,
    FindingRecord,
    _test_of,
    split_known,
)
from .validate import SCHEMA_VERSION, SEVERITIES, InvalidField, check_report_dict

__all__ = [  # the records and the outcomes are record.py's, named here for the modules that read a Report
    "DEVIATIONS_SUMMARY",
    "OUTCOMES",
    "RAN_OUTCOMES",
    "SEVERITIES",
    "NOT_STARTED_REASON",
    "STOPPED_IN_SETUP",
    "STOPPED_REASON",
    "WORKER_DIED_REASON",
    "CellRecord",
    "FindingRecord",
    "Report",
    "ReportError",
    "deviation_groups",
    "utc_now",
]

_CELLS_MARK = "\x00gpucompat-cells\x00"  # stands for the cells while the rest is indented; no string has it


class ReportError(Exception):
    """A report file that cannot be used; the message is one line meant for the user, never a traceback."""


def utc_now() -> str:
    """ISO-8601 UTC timestamp with a `Z`, to the second: reports are compared by humans, not by nanoseconds."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


DEVIATIONS_SUMMARY = (
    "What the cells' engines ran with that is not how the engine ships: a cell's own parameter (cell), a declared "
    "default of the harness (harness, with its reason) or an environment variable; the engine's own value beside "
    "it where it could be read. A verdict holds for these settings, not necessarily for the defaults."
)


def deviation_groups(cells: Iterable[CellRecord]) -> list[tuple[str, str, int]]:
    """(engine, the deviations as one line, number of cells) for every distinct set of deviations, engine by
    engine: what the renderers list under "Settings that differ from the engines' defaults"."""
    counts: dict[tuple[str, str], int] = {}
    for cell in cells:
        if cell.deviations and cell.ran:
            key = (cell.engine or "", cell.deviations_text())
            counts[key] = counts.get(key, 0) + 1
    return [(engine, text, n) for (engine, text), n in sorted(counts.items())]


@dataclass(frozen=True, kw_only=True)
class Report:
    """Cells of one or several runners, with each runner's fingerprint; `summary` is derived, never stored."""

    runners: Mapping[str, Mapping[str, Any]]
    cells: tuple[CellRecord, ...]
    interrupted: bool = False
    exitstatus: int | None = None
    created: str = field(default_factory=utc_now)
    tool_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)

    _KEYS = (
        "schema_version",
        "tool_version",
        "created",
        "interrupted",
        "exitstatus",
        "summary",
        "runners",
        "cells",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "runners", {str(k): dict(v) for k, v in self.runners.items()})
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "extra", dict(self.extra))
        unknown = sorted({c.runner for c in self.cells} - set(self.runners))
        if unknown:
            raise ValueError(f"cells name runners without a fingerprint: {', '.join(map(repr, unknown))}")

    @classmethod
    def from_run(
        cls,
        fingerprint: Mapping[str, Any],
        cells: Iterable[CellRecord | Mapping[str, Any]],
        *,
        interrupted: bool = False,
        exitstatus: int | None = None,
        created: str | None = None,
    ) -> Report:
        """The report of one pytest run: one runner, named by its fingerprint (`local` when it has no name)."""
        name = str(fingerprint.get("name") or "local")
        # One run, one runner: every cell is this runner's, whatever its dict said.
        built = tuple(
            replace(c, runner=name) if isinstance(c, CellRecord) else CellRecord.from_dict({**c, "runner": name})
            for c in cells
        )
        return cls(
            runners={name: dict(fingerprint)},
            cells=built,
            interrupted=interrupted,
            exitstatus=exitstatus,
            created=created or utc_now(),
        )

    @property
    def summary(self) -> dict[str, Any]:
        """Counts for humans and dashboards: derived from the cells so it can never disagree with them."""
        return summarize(self.runners, (
            (c.nodeid, c.runner, c.outcome, [(f.severity, f.unconfirmed) for f in c.findings] if c.findings else ())
            for c in self.cells))

    def to_dict(self, cells: bool = True) -> dict[str, Any]:
        """The report's JSON form; without ``cells`` (`json_chunks`), everything but the cells' list."""
        data: dict[str, Any] = {
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "created": self.created,
            "interrupted": self.interrupted,
            "exitstatus": self.exitstatus,
            "summary": self.summary,
            "runners": {name: dict(fp) for name, fp in self.runners.items()},
            "cells": [c.to_dict() for c in self.cells] if cells else [],
        }
        data.update({k: v for k, v in self.extra.items() if k not in data})
        return data

    def to_json(self) -> str:
        """Strict JSON (no NaN), UTF-8 friendly, stable key order, trailing newline; indented, one cell per line
        (`json_chunks`, joined)."""
        return "".join(self.json_chunks())

    def json_chunks(self, indent: bool = True) -> Iterator[str]:
        """`to_json`'s text in pieces, a cell at a time, for a writer that streams it to a file: a report of 100,000
        cells is then never held as text (nor as a list of the cells' dicts) beside its records. Without ``indent``:
        ``json.dumps`` of `to_dict`, plus a newline (a checkpoint: several times faster to encode).

        One line per cell reads and diffs cell by cell, and lets Python's C encoder do the bulk: with ``indent``
        json.dumps falls back to its pure-Python encoder, five to seven times slower on a large report.
        """
        return _chunks(self.to_dict(cells=False), (encode_cell(cell) for cell in self.cells), bool(self.cells), indent)

    @classmethod
    def from_dict(cls, data: Any) -> Report:
        """Check `data` like `load_report` does (ReportError naming the JSON path), then build the Report."""
        try:
            check_report_dict(data)
        except InvalidField as bad:
            raise ReportError(f"report: {bad.path}: {bad.problem}") from None
        return cls.from_valid_dict(data)

    @classmethod
    def from_valid_dict(cls, data: Mapping[str, Any]) -> Report:
        """Build from a dict that `validate.check_report_dict` accepted (no check of its own)."""
        return cls(
            runners={str(k): dict(v) for k, v in data["runners"].items()},
            cells=tuple(CellRecord.from_dict(c) for c in data["cells"]),
            interrupted=bool(data.get("interrupted", False)),
            exitstatus=data.get("exitstatus"),
            created=str(data["created"]),
            tool_version=str(data["tool_version"]),
            schema_version=int(data["schema_version"]),
            extra=split_known(data, cls._KEYS),
        )


_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode  # json.dumps makes one per call


def encode_cell(cell: CellRecord) -> str:
    """A cell's line of the report file (`Report.json_chunks`, indented or not)."""
    return _ENCODE(cell.to_dict())


_PLAIN_KEYS = frozenset(("nodeid", "test", "engine", "params", "axes", "outcome", "reason", "rules", "findings",
                         "metrics", "series", "duration_s", "log_tail", "worker", "runner", "when"))


def plain_cell_line(cell: Mapping[str, Any]) -> str | None:
    """``encode_cell(CellRecord.from_dict(cell))`` without making the record, for a cell in the record's JSON form
    that says nothing but how it ended (no rules, findings, figures, log tail or other keys) and whose values the
    record would keep as they are: most cells of a large run, each made into its line as it finishes
    (``session.collector``). None for any other cell: its record makes the line."""
    if (not _PLAIN_KEYS.issuperset(cell) or cell.get("rules") or cell.get("findings") or cell.get("metrics")
            or cell.get("series") or cell.get("log_tail") is not None):
        return None
    nodeid, outcome, runner, duration = cell.get("nodeid"), cell.get("outcome"), cell.get("runner"), cell.get(
        "duration_s")
    params, axes = cell.get("params") or {}, cell.get("axes") or {}
    if (type(nodeid) is not str or type(outcome) is not str or outcome not in OUTCOMES or type(runner) is not str
            or not runner or type(duration) is not float or not math.isfinite(duration) or type(params) is not dict
            or type(axes) is not dict):
        return None
    test, engine, reason, worker, when = (cell.get("test") or _test_of(nodeid), cell.get("engine"),
                                          cell.get("reason"), cell.get("worker"), cell.get("when"))
    try:  # the same text as _ENCODE writes of the record's dict: its constant parts written once (_PLAIN_LINE)
        return _PLAIN_LINE % (
            _STR(nodeid), _STR(test) if test.__class__ is str else _value(test),
            _STR(engine) if engine.__class__ is str else _value(engine), _ENCODE_VALUE(params) if params else "{}",
            _ENCODE_VALUE(axes) if axes else "{}", _STR(outcome),
            _STR(reason) if reason.__class__ is str else _value(reason), float.__repr__(duration),
            _STR(worker) if worker.__class__ is str else _value(worker), _STR(runner),
            _STR(when) if when.__class__ is str else _value(when))
    except RecursionError:  # a cycle (or nesting past Python's limit): the record's way says what it is
        return None


_PLAIN_LINE = ('{"nodeid": %s, "test": %s, "engine": %s, "params": %s, "axes": %s, "outcome": %s, "reason": %s, '
               '"rules": [], "findings": [], "metrics": {}, "duration_s": %s, "log_tail": null, "worker": %s, '
               '"runner": %s, "when": %s}')
_STR = json_encoder.encode_basestring  # a string as _ENCODE writes it (ensure_ascii=False)
_ENCODE_VALUE = encoder_once(ensure_ascii=False, allow_nan=False)


def _value(value: Any) -> str:
    """A value of a plain cell's line as _ENCODE writes it."""
    if value.__class__ is str:
        return _STR(value)
    return "null" if value is None else _ENCODE_VALUE(value)


CellCounts = Mapping[tuple[str, str, tuple[tuple[str, bool], ...]], int]
"""Cells counted by (runner, outcome, their findings' (severity, unconfirmed)): what `Report.summary` reads of them."""


def summarize(runners: Collection[str], cells: Iterable[tuple[str, str, str, Iterable[tuple[str, bool]]]]
              ) -> dict[str, Any]:
    """`Report.summary` from each cell's (nodeid, runner, outcome, its findings' (severity, unconfirmed))."""
    counts: dict[tuple[str, str, tuple[tuple[str, bool], ...]], int] = {}
    by_nodeid: dict[str, bool] = {}
    for nodeid, runner, outcome, findings in cells:
        key = (runner, outcome, tuple(findings) if findings else ())
        counts[key] = counts.get(key, 0) + 1
        by_nodeid[nodeid] = by_nodeid.get(nodeid, False) or outcome != "not-covered"
    return summary_of_counts(runners, counts, len(by_nodeid), sum(1 for covered in by_nodeid.values() if not covered))


def summary_of_counts(runners: Collection[str], counts: CellCounts, nodeids: int, uncovered: int) -> dict[str, Any]:
    """`Report.summary` from its cells counted (`CellCounts`, in the order each count first appeared) and the number
    of their node ids and of those that no cell covered: what a writer that keeps counting its cells as they finish
    (`session.collector`, whose checkpoints then never count the whole run again) writes the summary from."""
    outcomes = dict.fromkeys(OUTCOMES, 0)
    per_runner: dict[str, dict[str, int]] = {name: dict.fromkeys(OUTCOMES, 0) for name in runners}
    severities = dict.fromkeys(SEVERITIES, 0)
    unconfirmed = 0
    count = 0
    for (runner, outcome, findings), n in counts.items():
        count += n
        outcomes[outcome] += n
        per_runner.setdefault(runner, dict.fromkeys(OUTCOMES, 0))[outcome] += n
        for severity, is_unconfirmed in findings:
            if is_unconfirmed:
                unconfirmed += n
            else:
                severities[severity] = severities.get(severity, 0) + n
    return {
        "cells": count,
        "nodeids": nodeids,
        "runners": len(runners),
        "outcomes": outcomes,
        "per_runner": per_runner,
        "findings": severities,
        "unconfirmed_claims": unconfirmed,
        "uncovered": uncovered,
    }


def run_json_chunks(fingerprint: Mapping[str, Any], lines: Iterable[str], counts: CellCounts, *,
                    interrupted: bool = False, exitstatus: int | None = None, indent: bool = True) -> Iterator[str]:
    """``Report.from_run(fingerprint, ...).json_chunks(indent)`` from cells already encoded: ``lines``, each cell's
    line as `encode_cell` wrote it with this run's runner name, one cell per node id, and the same cells counted
    (``counts``, every runner in them this run's). A writer that keeps its cells as lines never holds them as
    records too (a report of 100,000 cells), and one that counts them as they finish never counts them again."""
    name = str(fingerprint.get("name") or "local")
    head = Report(runners={name: dict(fingerprint)}, cells=(), interrupted=interrupted, exitstatus=exitstatus)
    data = head.to_dict(cells=False)
    cells = sum(counts.values())
    uncovered = sum(n for (_, outcome, _), n in counts.items() if outcome == "not-covered")
    data["summary"] = summary_of_counts(head.runners, counts, cells, uncovered)
    return _chunks(data, lines, cells > 0, indent)


def _chunks(data: dict[str, Any], lines: Iterable[str], any_cells: bool, indent: bool) -> Iterator[str]:
    """The report's text from its JSON form less the cells (``data``) and the cells' lines: the lines joined
    `_LINES_AT_ONCE` at a time (one C call each, and one piece for the file's encoder, rather than one per cell;
    never the whole text at once)."""
    data["cells"] = _CELLS_MARK
    text = json.dumps(data, indent=2 if indent else None, ensure_ascii=False, allow_nan=False)
    head, _, tail = text.partition(json.dumps(_CELLS_MARK))
    if not any_cells:
        yield head + "[]" + tail + "\n"
        return
    first, separator, last = ("[\n    ", ",\n    ", "\n  ]") if indent else ("[", ", ", "]")
    lines = iter(lines)
    yield head + first + separator.join(islice(lines, _LINES_AT_ONCE))
    while True:
        block = separator.join(islice(lines, _LINES_AT_ONCE))
        if not block:
            break
        yield separator + block
    yield last + tail + "\n"


_LINES_AT_ONCE = 2048  # about 0.5 MiB of text for a report's typical lines
