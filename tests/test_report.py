"""Reports: model round trip, schema, atomic write, renderers, merge, diff and the CLI commands."""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import stat
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat import __version__
from pytest_gpucompat.report import cli
from pytest_gpucompat.report.diff import diff_reports, parse_threshold, stale_rules
from pytest_gpucompat.report.diff_text import format_diff
from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.io import load_report, write_report_atomic
from pytest_gpucompat.report.junit import render_junit
from pytest_gpucompat.report.markdown import render_markdown, write_step_summary
from pytest_gpucompat.report.merge import merge_reports, outcomes_by_nodeid, uncovered_cells
from pytest_gpucompat.report.model import (
    OUTCOMES,
    CellRecord,
    FindingRecord,
    Report,
    ReportError,
)

jsonschema = pytest.importorskip("jsonschema")

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "pytest_gpucompat" / "report" / "schema.json"

BROKEN = {
    "id": "vllm-fp8-kv-cache-ampere-backend",
    "severity": "broken",
    "confidence": "documents",
    "summary": "FP8 KV cache crashes with the Triton backend",
    "action": "xfail",
    "workaround": "use FlashInfer",
}
DEGRADED = {
    "id": "hf-sdpa-math-fallback",
    "severity": "degraded",
    "confidence": "upstream",
    "summary": "SDPA falls back to the math kernel",
    "action": "annotate",
}


def fingerprint(name: str, gpu: str = "NVIDIA H200", count: int = 1) -> dict[str, Any]:
    return {
        "schema": 1,
        "name": name,
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{i}",
                "name": gpu,
                "architecture": "hopper",
                "compute_capability": "9.0",
                "memory_mib": 143771,
                "pcie_generation": 5,
                "pcie_width": 16,
                "ecc": True,
                "mig": False,
                "persistence": True,
                "vbios": "96.00.00",
            }
            for i in range(count)
        ],
        "driver": "580.159.04",
        "cuda_driver": "13.0",
        "cuda_runtime": "13.0",
        "links": [],
        "interconnect": None,
        "packages": {"torch": "2.11.0+cu130", "vllm": "0.26.0", "sglang": None},
        "os": "Linux-6.8",
        "libc": "glibc 2.36",
        "python": "3.12.3",
        "container": None,
        "cuda_visible_devices": None,
        "params": {},
        "reasons": [],
        "future_key": {"kept": True},
    }


def cell(nodeid: str, outcome: str, runner: str = "runner-a", **extra: Any) -> dict[str, Any]:
    test, _, ident = nodeid.partition("[")
    engine = ident.split("-", 1)[0] if ident else None
    data: dict[str, Any] = {
        "nodeid": nodeid,
        "test": test,
        "engine": engine,
        "params": {"dtype": "bfloat16"},
        "axes": {},
        "outcome": outcome,
        "reason": None,
        "rules": [],
        "findings": [],
        "metrics": {},
        "duration_s": 1.5,
        "log_tail": None,
        "worker": "gw0",
        "runner": runner,
        "when": "call",
    }
    data.update(extra)
    return data


N_GEN = "suites/test_smoke.py::test_generate[hf-dtype=bfloat16]"
N_FP8 = "suites/test_smoke.py::test_generate[vllm-kv_cache_dtype=fp8]"
N_TP = "suites/test_parallel.py::test_tp[sglang-tp=2]"
N_NEW = "suites/test_versions.py::test_new[vllm-0.27]"
N_START = "suites/test_engine.py::test_start[trtllm]"
N_XF = "suites/test_engine.py::test_start[hf-fp32]"
N_SKIP = "suites/test_engine.py::test_start[vllm-v100]"


def every_outcome_cells(runner: str) -> list[dict[str, Any]]:
    return [
        cell(
            N_GEN,
            "passed",
            runner,
            findings=[DEGRADED],
            rules=[DEGRADED["id"]],
            metrics={"tokens_per_s": 800.0, "ttft_s": 0.012, "leak_mib_per_cycle": 0.0, "max_abs_logprob_delta": 0.01},
        ),
        cell(
            N_FP8,
            "failed",
            runner,
            reason="EngineFailed: ValueError: FP8 | <b>unsupported</b>\nline 2",
            rules=[BROKEN["id"]],
            findings=[BROKEN],
            log_tail="boot\n\x1b[31mERROR\x1b[0m <script>x</script>\x00",
        ),
        cell(N_TP, "xpassed", runner, rules=[BROKEN["id"]], findings=[BROKEN]),
        cell(N_NEW, "not-covered", runner, axes={"vllm": "0.27.1"}, reason="covered by another runner"),
        cell(N_START, "error", runner, reason="RuntimeError: CUDA error: no kernel image",
             explained_by=[{"id": "vllm-requires-cc70", "severity": "broken", "confidence": "upstream",
                            "failure": "error-at-start", "summary": "vLLM needs cc 7.0", "workaround": None}]),
        cell(N_XF, "xfailed", runner, reason="known bad", rules=[BROKEN["id"]], findings=[BROKEN]),
        cell(N_SKIP, "skipped", runner, reason="needs a V100"),
    ]


