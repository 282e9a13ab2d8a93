"""What a worker tells the report writer about a cell, and how the writer folds it into the cell it builds.

A worker attaches a payload to the report of each phase of a cell (setup, call, teardown): pytest-xdist carries
``user_properties`` to the controller, which never sees the items. The collector (``collector.py``) keeps one
`RecordDraft` per cell, starts it from the first payload (`new_cell`), merges each later one into it (`merge`) and
makes the cell's `CellRecord` from it when it writes the report. The payload is keyed by the record's own field names,
the cell's other keys under ``extra``, so nothing between the fixtures and the report renames a key: a field added to
`CellRecord` that a fixture notes under its name (``fixtures.note``) travels without a line here.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from json import encoder as json_encoder
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from ..common.jsontext import encoder_once
from ..report.record import CELL_KEYS, FindingRecord

if TYPE_CHECKING:
    from ..kb.verdicts import Finding
    from ..workload.matrix import MatrixCell

CellPayload: TypeAlias = dict[str, Any]
"""A cell's payload: the wire form of what a worker tells the report writer of a cell (`build`; sent as JSON text,
`text`), keyed by the record's field names, the cell's other keys under ``extra``, and `ENGINE_FAILED`. A name
rather than a TypedDict: its keys are `CellRecord`'s fields (record.CELL_KEYS), defined once, there."""

RecordDraft: TypeAlias = dict[str, Any]
"""The report writer's cell until its record is made: the record's JSON form (what ``CellRecord.from_dict`` reads),
started from a payload (`new_cell`), folded into by later ones (`merge`) and by pytest's reports (the collector)."""

ENGINE_FAILED = "engine_failed"
"""The one payload key that is no key of the record: the cell's engine failed (the log tail is its log's), so a
setup that failed is a failed cell rather than an error. The collector reads it for the outcome and does not keep it."""

# What the report writer learns from pytest's reports of the cell rather than from a payload.
_FROM_REPORTS = frozenset({"nodeid", "test", "outcome", "reason", "duration_s", "worker", "when", "explained_by"})
# What the payload builds itself, from the cell's live values.
_BUILT = frozenset({"engine", "params", "axes", "rules", "findings", "metrics", "series", "log_tail", "runner"})
# A note under one of these names is that field of the record (``deviations``, and any field added later).
_NOTED_FIELDS = frozenset(CELL_KEYS) - _FROM_REPORTS - _BUILT
# The keys a payload may set in the collector's cell.
_CARRIED = frozenset(CELL_KEYS) - _FROM_REPORTS | {"extra"}
_ADDED = frozenset({"metrics", "series"})  # a later phase adds figures to those measured before
_LISTED = frozenset({"rules", "findings"})  # each payload has all of them so far


class PayloadSource(Protocol):
    """What the payload is built from: the values a worker knows of a cell while it runs (``state.LiveCell``, the
    one type that has them). A protocol rather than that class, which builds its payloads here: this module needs
    nothing of state.py, so the two are no circle."""

    cell: MatrixCell
    findings: tuple[Finding, ...]
    flagged: tuple[Finding, ...]  # measured while the cell ran (gpucompat_flag): findings, but no rules
    metrics: dict[str, float]
    series: dict[str, list[float | None]]
    info: dict[str, Any]  # what the engine said of its start: the record's extra key engine_info
    notes: dict[str, Any]  # fields of the record by their names, and the cell's other keys
    log_tail: str | None
    engine_failed: bool


def json_safe(value: Any) -> Any:
    """Only JSON types: pytest-xdist's channel refuses anything else (torch's TorchVersion, a Path, a dtype)."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _is_json_safe(value: Any) -> bool:
    """Whether `json_safe` would give the value back as it is: JSON types exactly, string keys. A cell's engine and
    parameters nearly always are, and checking them takes a fraction of the time that copying them does."""
    kind = type(value)
    if kind in _ATOMS:
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or (type(item) not in _ATOMS and not _is_json_safe(item)):
                return False
        return True
    if kind is list or kind is tuple:
        return all(type(item) in _ATOMS or _is_json_safe(item) for item in value)
    return False


def fixed_part(cs: PayloadSource) -> dict[str, Any]:
    """The part of the payload that changes only with the cell's findings: the cell and every finding so far, so
    that the last payload the report writer sees has them all."""
    return _fixed_part(cs)[0]


def _fixed_part(cs: PayloadSource) -> tuple[dict[str, Any], bool]:
    """`fixed_part`, and whether all of it is JSON-safe already (`_is_json_safe`)."""
    cell = cs.cell.to_dict()
    ready = _is_json_safe(cell)
    fixed = {
        **(cell if ready else json_safe(cell)),
        "rules": [f.id for f in cs.findings],
        "findings": [FindingRecord.from_finding(f).to_dict() for f in (*cs.findings, *cs.flagged)],
    }
    return fixed, ready and (not fixed["findings"] or _is_json_safe(fixed))


def visible_gpus() -> str | None:
    """The GPUs this process shows a cell's engine (``CUDA_VISIBLE_DEVICES``; an xdist worker's is pinned at its
    start): the record's extra key ``gpu``. Read once a cell, as its setup ends (``state.LiveCell.payload_for``),
    when its engine has started on them: a reading where the variable is unset costs Python two exceptions."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def live_part(cs: PayloadSource, runner: str | None, gpu: str | None) -> dict[str, Any]:
    """The part measured and noted while the cell runs. The engine's info and the GPUs it was shown (``gpu``,
    `visible_gpus`) are keys of the record's ``extra`` (record.CELL_EXTRA), after what was noted, as the report has
    always written them."""
    fields = {k: v for k, v in cs.notes.items() if k in _NOTED_FIELDS}
    extra = {k: v for k, v in cs.notes.items() if k not in _NOTED_FIELDS}
    extra.update((k, v) for k, v in (("engine_info", cs.info), ("gpu", gpu)) if v)
    return {"metrics": cs.metrics, "series": cs.series, "log_tail": cs.log_tail, **fields, "extra": extra,
            "runner": runner, ENGINE_FAILED: cs.engine_failed}


