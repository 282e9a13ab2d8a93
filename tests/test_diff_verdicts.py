"""The diff's verdicts, through `diff_reports` alone: how cells are keyed and folded across runners, what every
outcome move is, what is lost coverage, which findings are new and which rules are stale, and the words each
change carries. Each table is written out case by case from the module's documented rules, so that a verdict or a
limit moved by one fails a row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from pytest_gpucompat.report.diff import Change, DiffResult, Threshold, diff_reports, parse_threshold, stale_rules
from pytest_gpucompat.report.model import Report
from pytest_gpucompat.report.record import CellRecord

N = "suites/test_smoke.py::test_x[a]"
M = "suites/test_smoke.py::test_x[b]"


def cell(outcome: str = "passed", runner: str = "r1", nodeid: str = N, **fields: Any) -> CellRecord:
    return CellRecord(nodeid=nodeid, outcome=outcome, runner=runner, **fields)


def rep(*cells: CellRecord, runners: Iterable[str] = (), interrupted: bool = False) -> Report:
    names = dict.fromkeys([*runners, *(c.runner for c in cells)])
    return Report(runners={name: {"name": name} for name in names}, cells=cells, interrupted=interrupted)


def finding(fid: str, severity: str = "broken", confidence: str | None = "upstream", action: str | None = "xfail",
            summary: str = "", **extra: Any) -> dict[str, Any]:
    return {"id": fid, "severity": severity, "confidence": confidence, "action": action,
            "summary": summary or f"{fid} breaks", **extra}


def changes(result: DiffResult) -> dict[str, list[tuple[str, str, str]]]:
    """Every listed change as (key, before, after), by the list it is in; empty lists left out."""
    lists = {"regressions": result.regressions, "improvements": result.improvements,
             "outcome_changes": result.outcome_changes, "lost": result.lost, "within_noise": result.within_noise}
    return {name: [(c.key, c.before, c.after) for c in found] for name, found in lists.items() if found}


# --- keying: which cells are compared with which ----------------------------------------------------------------

def test_two_reports_of_several_runners_compare_runner_by_runner() -> None:
    base = rep(cell(runner="r1"), cell(runner="r2"))
    result = diff_reports(base, rep(cell(runner="r1"), cell("failed", runner="r2")))
    assert result.matching == "by runner name and nodeid (both reports have several runners)"
    assert changes(result) == {"regressions": [(f"r2: {N}", "passed", "failed")]}
    assert result.compared == 2 and result.new_cells == () and result.missing_cells == ()


def test_a_baseline_of_several_runners_is_restricted_to_the_current_runner_it_has() -> None:
    base = rep(cell(runner="r1"), cell("failed", runner="r2"))
    result = diff_reports(base, rep(cell(runner="r1")))
    assert result.matching == "by nodeid, baseline restricted to runner 'r1'"
    assert changes(result) == {} and result.compared == 1 and result.clean


def test_a_baseline_of_several_runners_is_folded_for_a_runner_it_has_not() -> None:
    base = rep(cell(runner="r1"), cell("failed", runner="r2"))
    result = diff_reports(base, rep(cell(runner="r3")))
    assert result.matching == "by nodeid, the baseline's runners folded per nodeid"
    assert changes(result) == {"improvements": [(N, "failed", "passed")]}


def test_a_current_report_of_several_runners_is_restricted_to_the_baseline_runner() -> None:
    """The other runners of the current report are still judged on their own: a failing one is a regression."""
    result = diff_reports(rep(cell(runner="r1")), rep(cell(runner="r1"), cell("failed", runner="r2", reason="boom")))
    assert result.matching == "by nodeid, current restricted to runner 'r1'"
    assert changes(result) == {"regressions": [(f"r2: {N}", "absent (a runner the baseline has not)", "failed")]}
    assert result.regressions[0].detail == "boom" and result.regressions[0].runner == "r2"
    assert result.new_cells == (f"r2: {N}",) and result.compared == 1
    assert result.name(f"r2: {N}") != f"r2: {N}"  # the extra runner's cells are named too


def test_the_current_runners_left_out_that_pass_are_only_new_cells() -> None:
    result = diff_reports(rep(cell(runner="r1")), rep(cell(runner="r1"), cell(runner="r2")))
    assert changes(result) == {} and result.new_cells == (f"r2: {N}",) and not result.regressed


def test_a_current_report_of_several_runners_is_folded_for_a_baseline_runner_it_has_not() -> None:
    result = diff_reports(rep(cell(runner="r3")), rep(cell(runner="r1"), cell("failed", runner="r2")))
    assert result.matching == "by nodeid, the current report's runners folded per nodeid"
    assert changes(result) == {"regressions": [(N, "passed", "failed")]}
    assert result.regressions[0].runner == "r1, r2"
    assert result.new_cells == () and result.compared == 1


@pytest.mark.parametrize(("base", "current"), [
    (rep(cell(runner="a")), rep(cell(runner="b"))),               # one runner each, whatever their names
    (rep(runners=()), rep(cell(runner="r1"), cell(runner="r2"))),  # no runner on one side
    (rep(cell(runner="r1"), cell(runner="r2")), rep(runners=())),
])
def test_otherwise_by_nodeid(base: Report, current: Report) -> None:
    assert diff_reports(base, current).matching == "by nodeid"


# --- folding several runners' cells of one nodeid ----------------------------------------------------------------

SERIOUSNESS = ("not-covered", "skipped", "passed", "xpassed", "xfailed", "failed", "error")


def folded_outcome(outcomes: tuple[str, str]) -> str:
    """The outcome a current report folds two runners' cells into, as the diff against an xfailed cell shows it."""
    current = rep(cell(outcomes[0], runner="r1"), cell(outcomes[1], runner="r2"))
    result = diff_reports(rep(cell("xfailed", runner="r3")), current)
    shown = {c.after for found in (result.regressions, result.outcome_changes, result.lost) for c in found}
    assert len(shown) <= 1
    return shown.pop() if shown else "xfailed"


