"""Load-proof measures for the tests whose point is "quick", "linear" or "no hang": CPU time, not wall-clock time.

A loaded machine stretches wall-clock time without bound (a process waits for a core while others run), but not
the CPU time a computation takes: that stays within a small factor (caches shared with the load). So a test that
means "this takes a fraction of a second" asserts a generous CPU-time budget, which a quadratic or exponential
blow-up still exceeds by far; a hang (a blocked read, a wait on something that never comes) uses no CPU, and is
caught by a wall-clock guard of HANG_S instead, far longer than any loaded machine needs and far shorter than a
hang.
"""

from __future__ import annotations

import resource
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

HANG_S = 120.0
"""Wall-clock seconds after which a call that should take well under one is taken for hung."""


class Cpu:
    """CPU seconds spent in a ``with cpu() as used:`` block: this process's (all its threads) and its children's that
    ended and were waited for in the block (a ``subprocess.run``)."""

    seconds: float = 0.0


def _now() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@contextmanager
def cpu() -> Iterator[Cpu]:
    used = Cpu()
    began = _now()
    try:
        yield used
    finally:
        used.seconds = _now() - began


def within(call: Callable[[], T], limit_s: float = HANG_S) -> T:
    """``call()``'s result, or a failure when it has not returned after ``limit_s`` wall-clock seconds (a hang: a
    blocked open or read). It runs in a daemon thread, so a hung call cannot hold the test forever."""
    done: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            done.append(call())
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still running after {limit_s:g} s: a hang"
    if failed:
        raise failed[0]
    return done[0]
