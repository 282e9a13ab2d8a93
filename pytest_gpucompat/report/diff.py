"""Compare a report with a baseline: what broke, what got slower, which known-bad rules stopped being true.

How cells are matched (the key), so that a PR runner can be compared with last night's merged matrix:

* both reports have several runners: by (runner name, nodeid);
* otherwise by nodeid alone, whatever the runners are called. When one side has several runners and one of
  them has the other side's runner name, only that runner's cells are compared; else that side's cells of one
  nodeid are folded into one: the most serious outcome (error > failed > xfailed > xpassed > passed > skipped
  > not-covered) with the union of rules and findings and no metrics (figures from different GPUs do not
  compare).

When one side has a single runner restricted to, the other side's other runners are still judged: a cell of a runner
only the current report has that fails is a regression, and its broken findings are new (a runner added whose every
cell failed must not pass the gate).

A metric change beyond a threshold is a regression only when it is also beyond the noise the two runs measured:
a figure measured over rounds carries its relative spread (`tokens_per_s_spread`, see
`pytest_gpucompat.common.metrics`), and a change no larger than the larger of the two runs' spreads is listed as
"within noise" instead. The thresholds are the `--fail-on` ones and, for every other metric the registry gives a
default tolerance (`Metric.tolerance`: tokens/s 10 % lower, drift, TTFT and leak higher), that default: a key
figure worse beyond the noise and the tolerance is a regression unless `--fail-on` relaxes it or `no-defaults`.

An outcome that moved is never silent: good (or not run) -> failed/error is a regression, passed/xpassed -> xfailed
too (the cell is now expected to fail: a rule or a marker hides what used to work), failed -> passed an improvement,
and any other move is listed as a changed outcome.

Pure functions: nothing here reads files or clocks.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from ..checks import outputs
from ..common.metrics import spread_name
from . import cross
from .cellnames import CellName, cell_names
from .compare import CompareRow, cell_rows
from .envdiff import EnvChange, RunSide, environment_changes, run_side
from .model import CellRecord, FindingRecord, Report
from .thresholds import Threshold, check_thresholds, default_thresholds, known_metrics, parse_threshold

__all__ = ["DiffResult", "Threshold", "check_thresholds", "diff_reports", "known_metrics",
           "missing_baseline_note", "parse_threshold", "stale_rules"]

GOOD = frozenset({"passed", "xpassed", "xfailed"})
BAD = frozenset({"failed", "error"})
WORKED = frozenset({"passed", "xpassed"})
_SERIOUSNESS = ("not-covered", "skipped", "passed", "xpassed", "xfailed", "failed", "error")

def missing_baseline_note(baseline: str, report: str | None) -> str:
    """What to do on a first run, when the baseline does not exist yet: this run's report becomes it."""
    if report:
        how = f"cp {shlex.quote(report)} {shlex.quote(baseline)}"
    else:
        how = f"run with --gpucompat-report R.json, then cp R.json {shlex.quote(baseline)}"
    return f"no baseline at {baseline}: this run's report can become it ({how})"


@dataclass(frozen=True)
class Change:
    """An outcome or a figure of one cell that moved between baseline and current."""

    key: str
    nodeid: str
    runner: str
    kind: Literal["outcome", "metric", "coverage"]
    before: str
    after: str
    detail: str = ""
    metric: str | None = None


@dataclass(frozen=True)
class NewFinding:
    """A finding of severity broken on a cell that the baseline did not have."""

    key: str
    nodeid: str
    runner: str
    finding_id: str
    summary: str
    confidence: str | None


@dataclass(frozen=True)
class StaleRule:
    """A known-bad rule whose cell passed anyway (XPASS): evidence against the rule."""

    rule_id: str
    confidence: str | None
    suggestion: str
    cells: tuple[str, ...]


