"""What a cell of a report says, defined once: `CellRecord` (one test item as one runner saw it; not the matrix's
`MatrixCell`, nor the item's `LiveCell` while it runs) and `FindingRecord` (a knowledge-base rule that matched it, as
recorded; not the knowledge base's own `Finding`).

Everything else that names a cell's keys reads them from here: the validator (`validate.py`) takes each key's JSON
types from the dataclass fields' annotations, the payload a worker sends about a cell (`payload.py`) is keyed by
the field names, and `schema.json` documents exactly these keys (tests/test_record_schema.py checks all three).
`model.py` re-exports both records with the `Report` that holds them.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..kb.verdicts import Finding

#: The outcomes of a cell, the report format's enum (schema.json lists the same).
OUTCOMES: tuple[str, ...] = ("passed", "failed", "xfailed", "xpassed", "skipped", "error", "not-covered")

#: Outcomes that mean "the runner ran this cell" (not-covered and skipped did not run it).
RAN_OUTCOMES: frozenset[str] = frozenset({"passed", "failed", "xfailed", "xpassed", "error"})

#: How the reason of a cell skipped as not covered (its version axes do not match this runner) starts: what tells
#: the not-covered outcome from a skip.
NOT_COVERED = "not covered here"

#: The reasons a run writes for a cell it never finished, because the run itself was stopped (a timeout, Ctrl-C,
#: SIGTERM) or a worker died: a fact about the run, not about the stack under test.
STOPPED_IN_SETUP = "interrupted in setup: the run was stopped before the cell ran"
STOPPED_REASON = "did not finish: the run was stopped before the cell ended"
NOT_STARTED_REASON = "not run: the run was stopped before the cell started"
WORKER_DIED_REASON = "did not finish: its worker died"
_UNFINISHED_EITHER = "did not finish: the run was interrupted or its worker died"  # reports before the split

#: Keys a cell keeps in `extra` whose type the format still fixes, because the plugin writes them or a reader
#: depends on them (`outputs.from_cell`): key -> the JSON types its value may have. Their readers take them from
#: `CellRecord.extra`, so they are no fields; schema.json documents them beside the fields.
CELL_EXTRA: Mapping[str, tuple[str, ...]] = {
    "engine_info": ("object", "null"),  # what the engine said of its start (catalog.base.RunInfo)
    "attention_prediction": ("object", "null"),  # the backend predicted beside the one reported (kb.predict_cells)
    "gpu": ("string", "null"),  # the worker's CUDA_VISIBLE_DEVICES as the cell's setup ended
    "outputs": ("object", "null"),  # the generations kept for golden and cross-runner checks (outputs.py)
    "harness_state": ("string", "null"),  # why the process that ran the cell was in an unknown state (pool.unsettled)
}

_JSON_NAMES: dict[Any, str] = {str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}


def _json_kinds(hint: Any) -> tuple[str, ...]:
    """The JSON types an annotation allows: `str | None` -> string, null; a Mapping -> object; a tuple -> array."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(kind for arg in typing.get_args(hint) for kind in _json_kinds(arg))
    base = origin or hint
    if base in _JSON_NAMES:
        return (_JSON_NAMES[base],)
    if isinstance(base, type) and issubclass(base, Mapping):
        return ("object",)
    if base in (tuple, list):
        return ("array",)
    raise TypeError(f"no JSON type for the annotation {hint!r}")


def json_keys(record: type) -> dict[str, tuple[str, ...]]:
    """Each key of a record's JSON form -> the JSON types its value may have: its dataclass fields (but `extra`,
    whose keys are the cell's own) from their annotations, or a field's ``metadata["json"]`` where reading accepts
    more than the field holds; then the properties its JSON form also writes (``_WRITTEN``)."""
    hints = typing.get_type_hints(record)
    keys = {f.name: tuple(f.metadata.get("json") or _json_kinds(hints[f.name]))
            for f in fields(record) if f.name != "extra"}
    for name in getattr(record, "_WRITTEN", ()):
        keys[name] = _json_kinds(typing.get_type_hints(getattr(record, name).fget)["return"])
    return keys


def required_keys(record: type) -> tuple[str, ...]:
    """The fields a record cannot be made without: a JSON form without one of them is refused."""
    return tuple(f.name for f in fields(record) if f.default is MISSING and f.default_factory is MISSING)


