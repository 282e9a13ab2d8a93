"""Fixtures the suites use: the cell, the fingerprint, the model, and a started engine shared per session.

A pytest plugin of its own (entry point ``gpucompat_fixtures``): every fixture defined here exists, with no list to
keep elsewhere. It reads the run state that ``plugin.py`` builds and never imports ``plugin.py``. What a fixture uses
is imported by the fixture: a run without ``--gpucompat`` loads this module and nothing behind it.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from .options import Settings

if TYPE_CHECKING:
    from .catalog.base import Engine, EngineFailed, EngineSpec, Generation, RunInfo
    from .engines.pool import EnginePool
    from .kb import Finding
    from .machine.fingerprint import Fingerprint
    from .session.golden_run import CellGolden
    from .session.state import LiveCell, RunState
    from .workload.matrix import MatrixCell
    from .workload.prompts import PromptSet
    from .workload.reference import Choice

_DISABLED = "gpucompat matrix test: run pytest with --gpucompat"


def _live_cell(request: pytest.FixtureRequest) -> LiveCell | None:
    from .session.state import live_cell_key

    stash: pytest.Stash = request.node.stash
    return stash.get(live_cell_key, None)


def run_state(config: pytest.Config) -> RunState | None:
    """This run's state (``session.state.run_state``), None when the plugin is off."""
    from .session.state import run_state as state_of

    return state_of(config)


def json_safe(value: Any) -> Any:
    """Only JSON types (``session.payload.json_safe``): what a cell notes travels to the report writer."""
    from .session.payload import json_safe as only_json

    return only_json(value)


@pytest.fixture
def gpucompat_cell(request: pytest.FixtureRequest) -> MatrixCell:
    """Replaced by each cell of the test's matrix when the plugin is on."""
    pytest.skip(_DISABLED)


@pytest.fixture(scope="session")
def gpucompat_fingerprint(pytestconfig: pytest.Config) -> Fingerprint:
    state = run_state(pytestconfig)
    if state is None:
        from .machine.fingerprint import collect

        return collect()
    return state.fingerprint


@pytest.fixture
def gpucompat_findings(request: pytest.FixtureRequest) -> tuple[Finding, ...]:
    cs = _live_cell(request)
    return cs.findings if cs else ()