@dataclass(frozen=True)
class DiffResult:
    """Everything that changed; `regressed` is what a CI gate fails on."""

    matching: str
    regressions: tuple[Change, ...] = ()
    improvements: tuple[Change, ...] = ()
    within_noise: tuple[Change, ...] = ()
    """Beyond a threshold, but not beyond the larger of the two runs' measured spreads: not a regression."""
    new_broken: tuple[NewFinding, ...] = ()
    stale_rules: tuple[StaleRule, ...] = ()
    new_cells: tuple[str, ...] = ()
    missing_cells: tuple[str, ...] = ()
    compared: int = 0
    lost: tuple[Change, ...] = ()
    """Coverage the baseline had and this run has not: a cell that passed there and is now skipped, not covered or
    absent, or a figure a threshold gates that a passed cell no longer records. A regression unless allowed."""
    incomplete: str | None = None
    """Why the current report cannot stand for a whole run (interrupted, no cell): a regression."""
    allow_missing: bool = False
    rows: tuple[CompareRow, ...] = ()
    """The compare table: every figure both reports recorded per cell, with its noise band and verdict."""
    fail_on_changed: bool = False
    """`--fail-on changed`: a figure that moved beyond its noise band is a regression."""
    outcome_changes: tuple[Change, ...] = ()
    """Outcomes that moved and are neither a regression nor an improvement (failed -> error, xfailed -> passed)."""
    names: Mapping[str, CellName] = field(default_factory=dict)
    """Each key's short name (report/cellnames.py) among both reports' cells of its test."""
    runs: tuple[RunSide, RunSide] | None = None
    """The baseline and the current report, as the header names them."""
    environment: tuple[EnvChange, ...] = ()
    """What differed between the runs besides their cells (report/envdiff.py)."""

    def name(self, key: str) -> str:
        """A key's name with its file, unique across the diff (the key itself where none was made)."""
        known = self.names.get(key)
        return known.full if known is not None else key

    @property
    def worse(self) -> tuple[CompareRow, ...]:
        """The figures worse beyond their noise band (the regressed ones among them)."""
        return tuple(row for row in self.rows if row.worse)

    @property
    def changed(self) -> tuple[CompareRow, ...]:
        """The figures that moved beyond their noise band (changed, regressed or improved)."""
        return tuple(row for row in self.rows if row.moved)

    @property
    def regressed(self) -> bool:
        return bool(self.regressions or self.new_broken or self.incomplete or (self.lost and not self.allow_missing)
                    or (self.fail_on_changed and self.changed))

    @property
    def clean(self) -> bool:
        return not (
            self.regressions
            or self.improvements
            or self.within_noise
            or self.new_broken
            or self.stale_rules
            or self.new_cells
            or self.missing_cells
            or self.lost
            or self.incomplete
            or self.changed
            or self.outcome_changes
        )


# --- stale rules -------------------------------------------------------------------------------------------------

_SUGGESTIONS = {
    "documents": "documents → refuted by this run (drop the rule or narrow its `when`)",
    "upstream": "upstream → re-check (upstream may have fixed it; narrow the version range)",
    "verified": "verified → re-check (a reproduced failure did not reproduce here)",
}


def _cell_label(cell: CellRecord) -> str:
    return f"{cell.runner}: {cell.nodeid}"


def stale_rules(report: Report) -> list[StaleRule]:
    """Rules that expected a cell to fail while it passed, with the suggested confidence change: a known-bad rule
    whose cell XPASSed, or an unconfirmed claim of breakage whose cell (run as usual) passed.

    Any other rule whose finding only annotated the cell did not predict a failure and is not stale.
    """
    found: dict[str, tuple[str | None, list[str]]] = {}
    for cell in report.cells:
        if cell.outcome not in ("xpassed", "passed"):
            continue
        by_id = {f.id: f for f in cell.findings}
        for rule in cell.rules:
            finding = by_id.get(rule)
            claim_refuted = finding is not None and finding.unconfirmed and finding.severity == "broken"
            if cell.outcome == "passed" and not claim_refuted:
                continue
            if finding is not None and finding.action == "annotate" and not claim_refuted:
                continue
            confidence = finding.confidence if finding else None
            old_conf, cells = found.setdefault(rule, (confidence, []))
            if old_conf is None and confidence is not None:
                found[rule] = (confidence, cells)
            cells.append(_cell_label(cell))
    return [
        StaleRule(
            rule_id=rule,
            confidence=conf,
            suggestion=_SUGGESTIONS.get(conf or "", "re-check (confidence unknown)"),
            cells=tuple(cells),
        )
        for rule, (conf, cells) in found.items()
    ]


# --- matching ----------------------------------------------------------------------------------------------------


