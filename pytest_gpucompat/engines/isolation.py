"""Run an engine in a child process under timeouts, so a hang or a crash becomes a failed cell, not a stuck runner.

The child is a multiprocessing "spawn" process (no inherited CUDA state) that calls `os.setsid()` first, so the
child and everything it starts (vLLM workers, SGLang schedulers, servers) share one process group that can be
killed as a whole. Its stdout and stderr are redirected at the file-descriptor level to a log file, so C-level
logs and fatal-signal tracebacks (faulthandler) land there too; failures carry the last lines of that log and,
as their reason, the engine's own last error line.

What may be killed is known only in memory: the parent kills the groups it started and the groups its child
reported over their pipe, each checked against the /proc start time of its leader first (a file in a shared
directory could name any process). The child dies with its parent even on SIGKILL (PR_SET_PDEATHSIG and a
watchdog thread) and takes its own group and the groups it registered along. Logs and scratch files live in a
private directory (0700, ours) removed at exit, except logs of engines that failed.

Here: the parent side (IsolatedEngine, run_in_child) and the timeouts. Elsewhere: the child's side (child.py),
process groups, the private directory and the death signal (processes.py), failure messages (failures.py), the
session's pool of started engines (pool.py).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import atexit
import contextlib
import os
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..catalog.base import Engine, EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo
from ..catalog.params import Unsupported
from ..catalog.registry import canonical_name
from .child import child_main
from .failures import engine_failed, exit_status, failure_text, last_error, log_tail
from .processes import ProcessGroup, kill_groups, log_note, new_log, open_log, process_group

__all__ = ["IsolatedEngine", "Progress", "failure_text", "run_in_child"]

DEFAULT_START_TIMEOUT_S = 600.0
DEFAULT_CALL_TIMEOUT_S = 300.0
DEFAULT_SHUTDOWN_TIMEOUT_S = 60.0
HEARTBEAT_S = 30.0

Progress = Callable[[str], None]
"""Where start announcements and heartbeats go (one line each); None: nowhere."""


# --------------------------------------------------------------------------------------------------------------
# Parent side

_LIVE: weakref.WeakSet[IsolatedEngine] = weakref.WeakSet()
_ATEXIT_REGISTERED = False


def _kill_all_live() -> None:
    for engine in list(_LIVE):
        engine.kill()



class IsolatedEngine:
    """The Engine protocol, served by a child process; every call has a timeout.

    A hang kills the child's process group and raises EngineFailed("engine hung in <call>() after N s") with the
    log tail; a child killed by a signal raises EngineFailed("engine process died: SIGSEGV ..."); EngineUnavailable
    raised in the child is raised again here. After a hang or a death the instance is dead: every later call fails.
    `progress` hears a heartbeat every `heartbeat_s` while a call runs long; Ctrl-C (or SIGTERM turned into
    KeyboardInterrupt) during a call kills the child at once.
    """

    def __init__(
        self,
        engine: str,
        *,
        log_path: str | os.PathLike[str] | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
        env: Mapping[str, str] | None = None,
        term_grace_s: float = 2.0,
        progress: Progress | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        on_filled: Callable[[], None] | None = None,
    ) -> None:
        self.name = engine if ":" in engine else canonical_name(engine)
        self.on_filled = on_filled  # the child's caches_filled(): its first engine compiled what it compiles
        self.log_path = Path(log_path) if log_path is not None else new_log(self.name)
        self.start_timeout_s = float(start_timeout_s)
        self.call_timeout_s = float(call_timeout_s)
        self.shutdown_timeout_s = float(shutdown_timeout_s)
        self.term_grace_s = float(term_grace_s)
        self.progress = progress
        self.heartbeat_s = float(heartbeat_s)
        self._env = dict(env or {})
        self._proc: Any = None
        self._conn: Any = None
        self._dead: str | None = None
        self._groups: list[ProcessGroup] = []  # the child's own group, then the groups it registered
        self.run_info: RunInfo | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _spawn(self, env: Mapping[str, str]) -> None:
        global _ATEXIT_REGISTERED
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        try:
            open_log(self.log_path)
        except OSError as exc:  # a symlink, a FIFO or another user's file at the log's name
            where = f"{exc.filename}: " if exc.filename else ""
            raise EngineFailed(f"cannot open the engine log {where}{exc.strerror or exc}") from None
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=child_main,
            args=(child_conn, self.name, str(self.log_path), dict(env), os.getpid()),
            name=f"gpucompat-{self.name}",
            daemon=False,  # engines start their own subprocesses, which daemonic processes may not
        )
        proc.start()
        child_conn.close()
        assert proc.pid is not None  # set by start()
        self._proc, self._conn = proc, parent_conn
        self._groups = [process_group(proc.pid)]  # our unreaped child: its pid cannot be reused meanwhile
        _LIVE.add(self)
        if not _ATEXIT_REGISTERED:
            atexit.register(_kill_all_live)
            _ATEXIT_REGISTERED = True

    def start(self, spec: EngineSpec) -> RunInfo:
        """Spawn the child and start the engine in it."""
        if self._proc is None:
            env = dict(self._env)
            spec_env = spec.params.get("env") if isinstance(spec.params, Mapping) else None
            if isinstance(spec_env, Mapping):
                env.update({str(k): str(v) for k, v in spec_env.items()})
            self._spawn(env)
        elif self.run_info is not None:
            raise EngineFailed("isolated engine already started")
        try:
            info = self._call("start", spec, self.start_timeout_s, doing=f"starting {self.name}")
        except (EngineUnavailable, EngineFailed):
            self._stop_quietly()
            raise
        if not isinstance(info, RunInfo):
            self._stop_quietly()
            raise self._failure(f"engine start() returned {type(info).__name__}, not RunInfo", with_error=False)
        self.run_info = info
        return info

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        payload = ([list(p) for p in prompts], int(max_tokens), int(top_n))
        return list(self._call("generate", payload, self.call_timeout_s))

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        return list(self._call("embed", [list(p) for p in prompts], self.call_timeout_s))

    def shutdown(self) -> None:
        """Ask the engine to shut down, then make sure the whole process group is gone."""
        if self._proc is None:
            return
        if self._dead is None and self._proc.is_alive():
            with contextlib.suppress(EngineFailed, EngineUnavailable):
                self._call("shutdown", None, self.shutdown_timeout_s)
            self._proc.join(timeout=5.0)
        self.kill()

    def kill(self) -> None:
        """Kill the child's process group and the groups it registered: SIGTERM, a short grace, then SIGKILL."""
        proc = self._proc
        if proc is None:
            return
        self._drain()

        def signal_child(sig: int) -> None:  # before its setsid() the child is not in its group yet
            if proc.is_alive():
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, sig)

        kill_groups(self._groups, self.term_grace_s, alive=proc.is_alive, also=signal_child)
        proc.join(timeout=1.0)
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
        self._conn = None
        if self._dead is None:
            self._dead = "shut down"
        _LIVE.discard(self)

    def _stop_quietly(self) -> None:
        if self._dead is None and self._proc is not None and self._proc.is_alive():
            with contextlib.suppress(EngineFailed, EngineUnavailable):
                self._call("shutdown", None, min(self.shutdown_timeout_s, 30.0))
        self.kill()

    # -- plumbing ----------------------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Take the groups the child registered that are still in the pipe (it may be killed mid-start)."""
        conn = self._conn
        with contextlib.suppress(EOFError, OSError, ValueError):
            while conn is not None and conn.poll(0):
                message = conn.recv()
                if message[0] == "pgid" and isinstance(message[1], ProcessGroup):
                    self._groups.append(message[1])

    def _failure(self, status: str, with_error: bool = True) -> EngineFailed:
        return engine_failed(status, self.log_path, with_error=with_error)

    def _died(self, op: str) -> EngineFailed:  # op: the call's name as shown in messages
        proc = self._proc
        proc.join(timeout=2.0)
        reason = exit_status(proc.exitcode)
        self._dead = reason
        failure = self._failure(f"{reason} during {op}()")
        self.kill()
        self._dead = reason
        return failure

    def _heartbeat(self, doing: str, elapsed: float, timeout_s: float) -> None:
        if self.progress is not None:
            with contextlib.suppress(Exception):
                self.progress(f"still {doing} ({elapsed:.0f} s of {timeout_s:g} s){log_note(self.log_path)}")

    def _call(self, op: str, payload: Any, timeout_s: float, label: str | None = None,
              doing: str | None = None) -> Any:
        name = label or op
        if self._proc is None:
            raise EngineFailed(f"{name}() called before start()")
        if self._dead is not None:
            raise EngineFailed(f"{name}(): engine process is not running ({self._dead})", log_tail=log_tail(
                self.log_path), log_path=str(self.log_path))
        try:
            return self._exchange(op, payload, timeout_s, name, doing or f"waiting for {self.name} {name}()")
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the child is mid-call, nobody will wait for it
            self._dead = "interrupted"
            self.kill()
            raise

    def _exchange(self, op: str, payload: Any, timeout_s: float, name: str, doing: str) -> Any:
        try:
            self._conn.send((op, payload))
        except (BrokenPipeError, OSError):
            raise self._died(name) from None
        began = time.monotonic()
        deadline = began + timeout_s
        next_beat = began + self.heartbeat_s
        while True:
            now = time.monotonic()
            if now >= deadline:
                failure = self._failure(f"engine hung in {name}() after {timeout_s:g} s", with_error=False)
                self.kill()
                self._dead = f"hung in {name}()"
                raise failure
            if now >= next_beat:
                self._heartbeat(doing, now - began, timeout_s)
                next_beat += self.heartbeat_s
            try:
                ready = self._conn.poll(min(0.1, deadline - now))
            except (EOFError, OSError):
                raise self._died(name) from None
            if ready:
                try:
                    status, value = self._conn.recv()
                except (EOFError, OSError):
                    raise self._died(name) from None
                if status == "pgid":
                    self._groups.append(value)
                    continue
                if status == "filled":
                    if self.on_filled is not None:
                        with contextlib.suppress(OSError):  # the ledger unwritable: the others compile themselves
                            self.on_filled()
                    continue
                break
            if not self._proc.is_alive():
                self._drain()  # it may have answered just before exiting
                try:
                    if self._conn.poll(0):
                        status, value = self._conn.recv()
                        break
                except (EOFError, OSError):
                    pass
                raise self._died(name) from None
        if status == "ok":
            return value
        if status == "unsupported":
            raise Unsupported(str(value))
        if status == "unavailable":
            raise EngineUnavailable(str(value))
        if status == "failed":
            raise self._failure(str(value), with_error=False)
        raise self._failure(f"{name}() raised {self._raised(str(value))}", with_error=False)

    def _raised(self, value: str) -> str:
        """`AssertionError` alone says nothing: take the traceback's file:line and code line from the log."""
        if ":" in value:
            return value
        error = last_error(log_tail(self.log_path))
        return error if error and error.startswith(value) else value


