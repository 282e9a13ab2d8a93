"""The gate a CI reader can act on, on the committed H200 reports: which cell moved (named by the parameters that
tell it apart, at any width), which way (worse, better, within noise; a key figure worse beyond its noise and default
tolerance fails the gate), what differed between the runs, in the job summary and as annotations, and no shape that
passes silently (a new runner whose cells all failed, passed -> xfailed)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.cli import main
from pytest_gpucompat.report.cellnames import cell_names
from pytest_gpucompat.report.diff import diff_reports
from pytest_gpucompat.report.diff_markdown import github_annotations, render_diff_markdown
from pytest_gpucompat.report.diff_text import format_diff
from pytest_gpucompat.report.io import load_report, write_report_atomic
from pytest_gpucompat.report.merge import merge_reports
from pytest_gpucompat.report.model import CellRecord, Report

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"
H200 = "h200-580.159.04-"
SERIAL_25 = REPORTS / f"{H200}vllm-0.25.0-serial.json"
SERIAL_26 = REPORTS / f"{H200}vllm-0.26.0-serial.json"
VLLM_BF16 = ("suites/test_smoke.py::test_generates_requested_tokens[tiny-qwen2-vllm-dtype=bfloat16-kv_cache_dtype=auto-"
             "enforce_eager=true-gpu_memory_utilization=0.08-max_model_len=512]")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def name_lines(text: str) -> list[str]:
    """The compare table's cell lines: indented two spaces, between the table's header and its end."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["metric", "baseline"])
    out = []
    for line in lines[start + 1:]:
        if line.startswith("  ...") or line.startswith("  *") or not line.startswith(" "):
            break
        if line.startswith("  ") and not line.startswith("    "):
            out.append(line.strip())
    return out


@pytest.fixture(autouse=True)
def _no_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)


# --- the must-show pair: vLLM 0.25.0 -> 0.26.0, serial ----------------------------------------------------------


def test_serial_vllm_pair_at_100_columns(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    code, out, err = run(capsys, "diff", str(SERIAL_25), str(SERIAL_26))
    assert code == 1 and err == ""
    text = out[: out.index("::error")]
    assert max(map(len, text.splitlines())) <= 100
    assert text.startswith("gpucompat diff: REGRESSED: 1 regression(s)") and " worse, " in text.splitlines()[1]
    names = name_lines(text)
    assert len(names) == len(set(names)) > 10, "two cells printed alike"
    assert "…" not in "\n".join(names), "a cell name was cut"
    # the tokens/s line of the vLLM bfloat16 cell says which way it went, and that it fails the gate
    lines = text.splitlines()
    at = lines.index("  test_generates_requested_tokens · vllm dtype=bfloat16 kv_cache_dtype=auto")
    row = next(line for line in lines[at + 1:] if line.strip().startswith("tokens_per_s"))
    assert row.split() == ["tokens_per_s", "1212.77", "806.807", "-406", "-33.5%", "±9.3%", "regressed"]
    # the header names both runs and what differed
    assert "baseline: " + str(SERIAL_25) in " ".join(text.split())
    assert "- packages.vllm: 0.25.0 → 0.26.0" in text
    # the job summary: headline, regressions first, with the full node id
    md = summary.read_text()
    assert md.startswith("## gpucompat diff: REGRESSED")
    assert md.index("### Regressions") < md.index("### What differs") < md.index("### Figures")
    assert f"`{VLLM_BF16}`" in md
    # one annotation, for the regression, naming the cell in full
    annotations = [line for line in out.splitlines() if line.startswith("::error ")]
    assert len(annotations) == 1 and VLLM_BF16 in annotations[0] and "-33.5%25" in annotations[0]


def test_relaxed_or_without_defaults_the_same_pair_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "diff", str(SERIAL_25), str(SERIAL_26), "--fail-on", "tokens_per_s:-40%")[0] == 0
    assert run(capsys, "diff", str(SERIAL_25), str(SERIAL_26), "--fail-on", "no-defaults")[0] == 0
    code, out, _ = run(capsys, "diff", str(SERIAL_25), str(SERIAL_26), "--fail-on", "tokens_per_s:-10%")
    # tightened: the transformers cells' -10.7 % and -23.9 % too
    assert code == 1 and out.startswith("gpucompat diff: REGRESSED: 3 regression(s)")


