"""Data the report used to lose or garble: flagged findings, crashed workers' cells, two runs on one report path,
and failure reasons that were a fixture's repr (or xdist's worker banner) instead of the failure's own message."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_gpucompat.cli import main
from pytest_gpucompat.report.io import load_report
from pytest_gpucompat.report.junit import render_junit
from pytest_gpucompat.report.markdown import render_markdown


def cells_by_test(path):
    """``test_x[hf-n=1]`` -> cell: the test name and the cell id, without the module."""
    return {c["nodeid"].split("::", 1)[1]: c for c in json.loads(path.read_text())["cells"]}


def junit_cases(path):
    root = ET.fromstring(render_junit(load_report(path)))
    return {case.get("name"): case for case in root.iter("testcase")}


# --------------------------------------------------------------------------------- flagged findings (item 1)

def test_flagged_findings_land_in_the_report_whatever_the_phase(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.fixture
        def flags_at_teardown(gpucompat_flag):
            yield
            gpucompat_flag("late-fallback", "fell back at shutdown", severity="advice")

        @pytest.mark.gpucompat(engine="hf", params={"n": [1, 2]})
        def test_cell(gpucompat_cell, gpucompat_flag, flags_at_teardown):
            gpucompat_flag("sdpa-fallback", "attention fell back to the math kernel")
            assert gpucompat_cell.params["n"] == 1, "drifted after the fallback"
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json", "-W", "ignore::pytest.PytestWarning")
    result.assert_outcomes(passed=1, failed=1)
    cells = cells_by_test(pytester.path / "r.json")
    for cell in cells.values():  # the passed cell and the one that failed after flagging
        assert [f["id"] for f in cell["findings"]] == ["sdpa-fallback", "late-fallback"]
        assert cell["rules"] == []  # a finding measured in this run is not a knowledge-base rule
        assert cell["findings"][0].items() >= {"id": "sdpa-fallback", "severity": "degraded", "confidence": "verified",
                                               "summary": "attention fell back to the math kernel",
                                               "action": "annotate", "failure": "fallback"}.items()
    assert cells["test_cell[hf-n=2]"]["outcome"] == "failed"
    props = [p.get("value") for p in junit_cases(pytester.path / "r.json")["test_cell[hf-n=2]"].iter("property")
             if p.get("name") == "finding"]
    assert props == ["sdpa-fallback [degraded/verified/annotate]: attention fell back to the math kernel",
                     "late-fallback [advice/verified/annotate]: fell back at shutdown"]
    assert "sdpa-fallback" in render_markdown(load_report(pytester.path / "r.json"))


def test_flag_refuses_a_severity_the_report_cannot_hold(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
        def test_cell(gpucompat_cell, gpucompat_flag):
            gpucompat_flag("x", "y", severity="warning")
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json")
    result.assert_outcomes(failed=1)
    (cell,) = cells_by_test(pytester.path / "r.json").values()
    assert "severity must be one of broken, degraded, advice" in cell["reason"]


# --------------------------------------------------------------------------------- crashed workers (item 2)

def test_xdist_crashed_worker_keeps_the_cell_and_says_why(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile("""
        import os, signal, pytest

        @pytest.fixture
        def engine(gpucompat_cell):
            if gpucompat_cell.params["n"] == 3:  # dies while starting, before any report of this cell
                os.kill(os.getpid(), signal.SIGSEGV)

        @pytest.mark.gpucompat(engine="hf", params={"n": [1, 2, 3]})
        def test_cell(gpucompat_cell, engine):
            if gpucompat_cell.params["n"] == 2:
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = pytester.runpytest("--gpucompat", "-n", "1", "--gpucompat-report", "r.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    cells = cells_by_test(pytester.path / "r.json")
    assert [c["outcome"] for c in cells.values()] == ["passed", "failed", "failed"]
    killed, segv = cells["test_cell[hf-n=2]"], cells["test_cell[hf-n=3]"]
    assert (killed["engine"], killed["params"], killed["when"]) == ("hf", {"n": 2}, "call")
    assert (segv["engine"], segv["params"], segv["when"]) == ("hf", {"n": 3}, "setup")
    assert killed["reason"].startswith("worker crashed: gw") and "signal SIGKILL" in killed["reason"]
    assert segv["reason"].startswith("worker crashed: gw") and "signal SIGSEGV" in segv["reason"]
    message = junit_cases(pytester.path / "r.json")["test_cell[hf-n=3]"].find("failure").get("message")
    assert "worker crashed" in message and "SIGSEGV" in message


def test_xdist_crash_of_a_test_that_is_no_cell_adds_no_cell(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile("""
        import os, pytest

        def test_plain():
            os._exit(3)

        @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
        def test_cell(gpucompat_cell):
            pass
    """)
    pytester.runpytest("--gpucompat", "-n", "1", "--gpucompat-report", "r.json")
    assert list(cells_by_test(pytester.path / "r.json")) == ["test_cell[hf-n=1]"]


# --------------------------------------------------------------------------------- one report, one run (item 3)

def test_a_second_run_on_the_same_report_path_is_refused(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
        def test_cell(gpucompat_cell):
            pass
    """)
    with open(pytester.path / "r.json.lock", "w") as held:  # what the other run holds for its whole run
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        result = pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*gpucompat: r.json is being written by another run (pid 4242)*"])
    assert not (pytester.path / "r.json").exists()


def test_the_report_lock_is_held_for_the_whole_run_and_removed_after(pytester):
    pytester.makepyfile("""
        import fcntl, os, pytest

        @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
        def test_cell(gpucompat_cell):
            with open("r.json.lock") as lock:
                assert lock.read().strip() == str(os.getpid())
                with pytest.raises(BlockingIOError):
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    """)
    for _ in range(2):  # one run after another is fine
        result = pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json")
        result.assert_outcomes(passed=1)
        assert not (pytester.path / "r.json.lock").exists()


def test_two_concurrent_runs_on_one_report(pytester):
    pytester.makepyfile("""
        import os, time, pytest

        @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
        def test_cell(gpucompat_cell):
            open("started", "w").close()
            deadline = time.monotonic() + 30  # bounded: a second run that is not refused runs this too
            while not os.path.exists("second-done") and time.monotonic() < deadline:
                time.sleep(0.05)
    """)
    first = pytester.popen([sys.executable, "-m", "pytest", "--gpucompat", "--gpucompat-report", "r.json",
                            "-p", "no:cacheprovider"], stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (pytester.path / "started").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        second = pytester.runpytest_subprocess("--gpucompat", "--gpucompat-report", "r.json")
    finally:
        (pytester.path / "second-done").touch()
        first.communicate(timeout=120)
    assert second.ret == pytest.ExitCode.USAGE_ERROR
    second.stderr.fnmatch_lines([f"*r.json is being written by another run (pid {first.pid})*"])
    assert first.returncode == 0
    assert json.loads((pytester.path / "r.json").read_text())["cells"][0]["outcome"] == "passed"


# --------------------------------------------------------------------------------- the real cause (item 4)

REASONS = """
    import pytest

    @pytest.fixture
    def broken_device():
        raise RuntimeError("no such device")

    @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
    def test_message(gpucompat_cell):
        drift = 0.3
        assert drift <= 0.2, f"drift {drift} above 0.2"

    @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
    def test_compare(gpucompat_cell):
        x = 3
        assert x == 4

    @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
    def test_raises(gpucompat_cell):
        raise ValueError("bad logits")

    @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
    def test_fixture_error(gpucompat_cell, broken_device):
        pass

    @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
    def test_skips(gpucompat_cell):
        pytest.skip("no fp8 here")

    @pytest.mark.xfail(reason="known", strict=True)
    @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
    def test_xpass_strict(gpucompat_cell):
        pass
"""


@pytest.mark.parametrize("xdist", [False, True], ids=["in-process", "xdist"])
def test_the_reason_is_the_failure_s_own_message(pytester, xdist):
    args = ["-n", "1"] if xdist else []
    if xdist:
        pytest.importorskip("xdist")
    pytester.makepyfile(REASONS)
    pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json", *args)
    cells = {k.split("[")[0]: (c["outcome"], c["reason"]) for k, c in cells_by_test(pytester.path / "r.json").items()}
    assert cells == {
        "test_message": ("failed", "AssertionError: drift 0.3 above 0.2"),
        "test_compare": ("failed", "assert 3 == 4"),
        "test_raises": ("failed", "ValueError: bad logits"),
        "test_fixture_error": ("error", "RuntimeError: no such device"),
        "test_skips": ("skipped", "no fp8 here"),
        "test_xpass_strict": ("xpassed", "[XPASS(strict)] known"),
    }
    cases = junit_cases(pytester.path / "r.json")
    assert cases["test_message[hf-n=1]"].find("failure").get("message") == "AssertionError: drift 0.3 above 0.2"
    assert cases["test_fixture_error[hf-n=1]"].find("error").get("message") == "RuntimeError: no such device"
    markdown = render_markdown(load_report(pytester.path / "r.json"))
    assert "assert 3 == 4" in markdown and "gpucompat_cell = " not in markdown


def test_a_failure_reason_without_a_crash_location():
    """A repr without its crash location (one xdist could only send as text): the last block of pytest's ``E``
    lines; a plain message (``pytest.fail(pytrace=False)``, an engine's failure): its first line."""
    from pytest_gpucompat.session.collector import _failure_reason

    class Report:
        longrepr = "def t():\n>   f()\nE       KeyError: 'a'\n\nduring handling\nE   OSError: disk full\nE   more"

    assert _failure_reason(Report()) == "OSError: disk full"
    Report.longrepr = "vllm failed: exit 1\n--- vllm log, last lines ---\nINFO loading"
    assert _failure_reason(Report()) == "vllm failed: exit 1"


def test_series_per_cycle_reach_the_report(pytester: pytest.Pytester) -> None:
    """A figure per cycle (the memory suite's) is kept in the JSON report, valid against the schema, so it can be
    drawn."""
    import jsonschema

    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
        def test_cycles(gpucompat_cell, gpucompat_record_series):
            gpucompat_record_series("host_rss_mib", [100, 101.5, None, 103])
    """)
    pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json").assert_outcomes(passed=1)
    data = json.loads((pytester.path / "r.json").read_text())
    assert data["cells"][0]["series"] == {"host_rss_mib": [100.0, 101.5, None, 103.0]}
    schema = json.loads((Path(__file__).resolve().parent.parent / "pytest_gpucompat" / "report" / "schema.json")
                        .read_text())
    jsonschema.validate(data, schema)
    assert load_report(pytester.path / "r.json").cells[0].series == {"host_rss_mib": (100.0, 101.5, None, 103.0)}


@pytest.mark.parametrize("signal_name", ["KeyboardInterrupt", "SIGTERM"])
def test_cell_stopped_in_setup_is_in_the_report_as_interrupted(pytester, signal_name):
    """An engine start takes minutes: Ctrl-C or SIGTERM then arrives in a cell's setup, before its first report."""
    stop = "raise KeyboardInterrupt" if signal_name == "KeyboardInterrupt" else "os.kill(os.getpid(), signal.SIGTERM)"
    pytester.makepyfile(f"""
        import os, signal, time, pytest

        @pytest.fixture
        def engine(gpucompat_cell):
            if gpucompat_cell.params["n"] == 2:
                {stop}
                time.sleep(30)

        @pytest.mark.gpucompat(engine="hf", params={{"n": [1, 2, 3]}})
        def test_cell(gpucompat_cell, engine):
            pass
    """)
    result = pytester.runpytest_subprocess("--gpucompat", "--gpucompat-report", "r.json", timeout=120)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["interrupted"] is True
    cells = {c["nodeid"].split("::", 1)[1]: c for c in report["cells"]}
    assert list(cells) == ["test_cell[hf-n=1]", "test_cell[hf-n=2]", "test_cell[hf-n=3]"]
    never = cells["test_cell[hf-n=3]"]  # collected, never started: in the report as such, not missing
    assert (never["outcome"], never["reason"]) == ("error", "not run: the run was stopped before the cell started")
    stopped = cells["test_cell[hf-n=2]"]
    assert (stopped["outcome"], stopped["when"], stopped["engine"], stopped["params"]) == ("error", "setup", "hf",
                                                                                          {"n": 2})
    assert stopped["reason"].startswith("interrupted in setup")


# --------------------------------------------------------------------------------- runs that execute no cell

@pytest.mark.parametrize("argv", [("--co",), ("--collect-only", "-q"), ("-k", "matches_nothing"),
                                  ("--lf", "--lfnf", "none"), ("--co", "-n", "2")])
def test_a_run_that_executes_no_cell_keeps_the_existing_report(pytester, argv):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
        def test_cell(gpucompat_cell):
            pass
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json", "-p", "cacheprovider")
    result.assert_outcomes(passed=1)
    before = (pytester.path / "r.json").read_text()
    result = pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json", "-p", "cacheprovider", *argv)
    assert (pytester.path / "r.json").read_text() == before
    result.stdout.fnmatch_lines(["*gpucompat: no cell ran: the report r.json was left as it was*"])
    # a run that executes a cell replaces it as before
    pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json").assert_outcomes(passed=1)
    assert json.loads((pytester.path / "r.json").read_text())["created"] != "" and len(cells_by_test(
        pytester.path / "r.json")) == 1


def test_a_forked_test_child_never_writes_the_sessions_report(pytester):
    """A test that forks and whose child returns into pytest (it then runs the rest of the session on its own and
    ends after the session's process): only the session's process writes the report, so it matches the run."""
    pytester.makepyfile("""
        import os, time, pytest

        SESSION = os.getpid()

        @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
        def test_forks(gpucompat_cell):
            os.fork()  # the child carries on as if it were the session

        @pytest.mark.gpucompat(engine="hf", params={"n": [2]})
        def test_only_the_session(gpucompat_cell):
            if os.getpid() != SESSION:
                time.sleep(1.0)  # end after the session's process, as a straggler would
                pytest.fail("the child's run")
    """)
    result = pytester.runpytest_subprocess("--gpucompat", "--gpucompat-report", "r.json", "-p", "no:xdist",
                                           timeout=120)
    assert result.ret == 0
    time.sleep(1.5)  # the child has ended (its stdout is the run's: pytester waited for it too)
    report = json.loads((pytester.path / "r.json").read_text())
    outcomes = {c["nodeid"].split("::", 1)[1]: c["outcome"] for c in report["cells"]}
    assert outcomes == {"test_forks[hf-n=1]": "passed", "test_only_the_session[hf-n=2]": "passed"}
    assert report["exitstatus"] == 0


def test_an_internal_error_leaves_an_incomplete_report_that_says_so(pytester):
    """A test that closes fds 1 and 2 under -s ends the session in an internal error: the cells after it never ran,
    and the report says the run was stopped and lists them, so a diff does not call it clean."""
    pytester.makepyfile("""
        import os, pytest

        @pytest.mark.gpucompat(engine="hf", params={"n": [1, 2, 3]})
        def test_cell(gpucompat_cell):
            if gpucompat_cell.params["n"] == 2:
                os.close(1)
                os.close(2)
    """)
    pytester.runpytest_subprocess("-s", "--gpucompat", "--gpucompat-report", "r.json", "-p", "no:xdist", timeout=120)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["interrupted"] is True and report["exitstatus"] == int(pytest.ExitCode.INTERNAL_ERROR)
    outcomes = {c["nodeid"].split("::", 1)[1]: (c["outcome"], c.get("reason")) for c in report["cells"]}
    assert outcomes["test_cell[hf-n=1]"] == ("passed", None)
    assert outcomes["test_cell[hf-n=3]"] == ("error", "not run: the run was stopped before the cell started")
    assert main(["diff", str(pytester.path / "r.json"), str(pytester.path / "r.json")]) == 1


def test_a_huge_failure_message_is_bounded_in_the_report(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
        def test_big(gpucompat_cell):
            raise RuntimeError("x" * 10_000_000)
    """)
    pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json").assert_outcomes(failed=1)
    path = pytester.path / "r.json"
    (cell,) = json.loads(path.read_text())["cells"]
    assert path.stat().st_size < 100_000
    assert cell["reason"].startswith("RuntimeError: xxx") and cell["reason"].endswith("more characters]")