def _finite(value: Any) -> float | None:
    """JSON has no NaN/Infinity; a metric that is not a finite number is written as null ("not measured")."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def split_known(data: Mapping[str, Any], known: Iterable[str]) -> dict[str, Any]:
    """The keys of `data` that are not `known`: what a record keeps in its `extra` and writes back untouched.
    (`known` a mapping or a set is looked up as it is: a report of many cells calls this once per cell.)"""
    names = known if isinstance(known, (Mapping, AbstractSet)) else set(known)
    return {k: v for k, v in data.items() if k not in names}


@dataclass(frozen=True, kw_only=True)
class FindingRecord:
    """A knowledge-base rule that matched a cell; unknown keys are kept in `extra` so nothing is lost on rewrite."""

    id: str
    severity: str
    confidence: str | None = None
    summary: str = field(default="", metadata={"json": ("string", "null")})  # null: read as ""
    action: str | None = None
    failure: str | None = None  # the rule's failure mode (crash, wrong-output, ...); absent in hand-made findings
    extra: Mapping[str, Any] = field(default_factory=dict)

    _WRITTEN: ClassVar[tuple[str, ...]] = ("unconfirmed",)

    @property
    def unconfirmed(self) -> bool:
        """Only the seed documents say so: shown apart, never colours a cell or counts as a problem."""
        return self.confidence == "documents"

    @classmethod
    def from_finding(cls, finding: Finding) -> FindingRecord:
        """The one mapping from the knowledge base's `Finding` (kb/verdicts.py) to what a report records of it."""
        return cls(id=finding.id, severity=finding.severity, confidence=finding.confidence, summary=finding.summary,
                   action=finding.action, failure=finding.failure)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "severity": self.severity,
            "confidence": self.confidence,
            "summary": self.summary,
            "action": self.action,
            "unconfirmed": self.unconfirmed,
            **({"failure": self.failure} if self.failure is not None else {}),
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
            failure=data.get("failure"),
            extra=split_known(data, FINDING_KEYS),
        )


def rerun_text(outcome: str, reruns: int, reason: str | None) -> str | None:
    """`flaky: passed on attempt 2; first failure: assert 1 == 2`, or `failed after 2 reruns; first failure: ...`:
    a cell's reruns (pytest-rerunfailures) in the words every view uses, or None when it ran once."""
    if not reruns:
        return None
    if outcome == "passed":
        head = f"flaky: passed on attempt {reruns + 1}"
    else:
        head = f"{outcome} after {reruns} rerun{'' if reruns == 1 else 's'}"
    return f"{head}; first failure: {reason}" if reason else head


def _test_of(nodeid: str) -> str:
    """`path::test[params]` -> `path::test`: the test function a parametrized item belongs to."""
    return nodeid.split("[", 1)[0]


