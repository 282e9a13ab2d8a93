"""A kind of check, declared once: its figures, where their limits come from, how it runs, how a report shows it.

The diff's directions and default gates (`common.metrics.METRICS`), the figures a report's matrix cell shows
(`metrics.KEY_FIGURES`) and how each is written there (`Metric.display`, `report.figures.format_value`), the limits
those figures are coloured against (`report.figures.limit_of`), the HTML report's charts (`metrics.CHARTS`,
`report.charts`) and the metric table of docs/ci.md all derive from the kinds registered here, so a new kind of
check (a throughput floor, say) is one declaration plus the module that runs it, never an edit in each of those
places. Pure data and a small
registry, on the ground floor: the code a declaration names (`run`, a limit's `resolver`) is a "module:function"
string imported only when it is used. Pure: no engine, no clock.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

NAMED_STYLES = ("grouped", "duration", "near-one")
"""The styles of a `Display` that are no format spec (see there)."""


@dataclass(frozen=True)
class Display:
    """How a report's matrix cell writes a figure: `prefix`, the number in `style`, `suffix` (`agree 98 %`).

    `style` is a format spec applied to the value times `scale` (`.3g`, `+.2g`, `.0f`), or one of NAMED_STYLES:
    `grouped` a rate or count, whole and comma-grouped from 100 up, else 3 significant digits (`12,345`, `81.2`);
    `duration` seconds, in ms under 1 s, its unit written with it (`12 ms`, `1.5 s`); `near-one` a figure close to 1
    (a cosine), with as many decimals as its gap to 1 needs (`0.99998`)."""

    prefix: str = ""
    style: str = ".4g"
    scale: float = 1.0
    suffix: str = ""

    def text(self, value: float) -> str:
        """The figure as a matrix cell writes it."""
        value = value * self.scale if self.scale != 1.0 else value
        if self.style == "grouped":
            number = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
        elif self.style == "duration":
            number = f"{value * 1000:.3g} ms" if value < 1 else f"{value:.3g} s"
        elif self.style == "near-one":
            gap = 1.0 - value
            digits = 3 if gap <= 0 else min(8, max(3, 1 - math.floor(math.log10(gap))))
            number = f"{value:.{digits}f}"
        else:
            number = format(value, self.style)
        return f"{self.prefix}{number}{self.suffix}"


@dataclass(frozen=True)
class Metric:
    """One recorded figure: which way is better (None: neither, e.g. a count) and its unit.

    `floor`: the absolute change (in `unit`) below which a move is noise whatever its percentage, so a near-zero
    baseline is judged by absolute change (a drift of 5e-6 nats that becomes 1e-5 has not moved). `tolerance`: the
    relative change worse than which `gpucompat diff` calls the figure a regression by default (with `floor` as its
    absolute minimum), when it is also beyond the runs' noise; None: shown as worse or better, never gating unless
    `--fail-on` names it. `display`: how a report's matrix cell writes it (4 significant digits unless declared)."""

    name: str
    better: Literal["higher", "lower"] | None
    unit: str
    suite: str
    summary: str
    floor: float = 0.0
    tolerance: float | None = None
    display: Display = Display()


@dataclass(frozen=True)
class KeyFigure:
    """A figure a report's matrix cell shows, and where its limit comes from (the colour is the margin to it).

    `limit`: `SOURCE` or `SOURCE:KEY`, a `LimitSource` some kind declares (`thresholds:KEY` is KEY of the cell's
    dtype in matrices/thresholds.yaml, `leak` the memory suite's leak tolerance); None a figure shown plain.
    `rank`: its place among every kind's figures in a cell (lower first).
    """

    metric: str
    label: str
    limit: str | None
    rank: int = 0


@dataclass(frozen=True)
class LimitSource:
    """Where the limit of a `KeyFigure` comes from: `resolver` ("module:function") is called with the text after
    `NAME:` and the cell record, and returns (limit, where it came from) or None where the cell has none."""

    name: str
    resolver: str
    summary: str


ChartStyle = Literal["against-limit", "per-cycle", "per-engine"]


@dataclass(frozen=True)
class Chart:
    """A chart of the HTML report that shows some of a kind's figures.

    Kinds naming the same `chart` share it (one `style`; the title, caption, axis and unit of the first that gives
    them; their `metrics` in `rank` order); charts come in the order of their lowest `rank`. `style`:

    * `against-limit`: one row per matrix row, one dot per runner: of `metrics` (shown figures with a limit), the
      first the cell recorded in the order a cell shows them, as the share of its limit it uses (1: at the limit;
      `axis` says what that share is);
    * `per-cycle`: one panel per name in `metrics`, a series a cell records per create/destroy cycle (in `unit`),
      one line per cell and runner, growth since cycle 1;
    * `per-engine`: one panel per metric, its median per engine version and runner with a min-max whisker;
      `labels` name the panels (one per metric), the metric's `better` and `unit` complete them.
    """

    chart: str
    style: ChartStyle
    metrics: tuple[str, ...]
    title: str = ""
    caption: str = ""
    axis: str = ""
    unit: str = ""
    labels: tuple[str, ...] = ()
    rank: int = 0


