"""Inline SVG charts drawn from a report: no script, no library, nothing loaded.

Which charts there are, and what each shows, the kinds of check declare (`Chart`, common.checkkinds; merged in
metrics.CHARTS); this module draws their three styles:

* against-limit (drift, throughput floor): each cell's first charted figure with a limit as the share of that limit
  it uses, one dot per runner;
* per-cycle (memory): each series a cell records per create/destroy cycle, one line per cell and runner;
* per-engine (throughput and start time): a figure per engine version and runner (median bar, min-max whisker).

Every chart is an `<svg class="chart" data-chart=... data-series=N data-points=M>`; each series is a `<g
class="series" data-runner=...>` and each point a `.pt` element with a `<title>` (what a hover shows). Runners keep
one colour across charts (an Okabe-Ito palette, readable for colour-blind eyes).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from ..common.checkkinds import Chart
from ..common.metrics import CHARTS, METRICS
from .figures import key_figures
from .merge import matrix_rows
from .model import CellRecord, Report
from .text import plain

PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#7a5195", "#1f2937")
_FONT = 'font-family="system-ui,sans-serif"'


def _e(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def runner_colours(report: Report) -> dict[str, str]:
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(report.runners)}


def _legend(colours: Mapping[str, str], names: Sequence[str]) -> str:
    items = "".join(
        f'<li><span class="swatch" style="background:{colours[n]}"></span>{_e(n)}</li>' for n in names
    )
    return f'<ul class="legend chart-legend">{items}</ul>'


def _svg(chart: str, width: int, height: int, series: int, points: int, label: str, body: str) -> str:
    return (
        f'<svg class="chart" data-chart="{_e(chart)}" data-series="{series}" data-points="{points}" role="img" '
        f'aria-label="{_e(label)}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'{_FONT} font-size="11">{body}</svg>'
    )


def _nice_max(value: float) -> float:
    """A round axis end at or above `value`: 1, 2, 2.5, 5 times a power of ten."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _row_label(cell: CellRecord, shared: Mapping[str, Any]) -> str:
    """`logprobs · vllm dtype=bfloat16 kv_cache_dtype=auto`: the test's first word, engine, own parameters."""
    func = cell.test.rpartition("::")[2].removeprefix("test_").split("_")[0]
    params = " ".join(f"{k}={plain(v)}" for k, v in cell.params.items() if k not in shared)
    return f"{func} · {cell.engine or ''} {params}".strip()


def _shared(cells: Sequence[CellRecord]) -> dict[str, dict[str, Any]]:
    """Per test: the parameters every one of its cells has with one value (they say nothing in a label)."""
    by_test: dict[str, list[CellRecord]] = {}
    for cell in cells:
        by_test.setdefault(cell.test, []).append(cell)
    out = {}
    for test, group in by_test.items():
        first = group[0].params
        out[test] = {k: v for k, v in first.items() if len(group) > 1 and all(c.params.get(k, k) == v for c in group)}
    return out


# --- against-limit (drift, throughput floor) --------------------------------------------------------------------


