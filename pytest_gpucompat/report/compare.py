"""The compare table of `gpucompat diff`: every figure both reports recorded for a cell, side by side.

One row per cell and metric that the baseline and the current cell both recorded (the `*_spread` figures are not
rows: they are the noise column). Its noise band is the larger of the two runs' own relative spreads of that metric
(`pytest_gpucompat.common.metrics.spread_name`); a metric measured once, with no spread recorded, gets DEFAULT_BAND
(±5 %), marked `*`. The verdict of a row:

* `regressed` / `improved`: beyond a `--fail-on` threshold and beyond the noise band;
* `within noise`: beyond a threshold, not beyond the noise band;
* `changed`: no threshold decided it, and the change is beyond the noise band (`--fail-on changed` fails on it);
* `context`: the same for a figure that measures the harness or the runner rather than the stack (the registry's
  harness timings such as `start_s` and `engine_s`, and figures with no better direction such as `rounds`): shown,
  never counted as changed;
* `same`: within the noise band.

Pure functions: nothing here reads files or clocks.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..common.metrics import METRICS, SPREAD_SUFFIX, spread_name
from ..common.textfit import shorten_middle
from .model import CellRecord

DEFAULT_BAND = 0.05
"""The relative change beyond which a figure with no recorded spread counts as changed."""

#: Verdicts in the order the table lists them; all but `same` and `within noise` are a figure that moved.
VERDICTS = ("regressed", "changed", "improved", "within noise", "context", "same")
MOVED = frozenset({"regressed", "changed", "improved"})


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

    @property
    def moved(self) -> bool:
        return self.verdict in MOVED

    @property
    def change(self) -> str:
        """The change as a percentage of |baseline|, or the absolute change when the baseline is 0."""
        delta = self.after - self.before
        if self.before:
            return f"{delta / abs(self.before) * 100:+.1f}%"
        return "0" if delta == 0 else f"{delta:+.6g}"

    @property
    def noise(self) -> str:
        return f"±{self.band * 100:.1f}%" + ("" if self.measured else "*")


def _beyond(band: float, before: float, after: float) -> bool:
    delta = abs(after - before)
    return delta > band * abs(before) if before else delta != 0


def is_context(metric: str) -> bool:
    """A figure of the harness or the runner (module doc): its moves are shown, not counted as changes."""
    known = METRICS.get(metric)
    return known is not None and (known.better is None or known.suite == "harness")


def cell_rows(key: str, before: CellRecord, after: CellRecord, decided: dict[str, str]) -> list[CompareRow]:
    """The rows of one cell; `decided` maps a metric to the verdict its threshold gave (regressed, improved or
    within noise), the others are judged against the noise band alone."""
    rows = []
    for metric, old in before.metrics.items():
        new = after.metrics.get(metric)
        if old is None or new is None or metric.endswith(SPREAD_SUFFIX):
            continue
        name = spread_name(metric)
        spreads = [s for s in (before.metrics.get(name), after.metrics.get(name)) if s is not None]
        band = max(spreads) if spreads else DEFAULT_BAND
        verdict = decided.get(metric) or (
            ("context" if is_context(metric) else "changed") if _beyond(band, old, new) else "same")
        rows.append(CompareRow(key, metric, old, new, band, bool(spreads), verdict))
    return rows


def changed_cells(rows: Iterable[CompareRow]) -> set[str]:
    return {row.key for row in rows if row.moved}


def _num(value: float) -> str:
    return f"{value:.6g}"


def format_table(rows: Sequence[CompareRow], width: int, limit: int = 100) -> list[str]:
    """The table as lines of at most `width` characters: a header, then per cell its key (shortened in the middle
    when long) and one line per figure. With more than `limit` rows only the figures that moved are listed."""
    if not rows:
        return ["Compare: no figure recorded by both reports' cells"]
    shown = list(rows) if len(rows) <= limit else [r for r in rows if r.verdict != "same"]
    head = ("metric", "baseline", "current", "change", "noise", "verdict")
    cells = [(r.metric, _num(r.before), _num(r.after), r.change, r.noise, r.verdict) for r in shown]
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head))]
    fixed = sum(widths[1:]) + 2 * (len(head) - 1) + 4
    widths[0] = max(min(widths[0], width - fixed), 8)

    def line(values: Sequence[str]) -> str:
        first = shorten_middle(values[0], widths[0]).ljust(widths[0])
        rest = [v.rjust(w) for v, w in zip(values[1:-1], widths[1:-1])] + [values[-1].ljust(widths[-1])]
        return ("    " + "  ".join([first, *rest])).rstrip()[:width]

    default = any(not r.measured for r in shown)
    out = [f"Compare ({len(rows)} figure(s) both reports recorded; change beyond the noise band = changed):",
           line(head)]
    last = None
    for row, values in zip(shown, cells):
        if row.key != last:
            out.append("  " + shorten_middle(row.key, width - 2))
            last = row.key
        out.append(line(values))
    if len(shown) < len(rows):
        out.append(f"  ... and {len(rows) - len(shown)} unchanged figure(s) not listed")
    if default:
        out.append(shorten_middle(f"  * no spread recorded: default band ±{DEFAULT_BAND * 100:g}%", width))
    return out
