"""docs/extending.md kept true: its map against the tree, and its recipes performed in a copy of the package."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_gpucompat"
DOC = (ROOT / "docs" / "extending.md").read_text()


def _map_rows() -> dict[str, tuple[str, str]]:
    table = DOC[DOC.index("## The map"):DOC.index("`tests/test_architecture.py` keeps the shape")]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith("/`"):
            rows[cells[0].strip("`").rstrip("/")] = (cells[1], cells[2])
    return rows


def test_the_map_names_every_package_and_only_those() -> None:
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert set(_map_rows()) == packages


def test_the_modules_the_map_names_exist() -> None:
    for package, (holds, _) in _map_rows().items():
        for name in re.findall(r"\(`([a-z_]+)`", holds) + re.findall(r", `([a-z_]+)`", holds):
            assert (PACKAGE / package / f"{name}.py").is_file(), f"docs/extending.md map: {package}/{name}.py"


def test_a_package_that_knows_nothing_of_pytest_imports_none() -> None:
    checked = 0
    for package, (_, blind) in _map_rows().items():
        if not re.search(r"\bpytest\b", blind) and "everything else" not in blind:
            continue
        checked += 1
        segment = next((part for part in blind.split(";") if "pytest" in part), "")
        allowed = set(re.findall(r"`([a-z_]+)`", segment))
        for module in (PACKAGE / package).glob("*.py"):
            if re.search(r"^(import pytest\b|from _?pytest(\.| import))", module.read_text(), re.M):
                assert module.stem in allowed, f"docs/extending.md: {package}/ knows nothing of pytest; {module.name}"
    assert checked >= 5


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "pytest_gpucompat", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "matrices", tmp_path / "matrices")
    return tmp_path


def _run(root: Path, code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _edit(path: Path, old: str, new: str) -> None:
    """One step of a recipe: `old`, standing once in the file, becomes `new`."""
    text = path.read_text()
    assert text.count(old) == 1, f"{path.name}: the recipe's anchor {old!r} moved"
    path.write_text(text.replace(old, new))


def _touched(copy: Path) -> list[str]:
    """The files of the package and matrices/ that the copy adds or changes."""
    out = []
    for folder in ("pytest_gpucompat", "matrices"):
        for path in sorted((copy / folder).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                original = ROOT / path.relative_to(copy)
                if not original.is_file() or original.read_bytes() != path.read_bytes():
                    out.append(path.relative_to(copy).as_posix())
    return out


def test_recipe_add_a_kind_of_check(copy: Path) -> None:
    """As "Add a kind of check" says: the check module, one registration in common/metrics.py, one block of data;
    its figure's text in a matrix cell, its limit and its chart come from the registration alone."""
    (copy / "pytest_gpucompat" / "checks" / "p99.py").write_text('''"""A made-up check: p99 latency under a limit.

PYTEST_DONT_REWRITE
"""

from typing import Any

from ..common.inputs import load_file
from ..common.paths import matrices_dir


def run(*args: object) -> None:
    return None


def limit(key: str, cell: Any) -> tuple[float, str] | None:
    limits = load_file(matrices_dir() / "matrices.yaml", "yaml").get("p99_limits", {})
    return (float(limits[cell.engine]), "p99 limit") if cell.engine in limits else None
''')
    anchor = "#: Every recorded figure"
    _edit(copy / "pytest_gpucompat" / "common" / "metrics.py", anchor, '''register(CheckKind(
    "p99", "p99 latency under a limit", run="pytest_gpucompat.checks.p99:run",
    metrics=(Metric("p99_latency_s", "lower", "s", "p99", "99th percentile latency", tolerance=0.2,
                    display=Display("p99 ", "duration")),),
    figures=(KeyFigure("p99_latency_s", "p99", "p99", 65),),
    limits=(LimitSource("p99", "pytest_gpucompat.checks.p99:limit", "p99_limits in matrices.yaml"),),
    charts=(Chart("p99", "against-limit", ("p99_latency_s",), "p99 latency against its limit", "One dot per cell.",
                  "share of the limit used", rank=45),),
))

''' + anchor)
    yaml = copy / "matrices" / "matrices.yaml"
    yaml.write_text(yaml.read_text() + "\np99_limits: {hf: 2.0}\n")
    out = _run(copy, """
from pytest_gpucompat.common.metrics import METRICS, KEY_FIGURES, markdown_table
from pytest_gpucompat.report.charts import charts_section
from pytest_gpucompat.report.figures import format_value, key_figures
from pytest_gpucompat.report.model import Report
from pytest_gpucompat.report.record import CellRecord
cell = {"nodeid": "s.py::t[hf]", "test": "t", "engine": "hf", "outcome": "passed", "runner": "r",
        "metrics": {"p99_latency_s": 1.0}}
report = Report.from_dict({"schema_version": 1, "tool_version": "0", "created": "x", "runners": {"r": {}},
                           "cells": [cell]})
section = charts_section(report)
print(METRICS["p99_latency_s"].better, "p99_latency_s" in markdown_table(), [f.metric for f in KEY_FIGURES][-2],
      [(f.limit, f.used) for f in key_figures(CellRecord.from_dict(cell))])
print(format_value("p99_latency_s", 0.012), "|", format_value("p99_latency_s", 1.5))
print('data-chart="p99"' in section, section.count('class="pt"'), "p99 latency against its limit" in section)
""")
    lines = out.splitlines()
    assert lines[0].split() == ["lower", "True", "p99_latency_s", "[(2.0,", "0.5)]"]
    assert lines[1:] == ["p99 12 ms | p99 1.5 s", "True 1 True"]
    # one module + one register block + one matrix block: no renderer, no diff, no figure code is edited
    assert _touched(copy) == ["pytest_gpucompat/checks/p99.py", "pytest_gpucompat/common/metrics.py",
                              "matrices/matrices.yaml"]
    assert (copy / "pytest_gpucompat" / "common" / "metrics.py").read_text().count("register(CheckKind(") == \
        (PACKAGE / "common" / "metrics.py").read_text().count("register(CheckKind(") + 1