def _against_limit(report: Report, chart: Chart) -> str:
    """One row per matrix row with a charted figure, x = share of its limit used (1 = the limit), a dot per runner."""
    colours = runner_colours(report)
    runners = list(report.runners)
    charted = set(chart.metrics)
    rows: list[tuple[CellRecord, dict[str, Any]]] = []
    for _nodeid, row in matrix_rows(report):
        dots = {}
        for name, cell in row.items():
            shown = [f for f in key_figures(cell) if f.used is not None and f.key.metric in charted]
            if shown:
                dots[name] = shown[0]
        if dots:
            rows.append((next(iter(row.values())), dots))
    if not rows:
        return ""
    shared = _shared([cell for cell, _ in rows])
    label_w, plot_w, right, top, row_h = 400, 800, 50, 28, 18
    width, height = label_w + plot_w + right, top + row_h * len(rows) + 30
    top_used = min(3.0, max(f.used for _, dots in rows for f in dots.values()))  # an infinite share is off the axis
    x_max = min(3.0, max(1.25, _nice_max(top_used)))

    def x(share: float) -> float:
        return label_w + plot_w * min(max(share, 0.0), x_max) / x_max

    parts = [f'<rect x="{label_w}" y="{top - 6}" width="{plot_w}" height="{row_h * len(rows) + 12}" fill="#f8fafc"/>']
    for tick in (0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0):
        if tick > x_max:
            break
        colour, dash = ("#dc2626", ' stroke-dasharray="5 3" stroke-width="1.5"') if tick == 1 else ("#e2e8f0", "")
        parts.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{top - 6}" y2="{height - 24}" '
                     f'stroke="{colour}"{dash}/>')
        text = "limit" if tick == 1 else f"{tick * 100:.0f} %"
        parts.append(f'<text x="{x(tick):.1f}" y="{top - 10}" text-anchor="middle" '
                     f'fill="{"#dc2626" if tick == 1 else "#64748b"}">{text}</text>')
    parts.append(f'<text x="{label_w + plot_w / 2}" y="{height - 6}" text-anchor="middle" fill="#64748b">'
                 f"{escape(chart.axis or 'share of the limit used', quote=False)}</text>")
    points = 0
    by_runner: dict[str, list[str]] = {name: [] for name in runners}
    for i, (cell, dots) in enumerate(rows):
        y = top + row_h * i + row_h / 2
        if i % 2:
            parts.append(f'<rect x="0" y="{y - row_h / 2:.1f}" width="{label_w - 6}" height="{row_h}" fill="#f8fafc"/>')
        parts.append(f'<text x="{label_w - 10}" y="{y + 4:.1f}" text-anchor="end" fill="#0f172a">'
                     f"<title>{_e(cell.nodeid)}</title>{_e(_short(_row_label(cell, shared[cell.test]), 60))}</text>")
        for j, name in enumerate(runners):
            figure = dots.get(name)
            if figure is None:
                continue
            dy = (j - (len(runners) - 1) / 2) * min(3.0, 12 / max(1, len(runners)))
            over = figure.used is not None and figure.used > x_max
            shape = (f'<path d="M{x(x_max) - 7:.1f} {y + dy - 5:.1f} l7 5 l-7 5 z"' if over else
                     f'<circle cx="{x(figure.used or 0):.1f}" cy="{y + dy:.1f}" r="4.5"')
            by_runner[name].append(
                f'{shape} class="pt" fill="{colours[name]}" stroke="#fff" stroke-width="1">'
                f"<title>{_e(name)} · {_e(cell.nodeid)}\n{_e(figure.title)}</title>"
                + ("</path>" if over else "</circle>")
            )
            points += 1
    series = [name for name in runners if by_runner[name]]
    parts += [f'<g class="series" data-runner="{_e(n)}">{"".join(by_runner[n])}</g>' for n in series]
    svg = _svg(chart.chart, width, height, len(series), points, f"{chart.chart} per cell against its limit",
               "".join(parts))
    return _figure(chart.chart, chart.title, chart.caption, svg + _legend(colours, series))


# --- per-cycle (memory) --------------------------------------------------------------------------------------------