def make_report(runner: str = "runner-a", cells: list[dict[str, Any]] | None = None, **kw: Any) -> Report:
    return Report.from_run(
        fingerprint(runner),
        every_outcome_cells(runner) if cells is None else cells,
        exitstatus=kw.pop("exitstatus", 1),
        created=kw.pop("created", "2026-01-31T12:00:00Z"),
        **kw,
    )


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def assert_valid(report: Report, schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(schema).validate(json.loads(report.to_json()))


# --- model ---------------------------------------------------------------------------------------------------------


def test_round_trip_through_dict_and_file(tmp_path: Path, schema: dict[str, Any]) -> None:
    report = make_report()
    assert Report.from_dict(report.to_dict()) == report
    path = write_report_atomic(report, tmp_path / "r.json")
    loaded = load_report(path)
    assert loaded == report
    assert loaded.tool_version == __version__ and loaded.schema_version == 1
    assert loaded.runners["runner-a"]["future_key"] == {"kept": True}
    assert loaded.cells[1].findings[0].extra == {"workaround": "use FlashInfer"}
    assert_valid(loaded, schema)


def test_summary_is_derived_and_not_trusted() -> None:
    data = make_report().to_dict()
    assert data["summary"]["outcomes"] == dict.fromkeys(OUTCOMES, 1)
    assert data["summary"]["cells"] == 7 and data["summary"]["uncovered"] == 1
    data["summary"] = {"cells": 999}
    assert Report.from_dict(data).summary["cells"] == 7


def test_non_finite_metrics_become_null(schema: dict[str, Any]) -> None:
    report = make_report(cells=[cell(N_GEN, "passed", metrics={"tokens_per_s": float("nan"), "x": float("inf")})])
    assert report.cells[0].metrics == {"tokens_per_s": None, "x": None}
    assert "NaN" not in report.to_json()
    assert_valid(report, schema)


def test_cell_rejects_unknown_outcome_and_report_unknown_runner() -> None:
    with pytest.raises(ValueError, match="unknown outcome"):
        CellRecord(nodeid="a::b", outcome="passd", runner="r")
    with pytest.raises(ValueError, match="without a fingerprint"):
        Report(runners={}, cells=[CellRecord(nodeid="a::b", outcome="passed", runner="r")])


def test_cell_defaults_and_conversion() -> None:
    c = CellRecord.from_dict({"nodeid": "t.py::f[x]", "outcome": "passed"}, runner="me")
    assert c.test == "t.py::f" and c.runner == "me" and c.rules == () and c.findings == ()
    built = CellRecord(nodeid="t.py::f", outcome="failed", runner="me", findings=[DEGRADED], rules=["r1"])
    assert isinstance(built.findings[0], FindingRecord) and built.rules == ("r1",)
    assert not built.ran or built.outcome == "failed"


def test_from_run_accepts_plugin_cell_dicts(schema: dict[str, Any]) -> None:
    raw = {
        "nodeid": N_GEN,
        "engine": "hf",
        "params": {},
        "axes": {},
        "outcome": "passed",
        "reason": None,
        "rules": [],
        "findings": [{**DEGRADED, "failure": "fallback"}],
        "metrics": {"tokens_per_s": 3},
        "duration_s": 0.5,
        "log_tail": None,
        "worker": None,
        "runner": "stale-name",
        "extra": {"engine_info": {"attention_backend": "FLASH_ATTN"}, "gpu": "0"},
    }
    report = Report.from_run({"name": "runner-x", "gpus": []}, [raw], interrupted=True, exitstatus=2)
    c = report.cells[0]
    assert c.runner == "runner-x" and c.test == "suites/test_smoke.py::test_generate"
    assert c.extra == {"engine_info": {"attention_backend": "FLASH_ATTN"}, "gpu": "0"}
    assert c.findings[0].failure == "fallback" and c.findings[0].extra == {}  # a field of the record
    data = json.loads(report.to_json())
    assert data["cells"][0]["gpu"] == "0" and "extra" not in data["cells"][0]
    assert Report.from_dict(data) == report
    assert_valid(report, schema)
    assert Report.from_run({}, []).runners == {"local": {}}


def test_every_produced_report_validates(schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    empty = Report.from_run({"name": None, "gpus": [], "driver": None, "reasons": ["NVML not available"]}, [])
    for report in (make_report(), empty, merge_reports([make_report(), make_report(), empty])):
        assert_valid(report, schema)


def test_schema_documents_every_field(schema: dict[str, Any]) -> None:
    missing: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for name, sub in (node.get("properties") or {}).items():
                if "description" not in sub:
                    missing.append(f"{path}.{name}")
            for key, sub in node.items():
                walk(sub, f"{path}.{key}")
        elif isinstance(node, list):
            for i, sub in enumerate(node):
                walk(sub, f"{path}[{i}]")

    walk(schema, "$")
    assert not missing


BAD_CASES = [
    ("future schema_version", lambda d: d.update(schema_version=2), "$.schema_version"),
    ("bad outcome", lambda d: d["cells"][1].update(outcome="passd"), "$.cells[1].outcome"),
    (
        "bad severity",
        lambda d: d["cells"][1]["findings"][0].update(severity="fatal"),
        "$.cells[1].findings[0].severity",
    ),
    (
        "bad confidence",
        lambda d: d["cells"][1]["findings"][0].update(confidence="sure"),
        "$.cells[1].findings[0].confidence",
    ),
    (
        "metric not a number",
        lambda d: d["cells"][0]["metrics"].update(tokens_per_s="fast"),
        "$.cells[0].metrics.tokens_per_s",
    ),
    ("gpus not a list", lambda d: d["runners"]["runner-a"].update(gpus="H200"), '$.runners["runner-a"].gpus'),
    ("cells not a list", lambda d: d.update(cells={}), "$.cells"),
    ("interrupted not bool", lambda d: d.update(interrupted="no"), "$.interrupted"),
    ("missing nodeid", lambda d: d["cells"][2].pop("nodeid"), "$.cells[2].nodeid"),
    ("rule not a string", lambda d: d["cells"][1].update(rules=[1]), "$.cells[1].rules[0]"),
    ("exitstatus float", lambda d: d.update(exitstatus=1.5), "$.exitstatus"),
    ("explained_by id missing", lambda d: d["cells"][4]["explained_by"][0].pop("id"), "$.cells[4].explained_by[0].id"),
    (
        "explained_by bad confidence",
        lambda d: d["cells"][4]["explained_by"][0].update(confidence="sure"),
        "$.cells[4].explained_by[0].confidence",
    ),
    ("explained_by not a list", lambda d: d["cells"][4].update(explained_by="x"), "$.cells[4].explained_by"),
]


@pytest.mark.parametrize(("mutate", "where"), [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES])
def test_bad_report_one_line_error(tmp_path: Path, schema: dict[str, Any], mutate: Any, where: str) -> None:
    data = make_report().to_dict()
    mutate(data)
    # The JSON Schema and the hand-written check agree on what is bad.
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(data))
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ReportError) as info:
        load_report(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {where}: "), message
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_bad_runner_reference_is_caught_by_hand_check(tmp_path: Path) -> None:
    data = make_report().to_dict()
    data["cells"][3]["runner"] = "runner-z"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ReportError, match=re.escape('$.cells[3].runner: "runner-z" is not a key of $.runners')):
        load_report(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "no such file"),
        (b'{"schema_version": 1,\n "cells": [}', "not valid JSON (Expecting value at line 2, column 12)"),
        (b"\xff\xfe\x00", "not UTF-8"),
        (b"[]", "not a gpucompat report"),  # no schema_version marker: not a report at all
        (b"{}", "not a gpucompat report"),
        (b'{"cells": []}', "not a gpucompat report"),
    ],
)
def test_unreadable_files(tmp_path: Path, content: bytes | None, expected: str) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ReportError) as info:
        load_report(path)
    assert str(info.value).startswith(f"{path}: ") and expected in str(info.value)
    assert "\n" not in str(info.value)


