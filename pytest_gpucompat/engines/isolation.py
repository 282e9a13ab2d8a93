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
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import hashlib
import math
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import IN_PROCESS_ENGINES, Unsupported, canonical_name, create, missing_module, one_line
from .base import Engine, EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo

DEFAULT_START_TIMEOUT_S = 600.0
DEFAULT_CALL_TIMEOUT_S = 300.0
DEFAULT_SHUTDOWN_TIMEOUT_S = 60.0
HEARTBEAT_S = 30.0
LOG_TAIL_LINES = 40

Progress = Callable[[str], None]
"""Where start announcements and heartbeats go (one line each); None: nowhere."""


def positive_seconds(text: str | float) -> float:
    """A timeout as given on the command line: a positive finite number of seconds (nan, inf, 0, -5 are not)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"must be a positive number of seconds, got {str(text)!r}")
    return value


def log_tail(path: str | os.PathLike[str] | None, n: int = LOG_TAIL_LINES, max_bytes: int = 256 * 1024) -> str:
    """The last `n` lines of a log file (reading at most `max_bytes` from its end); "" when it does not exist."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:]) if n > 0 else ""


# --------------------------------------------------------------------------------------------------------------
# The engine's own last error, from its log

# Prefixes loggers put before each line of a traceback: vLLM "(EngineCore_DP0 pid=12) " and
# "ERROR 01-02 03:04:05 [core.py:12] ", SGLang "[2025-01-02 03:04:05 TP0] ", ANSI colours.
_LOG_PREFIXES = re.compile(
    r"^(?:\x1b\[[0-9;]*m|\([\w.-]+ pid=\d+\)\s*|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d"
    r"(?:\.\d+)?\s+\[[^\]]*\]\s?|\[\d{4}-\d\d-\d\d[^\]]*\]\s?)+"
)
_EXCEPTION_LINE = re.compile(
    r"^(?P<name>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault|Dead|Timeout)\w*)"
    r"(?::\s*(?P<message>.*))?$"
)
_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_SEE_ABOVE = re.compile(r"see (?:the )?root cause above|see (?:the )?(?:error|logs?) above", re.IGNORECASE)
_PACKAGE_ROOT = re.compile(r"^.*/(?:site|dist)-packages/")


def _strip_prefix(line: str) -> str:
    return _LOG_PREFIXES.sub("", line.rstrip())


def last_error(tail: str) -> str | None:
    """The last Python exception line in a log tail ("ModuleNotFoundError: No module named 'uvicorn'"), or None.

    An exception that only points elsewhere ("... See root cause above.") gives way to an earlier one; an exception
    without a message (a bare `assert`) is named with the failing frame's file:line and code line, the only
    place that says what failed."""
    lines = [_strip_prefix(line) for line in tail.splitlines()]
    found: list[tuple[int, str, str]] = []
    for i, line in enumerate(lines):
        match = _EXCEPTION_LINE.match(line)
        if match:
            found.append((i, match.group("name"), (match.group("message") or "").strip()))
    if not found:
        return None
    chosen = next((f for f in reversed(found) if not _SEE_ABOVE.search(f[2])), found[-1])
    i, name, message = chosen
    if message:
        return f"{name}: {message}"
    for j in range(i - 1, -1, -1):
        frame = _FRAME_LINE.match(lines[j])
        if frame:
            where = f"{_PACKAGE_ROOT.sub('', frame.group('file'))}:{frame.group('line')}"
            code = lines[j + 1].strip() if j + 1 < i else ""
            code = "" if _FRAME_LINE.match(code) or set(code) <= set("^~ ") else code
            return f"{name} at {where}: {code}" if code else f"{name} at {where}"
    return name


def failure_reason(status: str, tail: str) -> str:
    """What a failed cell says: the engine's own last error with the process status after it, or the status."""
    error = last_error(tail)
    return f"{error} ({status})" if error and error not in status else status


def exit_status(code: int | None, who: str = "engine process") -> str:
    """`engine process died: SIGSEGV`, `server exited with status 1`, from a return code (negative: a signal)."""
    if code is None:
        return f"{who} stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{who} died: {name}"
    return f"{who} exited with status {code}"


