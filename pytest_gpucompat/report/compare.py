"""The compare table of `gpucompat diff`: every figure both reports recorded for a cell, side by side.

One row per cell and metric that the baseline and the current cell both recorded (the `*_spread` figures are not
rows: they are the noise column). Its noise band is the larger of the two runs' own relative spreads of that metric
(`pytest_gpucompat.common.metrics.spread_name`); a metric measured once, with no spread recorded, gets DEFAULT_BAND
(±5 %), marked `*`. A move no larger than the metric's absolute `floor` is noise too, so a near-zero baseline is
judged by its absolute change (and its relative change is not shown). The verdict of a row:

* `regressed`: worse beyond the noise band and beyond a `--fail-on` threshold or the metric's default tolerance
  (`Metric.tolerance`): what the gate fails on;
* `worse` / `better`: beyond the noise band, in the direction the registry declares (`Metric.better`);
* `changed`: beyond the noise band, for a figure with no better direction (a user's own metric);
* `within noise`: it moved, but not beyond the noise band (or beyond a threshold but not beyond the band);
* `context`: a figure that measures the harness or the runner rather than the stack (the registry's harness timings
  such as `start_s` and `engine_s`, and figures with no better direction such as `rounds`) that moved: shown, never
  counted;
* `same`: not moved at all.

Pure functions: nothing here reads files or clocks.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..common.metrics import METRICS, SPREAD_SUFFIX, spread_name
from ..common.textfit import shorten_middle
from .cellnames import CellName
from .model import CellRecord

DEFAULT_BAND = 0.05
"""The relative change beyond which a figure with no recorded spread counts as changed."""

#: Verdicts in the order the table lists them; the first four are a figure that moved beyond its noise.
VERDICTS = ("regressed", "worse", "changed", "better", "within noise", "context", "same")
MOVED = frozenset({"regressed", "worse", "changed", "better"})
WORSE = frozenset({"regressed", "worse"})


@dataclass(frozen=True)
class CompareRow:
    """One figure of one cell in both reports."""

    key: str
    metric: str
    before: float
    after: float
    band: float
    """The relative noise band: the larger measured spread, or DEFAULT_BAND when none was measured."""
    measured: bool
    """Whether `band` comes from the runs' own spreads (False: DEFAULT_BAND)."""
    verdict: str
    floor: float = 0.0
    """The metric's absolute floor (`Metric.floor`): a baseline nearer 0 than this is judged by absolute change."""

    @property
    def moved(self) -> bool:
        return self.verdict in MOVED

    @property
    def worse(self) -> bool:
        return self.verdict in WORSE

    @property
    def delta(self) -> str:
        """The absolute change, `+0.0624`."""
        delta = self.after - self.before
        return "0" if delta == 0 else f"{delta:+.4g}"

    @property
    def change(self) -> str:
        """The change as a percentage of |baseline|; `—` when the baseline is 0 or within the metric's floor of 0
        (a percentage of nearly nothing says nothing: the absolute change judges it)."""
        delta = self.after - self.before
        if delta == 0:
            return "0%"
        if not self.before or abs(self.before) < self.floor:
            return "—"
        return f"{delta / abs(self.before) * 100:+.1f}%"

    @property
    def noise(self) -> str:
        return f"±{self.band * 100:.1f}%" + ("" if self.measured else "*")


def beyond(band: float, floor: float, before: float, after: float) -> bool:
    """Did the figure move by more than `band` (a fraction of |before|) and more than `floor` (absolute)?"""
    return abs(after - before) > max(band * abs(before), floor)


def floor_of(metric: str) -> float:
    known = METRICS.get(metric)
    return known.floor if known is not None else 0.0


def direction_verdict(metric: str, before: float, after: float) -> str:
    """`worse`, `better` or (no declared better direction) `changed`: how a figure that moved reads."""
    known = METRICS.get(metric)
    if known is None or known.better is None:
        return "changed"
    rose = after > before
    return "better" if rose == (known.better == "higher") else "worse"


def is_context(metric: str) -> bool:
    """A figure of the harness or the runner (module doc): its moves are shown, not counted as changes."""
    known = METRICS.get(metric)
    return known is not None and (known.better is None or known.suite == "harness")


