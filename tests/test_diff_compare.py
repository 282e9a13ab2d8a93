"""`gpucompat diff` always shows what moved (the compare table, `changed`, `--fail-on changed`), cells that cannot
run on a runner are no new breakage, and `check`, `explain` and `diff` fit the terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.cli import main
from pytest_gpucompat.common.textfit import fit, shorten_middle
from pytest_gpucompat.report.diff import diff_reports
from pytest_gpucompat.report.diff_text import format_diff
from pytest_gpucompat.report.io import load_report, write_report_atomic
from pytest_gpucompat.report.model import Report
from pytest_gpucompat.report.thresholds import parse_fail_on

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"
NODE = "suites/test_smoke.py::test_generates_requested_tokens[tiny-qwen2-vllm-dtype=bfloat16]"
TP2 = ("suites/test_smoke.py::test_generates_requested_tokens[tiny-qwen2-vllm-dtype=bfloat16-tensor_parallel_size=2-"
       "enforce_eager=true-gpu_memory_utilization=0.08-max_model_len=512]")
NEEDS_GPUS = {"id": "vllm-parallel-needs-visible-gpus", "severity": "broken", "confidence": "upstream",
              "summary": "vLLM needs tensor_parallel_size visible GPUs.", "action": "skip"}


def report(*cells: dict[str, Any], runner: str = "h200") -> Report:
    return Report.from_run({"schema": 1, "name": runner}, [{"runner": runner, **c} for c in cells], exitstatus=0)


def passed(metrics: dict[str, float], nodeid: str = NODE) -> dict[str, Any]:
    return {"nodeid": nodeid, "outcome": "passed", "metrics": metrics}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


# --- the compare table -------------------------------------------------------------------------------------------


def test_a_drop_beyond_the_default_band_shows_as_worse_without_thresholds() -> None:
    # measured: 1000 -> 761 tokens/s, no threshold, no spread recorded; this printed "clean: no differences", then
    # "changed" for a slowdown and a speed-up alike. Within the default tolerance (25 %): worse, not a regression.
    result = diff_reports(report(passed({"tokens_per_s": 1000.0})), report(passed({"tokens_per_s": 761.0})))
    text = format_diff(result, width=100)
    assert not text.startswith("gpucompat diff: clean") and not result.clean and not result.regressed
    assert text.splitlines()[0] == "gpucompat diff: no regressions; figures beyond the runs' noise: 1 worse, 0 better"
    assert text.splitlines()[1].startswith("cells: 1 compared, 1 changed, 0 regressed, 0 missing, 0 new")
    row = next(line for line in text.splitlines() if line.strip().startswith("tokens_per_s"))
    assert row.split() == ["tokens_per_s", "1000", "761", "-239", "-23.9%", "±5.0%*", "worse"]
    assert "no spread recorded: default band ±5%" in text


def test_fail_on_changed_fails_on_a_changed_figure_only() -> None:
    base, cur = report(passed({"tokens_per_s": 1000.0})), report(passed({"tokens_per_s": 761.0}))
    result = diff_reports(base, cur, fail_on_changed=True)
    assert result.regressed
    text = format_diff(result, width=100)
    assert text.startswith("gpucompat diff: REGRESSED: 0 regression(s), 0 new broken finding(s), 1 changed figure(s)")
    assert "1 regressed" in text.splitlines()[2]  # the verdict took two lines of 100
    same = report(passed({"tokens_per_s": 1030.0}))  # +3 %: inside the default ±5 %
    assert not diff_reports(base, same, fail_on_changed=True).regressed


def test_the_runs_own_spread_is_the_noise_band() -> None:
    base = report(passed({"tokens_per_s": 1000.0, "tokens_per_s_spread": 0.3}))
    result = diff_reports(base, report(passed({"tokens_per_s": 761.0})), fail_on_changed=True)
    (row,) = result.rows
    assert (row.verdict, row.noise, row.change) == ("within noise", "±30.0%", "-23.9%")
    assert not result.regressed and not result.changed


def test_harness_timings_are_context_not_changes() -> None:
    base = report(passed({"start_s": 10.0, "rounds": 5.0, "tokens_per_s": 100.0}))
    cur = report(passed({"start_s": 20.0, "rounds": 3.0, "tokens_per_s": 100.0}))
    result = diff_reports(base, cur, fail_on_changed=True)
    assert {r.metric: r.verdict for r in result.rows} == {"start_s": "context", "rounds": "context",
                                                          "tokens_per_s": "same"}
    assert not result.regressed


def test_a_threshold_still_decides_its_metric() -> None:
    thresholds, changed = parse_fail_on(["tokens_per_s:-10%", "changed"])
    assert changed and [str(t) for t in thresholds] == ["tokens_per_s:-10%"]
    result = diff_reports(report(passed({"tokens_per_s": 1000.0})), report(passed({"tokens_per_s": 761.0})),
                          thresholds)
    assert [r.verdict for r in result.rows] == ["regressed"] and result.regressed


def test_cli_fail_on_changed_exit_status_and_one_line_errors(capsys, tmp_path) -> None:
    base, cur = tmp_path / "base.json", tmp_path / "cur.json"
    write_report_atomic(report(passed({"tokens_per_s": 1000.0})), base)
    write_report_atomic(report(passed({"tokens_per_s": 761.0})), cur)
    code, out, _ = run(capsys, "diff", str(base), str(cur))
    assert code == 0 and "changed" in out
    code, out, _ = run(capsys, "diff", str(base), str(cur), "--fail-on", "changed")
    assert code == 1 and out.startswith("gpucompat diff: REGRESSED")
    code, out, err = run(capsys, "diff", str(base), str(cur), "--fail-on", "chnged")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "or changed" in err


# --- cells this runner cannot run --------------------------------------------------------------------------------


def test_a_cell_that_cannot_run_here_brings_no_new_broken_finding() -> None:
    skipped = {"nodeid": TP2, "outcome": "skipped", "findings": [NEEDS_GPUS], "rules": [NEEDS_GPUS["id"]],
               "reason": "cannot run here: [vllm-parallel-needs-visible-gpus] needs 2 GPUs (tensor_parallel_size=2), "
                         "1 visible"}
    base = report(passed({"tokens_per_s": 1000.0}))
    result = diff_reports(base, report(passed({"tokens_per_s": 1000.0}), skipped))
    assert not result.new_broken and not result.regressed
    failed = {**skipped, "outcome": "failed", "reason": "RuntimeError: boom"}  # the same rule on a cell that ran
    assert [n.finding_id for n in diff_reports(base, report(failed)).new_broken] == [NEEDS_GPUS["id"]]


def test_vllm_0_26_to_0_25_on_one_gpu_is_not_a_regression(capsys) -> None:
    old = load_report(REPORTS / "h200-580.159.04-vllm-0.26.0.json")
    new = load_report(REPORTS / "h200-580.159.04-vllm-0.25.0-serial.json")
    result = diff_reports(old, new)
    assert not result.new_broken and not result.regressed


# --- text that fits the terminal ---------------------------------------------------------------------------------


def test_shorten_middle_and_fit() -> None:
    assert shorten_middle("abcdefghij", 5) == "ab…ij" and shorten_middle("abc", 5) == "abc"
    text = "  - " + TP2 + ": failed: " + "word " * 40
    lines = fit(text, 60).splitlines()
    assert max(map(len, lines)) <= 60 and "…" in lines[0] and lines[1].startswith("    failed: word")


V100 = """gpus: [{name: "Tesla V100-SXM2-32GB", compute_capability: "7.0", memory_mib: 32768}]
driver: 535.104.05
packages: {vllm: 0.6.3}
"""


@pytest.mark.parametrize("columns", [100, 72])
def test_check_explain_and_diff_fit_the_terminal(capsys, monkeypatch, tmp_path, columns) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    (tmp_path / "v100.yaml").write_text(V100)
    monkeypatch.chdir(REPORTS)  # the proposed rule of `explain` cites the report's path as given: keep it short
    a, b = "h200-580.159.04-vllm-0.26.0-no-flashinfer.json", "h200-580.159.04-vllm-0.26.0-flashinfer.json"
    for argv in (("check", "--env", str(tmp_path / "v100.yaml")), ("explain", a), ("explain", b), ("diff", a, b),
                 ("diff", "h200-580.159.04-vllm-0.26.0.json", "h200-580.159.04-vllm-0.25.0-serial.json")):
        code, out, err = run(capsys, *argv)
        assert code in (0, 1) and err == "", argv
        assert out.strip() and widest(out) <= columns, argv
    if columns >= 100:  # cells are named by the parameters that tell them apart, wrapped, never cut
        assert "…" not in out


def test_json_output_is_not_fitted(capsys, tmp_path) -> None:
    env = tmp_path / "v100.yaml"
    env.write_text(V100)
    code, out, _ = run(capsys, "check", "--env", str(env), "--json")
    assert code == 0 and widest(out) > 100 and json.loads(out)["findings"]
    code, out, _ = run(capsys, "explain", str(REPORTS / "h200-580.159.04-vllm-0.26.0-no-flashinfer.json"), "--json")
    assert json.loads(out)["failed"] == 15
