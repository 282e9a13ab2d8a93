"""The pytest hooks, kept thin: each one delegates to a module that holds the logic.

Without ``--gpucompat`` (or ini ``gpucompat = true``) only the marker is registered and the
fixtures skip; nothing else about a run changes.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from . import interrupt, xdist_support
from .engines.base import EngineFailed
from .errors import InputError
from .fixtures import (  # noqa: F401  (fixtures are found through this module)
    gpucompat_cell,
    gpucompat_engine,
    gpucompat_findings,
    gpucompat_fingerprint,
    gpucompat_flag,
    gpucompat_isolated,
    gpucompat_model,
    gpucompat_pool,
    gpucompat_record,
    gpucompat_reference,
)
from .matrix import cells_from_marker
from .rules import WEIGHTS_PARAM
from .state import NOT_COVERED, RunState, build_run_state, cell_key

run_key = pytest.StashKey[RunState]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpucompat", "GPU / driver / CUDA / engine compatibility")
    group.addoption("--gpucompat", action="store_true", default=None,
                    help="enable the plugin: fingerprint, matrices, known-bad rules, reports")
    group.addoption("--gpucompat-env", metavar="FILE",
                    help="evaluate against a fingerprint file (what-if) or show a fleet file's known-bad cells")
    group.addoption("--gpucompat-kb", metavar="PATH", action="append", default=[],
                    help="extra rule file or directory (repeatable)")
    group.addoption("--gpucompat-no-builtin-rules", action="store_true", default=False,
                    help="use only the rule files given with --gpucompat-kb, not the shipped knowledge base")
    group.addoption("--gpucompat-run-known-bad", action="store_true", default=False,
                    help="run known crash/hang cells as strict xfail under --gpucompat-timeout")
    group.addoption("--gpucompat-timeout", type=_timeout_option, default=600.0, metavar="S",
                    help="seconds an engine may take to start or answer before its cell fails (default 600)")
    group.addoption("--gpucompat-log-dir", metavar="DIR",
                    help="keep every engine log in DIR (CI artifacts); default: only failed engines' logs are kept")
    group.addoption("--gpucompat-model", metavar="PATH", action="append", default=[],
                    help="local model checkpoint to test (repeatable); default: a tiny model built locally")
    group.addoption("--gpucompat-endpoint", metavar="URL",
                    help="OpenAI-compatible endpoint for the openai engine instead of a server started here")
    group.addoption("--gpucompat-report", metavar="PATH", help="write the JSON report here")
    group.addoption("--gpucompat-baseline", metavar="FILE",
                    help="compare with this report at the end; a regression fails the run; a missing FILE "
                    "is a first run: a note says how this run's report becomes it")
    group.addoption("--gpucompat-compare-fail", metavar="EXPR", action="append", default=[],
                    help="with --gpucompat-baseline: metric threshold such as tokens_per_s:-10%% (metrics: "
                    "docs/ci.md; an unknown one is a usage error)")
    group.addoption("--gpucompat-runner", metavar="NAME", help="runner name in reports (default: host name)")
    parser.addini("gpucompat", "enable pytest-gpucompat", type="bool", default=False)
    parser.addini("gpucompat_kb", "extra rule files or directories", type="paths", default=[])
    parser.addini("gpucompat_log_dir", "keep every engine log in this directory", default="")


def _timeout_option(text: str) -> float:
    """--gpucompat-timeout: a positive finite number of seconds, else a one-line usage error."""
    from .engines.isolation import positive_seconds

    try:
        return positive_seconds(text)
    except ValueError as exc:
        raise pytest.UsageError(f"gpucompat: --gpucompat-timeout: {exc}") from None


def _enabled(config: pytest.Config) -> bool:
    opt = config.getoption("gpucompat", None)
    return bool(opt) if opt is not None else bool(config.getini("gpucompat"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "gpucompat(engine=..., params={...}, axes={...}, matrix=name): run the test over a compatibility "
        "matrix; the gpucompat_cell fixture gives each run its cell",
    )
    if not _enabled(config):
        return
    interrupt.install(config)  # SIGTERM as Ctrl-C: a report, engines stopped
    xdist_support.pin_worker_gpu(config)
    config.stash[run_key] = build_run_state(config)
    if not hasattr(config, "workerinput"):
        from .report.collector import ReportCollector

        config.pluginmanager.register(ReportCollector(config, config.stash[run_key]), "gpucompat-report")


def pytest_unconfigure(config: pytest.Config) -> None:
    interrupt.uninstall(config)


def run_state(config: pytest.Config) -> RunState | None:
    return config.stash.get(run_key, None)


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    state = run_state(config)
    if state is None:
        return None
    fp = state.fingerprint
    lines = [f"gpucompat: {'what-if ' if state.what_if else ''}{fp.name}: {fp.summary()}"]
    lines += [f"gpucompat: note: {r}" for r in fp.reasons]
    lines.append(f"gpucompat: {len(state.kb.rules)} rules from {len(state.kb.files)} files")
    return lines


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without xdist installed, pytest must still start
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    return xdist_support.auto_num_workers(config) if _enabled(config) else None


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("gpucompat")
    state = run_state(metafunc.config)
    if state is None:
        return
    if "gpucompat_model" in metafunc.fixturenames:
        models = metafunc.config.getoption("gpucompat_model") or ["tiny-qwen2"]
        ids = [os.path.basename(os.path.normpath(m)) for m in models]
        metafunc.parametrize("gpucompat_model", models, ids=ids, indirect=True, scope="session")
    if marker is None:
        return
    where = f"{metafunc.definition.nodeid}"
    try:
        cells = cells_from_marker(marker.args, marker.kwargs, where)
    except InputError as exc:
        pytest.fail(f"gpucompat: {exc}", pytrace=False)
    if "gpucompat_cell" not in metafunc.fixturenames:
        pytest.fail(f"gpucompat: {where}: a @pytest.mark.gpucompat test must take gpucompat_cell", pytrace=False)
    metafunc.parametrize("gpucompat_cell", cells, ids=[c.id for c in cells])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = run_state(config)
    if state is None:
        return
    weights: dict[tuple[str, Any], float | None] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        cell = callspec.params.get("gpucompat_cell") if callspec else None
        if cell is None:
            continue
        cs = state.evaluate(config, cell, measured=_model_facts(callspec.params.get("gpucompat_model"), cell, weights))
        item.stash[cell_key] = cs
        if cs.not_covered:
            item.add_marker(pytest.mark.skip(reason=f"{NOT_COVERED}: needs {cs.not_covered}"))
        elif cs.decision is not None and cs.decision.action == "skip":
            item.add_marker(pytest.mark.skip(reason=cs.decision.reason))
        elif cs.decision is not None and cs.decision.action == "xfail":
            item.add_marker(pytest.mark.xfail(reason=cs.decision.reason, strict=cs.decision.strict))


def _model_facts(model: Any, cell: Any, cache: dict[tuple[str, Any], float | None]) -> dict[str, float] | None:
    """What the knowledge base may need to know of a local checkpoint before anything starts: its weights in MiB
    for the cell's dtype (``needs: {gpu_memory_mib: ...}`` rules). Built tiny models are not measured."""
    if not isinstance(model, str) or not os.path.isdir(model):
        return None
    key = (model, cell.params.get("dtype"))
    if key not in cache:
        from .models import weights_mib

        cache[key] = weights_mib(model, key[1])
    mib = cache[key]
    return None if mib is None else {WEIGHTS_PARAM: mib}


