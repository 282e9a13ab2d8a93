"""What a large run keeps per cell is kept once and compactly, and the report is streamed to its file: the text and
the state are those of before, only their memory is not."""

from __future__ import annotations

import json

import pytest

from pytest_gpucompat.report.model import Report
from pytest_gpucompat.session import payload
from pytest_gpucompat.workload.matrix import MatrixCell, expand_block

FP = {"name": "r1", "gpus": []}


def _cells(n: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(n):
        out.append({"nodeid": f"t.py::test[{i}]", "engine": "hf", "params": {"a": i, "s": "é\n"}, "outcome":
                    "passed" if i % 3 else "failed", "reason": None if i % 3 else "boom ü", "metrics":
                    {"tokens_per_s": 1.5 * i} if i % 2 else {}, "series": {"x": [1.0, None]} if i == 1 else {},
                    "duration_s": 0.25, "worker": None, "when": "call", "extra": {"prompts": {"n": i}}})
    return out


def _old_text(report: Report, indent: bool) -> str:
    """The report's JSON as it was made before it was streamed: the whole dict, the cells joined."""
    data = report.to_dict()
    if not indent:
        return json.dumps(data, ensure_ascii=False, allow_nan=False) + "\n"
    encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode
    cells = [encode(c) for c in data["cells"]]
    mark = "\x00gpucompat-cells\x00"
    data["cells"] = mark
    text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
    body = "[\n    " + ",\n    ".join(cells) + "\n  ]" if cells else "[]"
    return text.replace(json.dumps(mark), body, 1) + "\n"


@pytest.mark.parametrize("n", [0, 1, 3, 6, 7])
@pytest.mark.parametrize("indent", [True, False], ids=["final", "checkpoint"])
def test_streamed_report_is_the_same_text(n: int, indent: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpucompat.report import model

    monkeypatch.setattr(model, "_LINES_AT_ONCE", 3)
    report = Report.from_run(FP, _cells(n), exitstatus=1, created="2026-01-01T00:00:00Z")
    chunks = list(report.json_chunks(indent=indent))
    assert len(chunks) == (1 if n == 0 else -(-n // 3) + 1)  # three cells at a time, never the whole text
    assert "".join(chunks) == _old_text(report, indent)
    if indent:
        assert report.to_json() == _old_text(report, True)
    assert Report.from_dict(json.loads("".join(chunks))).to_dict() == report.to_dict()


def test_the_written_report_is_streamed_and_whole(tmp_path: object) -> None:
    from pathlib import Path

    from pytest_gpucompat.report.io import load_report, write_report_atomic

    path = Path(str(tmp_path)) / "r.json"
    report = Report.from_run(FP, _cells(5), created="2026-01-01T00:00:00Z")
    write_report_atomic(report, path)
    assert path.read_text(encoding="utf-8") == _old_text(report, True)
    assert load_report(path).to_dict() == report.to_dict()


def test_cells_without_axes_share_one_mapping_and_stay_apart() -> None:
    cells = expand_block({"engine": ["hf", "vllm"], "params": {"a": [1, 2]}}, "m.yaml", "m")
    assert len(cells) == 4 and all(c.axes is cells[0].axes for c in cells)
    assert cells[0].to_dict() == {"engine": "hf", "params": {"a": 1}, "axes": {}}
    with pytest.raises(TypeError):
        cells[0].axes["gpu"] = "x"  # type: ignore[index]
    with_axes = expand_block({"engine": "hf", "axes": {"gpu": ["A100*", "H100*"]}}, "m.yaml", "m")
    assert [c.axes for c in with_axes] == [{"gpu": "A100*"}, {"gpu": "H100*"}]
    assert MatrixCell("hf", {"a": 1}).id == "hf-a=1"
    assert not hasattr(cells[0], "__dict__")  # slots: no dict per cell


def test_collector_cells_share_empty_figures_until_one_is_measured() -> None:
    first = payload.new_cell("t::a", None, {"engine": "hf", "metrics": {}, "series": {}})
    second = payload.new_cell("t::b", None, {"engine": "hf", "metrics": {"x": 1.0}, "series": {}})
    assert first["metrics"] == {} and second["metrics"] == {"x": 1.0}
    payload.merge(first, {"metrics": {"y": 2.0}, "series": {"s": [1.0]}})
    payload.merge(first, {"metrics": {"z": 3.0}})
    assert first["metrics"] == {"y": 2.0, "z": 3.0} and first["series"] == {"s": [1.0]}
    third = payload.new_cell("t::c", None, {})
    assert third["metrics"] == {} and third["series"] == {}  # nothing leaked into the shared empty figures


@pytest.mark.parametrize("n", [0, 1, 3, 6, 7])
@pytest.mark.parametrize("indent", [True, False], ids=["final", "checkpoint"])
def test_report_from_encoded_cells_is_the_same_text(n: int, indent: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector keeps a finished cell as its line and counts it as it finishes: the report it streams from
    those lines and counts is the text `Report.from_run` writes from the cells' dicts, the lines joined a few at a
    time (three here: blocks full, partly full and one short)."""
    from pytest_gpucompat.report import model
    from pytest_gpucompat.report.model import CellRecord, encode_cell, run_json_chunks

    monkeypatch.setattr(model, "_LINES_AT_ONCE", 3)
    cells = _cells(n)
    for i, cell in enumerate(cells):  # findings counted by the summary (one unconfirmed), an uncovered cell
        if i in (2, 3):
            cell["findings"] = [{"id": "r1", "severity": "broken", "confidence": "upstream"},
                                {"id": "r2", "severity": "degraded", "confidence": "documents"}]
        if i == 4:
            cell["outcome"], cell["reason"] = "not-covered", "not covered here: x"
    report = Report.from_run(FP, cells, exitstatus=1, created="2026-01-01T00:00:00Z")
    lines: list[str] = []
    counts: dict[tuple[str, str, tuple[tuple[str, bool], ...]], int] = {}
    for cell in cells:
        record = CellRecord.from_dict({**cell, "runner": "r1"})
        key = ("r1", record.outcome, tuple((f.severity, f.unconfirmed) for f in record.findings))
        counts[key] = counts.get(key, 0) + 1
        lines.append(encode_cell(record))
    text = "".join(run_json_chunks(FP, lines, counts, exitstatus=1, indent=indent))
    data = json.loads(text)
    data["created"] = "2026-01-01T00:00:00Z"
    assert data == json.loads(_old_text(report, indent))
    assert text.replace(json.loads(text)["created"], "2026-01-01T00:00:00Z") == _old_text(report, indent)
    if n > 3:  # the two cells with the same findings counted as one key, twice
        assert data["summary"]["unconfirmed_claims"] == 2 and data["summary"]["findings"]["broken"] == 2
        assert data["summary"]["uncovered"] == (n > 4)


def test_finished_cells_are_kept_as_lines_and_heard_again(pytester: pytest.Pytester) -> None:
    """A cell whose teardown reported is kept as its report line; a later report of it (a re-run, here a
    conftest that logs the teardown report again with another outcome) makes it a dict again, and the report, the
    summary and the baseline's Report all say what the reports said."""
    pytester.makeconftest('''
import pytest

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown" and item.name.endswith("[hf-a=2]"):
        item.ihook.pytest_runtest_logreport(report=report)  # heard once more after it settled
    return report
''')
    pytester.makepyfile(test_m='''
import pytest

@pytest.mark.gpucompat(engine="hf", params={"a": [1, 2, 3]})
def test_cell(gpucompat_cell):
    assert gpucompat_cell.params["a"] != 3, "three is wrong"
''')
    out = pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json", "-p", "no:cacheprovider")
    out.assert_outcomes(passed=2, failed=1)
    out.stdout.fnmatch_lines(["*3 cells on *: 1 failed, 2 passed*", "*FAILED*a=3*three is wrong*"])
    data = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    assert [(c["nodeid"].split("::")[1], c["outcome"], c["reason"]) for c in data["cells"]] == [
        ("test_cell[hf-a=1]", "passed", None), ("test_cell[hf-a=2]", "passed", None),
        ("test_cell[hf-a=3]", "failed", "AssertionError: three is wrong")]
    assert data["summary"]["outcomes"]["passed"] == 2 and data["summary"]["outcomes"]["failed"] == 1
    assert data["summary"] == Report.from_dict(data).summary  # counted as cells settled, and again when heard
    twice, once = data["cells"][1]["duration_s"], data["cells"][0]["duration_s"]
    assert twice is not None and once is not None
