"""EnginePool: one started engine per spec for the whole session, in this process or in an isolated child.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ..catalog.base import Engine, EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo
from ..catalog.loglines import exception_line
from ..catalog.params import missing_module
from ..catalog.registry import quiet_start, runs_in_process
from . import create
from .isolation import DEFAULT_CALL_TIMEOUT_S, DEFAULT_START_TIMEOUT_S, HEARTBEAT_S, IsolatedEngine, Progress
from .processes import log_note, state_dir


def _params_text(params: Mapping[str, Any]) -> str:
    shown = {k: v for k, v in params.items() if k != "env"}
    return "{" + ", ".join(f"{k}={v!r}" for k, v in sorted(shown.items())) + "}" if shown else ""



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
            raise EngineFailed(f"{op}() raised {exception_line(exc)}") from None

    def start(self, spec: EngineSpec) -> RunInfo:
        return self._guard("start", self._engine.start, spec)  # type: ignore[no-any-return]

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        return self._guard("generate", self._engine.generate, prompts, max_tokens, top_n)  # type: ignore[no-any-return]

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        return self._guard("embed", self._engine.embed, prompts)  # type: ignore[no-any-return]

    def shutdown(self) -> None:
        self._guard("shutdown", self._engine.shutdown)


class Admission(Protocol):
    """Room for an engine on a GPU that other workers' engines share (pytest_gpucompat/session/sharing.py)."""

    def admit(self, spec: EngineSpec, make_room: Callable[[], bool]) -> Callable[[], None]:
        """Wait until the engine fits on the GPU and reserve it; returns what gives the reservation back.
        ``make_room()`` shuts one of the pool's idle engines down (False when there is none)."""
        ...

    def quiet(self, what: str, alone: bool = True) -> AbstractContextManager[Any]:
        """Held while an engine starts or shuts down: ``alone``, nothing else starts or stops on its GPU meanwhile
        (a start that measures the GPU, ``registry.quiet_start``); else only such a start is kept out."""
        ...

    def first_start(self, spec: EngineSpec) -> AbstractContextManager[Any]:
        """Held around a start, outside ``quiet``: it waits while another worker runs the first start of the same
        configuration (its compile caches), or is that first start itself (gpushare/first_start.py)."""
        ...


