"""Metric thresholds of a CI gate (`tokens_per_s:-10%`, `leak_mib_per_cycle:+1`): parsing, and the checks that make
a threshold that could gate nothing an error rather than a silent pass.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ..common.metrics import METRICS
from .model import Report

_THRESHOLD = re.compile(
    r"[ \t]*(?P<metric>[A-Za-z_][A-Za-z0-9_.\-]*)[ \t]*:[ \t]*(?P<sign>[+-])[ \t]*"
    r"(?P<amount>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[ \t]*(?P<pct>%)?[ \t]*"
)


@dataclass(frozen=True)
class Threshold:
    """`metric:-10%`: worse = lower, by more than 10 %; `metric:+1`: worse = higher, by more than 1 (absolute)."""

    metric: str
    direction: int  # +1: a rise is bad, -1: a drop is bad
    amount: float
    relative: bool
    expr: str
    floor: float = 0.0
    """An absolute change no larger than this is no regression whatever its percentage (the registry's floor)."""
    default: bool = False
    """The registry's default tolerance (`Metric.tolerance`) rather than a `--fail-on` threshold."""

    def __str__(self) -> str:
        sign = "+" if self.direction > 0 else "-"
        text = f"{self.metric}:{sign}{self.amount:g}{'%' if self.relative else ''}"
        if self.floor:
            text += f" and {sign}{self.floor:g}"
        return f"{text} (default)" if self.default else text

    def change(self, before: float, after: float) -> float:
        """Change in the threshold's unit (percent of |before| or absolute); inf when before is 0 and after not."""
        delta = after - before
        if not self.relative:
            return delta
        if before == 0:
            return 0.0 if delta == 0 else math.copysign(math.inf, delta)
        return delta / abs(before) * 100.0

    def judge(self, before: float, after: float) -> Literal["regression", "improvement"] | None:
        """Worse beyond the threshold is a regression, better beyond it an improvement, anything else nothing."""
        moved = self.change(before, after) * self.direction
        if abs(after - before) <= self.floor:
            return None
        if moved > self.amount:
            return "regression"
        if moved < -self.amount:
            return "improvement"
        return None


def parse_threshold(expr: str) -> Threshold:
    """Parse `METRIC:+N`, `METRIC:-N`, `METRIC:+N%` or `METRIC:-N%`; anything else is a one-line ValueError."""
    match = _THRESHOLD.fullmatch(expr or "")
    if not match:
        raise ValueError(
            f"bad threshold {expr!r}: expected METRIC:+N or METRIC:-N, optionally with %, "
            f"e.g. tokens_per_s:-10% or leak_mib_per_cycle:+1"
        )
    amount = float(match["amount"])
    return Threshold(
        metric=match["metric"],
        direction=1 if match["sign"] == "+" else -1,
        amount=amount,
        relative=bool(match["pct"]),
        expr=expr.strip(),
    )


CHANGED = "changed"
"""The `--fail-on` value that fails on any figure that moved beyond its noise band (report/compare.py)."""
NO_DEFAULTS = "no-defaults"
"""The `--fail-on` value that drops the registry's default tolerances: only outcomes and the thresholds given gate."""
_WORDS = (CHANGED, NO_DEFAULTS)


def parse_fail_on(exprs: Iterable[str]) -> tuple[list[Threshold], bool]:
    """The `--fail-on` values: (the thresholds, whether `changed` was given); a bad one is a one-line ValueError.
    `no-defaults` is read by `uses_defaults`."""
    exprs = list(exprs)
    changed = any((e or "").strip() == CHANGED for e in exprs)
    try:
        return [parse_threshold(e) for e in exprs if (e or "").strip() not in _WORDS], changed
    except ValueError as exc:
        raise ValueError(f"{exc}, or {CHANGED} (fail on any figure changed beyond the runs' noise), or "
                         f"{NO_DEFAULTS} (no default tolerance)") from None


def uses_defaults(exprs: Iterable[str]) -> bool:
    """Whether the registry's default tolerances gate (no `--fail-on no-defaults`)."""
    return not any((e or "").strip() == NO_DEFAULTS for e in exprs)


def default_thresholds(explicit: Iterable[Threshold]) -> list[Threshold]:
    """The registry's default tolerance of every metric that declares one (`Metric.tolerance`) and that no
    `explicit` threshold names: a `--fail-on` threshold of a metric replaces its default, to relax or tighten it."""
    named = {t.metric for t in explicit}
    return [
        Threshold(metric=m.name, direction=-1 if m.better == "higher" else 1, amount=m.tolerance * 100,
                  relative=True, expr=f"default {m.name}", floor=m.floor, default=True)
        for m in METRICS.values()
        if m.tolerance is not None and m.better is not None and m.name not in named
    ]


def known_metrics(*reports: Report) -> set[str]:
    """The registry's metrics and every metric some cell of `reports` recorded (user suites record their own)."""
    known = set(METRICS)
    for report in reports:
        for cell in report.cells:
            known.update(cell.metrics)
    return known


def check_thresholds(thresholds: Iterable[Threshold], *reports: Report) -> None:
    """One-line ValueError for a threshold that cannot gate anything: a metric neither the registry nor `reports`
    know (a typo would compare nothing and pass), one that no cell of `reports` recorded (it would compare nothing
    either), or a sign that calls the better direction a regression."""
    known = known_metrics(*reports)
    recorded = {m for report in reports for cell in report.cells for m, v in cell.metrics.items() if v is not None}
    for threshold in thresholds:
        name = threshold.metric
        if name not in known:
            near = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ValueError(
                f"unknown metric {name!r} in {threshold.expr!r}{hint}; known metrics: {', '.join(sorted(known))}"
            )
        if reports and name not in recorded:
            raise ValueError(f"{threshold.expr!r}: no cell of the compared reports recorded {name}, so it would "
                             f"gate nothing; recorded: {', '.join(sorted(recorded)) or 'none'}")
        better = METRICS[name].better if name in METRICS else None
        if (better == "higher" and threshold.direction > 0) or (better == "lower" and threshold.direction < 0):
            worse = "-" if better == "higher" else "+"
            raise ValueError(
                f"{threshold.expr!r}: {better} {name} is better, so a regression is a "
                f"{'drop' if worse == '-' else 'rise'}: write {name}:{worse}{threshold.amount:g}"
                f"{'%' if threshold.relative else ''}"
            )
