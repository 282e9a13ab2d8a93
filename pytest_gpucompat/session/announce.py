"""Saying what the harness does while a test waits (engine starts, child runs, heartbeats) without breaking
pytest's own output.

pytest writes a file's results as one line of ``.`` and ``F``; any line written in between ends that line, and the
next result starts a new one under the file's name again. So at default verbosity a quick engine start says
nothing, and a slow one says so *on the progress line itself*, once it has taken ``SLOW_START_S`` and again every
``REPEAT_S``: ``suites/test_smoke.py ... [waiting for vllm start: 10 s 40 s 70 s].`` (a wait of minutes must not look
like a hang, and the line of results stays one line). Where there is no progress line to write on (an xdist worker)
it is a compact line of its own ("gpucompat: waiting for vllm start (10 s)"). At ``-v`` every start is announced
in full (engine, model, parameters, timeout, log), as are the heartbeats of long calls.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

SLOW_START_S = 10.0  # a start taking longer than this is said at default verbosity
REPEAT_S = 30.0  # and again every this many seconds while it lasts


class Announcer:
    """The pool's and the child runner's ``progress``: a callable for plain lines, and ``engine_start`` for the
    engine pool (engines.pool.EnginePool), which decides by verbosity what a start says and when."""

    def __init__(self, write: Callable[[str], None], verbose: bool, slow_start_s: float = SLOW_START_S,
                 repeat_s: float = REPEAT_S, inline: Callable[[str], None] | None = None) -> None:
        self._write = write
        self._inline = inline  # writes on pytest's progress line, no newline (the main process's terminal)
        self.verbose = verbose
        self.slow_start_s = slow_start_s
        self.repeat_s = repeat_s
        self._lock = threading.Lock()  # the watcher thread and the main thread write one line at a time
        self._starting = 0  # engine starts under way (their heartbeats are the watcher's at default verbosity)

    @classmethod
    def for_config(cls, config: pytest.Config) -> Announcer:
        """Through the terminal reporter in the main process (``write_line`` ends pytest's progress line first),
        on stderr in an xdist worker, which has no terminal (the controller's terminal shares that stream);
        shown even with output capture on."""
        capman = config.pluginmanager.get_plugin("capturemanager")
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        worker = getattr(config, "workerinput", None)

        def write(text: str) -> None:
            disabled = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
            with disabled:
                if reporter is not None and worker is None:
                    reporter.write_line(f"gpucompat: {text}")
                else:
                    prefix = f"[{worker.get('workerid', 'worker')}] " if isinstance(worker, dict) else ""
                    stream: Any = sys.__stderr__
                    if stream is not None:
                        stream.write(f"{prefix}gpucompat: {text}\n")
                        stream.flush()

        def inline(text: str) -> None:
            assert reporter is not None  # inline is used only with a terminal reporter
            disabled = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
            with disabled:
                reporter.write(text, flush=True)

        on_line = inline if reporter is not None and worker is None else None
        return cls(write, verbose=(config.option.verbose or 0) >= 1, slow_start_s=SLOW_START_S, repeat_s=REPEAT_S,
                   inline=on_line)

    def __call__(self, text: str) -> None:
        """A line: a child run's announcement, a heartbeat of a long call. A heartbeat of an engine start is
        left to the start's watcher below at default verbosity (one compact line instead of the full one)."""
        if self._starting and not self.verbose:
            return
        with self._lock:
            self._write(text)

    @contextlib.contextmanager
    def engine_start(self, engine: str, text: str) -> Iterator[None]:
        """Held while ``engine`` starts; ``text`` is the full announcement. At ``-v`` it is said at once; otherwise
        a watcher thread says "waiting for ENGINE start: N s" only once the start is slow (on the progress line
        where there is one). The thread writes
        while the main thread waits for the engine (which writes nothing to the terminal), and it has stopped
        writing before the main thread goes on."""
        if self.verbose:
            self(text)
            yield
            return
        done = threading.Event()
        said: list[bool] = []  # the watcher has written: an inline note is closed with "]"
        watcher = threading.Thread(target=self._watch, args=(engine, time.monotonic(), done, said), daemon=True,
                                   name="gpucompat-start-watcher")
        self._starting += 1
        watcher.start()
        try:
            yield
        finally:
            with self._lock:  # a line being written is finished; none is begun after this
                done.set()
                if said and self._inline is not None:
                    with contextlib.suppress(Exception):
                        self._inline("]")
            self._starting -= 1
            watcher.join()

    def _watch(self, engine: str, began: float, done: threading.Event, said: list[bool]) -> None:
        wait = self.slow_start_s
        while not done.wait(wait):
            with self._lock:
                if done.is_set():
                    return
                seconds = f"{time.monotonic() - began:.0f} s"
                with contextlib.suppress(Exception):  # a closed terminal must not kill the start it watches
                    if self._inline is None:
                        self._write(f"waiting for {engine} start ({seconds})")
                    else:
                        self._inline(f" {seconds}" if said else f" [waiting for {engine} start: {seconds}")
                    said.append(True)
            wait = self.repeat_s