@pytest.mark.parametrize(("less", "more"), list(zip(SERIOUSNESS, SERIOUSNESS[1:])))
def test_folding_keeps_the_more_serious_outcome(less: str, more: str) -> None:
    assert folded_outcome((less, more)) == more
    assert folded_outcome((more, less)) == more


def test_folding_keeps_every_finding_once_and_no_figure() -> None:
    a = cell(runner="r1", findings=[finding("f1", summary="first"), finding("f2")], metrics={"tokens_per_s": 100.0})
    b = cell(runner="r2", findings=[finding("f1", summary="second"), finding("f3")], metrics={"tokens_per_s": 9.0})
    result = diff_reports(rep(cell(runner="r9", metrics={"tokens_per_s": 1000.0})), rep(a, b),
                          [parse_threshold("tokens_per_s:-10%")])
    assert [(f.finding_id, f.summary, f.runner) for f in result.new_broken] == [
        ("f1", "first", "r1, r2"), ("f2", "f2 breaks", "r1, r2"), ("f3", "f3 breaks", "r1, r2")]
    assert result.regressions == () and result.rows == ()  # figures of different GPUs do not compare


def test_one_cell_is_not_folded() -> None:
    """A single runner's cell keeps its figures."""
    result = diff_reports(rep(cell(runner="r9", metrics={"tokens_per_s": 1000.0})),
                          rep(cell(runner="r1", metrics={"tokens_per_s": 500.0}), cell(runner="r2", nodeid=M)),
                          [parse_threshold("tokens_per_s:-10%")])
    assert changes(result) == {"regressions": [(N, "1000", "500")]}


# --- outcome moves ----------------------------------------------------------------------------------------------

R, B, C, L, NONE = "regressions", "improvements", "outcome_changes", "lost", "none"
MOVES = {
    ("passed", "failed"): R, ("passed", "error"): R, ("passed", "xfailed"): R, ("passed", "xpassed"): C,
    ("xpassed", "failed"): R, ("xpassed", "error"): R, ("xpassed", "xfailed"): R, ("xpassed", "passed"): C,
    ("xfailed", "failed"): R, ("xfailed", "error"): R, ("xfailed", "passed"): C, ("xfailed", "xpassed"): C,
    ("failed", "passed"): B, ("failed", "xpassed"): B, ("failed", "error"): C, ("failed", "xfailed"): C,
    ("error", "passed"): B, ("error", "xpassed"): B, ("error", "failed"): C, ("error", "xfailed"): C,
    ("skipped", "failed"): R, ("skipped", "error"): R, ("skipped", "passed"): NONE, ("skipped", "xpassed"): NONE,
    ("skipped", "xfailed"): NONE, ("skipped", "not-covered"): NONE,
    ("not-covered", "failed"): R, ("not-covered", "error"): R, ("not-covered", "passed"): NONE,
    ("not-covered", "xfailed"): NONE, ("not-covered", "skipped"): NONE,
    ("passed", "skipped"): L, ("passed", "not-covered"): L, ("xpassed", "skipped"): L, ("xfailed", "not-covered"): L,
    ("failed", "skipped"): NONE, ("error", "not-covered"): NONE,
    **{(o, o): NONE for o in SERIOUSNESS},
}


