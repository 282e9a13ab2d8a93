"""docs/extending.md kept true: its map against the tree, and its recipes performed in a copy of the package."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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


def _section(title: str) -> str:
    """The text of one section of docs/extending.md, from its heading to the next."""
    start = DOC.index(f"\n## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end if end != -1 else len(DOC)]


_COUNTS = {"One": 1, "Two": 2, "Three": 3, "Four": 4, "Five": 5}


def _count_said(section: str, what: str = "files") -> int:
    """How many files (or edits) a recipe says it takes: its first "Two files" ("Four edits")."""
    found = re.search(rf"\b({'|'.join(_COUNTS)})\s+{what[:-1]}s?\b", section)
    assert found is not None, f"docs/extending.md: the recipe does not say how many {what} it takes"
    return _COUNTS[found.group(1)]


def _files_said(section: str) -> tuple[int, list[str]]:
    """What a recipe's first paragraph says it touches: its count ("Two files: ...") and the files it names."""
    head = section.split("\n\n")[1]
    assert re.match(r"\w+ files?\b", head), f"docs/extending.md: the recipe does not open with its count: {head[:80]!r}"
    return _count_said(head), re.findall(r"`((?:pytest_gpucompat/|docs/)[\w/.-]+)`", head)


def _code_blocks(section: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _touched(copy: Path) -> set[str]:
    """The files of the copy's package, matrices and docs that differ from the tree's, or are new: what a recipe
    touched."""
    out = set()
    for path in (p for folder in ("pytest_gpucompat", "matrices", "docs") for p in (copy / folder).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            rel = path.relative_to(copy)
            original = ROOT / rel
            if not original.is_file() or original.read_bytes() != path.read_bytes():
                out.add(str(rel))
    return out


def _cli(root: Path, *args: str, code: int = 0) -> str:
    done = subprocess.run([sys.executable, "-m", "pytest_gpucompat.cli", *args], cwd=root, capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin",
                                                      "COLUMNS": "200"})
    assert done.returncode == code, (args, done.stdout[-2000:], done.stderr[-2000:])
    return done.stdout


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
    assert _touched(copy) == {"pytest_gpucompat/checks/p99.py", "pytest_gpucompat/common/metrics.py",
                              "matrices/matrices.yaml"}
    assert _count_said(_section("Add a kind of check")) == 2
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
    assert _touched(copy) == {"pytest_gpucompat/report/tsv.py", "pytest_gpucompat/report/cli.py"}
    assert _count_said(_section("Add a report format")) == 2


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
    section = _section("Add an option")
    assert _touched(copy) == {"pytest_gpucompat/options.py"} and "all in `options.py`" in section
    assert _count_said(section, "edits") == len(edits)
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


def test_the_descriptor_table_names_every_field() -> None:
    """"Add an engine" documents each field of `EngineDescriptor`, and only those."""
    from dataclasses import fields

    from pytest_gpucompat.catalog.registry import EngineDescriptor

    table = re.findall(r"^\| `(\w+)` \|", _section("Add an engine"), re.M)
    assert sorted(table) == sorted(f.name for f in fields(EngineDescriptor))


def test_recipe_add_an_engine(copy: Path) -> None:
    """As "Add an engine" says: the adapter module and one registration, both as the recipe writes them; then the
    command lists the engine, rules name it, a marker's matrix parametrizes it and a run runs its cells."""
    section = _section("Add an engine")
    count, files = _files_said(section)
    adapter, registration = _code_blocks(section)
    name = re.search(r'name="(\w+)"', registration).group(1)  # type: ignore[union-attr]
    (copy / "pytest_gpucompat" / "engines" / f"{name}.py").write_text(adapter)
    registry = copy / "pytest_gpucompat" / "catalog" / "registry.py"
    registry.write_text(registry.read_text() + "\n" + registration)
    assert _touched(copy) == {f.replace("NAME", name) for f in files} and len(files) == count

    assert f"{name}, or none" in _cli(copy, "rules", "--help")  # the engines rules may name
    rules = copy / "rules.yaml"
    rules.write_text(f"""rules:
  - id: {name}-step-2-breaks
    summary: step 2 breaks
    severity: broken
    failure: crash
    confidence: upstream
    sources: [{{kind: doc, ref: docs/extending.md}}]
    engine: {name}
    when: {{params: {{step: [2]}}}}
""")
    assert f"{name}-step-2-breaks" in _cli(copy, "rules", "--kb", str(rules), "--no-builtin-rules", "--engine", name)
    model = copy / "model"
    model.mkdir()
    (model / "config.json").write_text('{"vocab_size": 50}')
    (copy / "test_new_engine.py").write_text(f"""
import sys

import pytest

@pytest.mark.gpucompat(engine="{name}", params={{"step": [1, 2, 3]}})
def test_generate(gpucompat_cell, gpucompat_engine):
    (out,) = gpucompat_engine.engine.generate([[5, 6, 48]], 3, 1)
    assert gpucompat_engine.info.engine == "{name}" and out.token_ids[0] == (48 + gpucompat_cell.params["step"]) % 50
    assert "pytest_gpucompat.engines.{name}" not in sys.modules  # not in_process: the adapter runs in a child
""")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "-rs",
         "--gpucompat", "--gpucompat-model", str(model), "--gpucompat-kb", str(rules), "--gpucompat-report",
         "r.json", "test_new_engine.py"],
        cwd=copy, capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    cells = {c["nodeid"].split("[")[1].rstrip("]").split("-", 1)[1]: c  # the model's name, then the engine's
             for c in json.loads((copy / "r.json").read_text())["cells"]}
    assert {k: c["outcome"] for k, c in cells.items()} == {
        f"{name}-step=1": "passed", f"{name}-step=2": "skipped", f"{name}-step=3": "passed"}
    assert cells[f"{name}-step=1"]["engine"] == name and f"{name}-step-2-breaks" in done.stdout


