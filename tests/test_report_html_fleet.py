"""The HTML report without a browser: cell states, key figures against their limits, shared parameters in group
headers, what-if labels and the inline SVG charts (the browser test checks the same page by element positions)."""

from __future__ import annotations

import re

import pytest
from _fleet_report import DRIFT, MEMORY, MODEL, RUNNERS, WHAT_IF_FILE, WHAT_IF_HOST, WHAT_IF_RUNNER, fleet_report

from pytest_gpucompat.checks.compare import thresholds_for
from pytest_gpucompat.common.metrics import KEY_FIGURES, METRICS
from pytest_gpucompat.report.charts import charts_section
from pytest_gpucompat.report.figures import RULE_SKIPS, STATES, cell_state, cell_word, key_figures, rule_of
from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.html_assets import CSS
from pytest_gpucompat.report.markdown import render_markdown
from pytest_gpucompat.report.merge import merge_reports
from pytest_gpucompat.report.model import OUTCOMES, CellRecord, Report


def _cell(**kw: object) -> CellRecord:
    return CellRecord.from_dict({"nodeid": "suites/t.py::t[x]", "runner": "r", "outcome": "passed", **kw})


@pytest.mark.parametrize(
    ("outcome", "reason", "state"),
    [
        ("skipped", "known bad here: [vllm-fp8-kv] FP8 KV cache crashes (upstream)", "known-bad"),
        ("skipped", "cannot run here: [needs-gpus] needs 2 GPUs (tensor_parallel_size=2), 1 visible", "needs-gpus"),
        ("skipped", "cannot run here: [needs-gpus] needs 2 GPUs (tensor_parallel_size=2), 0 visible", "no-gpu"),
        ("skipped", "cannot run here: [needs-gpus] needs 102,400 MiB of weights per GPU (split by tensor_parallel_size"
                    "=1), the smallest GPU has 81,559 MiB", "too-little-memory"),
        ("skipped", "cannot run here: [needs-gpus] needs 2 GPUs (tensor_parallel_size=2), 2 visible; needs 90,000 MiB "
                    "of weights per GPU (split by tensor_parallel_size=2), the smallest GPU has 81,559 MiB",
         "too-little-memory"),
        ("skipped", "cannot run here: [needs-gpus] this runner: something else", "too-big"),
        ("skipped", "not covered here: vllm 0.27.*", "not-covered"),
        ("skipped", "sglang unavailable: sglang is not importable", "unavailable"),
        ("skipped", "no GPU visible", "no-gpu"),
        ("not-covered", "covered by another runner", "not-covered"),
        ("xfailed", "known bad here: [x] wrong output", "xfailed"),
        ("error", None, "error"),
    ],
)
def test_cell_states(outcome: str, reason: str | None, state: str) -> None:
    cell = _cell(outcome=outcome, reason=reason)
    assert cell_state(cell) == state and state in STATES
    if state in RULE_SKIPS and reason and reason.startswith(("known bad", "cannot run")):
        assert rule_of(cell) in ("vllm-fp8-kv", "needs-gpus")


def test_no_gpu_too_few_gpus_and_too_little_memory_have_their_own_labels() -> None:
    cells = [
        _cell(nodeid="suites/t.py::t[a]", outcome="skipped", reason="no GPU: a GPU measurement"),
        _cell(nodeid="suites/t.py::t[b]", outcome="skipped",
              reason="cannot run here: [vllm-parallel-needs-visible-gpus] needs 2 GPUs (tensor_parallel_size=2), "
                     "1 visible"),
        _cell(nodeid="suites/t.py::t[c]", outcome="skipped",
              reason="cannot run here: [model-weights-exceed-gpu-memory] needs 102,400 MiB of weights per GPU "
                     "(split by tensor_parallel_size=1), the smallest GPU has 81,559 MiB"),
    ]
    assert [cell_word(c) for c in cells] == ["no GPU", "needs 2 GPUs", "too little memory"]
    page = render_html(Report.from_run({"name": "r"}, [c.to_dict() for c in cells]))
    words = re.findall(r'<span class="word">([^<]*)</span>', page)
    assert words == ["no GPU", "needs 2 GPUs", "too little memory"]
    assert "cannot run here (too big)" not in page
    assert all(f'data-state="{s}"' in page for s in ("no-gpu", "needs-gpus", "too-little-memory"))
    md = render_markdown(Report.from_run({"name": "r"}, [c.to_dict() for c in cells]))
    assert "needs 2 GPUs (`vllm-parallel-needs-visible-gpus`)" in md
    assert "too little memory (`model-weights-exceed-gpu-memory`)" in md


