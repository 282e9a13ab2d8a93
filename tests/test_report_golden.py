"""`gpucompat golden REPORT --golden PATH`: a report's kept outputs judged against golden files after the run, the
same verdict a run with --gpucompat-golden gives (checked on the committed GPU reports), refusals with the reason,
bad input in one line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.catalog.base import Generation
from pytest_gpucompat.checks import outputs
from pytest_gpucompat.checks.golden import threshold_class
from pytest_gpucompat.checks.golden_files import GoldenFile, Recorded, load_golden_source, record
from pytest_gpucompat.cli import main
from pytest_gpucompat.report.golden import check_report
from pytest_gpucompat.report.io import load_report
from pytest_gpucompat.report.model import Report
from pytest_gpucompat.workload.checkpoint import ModelIdentity

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"
MODEL = ModelIdentity(name="qwen2-abc", weights="a" * 64, config="c" * 64, tokenizer="t" * 64)
PROMPTS = "p" * 64
NODE = "suites/test_precision.py::test_logprobs_close_to_fp32_reference[tiny-qwen2-sglang-dtype=bfloat16]"


def gen(tokens: list[int], shift: float = 0.0) -> Generation:
    steps = tuple({t: -0.1 - shift, t + 1: -2.5 + shift, t + 2: -3.0} for t in tokens)
    return Generation(token_ids=tuple(tokens), logprobs=steps)


REFERENCE = (gen([5, 6, 7, 8]), gen([9, 10, 11, 12]))


def golden_dir(tmp_path: Path, **changes: Any) -> Path:
    base = GoldenFile(model=MODEL, prompts_name="builtin", prompts_digest=PROMPTS, max_tokens=4, top_n=3,
                      reference=Recorded(engine="hf", generations=REFERENCE, dtype="float32", device="cuda",
                                         version="5.17.0", runner="gpu-ref", kind="float32-gpu"),
                      prompts=({"id": "a", "ids": [1, 2], "text": "x"}, {"id": "b", "ids": [3], "text": None}))
    directory = tmp_path / "golden"
    record(directory, replace(base, **changes))
    return directory


def report_file(tmp_path: Path, gens: tuple[Generation, ...] | None = REFERENCE, params: dict[str, Any] | None = None,
                model: str = MODEL.digest, max_tokens: int = 4, top_n: int = 3) -> Path:
    cell: dict[str, Any] = {"nodeid": NODE, "engine": "sglang", "params": params or {"dtype": "bfloat16"},
                            "outcome": "passed", "metrics": {"golden_max_abs_logprob_delta": 9.0, "tokens_per_s": 5.0}}
    if gens is not None:
        cell["extra"] = {outputs.KEY: outputs.keep(model, PROMPTS, max_tokens, top_n, gens),
                         "golden": {"status": "passed", "file": "old.json"}}
    path = tmp_path / "r.json"
    path.write_text(Report.from_run({"name": "h200-sglang"}, [cell]).to_json())
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["golden", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", ["h200-580.159.04-vllm-0.26.0-golden.json", "h200-580.159.04-vllm-0.26.0-300m.json",
                                  "cpu-reference-precision.json"])
def test_committed_runs_judged_again_give_the_runs_own_verdicts(name: str) -> None:
    """Real hf and vLLM cells of the H200 and the CPU machine: judged from their kept outputs against the golden
    files they were checked against during the run, the same status and figures (within the files' rounding). The
    runs predate the tiny models' head size 128: their tiny-model files are in golden-previous/, the 300m one is
    still current in golden/."""
    report = load_report(REPORTS / name)
    files = load_golden_source(REPORTS / "golden") + load_golden_source(REPORTS / "golden-previous")
    checks = check_report(report, files, "golden")
    assert len(checks) >= 6
    for check in checks:
        assert check.status == check.cell.extra["golden"]["status"] == "passed"
        assert check.metrics.keys() <= check.cell.metrics.keys()
        for key, value in check.metrics.items():
            assert value == pytest.approx(check.cell.metrics[key], abs=1.1e-5), key  # 5 decimals on each side


def test_a_run_checked_against_another_runners_recording(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    """The committed H200 vLLM run, recorded against the CPU golden files, judged against the H200's own."""
    code, out, err = run([str(REPORTS / "h200-580.159.04-vllm-0.26.0-golden.json"), "--golden",
                          str(REPORTS / "golden-h200"), "-o", str(tmp_path / "again.json")], capsys)
    assert code == 0 and err == ""
    assert out.count("passed  ") == 7 and "float32-gpu reference" in out and "7 cells: 7 passed" in out
    again = load_report(tmp_path / "again.json")
    entries = [c.extra["golden"] for c in again.cells if "golden" in c.extra]
    assert len(entries) == 7 and all(e["checked"] == "after the run" and "golden-h200" in e["golden"]
                                     for e in entries)


def test_drift_beyond_the_thresholds_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    drifted = (gen([5, 6, 7, 8], 0.9), gen([9, 10, 11, 12], 0.9))
    code, out, _ = run([str(report_file(tmp_path, drifted)), "--golden", str(golden_dir(tmp_path))], capsys)
    assert code == 1 and "failed" in out and "1 cells: 1 failed" in out


def test_within_the_thresholds_passes_and_the_report_is_updated(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path) -> None:
    close = (gen([5, 6, 7, 8], 0.01), gen([9, 10, 11, 12]))
    path = report_file(tmp_path, close)
    code, out, _ = run([str(path), "--golden", str(golden_dir(tmp_path)), "--json", "-o", str(tmp_path / "o.json"),
                        "--html", str(tmp_path / "o.html")], capsys)
    assert code == 0
    data = json.loads(out)
    assert [c["status"] for c in data] == ["passed"] and data[0]["metrics"]["golden_max_abs_logprob_delta"] < 0.02
    cell = load_report(tmp_path / "o.json").cells[0]
    assert cell.metrics["golden_max_abs_logprob_delta"] == pytest.approx(0.01, abs=1e-5)  # the run's 9.0 replaced
    assert cell.metrics["tokens_per_s"] == 5.0 and cell.extra["golden"]["status"] == "passed"
    html = (tmp_path / "o.html").read_text()
    assert html.startswith("<!doctype html>") and "test_logprobs_close_to_fp32_reference" in html


@pytest.mark.parametrize(("changes", "kept", "why"), [
    ({"prompts_digest": "q" * 64}, {}, "another prompt set"),
    ({"max_tokens": 8}, {}, "recorded with 8 tokens"),
])
def test_a_golden_file_that_does_not_fit_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    changes: dict[str, Any], kept: dict[str, Any], why: str) -> None:
    code, out, _ = run([str(report_file(tmp_path, **kept)), "--golden", str(golden_dir(tmp_path, **changes))], capsys)
    assert code == 1 and "refused" in out and why in out