@pytest.mark.parametrize(("before", "after"), sorted(MOVES))
def test_every_outcome_move(before: str, after: str) -> None:
    result = diff_reports(rep(cell(before)), rep(cell(after, reason="why")))
    expected = MOVES[before, after]
    assert changes(result) == ({} if expected == NONE else {expected: [(N, before, after)]})
    assert result.regressed is (expected in (R, L))
    assert result.clean is (expected == NONE)


LONG = "first   line\n" + "x" * 400  # whitespace runs fold to one space; the limits cut the rest


def test_each_change_says_why_in_at_most_its_limit() -> None:
    folded = "first line " + "x" * 400
    result = diff_reports(rep(cell(), cell(nodeid=M), cell(nodeid="t.py::c"), cell("failed", nodeid="t.py::d")),
                          rep(cell("failed", reason=LONG), cell("xfailed", nodeid=M, reason=LONG),
                              cell("skipped", nodeid="t.py::c", reason=LONG),
                              cell("error", nodeid="t.py::d", reason=LONG),
                              cell("error", nodeid="t.py::new", reason=LONG)))
    details = {c.key: c.detail for c in (*result.regressions, *result.lost, *result.outcome_changes)}
    assert details == {
        N: folded[:300],
        M: "now expected to fail: " + folded[:280],
        "t.py::c": folded[:200],
        "t.py::d": folded[:300],
        "t.py::new": folded[:300],
    }


def test_an_xfailed_cell_without_a_reason_says_xfailed() -> None:
    result = diff_reports(rep(cell()), rep(cell("xfailed")))
    assert [c.detail for c in result.regressions] == ["now expected to fail: xfailed"]
    assert [c.detail for c in diff_reports(rep(cell()), rep(cell("failed"))).regressions] == [""]


def test_a_new_cell_is_a_regression_only_when_it_fails() -> None:
    result = diff_reports(rep(cell()), rep(cell(), cell("error", nodeid=M, reason="x"), cell("skipped", nodeid="t::s"),
                                           cell("failed", nodeid="t::f")))
    assert changes(result) == {"regressions": [(M, "absent", "error"), ("t::f", "absent", "failed")]}
    assert result.new_cells == (M, "t::s", "t::f") and result.compared == 1


def test_a_cell_gone_from_the_run_is_lost_only_if_it_was_good() -> None:
    result = diff_reports(rep(cell(), cell("failed", nodeid=M), cell("skipped", nodeid="t::s")), rep(cell()))
    assert changes(result) == {}
    result = diff_reports(rep(cell(), cell("xfailed", nodeid=M)), rep(cell()))
    assert changes(result) == {"lost": [(M, "xfailed", "absent")]}
    assert result.lost[0].detail == "the cell is not in this run" and result.lost[0].kind == "coverage"
    assert result.missing_cells == (M,) and result.regressed
    assert not diff_reports(rep(cell(), cell("xfailed", nodeid=M)), rep(cell()), allow_missing=True).regressed


@pytest.mark.parametrize(("reruns_before", "reruns_after", "shown", "detail"), [
    (0, 1, ("passed", "passed (flaky)"), "flaky: passed on attempt 2; first failure: E assert 0"),
    (2, 0, ("passed (flaky)", "passed"), "no rerun needed now"),
])
def test_a_pass_that_needed_a_rerun_is_shown_not_gated(reruns_before: int, reruns_after: int,
                                                        shown: tuple[str, str], detail: str) -> None:
    before = cell(reruns=reruns_before, rerun_reason="E assert 0")
    after = cell(reruns=reruns_after, rerun_reason="E assert 0" if reruns_after else None)
    result = diff_reports(rep(before), rep(after))
    assert changes(result) == {"outcome_changes": [(N, *shown)]}
    assert result.outcome_changes[0].detail == detail and not result.regressed


def test_failing_on_both_sides_after_reruns_is_no_change() -> None:
    assert changes(diff_reports(rep(cell("failed", reruns=1)), rep(cell("failed", reruns=2)))) == {}


