"""Predictions where users see them: every vLLM cell of the committed H200 reports against what its engine
reported, `gpucompat check` / `check --json` / `check --args ... --to`, and a cell's record in every rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.cli import main
from pytest_gpucompat.kb.predict_cells import PREDICTION_DIFFERS, cell_prediction, differs_finding, reported_backend
from pytest_gpucompat.machine.fingerprint import from_report
from pytest_gpucompat.report.junit import render_junit
from pytest_gpucompat.report.markdown import render_markdown
from pytest_gpucompat.report.model import Report

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"


def _vllm_cells() -> list[tuple[str, dict[str, Any], Any, str]]:
    """(file, cell, runner fingerprint, reported backend) of each vLLM cell of the committed reports whose engine
    said which backend it ran (its engine_info, else its log's "Using X attention backend")."""
    out = []
    for path in sorted(REPORTS.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            continue
        for cell in data["cells"]:
            if cell.get("engine") != "vllm":
                continue
            reported = reported_backend(cell.get("engine_info"), cell.get("log_tail"))
            if reported is None:
                continue
            fp = from_report(data["runners"][cell["runner"]], str(path), cell["runner"])
            out.append((path.name, cell, fp, reported))
    return out


CELLS = _vllm_cells()


def test_every_reported_vllm_cell_is_as_predicted() -> None:
    """Every vLLM cell of the committed H200 reports (0.25.0 and 0.26.0, FlashInfer installed or not, auto, bf16,
    fp16, fp8_e4m3 and fp8_e5m2 KV caches): the backend the engine reported is the one predicted."""
    assert len(CELLS) >= 100
    differ = []
    for name, cell, fp, reported in CELLS:
        version = (cell.get("engine_info") or {}).get("version")
        entry = cell_prediction("vllm", cell.get("params") or {}, fp, reported, version)
        assert entry is not None and "unavailable" not in entry, (name, entry)
        if entry["matches"] is not True:
            differ.append((name, cell["nodeid"], reported, entry))
    assert differ == []


def test_the_must_show_cells() -> None:
    """FLASH_ATTN for auto/bf16/fp16/fp8_e4m3 on 0.26.0 with its complete install; the fp8_e5m2 cell of 0.25.0
    without FlashInfer went to TRITON_ATTN and asserted at its first forward pass."""
    complete = [(c, fp, r) for n, c, fp, r in CELLS if n == "h200-580.159.04-vllm-0.26.0-complete.json"]
    kvs = {(c["params"].get("kv_cache_dtype") or "auto") for c, _, _ in complete}
    assert {"auto", "fp8_e4m3"} <= kvs
    for cell, fp, reported in complete:
        entry = cell_prediction("vllm", cell["params"], fp, reported)
        assert entry is not None and entry["attention_backend"] == "FLASH_ATTN" == reported
    [(cell, fp, reported)] = [(c, fp, r) for n, c, fp, r in CELLS if n == "h200-580.159.04-vllm-0.25.0-e5m2.json"]
    entry = cell_prediction("vllm", cell["params"], fp, reported)
    assert entry is not None and entry["matches"] is True
    # that runner's fingerprint predates install tracking: FlashInfer's absence is not a fact of it, so both
    # answers are given; the one without FlashInfer is what ran
    alternatives = {a["when"]: a for a in entry["alternatives"]}
    without = alternatives["without FlashInfer"]
    assert (without["outcome"], without["attention_backend"]) == ("asserts", "TRITON_ATTN")
    assert "assert self.kv_cache_dtype in" in without["kv_cache"] and "AssertionError" in cell["reason"]
    assert alternatives["FlashInfer installed"]["attention_backend"] == "FLASHINFER"


def test_a_difference_is_a_finding_of_its_own() -> None:
    name, cell, fp, _ = CELLS[0]
    entry = cell_prediction("vllm", cell.get("params") or {}, fp, "XFORMERS")
    assert entry is not None and entry["matches"] is False
    finding = differs_finding(entry, "vllm")
    assert finding is not None and finding.id == PREDICTION_DIFFERS
    assert "prediction differs" in finding.summary and "stale" in finding.summary
    assert differs_finding({**entry, "matches": True}, "vllm") is None
    assert differs_finding({**entry, "matches": None}, "vllm") is None


def test_other_engines_have_no_prediction() -> None:
    _, _, fp, _ = CELLS[0]
    assert cell_prediction("hf", {}, fp, "sdpa") is None


def _report_with(entry: dict[str, Any], finding: bool) -> Report:
    cell = {"nodeid": "suites/test_smoke.py::t[vllm]", "test": "suites/test_smoke.py::t", "engine": "vllm",
            "outcome": "passed", "runner": "h200", "params": {}, "attention_prediction": entry}
    if finding:
        f = differs_finding(entry, "vllm")
        assert f is not None
        cell["findings"] = [{"id": f.id, "severity": f.severity, "confidence": f.confidence, "failure": f.failure,
                             "summary": f.summary, "action": f.action}]
    return Report.from_dict({"schema_version": 1, "tool_version": "x", "created": "2026-12-04T00:00:00Z",
                             "runners": {"h200": {"gpus": []}}, "cells": [cell]})


def test_renderings_show_the_prediction_and_a_difference() -> None:
    entry = {"release": "0.26.0", "compute_capability": "9.0", "attention_backend": "FLASH_ATTN",
             "reported": "TRITON_ATTN", "matches": False}
    report = _report_with(entry, finding=True)
    md = render_markdown(report)
    assert "FLASH\\_ATTN predicted (prediction differs)" in md
    assert PREDICTION_DIFFERS in md
    xml = render_junit(report)
    assert "attention_prediction" in xml and PREDICTION_DIFFERS in xml
    from pytest_gpucompat.report.html import render_html

    html = render_html(report)
    assert "FLASH_ATTN predicted (prediction differs)" in html and PREDICTION_DIFFERS in html


def _fp(tmp_path: Path, **params: Any) -> Path:
    fp = {"name": "h200", "gpus": [{"index": 0, "name": "NVIDIA H200", "compute_capability": "9.0"}],
          "packages": {"vllm": "0.25.0"}, "params": params}
    path = tmp_path / "fp.json"
    path.write_text(json.dumps(fp), encoding="utf-8")
    return path


def test_check_json_carries_predictions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", "--env", str(_fp(tmp_path, kv_cache_dtype="fp8_e4m3")), "--json"])
    [entry] = json.loads(capsys.readouterr().out)["predictions"]
    assert entry["engine"] == "vllm" and entry["release"] == "0.25.0"
    assert entry["attention_backend"] == "FLASH_ATTN" and entry["kv_cache_dtype"] == "fp8_e4m3"


def test_check_lists_predictions(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    main(["check", "--env", str(_fp(tmp_path, kv_cache_dtype="fp8_e5m2"))])
    out = capsys.readouterr().out
    assert "PREDICTED attention backend" in out
    assert "FlashInfer installed: FLASHINFER" in out and "without FlashInfer: TRITON_ATTN, then fails" in out


def test_check_args_to_predicts_the_target_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check --args ... --to vllm==X`: what the target release picks on the target machine with that command."""
    main(["check", "--env", str(_fp(tmp_path)), "--args", "vllm serve m --kv-cache-dtype fp8_e5m2",
          "--to", "vllm==0.20.0", "--json"])
    [entry] = json.loads(capsys.readouterr().out)["predictions"]
    assert entry["release"] == "0.20.0" and entry["kv_cache_dtype"] == "fp8_e5m2"
    assert (entry["outcome"], entry["attention_backend"]) == ("asserts", "FLASH_ATTN")
    main(["check", "--env", str(_fp(tmp_path)), "--args", "vllm serve m --attention-backend FLASH_ATTN",
          "--to", "vllm==0.26.0"])
    assert "vllm 0.26.0 on sm 9.0" in capsys.readouterr().out


def test_check_with_an_unknown_release_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fp = json.loads(_fp(tmp_path).read_text(encoding="utf-8"))
    fp["packages"]["vllm"] = "0.99.0"
    (tmp_path / "fp.json").write_text(json.dumps(fp), encoding="utf-8")
    main(["check", "--env", str(tmp_path / "fp.json")])
    assert "vllm 0.99.0 on sm 9.0: no selection data for vllm 0.99.0" in capsys.readouterr().out


@pytest.mark.parametrize(("params", "argv", "message"), [
    ({"attention_backend": "NOT_A_BACKEND"}, None,
     "field 'params.attention_backend': no selection data for forced backend NOT_A_BACKEND in vllm 0.25.0"),
    ({"attention_backend": "../etc"}, None, "'../etc' is not a backend name"),
    ({"dtype": "float64"}, None, "field 'params.dtype': model dtype 'float64' is not one of"),
    ({}, ["--args", "vllm serve m --attention-backend NOT_A_BACKEND", "--to", "vllm==0.26.0"],
     "--args: field 'params.attention_backend': no selection data for forced backend NOT_A_BACKEND in vllm 0.26.0"),
    ({}, ["--args", "vllm serve m", "--to", "vllm==0.99.0"], "vllm 0.99.0 is not in the release history"),
])
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              params: dict[str, Any], argv: list[str] | None, message: str) -> None:
    """An unknown backend name, dtype or release asked about (in the fingerprint's params, in --args, in --to) is
    bad input: one line naming it, exit 2, no traceback, never a prediction line to overlook."""
    for extra in ([], ["--json"]):
        code = main(["check", "--env", str(_fp(tmp_path, **params)), *(argv or []), *extra])
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("cap", ["abc", "9.0.1", "nine"])
def test_a_compute_capability_that_is_not_a_number_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cap: str) -> None:
    fp = json.loads(_fp(tmp_path).read_text(encoding="utf-8"))
    fp["gpus"][0]["compute_capability"] = cap
    (tmp_path / "fp.json").write_text(json.dumps(fp), encoding="utf-8")
    for argv in ([], ["--args", "vllm serve m", "--to", "vllm==0.26.0"]):
        code = main(["check", "--env", str(tmp_path / "fp.json"), *argv])
        err = capsys.readouterr().err.strip()
        assert code == 2 and "compute_capability" in err and len(err.splitlines()) == 1