@pytest.mark.parametrize(("gens", "params", "why"), [
    ((gen([5, 6, 7, 8]),), None, "the cell kept 1 generations, qwen2-abc__builtin.json holds 2 prompts"),
    (REFERENCE, {"dtype": "auto"}, "no thresholds for dtype 'auto'"),
    (REFERENCE, {"dtype": "int3"}, "no thresholds for dtype 'int3'"),
])
def test_outputs_that_cannot_be_judged_are_refused_not_a_traceback(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, gens: tuple[Generation, ...],
        params: dict[str, Any] | None, why: str) -> None:
    """A hand-edited report: the prompts' digest of the golden file with another number of generations, or a dtype
    no thresholds exist for (and no dtype the engine reported)."""
    code, out, err = run([str(report_file(tmp_path, gens, params)), "--golden", str(golden_dir(tmp_path))], capsys)
    assert code == 1 and err == "" and "refused" in out and why in out


def test_no_golden_for_the_model_is_missing_not_failed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = report_file(tmp_path, model="d" * 64)
    code, out, _ = run([str(path), "--golden", str(golden_dir(tmp_path))], capsys)
    assert code == 0 and "missing" in out and "no golden output for model sha256:dddddddddddd" in out


def test_cells_without_kept_outputs_are_not_listed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run([str(report_file(tmp_path, None)), "--golden", str(golden_dir(tmp_path))], capsys)
    assert code == 0 and "no cell kept its outputs" in out


@pytest.mark.parametrize("case", ["no-golden-option", "missing-report", "missing-golden", "malformed-outputs",
                                  "malformed-golden"])
def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str) -> None:
    path, where = report_file(tmp_path), golden_dir(tmp_path)
    argv = [str(path), "--golden", str(where)]
    if case == "no-golden-option":
        argv = [str(path)]
    elif case == "missing-report":
        argv[0] = str(tmp_path / "nope.json")
    elif case == "missing-golden":
        argv[2] = str(tmp_path / "nowhere")
    elif case == "malformed-outputs":
        data = json.loads(path.read_text())
        data["cells"][0][outputs.KEY]["generations"] = "nope"
        path.write_text(json.dumps(data))
    else:
        next(where.iterdir()).write_text('{"format": 1, "model": 3}')
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.startswith("gpucompat golden: error: ") and err.count("\n") == 1
    if case == "malformed-outputs":
        assert "outputs.generations" in err and NODE in err


@pytest.mark.parametrize(("params", "ran", "expected"), [
    ({"dtype": "bfloat16"}, "bfloat16", "bfloat16"),
    ({"dtype": "bfloat16", "kv_cache_dtype": "fp8_e4m3"}, "bfloat16", "fp8"),
    ({"dtype": "bfloat16", "kv_cache_dtype": "auto"}, None, "bfloat16"),
    ({"dtype": "fp8"}, "float8_e4m3fn", "fp8"),
    ({}, "float16", "float16"),
    ({"dtype": "auto"}, None, "auto"),
])
def test_threshold_class(params: dict[str, Any], ran: str | None, expected: str) -> None:
    assert threshold_class(params, ran) == expected