# --- lost figures ------------------------------------------------------------------------------------------------

def test_a_gated_figure_a_passed_cell_no_longer_records_is_lost() -> None:
    gate = [parse_threshold("tokens_per_s:-10%"), parse_threshold("ttft_s:+10%")]
    base = rep(cell(metrics={"tokens_per_s": 1000.0, "ttft_s": 0.5, "leak_mib_per_cycle": 1.0}))
    result = diff_reports(base, rep(cell(metrics={"ttft_s": 0.5})), gate)
    assert [(c.kind, c.metric, c.before, c.after, c.detail) for c in result.lost] == [
        ("metric", "tokens_per_s", "1000", "not recorded", "a gated figure this cell had")]
    # only --fail-on names gate that way; a default tolerance's figure (leak) may go
    assert diff_reports(base, rep(cell(metrics={"tokens_per_s": 1000.0, "ttft_s": 0.5})), gate).lost == ()
    # a cell that fails now is a regression, not a lost figure
    assert diff_reports(base, rep(cell("failed")), gate).lost == ()
    # a figure the baseline did not record is not lost
    assert diff_reports(rep(cell(metrics={"ttft_s": 0.5})), rep(cell(metrics={"ttft_s": 0.5})), gate).lost == ()


# --- figures: thresholds, noise and the words of a change ---------------------------------------------------------

def figures(before: Mapping[str, float], after: Mapping[str, float], *gate: str,
            default_gate: bool = False) -> DiffResult:
    return diff_reports(rep(cell(metrics=dict(before))), rep(cell(metrics=dict(after))),
                        [parse_threshold(g) for g in gate], default_gate=default_gate)


def test_a_figure_worse_or_better_beyond_its_threshold_says_how_much() -> None:
    worse = figures({"tokens_per_s": 1000.0}, {"tokens_per_s": 800.0}, "tokens_per_s:-10%")
    assert [(c.kind, c.metric, c.before, c.after, c.detail) for c in worse.regressions] == [
        ("metric", "tokens_per_s", "1000", "800", "-20.0%, worse: threshold tokens_per_s:-10%")]
    better = figures({"tokens_per_s": 1000.0}, {"tokens_per_s": 1250.5}, "tokens_per_s:-10%")
    assert [(c.before, c.after, c.detail) for c in better.improvements] == [
        ("1000", "1250.5", "+25.1%, better: threshold tokens_per_s:-10%")]
    assert better.regressions == () and not better.regressed


def test_an_absolute_threshold_shows_the_absolute_change() -> None:
    result = figures({"ttft_s": 1.0}, {"ttft_s": 2.5}, "ttft_s:+1")
    assert [c.detail for c in result.regressions] == ["+1.5, worse: threshold ttft_s:+1"]


def test_a_change_from_zero_is_shown_absolute() -> None:
    result = figures({"queue_depth": 0.0}, {"queue_depth": 3.0}, "queue_depth:+10%")
    assert [c.detail for c in result.regressions] == ["+3, worse: threshold queue_depth:+10%"]


@pytest.mark.parametrize(("before", "shown"), [
    (0.5, "+200.0%"),  # the baseline at the floor itself: relative
    (0.4, "+1"),       # below the floor: absolute
])
def test_a_baseline_within_the_floor_of_zero_is_shown_absolute(before: float, shown: str) -> None:
    gate = Threshold(metric="ttft_s", direction=1, amount=10.0, relative=True, expr="ttft_s:+10%", floor=0.5)
    result = diff_reports(rep(cell(metrics={"ttft_s": before})), rep(cell(metrics={"ttft_s": before + 1.0})), [gate])
    assert [c.detail for c in result.regressions] == [f"{shown}, worse: threshold ttft_s:+10% and +0.5"]


def test_a_figure_on_one_side_only_is_not_judged() -> None:
    assert changes(figures({"tokens_per_s": 1000.0}, {}, "tokens_per_s:-10%")) == {"lost": [
        (N, "1000", "not recorded")]}
    assert changes(figures({}, {"tokens_per_s": 10.0}, "tokens_per_s:-10%")) == {}


