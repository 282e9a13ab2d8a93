"""Several pytest-xdist workers on one GPU (``--gpucompat-workers-per-gpu``): the pytest side of packing.

The controller makes a private directory for the run's ledger and hands it, with the number of workers per GPU,
to each worker through xdist's workerinput. A worker pinned to a GPU then reserves each engine's memory before it
starts (``packing.py`` says what an engine needs and what fits, ``ledger.py`` keeps the reservations), starts and
stops engines one at a time on its GPU, runs exclusive tests alone, and shuts its idle engines down when another
worker waits for their room. Without a ledger (no xdist, one worker per GPU, no GPU) none of this exists and
nothing about a run changes.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..gpushare.first_start import FirstStarts, calling_each
from ..gpushare.ledger import GpuWaitTimeout, Ledger, StartGate
from ..gpushare.packing import (
    Need,
    Request,
    blocker,
    budget_mib,
    cache_mib,
    engine_need,
    first_waiter,
    load_dtype,
    shared_since,
)
from ..machine import fingerprint as fpmod
from .xdist_support import WORKERS_PER_GPU, packing, workers_per_gpu

if TYPE_CHECKING:
    from ..catalog.base import EngineSpec
    from ..engines.pool import EnginePool

__all__ = ["GpuShare", "GpuWaitTimeout", "attach_pool", "begin", "configure_node", "note_units", "setup_worker",
           "share_for", "sized_for_sharing", "unit_kinds"]

SHARE_DIR = "gpucompat_share_dir"  # workerinput key: the ledger's directory
SHARE_TOKEN = "gpucompat_share_token"  # workerinput key: the run's secret owner token
RUN_ENV = "GPUCOMPAT_SHARED_RUN"
"""Set in each sharing worker to the run's owner token, a random secret the controller hands its workers through
xdist's workerinput (never a path others can see): every process a worker starts inherits it, so NVML's processes
can be told apart from strangers' even when re-parented. A process counts as the run's only when it also runs as
this user (``carries_token``)."""
MEASURED_UNDER_SHARING = "measured_under_sharing"
COMPILE_WAIT_S = "compile_wait_s"
BUDGET_TTL_S = 1.0

_share_key = pytest.StashKey["GpuShare"]()
_dir_key = pytest.StashKey[str]()
_token_key = pytest.StashKey[str]()
_pools_key = pytest.StashKey[list["EnginePool"]]()


# --------------------------------------------------------------------------------------------------------------
# Controller


def configure_node(config: pytest.Config, node: Any) -> None:
    """Hand a starting worker the ledger's directory (made for the first one) and the workers per GPU."""
    if not packing(config):
        return
    if _dir_key not in config.stash:
        config.stash[_dir_key] = tempfile.mkdtemp(prefix="gpucompat-share-")  # 0700, ours
        config.stash[_token_key] = secrets.token_hex(16)
    node.workerinput[SHARE_DIR] = config.stash[_dir_key]
    node.workerinput[SHARE_TOKEN] = config.stash[_token_key]
    node.workerinput[WORKERS_PER_GPU] = workers_per_gpu(config)


def unconfigure(config: pytest.Config) -> None:
    directory = config.stash.get(_dir_key, None)
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


# --------------------------------------------------------------------------------------------------------------
# Worker


def setup_worker(config: pytest.Config, pinned: str | None, say: Callable[[str], None] | None = None) -> None:
    """In a worker given a ledger and pinned to ``pinned`` (its CUDA_VISIBLE_DEVICES): share that GPU."""
    workerinput = getattr(config, "workerinput", None) or {}
    directory = workerinput.get(SHARE_DIR)
    if not directory or not pinned:
        return
    say = say or _stderr_line(str(workerinput.get("workerid", "worker")))
    token = workerinput.get(SHARE_TOKEN)
    problem = _share_dir_problem(str(directory)) if token else "the controller handed no owner token"
    if problem is not None:
        say(f"not sharing the GPU: {problem}; its cells run as if the GPU were theirs alone")
        return
    gpus = tuple(v.strip() for v in str(pinned).split(",") if v.strip())
    known: dict[str, float] = {}
    for gpu in fpmod.collect().gpus:
        for name in (gpu.uuid, str(gpu.index)):
            if name and gpu.memory_mib:
                known.setdefault(name, float(gpu.memory_mib))
    totals = {g: known[g] for g in gpus if g in known}
    if len(totals) != len(gpus):
        if say is not None:
            say(f"cannot tell the memory of {', '.join(g for g in gpus if g not in totals)}: its cells run as if "
                f"the GPU were theirs alone")
        return
    from ..options import Settings

    settings = Settings.from_pytest(config)
    os.environ[RUN_ENV] = str(token)
    ledger = Ledger(directory)
    ledger.join()
    gate = StartGate(directory, gpus, settings.gpu_wait)
    config.stash[_share_key] = GpuShare(config, ledger, gate, totals, settings.gpu_budget, settings.gpu_wait, say)