def engine_failed(status: str, log_path: str | os.PathLike[str] | None, *, with_error: bool = True) -> EngineFailed:
    """The EngineFailed for a failure seen in `log_path`: its reason (the log's last error when `with_error`), its
    tail, and the log kept past the end of the run."""
    tail = log_tail(log_path)
    keep_log(log_path)
    reason = failure_reason(status, tail) if with_error else status
    return EngineFailed(reason, log_tail=tail, log_path=str(log_path) if log_path is not None else None)


def failure_text(what: str, exc: EngineFailed) -> str:
    """A failed cell's message: `<what> failed: <reason>`, then where the log is kept and its last lines."""
    where = f"log {exc.log_path}" if exc.log_path else "log"
    text = f"{what} failed: {exc.message}"
    if exc.log_tail:
        return f"{text}\n--- {where}, last lines ---\n{exc.log_tail}"
    return f"{text}\n--- {where} ---" if exc.log_path else text


# --------------------------------------------------------------------------------------------------------------
# The private state directory

_STATE: dict[str, Any] = {"dir": None, "pid": None}
_KEPT: set[str] = set()


def _check_private(path: Path) -> Path:
    """`path` must be a real directory (no symlink) owned by us with no access for others; else refuse it."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(f"gpucompat: {path} is not a private directory of this user; refusing to use it")
    return path


def state_dir() -> Path:
    """This process's private directory (mkdtemp: created here, mode 0700), removed at exit but for kept logs."""
    if _STATE["dir"] is None or _STATE["pid"] != os.getpid():
        _STATE["dir"], _STATE["pid"] = Path(tempfile.mkdtemp(prefix="gpucompat-")), os.getpid()
        atexit.register(_remove_state_dir, _STATE["dir"], os.getpid())
    return _check_private(_STATE["dir"])


def keep_log(path: str | os.PathLike[str] | None) -> None:
    """Keep this log (and the logs named after it, e.g. a server's) when the private directory is removed."""
    if path is not None:
        _KEPT.add(str(path))


def kept_logs() -> list[str]:
    """The logs kept so far in this process (failed engines' logs)."""
    return sorted(p for p in _KEPT if os.path.exists(p))


def _remove_state_dir(path: Path, pid: int) -> None:
    if os.getpid() != pid:
        return
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            if any(entry.path.startswith(kept) for kept in _KEPT):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
        os.rmdir(path)  # fails, as it should, while a kept log is in it


def _new_log(name: str) -> Path:
    """A new, uniquely named log in the private directory."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    fd, path = tempfile.mkstemp(prefix=f"{safe}-", suffix=".log", dir=state_dir())
    os.close(fd)
    return Path(path)


def _open_log(path: Path) -> None:
    """Create or truncate a log without following a symlink planted at its name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    os.close(fd)


# --------------------------------------------------------------------------------------------------------------
# Process groups: only ours, checked before every kill


@dataclass(frozen=True)
class ProcessGroup:
    """A process group we started: its id (= its leader's pid) and the leader's start time, so that a pid reused
    by an unrelated process is never signalled."""

    pgid: int
    start: int | None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, ..., starttime at index 19."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None when it is gone or /proc cannot tell)."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def process_group(pid: int) -> ProcessGroup:
    """The group led by `pid`, which we just started, with its leader's start time."""
    return ProcessGroup(pid, start_time(pid))


def is_ours(group: ProcessGroup) -> bool:
    """A live leader must be the process we started (same start time); a gone leader's id stays reserved by the
    kernel while members of its group live, so its group is still the one we started."""
    if group.pgid <= 1:
        return False
    fields = _stat_fields(group.pgid)
    if fields is None:
        return True
    try:
        return group.start is not None and int(fields[19]) == group.start
    except (IndexError, ValueError):
        return False


def signal_group(group: ProcessGroup, sig: int) -> None:
    """Send `sig` to a group we started, after checking it still is ours."""
    if is_ours(group):
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(group.pgid, sig)