def test_recipe_add_a_report_format(copy: Path, tmp_path: Path) -> None:
    """As "Add a report format" says: a renderer module and one line in FORMATS."""
    (copy / "pytest_gpucompat" / "report" / "tsv.py").write_text(
        '"""Cells as tab-separated lines.\n\nPYTEST_DONT_REWRITE\n"""\n\nfrom .model import Report\n\n\n'
        'def render_tsv(report: Report) -> str:\n'
        '    return "".join(f"{c.nodeid}\\t{c.outcome}\\n" for c in report.cells) or "\\n"\n')
    anchor = '    "junit": ("junit", "render_junit", "write JUnit XML here"),\n'
    _edit(copy / "pytest_gpucompat" / "report" / "cli.py", anchor,
          anchor + '    "tsv": ("tsv", "render_tsv", "write the cells as TSV here"),\n')
    report = ROOT / "docs" / "reports" / "h200-580.159.04-vllm-0.26.0.json"
    target = tmp_path / "out.tsv"
    _run(copy, f"import sys; from pytest_gpucompat.cli import main; sys.exit(main(['report', {str(report)!r}, "
               f"'--tsv', {str(target)!r}]))")
    lines = target.read_text().splitlines()
    assert lines and all(line.count("\t") == 1 for line in lines)


def test_recipe_add_an_option(copy: Path) -> None:
    """As "Add an option" says: four edits in options.py, then read from the run's Settings."""
    edits = [
        ("_OPTIONS = (\n",
         '_OPTIONS = (\n    Option("max-cells", metavar="N", type=int, default=7, help="at most N cells"),\n'),
        ('"gpu-wait", "gpu-budget")', '"gpu-wait", "gpu-budget", "max-cells")'),
        ("    gpu_budget: float = 0.9\n", "    gpu_budget: float = 0.9\n    max_cells: int = 7\n"),
        ('gpu_budget=float(opt("gpu-budget")),',
         'gpu_budget=float(opt("gpu-budget")), max_cells=int(opt("max-cells")),'),
    ]
    for old, new in edits:
        _edit(copy / "pytest_gpucompat" / "options.py", old, new)
    out = _run(copy, """
import argparse
from pytest_gpucompat.options import PYTEST, Settings, add_options
parser = argparse.ArgumentParser()
add_options(parser.add_argument, "gpucompat-", PYTEST)
args = parser.parse_args(["--gpucompat-max-cells", "3"])
class Config:
    rootpath = None
    def getoption(self, name, default=None):
        return getattr(args, name, default)
    def getini(self, name):
        return [] if name == "gpucompat_kb" else ""
print(Settings.from_pytest(Config()).max_cells)
""")
    assert out.strip() == "3"