def pytest_collection_finish(session: pytest.Session) -> None:
    state = run_state(session.config)
    if state is None:
        return
    from .report.collector import share_cells

    share_cells(session.config, session.items, state.fingerprint.name)  # for an xdist controller, if one asks
    if not state.fleet:
        return
    from .fleet import format_fleet_preview

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(format_fleet_preview(state, session.config, session.items))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, Any]:
    report = yield
    cs = item.stash.get(cell_key, None)
    state = run_state(item.config)
    if cs is None or state is None:
        return report
    failure = call.excinfo.value if call.excinfo is not None else None
    if isinstance(failure, EngineFailed):
        from .engines.isolation import failure_text

        cs.log_tail, cs.engine_failed = failure.log_tail or None, True
        if report.failed:
            report.longrepr = failure_text(str(cs.cell.engine), failure)
    report.user_properties.append(("gpucompat", cs.payload(state.fingerprint.name)))
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = run_state(session.config)
    workeroutput = getattr(session.config, "workeroutput", None)
    if state is not None and workeroutput is not None:
        workeroutput["gpucompat_fingerprint"] = state.fingerprint.to_dict()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    collector = config.pluginmanager.get_plugin("gpucompat-report")
    if collector is not None:
        collector.terminal_summary(terminalreporter)