def _cycle_panel(chart: Chart, metric: str, lines: Sequence[tuple[str, CellRecord, Sequence[float | None]]],
                 colours: Mapping[str, str]) -> str:
    width, height, left, right, top, bottom = 300, 210, 46, 10, 22, 30
    plot_w, plot_h = width - left - right, height - top - bottom
    cycles = max(len(s) for _, _, s in lines)
    values = [v - base for _, _, s in lines if (base := _base(s)) is not None for v in s[1:] if v is not None]
    low, high = min([0.0, *values]), max([1.0, *values])

    def x(i: int) -> float:
        return left + (plot_w * (i - 1) / (cycles - 2) if cycles > 2 else plot_w / 2)

    def y(v: float) -> float:
        return top + plot_h * (1 - (v - low) / (high - low))

    parts = [f'<text x="{left}" y="14" font-weight="600" fill="#0f172a">{_e(metric)} ({_e(chart.unit)} over cycle 1)'
             "</text>",
             f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#f8fafc" stroke="#e2e8f0"/>']
    for v in (low, (low + high) / 2, high):
        parts.append(f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#64748b">{_fmt(v)}</text>')
    for i in range(1, cycles):
        if cycles <= 12 or i % max(1, cycles // 10) == 0:
            parts.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 14}" text-anchor="middle" fill="#64748b">{i}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 2}" text-anchor="middle" fill="#64748b">cycle</text>')
    points = 0
    for runner, cell, series in lines:
        base = _base(series)
        # (cycle, value, growth since cycle 1)
        known = ([(i, v, v - base) for i, v in enumerate(series) if i >= 1 and v is not None]
                 if base is not None else [])
        path = " ".join(f"{x(i):.1f},{y(growth):.1f}" for i, _, growth in known)
        dots = "".join(
            f'<circle class="pt" cx="{x(i):.1f}" cy="{y(growth):.1f}" r="2.5" fill="{colours[runner]}">'
            f"<title>{_e(runner)} · cycle {i}: {v:,.1f} {_e(chart.unit)} ({growth:+,.1f})</title></circle>"
            for i, v, growth in known
        )
        points += len(known)
        parts.append(
            f'<g class="series" data-runner="{_e(runner)}"><title>{_e(runner)} · {_e(cell.nodeid)}</title>'
            f'<polyline fill="none" stroke="{colours[runner]}" stroke-width="1.6" points="{path}"/>{dots}</g>'
        )
    return _svg(f"{chart.chart}-{metric}", width, height, len(lines), points, f"{metric} per cycle", "".join(parts))


def _base(series: Sequence[float | None]) -> float | None:
    """The value at cycle 1 (the first after warm-up) that a panel measures growth from."""
    return series[1] if len(series) > 1 else None


def _per_cycle(report: Report, chart: Chart) -> str:
    """One panel per charted series a cell recorded: x = create/destroy cycle (0: before the first engine)."""
    colours = runner_colours(report)
    panels = []
    shown: list[str] = []
    for metric in chart.metrics:
        lines = [(c.runner, c, c.series[metric]) for c in report.cells
                 if any(v is not None for v in c.series.get(metric, ()))]
        if lines:
            panels.append(_cycle_panel(chart, metric, lines, colours))
            shown = list(dict.fromkeys([*shown, *(r for r, _, _ in lines)]))
    if not panels:
        return ""
    return _figure(chart.chart, chart.title, chart.caption,
                   f'<div class="panels">{"".join(panels)}</div>' + _legend(colours, shown))


# --- per-engine (throughput and start time) -------------------------------------------------------------------------


def engine_label(cell: CellRecord, fingerprint: Mapping[str, Any]) -> str:
    """`vllm 0.26.0`, `hf (transformers 5.17.0)`: the engine and the version that ran (the cell's own record),
    else the version this runner's fingerprint had."""
    from ..catalog.registry import descriptor

    engine = cell.engine or "no engine"
    packages = fingerprint.get("packages") or {}
    try:
        found = descriptor(engine)
    except ValueError:  # an engine this installation does not know (a report from elsewhere)
        found = None
    package = found.distribution if found is not None else engine
    info = cell.extra.get("engine_info")
    ran = info.get("version") if isinstance(info, Mapping) else None
    version = ran or packages.get(engine) or packages.get(package)
    if found is not None and found.default_server is not None and cell.params.get("server"):  # named by its server
        server = str(cell.params["server"])
        return f"{found.name} server {server} {packages.get(server) or ''}".strip()
    if not version:
        return engine
    return f"{engine} {version}" if package == engine else f"{engine} ({package} {version})"


def _bars(report: Report, metric: str, title: str, unit: str, colours: Mapping[str, str]) -> str:
    groups: dict[str, dict[str, list[float]]] = {}
    for cell in report.cells:
        value = cell.metrics.get(metric)
        if value is None or not cell.ran:
            continue
        label = engine_label(cell, report.runners.get(cell.runner, {}))
        groups.setdefault(label, {}).setdefault(cell.runner, []).append(float(value))
    if not groups:
        return ""
    runners = [n for n in report.runners if any(n in g for g in groups.values())]
    label_w, plot_w, right, bar_h, gap, top = 190, 380, 70, 13, 10, 26
    n_bars = sum(len(g) for g in groups.values())
    height = top + n_bars * (bar_h + 3) + gap * len(groups) + 24
    width = label_w + plot_w + right
    x_max = _nice_max(max(max(v) for g in groups.values() for v in g.values()))

    def x(v: float) -> float:
        return label_w + plot_w * max(v, 0.0) / x_max

    parts = [f'<text x="0" y="14" font-weight="600" fill="#0f172a">{_e(title)}</text>']
    for tick in (0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{x(tick * x_max):.1f}" x2="{x(tick * x_max):.1f}" y1="{top - 4}" '
                     f'y2="{height - 20}" stroke="#e2e8f0"/><text x="{x(tick * x_max):.1f}" y="{height - 6}" '
                     f'text-anchor="middle" fill="#64748b">{_fmt(tick * x_max)}</text>')
    y = float(top)
    by_runner: dict[str, list[str]] = {n: [] for n in runners}
    for label, per_runner in sorted(groups.items()):
        parts.append(f'<text x="0" y="{y + bar_h - 2:.1f}" font-weight="600" fill="#0f172a">'
                     f"<title>{_e(label)}</title>{_e(_short(label, 30))}</text>")
        for name in runners:
            values = per_runner.get(name)
            if not values:
                continue
            mid, low, high = statistics.median(values), min(values), max(values)
            tip = (f"{name} · {label}: median {mid:.4g} {unit} over {len(values)} cell(s)"
                   + (f", {low:.4g} to {high:.4g}" if len(values) > 1 else ""))
            whisker = (f'<line x1="{x(low):.1f}" x2="{x(high):.1f}" y1="{y + bar_h / 2:.1f}" y2="{y + bar_h / 2:.1f}" '
                       'stroke="#0f172a" stroke-width="1.2"/>' if len(values) > 1 else "")
            by_runner[name].append(
                f'<rect class="pt" x="{label_w}" y="{y:.1f}" width="{max(1.0, x(mid) - label_w):.1f}" '
                f'height="{bar_h}" fill="{colours[name]}" rx="2"><title>{_e(tip)}</title></rect>{whisker}'
                f'<text x="{x(max(high, mid)) + 4:.1f}" y="{y + bar_h - 2:.1f}" fill="#334155">{_fmt(mid)}</text>'
            )
            y += bar_h + 3
        y += gap
    series = [n for n in runners if by_runner[n]]
    parts += [f'<g class="series" data-runner="{_e(n)}">{"".join(by_runner[n])}</g>' for n in series]
    return _svg(metric, width, height, len(series), n_bars, title, "".join(parts))


def _per_engine(report: Report, chart: Chart) -> str:
    """Each charted figure per engine version and runner: `tokens/s (higher is better)`, in the metric's unit."""
    colours = runner_colours(report)
    charts = []
    for metric, label in zip(chart.metrics, chart.labels):
        declared = METRICS.get(metric)
        better = declared.better if declared is not None else None
        title = f"{label} ({better} is better)" if better else label
        charts.append(_bars(report, metric, title, declared.unit if declared is not None else "", colours))
    charts = [c for c in charts if c]
    if not charts:
        return ""
    names = [n for n in report.runners if any(c.runner == n and c.ran for c in report.cells)]
    return _figure(chart.chart, chart.title, chart.caption,
                   f'<div class="panels">{"".join(charts)}</div>' + _legend(colours, names))


def _figure(key: str, title: str, caption: str, body: str) -> str:
    return (f'<figure class="chart-box" id="chart-{key}"><figcaption><b>{_e(title)}</b> '
            f'<span class="muted">{_e(caption)}</span></figcaption>{body}</figure>')


_STYLES = {"against-limit": _against_limit, "per-cycle": _per_cycle, "per-engine": _per_engine}


def draw(report: Report, chart: Chart) -> str:
    """A declared chart of `report` ("" when the report has nothing it shows)."""
    return _STYLES[chart.style](report, chart)


def chart_named(report: Report, name: str) -> str:
    """The declared chart `name` (metrics.CHARTS) of `report`; "" when none is declared or it has nothing to show."""
    found = next((c for c in CHARTS if c.chart == name), None)
    return "" if found is None else draw(report, found)


def charts_section(report: Report) -> str:
    """Every declared chart the report has data for, in one section (saying so when none has any)."""
    charts = [draw(report, chart) for chart in CHARTS]
    body = "".join(c for c in charts if c) or '<p class="muted">No figures in this report to chart.</p>'
    return f'<section id="charts"><h2>Charts</h2>{body}</section>'