@pytest.mark.parametrize(("spreads", "kind"), [
    ((0.1, 0.3), "within_noise"),  # the larger of the two runs' spreads is the noise
    ((0.3, 0.1), "within_noise"),
    ((None, 0.3), "within_noise"),  # one run's spread is enough
    ((0.3, None), "within_noise"),
    ((0.1, 0.2), "regressions"),
    ((None, None), "regressions"),
])
def test_the_noise_is_the_larger_spread_of_the_two_runs(spreads: tuple[float | None, float | None],
                                                       kind: str) -> None:
    before: dict[str, float] = {"tokens_per_s": 1000.0}
    after: dict[str, float] = {"tokens_per_s": 750.0}
    for side, spread in zip((before, after), spreads):
        if spread is not None:
            side["tokens_per_s_spread"] = spread
    result = figures(before, after, "tokens_per_s:-10%")
    assert list(changes(result)) == [kind]
    if kind == "within_noise":
        assert result.within_noise[0].detail == (
            "-25.0%, worse: threshold tokens_per_s:-10%, within the runs' noise ±30.0%")
        assert not result.regressed and not result.clean


def test_an_improvement_within_the_noise_is_not_an_improvement() -> None:
    result = figures({"tokens_per_s": 1000.0, "tokens_per_s_spread": 0.5}, {"tokens_per_s": 1400.0},
                     "tokens_per_s:-10%")
    assert list(changes(result)) == ["within_noise"]
    assert result.within_noise[0].detail.startswith("+40.0%, better: threshold tokens_per_s:-10%, within")


def test_noise_is_relative_to_the_size_of_a_negative_baseline() -> None:
    gate = "score:-10%"
    assert list(changes(figures({"score": -10.0, "score_spread": 1.5}, {"score": -20.0}, gate))) == ["within_noise"]
    assert list(changes(figures({"score": -10.0, "score_spread": 0.5}, {"score": -20.0}, gate))) == ["regressions"]


def test_from_a_zero_baseline_no_spread_hides_a_change() -> None:
    result = figures({"ttft_s": 0.0, "ttft_s_spread": 5.0}, {"ttft_s": 1.0}, "ttft_s:+10%")
    assert list(changes(result)) == ["regressions"]


# --- new broken findings -----------------------------------------------------------------------------------------

def test_a_broken_finding_the_baseline_cell_had_not_is_new() -> None:
    base = rep(cell(findings=[finding("old")]), cell(nodeid=M, findings=[finding("elsewhere")]))
    current = rep(cell(findings=[finding("old"), finding("new", confidence="verified", summary="it crashes"),
                                 finding("warn", severity="warning"), finding("doc", confidence="documents")]),
                  cell(nodeid=M, findings=[finding("elsewhere")]))
    result = diff_reports(base, current)
    assert [(f.key, f.nodeid, f.runner, f.finding_id, f.summary, f.confidence) for f in result.new_broken] == [
        (N, N, "r1", "new", "it crashes", "verified")]
    assert result.regressed and not result.clean


def test_a_new_cell_is_held_against_every_broken_finding_of_the_baseline() -> None:
    base = rep(cell(findings=[finding("known"), finding("mild", severity="degraded")]))
    current = rep(cell(findings=[finding("known")]),
                  cell(nodeid=M, findings=[finding("known"), finding("mild"), finding("fresh")]))
    assert [(f.key, f.finding_id) for f in diff_reports(base, current).new_broken] == [(M, "mild"), (M, "fresh")]


def test_the_extra_runners_findings_are_held_against_the_baseline() -> None:
    base = rep(cell(runner="r1", findings=[finding("known")]))
    current = rep(cell(runner="r1", findings=[finding("known")]),
                  cell(runner="r2", findings=[finding("known"), finding("fresh")]))
    assert [(f.key, f.finding_id) for f in diff_reports(base, current).new_broken] == [(f"r2: {N}", "fresh")]


@pytest.mark.parametrize(("outcome", "reason", "extra", "excused"), [
    ("skipped", "cannot run here: needs 2 GPUs", {}, True),
    ("not-covered", "  cannot run here: 80 GiB", {}, True),
    ("skipped", None, {"need": "2 GPUs"}, True),
    ("skipped", "unavailable: cannot run here", {}, False),  # the reason must start with it
    ("skipped", None, {"need": ""}, False),
    ("skipped", None, {}, False),
    ("failed", "cannot run here: needs 2 GPUs", {"need": "2 GPUs"}, False),  # it ran: a finding of the stack
    ("passed", None, {"need": "2 GPUs"}, False),
])
def test_a_cell_that_cannot_run_here_has_no_new_breakage(outcome: str, reason: str | None, extra: dict[str, str],
                                                         excused: bool) -> None:
    current = rep(cell(outcome, reason=reason, findings=[finding("vllm-needs-gpus", **extra)]))
    assert (diff_reports(rep(cell()), current).new_broken == ()) is excused
    assert (diff_reports(rep(runners=["r1"]), current).new_broken == ()) is excused  # a new cell too


