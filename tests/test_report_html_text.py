"""What the HTML says without JavaScript or hovering: why a cell did not run, and the deviations as a table."""

from __future__ import annotations

import re

from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.model import Report

DEV = [{"name": "gpu_memory_utilization", "value": 0.2, "by": "harness", "engine_default": 0.9,
        "why": "leave room for the reference"},
       {"name": "enforce_eager", "value": True, "by": "cell", "engine_default": False}]


def report() -> Report:
    cells = [
        {"nodeid": "t.py::x[hf-dtype=fp8]", "engine": "hf", "outcome": "skipped",
         "reason": "hf unavailable: hf fp8 needs an FP8-capable GPU (compute capability >= 8.9)"},
        {"nodeid": "t.py::x[vllm]", "engine": "vllm", "outcome": "passed", "deviations": DEV},
        {"nodeid": "t.py::x[vllm-2]", "engine": "vllm", "outcome": "passed", "deviations": DEV},
    ]
    return Report.from_run({"schema": 1, "name": "r"}, cells)


def text_of(html: str) -> str:
    """What a reader sees without JavaScript: the markup without scripts, tags, titles."""
    html = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_a_skipped_cell_says_why_in_text() -> None:
    html = render_html(report())
    cell = re.search(r'<td class="cell o-skipped".*?</td>', html, re.S)
    assert cell is not None
    assert "hf fp8 needs an FP8-capable GPU" in text_of(cell.group(0))


def test_deviations_are_a_table_with_the_engines_defaults() -> None:
    html = render_html(report())
    section = re.search(r'<section id="deviations">.*?</section>', html, re.S)
    assert section is not None and "<table" in section.group(0)
    rows = re.findall(r"<tr>(.*?)</tr>", section.group(0), re.S)
    cells = [[" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, re.S)]
             for r in rows]
    assert cells[0] == ["engine", "cells", "setting", "value", "set by", "engine default", "why"]
    assert cells[1] == ["vllm", "2", "gpu_memory_utilization", "0.2", "harness", "0.9", "leave room for the reference"]
    assert cells[2] == ["enforce_eager", "True", "cell", "False", ""]
    assert "{" not in text_of(section.group(0))


def test_chart_labels_too_long_are_cut_with_an_ellipsis_and_kept_whole_in_their_tooltip():
    import re

    from pytest_gpucompat.report.charts import chart_named
    from pytest_gpucompat.report.model import Report

    version = "0.26.0+cu129.nightly.20261204.gabcdef0123456789"
    report = Report.from_dict({"schema_version": 1, "tool_version": "0", "created": "x", "runners": {"r": {}},
                               "cells": [{"nodeid": "t.py::test_gen[vllm]", "engine": "vllm", "outcome": "passed",
                                          "runner": "r", "metrics": {"tokens_per_s": 10.0},
                                          "engine_info": {"version": version}}]})
    svg = chart_named(report, "performance")
    label = f"vllm {version}"
    shown = re.search(r"<title>" + re.escape(label) + r"</title>([^<]*)</text>", svg)
    assert shown is not None, svg
    assert shown.group(1).endswith("…") and label.startswith(shown.group(1)[:-1]) and len(shown.group(1)) <= 30