def test_from_dict_raises_report_error() -> None:
    with pytest.raises(ReportError, match=r"^report: \$\.cells: expected array"):
        Report.from_dict({"schema_version": 1, "tool_version": "x", "created": "x", "runners": {}, "cells": 3})


# --- atomic write --------------------------------------------------------------------------------------------------


def test_atomic_write_replaces_and_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    target = tmp_path / "out.json"
    write_report_atomic(make_report(), target)
    assert synced, "the data must be fsynced before the rename"
    assert load_report(target).cells
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_atomic_write_keeps_old_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.json"
    target.write_text("old", encoding="utf-8")

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_report_atomic(make_report(), target)
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


# --- markdown ------------------------------------------------------------------------------------------------------


def test_markdown_summary() -> None:
    merged = merge_reports([make_report("runner-a"), make_report("runner-b", interrupted=True)])
    md = render_markdown(merged)
    assert "**14 cells** (7 test items) on **2 runners**" in md
    assert "> [!WARNING]" in md
    assert "| Test | Engine | Params | runner-a | runner-b |" in md
    for word in ("passed", "**FAILED**", "**XPASS**", "xfailed", "skipped", "not covered"):
        assert f"| {word} |" in md
    assert "| **ERROR** (known issue `vllm-requires-cc70`) |" in md  # a failure a rule's signature identifies
    assert ": error: RuntimeError: CUDA error: no kernel image. Matches known issue `vllm-requires-cc70`: vLLM needs " \
           "cc 7.0" in md
    # Failures: reason on one line, escaped, with rule ids.
    assert "FP8 \\| \\<b\\>unsupported\\</b\\> line 2" in md
    assert f"Rules: `{BROKEN['id']}`" in md
    # the broken rule of the fixture is an unconfirmed claim (documents only): its own section, after the evidence
    assert "#### broken" not in md and "#### degraded (1)" in md
    assert md.index("#### degraded") < md.index("#### Unconfirmed claims: only the seed documents say so")
    assert "### Stale rules (1)" in md and "documents → refuted by this run" in md
    assert "### Covered by no runner (1)" in md and N_NEW in md
    assert not re.search("[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff]", md), "no emoji"