class EnginePool:
    """One started engine per spec key for the whole session; a failed start is remembered, never retried.

    Where an engine runs: `get(spec, isolated=...)` when given, else the spec's own `isolated: true|false` param,
    else its descriptor (`in_process`: the hf reference runs here, every other engine and every import-path engine
    in an isolated child). Aliases resolve through the registry (`transformers` is `hf`).
    Logs go to `log_dir` (kept) or to the private state directory (removed at exit unless their engine failed).
    With `admission` (cells sharing a GPU), each engine reserves its GPU memory before it starts and gives it back
    once shut down; engines not used since `begin_cell()` are shut down first when another needs their room.
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
        admission: Admission | None = None,
    ) -> None:
        self.log_dir = Path(log_dir) if log_dir is not None else state_dir()
        self.start_timeout_s = float(start_timeout_s)
        self.call_timeout_s = float(call_timeout_s)
        self.max_live = max_live
        self.progress = progress
        self.heartbeat_s = float(heartbeat_s)
        self.admission = admission
        self._live: dict[tuple[Any, ...], tuple[Engine, RunInfo]] = {}
        self._failures: dict[tuple[Any, ...], BaseException] = {}
        self._releases: dict[tuple[Any, ...], Callable[[], None]] = {}
        self._used: set[tuple[Any, ...]] = set()  # asked for since begin_cell(): not to be shut down for room
        # why this process's state is unknown since an in-process start was stopped from outside it (`_abandon`)
        self.unsettled: str | None = None

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
        return not runs_in_process(spec.engine)

    def get(self, spec: EngineSpec, isolated: bool | None = None) -> tuple[Engine, RunInfo]:
        """The started engine for `spec` (starting it the first time), and what it reported at start."""
        key = spec.key()
        self._used.add(key)
        if key in self._live:
            live = self._live.pop(key)
            self._live[key] = live  # most recently used last
            return live
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
            where = f"(timeout {engine.start_timeout_s:g} s){log_note(engine.log_path)}"
        else:
            try:
                engine = _InProcess(create(spec.engine))
            except (ImportError, AttributeError, ValueError) as exc:
                failure = EngineFailed(f"cannot create engine {spec.engine!r}: {exception_line(exc)}")
                self._failures[key] = failure
                raise failure from None
            where = "(in this process)"
        release = self.admission.admit(spec, self.make_room) if self.admission is not None else None
        try:
            with self._announced(spec, params, where), self._first_start(spec), \
                    self._quiet(f"starting {spec.engine}", quiet_start(spec.engine, spec.params)):
                info = self._start(key, engine, spec)
        except BaseException as exc:
            if not isinstance(exc, (EngineFailed, EngineUnavailable)):
                self._abandon(engine, spec, exc)
            if release is not None:
                release()
            raise
        if release is not None:
            self._releases[key] = release
        self._live[key] = (engine, info)
        return engine, info

    def _abandon(self, engine: Engine, spec: EngineSpec, exc: BaseException) -> None:
        """A start stopped from outside the engine (pytest-timeout's SIGALRM, Ctrl-C): an isolated engine's child
        is killed, so this process is left as it was before the start; an in-process engine's half-made state
        cannot be undone, and `unsettled` says so to every cell this process runs afterwards."""
        if isinstance(engine, IsolatedEngine):
            with contextlib.suppress(Exception):
                engine.kill()
            return
        self.unsettled = (f"an earlier {spec.engine} start in this process was stopped from outside it "
                          f"({exception_line(exc)}): what it left in this process is unknown")

    def _start(self, key: tuple[Any, ...], engine: Engine, spec: EngineSpec) -> RunInfo:
        try:
            return engine.start(spec)
        except EngineUnavailable as exc:
            self._failures[key] = EngineUnavailable(str(exc))
            raise
        except EngineFailed as exc:
            self._failures[key] = EngineFailed(exc.message, log_tail=exc.log_tail, log_path=exc.log_path)
            with contextlib.suppress(Exception):
                engine.shutdown()
            raise

    def _announced(self, spec: EngineSpec, params: Mapping[str, Any], where: str) -> AbstractContextManager[Any]:
        """Held while the engine starts (its wait for a quiet GPU included). A ``progress`` with an
        ``engine_start(engine, text)`` (the plugin's announce.Announcer) decides what the start says and when: at
        default verbosity nothing unless it is slow, so pytest's line of results is not split. Any other
        ``progress`` hears the full line before the start."""
        if self.progress is None:
            return contextlib.nullcontext()
        model = os.path.basename(os.path.normpath(spec.model))
        text = " ".join(p for p in (f"starting {spec.engine} on {model}", _params_text(params), where) if p)
        starting = getattr(self.progress, "engine_start", None)
        if callable(starting):
            return starting(spec.engine, text)  # type: ignore[no-any-return]
        self.progress(text)
        return contextlib.nullcontext()

    def _quiet(self, what: str, alone: bool) -> AbstractContextManager[Any]:
        return self.admission.quiet(what, alone) if self.admission is not None else contextlib.nullcontext()

    def _first_start(self, spec: EngineSpec) -> AbstractContextManager[Any]:
        return self.admission.first_start(spec) if self.admission is not None else contextlib.nullcontext()

    def begin_cell(self) -> None:
        """A new cell begins: every live engine is idle until it asks for one again."""
        self._used.clear()

    def make_room(self) -> bool:
        """Shut down the least recently used engine that the current cell has not asked for; False: none left."""
        idle = next((key for key in self._live if key not in self._used), None)
        if idle is None:
            return False
        self._shutdown_key(idle)
        return True

    def idle_out(self) -> int:
        """A new cell begins that needs the GPU to itself: shut every live engine down (none is in use yet);
        returns how many were stopped."""
        self.begin_cell()
        stopped = 0
        while self.make_room():
            stopped += 1
        return stopped

    @property
    def live(self) -> int:
        """Engines started and not stopped."""
        return len(self._live)

    def failure(self, spec: EngineSpec) -> str | None:
        """The remembered start failure of `spec`, if any."""
        entry = self._failures.get(spec.key())
        return str(entry) if entry is not None else None

    def _shutdown_key(self, key: tuple[Any, ...]) -> None:
        entry = self._live.pop(key, None)
        if entry is None:
            return
        release = self._releases.pop(key, None)
        try:
            with self._quiet(f"stopping {entry[0].name}", False), contextlib.suppress(EngineFailed, EngineUnavailable):
                entry[0].shutdown()
        finally:
            if release is not None:
                release()

    def close_all(self) -> None:
        """Shut every engine down, most recently used first."""
        for key in reversed(list(self._live)):
            self._shutdown_key(key)

    def __enter__(self) -> EnginePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()