def build(cs: PayloadSource, runner: str | None) -> CellPayload:
    """The whole payload as a dict: what a worker leaves of its collected cells (``collector.share_cells``) and what
    the controller takes of a cell stopped in its setup."""
    return {**fixed_part(cs), **live_part(cs, runner, visible_gpus())}


def fixed_text(cs: PayloadSource) -> str:
    """`fixed_part` as the inside of a JSON object: built once per set of findings, joined by `join`. (Where all of
    it is JSON-safe already, an encoder made once writes the same text as one made with ``default=str``, which json
    builds anew for every call.)"""
    return fixed_text_and_data(cs)[0]


def fixed_text_and_data(cs: PayloadSource) -> tuple[str, dict[str, Any] | None]:
    """`fixed_text`, and for a flat cell (`_flat_cell`) its ``to_dict()``: what `hand` may offer as data. A flat
    cell's text is written from its three values (the same text as the encoder writes of the whole part)."""
    if not (cs.findings or cs.flagged):
        cell = cs.cell.to_dict()
        if _flat_cell(cell):
            engine, axes = cell["engine"], cell["axes"]
            return _FLAT_TEXT % (_ascii_text(engine) if engine.__class__ is str else _dumps_safe(engine),
                                 _dumps_safe(cell["params"]), _dumps_safe(axes) if axes else "{}"), cell
    fixed, ready = _fixed_part(cs)
    return (_dumps_safe(fixed) if ready else json.dumps(fixed, default=str))[1:-1], None


_CELL_ORDER = ["engine", "params", "axes"]
_FLAT_TEXT = '"engine": %s, "params": %s, "axes": %s, "rules": [], "findings": []'
_ascii_text = json_encoder.encode_basestring_ascii  # a string as json.dumps writes it


def _flat_cell(cell: dict[str, Any]) -> bool:
    """Whether a cell's ``to_dict()`` is its engine (a JSON atom), params and axes (dicts of text keys and JSON
    atoms): JSON gives such data back as equal values of the same types (no tuple becomes a list, no subclass its
    base), and copies of its two dicts share nothing with the cell. A cell of a large matrix is."""
    if list(cell) != _CELL_ORDER or cell["engine"].__class__ not in _ATOMS:
        return False
    for mapping in (cell["params"], cell["axes"]):
        if mapping.__class__ is not dict:
            return False
        for key, value in mapping.items():
            if key.__class__ is not str or value.__class__ not in _ATOMS:
                return False
    return True


_dumps_safe = encoder_once()
"""``json.dumps`` with its defaults, for a value `_is_json_safe` has walked (JSON types only, no cycle)."""


_EMPTY_LIVE: dict[tuple[str | None, str | None], str] = {}
"""`live_part` as JSON text for a cell with nothing measured or noted (most phases of most cells), per (runner,
the GPUs it was shown): made once rather than per phase."""


_EMPTY_LIVE_DATA: dict[str, dict[str, Any]] = {}
"""Each text of ``_EMPTY_LIVE`` -> what JSON reads of it (its values JSON atoms and mappings of atoms)."""


def live_text(cs: PayloadSource, runner: str | None, gpu: str | None) -> str:
    """`live_part` as the end of a JSON object, joined to `fixed_text` by `join`; for a cell with nothing measured
    or noted, the same string object every time (``_EMPTY_LIVE``)."""
    if cs.log_tail is None and not (cs.engine_failed or cs.metrics or cs.series or cs.info or cs.notes):
        key = (runner, gpu)
        text = _EMPTY_LIVE.get(key)
        if text is None:
            text = _EMPTY_LIVE[key] = json.dumps(live_part(cs, runner, gpu), default=str)[1:]
            _EMPTY_LIVE_DATA[text] = json.loads("{" + text)
        return text
    return json.dumps(live_part(cs, runner, gpu), default=str)[1:]