def test_markdown_truncates_long_matrices() -> None:
    cells = [cell(f"t.py::f[hf-{i}]", "passed") for i in range(20)]
    md = render_markdown(make_report(cells=cells), max_rows=5)
    assert "… 15 more cells (15 of 20 rows) not shown: see the HTML/JSON report." in md


def test_write_step_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert write_step_summary("# x") is False
    target = tmp_path / "summary.md"
    target.write_text("before\n", encoding="utf-8")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    assert write_step_summary("## one") is True
    assert write_step_summary("## two\n") is True
    assert target.read_text(encoding="utf-8") == "before\n## one\n## two\n"


# --- junit ---------------------------------------------------------------------------------------------------------


def test_junit_xml() -> None:
    merged = merge_reports([make_report("runner-a"), make_report("runner-b")])
    root = ET.fromstring(render_junit(merged).encode("utf-8"))
    assert root.tag == "testsuites" and root.get("tests") == "14"
    assert root.get("failures") == "2" and root.get("errors") == "2" and root.get("skipped") == "6"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["runner-a", "runner-b"]
    suite_props = {p.get("name"): p.get("value") for p in suites[0].find("properties")}
    assert suite_props["gpu"] == "NVIDIA H200" and suite_props["driver"] == "580.159.04"
    assert suite_props["cuda_driver"] == "13.0" and suite_props["package.vllm"] == "0.26.0"
    assert suite_props["package.sglang"] == "not installed"
    cases = {c.get("name"): c for c in suites[0].findall("testcase")}
    assert len(cases) == 7
    failed = cases["test_generate[vllm-kv_cache_dtype=fp8]"]
    assert failed.get("classname") == "suites.test_smoke"
    failure = failed.find("failure")
    assert failure.get("message") == "EngineFailed: ValueError: FP8 | <b>unsupported</b>"
    assert "<script>x</script>" in failure.text and "\x1b" not in failure.text and "\x00" not in failure.text
    props = [(p.get("name"), p.get("value")) for p in failed.find("properties")]
    assert ("rule", BROKEN["id"]) in props
    assert ("finding", f"{BROKEN['id']} [broken/documents/xfail]: {BROKEN['summary']}") in props
    passed_props = dict(
        (p.get("name"), p.get("value")) for p in cases["test_generate[hf-dtype=bfloat16]"].find("properties")
    )
    assert passed_props["metric.tokens_per_s"] == "800" and passed_props["outcome"] == "passed"
    assert cases["test_start[trtllm]"].find("error") is not None
    assert cases["test_start[hf-fp32]"].find("skipped").get("type") == "pytest.xfail"
    assert cases["test_new[vllm-0.27]"].find("skipped").get("type") == "gpucompat.not-covered"
    assert cases["test_start[vllm-v100]"].find("skipped").get("message") == "needs a V100"
    assert cases["test_tp[sglang-tp=2]"].find("skipped") is None


# --- merge ---------------------------------------------------------------------------------------------------------