def _share_dir_problem(directory: str) -> str | None:
    """Why the ledger's directory cannot be trusted (a symlink, another user's, open to others), or None."""
    from ..engines.processes import _check_private

    try:
        _check_private(Path(directory))
    except OSError as exc:
        return f"{directory} is not a private directory of this user ({exc.strerror or 'refused'})"
    return None


def _stderr_line(worker: str) -> Callable[[str], None]:
    """One line on the worker's stderr, which the controller passes through (output capture or not)."""
    def say(text: str) -> None:
        stream = sys.__stderr__
        if stream is not None:  # None only without a console (pythonw)
            stream.write(f"[{worker}] gpucompat: {text}\n")
            stream.flush()

    return say


def share_for(config: pytest.Config) -> GpuShare | None:
    """This worker's share of its GPU, or None when it has the GPU to itself (then nothing is reserved)."""
    return config.stash.get(_share_key, None)


class GpuShare:
    """One worker's side of a shared GPU: the pool's admission (reserve, start gate, give back), exclusive tests,
    room for waiting workers, and whether a test ran beside other workers' engines."""

    def __init__(self, config: pytest.Config, ledger: Ledger, gate: StartGate, totals: Mapping[str, float],
                 budget_fraction: float, wait_s: float, say: Callable[[str], None] | None = None) -> None:
        self.config, self.ledger, self.gate = config, ledger, gate
        self.gpus = tuple(totals)
        self.totals = dict(totals)
        self.budget_fraction, self.wait_s = budget_fraction, wait_s
        self.say = say
        self._pools: list[EnginePool] = []
        self._exclusive: str | None = None
        self._since: float | None = None
        self._budgets: tuple[float, dict[str, float | None]] | None = None
        self.first_starts = FirstStarts(ledger, wait_s, say=say)  # compile once, then share (first_start.py)

    # -- what an engine needs, what the GPU gives ---------------------------------------------------------------

    def need(self, spec: EngineSpec) -> Need:
        """The hook's answer first (``pytest_gpucompat_gpu_need``), else the engine's descriptor."""
        total = min(self.totals.values())
        answer = self.config.hook.pytest_gpucompat_gpu_need(config=self.config, spec=spec, total_mib=total)
        if answer is not None:
            mib = float(answer)
            why = f"{spec.engine}: {mib:.0f} MiB (pytest_gpucompat_gpu_need)"
            return Need(None if mib == float("inf") else mib, why)
        params = spec.params if isinstance(spec.params, Mapping) else {}
        from ..workload.checkpoint import weights_mib

        weights = weights_mib(spec.model, load_dtype(spec.engine, params))
        return engine_need(spec.engine, params, total, weights)

    def budgets(self) -> dict[str, float | None]:
        """Each GPU's budget: the safety fraction of its memory, less what processes outside the run hold (NVML,
        re-read at most once a second; without NVML nothing is subtracted)."""
        now = time.monotonic()
        if self._budgets is not None and now - self._budgets[0] < BUDGET_TTL_S:
            return self._budgets[1]
        state = self.ledger.snapshot()
        members = [int(m.partition(":")[0]) for m in state.members if m.partition(":")[0].isdigit()]
        budgets: dict[str, float | None] = {}
        for gpu, total in self.totals.items():
            reserved = sum(e.mib or 0.0 for e in state.entries if e.held and gpu in e.gpus)
            budgets[gpu] = budget_mib(total, self.budget_fraction, foreign_mib(gpu, members, reserved))
        self._budgets = (now, budgets)
        return budgets

    # -- the pool's admission -------------------------------------------------------------------------------------

    def attach(self, pool: EnginePool) -> None:
        """A pool of this worker: its idle engines make room for others, its cell tracking follows the tests."""
        self._pools.append(pool)

    def make_room(self) -> bool:
        """Shut down one idle engine of this worker's pools (least recently used first); False: none was idle."""
        return any(pool.make_room() for pool in self._pools)

    def admit(self, spec: EngineSpec, make_room: Callable[[], bool]) -> Callable[[], None]:
        need = self.need(spec)
        model = os.path.basename(os.path.normpath(spec.model))
        what = f"{spec.engine} on {model}"
        self._wait_note(what, need)
        entry = self.ledger.reserve(self.gpus, need.mib, what, self.budgets, self.wait_s, make_room)
        return lambda: self.ledger.release(entry)

    def quiet(self, what: str, alone: bool = True) -> AbstractContextManager[Any]:
        return self.gate.held(what, quiet=alone)

    def first_start(self, spec: EngineSpec) -> AbstractContextManager[Callable[[], None]]:
        """Around a start: wait for another worker's first start of its configuration (FirstStarts.first)."""
        from ..catalog.params import compile_key

        model = os.path.basename(os.path.normpath(spec.model))
        params = spec.params if isinstance(spec.params, Mapping) else {}
        return self.first_starts.first(compile_key(spec.engine, spec.model, params), f"{spec.engine} on {model}")

    def sized(self, spec: EngineSpec) -> EngineSpec:
        """``spec`` with its cache size given, where its engine takes one (``GpuMemory.cache_bytes``, in a release
        that has it) and the cell gives none: then its start measures nothing on the GPU, so it overlaps other
        workers' starts instead of waiting for a quiet GPU. Recorded as a harness deviation of the cell
        (``harness_set``), so a report says its cells ran so and why."""
        from ..catalog.registry import descriptor
        from ..workload.checkpoint import weights_mib

        try:
            found = descriptor(spec.engine)
        except ValueError:
            return spec
        memory = found.gpu_memory if found is not None else None
        params = dict(spec.params) if isinstance(spec.params, Mapping) else {}
        if found is None or memory is None or memory.cache_bytes is None or params.get(memory.cache_bytes) is not None:
            return spec
        if not _release_has(found.name, memory.cache_bytes_since):
            return spec
        total = min(self.totals.values())
        mib = cache_mib(memory, params, total, weights_mib(spec.model, load_dtype(spec.engine, params)))
        if mib is None:
            return spec
        why = (f"the GPU is shared (--gpucompat-workers-per-gpu): {found.name} is given its cache size (half of what "
               f"its memory fraction leaves after the weights), so its start measures nothing there and overlaps "
               f"other workers' starts")
        given = params.get("harness_set")
        harness_set = {**(given if isinstance(given, Mapping) else {}), memory.cache_bytes: why}
        return dataclasses.replace(spec, params={**params, memory.cache_bytes: int(mib * 2**20),
                                                 "harness_set": harness_set})

    def _wait_note(self, what: str, need: Need) -> None:
        """One line when the request will wait, so a quiet worker is not taken for a hung one."""
        if self.say is None:
            return
        state = self.ledger.snapshot()
        probe = _probe(self.ledger.holder, self.gpus, need.mib, state.next_ticket)
        reason = blocker(state.entries, probe, self.budgets())
        if reason is not None:
            self.say(f"{what} waits for room on its GPU (up to {self.wait_s:g} s): {reason}")

    @contextlib.contextmanager
    def engine_lives(self, specs: Sequence[EngineSpec]) -> Iterator[Callable[[], None]]:
        """Whole engine lives in a child process (``gpucompat_isolated``) of a test that shares the GPU: their
        memory reserved, their configurations' first starts waited for or claimed (the child says when its first
        engine has generated: what it yields), and the start gate held throughout (alone when one of them measures
        the GPU at start), since their starts and stops cannot be told apart from here."""
        entries = []
        try:
            for spec in specs:
                need = self.need(spec)
                entries.append(self.ledger.reserve(self.gpus, need.mib, f"{spec.engine} lives", self.budgets,
                                                   self.wait_s, self.make_room))
            from ..catalog.registry import quiet_start

            alone = any(quiet_start(spec.engine, spec.params) for spec in specs)
            with contextlib.ExitStack() as stack:
                fills = [stack.enter_context(self.first_start(spec)) for spec in specs]
                with self.gate.held("engine lives in a child process", quiet=alone):
                    yield calling_each(fills)
        finally:
            for entry in entries:
                self.ledger.release(entry)

    # -- tests ------------------------------------------------------------------------------------------------------

    def begin(self, item: pytest.Item) -> None:
        """At a test's setup: its engines count as in use from here; an exclusive test waits for the GPU alone,
        any other first makes room for a worker that waits."""
        for pool in self._pools:
            pool.begin_cell()
        self._since = time.time()
        self.first_starts.turns.clear()
        if not exclusive(self.config, item):
            self.yield_to_waiters()
            return
        for pool in self._pools:
            pool.idle_out()
        what = f"exclusive test {item.nodeid}"
        self._wait_note(what, Need(None, "exclusive"))
        self._exclusive = self.ledger.reserve(self.gpus, None, what, self.budgets, self.wait_s, self.make_room)

    def end(self, item: pytest.Item) -> None:
        """After a test's teardown: an exclusive test gives its GPU back."""
        entry, self._exclusive = self._exclusive, None
        if entry is not None:
            self.ledger.release(entry)

    def yield_to_waiters(self) -> None:
        """Shut idle engines down while the longest-waiting request of another worker does not fit beside them."""
        while True:
            state = self.ledger.snapshot()
            waiter = first_waiter(state.entries, self.gpus, self.ledger.holder)
            if waiter is None or blocker(state.entries, waiter, self.budgets()) is None:
                return
            if not self.make_room():
                return

    def holds_gpu(self) -> bool:
        """Whether the current test holds the GPU alone (an exclusive test)."""
        return self._exclusive is not None

    def shared(self) -> bool:
        """Whether another worker's engine was live on this GPU since the test began."""
        if self._since is None or self.holds_gpu():
            return False
        state = self.ledger.snapshot()
        return shared_since(state.entries, state.released, self.gpus, self.ledger.holder, self._since)


