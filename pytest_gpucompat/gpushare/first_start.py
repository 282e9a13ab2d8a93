"""Compile once, then share: the first start of a configuration fills its compile caches, the others wait for it.

Engines compile kernels at their first start (vLLM's torch.compile and CUDA-graph capture, Triton and JIT kernels)
into caches on disk keyed by the configuration (``catalog.params.compile_key``: engine, release, model, the settings
that key its caches, as its descriptor's ``CompileCache`` says). When several workers sharing a GPU start the same
configuration from empty caches at once, each compiles the same kernels, on CPU cores they share; with one start
compiling and the others starting from what it wrote, they all start sooner.

The run's ledger holds one ``FirstStart`` per key: claimed by the first worker that wants it, held while its start
runs, marked filled when it ends (then nobody waits for it again), dropped when it fails (the next worker that wants
the key runs its own first start) or when its worker dies (``State.reclaim``, as for reservations). A worker that
finds the key held by another waits for it, polling, at most ``timeout_s``; then it starts without waiting (compiling
itself, as without this gate): a slow compile costs time, never a cell.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from .ledger import FirstStart, Ledger

POLL_S = 0.2


@dataclass(frozen=True)
class Turn:
    """What one start found for its configuration: ``first`` (it fills the caches), how long it waited for another
    worker's first start (``waited_s``) and for what (``waited_for``: what that start was, with its worker), and
    ``gave_up`` when it stopped waiting after the timeout."""

    key: str
    first: bool
    waited_s: float = 0.0
    waited_for: str | None = None
    gave_up: bool = False

    def to_dict(self) -> dict[str, object]:
        """The cell's record of it (``compile_caches`` among its notes)."""
        out: dict[str, object] = {"configuration": self.key, "first_start": self.first,
                                  "waited_s": round(self.waited_s, 3)}
        if self.waited_for is not None:
            out["waited_for"] = self.waited_for
        if self.gave_up:
            out["gave_up_waiting"] = True
        return out


class FirstStarts:
    """One worker's side of the run's first starts (``ledger``: the run's ledger with this worker as holder)."""

    def __init__(self, ledger: Ledger, timeout_s: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, say: Callable[[str], None] | None = None) -> None:
        self.ledger, self.timeout_s, self.say = ledger, float(timeout_s), say
        self.clock, self.sleep = clock, sleep
        self._filled: set[str] = set()  # known filled: asked of the ledger no more
        self.turns: list[Turn] = []
        """What this worker's starts found since the current test began (the sharing side clears it per test)."""

    @contextlib.contextmanager
    def first(self, key: str | None, what: str) -> Iterator[Callable[[], None]]:
        """Around a start of the configuration ``key`` (None: one that compiles nothing, which waits for nobody):
        waits for another worker's first start of it (``claim``), then runs the block; when this start is the first,
        the key is marked filled when the block ends, or earlier when it calls what it is given (an engine life in a
        child process says so after its first generation, not at the end of its cycles), and given up if the block
        raises before."""
        if key is None:
            yield _nothing
            return
        turn = self.claim(key, what)
        self.turns.append(turn)
        done = not turn.first

        def fill() -> None:
            nonlocal done
            if not done:
                done = True
                self.filled(key)

        try:
            yield fill
        except BaseException:
            if not done:
                done = True
                self.abandon(key)
            raise
        fill()

    def claim(self, key: str, what: str) -> Turn:
        """Wait while another live worker runs the first start of ``key``; then either this start is the first (the
        key is claimed for this worker until ``filled`` or ``abandon``) or the caches are filled."""
        began = self.clock()
        waited_for: str | None = None
        if key in self._filled:
            return Turn(key, first=False)
        while True:
            with self.ledger.changing() as state:
                found = state.first_starts.get(key)
                if found is None:
                    state.first_starts[key] = FirstStart(self.ledger.holder, what, self.ledger.clock())
                    return Turn(key, True, self.clock() - began, waited_for)
                if found.filled or found.holder == self.ledger.holder:
                    if found.filled:
                        self._filled.add(key)
                    return Turn(key, False, self.clock() - began, waited_for)
                if waited_for is None and self.say is not None:  # one line, so a waiting worker is not taken for hung
                    self.say(f"{what} waits for the first start of its configuration to fill the compile caches: "
                             f"{found.what} (pid {found.holder.partition(':')[0]}), up to {self.timeout_s:g} s")
                waited_for = f"{found.what} (pid {found.holder.partition(':')[0]})"
            if self.clock() - began >= self.timeout_s:
                return Turn(key, False, self.clock() - began, waited_for, gave_up=True)
            self.sleep(POLL_S)

    def filled(self, key: str) -> None:
        """This worker's first start of ``key`` has finished: the caches are filled, nobody waits for it again."""
        with self.ledger.changing() as state:
            found = state.first_starts.get(key)
            if found is not None and found.holder == self.ledger.holder:
                state.first_starts[key] = replace(found, filled=True)
        self._filled.add(key)

    def abandon(self, key: str) -> None:
        """This worker's first start of ``key`` failed: the next worker that wants the configuration runs its own."""
        with self.ledger.changing() as state:
            found = state.first_starts.get(key)
            if found is not None and found.holder == self.ledger.holder and not found.filled:
                del state.first_starts[key]


def _nothing() -> None:
    """What a start that compiles nothing is given to call: nothing to mark."""


def calling_each(fills: list[Callable[[], None]]) -> Callable[[], None]:
    """One call that marks every one of ``fills`` (the first starts of several engines' lives in one child)."""
    def fill() -> None:
        for one in fills:
            one()

    return fill