def test_merge_disambiguates_runner_names_deterministically() -> None:
    a1, b, a2 = make_report("runner-a"), make_report("runner-b"), make_report("runner-a", exitstatus=0)
    merged = merge_reports([a1, b, a2])
    assert list(merged.runners) == ["runner-a", "runner-b", "runner-a#2"]
    assert {c.runner for c in merged.cells[14:]} == {"runner-a#2"}
    assert merged == merge_reports([a1, b, a2])
    assert a2.cells[0].runner == "runner-a", "inputs are not modified"
    assert merged.exitstatus == 1 and merged.interrupted is False
    again = merge_reports([merged, make_report("runner-a")])
    assert list(again.runners)[-1] == "runner-a#3"


def test_merge_metadata() -> None:
    old = make_report("a", created="2026-01-01T00:00:00Z", exitstatus=0)
    new = make_report("b", created="2026-02-01T00:00:00Z", exitstatus=3, interrupted=True)
    merged = merge_reports([old, new])
    assert merged.created == "2026-02-01T00:00:00Z" and merged.exitstatus == 3 and merged.interrupted
    assert merge_reports([make_report("a", exitstatus=None)]).exitstatus is None
    with pytest.raises(ValueError, match="nothing to merge"):
        merge_reports([])


def test_merged_outcomes_and_uncovered_cells() -> None:
    a = make_report(
        "runner-a",
        cells=[
            cell(N_GEN, "passed"),
            cell(N_NEW, "not-covered"),
            cell(N_TP, "not-covered"),
            cell(N_SKIP, "skipped"),
        ],
    )
    b = make_report(
        "runner-b",
        cells=[
            cell(N_GEN, "failed", "runner-b"),
            cell(N_NEW, "passed", "runner-b"),
            cell(N_TP, "not-covered", "runner-b"),
        ],
    )
    merged = merge_reports([a, b])
    assert outcomes_by_nodeid(merged)[N_GEN] == {"runner-a": "passed", "runner-b": "failed"}
    assert outcomes_by_nodeid(merged)[N_SKIP] == {"runner-a": "skipped", "runner-b": "missing"}
    assert uncovered_cells(merged) == [N_TP]
    assert uncovered_cells(a) == [N_NEW, N_TP]
    assert merged.summary["uncovered"] == 1


# --- diff ----------------------------------------------------------------------------------------------------------


def test_identical_reports_diff_clean() -> None:
    for report in (make_report(), merge_reports([make_report("a"), make_report("b")])):
        result = diff_reports(report, report, [parse_threshold("tokens_per_s:-10%")])
        assert result.clean and not result.regressed
        assert format_diff(result).startswith("gpucompat diff: clean")


def test_outcome_regressions_and_improvements() -> None:
    base = make_report(
        cells=[
            cell(N_GEN, "passed"),
            cell(N_XF, "xfailed"),
            cell(N_START, "failed"),
            cell(N_SKIP, "passed"),
            cell(N_TP, "passed"),
        ]
    )
    cur = make_report(
        "renamed-runner",
        cells=[
            cell(N_GEN, "failed", "renamed-runner", reason="boom"),
            cell(N_XF, "error", "renamed-runner"),
            cell(N_START, "passed", "renamed-runner"),
            cell(N_SKIP, "skipped", "renamed-runner"),
            cell(N_NEW, "passed", "renamed-runner"),
        ],
    )
    result = diff_reports(base, cur)
    assert result.regressed
    assert [(c.nodeid, c.before, c.after) for c in result.regressions] == [
        (N_GEN, "passed", "failed"),
        (N_XF, "xfailed", "error"),
    ]
    assert result.regressions[0].detail == "boom"
    assert [(c.nodeid, c.after) for c in result.improvements] == [(N_START, "passed")]
    assert result.new_cells == (N_NEW,) and result.missing_cells == (N_TP,)
    text = format_diff(result)
    assert text.startswith("gpucompat diff: REGRESSED") and "passed → failed: boom" in text


def test_new_broken_finding_is_a_regression() -> None:
    base = make_report(cells=[cell(N_GEN, "passed"), cell(N_FP8, "skipped", findings=[BROKEN], rules=[BROKEN["id"]])])
    cur = make_report(
        cells=[
            cell(N_GEN, "passed", findings=[{**BROKEN, "id": "new-rule", "confidence": "upstream"}],
                 rules=["new-rule"]),
            cell(N_XF, "passed", findings=[{**BROKEN, "id": "new-claim"}], rules=["new-claim"]),  # unconfirmed
            cell(N_FP8, "skipped", findings=[BROKEN], rules=[BROKEN["id"]]),
            cell(N_TP, "skipped", findings=[BROKEN], rules=[BROKEN["id"]]),  # new cell, known rule: not news
            cell(N_NEW, "passed", findings=[DEGRADED]),  # not broken: not news
        ]
    )
    result = diff_reports(base, cur)
    assert [(n.nodeid, n.finding_id) for n in result.new_broken] == [(N_GEN, "new-rule")]
    assert result.regressed and not result.regressions