def _example_when_keys(kb_doc: Path) -> set[str]:
    """The `when` keys of docs/knowledge-base.md's rule file example."""
    text = kb_doc.read_text()
    block = re.search(r"## A rule file\n\n```yaml\n(.*?)```", text, re.S)
    assert block is not None, "docs/knowledge-base.md: the rule file example moved"
    return set(yaml.safe_load(block.group(1))["rules"][0]["when"])


def test_the_rule_file_example_shows_every_condition() -> None:
    from pytest_gpucompat.kb.load import _WHEN_KEYS

    assert _example_when_keys(ROOT / "docs" / "knowledge-base.md") == _WHEN_KEYS


def _rules_with(field: str) -> str:
    """A rule file whose rules test `when.FIELD` (a version of the runner): a problem and advice where it is 3.12,
    a problem where it is below 3, and an engine's rule that lint checks against the engine's releases."""
    rules = [("new-field-problem", "broken", "crash", f'{field}: ">=3.0"', ""),
             ("new-field-advice", "advice", "none", f'{field}: ">=3.12"', ""),
             ("new-field-elsewhere", "broken", "crash", f'{field}: "<3.0"', ""),
             ("new-field-engine", "degraded", "slow",
              f'{field}: ">=3.0", packages: {{vllm: ">=0.10,<0.12"}}, params: {{enforce_eager: [true]}}', "vllm")]
    return "rules:\n" + "".join(
        f"  - {{id: {rid}, summary: {rid}, severity: {severity}, failure: {failure}, confidence: upstream,\n"
        f"     sources: [{{kind: doc, ref: docs/extending.md}}], engine: {engine or 'null'}, when: {{{when}}}}}\n"
        for rid, severity, failure, when, engine in rules)


