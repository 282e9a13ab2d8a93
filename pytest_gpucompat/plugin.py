"""The pytest hooks, kept thin: each one delegates to a module that holds the logic.

Without ``--gpucompat`` (or ini ``gpucompat = true``) only the options, the marker and the hook specifications are
registered and the fixtures skip; nothing else about a run changes, and nothing else is imported: the knowledge
base, the session machinery, the engines and the report load with the hooks of a run that asked for the plugin
(``_Run``, registered before the initial conftests as the module's hooks would be, pytest-cov's way), so an
installed plugin costs a run that does not ask for it a few modules and no call per test.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from . import options

if TYPE_CHECKING:
    from .session.state import LiveCell, RunState

_froze_key = pytest.StashKey[bool]()  # this run froze the objects made before its tests (pytest_collection_finish)
_RUN = "gpucompat-run"  # the name of a run's hooks (_Run) in the plugin manager


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpucompat", "GPU / driver / CUDA / engine compatibility")
    group.addoption("--gpucompat", action="store_true", default=None,
                    help="enable the plugin: fingerprint, matrices, known-bad rules, reports")
    options.add_options(group.addoption, "gpucompat-", options.PYTEST, type_error=_usage_error)
    parser.addini("gpucompat", "enable pytest-gpucompat", type="bool", default=False)
    parser.addini("gpucompat_kb", "extra rule files or directories", type="paths", default=[])
    parser.addini("gpucompat_log_dir", "keep every engine log in this directory", default="")


def _usage_error(flag: str, exc: ValueError) -> pytest.UsageError:
    return pytest.UsageError(f"gpucompat: {flag}: {exc}")


def _enabled(config: pytest.Config) -> bool:
    opt = config.getoption("gpucompat", None)
    return bool(opt) if opt is not None else bool(config.getini("gpucompat"))


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """A run that asks for the plugin gets its hooks now, before the initial conftests are registered: the same
    place among the plugins as this module's own hooks, so conftest hooks and wrappers keep their order around
    them. (The command line is parsed only at configure; what pytest has read of it so far is enough here.)"""
    opt = getattr(early_config.known_args_namespace, "gpucompat", None)
    if opt or (opt is None and early_config.getini("gpucompat")):
        _register(early_config)


def _register(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(_RUN):
        config.pluginmanager.register(_Run(), _RUN)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpucompat(engine=..., params={...}, axes={...}, matrix=name): run the test over a compatibility "
        "matrix; the gpucompat_cell fixture gives each run its cell",
    )
    if _enabled(config):
        _register(config)  # where this module was loaded after the initial conftests (-p, pytest_plugins)
    elif config.pluginmanager.has_plugin(_RUN):  # asked for early, turned off by the whole command line
        config.pluginmanager.unregister(name=_RUN)


# pytest-xdist's hook: without xdist installed, pytest must still start. tryfirst: xdist's own implementation (the
# CPU count) answers first whenever it was registered after this plugin, e.g. with `-p pytest_gpucompat.plugin`.
@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    if not _enabled(config):
        return None
    from .session import xdist_support

    return xdist_support.auto_num_workers(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    if _enabled(node.config):
        from .session import sharing

        sharing.configure_node(node.config, node)  # workers sharing GPUs: where their ledger lives


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if not _enabled(config):
        return None
    from .session import sharing, xdist_support

    return xdist_support.make_scheduler(config, log, lambda: sharing.unit_kinds(config))


class _Run:
    """The hooks of a run with the plugin on (registered by ``_register``); each delegates as the module's do."""

    state: RunState | None = None
    live_cell_key: pytest.StashKey[LiveCell] | None = None  # state.live_cell_key, once loaded (read for every phase)
    # an xdist worker: it may share its GPU (session.sharing); any other process never does, and neither imports
    # the sharing machinery nor asks it about each test
    worker = False

    def pytest_configure(self, config: pytest.Config) -> None:
        if not _enabled(config):  # the whole command line turned it off again: pytest_configure unregisters it
            return
        from .session import interrupt
        from .session.state import build_run_state, live_cell_key, run_key

        self.live_cell_key = live_cell_key
        interrupt.install(config)  # SIGTERM as Ctrl-C: a report, engines stopped
        self.worker = getattr(config, "workerinput", None) is not None
        if self.worker:
            from .session import boundaries, sharing, xdist_support

            sharing.setup_worker(config, xdist_support.pin_worker_gpu(config))  # workers sharing a GPU: its ledger
            if sharing.share_for(config) is not None:
                boundaries.watch(config)  # each test's setup and teardown take part in the sharing
        self.state = config.stash[run_key] = build_run_state(config)
        # what pytest_collection_finish freezes is given back to the garbage collector when pytest cleans up, after
        # pytest's own last collection (registered here, before that plugin registers its own cleanup, it runs
        # after it)
        config.add_cleanup(lambda: gc.unfreeze() if config.stash.get(_froze_key, False) else None)
        if not hasattr(config, "workerinput"):
            from .session.collector import ReportCollector

            config.pluginmanager.register(ReportCollector(config, self.state), "gpucompat-report")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        from .session import interrupt

        interrupt.uninstall(config)
        sharing = sys.modules.get(f"{__package__}.session.sharing")
        if sharing is not None:  # never imported: no ledger directory was made (configure_node makes it)
            sharing.unconfigure(config)

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        state = self.state
        if state is None:
            return None
        fp = state.fingerprint
        lines = [f"gpucompat: {'what-if ' if state.what_if else ''}{fp.name}: {fp.summary()}"]
        lines += [f"gpucompat: note: {r}" for r in fp.reasons]
        lines.append(f"gpucompat: {len(state.kb.rules)} rules from {len(state.kb.files)} files")
        return lines

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        state = self.state
        if state is None:
            return
        if "gpucompat_model" in metafunc.fixturenames:
            models = list(state.settings.model) or ["tiny-qwen2"]
            ids = [os.path.basename(os.path.normpath(m)) for m in models]
            metafunc.parametrize("gpucompat_model", models, ids=ids, indirect=True, scope="session")
        marker = metafunc.definition.get_closest_marker("gpucompat")
        if marker is None:
            return
        from .common.errors import InputError
        from .workload.matrix import cells_from_marker

        where = f"{metafunc.definition.nodeid}"
        try:
            cells = cells_from_marker(marker.args, marker.kwargs, where)
        except InputError as exc:
            pytest.fail(f"gpucompat: {exc}", pytrace=False)
        if "gpucompat_cell" not in metafunc.fixturenames:
            pytest.fail(f"gpucompat: {where}: a @pytest.mark.gpucompat test must take gpucompat_cell", pytrace=False)
        metafunc.parametrize("gpucompat_cell", cells, ids=[c.id for c in cells])

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        state = self.state
        if state is None:
            return
        from .session.state import NOT_COVERED, live_cell_key

        weights: dict[tuple[str, Any], dict[str, Any]] = {}
        for item in items:
            callspec = getattr(item, "callspec", None)
            cell = callspec.params.get("gpucompat_cell") if callspec else None
            if callspec is None or cell is None:
                continue
            measured = _model_facts(callspec.params.get("gpucompat_model"), cell, weights)
            cs = state.evaluate(config, cell, measured=measured)
            item.stash[live_cell_key] = cs
            if cs.not_covered:
                item.add_marker(pytest.mark.skip(reason=f"{NOT_COVERED}: needs {cs.not_covered}"))
            elif cs.decision is not None and cs.decision.action == "skip":
                item.add_marker(pytest.mark.skip(reason=cs.decision.reason))
            elif cs.decision is not None and cs.decision.action == "xfail":
                item.add_marker(pytest.mark.xfail(reason=cs.decision.reason, strict=cs.decision.strict))
        if self.worker:
            from .session import sharing

            sharing.note_units(config, items)  # a worker sharing its GPU: the tests the scheduler deals out alone

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        state = self.state
        if state is None:
            return
        # What exists now (the items, their cells, the knowledge base, every imported module) lives until the run
        # ends: out of the garbage collector's sight (gc.freeze) rather than walked again by each full collection
        # while the tests run: a few percent of a large run's time (given back when pytest cleans up:
        # pytest_configure). Not where something else froze objects already (a program that runs pytest after a
        # gc.freeze of its own).
        if not gc.get_freeze_count():
            gc.freeze()
            session.config.stash[_froze_key] = True
        from .session.collector import share_cells

        share_cells(session.config, session.items, state.fingerprint.name)  # for an xdist controller, if one asks
        if not state.fleet:
            return
        from .session.fleet import format_fleet_preview

        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(format_fleet_preview(state, session.config, session.items))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[Any]) -> Generator[None, Any, Any]:
        cs = item.stash.get(self.live_cell_key, None) if self.live_cell_key is not None else None
        if cs is not None and self.worker and call.when == "call":
            from .session.sharing import note_sharing

            note_sharing(item, cs.metrics)
        report = yield
        failure = call.excinfo.value if call.excinfo is not None else None
        if failure is not None:
            from .catalog.base import EngineFailed
            from .gpushare.ledger import GpuWaitTimeout

            if isinstance(failure, GpuWaitTimeout) and report.failed:
                report.longrepr = f"gpucompat: {failure}"
        state = self.state
        if cs is None or state is None:
            return report
        if failure is not None and isinstance(failure, EngineFailed):
            from .engines.isolation import failure_text

            cs.log_tail, cs.engine_failed = failure.log_tail or None, True
            if report.failed:
                report.longrepr = failure_text(str(cs.cell.engine), failure)
        payload = cs.payload_for(report.when, report.passed, state.fingerprint.name)
        if payload is not None:
            report.user_properties.append(("gpucompat", payload))
        return report

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        state = self.state
        workeroutput = getattr(session.config, "workeroutput", None)
        if state is not None and workeroutput is not None:
            workeroutput["gpucompat_fingerprint"] = state.fingerprint.to_dict()

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        collector = config.pluginmanager.get_plugin("gpucompat-report")
        if collector is not None:
            collector.terminal_summary(terminalreporter)


def _model_facts(model: Any, cell: Any, cache: dict[tuple[str, Any], dict[str, Any]]) -> dict[str, Any] | None:
    """What the knowledge base may need to know of the cell's model before anything starts: its shape (head size,
    KV heads, architecture: `when.model_shape` rules), read from config.json or, for a model the run will build,
    from the config it will be built with; and for a local checkpoint its weights in MiB for the cell's dtype
    (``needs: {gpu_memory_mib: ...}`` rules)."""
    if not isinstance(model, str):
        return None
    key = (model, cell.params.get("dtype"))
    if key not in cache:
        from .kb import WEIGHTS_PARAM
        from .workload.checkpoint import weights_mib
        from .workload.models import planned_shape

        facts: dict[str, Any] = dict(planned_shape(model))
        if os.path.isdir(model):
            mib = weights_mib(model, key[1])
            if mib is not None:
                facts[WEIGHTS_PARAM] = mib
        cache[key] = facts
    return cache[key] or None