_HANDED: list[Any] = [None, None, None]
"""The last payload this process made that `taken_cell` may give as data: (its text, its flat cell's
``to_dict()``, its live text), or Nones."""


def hand(text: str, cell: dict[str, Any] | None, live: str) -> None:
    """Offer the payload ``text`` (``join(fixed_text, live)``) to a report writer in this process as data
    (`taken_cell`), where its cell is flat (``cell``, from `fixed_text_and_data`) and nothing was measured or
    noted (``live`` is an ``_EMPTY_LIVE`` text): the first payload of most cells. Anything else is read from its
    text. An xdist worker offers too; no one takes it, and the next payload replaces it."""
    if cell is not None and live in _EMPTY_LIVE_DATA:
        _HANDED[:] = (text, cell, live)


def taken_cell(text: Any, nodeid: str, worker: str | None) -> RecordDraft | None:
    """``new_cell(nodeid, worker, json.loads(text))``, where ``text`` is the very payload this process offered
    last (`hand`), without decoding it: the same keys in the same order, equal values of the same types, in
    containers of its own. None for any other text (a worker's, sent over xdist's channel, is another object),
    which the caller decodes. The payload says no engine failed."""
    handed = _HANDED
    if text is None or handed[0] is not text:
        return None
    cell, live = handed[1], handed[2]
    handed[:] = (None, None, None)
    draft: RecordDraft = {"nodeid": nodeid, "outcome": "error", "reason": None, "rules": (), "findings": (),
                          "metrics": _NOTHING, "series": _NOTHING, "duration_s": 0.0, "worker": worker}
    # what `merge` does with the payload, in its order: the cell's values that are not empty, its rules and
    # findings (none: the shared empty tuple new_cell starts with), then what the live part sets (_live_effect)
    engine, params, axes = cell["engine"], cell["params"], cell["axes"]
    if engine:
        draft["engine"] = engine
    if params:
        draft["params"] = dict(params)
    if axes:
        draft["axes"] = dict(axes)
    for key, value in _live_effect(live):
        draft[key] = value.copy() if value.__class__ is dict else value
    return draft


_LIVE_EFFECT: dict[str, tuple[tuple[str, Any], ...]] = {}


def _live_effect(live: str) -> tuple[tuple[str, Any], ...]:
    """What `merge` sets in a new cell from an ``_EMPTY_LIVE`` text's data, in order: worked out once per text, by
    `merge` itself (its values JSON atoms and dicts of atoms, copied for each cell)."""
    effect = _LIVE_EFFECT.get(live)
    if effect is None:
        probe: RecordDraft = dict.fromkeys(("nodeid", "outcome", "reason", "rules", "findings", "metrics", "series",
                                            "duration_s", "worker"))
        before = dict(probe)
        merge(probe, _EMPTY_LIVE_DATA[live])
        effect = _LIVE_EFFECT[live] = tuple((k, v) for k, v in probe.items() if k not in before or v is not before[k])
    return effect


def join(fixed: str, live: str) -> str:
    """The payload's JSON text from its two parts (`fixed_text`, `live_text`).

    Text, not a dict: pytest keeps every report to the end of the run, and a string is one object that the garbage
    collector never walks, where a dict of dicts and lists is a dozen walked by every full collection (on 10,000
    cells, full collections are the largest part of the plugin's cost). xdist sends it as it is."""
    return "{" + fixed + "," + live


_NOTHING: dict[str, Any] = {}  # (`taken_cell` starts its cells with it too)
"""A cell's figures before any were measured, shared by every cell of the report writer (most cells of a large run
measure nothing; a dict each would be kept to the end of the run). Never changed in place: `merge` replaces it."""


def new_cell(nodeid: str, worker: str | None, payload: CellPayload) -> RecordDraft:
    """The report writer's cell, in the record's JSON form, from the first payload it has of it (``{}``: a cell that
    sent none, whose worker died before it could). An error until a report says otherwise."""
    cell: RecordDraft = {"nodeid": nodeid, "outcome": "error", "reason": None, "rules": (), "findings": (),
                            "metrics": _NOTHING, "series": _NOTHING, "duration_s": 0.0, "worker": worker}
    merge(cell, payload)
    return cell


def merge(cell: RecordDraft, payload: CellPayload) -> None:
    """Fold a later phase's payload into the cell: its figures add to those measured before, its rules and findings
    (all so far) replace the cell's, and anything else it says replaces what the cell had; what it leaves empty
    changes nothing (a worker's values only grow, and a cell's engine and parameters never change)."""
    for key, value in payload.items():
        if key in _ADDED:
            if value:  # a new dict: the cell's may be the shared empty one (new_cell)
                cell[key] = {**cell[key], **value}
        elif key in _LISTED:
            cell[key] = value or ()  # one shared empty tuple, not a list per cell for every full collection to walk
        elif key in _CARRIED and value:
            cell[key] = value


def is_engine_failure(payload: CellPayload) -> bool:
    """Whether the payload says the cell's engine failed (`ENGINE_FAILED`)."""
    return bool(payload.get(ENGINE_FAILED))