def test_recipe_add_a_rule_field(copy: Path) -> None:
    """As "Add a rule field" says for a version the fingerprint records: its field in kb/schema.py and its line in
    docs/knowledge-base.md; then a rule with it loads, matches and does not (the index as the reference, and
    `contradiction`), lints, and `gpucompat check` and `gpucompat rules` say it."""
    section = _section("Add a rule field")
    count, files = _files_said(section)
    field = re.search(r'`when\.(\w+): "', section).group(1)  # type: ignore[union-attr]
    package = copy / "pytest_gpucompat"
    (copy / "docs").mkdir()
    shutil.copy(ROOT / "docs" / "knowledge-base.md", copy / "docs" / "knowledge-base.md")
    line = f"{field}: SpecifierSet | None = None"  # the recipe's one line of code
    assert f"`{line}`" in section, f"docs/extending.md, Add a rule field: the recipe no longer says `{line}`"
    anchor = "    env: tuple[tuple[str, tuple[str | None, ...], bool], ...] = ()\n"
    _edit(package / "kb" / "schema.py", anchor, anchor + f"    {line}\n")
    example = copy / "docs" / "knowledge-base.md"
    anchor = '      cuda_runtime: ">=12.1,<12.2"              # CUDA version the installed stack was built for\n'
    _edit(example, anchor, anchor + f'      {field}: ">=3.13"' + " " * (34 - len(field)) + "# the runner's version\n")
    assert _touched(copy) == set(files) and len(files) == count
    keys = _run(copy, "from pytest_gpucompat.kb.load import _WHEN_KEYS; print(' '.join(sorted(_WHEN_KEYS)))")
    assert _example_when_keys(example) == set(keys.split()) and field in keys.split()

    rules = copy / "rules.yaml"
    rules.write_text(_rules_with(field))
    fingerprint = copy / "runner.yaml"
    fingerprint.write_text(f"name: runner\ndriver: '580.1'\n{field}: '3.12.3'\n")
    kb = ("--kb", str(rules), "--no-builtin-rules")
    out = _cli(copy, "check", "--env", str(fingerprint), *kb, code=0)
    assert "new-field-problem" in out and f"this runner: {field.replace('_', ' ')} 3.12.3" in out
    assert "new-field-advice" in out and f"when: {field.replace('_', ' ')} >=3.12" in out
    assert "new-field-elsewhere" not in out
    assert f"when: {field.replace('_', ' ')} <3.0" in _cli(copy, "rules", *kb, "new-field-elsewhere")
    assert "1 rules checked against the engines' release history" in _cli(copy, "rules", *kb, "--lint")
    rules.write_text(_rules_with(field).replace('"<3.0"', '"three"', 1))
    done = subprocess.run([sys.executable, "-m", "pytest_gpucompat.cli", "rules", *kb], cwd=copy, text=True,
                          capture_output=True, timeout=60, env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"})
    assert done.returncode != 0 and "new-field-elsewhere" in done.stderr and f"when.{field}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    rules.write_text(_rules_with(field))
    agree = _run(copy, f"""
from pytest_gpucompat.kb import Facts, load_kb, rule_matches
from pytest_gpucompat.kb.index import matching_rules
from pytest_gpucompat.kb.match import contradiction
from pytest_gpucompat.machine.fingerprint import Fingerprint
kb = load_kb([{str(rules)!r}], builtin=False)
for version in ("3.12.3", "2.7.18", "4.0", None):
    fp = Fingerprint(name="r", {field}=version)
    reference = [r.id for r in kb.rules if rule_matches(r, Facts.of(fp), None, {{}})]
    assert [r.id for r in matching_rules(kb, fp)] == reference, (version, reference)
    print(version, ",".join(reference) or "-", contradiction(kb.rules[0], Facts.of(fp), None, {{}}))
""")
    assert agree.splitlines() == [
        "3.12.3 new-field-problem,new-field-advice None", "2.7.18 new-field-elsewhere when." + field,
        "4.0 new-field-problem,new-field-advice None", "None - None"]