def _group_has_live_member(pgid: int) -> bool:
    """Scan /proc for a non-zombie member of process group `pgid` (True when /proc cannot tell)."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return True
    for entry in entries:
        fields = _stat_fields(int(entry))
        if fields and len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def group_alive(group: ProcessGroup) -> bool:
    """True while a process of the group still runs; zombies (unreaped by a container's PID 1) do not count."""
    try:
        os.killpg(group.pgid, 0)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return _group_has_live_member(group.pgid)


def kill_groups(groups: Iterable[ProcessGroup], grace_s: float = 2.0,
                alive: Callable[[], bool] = lambda: False, also: Callable[[int], None] | None = None) -> bool:
    """Kill process groups we started: SIGTERM, up to `grace_s` for all of them (and `alive()`) to be gone, then
    SIGKILL and up to 5 s more. `also(sig)` signals what a group kill may miss (a child not yet in its group).
    The one place that kills process groups; True when everything is gone."""
    groups = list(dict.fromkeys(groups))
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for group in groups:
            signal_group(group, sig)
        if also is not None:
            also(sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and (alive() or any(group_alive(g) for g in groups)):
            time.sleep(0.05)
        if not alive() and not any(group_alive(g) for g in groups):
            return True
    return False


def _prctl() -> Callable[..., int] | None:
    """libc's prctl (Linux), looked up in this process so that a preexec_fn loads nothing after fork."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def death_signal_preexec(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A preexec_fn that has the kernel send `sig` to the new process when the thread that started it exits or
    its process dies (SIGKILL included): PR_SET_PDEATHSIG. None where there is no prctl."""
    prctl = _prctl()
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1

    return preexec


# --------------------------------------------------------------------------------------------------------------
# Child side

_CHILD: dict[str, Any] = {"conn": None, "log": None, "groups": [], "lock": threading.Lock()}


def in_isolated_child() -> bool:
    """True inside an isolated child (where registered groups reach the parent)."""
    return _CHILD["conn"] is not None


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


def side_file(name: str, suffix: str = ".log") -> Path:
    """A file for an adapter's own output (a server's log, a config file): next to the isolated child's log
    ("<log>.<name><suffix>"), else a new file in this process's private directory."""
    if _CHILD["log"] is not None:
        return Path(f"{_CHILD['log']}.{name}{suffix}")
    fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=suffix, dir=state_dir())
    os.close(fd)
    return Path(path)


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
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    faulthandler.enable(file=sys.stderr, all_threads=True)


def _child_main(conn: Any, engine_name: str, log_path: str, env: Mapping[str, str], parent_pid: int) -> None:
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
            elif op == "memory":
                from ..memory import sample

                result = sample(payload)
            elif op == "call":
                fn, args, kwargs = payload
                result = fn(*args, **kwargs)
            elif op in ("shutdown", "stop"):
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
            reply = ("error", one_line(exc))
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


# --------------------------------------------------------------------------------------------------------------
# Parent side

_LIVE: weakref.WeakSet[IsolatedEngine] = weakref.WeakSet()
_ATEXIT_REGISTERED = False


def _kill_all_live() -> None:
    for engine in list(_LIVE):
        engine.kill()


def _params_text(params: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in params.items() if k != "env"}
    return "{" + ", ".join(f"{k}={v!r}" for k, v in sorted(shown.items())) + "}" if shown else ""


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
        start_timeout: float | None = None,
        call_timeout: float | None = None,
        progress: Progress | None = None,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        if start_timeout is not None:  # alias without the unit suffix
            start_timeout_s = start_timeout
        if call_timeout is not None:
            call_timeout_s = call_timeout
        self.name = engine if ":" in engine else canonical_name(engine)
        self.log_path = Path(log_path) if log_path is not None else _new_log(self.name)
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

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._dead is None and self._proc.is_alive()

    def _spawn(self, env: Mapping[str, str]) -> None:
        global _ATEXIT_REGISTERED
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        _open_log(self.log_path)
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=_child_main,
            args=(child_conn, self.name, str(self.log_path), dict(env), os.getpid()),
            name=f"gpucompat-{self.name}",
            daemon=False,  # engines start their own subprocesses, which daemonic processes may not
        )
        proc.start()
        child_conn.close()
        self._proc, self._conn = proc, parent_conn
        self._groups = [process_group(proc.pid)]  # our unreaped child: its pid cannot be reused meanwhile
        _LIVE.add(self)
        if not _ATEXIT_REGISTERED:
            atexit.register(_kill_all_live)
            _ATEXIT_REGISTERED = True

    def start(self, spec: EngineSpec) -> RunInfo:
        """Spawn the child and start the engine in it; after stop_engine(), start again in the same child."""
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

    def memory_sample(self, device_index: int | None = None) -> Any:
        """A memory.MemorySample taken inside the child (its torch allocator, its NVML share)."""
        return self._call("memory", device_index, self.call_timeout_s)

    def stop_engine(self) -> None:
        """Shut the engine down but keep the child process, so start/stop cycles can be measured in one process
        (memory_sample() between cycles): what an engine leaves behind after shutdown stays visible."""
        self._call("stop", None, self.shutdown_timeout_s)
        self.run_info = None

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
                self.progress(f"still {doing} ({elapsed:.0f} s of {timeout_s:g} s), log: {self.log_path}")

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
    **kwargs: Any,
) -> Any:
    """Run `fn(*args, **kwargs)` in a fresh spawned child (own process group, output to `log_path`) and return its
    result, with the same hang and crash handling as an isolated engine: a measurement that must belong to one
    process alone (memory cycles, a whole engine life) runs here. `fn` and its arguments must be picklable
    (a module-level function); EngineUnavailable raised in the child is raised again here."""
    label = getattr(fn, "__name__", "call")
    runner = IsolatedEngine(f"{__name__}:_no_engine", log_path=log_path if log_path is not None else _new_log(label),
                            env=env, call_timeout_s=timeout_s, progress=progress, heartbeat_s=heartbeat_s)
    if progress is not None:
        progress(f"running {label}() in a child process (timeout {timeout_s:g} s), log: {runner.log_path}")
    runner._spawn(runner._env)
    try:
        return runner._call("call", (fn, args, kwargs), timeout_s, label=label, doing=f"running {label}()")
    finally:
        runner.shutdown()