@pytest.mark.parametrize(
    ("expr", "before", "after", "verdict"),
    [
        ("tokens_per_s:-10%", 800.0, 640.0, "regression"),
        ("tokens_per_s:-10%", 800.0, 760.0, None),
        ("tokens_per_s:-10%", 800.0, 1000.0, "improvement"),
        ("leak_mib_per_cycle:+1", 0.0, 1.5, "regression"),
        ("leak_mib_per_cycle:+1", 0.0, 1.0, None),
        ("max_abs_logprob_delta:+50%", 0.01, 0.02, "regression"),
        ("max_abs_logprob_delta:+50%", 0.01, 0.014, None),
        ("ttft_s:+10%", 0.0, 0.5, "regression"),
    ],
)
def test_metric_thresholds(expr: str, before: float, after: float, verdict: str | None) -> None:
    threshold = parse_threshold(expr)
    assert threshold.judge(before, after) == verdict
    metric = threshold.metric
    base = make_report(cells=[cell(N_GEN, "passed", metrics={metric: before})])
    cur = make_report(cells=[cell(N_GEN, "passed", metrics={metric: after})])
    result = diff_reports(base, cur, [threshold], default_gate=False)
    assert result.regressed == (verdict == "regression")
    assert bool(result.improvements) == (verdict == "improvement")
    if verdict == "regression":
        assert result.regressions[0].metric == metric and f"threshold {threshold}" in result.regressions[0].detail


def test_metric_missing_on_one_side_is_ignored() -> None:
    base = make_report(cells=[cell(N_GEN, "passed", metrics={"tokens_per_s": None})])
    cur = make_report(cells=[cell(N_GEN, "passed", metrics={})])
    assert diff_reports(base, cur, [parse_threshold("tokens_per_s:-1%")]).clean


