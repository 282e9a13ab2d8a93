"""Process checks for the tests, read straight from /proc so they do not trust the code under test."""

from __future__ import annotations

import time


def dead(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet (a container's PID 1 may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] in ("Z", "X")
    except OSError:
        return True


def wait_dead(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if dead(pid):
            return True
        time.sleep(0.05)
    return dead(pid)
