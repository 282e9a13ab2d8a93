"""The gate does not pass because what could fail did not run: each silent pass of the hostile review, now a
regression (exit 1) unless --allow-missing says lost coverage is expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat import cli
from pytest_gpucompat.report.diff import check_thresholds, diff_reports, parse_threshold
from pytest_gpucompat.report.diff_text import format_diff
from pytest_gpucompat.report.io import write_report_atomic
from pytest_gpucompat.report.model import Report


def cell(n: int, outcome: str = "passed", **extra: Any) -> dict[str, Any]:
    return {"nodeid": f"suites/test_smoke.py::test_x[c{n}]", "outcome": outcome, "runner": "r",
            "metrics": {"tokens_per_s": 1000.0}, **extra}


def run(cells: list[dict[str, Any]], interrupted: bool = False) -> Report:
    return Report.from_run({"schema": 1, "name": "r"}, cells, interrupted=interrupted, exitstatus=0)


BASE = run([cell(i) for i in range(29)])
GATE = [parse_threshold("tokens_per_s:-10%")]


@pytest.mark.parametrize("current, why", [
    (run([cell(i, "skipped", reason="unavailable") for i in range(29)]), "lost"),
    (run([cell(i, "not-covered") for i in range(29)]), "lost"),
    (run([cell(i, metrics={}) for i in range(29)]), "lost"),
    (run([cell(i, metrics={"tokens_per_s": None}) for i in range(29)]), "lost"),
    (run([]), "incomplete"),
    (run([cell(i) for i in range(3)], interrupted=True), "incomplete"),
    (run([cell(i) for i in range(9)]), "lost"),  # 20 passed cells missing
])
def test_what_did_not_run_does_not_pass_the_gate(current: Report, why: str) -> None:
    result = diff_reports(BASE, current, GATE)
    assert result.regressed, format_diff(result)
    assert bool(result.lost) if why == "lost" else bool(result.incomplete)
    assert format_diff(result).startswith("gpucompat diff: REGRESSED")


def test_allow_missing_accepts_lost_coverage_but_not_an_interrupted_run() -> None:
    skipped = run([cell(i, "skipped") for i in range(29)])
    allowed = diff_reports(BASE, skipped, GATE, allow_missing=True)
    assert not allowed.regressed and len(allowed.lost) == 29
    assert "Lost coverage (allowed: --allow-missing) (29)" in format_diff(allowed)
    assert diff_reports(BASE, run([cell(0)], interrupted=True), GATE, allow_missing=True).regressed


def test_a_failing_cell_renamed_is_still_a_failure() -> None:
    base = run([cell(0), cell(1, "failed")])
    renamed = run([cell(0), {**cell(2, "failed"), "reason": "boom"}])
    result = diff_reports(base, renamed, allow_missing=True)
    assert result.regressed and [c.key for c in result.regressions] == [renamed.cells[1].nodeid]


def test_an_unchanged_run_still_passes() -> None:
    result = diff_reports(BASE, BASE, GATE)
    assert not result.regressed and result.clean


def test_a_threshold_on_a_metric_no_cell_recorded_is_an_error() -> None:
    with pytest.raises(ValueError, match="no cell of the compared reports recorded leak_mib_per_cycle"):
        check_thresholds([parse_threshold("leak_mib_per_cycle:+1")], BASE, BASE)


def test_cmd_diff_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, cur = tmp_path / "base.json", tmp_path / "cur.json"
    write_report_atomic(BASE, base)
    write_report_atomic(run([cell(i, "skipped") for i in range(29)]), cur)
    assert cli.main(["diff", str(base), str(cur)]) == 1
    assert "29 lost" in capsys.readouterr().out
    assert cli.main(["diff", str(base), str(cur), "--allow-missing"]) == 0
    assert cli.main(["diff", str(base), str(base), "--compare-fail", "ttft_s:+1"]) == 2
    assert "gate nothing" in capsys.readouterr().err


def test_a_pytest_run_against_its_baseline_fails_on_lost_coverage(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_cells='''
import pytest

@pytest.mark.gpucompat(engine="hf", params={"a": ["a1", "a2", "a3"]})
def test_cell(gpucompat_cell, gpucompat_record):
    gpucompat_record("tokens_per_s", 100.0)
''')
    first = pytester.runpytest("--gpucompat", "--gpucompat-report", "base.json", "-p", "no:cacheprovider")
    first.assert_outcomes(passed=3)
    args = ("--gpucompat", "--gpucompat-baseline", "base.json", "-p", "no:cacheprovider", "-k", "a1")
    lost = pytester.runpytest(*args)
    assert lost.ret == 1
    lost.stdout.fnmatch_lines(["*REGRESSED*2 lost*"])
    assert pytester.runpytest(*args, "--gpucompat-allow-missing").ret == 0


@pytest.mark.parametrize("layout", ["missing", "empty", "thresholds-only"])
def test_a_matrices_dir_without_rules_is_an_error_not_an_empty_knowledge_base(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], layout: str) -> None:
    target = tmp_path / "matrices"
    if layout != "missing":
        target.mkdir()
    if layout == "thresholds-only":
        (target / "thresholds.yaml").write_text("{}\n")
    monkeypatch.setenv("GPUCOMPAT_MATRICES_DIR", str(target))
    assert cli.main(["check", "--fail-on", "broken"]) == 2
    err = capsys.readouterr().err.strip()
    assert "GPUCOMPAT_MATRICES_DIR" in err and str(target) in err and "\n" not in err