def _fold(cells: Sequence[CellRecord]) -> CellRecord:
    """Several runners' cells of one nodeid as one: the most serious outcome, all rules and findings."""
    if len(cells) == 1:
        return cells[0]
    worst = max(cells, key=lambda c: _SERIOUSNESS.index(c.outcome))
    rules: dict[str, None] = {}
    findings: dict[str, FindingRecord] = {}
    for cell in cells:
        rules.update(dict.fromkeys(cell.rules))
        for finding in cell.findings:
            findings.setdefault(finding.id, finding)
    return replace(
        worst,
        rules=tuple(rules),
        findings=tuple(findings.values()),
        metrics={},
        runner=", ".join(dict.fromkeys(c.runner for c in cells)),
    )


def _index(report: Report, by_runner: bool, only_runner: str | None) -> dict[str, CellRecord]:
    groups: dict[str, list[CellRecord]] = {}
    for cell in report.cells:
        if only_runner is not None and cell.runner != only_runner:
            continue
        key = f"{cell.runner}: {cell.nodeid}" if by_runner else cell.nodeid
        groups.setdefault(key, []).append(cell)
    # One runner reporting a nodeid twice should not happen; folding keeps the most serious one.
    return {key: _fold(cells) for key, cells in groups.items()}


def _keying(baseline: Report, current: Report) -> tuple[bool, str | None, str | None, str]:
    """(by_runner, only baseline runner, only current runner, description) per the rule in the module doc."""
    nb, nc = len(baseline.runners), len(current.runners)
    if nb > 1 and nc > 1:
        return True, None, None, "by runner name and nodeid (both reports have several runners)"
    if nb > 1 and nc == 1:
        (name,) = current.runners
        if name in baseline.runners:
            return False, name, None, f"by nodeid, baseline restricted to runner {name!r}"
        return False, None, None, "by nodeid, the baseline's runners folded per nodeid"
    if nc > 1 and nb == 1:
        (name,) = baseline.runners
        if name in current.runners:
            return False, None, name, f"by nodeid, current restricted to runner {name!r}"
        return False, None, None, "by nodeid, the current report's runners folded per nodeid"
    return False, None, None, "by nodeid"


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.6g}"


def _noise(metric: str, before: CellRecord, after: CellRecord) -> float | None:
    """The larger of the two runs' relative spreads of `metric`; None when neither measured one."""
    name = spread_name(metric)
    spreads = [s for s in (before.metrics.get(name), after.metrics.get(name)) if s is not None]
    return max(spreads) if spreads else None


def _within(noise: float, before: float, after: float) -> bool:
    """Is the change no larger than `noise` (a fraction of |before|)?"""
    delta = abs(after - before)
    return delta <= noise * abs(before) if before else delta == 0


def _change_text(threshold: Threshold, before: float, after: float) -> str:
    """`-33.5%` (relative), or the absolute change where the baseline is 0 or within the threshold's floor of 0."""
    if threshold.relative and before and abs(before) >= threshold.floor:
        return f"{threshold.change(before, after):+.1f}%"
    return f"{after - before:+.4g}"


def _metric_changes(
    key: str, before: CellRecord, after: CellRecord, thresholds: Sequence[Threshold]
) -> tuple[list[Change], list[Change], list[Change]]:
    """(regressions, improvements, within noise) of one cell's figures."""
    regressions: list[Change] = []
    improvements: list[Change] = []
    noisy: list[Change] = []
    for threshold in thresholds:
        old = before.metrics.get(threshold.metric)
        new = after.metrics.get(threshold.metric)
        if old is None or new is None:
            continue
        verdict = threshold.judge(old, new)
        if verdict is None:
            continue
        shown = _change_text(threshold, old, new)
        noise = _noise(threshold.metric, before, after)
        within = noise is not None and _within(noise, old, new)
        noted = f", within the runs' noise ±{noise * 100:.1f}%" if within and noise is not None else ""
        item = Change(
            key=key,
            nodeid=after.nodeid,
            runner=after.runner,
            kind="metric",
            metric=threshold.metric,
            before=_num(old),
            after=_num(new),
            detail=f"{shown}, {'worse' if verdict == 'regression' else 'better'}: threshold {threshold}{noted}",
        )
        if within:
            noisy.append(item)
        else:
            (regressions if verdict == "regression" else improvements).append(item)
    return regressions, improvements, noisy