def test_key_figures_are_registered_metrics() -> None:
    assert all(k.metric in METRICS for k in KEY_FIGURES)
    assert {k.metric for k in KEY_FIGURES} >= {"max_abs_logprob_delta", "token_agreement", "min_cosine",
                                                "tokens_per_s", "ttft_s", "leak_mib_per_cycle"}


def test_figures_are_held_to_the_dtype_thresholds_and_the_leak_tolerance() -> None:
    limit = thresholds_for("bfloat16")["max_abs_logprob_delta"]
    near = _cell(params={"dtype": "bfloat16"}, metrics={"max_abs_logprob_delta": limit * 0.8, "token_agreement": 1.0})
    delta, agreement = key_figures(near)
    assert (delta.limit, delta.limit_from, delta.margin) == (limit, "bfloat16", "near")
    assert agreement.margin == "good" and agreement.limit == thresholds_for("bfloat16")["min_token_agreement"]
    fp8 = _cell(params={"dtype": "bfloat16", "kv_cache_dtype": "fp8_e4m3"}, metrics={"max_abs_logprob_delta": 0.9})
    assert key_figures(fp8)[0].limit == thresholds_for("fp8")["max_abs_logprob_delta"]
    cosine = _cell(params={"dtype": "float16"}, metrics={"min_cosine": 0.99})
    assert key_figures(cosine)[0].margin == "over"
    auto = _cell(params={"dtype": "auto"}, metrics={"max_abs_logprob_delta": 0.1})
    assert key_figures(auto)[0].margin == "plain"  # no dtype, no threshold: shown without a colour
    smoke = _cell(metrics={"tokens_per_s": 812.3, "ttft_s": 0.012})
    assert [(f.text, f.margin) for f in key_figures(smoke)] == [("812 tok/s", "plain"), ("TTFT 12 ms", "plain")]
    gpu_leak = _cell(metrics={"leak_mib_per_cycle": 2.0, "nvml_process_mib_after_last_cycle": 900.0})
    assert key_figures(gpu_leak)[0].margin == "over" and "nvml_process_mib" in key_figures(gpu_leak)[0].title
    cpu_leak = _cell(metrics={"leak_mib_per_cycle": 0.2})
    assert key_figures(cpu_leak)[0].margin == "near"  # judged on host RSS, whose tolerance is 0.25


def test_matrix_cells_show_states_figures_and_shared_parameters() -> None:
    report = fleet_report()
    page = render_html(report)
    for state in STATES.keys() - {"no-gpu", "too-little-memory", "too-big"}:  # the fleet has none of these
        assert f'data-state="{state}"' in page
    # The model path every row of a group shares is in the group header once, cut, whole on hover.
    # (rows come failures first, so a test's rows can make more than one group, each with its header)
    groups = page.count('<tr class="group">')
    shared = page.count('<span class="shared">')
    assert 4 <= shared <= groups
    assert f'title="{MODEL}"' in page
    assert page.count("model=<b>") >= shared
    figures = [f for c in report.cells for f in key_figures(c)]
    assert page.count('data-metric="') == len(figures)
    assert page.count('class="fig m-over" data-metric') == sum(1 for f in figures if f.margin == "over")
    assert 'data-metric="tokens_per_s"' in page and "known bad" in page


def test_what_if_banner_and_ran_on_labels() -> None:
    report = fleet_report()
    page = render_html(report)
    banner = re.search(r'<section class="whatif".*?</section>', page, re.S)
    assert banner is not None and WHAT_IF_FILE in banner.group(0) and WHAT_IF_HOST in banner.group(0)
    ran = [c for c in report.cells if c.runner == WHAT_IF_RUNNER and c.ran]
    assert page.count('<span class="ranon">') == len(ran) > 0
    plain = Report.from_run({"name": "r"}, [{"nodeid": "t.py::t[a]", "outcome": "passed"}])
    assert 'class="whatif"' not in render_html(plain) and 'class="ranon"' not in render_html(plain)


