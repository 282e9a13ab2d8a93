"""The report package's public API and the contract of every output format of `gpucompat report`.

A format is a renderer (a function of a `Report` returning the file's text) and its line in
`report.cli.FORMATS`; the tests parametrized over FORMATS cover a new format without being edited
(docs/extending.md, "Add a report format").
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pytest_gpucompat.report as report_pkg
from pytest_gpucompat.report import cli
from pytest_gpucompat.report.io import write_report_atomic
from pytest_gpucompat.report.model import CellRecord, FindingRecord, Report
from pytest_gpucompat.report.text import first_line, one_line

FINGERPRINT: dict[str, Any] = {"name": "runner-a", "gpus": [{"index": 0, "name": "NVIDIA H200"}],
                               "driver": "580.159.04", "cuda_driver": "13.0", "packages": {"vllm": "0.26.0"}}
EVIL = "<script>alert(1)</script> | `x` & \"q\" ]]> \x1b[31mred\x1b[0m"


def small_report() -> Report:
    broken = {"id": "rule-x", "severity": "broken", "confidence": "upstream", "summary": EVIL, "action": "skip"}
    cells = [
        {"nodeid": "s.py::test_a[vllm-dtype=bf16]", "engine": "vllm", "params": {"dtype": "bf16"}, "outcome": "passed",
         "metrics": {"tokens_per_s": 812.3}},
        {"nodeid": "s.py::test_a[vllm-dtype=fp8]", "engine": "vllm", "params": {"dtype": "fp8"}, "outcome": "failed",
         "reason": f"first line {EVIL}\nsecond line", "rules": ["rule-x"], "findings": [broken], "log_tail": EVIL},
        {"nodeid": "s.py::test_b", "outcome": "skipped", "reason": "no GPU"},
    ]
    return Report.from_run(FINGERPRINT, cells, exitstatus=1, created="2026-01-31T12:00:00Z")


def renderer(name: str) -> Any:
    module, function, _help = cli.FORMATS[name]
    return getattr(importlib.import_module(f"pytest_gpucompat.report.{module}"), function)


# --------------------------------------------------------------------------- public API


def test_public_api_names_what_exists() -> None:
    assert sorted(report_pkg.__all__) == sorted(set(report_pkg.__all__))
    for name in report_pkg.__all__:
        value = getattr(report_pkg, name)
        assert getattr(value, "__name__", name) == name
    assert {"Report", "load_report", "merge_reports", "diff_reports", "render_html", "render_markdown",
            "render_junit"} <= set(report_pkg.__all__)
    with pytest.raises(AttributeError):
        report_pkg.Cell  # noqa: B018 - the report's cell is CellRecord: Cell is the matrix's MatrixCell


def test_report_records_are_not_the_kb_and_matrix_names() -> None:
    assert CellRecord.__name__ == "CellRecord" and FindingRecord.__name__ == "FindingRecord"
    assert report_pkg.CellRecord is CellRecord and report_pkg.FindingRecord is FindingRecord


def test_the_package_loads_no_report_code_until_asked() -> None:
    code = ("import sys, pytest_gpucompat.report as r, pytest_gpucompat.report.cli\n"
            "print(sorted(m for m in sys.modules if m.startswith('pytest_gpucompat.report')))\n"
            "r.load_report\n"
            "print('pytest_gpucompat.report.io' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == ["['pytest_gpucompat.report', 'pytest_gpucompat.report.cli']", "True"]


# --------------------------------------------------------------------------- text helpers


def test_first_line_keeps_the_first_line_one_line_folds_them_all() -> None:
    text = "\n  AssertionError: drift 0.3\n  above 0.2\n"
    assert first_line(text) == "AssertionError: drift 0.3"
    assert one_line(text) == "AssertionError: drift 0.3 above 0.2"
    assert first_line(None) == one_line(None) == first_line(" \n ") == ""
    assert one_line("abcdef", 4) == "abc…" and one_line("abcd", 4) == "abcd"


# --------------------------------------------------------------------------- every format


@pytest.mark.parametrize("name", list(cli.FORMATS))
def test_format_renders_text_deterministically(name: str) -> None:
    render = renderer(name)
    report = small_report()
    text = render(report)
    assert isinstance(text, str) and text.endswith("\n")
    assert render(report) == text  # pure: the same report gives the same file


@pytest.mark.parametrize("name", list(cli.FORMATS))
def test_format_is_an_option_of_gpucompat_report(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    source = write_report_atomic(small_report(), tmp_path / "r.json")
    parser = argparse.ArgumentParser(prog="gpucompat")
    cli.add_report_subparsers(parser.add_subparsers(dest="command", required=True))
    target = tmp_path / f"out.{name}"
    args = parser.parse_args(["report", str(source), f"--{name}", str(target)])
    assert args.func(args) == 0
    assert target.read_text(encoding="utf-8") == renderer(name)(small_report())


def test_cmd_report_refuses_an_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="unknown format"):
        cli.cmd_report(tmp_path / "r.json", pdf=tmp_path / "r.pdf")