def cell_rows(key: str, before: CellRecord, after: CellRecord, decided: dict[str, str]) -> list[CompareRow]:
    """The rows of one cell; `decided` maps a metric to the verdict its threshold gave (regressed, better or
    within noise), the others are judged against the noise band, the floor and the better direction alone."""
    rows = []
    for metric, old in before.metrics.items():
        new = after.metrics.get(metric)
        if old is None or new is None or metric.endswith(SPREAD_SUFFIX):
            continue
        name = spread_name(metric)
        spreads = [s for s in (before.metrics.get(name), after.metrics.get(name)) if s is not None]
        band = max(spreads) if spreads else DEFAULT_BAND
        floor = floor_of(metric)
        verdict = decided.get(metric)
        if verdict is None:
            if old == new:
                verdict = "same"
            elif not beyond(band, floor, old, new):
                verdict = "within noise"
            else:
                verdict = "context" if is_context(metric) else direction_verdict(metric, old, new)
        rows.append(CompareRow(key, metric, old, new, band, bool(spreads), verdict, floor))
    return rows


def changed_cells(rows: Iterable[CompareRow]) -> set[str]:
    return {row.key for row in rows if row.moved}


def _num(value: float) -> str:
    return f"{value:.6g}"


def format_table(rows: Sequence[CompareRow], width: int, names: Mapping[str, CellName] | None = None,
                 limit: int = 100) -> list[str]:
    """The table as lines of at most `width` characters (a cell's line may wrap, never be cut): a header, then per
    test file and cell its name (report/cellnames.py: the parameters that tell it apart) and one line per figure.
    With more than `limit` rows only the figures that moved beyond their noise are listed."""
    if not rows:
        return ["Compare: no figure recorded by both reports' cells"]
    names = names or {}
    shown = list(rows) if len(rows) <= limit else [r for r in rows if r.moved]
    if not shown:
        return [f"Compare: {len(rows)} figure(s) both reports recorded, none moved beyond the runs' noise"]
    head: tuple[str, ...] = ("metric", "baseline", "current", "Δ", "change", "noise", "verdict")
    cells: list[tuple[str, ...]] = [(r.metric, _num(r.before), _num(r.after), r.delta, r.change, r.noise, r.verdict)
                                    for r in shown]
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head))]
    # a narrow terminal loses the columns that matter least, never the verdict
    for drop in ("Δ", "noise", "baseline", "current"):
        if sum(widths[1:]) + 2 * (len(head) - 1) + 4 + 12 <= width:
            break
        at = head.index(drop)
        head = head[:at] + head[at + 1:]
        cells = [c[:at] + c[at + 1:] for c in cells]
        widths = widths[:at] + widths[at + 1:]
    fixed = sum(widths[1:]) + 2 * (len(head) - 1) + 4
    widths[0] = max(min(widths[0], width - fixed), 8)

    def line(values: Sequence[str]) -> str:
        first = shorten_middle(values[0], widths[0]).ljust(widths[0])
        rest = [v.rjust(w) for v, w in zip(values[1:-1], widths[1:-1])] + [values[-1].ljust(widths[-1])]
        return ("    " + "  ".join([first, *rest])).rstrip()[:width]

    def figure(values: Sequence[str]) -> list[str]:
        """A metric name wider than its column on a line of its own, never cut (it is what a reader greps for)."""
        if len(values[0]) <= widths[0]:
            return [line(values)]
        return [shorten_middle("    " + values[0], width), line(["", *values[1:]])]

    default = any(not r.measured for r in shown)
    out = [f"Compare ({len(rows)} figure(s) both reports recorded; moved beyond the noise band: worse, better or "
           f"changed):", line(head)]
    last_key = last_file = None
    for row, values in zip(shown, cells):
        if row.key != last_key:
            name = names.get(row.key)
            if name is not None and name.file != last_file:
                out.append(f" {name.file}")
                last_file = name.file
            out.append(f"  {name.line if name is not None else row.key}")
            last_key = row.key
        out.extend(figure(values))
    if len(shown) < len(rows):
        out.append(f"  ... and {len(rows) - len(shown)} figure(s) within noise or of the harness not listed")
    if default:
        out.append(shorten_middle(f"  * no spread recorded: default band ±{DEFAULT_BAND * 100:g}%", width))
    return out