# --- stale rules -------------------------------------------------------------------------------------------------

def test_a_rule_whose_cell_passed_anyway_is_stale_with_its_suggestion() -> None:
    report = rep(
        cell("xpassed", rules=("r-doc", "r-up", "r-ver", "r-none", "r-annot"),
             findings=[finding("r-doc", confidence="documents"), finding("r-up"),
                       finding("r-ver", confidence="verified"), finding("r-annot", action="annotate")]),
        cell("xpassed", nodeid=M, rules=("r-up", "r-odd"), findings=[finding("r-odd", confidence="weird")]),
    )
    found = {s.rule_id: (s.confidence, s.suggestion, s.cells) for s in stale_rules(report)}
    assert found == {
        "r-doc": ("documents", "documents → refuted by this run (drop the rule or narrow its `when`)", (f"r1: {N}",)),
        "r-up": ("upstream", "upstream → re-check (upstream may have fixed it; narrow the version range)",
                 (f"r1: {N}", f"r1: {M}")),
        "r-ver": ("verified", "verified → re-check (a reproduced failure did not reproduce here)", (f"r1: {N}",)),
        "r-none": (None, "re-check (confidence unknown)", (f"r1: {N}",)),
        "r-odd": ("weird", "re-check (confidence unknown)", (f"r1: {M}",)),
    }


def test_a_plain_pass_refutes_only_an_unconfirmed_claim_of_breakage() -> None:
    report = rep(cell("passed", rules=("claim", "claim-annot", "mild-claim", "known", "bare"),
                      findings=[finding("claim", confidence="documents"),
                                finding("claim-annot", confidence="documents", action="annotate"),
                                finding("mild-claim", confidence="documents", severity="degraded"),
                                finding("known")]))
    assert [s.rule_id for s in stale_rules(report)] == ["claim", "claim-annot"]


@pytest.mark.parametrize("outcome", ["failed", "xfailed", "skipped", "error", "not-covered"])
def test_a_cell_that_did_not_pass_makes_no_rule_stale(outcome: str) -> None:
    assert stale_rules(rep(cell(outcome, rules=("r",), findings=[finding("r", confidence="documents")]))) == []


def test_the_first_known_confidence_of_a_rule_is_kept() -> None:
    report = rep(cell("xpassed", rules=("r",)), cell("xpassed", nodeid=M, rules=("r",), findings=[finding("r")]),
                 cell("xpassed", nodeid="t::c", rules=("r",), findings=[finding("r", confidence="verified")]))
    [stale] = stale_rules(report)
    assert stale.confidence == "upstream" and len(stale.cells) == 3


def test_the_diff_lists_only_the_rules_that_became_stale() -> None:
    old = cell("xpassed", rules=("old",))
    result = diff_reports(rep(old), rep(old, cell("xpassed", nodeid=M, rules=("new",))))
    assert [s.rule_id for s in result.stale_rules] == ["new"] and not result.clean and not result.regressed


# --- an incomplete run -------------------------------------------------------------------------------------------

def test_a_report_without_cells_or_interrupted_is_incomplete() -> None:
    assert diff_reports(rep(cell()), rep(runners=["r1"])).incomplete == "the current report has no cell"
    interrupted = rep(cell(), cell("skipped", nodeid=M), cell("error", nodeid="t::e"), interrupted=True)
    result = diff_reports(rep(cell()), interrupted)
    assert result.incomplete == "the current run was interrupted (2 of 3 cells ran)" and result.regressed
    assert diff_reports(rep(cell()), rep(cell())).incomplete is None


# --- the gate and the clean diff ---------------------------------------------------------------------------------

def test_fail_on_changed_gates_a_figure_that_moved() -> None:
    before, after = {"tokens_per_s": 1000.0}, {"tokens_per_s": 800.0}
    plain = figures(before, after)
    assert plain.changed and not plain.regressed and not plain.clean
    assert diff_reports(rep(cell(metrics=before)), rep(cell(metrics=after)), fail_on_changed=True).regressed
    assert not diff_reports(rep(cell(metrics=before)), rep(cell(metrics=before)), fail_on_changed=True).regressed


