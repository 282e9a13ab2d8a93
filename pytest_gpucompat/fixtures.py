"""Fixtures the suites use: the cell, the fingerprint, the model, and a started engine shared per session."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .engines.base import EngineFailed, EngineSpec, EngineUnavailable, RunInfo
from .fingerprint import Fingerprint
from .matrix import Cell
from .state import CellState, cell_key, plain

if TYPE_CHECKING:
    from .engines.base import Engine
    from .engines.isolation import EnginePool
    from .verdicts import Finding

_DISABLED = "gpucompat matrix test: run pytest with --gpucompat"


def _run_state(config: pytest.Config) -> Any:
    from .plugin import run_state

    return run_state(config)


def _cell_state(request: pytest.FixtureRequest) -> CellState | None:
    return request.node.stash.get(cell_key, None)


@pytest.fixture
def gpucompat_cell(request: pytest.FixtureRequest) -> Cell:
    """Replaced by each cell of the test's matrix when the plugin is on."""
    pytest.skip(_DISABLED)


@pytest.fixture(scope="session")
def gpucompat_fingerprint(pytestconfig: pytest.Config) -> Fingerprint:
    state = _run_state(pytestconfig)
    if state is None:
        from .fingerprint import collect

        return collect()
    return state.fingerprint


@pytest.fixture
def gpucompat_findings(request: pytest.FixtureRequest) -> tuple[Finding, ...]:
    cs = _cell_state(request)
    return cs.findings if cs else ()


@pytest.fixture
def gpucompat_flag(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Attach a finding measured at run time (a silent fallback, a precision loss) to the cell's result."""
    cs = _cell_state(request)

    def flag(id: str, summary: str, severity: str = "degraded", failure: str = "fallback") -> None:
        import warnings

        from .verdicts import Finding

        finding = Finding(id=id, severity=severity, confidence="verified", failure=failure, engine=None,
                          summary=summary, workaround=None, symptom=None, note="measured in this run",
                          claims=(), sources=(("report", "this run"),), action="annotate")
        if cs is not None:
            cs.findings = (*cs.findings, finding)
        warnings.warn(pytest.PytestWarning(f"gpucompat {severity}: [{id}] {summary}"), stacklevel=2)

    return flag


@pytest.fixture
def gpucompat_record(request: pytest.FixtureRequest) -> Callable[[str, float], None]:
    """Record a measured figure (tokens_per_s, ttft_s, leak_mib_per_cycle, ...) on the cell's result."""
    cs = _cell_state(request)

    def record(name: str, value: float) -> None:
        if cs is not None:
            cs.metrics[name] = float(value)
        else:
            request.node.user_properties.append((name, float(value)))

    return record


@pytest.fixture(scope="session")
def gpucompat_model(request: pytest.FixtureRequest) -> Path:
    """A tiny model built locally with fixed-seed random weights, or a checkpoint given by --gpucompat-model."""
    name = getattr(request, "param", None)
    if name is None:
        pytest.skip(_DISABLED)
    from .models import resolve_models

    try:
        return resolve_models([name])[0]
    except ImportError as exc:
        pytest.skip(f"cannot build the tiny model here: {exc}")
    except ValueError as exc:
        raise pytest.UsageError(f"gpucompat: {exc}") from None


@pytest.fixture(scope="session")
def gpucompat_pool(pytestconfig: pytest.Config) -> Iterator[EnginePool]:
    """One started engine per (engine, model, params) for the whole session, stopped at its end."""
    from .engines.isolation import EnginePool

    timeout = float(pytestconfig.getoption("gpucompat_timeout", 600.0) or 600.0)
    pool = EnginePool(start_timeout_s=timeout, call_timeout_s=timeout)
    try:
        yield pool
    finally:
        pool.close_all()


@dataclass(frozen=True)
class StartedEngine:
    """A started engine with what it reported about itself."""

    engine: Engine
    info: RunInfo
    spec: EngineSpec


def engine_spec(config: pytest.Config, cell: Cell, model: Path, **overrides: Any) -> EngineSpec:
    params = {**cell.params, **overrides}
    endpoint = config.getoption("gpucompat_endpoint", None)
    if cell.engine == "openai" and endpoint and "endpoint" not in params:
        params["endpoint"] = endpoint
    return EngineSpec(engine=cell.engine, model=str(model), params=params)


def start_engine(
    request: pytest.FixtureRequest, pool: EnginePool, spec: EngineSpec, record: bool = True
) -> StartedEngine:
    """Start (or reuse) an engine; not installed -> skip with the reason, crash or hang -> failed cell with log."""
    cs = _cell_state(request)
    try:
        engine, info = pool.get(spec, isolated=spec.engine != "hf")
    except EngineUnavailable as exc:
        pytest.skip(f"{spec.engine} unavailable: {exc}")
    except EngineFailed as exc:
        if cs is not None:
            cs.log_tail = exc.log_tail or None
            cs.engine_failed = True
        tail = f"\n--- {spec.engine} log, last lines ---\n{exc.log_tail}" if exc.log_tail else ""
        pytest.fail(f"{spec.engine} failed: {exc.message}{tail}", pytrace=False)
    if cs is not None and record:
        cs.info.update(plain({k: v for k, v in dataclasses.asdict(info).items() if v not in (None, {}, "")}))
        if info.start_s is not None:
            cs.metrics["start_s"] = float(info.start_s)
    return StartedEngine(engine=engine, info=info, spec=spec)


@pytest.fixture
def gpucompat_isolated(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Run a module-level function in a fresh child process under --gpucompat-timeout (memory measurements).

    Not installed -> skip with the reason; a crash or hang -> failed cell carrying the child's log tail.
    """
    from .engines.isolation import run_in_child

    timeout = float(request.config.getoption("gpucompat_timeout", 600.0) or 600.0)
    cs = _cell_state(request)

    def run(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return run_in_child(fn, *args, timeout_s=timeout)
        except EngineUnavailable as exc:
            pytest.skip(f"unavailable: {exc}")
        except EngineFailed as exc:
            if cs is not None:
                cs.log_tail, cs.engine_failed = exc.log_tail or None, True
            tail = f"\n--- child log, last lines ---\n{exc.log_tail}" if exc.log_tail else ""
            pytest.fail(f"{getattr(fn, '__name__', 'call')} failed: {exc.message}{tail}", pytrace=False)

    return run


@pytest.fixture
def gpucompat_reference(
    request: pytest.FixtureRequest, gpucompat_model: Path, gpucompat_pool: EnginePool
) -> StartedEngine:
    """The float32 transformers reference on the same model (on the GPU when there is one)."""
    spec = EngineSpec(engine="hf", model=str(gpucompat_model), params={"dtype": "float32"})
    return start_engine(request, gpucompat_pool, spec, record=False)


@pytest.fixture
def gpucompat_engine(
    request: pytest.FixtureRequest, gpucompat_cell: Cell, gpucompat_model: Path, gpucompat_pool: EnginePool
) -> StartedEngine:
    """The cell's engine, started with the cell's parameters on the session's model."""
    spec = engine_spec(request.config, gpucompat_cell, gpucompat_model)
    return start_engine(request, gpucompat_pool, spec)
