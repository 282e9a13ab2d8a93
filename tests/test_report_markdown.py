"""The Markdown summary: key figures per cell (metrics.KEY_FIGURES), regressions first, what a rule decided, and a
size that GitHub's job summary accepts (1 MiB) even for a run of 20,000 cells."""

from __future__ import annotations

from typing import Any

from _cost import cpu

from pytest_gpucompat.common.metrics import KEY_FIGURES, METRICS
from pytest_gpucompat.report.markdown import GITHUB_SUMMARY_LIMIT, render_markdown
from pytest_gpucompat.report.model import Report


def cell(i: int, outcome: str, runner: str = "r", **extra: Any) -> dict[str, Any]:
    return {"nodeid": f"suites/test_x.py::test_x[hf-i={i}]", "engine": "hf", "params": {"i": i}, "outcome": outcome,
            "runner": runner, **extra}


def report(cells: list[dict[str, Any]], runners: dict[str, dict[str, Any]] | None = None) -> Report:
    return Report(runners=runners or {"r": {"name": "r"}}, cells=tuple(_record(c) for c in cells),
                  created="2026-01-31T12:00:00Z")


def _record(data: dict[str, Any]) -> Any:
    from pytest_gpucompat.report.model import CellRecord

    return CellRecord.from_dict(data)


def matrix_lines(md: str) -> list[str]:
    return [line for line in md.splitlines() if line.startswith("| `test_x.py::test_x`")]


def test_key_figures_are_registered_metrics_in_priority_order() -> None:
    names = [k.metric for k in KEY_FIGURES]
    assert names[:2] == ["max_abs_logprob_delta", "token_agreement"]
    assert set(names) >= {"min_cosine", "tokens_per_s", "ttft_s", "leak_mib_per_cycle"}
    assert all(name in METRICS for name in names) and len(set(names)) == len(names)


def test_each_cell_shows_its_key_figures() -> None:
    md = render_markdown(report([
        cell(0, "passed", metrics={"max_abs_logprob_delta": 0.0764, "token_agreement": 0.9375, "start_s": 3.0}),
        cell(1, "passed", metrics={"tokens_per_s": 973.2, "ttft_s": 0.00846, "rounds": 5}),
        cell(2, "passed", metrics={"leak_mib_per_cycle": 0.03}),
        cell(3, "passed", metrics={"min_cosine": 0.9999906}),
        cell(4, "passed", metrics={"start_s": 2.0}),  # no key figure: the word alone
    ]))
    rows = matrix_lines(md)
    assert rows[0].endswith("| passed: Δlp 0.0764, agree 94 % |")
    assert rows[1].endswith("| passed: 973 tok/s, TTFT 8.46 ms |")
    assert rows[2].endswith("| passed: +0.03 MiB/cycle |")
    assert rows[3].endswith("| passed: cos 0.9999906 |")
    assert rows[4].endswith("| passed |")


def test_regressions_come_first() -> None:
    cells = [
        cell(0, "passed"),
        cell(1, "skipped", reason="engine vllm is not installed"),
        cell(2, "skipped", reason="known bad here: [vllm-fp8-ampere] crashes"),
        cell(3, "failed", reason="boom"),
        cell(4, "not-covered", reason="not covered here: needs driver >=580"),
        cell(5, "xpassed"),
        cell(6, "error", reason="setup"),
        cell(7, "xfailed", reason="known bad"),
        cell(8, "skipped", reason="cannot run here: [needs-2-gpus] needs 2 GPUs, 1 visible"),
    ]
    rows = matrix_lines(render_markdown(report(cells)))
    order = [int(row.split("`i=")[1].split("`")[0]) for row in rows]
    assert order == [3, 6, 5, 2, 7, 0, 1, 4, 8]
    assert rows[3].endswith("| known bad (`vllm-fp8-ampere`) |")
    assert rows[-1].endswith("| needs 2 GPUs (`needs-2-gpus`) |")
    assert rows[6].endswith("| skipped |")


def test_a_row_ranks_by_its_worst_runner() -> None:
    runners = {"a": {"name": "a"}, "b": {"name": "b"}}
    cells = [cell(0, "passed", "a"), cell(0, "passed", "b"), cell(1, "passed", "a"), cell(1, "failed", "b")]
    rows = matrix_lines(render_markdown(report(cells, runners)))
    assert rows[0].endswith("| passed | **FAILED** |") and "i=1" in rows[0]


def test_environment_and_kernel_packages_of_each_runner() -> None:
    runners = {"r": {"name": "r", "packages": {"vllm": "0.26.0", "flashinfer-python": "0.2.5", "xformers": None},
                     "env": {"VLLM_USE_V1": "1", "HF_TOKEN": "<redacted>"}},
               "plain": {"name": "plain"}}
    md = render_markdown(report([cell(0, "passed")], runners))
    assert "- **r**: kernels flashinfer-python 0.2.5; environment `VLLM_USE_V1=1`, `HF_TOKEN=<redacted>`" in md
    assert "**plain**:" not in md


