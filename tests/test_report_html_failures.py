"""The HTML page answers first: a Failures section before the matrix (cause, known issue, log tail as plain HTML)
and the matrix rows failures first."""

from __future__ import annotations

import re

from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.model import Report

_LOG = "\n".join(f"line {i}" for i in range(100)) + "\nRuntimeError: CUDA error: <out of memory> & more"


def _report() -> Report:
    cells = [
        {"nodeid": "suites/t.py::test_a[hf-ok]", "engine": "hf", "params": {"dtype": "bfloat16"}, "outcome": "passed"},
        {"nodeid": "suites/t.py::test_a[vllm-boom]", "engine": "vllm", "params": {"dtype": "float16"},
         "outcome": "failed", "reason": "vllm: LLM() failed: ValueError: <Tokenizer> not available", "log_tail": _LOG,
         "explained_by": [{"id": "vllm-tokenizer-skip-init", "summary": "skip_tokenizer_init breaks embed",
                           "workaround": "set skip_tokenizer_init=False"}]},
        {"nodeid": "suites/t.py::test_a[sglang-skip]", "engine": "sglang", "outcome": "skipped",
         "reason": "sglang unavailable: sglang is not importable"},
        {"nodeid": "suites/t.py::test_b[vllm-xpass]", "engine": "vllm", "outcome": "xpassed",
         "reason": "known bad here: [vllm-fp8-kv] FP8 KV cache crashes (upstream)"},
        {"nodeid": "suites/t.py::test_b[hf-err]", "engine": "hf", "outcome": "error", "reason": "setup failed"},
    ]
    return Report.from_run({"name": "h200"}, cells)


def _section(page: str) -> str:
    found = re.search(r'<section id="failures".*?</section>', page, re.S)
    assert found is not None
    return found.group(0)


def test_failures_come_before_the_matrix_with_cause_known_issue_and_log_tail() -> None:
    page = render_html(_report())
    section = _section(page)
    assert page.index('class="summary"') < page.index('id="failures"') < page.index('<table class="matrix"')
    # outside any script: the section has none, and it sits before the page's first script body
    assert "<script" not in section and page.index('id="failures"') < page.index('<script type="application/json"')
    assert "vllm: LLM() failed: ValueError: &lt;Tokenizer&gt; not available" in section
    assert "<Tokenizer>" not in section
    assert "vllm-tokenizer-skip-init" in section and "set skip_tokenizer_init=False" in section
    log = re.search(r'<details class="log"[^>]*><summary>[^<]*</summary><pre class="log">(.*?)</pre></details>',
                    section, re.S)
    assert log is not None
    assert "RuntimeError: CUDA error: &lt;out of memory&gt; &amp; more" in log.group(1)
    assert "line 99" in log.group(1) and "line 10\n" not in log.group(1)  # the last lines only
    assert 'class="engine">vllm<' in section and "dtype=<b>float16</b>" in section and ">h200<" in section
    # failed and errored cells, then the XPASS one, labelled
    items = re.findall(r'<li class="failure" data-outcome="([^"]+)"', section)
    assert items == ["failed", "error", "xpassed"]
    assert "XPASS (a rule said it fails)" in section and "passed" not in items
    assert "No known issue matches" in section  # the error has none


def test_no_failures_no_section() -> None:
    report = Report.from_run({"name": "r"}, [{"nodeid": "t.py::t[a]", "outcome": "passed"}])
    assert 'id="failures"' not in render_html(report)


def test_matrix_rows_come_failures_first() -> None:
    page = render_html(_report())
    matrix = page[page.index('<table class="matrix"'):]
    rows = re.findall(r'<tr class="row"[^>]*data-states="([^"]*)"', matrix)
    assert rows == ["failed", "error", "xpassed", "passed", "unavailable"]