def _with_output_drift(before: CellRecord, after: CellRecord) -> tuple[CellRecord, CellRecord]:
    """Both cells with the ``outputs_*`` figures when both kept their outputs (report/cross.py): the current run's
    outputs against the baseline's, the baseline as identical to itself, so `--fail-on
    outputs_max_abs_logprob_delta:+0.3` fails a cell whose answers moved more than 0.3 nats from the baseline's."""
    compared = cross.pair(before, after)
    if compared is None or not compared.figures or compared.length is None:
        return before, after
    return (replace(before, metrics={**before.metrics, **outputs.identical(compared.length)}),
            replace(after, metrics={**after.metrics, **compared.figures}))


def cannot_run_here(cell: CellRecord) -> bool:
    """A cell skipped because this runner cannot meet its needs (GPUs, memory): a fact about the runner, so its
    findings (e.g. vllm-parallel-needs-visible-gpus on one GPU) are no new breakage of the stack."""
    if cell.outcome not in ("skipped", "not-covered"):
        return False
    return (cell.reason or "").lstrip().startswith("cannot run here") or any(f.extra.get("need") for f in cell.findings)


def diff_reports(baseline: Report, current: Report, thresholds: Iterable[Threshold] = (),
                 allow_missing: bool = False, fail_on_changed: bool = False, default_gate: bool = True,
                 sources: tuple[str | None, str | None] = (None, None)) -> DiffResult:
    """Regressions, improvements, new broken findings, newly stale rules, new and missing cells, lost coverage.

    A regression is a cell that passed, xpassed or xfailed in the baseline and fails or errors now, one that passed
    or xpassed and is xfailed now, a new cell that fails or errors (a failing cell renamed is not a clean run), a
    figure worse beyond one of `thresholds` (and, with `default_gate`, the registry's default tolerances of the
    metrics they do not name) and beyond the runs' noise (module doc), or (in `new_broken`) a finding of severity
    broken the baseline's cell did not have, unless the cell cannot run on this runner (`cannot_run_here`). Lost
    coverage (`lost`) is a regression unless `allow_missing`: a gate must not pass because the cells that could
    fail did not run. A current report that was interrupted or has no cell is a regression too.
    Stale rules are listed when the current report has them and the baseline did not. `rows` is the compare table
    (report/compare.py); with `fail_on_changed` a figure that moved beyond its noise band is a regression too.
    `sources` name the two reports in the header (`runs`).
    """
    explicit = tuple(thresholds)
    limits = explicit + tuple(default_thresholds(explicit) if default_gate else ())
    by_runner, only_base, only_cur, matching = _keying(baseline, current)
    base = _index(baseline, by_runner, only_base)
    cur = _index(current, by_runner, only_cur)

    regressions: list[Change] = []
    improvements: list[Change] = []
    within_noise: list[Change] = []
    outcome_changes: list[Change] = []
    new_broken: list[NewFinding] = []
    rows: list[CompareRow] = []
    base_broken_ids = {f.id for c in base.values() for f in c.findings if f.severity == "broken"}

    lost: list[Change] = []
    gated = {t.metric for t in explicit}
    before: CellRecord | None  # the baseline's cell of a key; None: the cell is new
    for key, before in base.items():
        after = cur.get(key)
        if before.outcome not in GOOD:
            continue
        if after is None:
            lost.append(Change(key, before.nodeid, before.runner, "coverage", before.outcome, "absent",
                               detail="the cell is not in this run"))
        elif not after.ran:
            lost.append(Change(key, after.nodeid, after.runner, "coverage", before.outcome, after.outcome,
                               detail=_reason(after, 200)))
        elif after.outcome in GOOD:
            for metric in sorted(gated):
                if before.metrics.get(metric) is not None and after.metrics.get(metric) is None:
                    lost.append(Change(key, after.nodeid, after.runner, "metric", _num(before.metrics[metric]),
                                       "not recorded", metric=metric, detail="a gated figure this cell had"))

    for key, after in cur.items():
        before = base.get(key)
        known = {f.id for f in before.findings} if before is not None else base_broken_ids
        new_broken.extend(_new_broken(key, after, known))
        if before is None:
            if after.outcome in BAD:  # no baseline to say it was fine: a failing cell is a failing cell
                regressions.append(Change(key, after.nodeid, after.runner, "outcome", "absent", after.outcome,
                                          detail=_reason(after, 300)))
            continue
        moved = _outcome_change(key, before, after)
        if moved is not None:
            verdict, change = moved
            {"regression": regressions, "improvement": improvements, "changed": outcome_changes}[verdict].append(
                change)
        before, after = _with_output_drift(before, after)
        worse, better, noisy = _metric_changes(key, before, after, limits)
        regressions.extend(worse)
        improvements.extend(better)
        within_noise.extend(noisy)
        decided = {c.metric: v for v, found in (("regressed", worse), ("better", better), ("within noise", noisy))
                   for c in found if c.metric}
        rows.extend(cell_rows(key, before, after, decided))

    # the runners of the current report that a restriction to one runner left out (module doc): judged on their own
    extra_cells = [c for c in current.cells if only_cur is not None and c.runner != only_cur]
    for after in extra_cells:
        key = f"{after.runner}: {after.nodeid}"
        new_broken.extend(_new_broken(key, after, base_broken_ids))
        if after.outcome in BAD:
            regressions.append(Change(key, after.nodeid, after.runner, "outcome", "absent (a runner the baseline "
                                      "has not)", after.outcome, detail=_reason(after, 300)))

    named = {**base, **cur}
    names = cell_names(named, by_runner)
    names.update(cell_names({f"{c.runner}: {c.nodeid}": c for c in extra_cells}, by_runner=True))
    old_stale = {s.rule_id for s in stale_rules(baseline)}
    return DiffResult(
        matching=matching,
        regressions=tuple(regressions),
        improvements=tuple(improvements),
        within_noise=tuple(within_noise),
        new_broken=tuple(new_broken),
        stale_rules=tuple(s for s in stale_rules(current) if s.rule_id not in old_stale),
        new_cells=tuple(k for k in cur if k not in base) + tuple(f"{c.runner}: {c.nodeid}" for c in extra_cells),
        missing_cells=tuple(k for k in base if k not in cur),
        compared=sum(1 for k in cur if k in base),
        lost=tuple(lost),
        incomplete=_incomplete(current),
        allow_missing=allow_missing,
        rows=tuple(rows),
        fail_on_changed=fail_on_changed,
        outcome_changes=tuple(outcome_changes),
        names=names,
        runs=(run_side(baseline, sources[0]), run_side(current, sources[1])),
        environment=environment_changes(baseline, current),
    )