def _no_engine() -> Engine:  # pragma: no cover - never started: run_in_child only sends "call"
    raise EngineFailed("no engine in a function child")


class _InProcess:
    """An in-process engine whose unexpected exceptions become EngineFailed (one line), like an isolated one's."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.name = engine.name
        self.log_path: Path | None = None

    def _guard(self, op: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except (EngineFailed, EngineUnavailable):
            raise
        except Exception as exc:
            raise EngineFailed(f"{op}() raised {one_line(exc)}") from None

    def start(self, spec: EngineSpec) -> RunInfo:
        return self._guard("start", self._engine.start, spec)  # type: ignore[no-any-return]

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        return self._guard("generate", self._engine.generate, prompts, max_tokens, top_n)  # type: ignore[no-any-return]

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        return self._guard("embed", self._engine.embed, prompts)  # type: ignore[no-any-return]

    def shutdown(self) -> None:
        self._guard("shutdown", self._engine.shutdown)


class EnginePool:
    """One started engine per spec key for the whole session; a failed start is remembered, never retried.

    `isolated=None` lets the engine name decide: the hf reference runs in-process, every other engine in a child.
    Logs go to `log_dir` (kept) or to the private state directory (removed at exit unless their engine failed).
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        *,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        max_live: int | None = None,
        progress: Progress | None = None,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else state_dir()
        self.start_timeout_s = float(start_timeout_s)
        self.call_timeout_s = float(call_timeout_s)
        self.max_live = max_live
        self.progress = progress
        self.heartbeat_s = float(heartbeat_s)
        self._live: dict[tuple[Any, ...], tuple[Engine, RunInfo]] = {}
        self._failures: dict[tuple[Any, ...], BaseException] = {}

    def log_path(self, spec: EngineSpec) -> Path:
        """Where this spec's isolated engine writes its log (per xdist worker, so workers never share a file)."""
        digest = hashlib.sha1(repr(spec.key()).encode()).hexdigest()[:10]
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in spec.engine)
        return self.log_dir / f"{safe}-{digest}-{worker}.log"

    def _isolated(self, spec: EngineSpec, isolated: bool | None) -> bool:
        if isolated is not None:
            return isolated
        flag = spec.params.get("isolated") if isinstance(spec.params, Mapping) else None
        if isinstance(flag, bool):
            return flag
        name = spec.engine if ":" in spec.engine else canonical_name(spec.engine)
        return name not in IN_PROCESS_ENGINES

    def get(self, spec: EngineSpec, isolated: bool | None = None) -> tuple[Engine, RunInfo]:
        """The started engine for `spec` (starting it the first time), and what it reported at start."""
        key = spec.key()
        if key in self._live:
            engine, info = self._live.pop(key)
            self._live[key] = (engine, info)  # most recently used last
            return engine, info
        if key in self._failures:  # a fresh exception each time, not one whose traceback grows with every cell
            failure = self._failures[key]
            if isinstance(failure, EngineFailed):
                raise EngineFailed(failure.message, log_tail=failure.log_tail, log_path=failure.log_path)
            raise EngineUnavailable(str(failure))
        if self.max_live is not None:
            while len(self._live) >= max(1, self.max_live):
                oldest = next(iter(self._live))
                self._shutdown_key(oldest)
        params = spec.params if isinstance(spec.params, Mapping) else {}
        engine: Engine
        if self._isolated(spec, isolated):
            missing = missing_module(spec.engine, params)
            if missing is not None:
                self._failures[key] = EngineUnavailable(missing)
                raise EngineUnavailable(missing)
            engine = IsolatedEngine(
                spec.engine,
                log_path=self.log_path(spec),
                start_timeout_s=float(params.get("start_timeout_s", self.start_timeout_s)),
                call_timeout_s=float(params.get("call_timeout_s", self.call_timeout_s)),
                progress=self.progress,
                heartbeat_s=self.heartbeat_s,
            )
            where = f"(timeout {engine.start_timeout_s:g} s), log: {engine.log_path}"
        else:
            try:
                engine = _InProcess(create(spec.engine))
            except (ImportError, AttributeError, ValueError) as exc:
                failure = EngineFailed(f"cannot create engine {spec.engine!r}: {one_line(exc)}")
                self._failures[key] = failure
                raise failure from None
            where = "(in this process)"
        if self.progress is not None:
            model = os.path.basename(os.path.normpath(spec.model))
            self.progress(" ".join(p for p in (f"starting {spec.engine} on {model}", _params_text(params), where) if p))
        try:
            info = engine.start(spec)
        except EngineUnavailable as exc:
            self._failures[key] = EngineUnavailable(str(exc))
            raise
        except EngineFailed as exc:
            self._failures[key] = EngineFailed(exc.message, log_tail=exc.log_tail, log_path=exc.log_path)
            with contextlib.suppress(Exception):
                engine.shutdown()
            raise
        self._live[key] = (engine, info)
        return engine, info

    def failure(self, spec: EngineSpec) -> str | None:
        """The remembered start failure of `spec`, if any."""
        entry = self._failures.get(spec.key())
        return str(entry) if entry is not None else None

    def release(self, spec: EngineSpec) -> None:
        """Shut one engine down now (e.g. before a memory measurement needs the GPU to itself)."""
        self._shutdown_key(spec.key())

    def _shutdown_key(self, key: tuple[Any, ...]) -> None:
        entry = self._live.pop(key, None)
        if entry is None:
            return
        with contextlib.suppress(EngineFailed, EngineUnavailable):
            entry[0].shutdown()

    def close_all(self) -> None:
        """Shut every engine down, most recently used first."""
        for key in reversed(list(self._live)):
            self._shutdown_key(key)

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()