def test_the_default_tolerances_gate_unless_turned_off() -> None:
    before, after = {"tokens_per_s": 1000.0}, {"tokens_per_s": 500.0}
    assert figures(before, after, default_gate=True).regressed
    assert not figures(before, after, default_gate=False).regressed
    # a --fail-on threshold of the metric replaces its default
    assert not figures(before, after, "tokens_per_s:-60%", default_gate=True).regressed


def test_an_identical_run_is_clean() -> None:
    both = rep(cell(metrics={"tokens_per_s": 1000.0}), cell("failed", nodeid=M))
    result = diff_reports(both, both, [parse_threshold("tokens_per_s:-10%")])
    assert result.clean and not result.regressed and result.compared == 2


# --- every change names its cell whole -------------------------------------------------------------------------

def test_each_change_names_its_cell_runner_and_kind() -> None:
    moved = diff_reports(rep(cell(), cell("failed", nodeid=M), cell(nodeid="t::x", reruns=0)),
                         rep(cell("error", reason="E"), cell(nodeid=M), cell(nodeid="t::x", reruns=1)))
    assert moved.regressions == (Change(N, N, "r1", "outcome", "passed", "error", detail="E"),)
    assert moved.improvements == (Change(M, M, "r1", "outcome", "failed", "passed"),)
    assert moved.outcome_changes == (Change("t::x", "t::x", "r1", "outcome", "passed", "passed (flaky)",
                                            detail="flaky: passed on attempt 2"),)
    other = diff_reports(rep(cell("failed")), rep(cell("error", reason="E")))
    assert other.outcome_changes == (Change(N, N, "r1", "outcome", "failed", "error", detail="E"),)
    figure = figures({"tokens_per_s": 1000.0}, {"tokens_per_s": 800.0}, "tokens_per_s:-10%")
    assert figure.regressions == (Change(N, N, "r1", "metric", "1000", "800",
                                         detail="-20.0%, worse: threshold tokens_per_s:-10%", metric="tokens_per_s"),)


def test_a_key_the_diff_did_not_name_is_its_own_name() -> None:
    result = diff_reports(rep(cell()), rep(cell()))
    assert result.name("no such cell") == "no such cell" and result.name(N) != N


def test_a_figure_missing_on_one_side_does_not_stop_the_other_thresholds() -> None:
    result = figures({"tokens_per_s": 1000.0, "ttft_s": 0.1}, {"tokens_per_s": 500.0}, "ttft_s:+10%",
                     "tokens_per_s:-10%")
    assert [c.metric for c in result.regressions] == ["tokens_per_s"]


def test_a_regression_beyond_the_noise_does_not_say_within() -> None:
    result = figures({"tokens_per_s": 1000.0, "tokens_per_s_spread": 0.1}, {"tokens_per_s": 750.0},
                     "tokens_per_s:-10%")
    assert [c.detail for c in result.regressions] == ["-25.0%, worse: threshold tokens_per_s:-10%"]


def test_a_diff_restricted_to_one_runner_keys_by_nodeid() -> None:
    base = diff_reports(rep(cell(runner="r1"), cell(runner="r2")), rep(cell("failed", runner="r1")))
    assert changes(base) == {"regressions": [(N, "passed", "failed")]}
    current = diff_reports(rep(cell(runner="r1")), rep(cell("failed", runner="r1"), cell(runner="r2")))
    assert changes(current) == {"regressions": [(N, "passed", "failed")]}


def test_the_default_tolerances_gate_by_default() -> None:
    result = diff_reports(rep(cell(metrics={"tokens_per_s": 1000.0})), rep(cell(metrics={"tokens_per_s": 500.0})))
    assert [c.detail for c in result.regressions] == ["-50.0%, worse: threshold tokens_per_s:-25% (default)"]


def test_each_lost_coverage_names_its_cell_runner_and_kind() -> None:
    gate = [parse_threshold("tokens_per_s:-10%")]
    base = rep(cell(runner="r1", metrics={"tokens_per_s": 1000.0}), cell(runner="r1", nodeid=M),
               cell(runner="r1", nodeid="t::gone"))
    current = rep(cell(runner="r1"), cell("skipped", runner="r1", nodeid=M, reason="no GPU"))
    assert diff_reports(base, current, gate).lost == (
        Change(N, N, "r1", "metric", "1000", "not recorded", detail="a gated figure this cell had",
               metric="tokens_per_s"),
        Change(M, M, "r1", "coverage", "passed", "skipped", detail="no GPU"),
        Change("t::gone", "t::gone", "r1", "coverage", "passed", "absent", detail="the cell is not in this run"),
    )