def test_charts_count_their_series_and_points() -> None:
    report = fleet_report()
    section = charts_section(report)
    charts = dict(re.findall(r'<svg class="chart" data-chart="([^"]+)" (data-series="\d+" data-points="\d+")', section))
    assert set(charts) == {"drift", "memory-nvml_process_mib", "memory-nvml_device_used_mib",
                           "memory-torch_reserved_mib", "memory-host_rss_mib", "tokens_per_s", "start_s"}
    memory_cells = [c for c in report.cells if c.test == MEMORY and c.series]
    assert charts["memory-host_rss_mib"] == f'data-series="{len(memory_cells)}" data-points="{len(memory_cells) * 6}"'
    drift = [c for c in report.cells if c.test == DRIFT and c.metrics.get("max_abs_logprob_delta") is not None]
    assert f'data-series="{len(RUNNERS)}"' in charts["drift"]
    assert int(re.search(r'data-points="(\d+)"', charts["drift"]).group(1)) > len(drift)  # and the embeddings


def test_charts_escape_names_and_are_left_out_without_data() -> None:
    evil = Report.from_run({"name": "<b>r</b>"}, [{"nodeid": "t.py::t[a]", "outcome": "passed", "engine": "<i>e</i>",
                                                  "metrics": {"tokens_per_s": 10.0, "start_s": 2.0}}])
    section = charts_section(evil)
    assert "<b>r</b>" not in section and "&lt;b&gt;r&lt;/b&gt;" in section and "<i>e</i>" not in section
    empty = charts_section(Report.from_run({"name": "r"}, [{"nodeid": "t.py::t[a]", "outcome": "passed"}]))
    assert "<svg" not in empty and "No figures in this report to chart." in empty


_REASONS = {  # a skip's reason for each state that is not an outcome (as the plugin writes them)
    "known-bad": "known bad here: [vllm-fp8-kv] FP8 KV cache crashes (upstream)",
    "unavailable": "sglang unavailable: sglang is not importable",
    "no-gpu": "no GPU visible",
    "needs-gpus": "cannot run here: [needs-gpus] needs 2 GPUs (tensor_parallel_size=2), 1 visible",
    "too-little-memory": "cannot run here: [w] needs 102,400 MiB of weights per GPU (split by tensor_parallel_size=1), "
                         "the smallest GPU has 81,559 MiB",
    "too-big": "cannot run here: [needs-gpus] this runner: something else",
    "not-covered": "not covered here: vllm 0.27.*",
}


def test_no_state_and_no_margin_is_told_by_colour_alone() -> None:
    cells = [{"nodeid": f"suites/t.py::t[{state}]", "outcome": state if state in OUTCOMES else "skipped",
              "reason": _REASONS.get(state)} for state in STATES]
    other = Report.from_run({"name": "s"}, [{"nodeid": "suites/t.py::t[other]", "outcome": "passed"}])
    page = render_html(merge_reports([Report.from_run({"name": "r"}, cells), other])) + render_html(fleet_report())
    said = re.findall(r'<td class="cell [^"]*" data-cell="\d+" data-outcome="[^"]*" data-state="([^"]+)"[^>]*>'
                      r'<span class="word">([^<]+)</span>', page)
    assert len(said) == page.count('<td class="cell ') - page.count('<td class="cell o-missing"')  # every cell
    words: dict[str, set[str]] = {}
    for state, word in said:
        words.setdefault(state, set()).add(word.strip())
    assert set(words) == set(STATES)  # every state's cell says its state in words, and no two states share a word
    assert all(a == b or not (words[a] & words[b]) for a in words for b in words), words
    assert set(re.findall(r'<td class="cell o-missing"[^>]*>([^<]*)</td>', page)) == {"–"}  # a runner without it
    # A figure over its limit carries a marker, bold and an outline, not only red; no other figure has the marker.
    figures = re.findall(r'<span class="fig m-(\w+)" data-metric="[^"]*" title="([^"]*)">(.*?)</span>', page)
    over = [(title, body) for margin, title, body in figures if margin == "over"]
    assert over and all(body.startswith('<b class="over" aria-hidden="true">▲</b> ') and "OVER the limit" in title
                        for title, body in over)
    assert not any("▲" in body or "OVER" in title for margin, title, body in figures if margin != "over")
    assert 'class="fig m-over"><b class="over" aria-hidden="true">▲</b> over the limit</span>' in page  # the key
    rule = re.search(r"\.fig\.m-over\{([^}]*)\}", CSS)
    assert rule is not None and "font-weight:700" in rule.group(1) and "outline:" in rule.group(1)