@pytest.mark.parametrize(
    ("expr", "metric", "direction", "amount", "relative"),
    [
        ("tokens_per_s:-10%", "tokens_per_s", -1, 10.0, True),
        ("leak_mib_per_cycle:+1", "leak_mib_per_cycle", 1, 1.0, False),
        (" max_abs_logprob_delta : + 50 % ", "max_abs_logprob_delta", 1, 50.0, True),
        ("ttft_s:+.5", "ttft_s", 1, 0.5, False),
    ],
)
def test_parse_threshold(expr: str, metric: str, direction: int, amount: float, relative: bool) -> None:
    t = parse_threshold(expr)
    assert (t.metric, t.direction, t.amount, t.relative) == (metric, direction, amount, relative)


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "tokens_per_s",
        "tokens_per_s:10%",
        "tokens_per_s:-x%",
        ":-10%",
        "tokens_per_s:-10%%",
        "a:-1e5",
        "tokens_per_s:-10\n%",
    ],
)
def test_parse_threshold_rejects(expr: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_threshold(expr)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("bad threshold")


def test_stale_rules_from_xpass() -> None:
    upstream = {**BROKEN, "id": "up-rule", "confidence": "upstream", "action": "xfail-strict"}
    report = make_report(
        cells=[
            cell(
                N_TP,
                "xpassed",
                rules=[BROKEN["id"], "up-rule", DEGRADED["id"], "bare-rule"],
                findings=[BROKEN, upstream, DEGRADED],
            ),
            cell(N_XF, "xpassed", rules=[BROKEN["id"]], findings=[BROKEN]),
            cell(N_GEN, "passed", rules=["other"], findings=[]),
        ]
    )
    stale = {s.rule_id: s for s in stale_rules(report)}
    assert set(stale) == {BROKEN["id"], "up-rule", "bare-rule"}, "annotate-only rules predicted no failure"
    assert stale[BROKEN["id"]].suggestion.startswith("documents → refuted by this run")
    assert stale[BROKEN["id"]].cells == (f"runner-a: {N_TP}", f"runner-a: {N_XF}")
    assert stale["up-rule"].suggestion.startswith("upstream → re-check")
    assert stale["bare-rule"].confidence is None

    base = make_report(cells=[cell(N_TP, "xfailed", rules=[BROKEN["id"]], findings=[BROKEN])])
    cur = make_report(cells=[cell(N_TP, "xpassed", rules=[BROKEN["id"]], findings=[BROKEN])])
    result = diff_reports(base, cur)
    assert [s.rule_id for s in result.stale_rules] == [BROKEN["id"]] and not result.regressed
    assert "documents → refuted by this run" in format_diff(result)
    assert not diff_reports(cur, cur).stale_rules, "already stale in the baseline: not news"


def test_diff_keying_with_several_runners() -> None:
    def two(outcome_b: str) -> Report:
        return merge_reports(
            [
                make_report("runner-a", cells=[cell(N_GEN, "passed", "runner-a")]),
                make_report("runner-b", cells=[cell(N_GEN, outcome_b, "runner-b")]),
            ]
        )

    # Both merged: matched per runner, so runner-b's failure is not hidden by runner-a's pass.
    result = diff_reports(two("passed"), two("failed"))
    assert "runner name" in result.matching
    assert [c.key for c in result.regressions] == [f"runner-b: {N_GEN}"]

    # Merged baseline vs one PR runner of the same name: compared with that runner only.
    pr = make_report("runner-b", cells=[cell(N_GEN, "failed", "runner-b")])
    result = diff_reports(two("failed"), pr)
    assert "restricted to runner 'runner-b'" in result.matching and not result.regressed
    result = diff_reports(two("passed"), pr)
    assert result.regressed

    # A runner the baseline does not know: the baseline is folded per nodeid (most serious outcome).
    other = make_report("runner-z", cells=[cell(N_GEN, "failed", "runner-z")])
    assert not diff_reports(two("failed"), other).regressed
    assert diff_reports(two("passed"), other).regressed


# --- html (without a browser) --------------------------------------------------------------------------------------


def test_html_is_self_contained_and_escaped() -> None:
    merged = merge_reports([make_report("runner-a"), make_report("<b>evil</b>")])
    page = render_html(merged)
    assert page.startswith("<!doctype html>")
    assert "<b>evil</b>" not in page and "&lt;b&gt;evil&lt;/b&gt;" in page
    assert "<script>x</script>" not in page and "<b>unsupported</b>" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "http://" not in page and "https://" not in page
    for outcome in OUTCOMES:
        assert f'class="cell o-{outcome}"' in page
    assert "NVIDIA H200" in page and "580.159.04" in page and "vllm 0.26.0" in page
    assert 'id="uncovered"' in page and N_NEW in page
    data = re.search(r'<script type="application/json" id="gc-data">(.*?)</script>', page, re.S)
    assert data is not None
    cells = json.loads(data.group(1))["cells"]
    assert len(cells) == len(merged.cells) and cells[1]["reason"].startswith("EngineFailed")
    assert page.count("<script") == 3


def test_html_empty_report() -> None:
    page = render_html(Report.from_run({"name": "r"}, []))
    assert "No gpucompat cells in this report." in page


# --- cli -----------------------------------------------------------------------------------------------------------


@pytest.fixture()
def report_file(tmp_path: Path) -> Path:
    return write_report_atomic(make_report(), tmp_path / "report.json")


def test_cmd_report_prints_markdown(
    report_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    summary = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert cli.cmd_report(report_file) == 0
    out = capsys.readouterr().out
    assert out.startswith("## GPU compatibility report")
    assert summary.read_text(encoding="utf-8") == out


def test_cmd_report_writes_files(
    report_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    html, md, junit = tmp_path / "r.html", tmp_path / "r.md", tmp_path / "r.xml"
    assert cli.cmd_report(report_file, html=html, markdown=md, junit=junit) == 0
    out = capsys.readouterr().out  # one line: what was written where (the Markdown went to its file)
    assert out.count("\n") == 1 and f"html {html}, markdown {md}, junit {junit}" in out
    assert html.read_text(encoding="utf-8").startswith("<!doctype html>")
    assert md.read_text(encoding="utf-8").startswith("## GPU")
    ET.parse(junit)


def test_cmd_report_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1}', encoding="utf-8")
    assert cli.cmd_report(bad) == 2
    err = capsys.readouterr().err
    assert err == f"gpucompat report: error: {bad}: $.tool_version: required field is missing\n"
    assert cli.cmd_report(tmp_path / "missing.json") == 2
    assert "Traceback" not in capsys.readouterr().err


def test_cmd_report_unwritable_output(report_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.cmd_report(report_file, html=tmp_path / "no-such-dir" / "r.html") == 2
    err = capsys.readouterr().err
    assert err.startswith("gpucompat report: error: cannot write") and err.count("\n") == 1


def test_cmd_merge(tmp_path: Path, capsys: pytest.CaptureFixture[str], schema: dict[str, Any]) -> None:
    paths = [write_report_atomic(make_report(n), tmp_path / f"{i}.json") for i, n in enumerate(["a", "b", "a"])]
    out, html = tmp_path / "merged.json", tmp_path / "merged.html"
    assert cli.cmd_merge(paths, out, html=html) == 0
    merged = load_report(out)
    assert list(merged.runners) == ["a", "b", "a#2"]
    assert_valid(merged, schema)
    assert html.exists() and "21 cells of 3 runners" in capsys.readouterr().out
    assert cli.cmd_merge([paths[0], tmp_path / "nope.json"], out) == 2
    assert cli.cmd_merge([], out) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"gpucompat merge: error: {tmp_path / 'nope.json'}: no such file",
        "gpucompat merge: error: no reports given",
    ]


def test_cmd_diff_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_report_atomic(make_report(), tmp_path / "base.json")
    slower = make_report(
        cells=[
            {**c, "metrics": {**c["metrics"], "tokens_per_s": 500.0}} if c["nodeid"] == N_GEN else c
            for c in every_outcome_cells("runner-a")
        ]
    )
    cur = write_report_atomic(slower, tmp_path / "cur.json")
    assert cli.cmd_diff(base, base, []) == 0
    # -37.5 % tokens/s is beyond the registry's default tolerance (25 %): a regression with no --fail-on at all
    assert cli.cmd_diff(base, cur, []) == 1
    assert "tokens_per_s 800 → 500 (-37.5%, worse: threshold tokens_per_s:-25% (default))" in " ".join(
        capsys.readouterr().out.split())
    assert cli.cmd_diff(base, cur, ["tokens_per_s:-50%"]) == 0  # relaxed
    assert cli.cmd_diff(base, cur, ["no-defaults"]) == 0
    assert cli.cmd_diff(base, cur, ["tokens_per_s:-10%"]) == 1
    out = " ".join(capsys.readouterr().out.split())  # the text is wrapped to the terminal
    assert "tokens_per_s 800 → 500 (-37.5%, worse: threshold tokens_per_s:-10%)" in out
    assert cli.cmd_diff(base, cur, ["tokens_per_s:10"]) == 2
    assert cli.cmd_diff(base, tmp_path / "nope.json", []) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("gpucompat diff: error: ") for line in err)


def test_add_report_subparsers(
    tmp_path: Path, report_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    parser = argparse.ArgumentParser(prog="gpucompat")
    cli.add_report_subparsers(parser.add_subparsers(dest="command", required=True))

    args = parser.parse_args(["report", str(report_file), "--html", str(tmp_path / "x.html")])
    assert args.func(args) == 0 and (tmp_path / "x.html").exists()

    args = parser.parse_args(["merge", str(report_file), str(report_file), "-o", str(tmp_path / "m.json")])
    assert args.func(args) == 0 and list(load_report(tmp_path / "m.json").runners) == ["runner-a", "runner-a#2"]

    args = parser.parse_args(
        [
            "diff",
            str(report_file),
            str(report_file),
            "--fail-on",
            "tokens_per_s:-5%",
            "--fail-on",
            "leak_mib_per_cycle:+1",
        ]
    )
    assert args.compare_fail == ["tokens_per_s:-5%", "leak_mib_per_cycle:+1"]  # --fail-on: the older spelling
    assert args.func(args) == 0
    args = parser.parse_args(["diff", str(report_file), str(report_file)])
    assert args.func(args) == 0
    capsys.readouterr()


def test_report_data_is_not_aliased() -> None:
    source = every_outcome_cells("runner-a")
    snapshot = copy.deepcopy(source)
    report = make_report(cells=source)
    report.to_dict()["cells"][0]["params"]["dtype"] = "changed"
    assert report.cells[0].params["dtype"] == "bfloat16"
    assert source == snapshot


def test_the_reports_vocabularies_are_the_knowledge_bases_and_schema_json_agrees() -> None:
    """Severities, confidences and actions are defined once (kb/schema.py); the validator uses those, and every
    enum of schema.json that lists them lists exactly them (null allowed where a field is optional)."""
    from pytest_gpucompat.kb import schema as kb_schema
    from pytest_gpucompat.report import validate

    assert validate.SEVERITIES is kb_schema.SEVERITIES and validate.CONFIDENCES is kb_schema.CONFIDENCES
    assert validate.ACTIONS is kb_schema.ACTIONS
    schema = json.loads(SCHEMA_PATH.read_text())
    enums: dict[str, list[set[object]]] = {}

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, dict) and "enum" in value:
                    enums.setdefault(key, []).append(set(value["enum"]) - {None})
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    for key, vocabulary in (("severity", kb_schema.SEVERITIES), ("confidence", kb_schema.CONFIDENCES),
                            ("action", kb_schema.ACTIONS)):
        assert enums[key] and all(found == set(vocabulary) for found in enums[key]), key
