"""pytest-rerunfailures' reruns, per cell: counted, the first failure's reason kept, a cell that passed only on a
rerun shown as flaky in every view, with and without xdist."""

from __future__ import annotations

import json

import pytest
from conftest import requires

from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.io import load_report
from pytest_gpucompat.report.markdown import render_markdown

FLAKY = """
    import pathlib, pytest

    @pytest.mark.gpucompat(engine="hf", params={"n": [1, 2, 3]})
    def test_cell(gpucompat_cell):
        n = gpucompat_cell.params["n"]
        mark = pathlib.Path(f"attempts-{n}")
        attempts = int(mark.read_text()) if mark.exists() else 0
        mark.write_text(str(attempts + 1))
        if n == 2:
            assert attempts >= 1, "warming up"  # fails once, then passes
        if n == 3:
            assert False, f"always broken {attempts}"
"""


@pytest.mark.parametrize("xdist", [False, True])
def test_reruns_recorded_per_cell_and_flaky_cells_shown(pytester, xdist):
    requires("pytest_rerunfailures")
    pytester.makepyfile(FLAKY)
    argv = ["--gpucompat", "--gpucompat-report", "r.json", "--reruns", "2", "-p", "no:randomly"]
    if xdist:
        requires("xdist")
        argv += ["-n", "2"]
    result = pytester.runpytest_subprocess(*argv, timeout=300)
    data = json.loads((pytester.path / "r.json").read_text())
    cells = {c["params"]["n"]: c for c in data["cells"]}
    assert "reruns" not in cells[1]
    assert (cells[2]["outcome"], cells[2]["reruns"]) == ("passed", 1)
    assert "warming up" in cells[2]["rerun_reason"]
    assert (cells[3]["outcome"], cells[3]["reruns"]) == ("failed", 2)
    assert "always broken 0" in cells[3]["rerun_reason"]  # the first failure's, not the last
    assert "always broken 2" in cells[3]["reason"]
    report = load_report(pytester.path / "r.json")
    flaky = next(c for c in report.cells if c.params["n"] == 2)
    assert flaky.flaky and flaky.rerun_text() == "flaky: passed on attempt 2; first failure: " + flaky.rerun_reason
    # the session summary, the Markdown and the HTML say so
    result.stdout.fnmatch_lines(["*(hf) after 2 reruns: AssertionError*", "flaky cells, passed only on a rerun (1):",
                                 "  flaky *test_cell?hf-n=2? (hf): passed on attempt 2*"])
    markdown = render_markdown(report)
    assert "flaky: passed on attempt 2" in markdown and "failed after 2 reruns" in markdown
    html = render_html(report)  # as text in the page, not only in a tooltip
    assert '<span class="why rerun">flaky: passed on attempt 2; first failure: AssertionError: warming up' in html


def test_diff_shows_a_cell_that_became_flaky_without_failing_the_gate(tmp_path, capsys):
    from pytest_gpucompat import cli

    fingerprint = {"hostname": "h"}
    cell = {"nodeid": "t.py::test_cell[hf-n=1]", "engine": "hf", "params": {"n": 1}, "outcome": "passed",
            "runner": "r", "when": "call"}
    for name, extra in (("a.json", {}), ("b.json", {"reruns": 1, "rerun_reason": "AssertionError: warming up"})):
        (tmp_path / name).write_text(json.dumps({"schema_version": 1, "tool_version": "0", "created": "x",
                                                 "runners": {"r": fingerprint}, "cells": [{**cell, **extra}]}))
    code = cli.main(["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "passed (flaky)" in out and "warming up" in out
