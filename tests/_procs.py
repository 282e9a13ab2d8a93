"""Process checks for the tests, read straight from /proc so they do not trust the code under test."""

from __future__ import annotations

import signal
import time


def dead(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (a container's PID 1 may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def default_signals() -> None:
    """In a child before it runs pytest (``preexec_fn``): the signals' default dispositions, none blocked. A child
    inherits an ignored SIGINT (a shell's background job, a CI runner that ignores it) and Python then leaves it
    ignored: the run would not see the signal a test sends."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def wait_dead(pid: int, timeout: float = 60.0) -> bool:
    """Polled until the process is gone, for as long as a loaded machine may need (it ends as soon as it is)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dead(pid):
            return True
        time.sleep(0.05)
    return dead(pid)
