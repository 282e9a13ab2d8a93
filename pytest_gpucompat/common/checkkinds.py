"""A kind of check, declared once: its figures, where their limits come from, how it runs, how a report shows it.

The diff's directions and default gates (`common.metrics.METRICS`), the figures a report's matrix cell shows
(`metrics.KEY_FIGURES`), the limits those figures are coloured against (`report.figures.limit_of`) and the metric
table of docs/ci.md all derive from the kinds registered here, so a new kind of check (a throughput floor, say) is
one declaration plus the module that runs it, never an edit in each of those places. Pure data and a small
registry, on the ground floor: the code a declaration names (`run`, a limit's `resolver`) is a "module:function"
string imported only when it is used. Pure: no engine, no clock.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Metric:
    """One recorded figure: which way is better (None: neither, e.g. a count) and its unit.

    `floor`: the absolute change (in `unit`) below which a move is noise whatever its percentage, so a near-zero
    baseline is judged by absolute change (a drift of 5e-6 nats that becomes 1e-5 has not moved). `tolerance`: the
    relative change worse than which `gpucompat diff` calls the figure a regression by default (with `floor` as its
    absolute minimum), when it is also beyond the runs' noise; None: shown as worse or better, never gating unless
    `--fail-on` names it."""

    name: str
    better: Literal["higher", "lower"] | None
    unit: str
    suite: str
    summary: str
    floor: float = 0.0
    tolerance: float | None = None


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


@dataclass(frozen=True)
class CheckKind:
    """A kind of check: the figures it records, those a report shows, the limits it declares, and the function
    that runs it against an engine (`run`, "module:function"; None for figures the harness records itself)."""

    name: str
    summary: str
    metrics: tuple[Metric, ...]
    figures: tuple[KeyFigure, ...] = ()
    limits: tuple[LimitSource, ...] = ()
    run: str | None = None


_KINDS: dict[str, CheckKind] = {}


def register(kind: CheckKind) -> CheckKind:
    """Add a kind; a kind, a metric, a shown figure or a limit source declared twice is an error."""
    if kind.name in _KINDS:
        raise ValueError(f"check kind {kind.name!r} is registered twice")
    seen = {m.name for k in _KINDS.values() for m in k.metrics}
    sources = {s.name for k in _KINDS.values() for s in k.limits} | {s.name for s in kind.limits}
    for metric in kind.metrics:
        if metric.name in seen:
            raise ValueError(f"check kind {kind.name!r}: metric {metric.name!r} is declared twice")
        seen.add(metric.name)
    for figure in kind.figures:
        if figure.metric not in seen:
            raise ValueError(f"check kind {kind.name!r}: figure {figure.metric!r} is no declared metric")
        if figure.limit and figure.limit.partition(":")[0] not in sources:
            raise ValueError(f"check kind {kind.name!r}: figure {figure.metric!r} names no declared limit source "
                             f"({figure.limit!r})")
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
