"""The CI gate cannot pass by accident: unknown metrics, noise, a first run without a baseline, the metric registry."""

from __future__ import annotations

import math
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.common.metrics import METRICS, markdown_table, round_metrics, spread, spread_name
from pytest_gpucompat.report import cli
from pytest_gpucompat.report.diff import (
    check_thresholds,
    diff_reports,
    missing_baseline_note,
    parse_threshold,
)
from pytest_gpucompat.report.diff_text import format_diff
from pytest_gpucompat.report.io import write_report_atomic
from pytest_gpucompat.report.model import Report

ROOT = Path(__file__).resolve().parent.parent
NODE = "suites/test_smoke.py::test_generates_requested_tokens[tiny-qwen2-hf-dtype=float32]"


def report(metrics: dict[str, Any], runner: str = "h200") -> Report:
    """A one-cell report with the given figures."""
    cell = {"nodeid": NODE, "outcome": "passed", "runner": runner, "metrics": metrics}
    return Report.from_run({"schema": 1, "name": runner}, [cell], exitstatus=0)


# --- unknown metrics ---------------------------------------------------------------------------------------------


def test_misspelt_metric_is_an_error_naming_the_known_ones() -> None:
    base = report({"tokens_per_s": 800.0})
    with pytest.raises(ValueError) as exc:
        check_thresholds([parse_threshold("tokenz_per_s:-10%")], base, base)
    message = str(exc.value)
    assert "\n" not in message
    assert "unknown metric 'tokenz_per_s'" in message and "did you mean tokens_per_s?" in message
    assert "known metrics: " in message and "leak_mib_per_cycle" in message


def test_metrics_of_either_report_are_known() -> None:
    """User suites record their own figures through gpucompat_record: those are not typos."""
    only_old, only_new = report({"queue_depth": 3.0}), report({"kv_blocks": 10.0})
    check_thresholds([parse_threshold("queue_depth:+1"), parse_threshold("kv_blocks:-5%")], only_old, only_new)
    check_thresholds([parse_threshold("tokens_per_s:-10%")])  # the registry alone


@pytest.mark.parametrize(("expr", "fixed"), [("tokens_per_s:+10%", "tokens_per_s:-10%"), ("ttft_s:-5", "ttft_s:+5")])
def test_a_threshold_that_calls_better_worse_is_an_error(expr: str, fixed: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"write {fixed}")):
        check_thresholds([parse_threshold(expr)])


def test_cmd_diff_unknown_metric_exits_2_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = write_report_atomic(report({"tokens_per_s": 800.0}), tmp_path / "base.json")
    cur = write_report_atomic(report({"tokens_per_s": 100.0}), tmp_path / "cur.json")
    assert cli.cmd_diff(base, cur, ["tokenz_per_s:-10%"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("gpucompat diff: error: unknown metric 'tokenz_per_s'") and "tokens_per_s" in line
    assert cli.cmd_diff(base, cur, ["tokens_per_s:-10%"]) == 1


# --- noise -------------------------------------------------------------------------------------------------------


def test_spread_and_round_metrics() -> None:
    assert spread([100.0, 90.0, 110.0, 100.0, 105.0]) == pytest.approx(0.2)
    assert spread([5.0]) == 0.0 and spread([0.0, 0.0]) == 0.0
    assert math.isinf(spread([-1.0, 0.0, 1.0]))
    with pytest.raises(ValueError):
        spread([])
    assert round_metrics("tokens_per_s", [100.0, 90.0, 110.0, 100.0, 105.0]) == {
        "tokens_per_s": 100.0,
        "tokens_per_s_spread": pytest.approx(0.2),
    }
    assert spread_name("ttft_s") == "ttft_s_spread" and "ttft_s_spread" in METRICS


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        # -15% against -10%, but either run's rounds spread over 20%: not a regression
        ({"tokens_per_s": 1000.0, "tokens_per_s_spread": 0.2}, {"tokens_per_s": 850.0}, "within_noise"),
        ({"tokens_per_s": 1000.0}, {"tokens_per_s": 850.0, "tokens_per_s_spread": 0.2}, "within_noise"),
        ({"tokens_per_s": 1000.0, "tokens_per_s_spread": 0.02}, {"tokens_per_s": 850.0, "tokens_per_s_spread": 0.03},
         "regressions"),
        ({"tokens_per_s": 1000.0}, {"tokens_per_s": 850.0}, "regressions"),  # no spread measured: as before
        ({"tokens_per_s": 1000.0, "tokens_per_s_spread": 0.2}, {"tokens_per_s": 1150.0}, "within_noise"),
        ({"tokens_per_s": 1000.0, "tokens_per_s_spread": 0.02}, {"tokens_per_s": 1150.0}, "improvements"),
    ],
)
def test_a_change_within_the_runs_spread_is_not_a_regression(
    before: dict[str, float], after: dict[str, float], kind: str
) -> None:
    result = diff_reports(report(before), report(after), [parse_threshold("tokens_per_s:-10%")])
    found = {name: getattr(result, name) for name in ("regressions", "improvements", "within_noise")}
    assert {name for name, items in found.items() if items} == {kind}
    assert result.regressed == (kind == "regressions")
    if kind == "within_noise":
        text = format_diff(result)
        assert text.splitlines()[0].endswith("1 change(s) beyond a threshold but within the runs' noise")
        assert "within the runs' noise ±20.0%" in text