def _reason(cell: CellRecord, limit: int) -> str:
    return " ".join((cell.reason or "").split())[:limit]


def _new_broken(key: str, after: CellRecord, known: set[str]) -> list[NewFinding]:
    """The findings of severity broken on `after` that are not `known`, unless the cell cannot run here."""
    if cannot_run_here(after):
        return []
    return [NewFinding(key=key, nodeid=after.nodeid, runner=after.runner, finding_id=f.id, summary=f.summary,
                       confidence=f.confidence)
            for f in after.findings if f.severity == "broken" and not f.unconfirmed and f.id not in known]


def _outcome_change(key: str, before: CellRecord, after: CellRecord) -> tuple[str, Change] | None:
    """(regression | improvement | changed, the change) for an outcome that moved between two ran cells (module
    doc); None when it did not move, or when the current cell did not run (lost coverage says so)."""
    if not after.ran:
        return None
    if before.outcome == after.outcome:
        if before.flaky == after.flaky:
            return None
        # passed either way, but one of them only on a rerun (pytest-rerunfailures): shown, not gated
        return "changed", Change(key, after.nodeid, after.runner, "outcome", _shown(before), _shown(after),
                                 detail=after.rerun_text() or "no rerun needed now")
    change = Change(key, after.nodeid, after.runner, "outcome", _shown(before), _shown(after))
    if (before.outcome in GOOD or not before.ran) and after.outcome in BAD:
        return "regression", replace(change, detail=_reason(after, 300))
    if before.outcome in WORKED and after.outcome == "xfailed":
        return "regression", replace(change, detail="now expected to fail: " + (_reason(after, 280) or "xfailed"))
    if before.outcome in BAD and after.outcome in WORKED:
        return "improvement", change
    if not before.ran:
        return None  # a skipped cell that runs now: not lost, not moved
    return "changed", replace(change, detail=_reason(after, 300))


def _shown(cell: CellRecord) -> str:
    """The outcome as the diff shows it: `passed (flaky)` for a pass that needed a rerun."""
    return f"{cell.outcome} (flaky)" if cell.flaky else cell.outcome


def _incomplete(current: Report) -> str | None:
    if not current.cells:
        return "the current report has no cell"
    if current.interrupted:
        ran = sum(1 for c in current.cells if c.ran)
        return f"the current run was interrupted ({ran} of {len(current.cells)} cells ran)"
    return None
