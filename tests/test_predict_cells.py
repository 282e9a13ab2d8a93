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


# ------------------------------------------------------- an engine that failed before saying which backend it ran

_E5M2_NO_FLASHINFER_ON_H200 = {"gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0"}],
                               "packages": {"vllm": "0.26.0"},
                               "installs": {"vllm": {"version": "0.26.0", "complete": False,
                                                     "missing": ["flashinfer-python==0.6.14 (not installed)"]}}}
# the last lines of the engine's log on the H200 (vLLM 0.26.0 without FlashInfer, VLLM_USE_FLASHINFER_SAMPLER=0):
# torch.compile traced Attention.forward into the assert (vllm/model_executor/layers/attention/attention.py:520)
_ASSERT_LOG = """(EngineCore pid=4387) torch._dynamo.exc.Unsupported: Data-dependent assertion failed
(EngineCore pid=4387)   File ".../vllm/model_executor/layers/attention/attention.py", line 520, in forward
(EngineCore pid=4387)     assert self.kv_cache_dtype in {"fp8", "fp8_e4m3", "nvfp4"}
"""


def _h200_no_flashinfer(tmp_path: Path) -> Any:
    from pytest_gpucompat.machine.fingerprint import load

    path = tmp_path / "fp.json"
    path.write_text(json.dumps(_E5M2_NO_FLASHINFER_ON_H200))
    return next(iter(load(path).values()))


@pytest.mark.parametrize(("log", "matches"), [
    (_ASSERT_LOG, True),  # the predicted assert, quoted as the source has it (double quotes, other spacing)
    ("ModuleNotFoundError: No module named 'flashinfer'\nEngine core initialization failed", None),  # another way
    ("", None),
])
def test_a_failed_start_is_compared_through_its_log(tmp_path, log, matches):
    """vLLM 0.26.0 on sm 9.0 without FlashInfer, fp8_e5m2 KV: TRITON_ATTN is chosen (FLASH_ATTN refuses e5m2,
    flash_attn.py supports_kv_cache_dtype) and Attention.forward asserts the KV dtype is fp8, fp8_e4m3 or nvfp4
    (attention.py:520 in 0.26.0). The engine never says which backend it ran; its log holds the assert or not."""
    fp = _h200_no_flashinfer(tmp_path)
    entry = cell_prediction("vllm", {"kv_cache_dtype": "fp8_e5m2", "head_size": 64}, fp, None, "0.26.0", log_tail=log)
    assert entry is not None and entry["outcome"] == "asserts" and entry["attention_backend"] == "TRITON_ATTN"
    assert entry["head_size"] == 64
    assert entry["matches"] is matches, entry
    if matches:
        assert "assert self.kv_cache_dtype in {'fp8', 'fp8_e4m3', 'nvfp4'}" in entry["confirmed_by"]
        assert differs_finding(entry, "vllm") is None
    else:
        assert "confirmed_by" not in entry


def test_a_backend_that_starts_is_never_confirmed_by_a_log(tmp_path):
    fp = _h200_no_flashinfer(tmp_path)
    entry = cell_prediction("vllm", {"kv_cache_dtype": "auto"}, fp, None, "0.26.0", log_tail=_ASSERT_LOG)
    assert entry is not None and entry["outcome"] == "chosen" and entry["matches"] is None


def test_committed_cells_that_failed_as_predicted_are_confirmed_by_their_logs() -> None:
    """The H200 runs of 2026-12-05 (vLLM 0.26.0, complete install with flashinfer-python moved aside,
    VLLM_USE_FLASHINFER_SAMPLER=0, fp8_e5m2 KV, tiny Qwen2 of head size 64 and 128): the engine never said which
    backend it ran; the prediction (TRITON_ATTN, then attention.py's assert at the first forward pass) is confirmed
    by each cell's log, and recorded so in the report the run wrote."""
    path = REPORTS / "h200-580.159.04-vllm-0.26.0-e5m2-no-flashinfer-sampler-off-fixed.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    heads = set()
    for cell in data["cells"]:
        fp = from_report(data["runners"][cell["runner"]], str(path), cell["runner"])
        recorded = cell["attention_prediction"]
        assert recorded["matches"] is True and "assert self.kv_cache_dtype" in recorded["confirmed_by"], recorded
        entry = cell_prediction("vllm", {**cell["params"], "head_size": recorded["head_size"]}, fp, None, "0.26.0",
                                log_tail=cell["log_tail"])
        assert entry is not None and entry["attention_backend"] == "TRITON_ATTN" and entry["matches"] is True
        heads.add(recorded["head_size"])
    assert heads == {64, 128}


def test_a_failed_start_is_compared_through_the_backend_its_traceback_runs_through() -> None:
    """vLLM 0.26.0 with FlashInfer on the H200, fp8_e5m2 KV (2026-12-05): the engine failed in FlashInfer's warm-up
    before naming a backend; its traceback runs through vllm/v1/attention/backends/flashinfer.py in forward, the
    predicted FLASHINFER (FLASH_ATTN refuses e5m2: flash_attn.py supports_kv_cache_dtype; FlashInfer is next in
    the 9.0 priority). A traceback through another backend's forward would be a prediction that differs."""
    path = REPORTS / "h200-580.159.04-vllm-0.26.0-e5m2-flashinfer-predicted.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for cell in data["cells"]:
        fp = from_report(data["runners"][cell["runner"]], str(path), cell["runner"])
        entry = cell_prediction("vllm", cell["params"], fp, None, "0.26.0", log_tail=cell["log_tail"])
        assert entry is not None and entry["attention_backend"] == "FLASHINFER" and entry["matches"] is True, entry
        assert "vllm/v1/attention/backends/flashinfer.py (FLASHINFER)" in entry["confirmed_by"]
        assert "/root" not in entry["confirmed_by"]
        other = cell["log_tail"].replace("backends/flashinfer.py", "backends/triton_attn.py")
        entry = cell_prediction("vllm", cell["params"], fp, None, "0.26.0", log_tail=other)
        assert entry is not None and entry["matches"] is False and "TRITON_ATTN" in entry["traced"]
        assert differs_finding(entry, "vllm") is not None


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