def test_json_has_full_ids_and_markdown_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    md = tmp_path / "diff.md"
    code, out, err = run(capsys, "diff", str(SERIAL_25), str(SERIAL_26), "--json", "--markdown", str(md))
    assert code == 1 and err == ""
    data = json.loads(out, parse_constant=lambda c: pytest.fail(f"not strict JSON: {c}"))
    assert [r["nodeid"] for r in data["regressions"]] == [VLLM_BF16]
    assert data["environment"] == [{"what": "packages.vllm", "before": "0.25.0", "after": "0.26.0"}]
    assert {f["verdict"] for f in data["figures"]} >= {"regressed", "worse", "better", "within noise"}
    assert md.read_text().startswith("## gpucompat diff: REGRESSED")
    # an output that cannot be written is one line naming it, exit 2
    code, out, err = run(capsys, "diff", str(SERIAL_25), str(SERIAL_26), "--markdown", str(tmp_path / "no" / "x.md"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--markdown" in err


# --- cells named distinctly --------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [40, 60, 100, 160])
def test_sglang_pair_names_every_cell_apart_at_any_width(width: int) -> None:
    result = diff_reports(load_report(REPORTS / f"{H200}sglang-0.5.16.json"),
                          load_report(REPORTS / f"{H200}sglang-0.5.17.json"))
    text = format_diff(result, width=width)
    assert max(map(len, text.splitlines())) <= width
    new = [result.name(key) for key in result.new_cells]
    assert len(new) == 5 == len(set(new)) and all(n.endswith("sglang tp_size=2") for n in new)
    assert len(set(map(result.name, result.names))) == len(result.names)
    # wrapped, never cut: every parameter of every name is in the text (a test's own name longer than the whole
    # width is the only word that may be shortened)
    words = set(text.split())
    assert all(w in words for key in result.new_cells for w in result.names[key].params.split())


def cell(nodeid: str, engine: str | None = "vllm", **params: Any) -> CellRecord:
    return CellRecord(nodeid=nodeid, engine=engine, params=params, outcome="passed", runner="r")


def test_names_fall_back_to_the_words_of_the_id_that_differ() -> None:
    # two models the record does not keep as parameters, one engine, the same parameters
    a = cell("t.py::test_x[tiny-qwen2-vllm-dtype=float16]", dtype="float16")
    b = cell("t.py::test_x[tiny-llama-vllm-dtype=float16]", dtype="float16")
    c = cell("t.py::test_x[tiny-llama-vllm-dtype=bfloat16]", dtype="bfloat16")
    d = cell("t.py::test_y", engine=None)
    names = cell_names({x.nodeid: x for x in (a, b, c, d)})
    lines = {k: n.line for k, n in names.items()}
    assert len(set(lines.values())) == 4
    assert lines[a.nodeid] == "test_x · qwen2-dtype=float16" and lines[d.nodeid] == "test_y"
    assert lines[c.nodeid] == "test_x · vllm dtype=bfloat16"


def test_names_leave_out_what_every_cell_of_an_engine_shares() -> None:
    common = {"enforce_eager": True, "gpu_memory_utilization": 0.08}
    cells = [cell("t.py::test_x[a]", dtype="bfloat16", kv_cache_dtype="auto", **common),
             cell("t.py::test_x[b]", dtype="float16", kv_cache_dtype="auto", **common),
             cell("t.py::test_x[c]", dtype="bfloat16", tensor_parallel_size=2, **common),
             cell("t.py::test_x[d]", engine="hf", dtype="float32")]
    names = cell_names({c.nodeid: c for c in cells})
    assert [names[c.nodeid].params for c in cells] == [
        "vllm dtype=bfloat16 kv_cache_dtype=auto", "vllm dtype=float16 kv_cache_dtype=auto",
        "vllm dtype=bfloat16 tensor_parallel_size=2", "hf dtype=float32"]


# --- direction and near-zero baselines ---------------------------------------------------------------------------


def one(metrics: dict[str, float], outcome: str = "passed", runner: str = "h200", **extra: Any) -> Report:
    return Report.from_run({"schema": 1, "name": runner},
                           [{"nodeid": VLLM_BF16, "outcome": outcome, "metrics": metrics, **extra}])


@pytest.mark.parametrize(("metric", "before", "after", "verdict"), [
    ("tokens_per_s", 1000.0, 700.0, "regressed"),  # beyond the 25 % default
    ("tokens_per_s", 1000.0, 850.0, "worse"),
    ("tokens_per_s", 1000.0, 1300.0, "better"),
    ("tokens_per_s", 1000.0, 1030.0, "within noise"),
    ("ttft_s", 0.010, 0.020, "regressed"),
    ("ttft_s", 0.001, 0.0025, "within noise"),  # +150 %, but 1.5 ms: under the 2 ms floor
    ("max_abs_logprob_delta", 4.9e-6, 1.05e-5, "within noise"),  # +111 % of nearly nothing
    ("max_abs_logprob_delta", 4.9e-6, 0.0624, "regressed"),
    ("leak_mib_per_cycle", 0.0, 0.5, "within noise"),
    ("leak_mib_per_cycle", 0.0, 1.5, "regressed"),
    ("token_agreement", 1.0, 0.8, "regressed"),
    ("repeat_request_s", 0.1, 0.05, "better"),
    ("my_own_figure", 1.0, 2.0, "changed"),  # a user's metric: no declared direction
])
def test_each_metric_reads_in_its_declared_direction(metric: str, before: float, after: float,
                                                     verdict: str) -> None:
    result = diff_reports(one({metric: before}), one({metric: after}))
    (row,) = result.rows
    assert row.verdict == verdict
    assert result.regressed == (verdict == "regressed")


def test_a_near_zero_baseline_shows_its_absolute_change() -> None:
    result = diff_reports(one({"golden_cell_max_abs_logprob_delta": 4.94972e-06}),
                          one({"golden_cell_max_abs_logprob_delta": 0.0624375}))
    (row,) = result.rows
    assert (row.change, row.delta, row.verdict) == ("—", "+0.06243", "worse")
    line = format_diff(result, width=100).split("    golden_cell_max_abs_logprob_delta", 1)[1].split("\n")[0]
    assert line.split() == ["4.94972e-06", "0.0624375", "+0.06243", "—", "±5.0%*", "worse"]


# --- no silent pass ----------------------------------------------------------------------------------------------


def test_a_new_runner_whose_cells_all_failed_fails_the_gate(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    base = load_report(SERIAL_26)
    broken_runner = Report(runners={"h200-new": {"schema": 1, "name": "h200-new"}},
                           cells=tuple(replace(c, runner="h200-new", outcome="failed", reason="engine died")
                                       for c in base.cells if c.outcome == "passed"))
    current = merge_reports([base, broken_runner])
    assert len(current.runners) == 2 and sum(c.outcome == "failed" for c in current.cells) == 24
    b, c = write_report_atomic(base, tmp_path / "b.json"), write_report_atomic(current, tmp_path / "c.json")
    code, out, _ = run(capsys, "diff", str(b), str(c))
    assert code == 1 and "24 regression(s)" in out.splitlines()[0]
    assert "runner h200-new: absent → present" in out
    # the compared cells did not change: the new runner's are new (and regressed), not changed
    assert " ".join(out.splitlines()[1:3]).startswith("cells: 29 compared, 0 changed, 24 regressed, 0 missing, 24 new")


def test_passed_to_xfailed_fails_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = load_report(SERIAL_26)
    hidden = Report(runners=base.runners, cells=tuple(
        replace(c, outcome="xfailed", reason="known bad: some-rule") if c.outcome == "passed" else c
        for c in base.cells))
    b, c = write_report_atomic(base, tmp_path / "b.json"), write_report_atomic(hidden, tmp_path / "c.json")
    code, out, _ = run(capsys, "diff", str(b), str(c))
    assert code == 1 and out.startswith("gpucompat diff: REGRESSED: 24 regression(s)")
    assert "passed → xfailed: now expected to fail: known bad: some-rule" in " ".join(out.split())


def test_other_outcome_moves_are_listed_never_clean() -> None:
    result = diff_reports(one({}, outcome="failed", reason="x"), one({}, outcome="error", reason="y"))
    assert not result.clean and [c.after for c in result.outcome_changes] == ["error"]
    assert "Changed outcomes (1)" in format_diff(result, width=100)
    assert "1 compared, 1 changed, 0 regressed" in format_diff(result, width=100)


# --- what changed between the runs -------------------------------------------------------------------------------


def test_environment_differences_name_installs_and_ignore_gpu_identity() -> None:
    result = diff_reports(load_report(REPORTS / f"{H200}vllm-0.26.0-no-flashinfer.json"),
                          load_report(REPORTS / f"{H200}vllm-0.26.0-flashinfer.json"))
    lines = [c.line for c in result.environment]
    assert "packages.flashinfer-python: absent → 0.6.14" in lines
    assert any(line.startswith("installs.vllm.missing") for line in lines)
    assert not any("uuid" in line or re.search(r"GPU-[0-9a-f]{8}", line) for line in lines)


def test_harness_deviations_are_an_environment_difference() -> None:
    dev = {"name": "kv_cache_memory_bytes", "value": 6e9, "by": "harness", "why": "packed"}
    result = diff_reports(one({}, engine="vllm"), one({}, engine="vllm", deviations=[dev]))
    assert [c.what for c in result.environment] == ["harness deviations of vllm (only one run has)"]


def test_annotations_escape_and_stop_at_the_limit() -> None:
    result = diff_reports(one({"tokens_per_s": 100.0}), one({"tokens_per_s": 10.0}))
    (line,) = github_annotations(result)
    assert line.startswith("::error title=gpucompat regression%3A ") and "\n" not in line
    assert "-90.0%25" in line
    md = render_diff_markdown(result)
    assert md.startswith("## gpucompat diff: REGRESSED") and "**regressed**" in md


def test_nothing_written_without_a_summary_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, _ = run(capsys, "diff", str(SERIAL_26), str(SERIAL_26))
    assert code == 0 and out.startswith("gpucompat diff: clean: no differences")
    assert "What differs between the runs: nothing" in out