@dataclass(frozen=True, kw_only=True)
class CellRecord:
    """One test item of a gpucompat matrix as one runner saw it.

    A new per-cell field is a field here, a line in `to_dict` and in `from_dict`, and its entry in schema.json;
    the validator, the payload the workers send and the collector pick it up by its name."""

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
    # the attempts pytest-rerunfailures made before the one whose outcome this is, and why the first of them failed:
    # a cell that passed with reruns > 0 is flaky
    reruns: int = 0
    rerun_reason: str | None = None
    # the cell's other keys (CELL_EXTRA, what the suites note: prompts, reference, golden, ...), written back as
    # plain keys of the cell
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Accept what the plugin naturally has (lists, finding dicts) but store immutable, checked values. Empty
        # values, what most cells of a large run have, take the short way, and the values are stored in one update
        # of the instance's dict rather than one object.__setattr__ each: a report is made of thousands of these.
        if self.outcome not in OUTCOMES:
            raise ValueError(f"cell {self.nodeid!r}: unknown outcome {self.outcome!r} (one of {', '.join(OUTCOMES)})")
        duration = self.duration_s
        self.__dict__.update(
            test=self.test or _test_of(self.nodeid),
            rules=tuple(map(str, self.rules)) if self.rules else (),
            findings=tuple(f if isinstance(f, FindingRecord) else FindingRecord.from_dict(f)
                           for f in self.findings) if self.findings else (),
            params=dict(self.params),
            axes=dict(self.axes),
            metrics={str(k): _finite(v) for k, v in self.metrics.items()} if self.metrics else {},
            series={str(k): tuple(_finite(x) for x in v) for k, v in self.series.items()} if self.series else {},
            duration_s=duration if type(duration) is float and math.isfinite(duration) else _finite(duration),
            explained_by=tuple(dict(e) for e in self.explained_by) if self.explained_by else (),
            deviations=tuple(dict(d) for d in self.deviations if isinstance(d, Mapping)) if self.deviations else (),
            extra=dict(self.extra),
        )
        if self.reruns and (type(self.reruns) is not int or self.reruns < 0):
            raise ValueError(f"cell {self.nodeid!r}: reruns must be a count, not {self.reruns!r}")

    @property
    def ran(self) -> bool:
        """Whether this runner actually executed the cell (as opposed to skipping it or not covering it)."""
        return self.outcome in RAN_OUTCOMES

    def stopped_by_run(self, run_interrupted: bool) -> bool:
        """An error that says only that the run was stopped before the cell ended (``run_interrupted``: the report
        says the run was interrupted, which settles the older reports' undivided reason)."""
        if self.outcome != "error":
            return False
        return self.reason in (STOPPED_IN_SETUP, STOPPED_REASON, NOT_STARTED_REASON) or (
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
        }
        if self.series:
            data["series"] = {k: list(v) for k, v in self.series.items()}
        data["duration_s"] = self.duration_s
        data["log_tail"] = self.log_tail
        data["worker"] = self.worker
        data["runner"] = self.runner
        data["when"] = self.when
        if self.explained_by:
            data["explained_by"] = [dict(e) for e in self.explained_by]
        if self.deviations:
            data["deviations"] = [dict(d) for d in self.deviations]
        if self.reruns:
            data["reruns"] = self.reruns
            data["rerun_reason"] = self.rerun_reason
        if self.extra:
            data.update({k: v for k, v in self.extra.items() if k not in data})
        return data

    def deviations_text(self) -> str:
        """`enforce_eager=True (cell; vLLM: False), gpu_memory_utilization=0.2 (harness)`: one line for renderers."""
        parts = []
        for d in self.deviations:
            default = f"; engine default {d['engine_default']!r}" if "engine_default" in d else ""
            parts.append(f"{d.get('name')}={d.get('value')!r} ({d.get('by')}{default})")
        return ", ".join(parts)

    def attention_text(self) -> str | None:
        """`attention TRITON_ATTN reported, TRITON_ATTN predicted (as predicted)`: the cell's ``attention_prediction``
        in one line for renderers, or None when the cell has none."""
        p = self.extra.get("attention_prediction")
        if not isinstance(p, Mapping):
            return None
        if p.get("unavailable"):
            predicted = f"no prediction ({p['unavailable']})"
        elif p.get("alternatives") or p.get("unknown"):
            predicted = "no single backend predicted"
        else:
            predicted = f"{p.get('attention_backend') or 'a refusal'} predicted"
        matches = p.get("matches")
        verdict = "as predicted" if matches is True else "prediction differs" if matches is False else "not compared"
        if matches is True and not p.get("reported") and p.get("confirmed_by"):
            verdict = f"as predicted: {p['confirmed_by']}"
        return f"attention {p.get('reported') or 'not reported'} reported, {predicted} ({verdict})"

    @property
    def flaky(self) -> bool:
        """Passed, but only on a rerun: the outcome hides a failure the next run may meet."""
        return self.outcome == "passed" and self.reruns > 0

    def rerun_text(self) -> str | None:
        """The cell's reruns in one line for renderers (`rerun_text`), or None when it was not rerun."""
        return rerun_text(self.outcome, self.reruns, self.rerun_reason)

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
        extra = split_known(data, CELL_KEYS)
        nested = extra.pop("extra", None)
        if isinstance(nested, Mapping):
            extra = {**nested, **extra}
        elif nested is not None:
            extra["extra"] = nested
        # every field, by name: the instance is made without the dataclass's __init__ (one object.__setattr__ per
        # field, frozen) and checked by __post_init__ as one made by it
        record = cls.__new__(cls)
        record.__dict__.update(
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
            reruns=data.get("reruns") or 0,
            rerun_reason=data.get("rerun_reason"),
            extra=extra,
        )
        record.__post_init__()
        return record


#: The keys of each record's JSON form -> their JSON types: what `from_dict` does not keep in `extra`, what the
#: validator checks and what schema.json documents.
FINDING_KEYS: Mapping[str, tuple[str, ...]] = json_keys(FindingRecord)
CELL_KEYS: Mapping[str, tuple[str, ...]] = json_keys(CellRecord)
