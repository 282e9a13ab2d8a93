"""Installed but not asked for, the plugin costs a run nothing beyond its entry points: a pytest run without
``--gpucompat`` imports only the modules that register the options, the marker, the hook specifications and the
fixtures, registers no hook of a run, and pytest assertion-rewrites none of the package's modules. (How much that
costs in instructions and CPU is bench/run.py's, never a timed test's.)"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pytest_gpucompat

PACKAGE = Path(pytest_gpucompat.__file__).resolve().parent
ENTRY_POINTS = {"pytest_gpucompat", "pytest_gpucompat.plugin", "pytest_gpucompat.fixtures",
                "pytest_gpucompat.options", "pytest_gpucompat.hooks"}

PROBE = textwrap.dedent('''
    import json
    import os
    import sys


    def pytest_unconfigure(config):
        mods = sorted(m for m in sys.modules if m.split(".")[0] == "pytest_gpucompat")
        with open(os.environ["PROBE_OUT"], "w") as f:
            json.dump({"modules": mods,
                       "rewritten": [m for m in mods if "@py_builtins" in vars(sys.modules[m])],
                       "run_hooks": config.pluginmanager.has_plugin("gpucompat-run")}, f)
''')


def _run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                                                    dict[str, object]]:
    """A whole pytest process in ``tmp_path`` with the probe plugin; what it saw at the end."""
    (tmp_path / "gpucompat_probe.py").write_text(PROBE)
    out = tmp_path / "probe.json"
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    full_env.update({"PROBE_OUT": str(out), "GPUCOMPAT_RUNNER": "t",
                     "PYTHONPATH": os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]),
                     **(env or {})})
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "gpucompat_probe",
                           *args], cwd=tmp_path, env=full_env, capture_output=True, text=True, timeout=300)
    return proc, json.loads(out.read_text()) if out.exists() else {}


SUITE = textwrap.dedent("""
    import pytest

    @pytest.mark.parametrize("a", range(3))
    def test_plain(a):
        assert a < 3

    @pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
    def test_cell(gpucompat_cell):
        pass
""")


def test_off_imports_the_entry_points_only(tmp_path: Path) -> None:
    (tmp_path / "test_a.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for env in ({}, {"PYTHONDONTWRITEBYTECODE": "1"}):
        proc, seen = _run(tmp_path, "-rs", env=env)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "3 passed, 1 skipped" in proc.stdout
        assert "run pytest with --gpucompat" in proc.stdout  # the matrix test says why it did not run
        assert set(seen["modules"]) <= ENTRY_POINTS, seen["modules"]  # type: ignore[arg-type]
        assert seen["rewritten"] == [] and seen["run_hooks"] is False


def test_off_imports_no_process_library(tmp_path: Path) -> None:
    """psutil (the process table: trees, start times) is the run's process checks' alone: a run without
    ``--gpucompat`` never loads it."""
    (tmp_path / "test_a.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text("import sys\n\n\ndef pytest_unconfigure(config):\n"
                                          "    open('psutil-seen.txt', 'w').write(str('psutil' in sys.modules))\n")
    proc, _ = _run(tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (tmp_path / "psutil-seen.txt").read_text() == "False"


@pytest.mark.parametrize("how", ["option", "ini"])
def test_on_loads_the_run_and_rewrites_nothing(tmp_path: Path, how: str) -> None:
    (tmp_path / "test_a.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n" + ("gpucompat = true\n" if how == "ini" else ""))
    proc, seen = _run(tmp_path, *(["--gpucompat"] if how == "option" else []))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "4 passed" in proc.stdout
    assert seen["run_hooks"] is True
    assert "pytest_gpucompat.kb" in seen["modules"]  # type: ignore[operator]
    assert seen["rewritten"] == []


def test_on_when_loaded_after_the_initial_conftests(tmp_path: Path) -> None:
    """Loaded with ``-p`` and no entry points (PYTEST_DISABLE_PLUGIN_AUTOLOAD), the run's hooks are registered at
    configure instead, and the run is the same."""
    (tmp_path / "test_a.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    proc, seen = _run(tmp_path, "-p", "pytest_gpucompat.plugin", "-p", "pytest_gpucompat.fixtures", "--gpucompat",
                      env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "4 passed" in proc.stdout and seen["run_hooks"] is True


def test_conftest_wrappers_stay_around_the_plugins_hooks(pytester: pytest.Pytester) -> None:
    """The run's hooks are registered where the module's own were, before the initial conftests: a conftest's
    ``pytest_runtest_makereport`` wrapper still sees the report with the cell's payload attached."""
    pytester.makeconftest("""
        import pytest

        SEEN = []

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            if report.when == "setup":
                SEEN.append([k for k, _ in report.user_properties])
            return report

        def pytest_terminal_summary(terminalreporter):
            terminalreporter.write_line(f"seen={SEEN}")
    """)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("--gpucompat", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["seen=[[], [], [], ['gpucompat']]"])


def test_every_module_opts_out_of_assertion_rewriting() -> None:
    """pytest rewrites every module of a package that a plugin's entry point names; these are no tests, and their
    asserts only narrow types. Each module's docstring says PYTEST_DONT_REWRITE (pytest's own opt-out)."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if doc is None or "PYTEST_DONT_REWRITE" not in doc:
            missing.append(str(path.relative_to(PACKAGE)))
    assert missing == []