def synthetic(n: int, runners: int = 1) -> Report:
    """n cells over `runners` runners: long parameters, every kind of outcome, figures, findings and reasons."""
    names = [f"runner-{k:03d}-with-a-long-name" for k in range(runners)]
    fps = {name: {"name": name, "gpus": [{"name": "NVIDIA H200"}], "driver": "580.159.04",
                  "env": {f"VLLM_VAR_{j}": "x" * 40 for j in range(30)}} for name in names}
    outcomes = ("passed", "failed", "skipped", "xfailed", "error", "passed", "passed", "not-covered")
    finding = {"id": "vllm-fp8-kv-cache-ampere-backend", "severity": "broken", "confidence": "upstream",
               "summary": "FP8 KV cache crashes with the Triton attention backend " * 3, "action": "xfail"}
    cells = []
    for i in range(n):
        outcome = outcomes[i % len(outcomes)]
        params = {"dtype": "bfloat16", "max_model_len": 4096 + i, "gpu_memory_utilization": 0.08,
                  "kv_cache_dtype": "fp8_e4m3", "tensor_parallel_size": 1 + i % 8, "enforce_eager": True}
        cells.append({
            "nodeid": f"suites/test_precision.py::test_logprobs_close_to_fp32_reference[vllm-case{i}-" + "p" * 60 + "]",
            "engine": "vllm", "params": params, "outcome": outcome, "runner": names[i % runners],
            "reason": ("known bad here: [r1] " if outcome == "skipped" else "") + "reason text | <b> " * 20,
            "rules": ["vllm-fp8-kv-cache-ampere-backend"], "findings": [finding],
            "metrics": {"max_abs_logprob_delta": 0.0123 + i * 1e-6, "token_agreement": 0.97, "tokens_per_s": 812.3,
                        "ttft_s": 0.012, "leak_mib_per_cycle": 0.01, "min_cosine": 0.99999},
        })
    return Report(runners=fps, cells=tuple(_record(c) for c in cells), created="2026-01-31T12:00:00Z")


def test_a_20000_cell_report_fits_the_github_job_summary() -> None:
    big = synthetic(20_000)
    with cpu() as used:  # CPU time: a loaded machine stretches the wall clock, not the work done
        md = render_markdown(big)
    assert used.seconds < 20
    assert len(md.encode("utf-8")) < GITHUB_SUMMARY_LIMIT == 1_048_576
    assert "… 19,700 more cells (19,700 of 20,000 rows) not shown: see the HTML/JSON report." in md
    assert len(matrix_lines(md.replace("test_precision.py::test_logprobs_close_to_fp32_reference", "test_x.py::test_x"))
               ) == 300
    # the rows shown are the regressions: failed and errored cells first
    first = next(line for line in md.splitlines() if line.startswith("| `test_precision"))
    assert "**FAILED**" in first or "**ERROR**" in first


def test_without_a_row_limit_the_byte_budget_cuts_the_matrix() -> None:
    big = synthetic(20_000)
    md = render_markdown(big, max_rows=10**9)
    size = len(md.encode("utf-8"))
    assert 900_000 < size <= 1_000_000 < GITHUB_SUMMARY_LIMIT
    shown = md.count("\n| `test_precision")
    left = 20_000 - shown
    assert f"… {left:,} more cells ({left:,} of 20,000 rows) not shown: see the HTML/JSON report." in md
    assert md.endswith("\n") and "### Failures (5,000)" not in md and "### Failures (5000)" in md
    small = render_markdown(big, max_rows=10**9, max_bytes=50_000)
    assert len(small.encode("utf-8")) <= 50_000 and "more cells" in small


def test_a_summary_too_big_even_without_its_matrix_is_cut_at_a_line() -> None:
    many = synthetic(2_000, runners=400)  # 400 runners: their tables alone are larger than the budget
    md = render_markdown(many, max_bytes=100_000)
    assert len(md.encode("utf-8")) <= 100_000
    assert md.endswith("\n\n… summary cut at 100,000 bytes: see the HTML/JSON report.\n")


def test_what_if_banner_and_env_cannot_break_out() -> None:
    runners = {"r": {"name": "r", "what_if": "a`b\n> [!x]|.yaml", "host": "box <script>|**x**\nline",
                     "env": {"VLLM_X": "``|\n<b>"}}}
    md = render_markdown(report([cell(0, "passed"), cell(1, "skipped", reason="engine missing")], runners))
    banner = next(line for line in md.splitlines() if line.startswith("> What-if:"))
    assert banner == ("> What-if: evaluated against ``a`b > [!x]|.yaml``; "
                      "cells ran on box \\<script\\>\\|\\*\\*x\\*\\* line.")
    assert "<script>" not in md
    assert "- **r**: environment ```VLLM_X=``| <b>```" in md  # in a code span: text, not HTML
    rows = matrix_lines(md)
    assert rows[0].endswith("| passed *(ran)* |") and rows[1].endswith("| skipped |")  # a skip did not run


def test_engine_versions_are_the_tracked_engines_only() -> None:
    """What ran and what the fingerprint tracks: a hand-written fingerprint listing requests (the `openai` engine's
    distribution) does not make requests an engine version."""
    from pytest_gpucompat.report.text import engine_versions

    fp = {"packages": {"requests": "2.32.0", "vllm": "0.26.0", "transformers": "5.17.0", "torch": "2.11.0"}}
    assert engine_versions(fp) == [("transformers", "5.17.0"), ("vllm", "0.26.0"), ("torch", "2.11.0")]