@functools.cache
def _release_has(engine: str, since: str | None) -> bool:
    """Whether the installed release of ``engine`` is ``since`` or later (no ``since``: any installed one); asked
    once per engine and worker, since every cell of a shared GPU asks."""
    from ..catalog.params import engine_version
    from ..common.versions import parse_version

    installed = engine_version(engine)
    if installed is None or since is None:
        return installed is not None
    try:
        return parse_version(installed) >= parse_version(since)
    except ValueError:
        return False


def sized_for_sharing(config: pytest.Config, spec: EngineSpec) -> EngineSpec:
    """``spec`` as this worker starts it: with its cache size given when the GPU is shared (``GpuShare.sized``)."""
    share = share_for(config)
    return spec if share is None else share.sized(spec)


def _probe(holder: str, gpus: Sequence[str], mib: float | None, ticket: int) -> Request:
    """A request as it would stand if it joined the queue now."""
    return Request(id="probe", holder=holder, gpus=tuple(gpus), mib=mib, what="probe", ticket=ticket)


def attach_pool(config: pytest.Config, pool: EnginePool) -> None:
    """The session's engine pool: a shared GPU's admission watches it, an exclusive test empties it."""
    config.stash.setdefault(_pools_key, []).append(pool)
    share = share_for(config)
    if share is not None:
        share.attach(pool)


