"""The GPU reservations of one run's pytest-xdist workers on one host, kept in a small file they all change.

The controller makes a private directory and hands it to its workers (xdist's workerinput); the ledger is a JSON
file there, read and rewritten only under an exclusive ``fcntl.flock`` of a lock file beside it. Every entry
names its worker as pid and process start time, so the entries of a worker that died (killed, crashed) are
reclaimed by the next reader instead of holding their GPU for the rest of the run. Waiting polls, with a
deadline: a request that does not fit in time raises ``GpuWaitTimeout`` with the reason in one line, never hangs.

The same file keeps the run's first starts (``first_start.py``): which configuration's compile caches a worker is
filling, so that the others wait for them instead of compiling the same kernels at once.

Beside it, a start gate per GPU (another flock, released by the kernel when its holder dies): engine starts and
shutdowns on one GPU happen one at a time, because engines size themselves from the device's free memory while
they start (vLLM charges whatever another process allocates or frees meanwhile to its own profile).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..common import jsontext
from ..common.files import PRIVATE_MODE, write_atomic
from ..common.inputs import read_bytes
from ..machine.procfs import start_time
from .packing import Request, blocker, describe_requests, stalled

LEDGER = "ledger.json"
POLL_S = 0.2
STALL_S = 60.0
"""How long every waiting worker must have waited on one another before one gives up: longer than an engine's
shutdown, during which a worker waits while it still holds the room it is freeing."""


class GpuWaitTimeout(Exception):
    """A cell waited longer than ``--gpucompat-gpu-wait`` for room on its GPU; the message says what held it."""


def holder_id(pid: int | None = None) -> str:
    """``"pid:start-time"`` of a process (this one by default): stays unique when the pid is reused."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{start_time(pid)}"


def holder_alive(holder: str) -> bool:
    """Whether the process an entry names still runs: same pid, same start time (where /proc can tell)."""
    pid_text, _, start = holder.partition(":")
    try:
        pid = int(pid_text)
    except ValueError:
        return False
    now = start_time(pid)
    if now is not None:
        return start == "None" or str(now) == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive, and not ours to judge
        return True
    return start == "None"


@dataclass(frozen=True)
class FirstStart:
    """A configuration's first start (its compile-cache key, ``catalog.params.compile_key``): the worker that runs it
    (``holder``, reclaimed when it dies before the caches are filled), what it starts, since when (wall clock), and
    whether it has finished (``filled``: later starts of the configuration wait for nobody)."""

    holder: str
    what: str
    since: float
    filled: bool = False


@dataclass
class State:
    """What the ledger file holds: the entries, the workers of the run (members), when each holder last
    released an engine on each GPU (to tell whether a cell ran beside other engines), and the first starts of the
    configurations by compile-cache key."""

    entries: list[Request] = field(default_factory=list)
    members: list[str] = field(default_factory=list)
    released: dict[str, dict[str, float]] = field(default_factory=dict)
    next_ticket: int = 1
    first_starts: dict[str, FirstStart] = field(default_factory=dict)

    @classmethod
    def from_json(cls, text: str) -> State:
        try:
            data = json.loads(text) if text.strip() else {}
        except ValueError:  # never written half (os.replace), but a stranger's file must not stop the run
            data = {}
        if not isinstance(data, dict):
            data = {}
        entries = []
        for row in data.get("entries") or []:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                entries.append(Request(
                    id=str(row["id"]), holder=str(row["holder"]), gpus=tuple(map(str, row["gpus"])),
                    mib=None if row["mib"] is None else float(row["mib"]), what=str(row["what"]),
                    ticket=int(row["ticket"]), held=bool(row["held"]), since=float(row["since"])))
        released = {str(g): {str(h): float(t) for h, t in (v or {}).items()}
                    for g, v in (data.get("released") or {}).items()}
        first_starts = {}
        for key, row in (data.get("first_starts") or {}).items():
            with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
                first_starts[str(key)] = FirstStart(holder=str(row["holder"]), what=str(row["what"]),
                                                    since=float(row["since"]), filled=bool(row["filled"]))
        return cls(entries, [str(m) for m in data.get("members") or []], released,
                   int(data.get("next_ticket") or 1), first_starts)

    def to_json(self) -> str:
        return jsontext.dumps({"entries": [asdict(e) for e in self.entries], "members": self.members,
                               "released": self.released, "next_ticket": self.next_ticket,
                               "first_starts": {k: asdict(v) for k, v in self.first_starts.items()}})

    def reclaim(self, alive: Callable[[str], bool]) -> None:
        """Drop the entries and memberships of workers that are gone, and the first starts they had not finished
        (the next worker that wants the configuration runs it)."""
        holders = {e.holder for e in self.entries} | set(self.members)
        holders |= {f.holder for f in self.first_starts.values() if not f.filled}
        dead = {h for h in holders if not alive(h)}
        if dead:
            self.entries = [e for e in self.entries if e.holder not in dead]
            self.members = [m for m in self.members if m not in dead]
            self.first_starts = {k: f for k, f in self.first_starts.items() if f.filled or f.holder not in dead}