@dataclass(frozen=True)
class CheckKind:
    """A kind of check: the figures it records, those a report shows, the limits it declares, the charts that show
    them, and the function that runs it against an engine (`run`, "module:function"; None for figures the harness
    records itself)."""

    name: str
    summary: str
    metrics: tuple[Metric, ...]
    figures: tuple[KeyFigure, ...] = ()
    limits: tuple[LimitSource, ...] = ()
    run: str | None = None
    charts: tuple[Chart, ...] = ()


_KINDS: dict[str, CheckKind] = {}


def _check_display(kind: str, metric: Metric) -> None:
    if metric.display.style in NAMED_STYLES:
        return
    try:
        format(1.0, metric.display.style)
    except ValueError:
        raise ValueError(f"check kind {kind!r}: metric {metric.name!r} has no valid display style "
                         f"({metric.display.style!r}: a format spec or one of {', '.join(NAMED_STYLES)})") from None


def _check_charts(kind: CheckKind, metrics: set[str], limited: set[str]) -> None:
    """Each chart shows what it can: declared metrics (shown figures with a limit for `against-limit`), one label
    per `per-engine` panel, and one style and one title per chart whichever kinds share it."""
    declared = {c.chart: c for k in _KINDS.values() for c in k.charts}
    for chart in kind.charts:
        where = f"check kind {kind.name!r}: chart {chart.chart!r}"
        if not chart.metrics:
            raise ValueError(f"{where} shows no metric")
        if chart.style == "against-limit" and (bad := [m for m in chart.metrics if m not in limited]):
            raise ValueError(f"{where}: {', '.join(bad)} is no shown figure with a limit")
        if chart.style == "per-engine":
            if bad := [m for m in chart.metrics if m not in metrics]:
                raise ValueError(f"{where}: {', '.join(bad)} is no declared metric")
            if len(chart.labels) != len(chart.metrics):
                raise ValueError(f"{where}: one label per metric")
        other = declared.get(chart.chart)
        if other is not None and other.style != chart.style:
            raise ValueError(f"{where} is {other.style} elsewhere, not {chart.style}")
        if other is not None and chart.title and other.title and chart.title != other.title:
            raise ValueError(f"{where} has another title elsewhere")
        declared.setdefault(chart.chart, chart)


def register(kind: CheckKind) -> CheckKind:
    """Add a kind; a kind, a metric, a shown figure or a limit source declared twice is an error, and so is a
    display style or a chart that cannot show its metrics."""
    if kind.name in _KINDS:
        raise ValueError(f"check kind {kind.name!r} is registered twice")
    seen = {m.name for k in _KINDS.values() for m in k.metrics}
    sources = {s.name for k in _KINDS.values() for s in k.limits} | {s.name for s in kind.limits}
    for metric in kind.metrics:
        if metric.name in seen:
            raise ValueError(f"check kind {kind.name!r}: metric {metric.name!r} is declared twice")
        _check_display(kind.name, metric)
        seen.add(metric.name)
    for figure in kind.figures:
        if figure.metric not in seen:
            raise ValueError(f"check kind {kind.name!r}: figure {figure.metric!r} is no declared metric")
        if figure.limit and figure.limit.partition(":")[0] not in sources:
            raise ValueError(f"check kind {kind.name!r}: figure {figure.metric!r} names no declared limit source "
                             f"({figure.limit!r})")
    limited = {f.metric for k in (*_KINDS.values(), kind) for f in k.figures if f.limit}
    _check_charts(kind, seen, limited)
    _KINDS[kind.name] = kind
    return kind


def kinds() -> tuple[CheckKind, ...]:
    """Every registered kind, in the order it was registered."""
    return tuple(_KINDS.values())


def declared_metrics() -> dict[str, Metric]:
    """Every kind's metrics by name, kinds in registration order."""
    return {m.name: m for kind in _KINDS.values() for m in kind.metrics}


def declared_figures() -> tuple[KeyFigure, ...]:
    """Every kind's shown figures, by rank (ties in registration order)."""
    return tuple(sorted((f for kind in _KINDS.values() for f in kind.figures), key=lambda f: f.rank))


def declared_charts() -> tuple[Chart, ...]:
    """Every kind's charts, those of one name merged into one (its metrics and labels in rank order, the first
    title, caption, axis and unit given), in the order of their lowest rank."""
    parts = sorted((c for kind in _KINDS.values() for c in kind.charts), key=lambda c: c.rank)
    merged: dict[str, Chart] = {}
    for part in parts:
        into = merged.get(part.chart)
        if into is None:
            merged[part.chart] = part
            continue
        metrics = into.metrics + tuple(m for m in part.metrics if m not in into.metrics)
        labels = into.labels + tuple(label for m, label in zip(part.metrics, part.labels) if m not in into.metrics)
        merged[part.chart] = replace(into, metrics=metrics, labels=labels, title=into.title or part.title,
                                     caption=into.caption or part.caption, axis=into.axis or part.axis,
                                     unit=into.unit or part.unit)
    return tuple(merged.values())


def load(target: str) -> Callable[..., Any]:
    """The function a declaration names as "package.module:function"."""
    module, _, name = target.partition(":")
    found = getattr(importlib.import_module(module), name, None)
    if not callable(found):
        raise ValueError(f"{target!r} names no function")
    return found  # type: ignore[no-any-return]


def limit_source(name: str) -> LimitSource | None:
    """The limit source some kind declares under `name`."""
    return next((s for kind in _KINDS.values() for s in kind.limits if s.name == name), None)