def run_in_child(
    fn: Any,
    *args: Any,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    log_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    heartbeat_s: float = HEARTBEAT_S,
    on_filled: Callable[[], None] | None = None,
    **kwargs: Any,
) -> Any:
    """Run `fn(*args, **kwargs)` in a fresh spawned child (own process group, output to `log_path`) and return its
    result, with the same hang and crash handling as an isolated engine: a measurement that must belong to one
    process alone (memory cycles, a whole engine life) runs here. `fn` and its arguments must be picklable
    (a module-level function); EngineUnavailable raised in the child is raised again here. ``on_filled`` runs when
    the child says its first engine has compiled what it compiles (child.caches_filled)."""
    label = getattr(fn, "__name__", "call")
    runner = IsolatedEngine(f"{__name__}:_no_engine", log_path=log_path if log_path is not None else new_log(label),
                            env=env, call_timeout_s=timeout_s, progress=progress, heartbeat_s=heartbeat_s,
                            on_filled=on_filled)
    if progress is not None:
        progress(f"running {label}() in a child process (timeout {timeout_s:g} s){log_note(runner.log_path)}")
    runner._spawn(runner._env)
    try:
        return runner._call("call", (fn, args, kwargs), timeout_s, label=label, doing=f"running {label}()")
    finally:
        runner.shutdown()


def _no_engine() -> Engine:  # pragma: no cover - never started: run_in_child only sends "call"
    raise EngineFailed("no engine in a function child")
