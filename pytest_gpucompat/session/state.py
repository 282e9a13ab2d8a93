"""Per-run state of the plugin: options, fingerprint, knowledge base and what was decided for each cell.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from ..kb import Decision, Finding, KnowledgeBase, evaluate_cell, load_kb
from ..machine import fingerprint as fpmod
from ..machine.fingerprint import Fingerprint
from ..options import Settings
from ..report.record import NOT_COVERED as NOT_COVERED  # the plugin's skip reason of a cell that is not covered
from ..workload.matrix import MatrixCell
from . import payload as cell_payload
from .payload import json_safe as json_safe  # where the fixtures have always found it

if TYPE_CHECKING:
    from .golden_run import GoldenRun


@dataclass(slots=True)
class LiveCell:
    """A collected test item's cell while the run goes on: the `MatrixCell` it runs, what the knowledge base decided
    for it, and what is measured and noted as it runs; filled at collection, read by fixtures and reports, kept
    under `live_cell_key`. Not the report's ``CellRecord`` (what the report says of the cell). (Slots: one per
    collected cell, kept to the end of the run, and an instance ``__dict__`` is one more object that every garbage
    collection walks.)

    Live values only: what the report says of them, and under which keys, is the payload's (session/payload.py,
    keyed by the fields of report/record.py's ``CellRecord``)."""

    cell: MatrixCell
    findings: tuple[Finding, ...] = ()
    decision: Decision | None = None
    not_covered: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    series: dict[str, list[float | None]] = field(default_factory=dict)  # a figure per cycle/round, for charts
    info: dict[str, Any] = field(default_factory=dict)  # what the engine said of its start (engine_info)
    # what the cell was asked and compared with (prompts, reference, golden, deviations): keys of the cell in the
    # report, a record's field where one has the name
    notes: dict[str, Any] = field(default_factory=dict)
    log_tail: str | None = None
    engine_failed: bool = False
    # findings measured while the cell ran (gpucompat_flag): reported with the rules' findings, but not rules
    flagged: tuple[Finding, ...] = ()

    # the part of the payload that only changes with the findings, as JSON text, built once for the reports of the
    # setup, call and teardown phases; and the (fixed, live) texts last sent
    _fixed: tuple[tuple[Finding, ...], tuple[Finding, ...], str] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _sent: tuple[str, str] | None = field(default=None, init=False, repr=False, compare=False)
    # the GPUs the cell's engine was shown (payload.visible_gpus), read as its setup ended
    _gpu: str | None = field(default=None, init=False, repr=False, compare=False)

    def payload_for(self, when: str, passed: bool, runner: str | None) -> str | None:
        """The payload a phase's report carries, as JSON text (``payload.join``), or None where it would tell the
        report writer nothing new: a passed call or teardown that changed nothing since the last payload sent (the
        writer takes the outcome from the report itself, and the cell from the payload it already has). The first
        report of a cell, its setup's, always carries it: the cell must exist should the run be interrupted or its
        worker die in the call. For most cells of a large run that is the only payload sent: the call and the
        teardown cost a comparison of two strings, nothing is encoded or decoded again."""
        fixed = self._fixed
        data = None
        if fixed is None or fixed[0] is not self.findings or fixed[1] is not self.flagged:
            text, data = cell_payload.fixed_text_and_data(self)
            fixed = self._fixed = (self.findings, self.flagged, text)
        if when == "setup" or self._sent is None:  # the cell's first payload: its engine has started by now
            self._gpu = cell_payload.visible_gpus()
        live = cell_payload.live_text(self, runner, self._gpu)
        sent = self._sent
        unchanged = passed and sent is not None and sent[1] == live and sent[0] == fixed[2]
        if when == "teardown":  # the cell's last phase: nothing later compares with these texts (a re-run sends its
            # setup's payload anyway), and the cell is kept to the end of the run
            self._fixed = self._sent = None
        elif not unchanged:
            self._sent = (fixed[2], live)
        if unchanged:
            return None
        payload = cell_payload.join(fixed[2], live)
        if data is not None:  # a report writer in this process takes it as data rather than decode it
            cell_payload.hand(payload, data, live)
        return payload


