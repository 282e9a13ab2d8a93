"""What a run says and keeps about its engines: a line per start (with capture on), a heartbeat, every log kept
with --gpucompat-log-dir, otherwise only failed engines' logs (named in the failure), and a validated timeout."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

CHILD_RUNS = """
import pytest


def quick(value):
    print("quick child says", value)
    return value * 2


def broken():
    raise ValueError("broken measurement")


@pytest.mark.gpucompat(engine="hf", params={"n": [1]})
def test_quick(gpucompat_cell, gpucompat_isolated):
    assert gpucompat_isolated(quick, 21) == 42


@pytest.mark.gpucompat(engine="hf", params={"n": [2]})
def test_broken(gpucompat_cell, gpucompat_isolated):
    gpucompat_isolated(broken)
"""


@pytest.mark.parametrize("value", ["nan", "0", "-5", "inf"])
def test_timeout_must_be_a_positive_number(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--gpucompat", f"--gpucompat-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: gpucompat: --gpucompat-timeout: must be a positive number of seconds, "
                                 f"got '{value}'"])
    assert "Traceback" not in result.stderr.str()


def test_log_dir_keeps_every_log_and_starts_are_announced(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # the inner run is no xdist worker: its logs say "main"
    pytester.makepyfile(test_child_runs=CHILD_RUNS)
    result = pytester.runpytest_subprocess("--gpucompat", "--gpucompat-log-dir", "logs", "--gpucompat-timeout",
                                           "120", "--gpucompat-report", "r.json")
    result.assert_outcomes(passed=1, failed=1)
    logs = sorted((pytester.path / "logs").iterdir())
    assert [re.sub(r"-[0-9a-f]{10}-", "-H-", p.name) for p in logs] == ["broken-H-main-1.log", "quick-H-main-1.log"]
    assert "quick child says 21" in logs[1].read_text()
    result.stdout.fnmatch_lines([f"gpucompat: running quick() in a child process (timeout 120 s), log: {logs[1]}"])
    result.stdout.fnmatch_lines(["*broken failed: broken() raised ValueError: broken measurement*",
                                 f"--- log {logs[0]}, last lines ---"])


def test_ini_log_dir(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ngpucompat = true\ngpucompat_log_dir = kept-logs\n")
    pytester.makepyfile(test_child_runs=CHILD_RUNS)
    pytester.runpytest_subprocess("-k", "quick").assert_outcomes(passed=1)
    assert len(list((pytester.path / "kept-logs").glob("quick-*.log"))) == 1


def test_without_log_dir_only_failed_logs_are_kept(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_child_runs=CHILD_RUNS)
    result = pytester.runpytest_subprocess("--gpucompat", "--gpucompat-report", "r.json")
    result.assert_outcomes(passed=1, failed=1)
    # a set: with CI set in the environment pytest repeats the whole message in its short summary
    (kept,) = set(re.findall(r"^--- log (\S+), last lines ---$", result.stdout.str(), re.MULTILINE))
    kept_log = Path(kept)
    assert "broken measurement" in kept_log.read_text()
    assert [p.name for p in kept_log.parent.iterdir()] == [kept_log.name]  # quick()'s log is gone
    # quick()'s log was removed at exit: its progress line names none (a path that is gone misleads)
    result.stdout.fnmatch_lines(["gpucompat: running quick() in a child process (timeout 600 s)"])
    assert ", log: " not in "".join(line for line in result.stdout.lines if "running quick()" in line)
    cells = {c["nodeid"].split("::")[1]: c for c in json.loads((pytester.path / "r.json").read_text())["cells"]}
    assert cells["test_broken[hf-n=2]"]["reason"].startswith("broken failed: broken() raised ValueError")
    kept_log.unlink()
    kept_log.parent.rmdir()


def _deep_check(blocks: int) -> None:
    if blocks <= 0:  # a bare `assert`, as an engine's module has it (pytest rewrites asserts in tests only)
        raise AssertionError


def test_an_exception_without_a_message_says_where_it_was_raised() -> None:
    """A bare `assert` deep in an engine (vLLM 0.26 with an fp8_e5m2 KV cache on an H200) said only
    "AssertionError": the cell must say which line of which module."""
    from pytest_gpucompat.catalog.loglines import exception_line

    try:
        _deep_check(0)
    except AssertionError as exc:
        line = exception_line(exc)
    assert re.fullmatch(r"AssertionError at (tests/)?test_engine_logs\.py:\d+: raise AssertionError", line), line
    assert exception_line(ValueError("bad value\nmore")) == "ValueError: bad value"