def test_a_new_or_extra_failing_cell_is_named_whole() -> None:
    new = diff_reports(rep(cell()), rep(cell(), cell("failed", nodeid=M, reason="E")))
    assert new.regressions == (Change(M, M, "r1", "outcome", "absent", "failed", detail="E"),)
    extra = diff_reports(rep(cell(runner="r1")), rep(cell(runner="r1"), cell("error", runner="r2", reason="E")))
    assert extra.regressions == (Change(f"r2: {N}", N, "r2", "outcome", "absent (a runner the baseline has not)",
                                        "error", detail="E"),)


def test_a_finding_another_baseline_cell_had_is_new_on_this_cell() -> None:
    base = rep(cell(findings=[finding("f")]), cell(nodeid=M))
    result = diff_reports(base, rep(cell(findings=[finding("f")]), cell(nodeid=M, findings=[finding("f")])))
    assert [(f.key, f.finding_id) for f in result.new_broken] == [(M, "f")]


@pytest.mark.parametrize(("after", "spread", "verdict"), [
    (1500.0, None, "better"), (500.0, None, "regressed"), (750.0, 0.3, "within noise"), (1000.0, None, "same"),
])
def test_the_compare_table_takes_each_threshold_verdict(after: float, spread: float | None, verdict: str) -> None:
    before = {"tokens_per_s": 1000.0, **({"tokens_per_s_spread": spread} if spread else {})}
    result = figures(before, {"tokens_per_s": after}, "tokens_per_s:-10%")
    assert [(row.key, row.metric, row.verdict) for row in result.rows] == [(N, "tokens_per_s", verdict)]


def test_names_carry_the_runner_where_cells_are_keyed_by_it() -> None:
    both = diff_reports(rep(cell(runner="r1"), cell(runner="r2")), rep(cell(runner="r1"), cell(runner="r2")))
    assert {key: name.runner for key, name in both.names.items()} == {f"r1: {N}": "r1", f"r2: {N}": "r2"}
    extra = diff_reports(rep(cell(runner="r1")), rep(cell(runner="r1"), cell("failed", runner="r2", reason=LONG)))
    assert {key: name.runner for key, name in extra.names.items()} == {N: "", f"r2: {N}": "r2"}
    assert extra.regressions[0].detail == ("first line " + "x" * 400)[:300]


def test_the_header_names_both_runs_and_what_differs_between_them() -> None:
    current = Report(runners={"r1": {"name": "r1", "driver": "580"}}, cells=(cell(),))
    result = diff_reports(rep(cell()), current, sources=("base.json", "cur.json"))
    assert result.runs is not None
    assert [(side.source, side.runners, side.cells) for side in result.runs] == [
        ("base.json", ("r1",), 1), ("cur.json", ("r1",), 1)]
    assert [(e.what, e.before, e.after) for e in result.environment] == [("driver", "absent", "580")]


def test_a_rule_skipped_by_the_stale_check_does_not_hide_the_next() -> None:
    xpassed = cell("xpassed", rules=("annot", "up"), findings=[finding("annot", action="annotate"), finding("up")])
    passed = cell("passed", nodeid=M, rules=("known", "claim"),
                  findings=[finding("known"), finding("claim", confidence="documents")])
    assert [s.rule_id for s in stale_rules(rep(xpassed, passed))] == ["up", "claim"]


def test_a_cell_that_was_not_good_does_not_stop_the_coverage_check() -> None:
    """A failed baseline cell is skipped, and the good cells after it are still held to the run."""
    result = diff_reports(rep(cell("failed"), cell("xfailed", nodeid=M)), rep(cell("failed")))
    assert changes(result) == {"lost": [(M, "xfailed", "absent")]}


def test_a_figure_within_its_threshold_does_not_stop_the_other_thresholds() -> None:
    result = figures({"ttft_s": 1.0, "tokens_per_s": 1000.0}, {"ttft_s": 1.05, "tokens_per_s": 500.0},
                     "ttft_s:+10%", "tokens_per_s:-10%")
    assert [c.metric for c in result.regressions] == ["tokens_per_s"]