def begin(config: pytest.Config, item: pytest.Item) -> None:
    """At a test's setup, before its fixtures: with workers sharing the GPU, ``GpuShare.begin``; alone, before an
    exclusive test or one that runs whole engine lives in child processes, this run's idle engines are stopped
    first (they hold memory that test's engines need, and move the device-wide figures it reads)."""
    share = share_for(config)
    if share is not None:
        share.begin(item)
        return
    pools = config.stash.get(_pools_key, None)
    if pools and unit_kind(config, item) is not None:  # no engine pool yet: nothing to stop, no hook per test
        for pool in pools:
            pool.idle_out()


_UNITS_FILE = "units-{worker}.json"
EXCLUSIVE, APART = "exclusive", "apart"


def note_units(config: pytest.Config, items: Sequence[pytest.Item]) -> None:
    """On a worker sharing its GPU, at collection: the tests the controller's scheduler deals out on their own
    (``xdist_support.make_scheduler``), by nodeid: exclusive ones (after every other test) and those that run
    whole engine lives in child processes (first: they are the longest, and share no engine with others)."""
    workerinput = getattr(config, "workerinput", None) or {}
    directory = workerinput.get(SHARE_DIR)
    if not directory:
        return
    from ..common import jsontext
    from ..common.files import write_atomic

    kinds = {item.nodeid: kind for item in items if (kind := unit_kind(config, item)) is not None}
    name = _UNITS_FILE.format(worker=workerinput.get("workerid", os.getpid()))
    with contextlib.suppress(OSError):  # unwritten, the scheduler deals these tests out as any other
        write_atomic(os.path.join(directory, name), jsontext.dumps(kinds, sort_keys=True))


