"""The isolated child's side: its entry point (own session, output to the log at fd level, dies with its parent),
the loop that answers the parent's calls, and what adapters and engine lives running inside it may use
(register_process_group, side_file, caches_filled).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..catalog.base import Engine, EngineFailed, EngineUnavailable
from ..catalog.loglines import exception_line
from ..catalog.params import Unsupported
from ..catalog.registry import engine_environment
from . import create
from .processes import append_log, death_signal_preexec, process_group, signal_group, state_dir

_CHILD: dict[str, Any] = {"conn": None, "log": None, "groups": [], "lock": threading.Lock()}


def register_process_group(pgid: int) -> None:
    """Called by an adapter that starts its own process group (e.g. a server with start_new_session=True). In an
    isolated child the group is killed with the child: by the child itself when its parent dies, and by the
    parent, which learns of it over the child's pipe (never from a file). Elsewhere a no-op."""
    conn = _CHILD["conn"]
    if conn is None:
        return
    group = process_group(int(pgid))
    with _CHILD["lock"]:
        _CHILD["groups"].append(group)
        with contextlib.suppress(OSError, ValueError):
            conn.send(("pgid", group))


def caches_filled() -> None:
    """Called by an engine life in an isolated child once its first engine has started and generated: what that
    engine compiled is in the caches on disk now, so the parent may let other workers waiting for the same
    configuration start from them (gpushare/first_start.py) while this child goes on. Elsewhere a no-op."""
    conn = _CHILD["conn"]
    if conn is None:
        return
    with _CHILD["lock"], contextlib.suppress(OSError, ValueError):
        conn.send(("filled", None))


def side_file(name: str, suffix: str = ".log") -> Path:
    """A file for an adapter's own output (a server's log, a config file): next to the isolated child's log
    ("<log>.<name><suffix>"), else a new file in this process's private directory."""
    if _CHILD["log"] is not None:
        return Path(f"{_CHILD['log']}.{name}{suffix}")
    fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=suffix, dir=state_dir())
    os.close(fd)
    return Path(path)


class OwnLog:
    """What was written to this isolated child's log (its stdout and stderr, which the processes an engine starts
    inherit) from now on: an adapter reads what its engine's own processes said while it started. Outside an
    isolated child there is no such log, and `text()` is empty."""

    def __init__(self) -> None:
        self._path = _CHILD["log"]
        self._start = 0
        if self._path is not None:
            with contextlib.suppress(OSError):
                sys.stdout.flush()
                sys.stderr.flush()
                self._start = os.path.getsize(self._path)

    def text(self, limit: int = 4 * 1024 * 1024) -> str:
        if self._path is None:
            return ""
        try:
            with open(self._path, "rb") as handle:
                handle.seek(self._start)
                return handle.read(limit).decode("utf-8", "replace")
        except OSError:
            return ""


def _die_with_parent(*_: Any) -> None:
    """Kill every group this child registered, then the child's own group (itself included)."""
    with contextlib.suppress(Exception):
        for group in list(_CHILD["groups"]):
            signal_group(group, signal.SIGKILL)
    if os.getpgid(0) == os.getpid():  # setsid() worked: the group is ours alone
        os.killpg(0, signal.SIGKILL)
    os._exit(1)


def _watch_parent(parent_pid: int, period_s: float = 0.2) -> None:
    """Watchdog thread: when the parent is gone (we were re-parented), kill what this child started."""
    while True:
        if os.getppid() != parent_pid:
            _die_with_parent()
        time.sleep(period_s)


def _redirect_output(log_path: str) -> None:
    fd = append_log(log_path)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    faulthandler.enable(file=sys.stderr, all_threads=True)


def child_main(conn: Any, engine_name: str, log_path: str, env: Mapping[str, str], parent_pid: int) -> None:
    """Entry point of the isolated child: own the engine, answer the parent's calls until shutdown."""
    with contextlib.suppress(OSError):
        os.setsid()
    # Die with the parent: SIGTERM from the kernel (or the parent's kill) runs the group kill; the watchdog covers
    # a parent that died before prctl and a main thread stuck where signal handlers do not run.
    signal.signal(signal.SIGTERM, _die_with_parent)
    set_death_signal = death_signal_preexec(signal.SIGTERM)
    if set_death_signal is not None:
        set_death_signal()
    if os.getppid() != parent_pid:
        _die_with_parent()
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="gpucompat-watchdog", daemon=True).start()
    _redirect_output(log_path)
    os.environ.update({str(k): str(v) for k, v in env.items()})
    _CHILD["conn"], _CHILD["log"] = conn, log_path
    print(f"[gpucompat] isolated child pid {os.getpid()} for engine {engine_name}", flush=True)
    for key, value in engine_environment().items():  # what configures the engines, in its log
        print(f"[gpucompat] {key}={value}", flush=True)
    engine: Engine | None = None
    while True:
        try:
            op, payload = conn.recv()
        except (EOFError, OSError):
            op, payload = "shutdown", None  # parent went away
        try:
            if op == "start":
                if engine is not None:
                    raise EngineFailed("engine already started in this process")
                engine = create(engine_name)
                result: Any = engine.start(payload)
            elif op == "generate":
                result = _require(engine).generate(*payload)
            elif op == "embed":
                result = _require(engine).embed(payload)
            elif op == "call":
                fn, args, kwargs = payload
                result = fn(*args, **kwargs)
            elif op == "shutdown":
                if engine is not None:
                    engine.shutdown()
                    engine = None
                result = None
            else:
                raise ValueError(f"unknown operation {op!r}")
            reply: tuple[str, Any] = ("ok", result)
        except Unsupported as exc:
            reply = ("unsupported", str(exc))
        except EngineUnavailable as exc:
            reply = ("unavailable", str(exc))
        except EngineFailed as exc:
            if exc.log_tail:
                print(exc.log_tail, file=sys.stderr, flush=True)
            reply = ("failed", exc.message)
        except BaseException as exc:  # noqa: BLE001 - every error must reach the parent as one line
            traceback.print_exc()
            sys.stderr.flush()
            reply = ("error", exception_line(exc))
        with _CHILD["lock"], contextlib.suppress(OSError, BrokenPipeError):
            conn.send(reply)
        if op == "shutdown":
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)


def _require(engine: Engine | None) -> Engine:
    if engine is None:
        raise EngineFailed("engine not started")
    return engine
