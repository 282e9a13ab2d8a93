"""What a cell of a report says is defined once, by the records (report/record.py): schema.json documents exactly
their keys, the validator checks exactly them, the payload a worker sends is keyed by them and the collector folds
payloads into cells without renaming a key. The knowledge base's vocabularies are the report's, never copied."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.kb import schema as kb_schema
from pytest_gpucompat.kb.verdicts import Finding
from pytest_gpucompat.report import record, validate
from pytest_gpucompat.report.model import Report
from pytest_gpucompat.report.record import CELL_EXTRA, CELL_KEYS, FINDING_KEYS, CellRecord, FindingRecord
from pytest_gpucompat.report.validate import InvalidField, check_report_dict
from pytest_gpucompat.session import payload
from pytest_gpucompat.session.state import LiveCell
from pytest_gpucompat.workload.matrix import MatrixCell

REPORT_DIR = Path(record.__file__).resolve().parent
SCHEMA = json.loads((REPORT_DIR / "schema.json").read_text(encoding="utf-8"))
CELL_PROPERTIES = SCHEMA["$defs"]["cell"]["properties"]
FINDING_PROPERTIES = SCHEMA["$defs"]["finding"]["properties"]
VOCABULARIES = {"severity": kb_schema.SEVERITIES, "confidence": kb_schema.CONFIDENCES, "action": kb_schema.ACTIONS,
                "outcome": record.OUTCOMES}


def finding(**changes: Any) -> Finding:
    base = Finding(id="r-fallback", severity="degraded", confidence="upstream", failure="fallback", engine=None,
                   summary="fell back", workaround="pin it", symptom=None, note=None, claims=(),
                   sources=(("code", "x"),), action="annotate")
    return dataclasses.replace(base, **changes)


def test_the_records_schema_json_and_the_validator_name_the_same_keys() -> None:
    assert set(CELL_KEYS) | set(CELL_EXTRA) == set(CELL_PROPERTIES) == validate.KNOWN_CELL_KEYS
    assert set(FINDING_KEYS) == set(FINDING_PROPERTIES) == validate.KNOWN_FINDING_KEYS
    assert not set(CELL_KEYS) & set(CELL_EXTRA)  # a typed extra key is no field, or from_dict would take it out
    assert validate.CHECKED_KEYS <= validate.KNOWN_CELL_KEYS | validate.KNOWN_FINDING_KEYS
    assert set(CELL_KEYS) >= payload._FROM_REPORTS | payload._BUILT  # the fields the payload names
    assert set(SCHEMA["$defs"]["cell"]["required"]) == set(record.required_keys(CellRecord))
    assert set(SCHEMA["$defs"]["finding"]["required"]) == set(record.required_keys(FindingRecord))


@pytest.mark.parametrize(("keys", "properties"), [({**CELL_KEYS, **CELL_EXTRA}, CELL_PROPERTIES),
                                                  (FINDING_KEYS, FINDING_PROPERTIES)], ids=["cell", "finding"])
def test_schema_json_gives_each_key_the_records_types_or_vocabulary(
        keys: dict[str, tuple[str, ...]], properties: dict[str, Any]) -> None:
    for key, kinds in keys.items():
        prop = properties[key]
        if key in VOCABULARIES:
            assert set(prop["enum"]) - {None} == set(VOCABULARIES[key]), key
            assert (None in prop["enum"]) == ("null" in kinds), key
        else:
            declared = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
            assert set(declared) == set(kinds), key


def test_the_vocabularies_are_the_knowledge_bases_and_the_validator_has_no_copy() -> None:
    """Severities, confidences and actions live in kb/schema.py, outcomes in report/record.py; no module of the
    report's format spells two words of one of them in a list, a tuple or a set (a copy that would drift)."""
    assert validate.SEVERITIES is kb_schema.SEVERITIES and validate.CONFIDENCES is kb_schema.CONFIDENCES
    assert validate.ACTIONS is kb_schema.ACTIONS and validate.OUTCOMES is record.OUTCOMES
    vocabularies = [set(kb_schema.SEVERITIES), set(kb_schema.CONFIDENCES), set(kb_schema.ACTIONS)]
    for path in [*(REPORT_DIR / m for m in ("record.py", "validate.py", "model.py")),
                 *(REPORT_DIR.parent / "session" / m for m in ("payload.py", "collector.py"))]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        copies = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                words = {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                if any(len(words & vocabulary) > 1 for vocabulary in vocabularies) or (
                        path.name != "record.py" and words >= set(record.OUTCOMES)):
                    copies.append((node.lineno, sorted(words)))
        assert copies == [], f"{path.name} copies a vocabulary instead of importing it: {copies}"


def test_the_validator_takes_each_keys_type_from_the_record() -> None:
    cell = {"nodeid": "t.py::t[a]", "outcome": "passed", "runner": "r"}

    def problem(**changes: Any) -> tuple[str, str]:
        data = {"schema_version": 1, "tool_version": "0", "created": "x", "runners": {"r": {}},
                "cells": [{**cell, **changes}]}
        with pytest.raises(InvalidField) as bad:
            check_report_dict(data)
        return bad.value.path, bad.value.problem

    assert problem(log_tail=3) == ("$.cells[0].log_tail", "expected string or null, got integer 3")
    assert problem(gpu=["0"]) == ("$.cells[0].gpu", 'expected string or null, got array ["0"]')
    assert problem(findings=[{"id": "x", "severity": "broken", "failure": 1}])[0] == "$.cells[0].findings[0].failure"
    assert problem(findings=[{"id": "x", "severity": "fatal"}]) == (
        "$.cells[0].findings[0].severity", '"fatal" is not one of broken, degraded, advice')
    assert problem(outcome="fine")[1].startswith('"fine" is not one of passed, failed')
    check_report_dict({"schema_version": 1, "tool_version": "0", "created": "x", "runners": {"r": {}},
                       "cells": [{**cell, "findings": [{"id": "x", "severity": "advice", "summary": None}]}]})


def _value_for(name: str, kinds: tuple[str, ...]) -> Any:
    """A value for a record's field that is not its default, of the field's JSON type."""
    special: dict[str, Any] = {"outcome": "failed", "severity": "broken", "confidence": "verified", "action": "skip",
                               "findings": [FindingRecord(id="f", severity="advice").to_dict()],
                               "explained_by": [{"id": "rule-x"}], "deviations": [{"name": "dtype", "by": "cell"}],
                               "metrics": {"m": 1.5}, "series": {"s": [1.0, None]}, "duration_s": 2.5,
                               "rules": ["rule-x"], "reruns": 2}
    if name in special:
        return special[name]
    kind = kinds[0]
    return {"string": f"{name}-value", "object": {"k": name}, "array": [name], "boolean": True}[kind]


@pytest.mark.parametrize("cls", [CellRecord, FindingRecord])
def test_every_field_survives_the_json_form(cls: Any) -> None:
    """A field added to a record without its line in ``to_dict`` or ``from_dict`` is lost here."""
    keys = CELL_KEYS if cls is CellRecord else FINDING_KEYS
    data = {name: _value_for(name, kinds) for name, kinds in keys.items() if name != "unconfirmed"}
    built = cls.from_dict(data)
    assert built.extra == {}
    written = built.to_dict()
    for name in data:
        assert written[name] == data[name], name
    assert cls.from_dict(written) == built


def test_a_finding_is_recorded_by_one_mapping() -> None:
    found = finding()
    rec = FindingRecord.from_finding(found)
    assert (rec.id, rec.severity, rec.confidence, rec.summary, rec.action, rec.failure) == (
        "r-fallback", "degraded", "upstream", "fell back", "annotate", "fallback")
    assert set(rec.to_dict()) == set(FINDING_KEYS)
    assert FindingRecord.from_finding(finding(confidence="documents")).unconfirmed
    assert FindingRecord.from_dict(rec.to_dict()) == rec


def test_an_older_finding_without_failure_loads_and_writes_back_as_it_was() -> None:
    old = {"id": "x", "severity": "broken", "confidence": "upstream", "summary": "s", "action": "skip",
           "unconfirmed": False, "workaround": "w"}
    rec = FindingRecord.from_dict(old)
    assert rec.failure is None and rec.extra == {"workaround": "w"}
    assert rec.to_dict() == old and list(rec.to_dict()) == list(old)


def live_cell(**changes: Any) -> LiveCell:
    cs = LiveCell(cell=MatrixCell(engine="hf", params={"dtype": "bfloat16"}, axes={}), findings=(finding(),))
    for name, value in changes.items():
        setattr(cs, name, value)
    return cs


def test_the_payload_is_keyed_by_the_records_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    cs = live_cell(metrics={"tokens_per_s": 3.0}, series={"mib": [1.0]}, info={"version": "1"}, log_tail="tail",
                   notes={"prompts": {"n": 2}, "deviations": [{"name": "dtype", "value": "bfloat16", "by": "cell"}]},
                   flagged=(finding(id="measured", severity="advice", confidence="verified"),))
    sent = json.loads(cs.payload_for("call", True, "runner-a") or "")
    assert sent == payload.build(cs, "runner-a")
    assert set(sent) - {payload.ENGINE_FAILED} <= set(CELL_KEYS) | {"extra"}
    assert sent["extra"] == {"prompts": {"n": 2}, "engine_info": {"version": "1"}, "gpu": "3"}
    assert {"engine_info", "gpu"} <= set(CELL_EXTRA)
    assert sent["deviations"] == cs.notes["deviations"]  # a note named as a field is that field
    assert [f["id"] for f in sent["findings"]] == ["r-fallback", "measured"] and sent["rules"] == ["r-fallback"]

    cell = payload.new_cell("t.py::t[a]", "gw0", sent)
    made = CellRecord.from_dict({**cell, "outcome": "passed", "runner": "runner-a"})
    assert made.deviations == ({"name": "dtype", "value": "bfloat16", "by": "cell"},)
    assert made.extra == sent["extra"] and made.log_tail == "tail" and made.worker == "gw0"
    assert made.findings[1].failure == "fallback" and made.metrics == {"tokens_per_s": 3.0}
    assert payload.ENGINE_FAILED not in made.to_dict()


def test_a_later_payload_adds_figures_replaces_findings_and_empty_values_change_nothing() -> None:
    cell = payload.new_cell("t.py::t[a]", None, payload.build(live_cell(metrics={"start_s": 1.0}), None))
    later = payload.build(live_cell(metrics={"tokens_per_s": 2.0}, findings=(), info={"version": "2"}), None)
    payload.merge(cell, later)
    assert cell["metrics"] == {"start_s": 1.0, "tokens_per_s": 2.0}
    assert cell["findings"] == () and cell["rules"] == ()
    assert cell["extra"] == {"engine_info": {"version": "2"}}
    payload.merge(cell, payload.build(live_cell(log_tail="boom"), None))
    payload.merge(cell, payload.build(live_cell(), None))  # nothing measured: the log tail and extra stay
    assert cell["log_tail"] == "boom" and cell["extra"] == {"engine_info": {"version": "2"}}
    payload.merge(cell, {"outcome": "passed", "reason": "x", "nodeid": "other"})  # the collector's, not a payload's
    assert (cell["outcome"], cell["reason"], cell["nodeid"]) == ("error", None, "t.py::t[a]")


def test_a_report_written_from_payloads_validates_and_renders_as_the_schema_says() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    cs = live_cell(info={"version": "1"}, notes={"outputs": {"model": "m"}})
    cell = payload.new_cell("t.py::t[a]", None, payload.build(cs, None))
    report = Report.from_run({"name": "r"}, [{**cell, "outcome": "passed"}])
    data = json.loads(report.to_json())
    check_report_dict(data)
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    assert data["cells"][0]["engine_info"] == {"version": "1"} and data["cells"][0]["outputs"] == {"model": "m"}
    assert Report.from_dict(data) == report


def test_json_keys_refuses_an_annotation_it_has_no_json_type_for() -> None:
    @dataclasses.dataclass
    class Odd:
        when: complex

    with pytest.raises(TypeError, match="no JSON type"):
        record.json_keys(Odd)


def test_a_cell_read_from_its_json_form_has_every_field() -> None:
    """``CellRecord.from_dict`` sets the fields by name, without the dataclass's ``__init__``: a field it left out
    would be missing rather than take its default."""
    made = CellRecord.from_dict({"nodeid": "t.py::t[a]", "outcome": "passed", "duration_s": 1, "metrics": {"x": "nan"}},
                                runner="r")
    assert set(vars(made)) == {f.name for f in dataclasses.fields(CellRecord)}
    assert made == CellRecord(nodeid="t.py::t[a]", outcome="passed", runner="r", duration_s=1.0, metrics={"x": None})
    assert made.test == "t.py::t" and made.duration_s == 1.0 and type(made.duration_s) is float
    with pytest.raises(ValueError, match="unknown outcome"):
        CellRecord.from_dict({"nodeid": "x", "outcome": "fine"})
