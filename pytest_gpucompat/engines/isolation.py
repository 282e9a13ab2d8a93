"""Run an engine in a child process under timeouts, so a hang or a crash becomes a failed cell, not a stuck runner.

The child is a multiprocessing "spawn" process (no inherited CUDA state) that calls `os.setsid()` first, so the
child and everything it starts (vLLM workers, SGLang schedulers, servers) share one process group that can be
killed as a whole. Its stdout and stderr are redirected at the file-descriptor level to a log file, so C-level
logs and fatal-signal tracebacks (faulthandler) land there too; failures carry the last lines of that log.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import hashlib
import os
import signal
import sys
import tempfile
import time
import traceback
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import IN_PROCESS_ENGINES, Unsupported, canonical_name, create, missing_module, one_line
from .base import Engine, EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo

DEFAULT_START_TIMEOUT_S = 600.0
DEFAULT_CALL_TIMEOUT_S = 300.0
DEFAULT_SHUTDOWN_TIMEOUT_S = 60.0
LOG_TAIL_LINES = 40

_PGID_FILE_ENV = "GPUCOMPAT_PGID_FILE"


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


def register_process_group(pgid: int) -> None:
    """Called by an adapter that starts its own process group (e.g. a server with start_new_session=True) while
    running inside an isolated child: the parent then kills that group too when it kills the child."""
    path = os.environ.get(_PGID_FILE_ENV)
    if not path:
        return
    with contextlib.suppress(OSError), open(path, "a", encoding="ascii") as fh:
        fh.write(f"{int(pgid)}\n")


def _group_has_live_member(pgid: int) -> bool:
    """Scan /proc for a non-zombie member of process group `pgid` (True when /proc cannot tell)."""
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return True
    for entry in entries:
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after the command name: state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


# --------------------------------------------------------------------------------------------------------------
# Child side


def _redirect_output(log_path: str) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    faulthandler.enable(file=sys.stderr, all_threads=True)


def _child_main(conn: Any, engine_name: str, log_path: str, env: Mapping[str, str], pgid_file: str) -> None:
    """Entry point of the isolated child: own the engine, answer the parent's calls until shutdown."""
    with contextlib.suppress(OSError):
        os.setsid()
    _redirect_output(log_path)
    os.environ.update({str(k): str(v) for k, v in env.items()})
    os.environ[_PGID_FILE_ENV] = pgid_file
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
        with contextlib.suppress(OSError, BrokenPipeError):
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


class IsolatedEngine:
    """The Engine protocol, served by a child process; every call has a timeout.

    A hang kills the child's process group and raises EngineFailed("engine hung in <call>() after N s") with the
    log tail; a child killed by a signal raises EngineFailed("engine process died: SIGSEGV ..."); EngineUnavailable
    raised in the child is raised again here. After a hang or a death the instance is dead: every later call fails.
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
    ) -> None:
        if start_timeout is not None:  # alias without the unit suffix
            start_timeout_s = start_timeout
        if call_timeout is not None:
            call_timeout_s = call_timeout
        self.name = engine if ":" in engine else canonical_name(engine)
        if log_path is None:
            fd, tmp = tempfile.mkstemp(prefix=f"gpucompat-{self.name.replace(':', '_')}-", suffix=".log")
            os.close(fd)
            log_path = tmp
        self.log_path = Path(log_path)
        self.start_timeout_s = float(start_timeout_s)
        self.call_timeout_s = float(call_timeout_s)
        self.shutdown_timeout_s = float(shutdown_timeout_s)
        self.term_grace_s = float(term_grace_s)
        self._env = dict(env or {})
        self._proc: Any = None
        self._conn: Any = None
        self._dead: str | None = None
        self._pgid_file = str(self.log_path) + ".pgids"
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
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_bytes(b"")
        with contextlib.suppress(OSError):
            os.unlink(self._pgid_file)
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=_child_main,
            args=(child_conn, self.name, str(self.log_path), dict(env), self._pgid_file),
            name=f"gpucompat-{self.name}",
            daemon=False,  # engines start their own subprocesses, which daemonic processes may not
        )
        proc.start()
        child_conn.close()
        self._proc, self._conn = proc, parent_conn
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
            info = self._call("start", spec, self.start_timeout_s)
        except EngineUnavailable:
            self._stop_quietly()
            raise
        except EngineFailed:
            self._stop_quietly()
            raise
        if not isinstance(info, RunInfo):
            self._stop_quietly()
            raise EngineFailed(f"engine start() returned {type(info).__name__}, not RunInfo")
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
        """Kill the child's process group (and groups it registered): SIGTERM, a short grace, then SIGKILL."""
        proc = self._proc
        if proc is None:
            return
        groups = [proc.pid, *self._registered_groups()]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pgid in groups:
                with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                    os.killpg(pgid, sig)
            if proc.is_alive():
                with contextlib.suppress(OSError):
                    os.kill(proc.pid, sig)
            deadline = time.monotonic() + (self.term_grace_s if sig == signal.SIGTERM else 5.0)
            while time.monotonic() < deadline and (proc.is_alive() or self._any_group_alive(groups)):
                time.sleep(0.05)
            if not proc.is_alive() and not self._any_group_alive(groups):
                break
        proc.join(timeout=1.0)
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
        self._conn = None
        if self._dead is None:
            self._dead = "shut down"
        _LIVE.discard(self)
        with contextlib.suppress(OSError):
            os.unlink(self._pgid_file)

    def _stop_quietly(self) -> None:
        if self._dead is None and self._proc is not None and self._proc.is_alive():
            with contextlib.suppress(EngineFailed, EngineUnavailable):
                self._call("shutdown", None, min(self.shutdown_timeout_s, 30.0))
        self.kill()

    # -- plumbing ----------------------------------------------------------------------------------------------

    def _registered_groups(self) -> list[int]:
        try:
            text = Path(self._pgid_file).read_text(encoding="ascii")
        except OSError:
            return []
        return [int(line) for line in text.split() if line.strip().isdigit()]

    @staticmethod
    def _any_group_alive(groups: Sequence[int]) -> bool:
        """True while a process of these groups still runs; zombies (unreaped by a container's PID 1) do not count."""
        for pgid in groups:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError, OSError):
                continue
            if _group_has_live_member(pgid):
                return True
        return False

    def _tail(self) -> str:
        return log_tail(self.log_path)

    def _died(self, op: str) -> EngineFailed:  # op: the call's name as shown in messages
        proc = self._proc
        proc.join(timeout=2.0)
        code = proc.exitcode
        if code is None:
            reason = "engine process stopped answering"
        elif code < 0:
            reason = f"engine process died: {_signal_name(-code)}"
        else:
            reason = f"engine process exited with status {code}"
        self._dead = reason
        tail = self._tail()
        self.kill()
        self._dead = reason
        return EngineFailed(f"{reason} during {op}()", log_tail=tail)

    def _call(self, op: str, payload: Any, timeout_s: float, label: str | None = None) -> Any:
        name = label or op
        if self._proc is None:
            raise EngineFailed(f"{name}() called before start()")
        if self._dead is not None:
            raise EngineFailed(f"{name}(): engine process is not running ({self._dead})", log_tail=self._tail())
        try:
            self._conn.send((op, payload))
        except (BrokenPipeError, OSError):
            raise self._died(name) from None
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                tail = self._tail()
                self.kill()
                self._dead = f"hung in {name}()"
                raise EngineFailed(f"engine hung in {name}() after {timeout_s:g} s", log_tail=tail)
            try:
                ready = self._conn.poll(min(0.1, remaining))
            except (EOFError, OSError):
                raise self._died(name) from None
            if ready:
                try:
                    status, value = self._conn.recv()
                except (EOFError, OSError):
                    raise self._died(name) from None
                break
            if not self._proc.is_alive():
                # It may have answered just before exiting.
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
            raise EngineFailed(str(value), log_tail=self._tail())
        raise EngineFailed(f"{name}() raised {value}", log_tail=self._tail())