class Ledger:
    """One worker's handle on the run's ledger in ``directory`` (``holder``: this worker; ``clock``, ``sleep`` and
    ``alive`` can be replaced to test waiting and reclaiming without waiting)."""

    def __init__(self, directory: str | os.PathLike[str], holder: str | None = None, *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 alive: Callable[[str], bool] = holder_alive) -> None:
        self.directory = Path(directory)
        self.holder = holder or holder_id()
        self.clock, self.sleep, self.alive = clock, sleep, alive

    @contextlib.contextmanager
    def _locked(self) -> Iterator[State]:
        """The state, read under the lock and written back unless the block raised."""
        path = self.directory / LEDGER
        fd = os.open(self.directory / "ledger.lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                state = State.from_json(read_bytes(path).decode("utf-8", "replace"))
            except FileNotFoundError:
                state = State()
            state.reclaim(self.alive)
            yield state
            # mkstemp, never a predictable name: a link planted there would receive the ledger (files.py)
            write_atomic(path, state.to_json(), mode=PRIVATE_MODE)
        finally:
            os.close(fd)  # releases the flock

    def changing(self) -> contextlib.AbstractContextManager[State]:
        """The state to read and change, under the lock, written back when the block ends without raising."""
        return self._locked()

    def snapshot(self) -> State:
        with self._locked() as state:
            return state

    def join(self) -> None:
        """Count this worker among the run's processes (their GPU memory is not a stranger's)."""
        with self._locked() as state:
            if self.holder not in state.members:
                state.members.append(self.holder)

    def enqueue(self, gpus: Sequence[str], mib: float | None, what: str) -> str:
        """Take a place in the queue for ``mib`` MiB (None: the whole GPU) of each of ``gpus``; returns its id."""
        with self._locked() as state:
            entry = Request(id=uuid.uuid4().hex, holder=self.holder, gpus=tuple(gpus), mib=mib, what=what,
                            ticket=state.next_ticket, since=self.clock())
            state.next_ticket += 1
            state.entries.append(entry)
            return entry.id

    def try_take(self, entry_id: str, budgets: Mapping[str, float | None]) -> str | None:
        """Hold the queued entry if it fits now (None), else say why not."""
        with self._locked() as state:
            me = next((e for e in state.entries if e.id == entry_id), None)
            if me is None:
                return "its place in the queue was lost (reclaimed as a dead worker's?)"
            if me.held:
                return None
            reason = blocker(state.entries, me, budgets)
            if reason is None:
                state.entries = [replace(e, held=True, since=self.clock()) if e.id == entry_id else e
                                 for e in state.entries]
            return reason

    def _stalled_on(self, entry_id: str, budgets: Mapping[str, float | None]) -> list[Request]:
        """The stalled waiting requests (packing.stalled) when this entry is the latest of them, else none: exactly
        one worker of a stall gives up, and its engines, no longer in use, make room for the others."""
        cycle = stalled(self.snapshot().entries, budgets)
        return cycle if cycle and max(cycle, key=lambda r: r.ticket).id == entry_id else []

    def release(self, entry_id: str) -> None:
        """Give a held entry back (or leave the queue); a held one is remembered as released now."""
        with self._locked() as state:
            gone = [e for e in state.entries if e.id == entry_id]
            state.entries = [e for e in state.entries if e.id != entry_id]
            for entry in gone:
                if entry.held:
                    for gpu in entry.gpus:
                        state.released.setdefault(gpu, {})[entry.holder] = self.clock()

    def reserve(self, gpus: Sequence[str], mib: float | None, what: str,
                budgets: Callable[[], Mapping[str, float | None]], timeout_s: float,
                make_room: Callable[[], bool] = lambda: False) -> str:
        """Wait until ``mib`` of each of ``gpus`` fits and hold it; returns the entry's id for ``release``.

        While it does not fit, ``make_room()`` may free some of this worker's own idle reservations (it returns
        False when it has nothing left to free); then it waits, polling, until ``timeout_s`` have passed and raises
        GpuWaitTimeout with the last reason."""
        entry_id = self.enqueue(gpus, mib, what)
        deadline = self.clock() + timeout_s
        stalled_since: float | None = None
        try:
            while True:
                reason = self.try_take(entry_id, budgets())
                if reason is None:
                    return entry_id
                if make_room():
                    continue
                now = self.clock()
                if now >= deadline:
                    raise GpuWaitTimeout(f"no room on the GPU for {what} after waiting {timeout_s:g} s "
                                         f"(--gpucompat-gpu-wait): {reason}")
                cycle = self._stalled_on(entry_id, budgets())
                stalled_since = (stalled_since or now) if cycle else None
                if cycle and stalled_since is not None and now - stalled_since >= STALL_S:
                    raise GpuWaitTimeout(f"no room on the GPU for {what}: every worker holding room there waits "
                                         f"too ({describe_requests(cycle)}), so none would give it back; this one "
                                         f"gives up after {STALL_S:g} s: {reason}")
                self.sleep(POLL_S)
        except BaseException:
            self.release(entry_id)
            raise


class StartGate:
    """Engine starts and shutdowns on each GPU of a worker, across the run's workers (flock; reentrant within a
    process), as a readers-writer lock. A start that sizes its cache from what it measures on the GPU (vLLM's memory
    profiling, SGLang's and TensorRT-LLM's fractions of free memory) needs the GPU quiet: it holds the gate alone
    (``quiet=True``), since anything another worker allocates or frees meanwhile would be counted as its own. Every
    other start or shutdown (an engine given its cache size, transformers loading weights) only keeps such a start
    out, so they overlap one another. A wait longer than ``timeout_s`` raises GpuWaitTimeout naming who holds it."""

    def __init__(self, directory: str | os.PathLike[str], gpus: Sequence[str], timeout_s: float, *,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.directory = Path(directory)
        self.gpus = tuple(sorted(set(gpus)))  # one order for every worker: no two wait on each other
        self.timeout_s = timeout_s
        self.clock, self.sleep = clock, sleep
        self._fds: list[int] = []
        self._depth = 0

    def _path(self, gpu: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in gpu)
        return self.directory / f"gate-{safe}.lock"

    @contextlib.contextmanager
    def held(self, what: str, quiet: bool = True) -> Iterator[None]:
        """Hold the gate for ``what``: alone when ``quiet`` (no other start or shutdown on these GPUs meanwhile),
        else beside other holders that are not quiet. Nested, the outer hold decides (never upgraded: two holders
        upgrading at once would wait on each other)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        try:
            for gpu in self.gpus:
                self._fds.append(self._acquire(gpu, what, quiet))
            self._depth = 1
            yield
        finally:
            self._depth = 0
            while self._fds:
                os.close(self._fds.pop())

    def _acquire(self, gpu: str, what: str, quiet: bool) -> int:
        fd = os.open(self._path(gpu), os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        deadline = self.clock() + self.timeout_s
        mode = fcntl.LOCK_EX if quiet else fcntl.LOCK_SH
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                if self.clock() >= deadline:
                    holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "another worker"
                    os.close(fd)
                    raise GpuWaitTimeout(f"{what}: waited {self.timeout_s:g} s (--gpucompat-gpu-wait) for {gpu}, "
                                         f"where {holder} is starting or stopping an engine") from None
                self.sleep(POLL_S / 4)
                continue
            except BaseException:
                os.close(fd)
                raise
            if quiet:  # the one holder: its name for whoever waits (shared holders would overwrite each other)
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"pid {os.getpid()} ({what})".encode(), 0)
            return fd