def unit_kinds(config: pytest.Config) -> dict[str, str]:
    """On the controller, once every worker has collected: the tests the workers noted, by nodeid (none when the
    run does not share GPUs, or a note cannot be read: then the scheduler deals them out as any other)."""
    from ..common.inputs import read_json

    directory = config.stash.get(_dir_key, None)
    found: dict[str, str] = {}
    if directory is None:
        return found
    for path in sorted(Path(directory).glob(_UNITS_FILE.format(worker="*"))):
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            found.update({str(k): str(v) for k, v in read_json(path).items()
                          if v in (EXCLUSIVE, APART)})
    return found


def unit_kind(config: pytest.Config, item: pytest.Item) -> str | None:
    """``exclusive`` (the GPU to itself), ``apart`` (whole engine lives in child processes: ``gpucompat_isolated``)
    or None (tests sharing the engines of their configuration)."""
    if exclusive(config, item):
        return EXCLUSIVE
    return APART if "gpucompat_isolated" in getattr(item, "fixturenames", ()) else None


def exclusive(config: pytest.Config, item: pytest.Item) -> bool:
    """The hook's answer (``pytest_gpucompat_cell_exclusive``), else the declaration: ``exclusive=True`` in the
    test's gpucompat mark. Memory tests are not exclusive: they judge their engine's own processes, and the
    device-wide figures they read are cross-checks that name other tenants and never fail a cell."""
    answer = config.hook.pytest_gpucompat_cell_exclusive(config=config, item=item)
    if answer is not None:
        return bool(answer)
    return any(mark.kwargs.get("exclusive") for mark in item.iter_markers("gpucompat"))


def foreign_mib(gpu: str, members: Sequence[int], reserved_mib: float) -> float | None:
    """GPU memory held by processes outside the run (NVML): what is used less what the run's workers and every
    process they started hold. When NVML cannot say whose processes these are (a container's other pid
    namespace), the run is taken to hold what it reserved. None without NVML or without this GPU."""
    from ..checks.ownership import device_memory

    found = device_memory(lambda nvml: fpmod.nvml_handle(nvml, gpu))
    if found is None:
        return None
    used, held, listed = found
    return _foreign(used, held, listed, members, reserved_mib)


def _foreign(used: float, held: Mapping[int, float], listed: bool, members: Sequence[int], reserved: float) -> float:
    from ..checks.ownership import carries_token, descends_from
    from ..machine.procfs import exists

    if not listed or (held and not any(exists(pid) for pid in held)):
        return max(0.0, used - reserved)
    token = os.environ.get(RUN_ENV, "")
    ours = sum(mib for pid, mib in held.items()
               if any(descends_from(pid, m) for m in members) or carries_token(pid, token, RUN_ENV))
    return max(0.0, used - ours)


def engine_lives(config: pytest.Config, specs: Sequence[EngineSpec]) -> AbstractContextManager[Any]:
    """Around engine lives in a child process: reserved and gated when the test shares its GPU (not exclusive)."""
    share = share_for(config)
    if share is None or share.holds_gpu() or not specs:
        return contextlib.nullcontext(lambda: None)
    return share.engine_lives(specs)


def note_sharing(item: pytest.Item, metrics: dict[str, float]) -> None:
    """After a test's call: ``measured_under_sharing: 1`` among its figures when other engines ran beside it."""
    share = share_for(item.config)
    if share is not None and share.shared():
        metrics[MEASURED_UNDER_SHARING] = 1.0
    turns = share.first_starts.turns if share is not None else []
    if turns:  # compile once, then share: which first starts it ran, how long it waited for others'
        metrics[COMPILE_WAIT_S] = sum(t.waited_s for t in turns)
        from .state import live_cell_key

        cs = item.stash.get(live_cell_key, None)
        if cs is not None:
            cs.notes["compile_caches"] = [t.to_dict() for t in turns]

