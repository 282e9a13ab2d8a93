"""The report of a run (or of several merged runs): plain frozen data and its JSON form.

`Report` holds `CellRecord`s (one test item as one runner saw it), which hold `FindingRecord`s (a knowledge-base
rule that matched the cell, as recorded; not the knowledge base's own `Finding`, nor the matrix's `Cell`). The
format's enums and the check of a loaded dict live in `validate.py`, reading and writing files in `io.py`;
`schema.json` next to this module is the documented contract.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from pytest_gpucompat import __version__

from .validate import OUTCOMES, SCHEMA_VERSION, SEVERITIES, InvalidField, check_report_dict

#: Outcomes that mean "the runner ran this cell" (not-covered and skipped did not run it).
RAN_OUTCOMES: frozenset[str] = frozenset({"passed", "failed", "xfailed", "xpassed", "error"})

#: The reasons a run writes for a cell it never finished, because the run itself was stopped (a timeout, Ctrl-C,
#: SIGTERM) or a worker died: a fact about the run, not about the stack under test.
STOPPED_IN_SETUP = "interrupted in setup: the run was stopped before the cell ran"
STOPPED_REASON = "did not finish: the run was stopped before the cell ended"
WORKER_DIED_REASON = "did not finish: its worker died"
_UNFINISHED_EITHER = "did not finish: the run was interrupted or its worker died"  # reports before the split


_CELLS_MARK = "\x00gpucompat-cells\x00"  # stands for the cells while the rest is indented; no string has it


class ReportError(Exception):
    """A report file that cannot be used; the message is one line meant for the user, never a traceback."""


def utc_now() -> str:
    """ISO-8601 UTC timestamp with a `Z`, to the second: reports are compared by humans, not by nanoseconds."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _finite(value: Any) -> float | None:
    """JSON has no NaN/Infinity; a metric that is not a finite number is written as null ("not measured")."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _split_known(data: Mapping[str, Any], known: Iterable[str]) -> dict[str, Any]:
    names = set(known)
    return {k: v for k, v in data.items() if k not in names}


@dataclass(frozen=True, kw_only=True)
class FindingRecord:
    """A knowledge-base rule that matched a cell; unknown keys are kept in `extra` so nothing is lost on rewrite."""

    id: str
    severity: str
    confidence: str | None = None
    summary: str = ""
    action: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    _KEYS = ("id", "severity", "confidence", "summary", "action", "unconfirmed")

    @property
    def unconfirmed(self) -> bool:
        """Only the seed documents say so: shown apart, never colours a cell or counts as a problem."""
        return self.confidence == "documents"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "severity": self.severity,
            "confidence": self.confidence,
            "summary": self.summary,
            "action": self.action,
            "unconfirmed": self.unconfirmed,
        }
        data.update({k: v for k, v in self.extra.items() if k not in data})
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FindingRecord:
        return cls(
            id=str(data["id"]),
            severity=str(data["severity"]),
            confidence=data.get("confidence"),
            summary=data.get("summary") or "",
            action=data.get("action"),
            extra=_split_known(data, cls._KEYS),
        )


def _test_of(nodeid: str) -> str:
    """`path::test[params]` -> `path::test`: the test function a parametrized item belongs to."""
    return nodeid.split("[", 1)[0]


@dataclass(frozen=True, kw_only=True)
class CellRecord:
    """One test item of a gpucompat matrix as one runner saw it."""

    nodeid: str
    test: str = ""
    engine: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    axes: Mapping[str, Any] = field(default_factory=dict)
    outcome: str
    reason: str | None = None
    rules: tuple[str, ...] = ()
    findings: tuple[FindingRecord, ...] = ()
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    series: Mapping[str, tuple[float | None, ...]] = field(default_factory=dict)  # a figure per cycle or round
    duration_s: float | None = None
    log_tail: str | None = None
    worker: str | None = None
    runner: str
    when: str | None = None
    # the knowledge-base rules whose signature a failed or errored cell's reason or log tail matches (best first)
    explained_by: tuple[Mapping[str, Any], ...] = ()
    # the settings the cell's engine ran with that differ from the engine's own defaults (engines/deviations.py):
    # {"name", "value", "by": cell | harness | environment, "why"?, "engine_default"?}
    deviations: tuple[Mapping[str, Any], ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    _KEYS = (
        "nodeid",
        "test",
        "engine",
        "params",
        "axes",
        "outcome",
        "reason",
        "rules",
        "findings",
        "metrics",
        "series",
        "duration_s",
        "log_tail",
        "worker",
        "runner",
        "when",
        "explained_by",
        "deviations",
    )

    def __post_init__(self) -> None:
        # Accept what the plugin naturally has (lists, finding dicts) but store immutable, checked values.
        if self.outcome not in OUTCOMES:
            raise ValueError(f"cell {self.nodeid!r}: unknown outcome {self.outcome!r} (one of {', '.join(OUTCOMES)})")
        if not self.test:
            object.__setattr__(self, "test", _test_of(self.nodeid))
        object.__setattr__(self, "rules", tuple(str(r) for r in self.rules))
        object.__setattr__(
            self,
            "findings",
            tuple(f if isinstance(f, FindingRecord) else FindingRecord.from_dict(f) for f in self.findings),
        )
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "axes", dict(self.axes))
        object.__setattr__(self, "metrics", {str(k): _finite(v) for k, v in self.metrics.items()})
        object.__setattr__(self, "series", {str(k): tuple(_finite(x) for x in v) for k, v in self.series.items()})
        object.__setattr__(self, "duration_s", _finite(self.duration_s))
        object.__setattr__(self, "explained_by", tuple(dict(e) for e in self.explained_by))
        object.__setattr__(self, "deviations", tuple(dict(d) for d in self.deviations if isinstance(d, Mapping)))
        object.__setattr__(self, "extra", dict(self.extra))

    @property
    def ran(self) -> bool:
        """Whether this runner actually executed the cell (as opposed to skipping it or not covering it)."""
        return self.outcome in RAN_OUTCOMES

    def stopped_by_run(self, run_interrupted: bool) -> bool:
        """An error that says only that the run was stopped before the cell ended (``run_interrupted``: the report
        says the run was interrupted, which settles the older reports' undivided reason)."""
        if self.outcome != "error":
            return False
        return self.reason in (STOPPED_IN_SETUP, STOPPED_REASON) or (
            run_interrupted and self.reason == _UNFINISHED_EITHER)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "nodeid": self.nodeid,
            "test": self.test,
            "engine": self.engine,
            "params": dict(self.params),
            "axes": dict(self.axes),
            "outcome": self.outcome,
            "reason": self.reason,
            "rules": list(self.rules),
            "findings": [f.to_dict() for f in self.findings],
            "metrics": dict(self.metrics),
            **({"series": {k: list(v) for k, v in self.series.items()}} if self.series else {}),
            "duration_s": self.duration_s,
            "log_tail": self.log_tail,
            "worker": self.worker,
            "runner": self.runner,
            "when": self.when,
            **({"explained_by": [dict(e) for e in self.explained_by]} if self.explained_by else {}),
            **({"deviations": [dict(d) for d in self.deviations]} if self.deviations else {}),
        }
        data.update({k: v for k, v in self.extra.items() if k not in data})
        return data

    def deviations_text(self) -> str:
        """`enforce_eager=True (cell; vLLM: False), gpu_memory_utilization=0.2 (harness)`: one line for renderers."""
        parts = []
        for d in self.deviations:
            default = f"; engine default {d['engine_default']!r}" if "engine_default" in d else ""
            parts.append(f"{d.get('name')}={d.get('value')!r} ({d.get('by')}{default})")
        return ", ".join(parts)

    @property
    def known_issue(self) -> Mapping[str, Any] | None:
        """The rule that explains this cell's failure (the first of ``explained_by``), or None."""
        return self.explained_by[0] if self.explained_by else None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, runner: str | None = None) -> CellRecord:
        """Build from the JSON form; `runner` fills in a missing `runner` key (the plugin knows its own name).

        Unknown keys are kept in `extra`; a mapping under the key `extra` is merged into them (so a caller can
        pass the dataclass field by name), and they are written back as plain keys of the cell.
        """
        extra = _split_known(data, cls._KEYS)
        nested = extra.pop("extra", None)
        if isinstance(nested, Mapping):
            extra = {**nested, **extra}
        elif nested is not None:
            extra["extra"] = nested
        return cls(
            nodeid=str(data["nodeid"]),
            test=data.get("test") or "",
            engine=data.get("engine"),
            params=data.get("params") or {},
            axes=data.get("axes") or {},
            outcome=str(data["outcome"]),
            reason=data.get("reason"),
            rules=tuple(data.get("rules") or ()),
            findings=tuple(FindingRecord.from_dict(f) for f in data.get("findings") or ()),
            metrics=data.get("metrics") or {},
            series=data.get("series") or {},
            duration_s=data.get("duration_s"),
            log_tail=data.get("log_tail"),
            worker=data.get("worker"),
            runner=str(data.get("runner") or runner or ""),
            when=data.get("when"),
            explained_by=tuple(data.get("explained_by") or ()),
            deviations=tuple(data.get("deviations") or ()) if isinstance(data.get("deviations"), list) else (),
            extra=extra,
        )


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
        outcomes = dict.fromkeys(OUTCOMES, 0)
        per_runner: dict[str, dict[str, int]] = {name: dict.fromkeys(OUTCOMES, 0) for name in self.runners}
        severities = dict.fromkeys(SEVERITIES, 0)
        unconfirmed = 0
        by_nodeid: dict[str, bool] = {}
        for cell in self.cells:
            outcomes[cell.outcome] += 1
            per_runner.setdefault(cell.runner, dict.fromkeys(OUTCOMES, 0))[cell.outcome] += 1
            for finding in cell.findings:
                if finding.unconfirmed:
                    unconfirmed += 1
                else:
                    severities[finding.severity] = severities.get(finding.severity, 0) + 1
            by_nodeid[cell.nodeid] = by_nodeid.get(cell.nodeid, False) or cell.outcome != "not-covered"
        return {
            "cells": len(self.cells),
            "nodeids": len(by_nodeid),
            "runners": len(self.runners),
            "outcomes": outcomes,
            "per_runner": per_runner,
            "findings": severities,
            "unconfirmed_claims": unconfirmed,
            "uncovered": sum(1 for covered in by_nodeid.values() if not covered),
        }

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "created": self.created,
            "interrupted": self.interrupted,
            "exitstatus": self.exitstatus,
            "summary": self.summary,
            "runners": {name: dict(fp) for name, fp in self.runners.items()},
            "cells": [c.to_dict() for c in self.cells],
        }
        data.update({k: v for k, v in self.extra.items() if k not in data})
        return data

    def to_json(self) -> str:
        """Strict JSON (no NaN), UTF-8 friendly, stable key order, trailing newline; indented, one cell per line.

        One line per cell reads and diffs cell by cell, and lets Python's C encoder do the bulk: with ``indent``
        json.dumps falls back to its pure-Python encoder, five to seven times slower on a large report.
        """
        data = self.to_dict()
        cells = [json.dumps(c, ensure_ascii=False, allow_nan=False) for c in data["cells"]]
        data["cells"] = _CELLS_MARK
        text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
        body = "[\n    " + ",\n    ".join(cells) + "\n  ]" if cells else "[]"
        return text.replace(json.dumps(_CELLS_MARK), body, 1) + "\n"

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
            extra=_split_known(data, cls._KEYS),
        )