def test_noise_applies_to_absolute_thresholds_as_a_fraction_of_the_baseline() -> None:
    threshold = parse_threshold("ttft_s:+0.01")
    noisy = diff_reports(report({"ttft_s": 0.1, "ttft_s_spread": 0.3}), report({"ttft_s": 0.125}), [threshold])
    assert noisy.within_noise and not noisy.regressed
    assert diff_reports(report({"ttft_s": 0.1, "ttft_s_spread": 0.1}), report({"ttft_s": 0.125}), [threshold]).regressed


# --- first run: no baseline yet ----------------------------------------------------------------------------------


def test_missing_baseline_note() -> None:
    assert missing_baseline_note("ci/baseline.json", "r.json") == (
        "no baseline at ci/baseline.json: this run's report can become it (cp r.json ci/baseline.json)"
    )
    assert "run with --gpucompat-report R.json, then cp R.json b.json" in missing_baseline_note("b.json", None)


def test_cmd_diff_missing_baseline_says_how_to_make_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cur = write_report_atomic(report({"tokens_per_s": 800.0}), tmp_path / "cur.json")
    missing = tmp_path / "baseline.json"
    assert cli.cmd_diff(missing, cur, ["tokens_per_s:-10%"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"gpucompat diff: error: no baseline at {missing}: this run's report can become it (cp {cur} {missing})"
    )


PLUGIN_TEST = textwrap.dedent("""
    import pytest

    @pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
    def test_cell(gpucompat_cell, gpucompat_record):
        gpucompat_record("tokens_per_s", 100.0)
        gpucompat_record("my_suite_metric", 1.0)
""")


def test_plugin_first_run_without_baseline_passes_with_a_note(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_cells=PLUGIN_TEST)
    result = pytester.runpytest(
        "--gpucompat", "--gpucompat-report", "r.json", "--gpucompat-baseline", "ci/baseline.json",
        "--gpucompat-compare-fail", "tokens_per_s:-10%", "--gpucompat-compare-fail", "my_suite_metric:-1",
    )
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["gpucompat baseline: no baseline at ci/baseline.json: this run's report can become it "
         "(cp r.json ci/baseline.json)"]
    )
    assert (pytester.path / "r.json").is_file()


def test_plugin_unknown_compare_metric_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_cells=PLUGIN_TEST)
    assert pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json").ret == 0
    result = pytester.runpytest(
        "--gpucompat", "--gpucompat-baseline", "r.json", "--gpucompat-compare-fail", "tokenz_per_s:-10%"
    )
    # before the first test, not after the whole run
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gpucompat: --gpucompat-baseline: unknown metric 'tokenz_per_s'*"
                                 "did you mean tokens_per_s?*"])
    assert "passed" not in result.stdout.str()


# --- the registry is the one list ---------------------------------------------------------------------------------

_RECORDED = re.compile(r"""(?:gpucompat_record|record|round_metrics)\(\s*["']([A-Za-z_][A-Za-z0-9_]*)["']""")


def test_every_metric_the_suites_record_is_registered() -> None:
    recorded = {m for path in (ROOT / "suites").glob("*.py") for m in _RECORDED.findall(path.read_text())}
    assert recorded, "the pattern no longer finds the suites' gpucompat_record calls"
    assert recorded - set(METRICS) == set()


def test_docs_carry_the_registry_table() -> None:
    docs = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    assert markdown_table() in docs, (
        "docs/ci.md's metric table is out of date: paste the output of "
        "python -c 'from pytest_gpucompat.common.metrics import markdown_table; print(markdown_table())'"
    )