def run_in_child(
    fn: Any,
    *args: Any,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    log_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> Any:
    """Run `fn(*args, **kwargs)` in a fresh spawned child (own process group, output to `log_path`) and return its
    result, with the same hang and crash handling as an isolated engine: a measurement that must belong to one
    process alone (memory cycles, a whole engine life) runs here. `fn` and its arguments must be picklable
    (a module-level function); EngineUnavailable raised in the child is raised again here."""
    label = getattr(fn, "__name__", "call")
    runner = IsolatedEngine(f"{__name__}:_no_engine", log_path=log_path, env=env, call_timeout_s=timeout_s)
    runner._spawn(runner._env)
    try:
        return runner._call("call", (fn, args, kwargs), timeout_s, label=label)
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
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str] | None = None,
        *,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        max_live: int | None = None,
    ) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="gpucompat-logs-"))
        self.start_timeout_s = float(start_timeout_s)
        self.call_timeout_s = float(call_timeout_s)
        self.max_live = max_live
        self._live: dict[tuple[Any, ...], tuple[Engine, RunInfo]] = {}
        self._failures: dict[tuple[Any, ...], tuple[type[Exception], str, str]] = {}

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
        if key in self._failures:
            kind, message, tail = self._failures[key]
            if kind is EngineUnavailable:
                raise EngineUnavailable(message)
            raise EngineFailed(message, log_tail=tail)
        if self.max_live is not None:
            while len(self._live) >= max(1, self.max_live):
                oldest = next(iter(self._live))
                self._shutdown_key(oldest)
        engine: Engine
        if self._isolated(spec, isolated):
            params = spec.params if isinstance(spec.params, Mapping) else {}
            missing = missing_module(spec.engine, params)
            if missing is not None:
                self._failures[key] = (EngineUnavailable, missing, "")
                raise EngineUnavailable(missing)
            engine = IsolatedEngine(
                spec.engine,
                log_path=self.log_path(spec),
                start_timeout_s=float(params.get("start_timeout_s", self.start_timeout_s)),
                call_timeout_s=float(params.get("call_timeout_s", self.call_timeout_s)),
            )
        else:
            try:
                engine = _InProcess(create(spec.engine))
            except (ImportError, AttributeError, ValueError) as exc:
                self._failures[key] = (EngineFailed, f"cannot create engine {spec.engine!r}: {one_line(exc)}", "")
                raise EngineFailed(self._failures[key][1]) from None
        try:
            info = engine.start(spec)
        except EngineUnavailable as exc:
            self._failures[key] = (EngineUnavailable, str(exc), "")
            raise
        except EngineFailed as exc:
            self._failures[key] = (EngineFailed, exc.message, exc.log_tail)
            with contextlib.suppress(Exception):
                engine.shutdown()
            raise
        self._live[key] = (engine, info)
        return engine, info

    def failure(self, spec: EngineSpec) -> str | None:
        """The remembered start failure of `spec`, if any."""
        entry = self._failures.get(spec.key())
        return entry[1] if entry else None

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
