"""SIGTERM handled like Ctrl-C: what CI systems and `timeout` send first must still leave a report and no engines.

pytest already turns KeyboardInterrupt into an interrupted session (report written with `interrupted: true`,
session fixtures torn down, engine children killed); a SIGTERM handler that raises KeyboardInterrupt in the main
thread gives SIGTERM the same path. Installed at configure (main process and xdist workers), the previous handler
restored at unconfigure.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

_previous = pytest.StashKey[Any]()
_received: list[str] = []
"""The signals that stopped this session, in order: the report says `interrupted` from this, whatever a second or
third Ctrl-C did to pytest's own handling of the first (it could end the session as an internal error, and the
report then said the cell's "worker died")."""


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    _received.append(signal.Signals(signum).name)
    raise KeyboardInterrupt(f"gpucompat: received {signal.Signals(signum).name}")


def received() -> str | None:
    """The first signal that stopped this session (SIGINT, SIGTERM), or None."""
    return _received[0] if _received else None


def install(config: pytest.Config) -> None:
    """Turn SIGTERM into KeyboardInterrupt for this session, as Ctrl-C is, and remember either (signal handlers can
    only be set in the main thread). A SIGINT handler someone else installed is left alone."""
    if threading.current_thread() is not threading.main_thread() or _previous in config.stash:
        return
    _received.clear()
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)}
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        previous[signal.SIGINT] = signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    config.stash[_previous] = previous


def uninstall(config: pytest.Config) -> None:
    """Give the signals back to whoever had them before the session."""
    previous = config.stash.get(_previous, None)
    if previous is None or threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    del config.stash[_previous]


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends (then they are delivered as usual): the final report is written
    whole or not started, never cut in the middle and lost. Main thread only (elsewhere a no-op).

    The handlers are swapped for one that only notes the signal, rather than the signals masked: a process-directed
    signal goes to any thread that does not block it, and another plugin's thread (a rerun or timeout plugin's) did
    not, so a mask on the main thread alone still let Python run the raising handler there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def note(signum: int, frame: Any) -> None:
        pending.append(signum)

    previous = {signum: signal.signal(signum, note) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for noted in dict.fromkeys(pending):
            signal.raise_signal(noted)
