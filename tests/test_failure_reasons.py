"""A failed cell's reason says what failed: the cause lines of a multi-line exception are kept, bounded."""

from __future__ import annotations


def test_a_failure_whose_first_line_is_only_a_header_keeps_the_cause() -> None:
    from pytest_gpucompat.catalog.loglines import exception_line

    exc = ValueError("1 validation error for ModelConfig\n  max_model_len\n    Value error, User-specified "
                     "max_model_len (9999) is greater than the derived max_model_len (512). [type=value_error]\n"
                     "    For further information visit https://errors.pydantic.dev/2.12/v/value_error")
    text = exception_line(exc)
    assert text.startswith("ValueError: 1 validation error for ModelConfig: max_model_len; Value error, ")
    assert "derived max_model_len (512)" in text and "pydantic.dev" not in text and "\n" not in text
    assert exception_line(RuntimeError("plain first line\nsecond")) == "RuntimeError: plain first line"
    assert len(exception_line(ValueError("3 validation errors for X\n" + "\n".join(["y" * 300] * 6)))) < 700


def test_a_sigterm_during_the_final_report_write_waits_for_the_whole_file(pytester) -> None:  # type: ignore[no-untyped-def]
    """The signal arrives while the report is being written: the file is whole, every cell in it (also with
    another plugin's thread in the process, as pytest-rerunfailures has: a signal mask on the main thread alone let
    the signal through there)."""
    import json

    pytester.makeconftest('''
import os, signal, time
import pytest_gpucompat.report.io as io

_real = io.write_report_atomic

def _interrupted_write(report, path):
    os.kill(os.getpid(), signal.SIGTERM)  # what CI's timeout sends, right when the final write starts
    time.sleep(0.3)
    return _real(report, path)

io.write_report_atomic = _interrupted_write
''')
    pytester.makepyfile(test_cells='''
import pytest

@pytest.mark.gpucompat(engine="hf", params={"a": ["a1", "a2", "a3"]})
def test_cell(gpucompat_cell):
    pass
''')
    pytester.runpytest_subprocess("--gpucompat", "--gpucompat-report", "r.json", "-p", "no:cacheprovider",
                                  timeout=120)
    report = json.loads((pytester.path / "r.json").read_text())
    assert [c["outcome"] for c in report["cells"]] == ["passed"] * 3


def test_repeated_ctrl_c_still_leaves_a_report_that_says_the_run_was_stopped(pytester) -> None:  # type: ignore[no-untyped-def]
    """Three quick Ctrl-C in a cell: the report says interrupted, and the cell "was stopped", not "worker died"."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from _procs import default_signals

    pytester.makepyfile(test_slow='''
import time, pytest

@pytest.mark.gpucompat(engine="hf", params={"a": ["a1", "a2"]})
def test_cell(gpucompat_cell):
    print("started", flush=True)
    time.sleep(30)
''')
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "--gpucompat", "--gpucompat-report", "r.json", "-p",
                             "no:cacheprovider", "-q", "-s"], cwd=pytester.path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, preexec_fn=default_signals)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # ends at the cell's start, or at EOF when the run ends first (failed below)
            if "started" in line:
                break
        assert proc.poll() is None, "the run ended before its cell started"
        for _ in range(3):  # apart, or the kernel would merge them into one pending signal
            proc.send_signal(signal.SIGINT)
            time.sleep(0.02)
        proc.communicate(timeout=120)
    finally:
        proc.kill()
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["interrupted"] is True
    assert [c["reason"] for c in report["cells"]] == ["did not finish: the run was stopped before the cell ended",
                                                      "not run: the run was stopped before the cell started"]