live_cell_key = pytest.StashKey[LiveCell]()
"""Where a collected item keeps its `LiveCell` (the one key, under this one name): set at collection (plugin.py),
read by the fixtures, each phase's report and the collector (a cell stopped in its setup, a worker's collected
cells)."""


@dataclass
class RunState:
    settings: Settings
    fingerprint: Fingerprint
    fleet: Mapping[str, Fingerprint]
    kb: KnowledgeBase
    what_if: bool
    golden: GoldenRun | None = None
    _host: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def run_known_bad(self) -> bool:
        return self.settings.run_known_bad

    def what_if_labels(self) -> dict[str, str]:
        """For a what-if run (``--gpucompat-env`` with one fingerprint): ``what_if``, the fingerprint file as given,
        and ``host``, one line on the machine that really ran the cells (collected once, when first asked); the
        report's runner fingerprint carries both. {} for a run on this machine's own fingerprint."""
        if not self.what_if:
            return {}
        if self._host is None:
            host = fpmod.collect(self.settings.runner)
            self._host = f"{host.name} ({host.summary()})"
        return {"what_if": str(self.settings.env), "host": self._host}

    def evaluate(self, config: pytest.Config, cell: MatrixCell, fingerprint: Fingerprint | None = None,
                 measured: Mapping[str, Any] | None = None) -> LiveCell:
        """The one evaluation of a cell (``kb.evaluate.evaluate_cell``: axes, matching rules, the findings that
        concern the cell, the default decision), then the ``pytest_gpucompat_decide`` hook. ``fingerprint`` (a fleet
        runner's, for the preview) defaults to this run's; ``measured`` holds facts of the cell's model that rules
        may need (``model_weights_mib``)."""
        fp = fingerprint or self.fingerprint
        verdict = evaluate_cell(self.kb, fp, cell.engine, cell.params, axes=cell.axes,
                                run_known_bad=self.run_known_bad, measured=measured)
        state = LiveCell(cell=cell, findings=verdict.findings, not_covered=verdict.not_covered)
        if verdict.not_covered:
            return state
        hook = config.hook.pytest_gpucompat_decide
        decision = None
        if hook.get_hookimpls():  # only when a conftest implements the hook; else the default policy decides
            decision = hook(config=config, cell=cell, findings=state.findings, fingerprint=fp)
        state.decision = decision or verdict.decision
        return state


def build_run_state(config: pytest.Config) -> RunState:
    """Load everything once per process; bad input becomes a UsageError (one line, no traceback)."""
    from ..common.errors import InputError

    settings = Settings.from_pytest(config)
    try:
        kb = load_kb(settings.kb, builtin=not settings.no_builtin_rules)
        fleet = fpmod.load(settings.env) if settings.env else {}
    except InputError as exc:
        raise pytest.UsageError(f"gpucompat: {exc}") from None
    if len(fleet) == 1:
        fp = next(iter(fleet.values()))
        fleet = {}
        what_if = True
    else:
        fp = fpmod.collect(settings.runner)
        what_if = False
    golden = None
    try:  # golden files and a prompts file are checked before anything runs: a bad one is one line, not N failures
        if settings.golden or settings.record_golden:  # imported only when asked: every run pays for an import
            from .golden_run import GoldenRun

            golden = GoldenRun.load(settings.golden, settings.record_golden, fp.name, fp.summary())
        if settings.prompts:
            from ..workload.prompts import load_prompts_file

            load_prompts_file(settings.prompts)
    except InputError as exc:
        raise pytest.UsageError(f"gpucompat: {exc}") from None
    return RunState(settings=settings, fingerprint=fp, fleet=fleet, kb=kb, what_if=what_if, golden=golden)


run_key = pytest.StashKey[RunState]()


def run_state(config: pytest.Config) -> RunState | None:
    """This run's state, or None when the plugin is off (``--gpucompat`` not given)."""
    return config.stash.get(run_key, None)
