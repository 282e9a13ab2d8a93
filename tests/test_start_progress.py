"""Engine starts are said without splitting pytest's line of results: nothing for a quick start at default
verbosity, a note on the line of results once a start is slow, one full line per start at -v."""

from __future__ import annotations

import re
import textwrap
import threading
import time
from collections.abc import Callable

import pytest
from conftest import requires

from pytest_gpucompat.session.announce import Announcer

SUITE = textwrap.dedent("""
    import pytest

    def test_before():
        pass

    @pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32", "bfloat16"]})
    def test_generate(gpucompat_cell, gpucompat_engine):
        out = gpucompat_engine.engine.generate([[5, 6, 7]], 2, 1)
        assert len(out[0].token_ids) == 99, "on purpose"

    @pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
    def test_again(gpucompat_cell, gpucompat_engine):
        gpucompat_engine.engine.generate([[5, 6, 7]], 2, 1)
""")


def test_a_quick_start_says_nothing_and_the_results_stay_on_one_line(pytester: pytest.Pytester) -> None:
    requires("transformers")
    pytester.makepyfile(test_starts=SUITE)
    result = pytester.runpytest("--gpucompat", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    assert "starting hf" not in out and "waiting for" not in out
    results = [line for line in result.outlines if line.startswith("test_starts.py ")]
    assert len(results) == 1 and re.match(r"test_starts\.py \.FF\. ", results[0]), results


def test_a_slow_start_is_said_on_the_line_of_results(pytester: pytest.Pytester) -> None:
    """A start slower than the threshold (here made 0 s) adds its note to the line of results, which stays one."""
    requires("transformers")
    pytester.makepyfile(test_starts=SUITE)
    pytester.makeconftest("import pytest_gpucompat.session.announce as a\na.SLOW_START_S = 0.0\n")
    result = pytester.runpytest("--gpucompat", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=2)
    results = [line for line in result.outlines if line.startswith("test_starts.py ")]
    assert len(results) == 1, result.outlines
    note = r" \[waiting for hf start: \d+ s[^\]]*\]"
    assert re.match(rf"test_starts\.py \.{note}F{note}F\.", results[0]), results
    assert "gpucompat: waiting" not in result.stdout.str()


def test_verbose_says_one_full_line_per_start(pytester: pytest.Pytester) -> None:
    requires("transformers")
    pytester.makepyfile(test_starts=SUITE)
    result = pytester.runpytest("--gpucompat", "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2, failed=2)
    starts = [line for line in result.outlines if line.startswith("gpucompat: starting hf on ")]
    assert len(starts) == 2  # float32 (shared by test_again) and bfloat16
    assert "dtype='float32'" in starts[0] and "dtype='bfloat16'" in starts[1]
    assert all(line.endswith("(in this process)") for line in starts)


# ---------------------------------------------------------------------------------------------- the announcer


def test_a_slow_start_says_a_compact_line_then_one_per_repeat() -> None:
    said: list[str] = []
    announce = Announcer(said.append, verbose=False, slow_start_s=0.1, repeat_s=0.15)
    with announce.engine_start("vllm", "starting vllm on m {dtype='fp8'} (timeout 600 s), log: x.log"):
        announce("still starting vllm (30 s of 600 s), log: x.log")  # a heartbeat: the watcher's lines say it
        _until(lambda: len(said) >= 2)
    # joined when the start ends, not left behind: nothing can be said after it (no sleep needed to see that)
    assert not any(t.name == "gpucompat-start-watcher" for t in threading.enumerate())
    assert len(said) >= 2 and all(re.fullmatch(r"waiting for vllm start \(\d+ s\)", s) for s in said), said


def test_a_quick_start_says_nothing() -> None:
    said: list[str] = []
    announce = Announcer(said.append, verbose=False, slow_start_s=5.0)
    with announce.engine_start("hf", "starting hf on m (in this process)"):
        pass
    announce("running measure() in a child process (timeout 30 s), log: m.log")  # not a start: said as before
    assert said == ["running measure() in a child process (timeout 30 s), log: m.log"]


def test_verbose_says_the_full_line_and_every_heartbeat() -> None:
    said: list[str] = []
    announce = Announcer(said.append, verbose=True, slow_start_s=0.0)
    with announce.engine_start("vllm", "starting vllm on m (timeout 600 s), log: x.log"):
        announce("still starting vllm (30 s of 600 s), log: x.log")
    assert said == ["starting vllm on m (timeout 600 s), log: x.log", "still starting vllm (30 s of 600 s), log: x.log"]


def _until(done: Callable[[], bool], limit_s: float = 60.0) -> None:
    """Poll until `done()`, for as long as a loaded machine may need (the wait ends as soon as it holds)."""
    deadline = time.monotonic() + limit_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failed_write_does_not_stop_the_start() -> None:
    """The watcher survives a terminal that fails: it tries again at the next heartbeat, and the start goes on."""
    tried: list[str] = []

    def broken(text: str) -> None:
        tried.append(text)
        raise OSError("terminal gone")

    announce = Announcer(broken, verbose=False, slow_start_s=0.01, repeat_s=0.01)
    with announce.engine_start("vllm", "starting"):
        _until(lambda: len(tried) >= 3)
    assert len(tried) >= 3 and tried[0].startswith("waiting for vllm start ("), tried


def test_a_slow_start_is_said_on_the_progress_line_itself() -> None:
    """With a progress line to write on (the main process's terminal) the waiting note goes on it, no newline:
    `... [waiting for vllm start: 0 s 0 s]` and the next result follows on the same line."""
    lines: list[str] = []
    inline: list[str] = []
    announce = Announcer(lines.append, verbose=False, slow_start_s=0.1, repeat_s=0.15, inline=inline.append)
    with announce.engine_start("vllm", "starting vllm on m"):
        _until(lambda: len(inline) >= 2)
    assert lines == [] and "\n" not in "".join(inline)
    assert re.fullmatch(r" \[waiting for vllm start: \d+ s( \d+ s)+\]", "".join(inline)), inline
    with announce.engine_start("hf", "starting hf"):
        pass
    assert inline[-1] == "]" and len(inline) >= 3  # a quick start adds nothing