@pytest.fixture
def gpucompat_flag(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Attach a finding measured at run time (a silent fallback, a precision loss) to the cell's result."""
    cs = _live_cell(request)

    def flag(id: str, summary: str, severity: str = "degraded", failure: str = "fallback") -> None:
        import warnings

        from .kb import Finding
        from .report.model import SEVERITIES

        if severity not in SEVERITIES:  # the report could not be read back
            raise ValueError(f"gpucompat_flag: severity must be one of {', '.join(SEVERITIES)}, not {severity!r}")
        finding = Finding(id=id, severity=severity, confidence="verified", failure=failure, engine=None,
                          summary=summary, workaround=None, symptom=None, note="measured in this run",
                          claims=(), sources=(("report", "this run"),), action="annotate")
        if cs is not None:  # travels on the report of every later phase (LiveCell.payload_for)
            cs.flagged = (*cs.flagged, finding)
        warnings.warn(pytest.PytestWarning(f"gpucompat {severity}: [{id}] {summary}"), stacklevel=2)

    return flag


@pytest.fixture
def gpucompat_record(request: pytest.FixtureRequest) -> Callable[[str, float], None]:
    """Record a measured figure (tokens_per_s, ttft_s, leak_mib_per_cycle, ...) on the cell's result."""
    cs = _live_cell(request)

    def record(name: str, value: float) -> None:
        if cs is not None:
            cs.metrics[name] = float(value)
        else:
            request.node.user_properties.append((name, float(value)))

    return record


@pytest.fixture
def gpucompat_record_series(request: pytest.FixtureRequest) -> Callable[[str, Sequence[float | None]], None]:
    """Record a figure per cycle or round (``nvml_process_mib`` after each create/destroy cycle) on the cell's
    result, so reports can draw it; None marks a cycle where the figure could not be measured."""
    cs = _live_cell(request)

    def record(name: str, values: Sequence[float | None]) -> None:
        if cs is not None:
            cs.series[name] = [None if v is None else float(v) for v in values]

    return record


@pytest.fixture(scope="session")
def gpucompat_model(request: pytest.FixtureRequest) -> Path:
    """A tiny model built locally with fixed-seed random weights, or a checkpoint given by --gpucompat-model."""
    name = getattr(request, "param", None)
    if name is None:
        pytest.skip(_DISABLED)
    from .workload.models import resolve_models

    try:
        return resolve_models([name])[0]
    except ImportError as exc:
        pytest.skip(f"cannot build the tiny model here: {exc}")
    except ValueError as exc:
        raise pytest.UsageError(f"gpucompat: {exc}") from None


def settings(config: pytest.Config) -> Settings:
    """This run's options, parsed once at configure (also when the plugin is off and a fixture runs anyway)."""
    state = run_state(config)
    return state.settings if state is not None else Settings.from_pytest(config)


def announcer(config: pytest.Config) -> Callable[[str], None]:
    """Where engine starts, child runs and heartbeats are said (announce.Announcer): through the terminal reporter
    in the main process, on stderr in an xdist worker; an engine start only at -v or once it is slow, so that
    pytest's line of results is not split by every start."""
    from .session.announce import Announcer

    return Announcer.for_config(config)


@pytest.fixture(scope="session")
def gpucompat_pool(pytestconfig: pytest.Config) -> Iterator[EnginePool]:
    """One started engine per (engine, model, params) for the whole session, stopped at its end."""
    from .engines.pool import EnginePool
    from .session.boundaries import watch
    from .session.sharing import attach_pool, share_for

    timeout = settings(pytestconfig).timeout
    share = share_for(pytestconfig)  # workers sharing a GPU: each engine reserves its memory first
    pool = EnginePool(settings(pytestconfig).log_dir, start_timeout_s=timeout, call_timeout_s=timeout,
                      progress=announcer(pytestconfig), admission=share)
    attach_pool(pytestconfig, pool)
    watch(pytestconfig)  # from now on an exclusive test's setup stops the pool's idle engines (sharing.begin)
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


def engine_spec(config: pytest.Config, cell: MatrixCell, model: Path, **overrides: Any) -> EngineSpec:
    from .catalog.base import EngineSpec
    from .catalog.registry import drives_server

    params = {**cell.params, **overrides}
    endpoint = settings(config).endpoint
    if drives_server(cell.engine) and endpoint and "endpoint" not in params:
        params["endpoint"] = endpoint
    from .session.sharing import sized_for_sharing

    return sized_for_sharing(config, EngineSpec(engine=cell.engine, model=str(model), params=params))


def _add_engine_time(cs: LiveCell | None, seconds: float, part: str | None = None) -> None:
    """Time spent inside engines (starts this cell triggered, its calls, whole engine lives in a child), recorded as
    ``engine_s`` so the benchmark can tell the engines' time from the harness's own."""
    if cs is None:
        return
    cs.metrics["engine_s"] = cs.metrics.get("engine_s", 0.0) + seconds
    if part is not None:
        cs.metrics[part] = cs.metrics.get(part, 0.0) + seconds


class _Timed:
    """An engine whose generate/embed time is added to the cell's engine time (the engine itself is shared)."""

    def __init__(self, engine: Engine, cs: LiveCell | None, part: str | None = None,
                 cache: dict[Any, Any] | None = None) -> None:
        self._engine, self._cs, self._part, self._cache = engine, cs, part, cache
        self.name = engine.name

    def _timed(self, key: Any, fn: Callable[..., Any], *args: Any) -> Any:
        if self._cache is not None and key in self._cache:
            return self._cache[key]
        t0 = time.perf_counter()
        try:
            result = fn(*args)
        finally:
            _add_engine_time(self._cs, time.perf_counter() - t0, self._part)
        if self._cache is not None:
            self._cache[key] = result
        return result

    def start(self, spec: EngineSpec) -> RunInfo:
        return self._engine.start(spec)

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        key = ("generate", tuple(tuple(p) for p in prompts), max_tokens, top_n)
        return list(self._timed(key, self._engine.generate, prompts, max_tokens, top_n))

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        return list(self._timed(("embed", tuple(tuple(p) for p in prompts)), self._engine.embed, prompts))

    def shutdown(self) -> None:
        self._engine.shutdown()


#: How pytest-timeout's signal method words the failure it raises in the test (``PYTEST_FAILURE_MESSAGE``).
_TIMEOUT_PREFIX = "Timeout (>"
_TIMEOUT_SUFFIX = "from pytest-timeout."


def timeout_kill_text(message: str, engine: str, elapsed_s: float, in_process: bool) -> str | None:
    """The cell's reason when pytest-timeout stopped it inside an engine start (its signal method raises its
    failure wherever the test is, here in the wait for the engine), or None for any other failure: the harness's
    time limit ran out, the engine did not fail, and the cell says so rather than "engine failed"."""
    message = message.strip().removeprefix("Failed: ")
    if not (message.startswith(_TIMEOUT_PREFIX) and message.endswith(_TIMEOUT_SUFFIX)):
        return None
    limit = message[len(_TIMEOUT_PREFIX):].split(")", 1)[0]
    after = ("; the engine ran in this process: what its start left here is unknown, and the cells this process "
             "runs next say so") if in_process else "; its engine process was stopped, the next cells start afresh"
    return (f"harness: pytest-timeout killed the test during the {engine} engine start after {elapsed_s:.0f} s "
            f"(limit {limit}){after}")


def _fail_cell(cs: LiveCell | None, what: str, exc: EngineFailed) -> NoReturn:
    """Fail the cell with the engine's reason, where its log is kept and the log's last lines."""
    from .engines.isolation import failure_text

    if cs is not None:
        cs.log_tail, cs.engine_failed = exc.log_tail or None, True
    pytest.fail(failure_text(what, exc), pytrace=False)


def _note_prediction(request: pytest.FixtureRequest, cs: LiveCell | None, spec: EngineSpec, info: RunInfo | None,
                     log_tail: str | None) -> None:
    """The attention backend predicted for the cell beside the one its engine reported (kb.predict_cells), and a
    finding of its own when they differ."""
    state = run_state(request.config)
    if cs is None or state is None:
        return
    from .kb.predict_cells import cell_prediction, differs_finding, reported_backend
    from .workload.models import planned_shape

    reported = reported_backend(dataclasses.asdict(info) if info is not None else None, log_tail)
    head = planned_shape(spec.model).get("head_size")  # the model's own: the selection's head-size limits apply
    params = {**spec.params, "head_size": head} if head is not None and "head_size" not in spec.params else spec.params
    entry = cell_prediction(spec.engine, params, state.fingerprint, reported,
                            info.version if info is not None else None, log_tail=log_tail)
    if entry is None:
        return
    cs.notes["attention_prediction"] = json_safe(entry)
    finding = differs_finding(entry, spec.engine)
    if finding is not None:
        cs.flagged = (*cs.flagged, finding)


def _note_deviations(cs: LiveCell | None, spec: EngineSpec) -> None:
    """The cell's settings that differ from its engine's defaults (engines/deviations.py), in its record."""
    if cs is None:
        return
    from .engines.deviations import deviations

    cs.notes["deviations"] = [d.to_dict() for d in deviations(spec.engine, spec.params)]


def _settle_deviations(cs: LiveCell, info: RunInfo) -> None:
    """With the engine started: its own defaults beside each deviation, and settings equal to them dropped."""
    defaults = info.extra.get("engine_defaults") if isinstance(info.extra, Mapping) else None
    if not isinstance(defaults, Mapping) or not defaults or "deviations" not in cs.notes:
        return
    from .engines.deviations import Deviation, apply_engine_defaults

    found = tuple(Deviation(d["name"], d["value"], d["by"], d.get("why")) for d in cs.notes["deviations"])
    cs.notes["deviations"] = json_safe([d.to_dict() for d in apply_engine_defaults(found, defaults)])


def start_engine(
    request: pytest.FixtureRequest, pool: EnginePool, spec: EngineSpec, record: bool = True,
    cache: dict[Any, Any] | None = None,
) -> StartedEngine:
    """Start (or reuse) an engine; not installed -> skip with the reason, crash or hang -> failed cell with log.

    ``record=False`` (the reference) keeps the engine's info off the cell and counts its time as ``reference_s``;
    ``cache`` remembers its answers: a deterministic reference asked the same prompts again answers from memory.
    """
    from .catalog.base import EngineFailed, EngineUnavailable

    cs = _live_cell(request)
    part = None if record else "reference_s"
    if record:
        _note_deviations(cs, spec)  # before the start: a cell that fails to start still says what it ran with
    t0 = time.perf_counter()
    if cs is not None and pool.unsettled:
        cs.notes["harness_state"] = pool.unsettled  # every later cell of this process says so
    killed: str | None = None
    unsettled = pool.unsettled
    try:
        engine, info = pool.get(spec)  # where it runs: the spec's `isolated` param, else its descriptor
    except EngineUnavailable as exc:  # finding out is the harness's time, not an engine's
        pytest.skip(f"{spec.engine} unavailable: {exc}")
    except EngineFailed as exc:
        _add_engine_time(cs, time.perf_counter() - t0, part)
        failure: EngineFailed | None = exc
    except pytest.fail.Exception as exc:
        killed = timeout_kill_text(str(exc), spec.engine, time.perf_counter() - t0, pool.unsettled is not unsettled)
        if killed is None:
            raise
        failure = None
    else:
        failure = None
    if killed is not None:  # the harness stopped the start: no engine failure, and said as such
        _add_engine_time(cs, time.perf_counter() - t0, part)
        pytest.fail(killed, pytrace=False)
    if failure is not None:  # out of the except block: the cell's failure is this message alone, no chain
        if record:
            _note_prediction(request, cs, spec, None, failure.log_tail)
        _fail_cell(cs, spec.engine, failure)
    _add_engine_time(cs, time.perf_counter() - t0, part)  # near 0 when the pool already had it started
    if cs is not None and record:
        _settle_deviations(cs, info)
        cs.info.update(json_safe({k: v for k, v in dataclasses.asdict(info).items() if v not in (None, {}, "")}))
        _note_prediction(request, cs, spec, info, None)
        if info.start_s is not None:
            cs.metrics["start_s"] = float(info.start_s)
    return StartedEngine(engine=_Timed(engine, cs, part, cache), info=info, spec=spec)


@pytest.fixture
def gpucompat_isolated(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Run a module-level function in a fresh child process under --gpucompat-timeout (memory measurements).

    Not installed -> skip with the reason; a crash or hang -> failed cell carrying the child's log tail.
    """
    from .catalog.base import EngineFailed, EngineSpec, EngineUnavailable
    from .catalog.params import missing_module
    from .engines.isolation import run_in_child
    from .session.sharing import engine_lives

    timeout = settings(request.config).timeout
    cs = _live_cell(request)
    keep_in = settings(request.config).log_dir
    say = announcer(request.config)
    calls = [0]

    def run(fn: Callable[..., Any], *args: Any) -> Any:
        for spec in (a for a in args if isinstance(a, EngineSpec)):  # a child would only find out the same
            missing = missing_module(spec.engine, spec.params)
            if missing is not None:
                pytest.skip(f"unavailable: {missing}")
            _note_deviations(cs, spec)
        name = getattr(fn, "__name__", "call")
        calls[0] += 1
        log_path = None
        if keep_in is not None:  # one file per call, per test, per xdist worker
            digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            log_path = keep_in / f"{name}-{digest}-{worker}-{calls[0]}.log"
        t0 = time.perf_counter()
        failure: EngineFailed | None = None
        try:
            with engine_lives(request.config, [a for a in args if isinstance(a, EngineSpec)]) as filled:
                result = run_in_child(fn, *args, timeout_s=timeout, log_path=log_path, progress=say,
                                      on_filled=filled)
        except EngineUnavailable as exc:  # finding out is the harness's time, not an engine's
            pytest.skip(f"unavailable: {exc}")
        except EngineFailed as exc:
            failure = exc
        if failure is not None:  # out of the except block: the cell's failure is this message alone, no chain
            _add_engine_time(cs, time.perf_counter() - t0)
            _fail_cell(cs, name, failure)
        _add_engine_time(cs, time.perf_counter() - t0)  # a whole engine life: process, start, calls, shutdown
        return result

    return run


_reference_answers = pytest.StashKey[dict[Any, Any]]()


def reference_engine(request: pytest.FixtureRequest, pool: EnginePool, model: Path, **params: Any) -> StartedEngine:
    """The float32 transformers reference (``params`` such as ``pooling="last"`` to match what an engine does);
    greedy and deterministic, so each distinct question is asked once per session."""
    from .catalog.base import EngineSpec
    from .catalog.registry import reference_name

    spec = EngineSpec(engine=reference_name(), model=str(model), params={"dtype": "float32", **params})
    answers = request.config.stash.setdefault(_reference_answers, {})
    return start_engine(request, pool, spec, record=False, cache=answers.setdefault(spec.key(), {}))


def note(request: pytest.FixtureRequest, key: str, value: Any) -> None:
    """Put ``key`` into the cell in the report (what it was asked, which reference, the golden check)."""
    cs = _live_cell(request)
    if cs is not None:
        cs.notes[key] = json_safe(value)


_prompt_sets = pytest.StashKey[dict[str, Any]]()
_choices = pytest.StashKey[dict[str, Any]]()


@pytest.fixture
def gpucompat_prompts(request: pytest.FixtureRequest, gpucompat_model: Path) -> PromptSet:
    """What the precision checks ask this model: fixed token ids for a tiny built model; for a checkpoint, text (the
    built-in set, or --gpucompat-prompts) tokenized by its own tokenizer, chats through its chat template. Made once
    per model; each cell's report says it as text and ids (``prompts``)."""
    from .common.errors import InputError
    from .workload.prompts import prompt_set_for

    sets = request.config.stash.setdefault(_prompt_sets, {})
    key = str(gpucompat_model)
    if key not in sets:
        try:
            sets[key] = prompt_set_for(gpucompat_model, settings(request.config).prompts)
        except ImportError as exc:
            pytest.skip(f"cannot tokenize the prompts here: {exc}")
        except (ValueError, InputError) as exc:
            pytest.fail(f"gpucompat: {exc}", pytrace=False)
    note(request, "prompts", sets[key].to_dict())
    return sets[key]  # type: ignore[no-any-return]


@pytest.fixture
def gpucompat_reference_choice(request: pytest.FixtureRequest, gpucompat_model: Path,
                               gpucompat_prompts: PromptSet) -> Choice:
    """Which reference fits this runner (float32 on the GPU or the CPU, bfloat16, or none: golden-only), from the
    checkpoint's size and the free memory, decided once per model and session (the reference then stays loaded),
    after the cell's engine has taken its memory; said in each cell's report (``reference``)."""
    from .workload.reference import choose_for

    choices = request.config.stash.setdefault(_choices, {})
    key = str(gpucompat_model)
    if key not in choices:
        if "gpucompat_engine" in request.fixturenames:
            request.getfixturevalue("gpucompat_engine")  # its memory is taken before what is free is measured
        choices[key] = choose_for(gpucompat_model, [len(p) for p in gpucompat_prompts.ids])
    choice, need = choices[key]
    note(request, "reference", {"kind": choice.kind, "reason": choice.reason, "estimate": need.basis})
    return choice  # type: ignore[no-any-return]


@pytest.fixture
def gpucompat_reference(
    request: pytest.FixtureRequest, gpucompat_model: Path, gpucompat_pool: EnginePool,
    gpucompat_reference_choice: Choice,
) -> StartedEngine:
    """The transformers reference on the same model: float32 where it fits, else bfloat16
    (``gpucompat_reference_choice``); the cell skips when none fits the runner."""
    if not gpucompat_reference_choice.runs:
        pytest.skip(f"no reference: {gpucompat_reference_choice.reason}")
    return reference_engine(request, gpucompat_pool, gpucompat_model, **gpucompat_reference_choice.engine_params)


@pytest.fixture
def gpucompat_golden(request: pytest.FixtureRequest, gpucompat_cell: MatrixCell, gpucompat_model: Path,
                     gpucompat_prompts: PromptSet, gpucompat_record: Callable[[str, float], None]) -> CellGolden:
    """The cell's golden outputs: ``check`` against --gpucompat-golden and ``record`` into --gpucompat-record-golden
    (each a no-op without its option)."""
    from .session.golden_run import CellGolden

    state = run_state(request.config)
    return CellGolden(run=state.golden if state is not None else None, cell=gpucompat_cell, model=gpucompat_model,
                      prompts=gpucompat_prompts, note=lambda key, value: note(request, key, value),
                      record_metric=gpucompat_record)


@pytest.fixture
def gpucompat_engine(
    request: pytest.FixtureRequest, gpucompat_cell: MatrixCell, gpucompat_model: Path, gpucompat_pool: EnginePool
) -> StartedEngine:
    """The cell's engine, started with the cell's parameters on the session's model."""
    spec = engine_spec(request.config, gpucompat_cell, gpucompat_model)
    return start_engine(request, gpucompat_pool, spec)
