"""One self-contained HTML page for a report: the matrix, filters, details on click, fingerprints.

The page is opened from CI artifacts, often offline and behind strict proxies, so it carries its CSS and JS
inline, loads nothing (a Content-Security-Policy forbids it), and escapes every string from the report.
Per-cell details travel as JSON in a `<script type="application/json">` block and are put on screen with
`textContent`, never `innerHTML`. Opening the page with `#selftest` clicks the first cell, exercises the
filters and writes the result into `#gc-selftest`; JS errors are recorded into `#gc-errors` (both are
what the browser test reads from the dumped DOM). The page's structure is built here; its stylesheet and scripts
are in `html_assets.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from .diff import stale_rules
from .html_assets import CSS, JS, JS_ERRORS
from .merge import matrix_rows, uncovered_cells
from .model import OUTCOMES, SEVERITIES, CellRecord, FindingRecord, Report
from .text import engine_versions, gpu_summary, one_line, plain, stack_summary

CELL_WORDS: dict[str, str] = {
    "passed": "passed",
    "failed": "failed",
    "xfailed": "xfail",
    "xpassed": "XPASS",
    "skipped": "skipped",
    "error": "error",
    "not-covered": "not covered",
}

_FINGERPRINT_KEYS = (
    "driver",
    "cuda_driver",
    "cuda_runtime",
    "interconnect",
    "os",
    "libc",
    "python",
    "container",
    "cuda_visible_devices",
    "params",
    "schema",
)
_GPU_COLUMNS = (
    "index",
    "name",
    "architecture",
    "compute_capability",
    "memory_mib",
    "pcie_generation",
    "pcie_width",
    "ecc",
    "mig",
    "persistence",
    "vbios",
    "uuid",
)


def e(value: Any) -> str:
    """Escape for HTML text and attribute values alike."""
    return escape("" if value is None else str(value), quote=True)


def _json_for_script(data: Any) -> str:
    """JSON that cannot end its <script> element early nor be read as markup."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _short_test(test: str) -> tuple[str, str]:
    path, _, func = test.rpartition("::")
    return path, func or test


# --- sections ------------------------------------------------------------------------------------------------------


def _summary_bar(report: Report) -> str:
    summary = report.summary
    total = summary["cells"] or 1
    segments = []
    legend = []
    for outcome in OUTCOMES:
        n = summary["outcomes"][outcome]
        if n:
            pct = n / total * 100
            segments.append(f'<span class="seg o-{outcome}" style="width:{pct:.3f}%" title="{e(outcome)}: {n}"></span>')
        legend.append(
            f'<li class="{"" if n else "zero"}"><span class="swatch o-{outcome}"></span>{e(outcome)} <b>{n}</b></li>'
        )
    uncovered = summary["uncovered"]
    facts = (
        f'<p class="facts"><b>{summary["cells"]}</b> cells · <b>{summary["nodeids"]}</b> test items · '
        f"<b>{summary['runners']}</b> runner{'s' if summary['runners'] != 1 else ''}"
        + (f' · <a href="#uncovered"><b>{uncovered}</b> covered by no runner</a>' if uncovered else "")
        + "</p>"
    )
    return (
        '<section class="summary" aria-label="Summary">'
        + facts
        + f'<div class="bar" role="img" aria-label="outcome counts">{"".join(segments)}</div>'
        + f'<ul class="legend">{"".join(legend)}</ul></section>'
    )


def _filters(report: Report) -> str:
    counts = report.summary["outcomes"]
    boxes = "".join(
        f'<label class="chk"><input type="checkbox" name="outcome" value="{e(o)}" checked>'
        f'<span class="swatch o-{o}"></span>{e(o)} <span class="n">{counts[o]}</span></label>'
        for o in OUTCOMES
    )
    engines = sorted({c.engine for c in report.cells if c.engine})
    options = "".join(f'<option value="{e(x)}">{e(x)}</option>' for x in engines)
    return (
        '<section class="filters" aria-label="Filters">'
        '<input type="search" id="f-text" placeholder="Filter: test, param, runner, rule id, reason…" '
        'aria-label="text filter" autocomplete="off">'
        f'<div class="outcomes" role="group" aria-label="outcomes">{boxes}</div>'
        f'<select id="f-engine" aria-label="engine"><option value="">all engines</option>{options}</select>'
        '<span id="f-count" class="muted"></span></section>'
    )


def _runner_header(index: int, name: str, fingerprint: Mapping[str, Any], counts: Mapping[str, int]) -> str:
    versions = " · ".join(f"{k} {v}" for k, v in engine_versions(fingerprint))
    tally = [f'<span class="ok">{counts.get("passed", 0)} passed</span>']
    tally += [f'<span class="bad">{counts[o]} {o}</span>' for o in ("failed", "error") if counts.get(o)]
    return (
        f'<th scope="col" class="runner"><a class="rname" href="#runner-{index}">{e(name)}</a>'
        f'<div class="gpu">{e(gpu_summary(fingerprint))}</div>'
        f'<div class="sw">{e(stack_summary(fingerprint))}</div>'
        + (f'<div class="pk">{e(versions)}</div>' if versions else "")
        + f'<div class="rc">{" · ".join(tally)}</div></th>'
    )


def _row_header(cell: CellRecord) -> str:
    chips = []
    if cell.engine:
        chips.append(f'<span class="engine">{e(cell.engine)}</span>')
    chips.extend(f'<span class="param">{e(k)}=<b>{e(plain(v))}</b></span>' for k, v in cell.params.items())
    chips.extend(f'<span class="axis">{e(k)} {e(plain(v))}</span>' for k, v in cell.axes.items())
    if not chips:
        _, sep, ident = cell.nodeid.partition("[")
        chips.append(f'<span class="param">{e("[" + ident if sep else "(no parameters)")}</span>')
    return f'<th scope="row" class="rowhead" title="{e(cell.nodeid)}">{"".join(chips)}</th>'


def _search_text(row: Mapping[str, CellRecord]) -> str:
    parts: list[str] = []
    for cell in row.values():
        parts += [cell.nodeid, cell.engine or "", cell.runner, cell.outcome, one_line(cell.reason, 400)]
        parts += [f"{k}={plain(v)}" for k, v in cell.params.items()]
        parts += [f"{k} {plain(v)}" for k, v in cell.axes.items()]
        parts += list(cell.rules) + [f.id for f in cell.findings]
    return " ".join(dict.fromkeys(p for p in parts if p)).lower()


def _cell_td(cell: CellRecord | None, index: int | None) -> str:
    if cell is None or index is None:
        return '<td class="cell o-missing" title="this runner has no such cell">–</td>'
    marks = []
    evidence = [f for f in cell.findings if not f.unconfirmed]  # unconfirmed claims never colour a cell
    if evidence:
        worst = min(
            (f.severity for f in evidence),
            key=lambda s: SEVERITIES.index(s) if s in SEVERITIES else len(SEVERITIES),
        )
        marks.append(f'<span class="mark sev-{e(worst)}" title="{len(evidence)} finding(s)">{len(evidence)}</span>')
    duration = f"{cell.duration_s:.1f} s" if cell.duration_s is not None and cell.ran else ""
    title = f"{cell.runner}: {cell.outcome}" + (f" — {one_line(cell.reason, 160)}" if cell.reason else "")
    return (
        f'<td class="cell o-{cell.outcome}" data-cell="{index}" data-outcome="{e(cell.outcome)}" tabindex="0" '
        f'role="button" aria-label="{e(title)}" title="{e(title)}">'
        f'<span class="word">{e(CELL_WORDS[cell.outcome])}</span>{"".join(marks)}'
        + (f'<span class="dur">{e(duration)}</span>' if duration else "")
        + "</td>"
    )


def _matrix(report: Report, index_of: Mapping[int, int]) -> str:
    runners = list(report.runners)
    rows = matrix_rows(report)
    if not rows:
        return '<p class="empty">No gpucompat cells in this report.</p>'
    summary = report.summary["per_runner"]
    head = "".join(
        _runner_header(i, name, report.runners[name], summary.get(name, {})) for i, name in enumerate(runners)
    )
    body: list[str] = []
    current_test = None
    for _nodeid, row in rows:
        any_cell = next(iter(row.values()))
        if any_cell.test != current_test:
            current_test = any_cell.test
            path, func = _short_test(current_test)
            body.append(
                f'<tr class="group"><th colspan="{len(runners) + 1}" scope="rowgroup">'
                f'<span class="func">{e(func)}</span> <span class="path">{e(path)}</span></th></tr>'
            )
        outcomes = " ".join(sorted({c.outcome for c in row.values()}))
        tds = "".join(_cell_td(row.get(name), index_of.get(id(row[name])) if name in row else None) for name in runners)
        body.append(
            f'<tr class="row" data-engine="{e(any_cell.engine or "")}" data-outcomes="{e(outcomes)}" '
            f'data-search="{e(_search_text(row))}">{_row_header(any_cell)}{tds}</tr>'
        )
    return (
        '<div class="matrix-wrap"><table class="matrix"><thead><tr>'
        f'<th class="corner" scope="col">test · engine · params</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
        '<p id="no-rows" class="empty" hidden>No rows match the filters.</p>'
    )


def _findings_section(report: Report) -> str:
    """Findings backed by evidence, then the unconfirmed claims folded away in their own section."""
    by_id: dict[str, tuple[FindingRecord, int]] = {}
    for cell in report.cells:
        for finding in cell.findings:
            first, n = by_id.get(finding.id, (finding, 0))
            by_id[finding.id] = (first, n + 1)
    if not by_id:
        return ""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    ranked = sorted(by_id.values(), key=lambda item: (order.get(item[0].severity, 99), item[0].id))
    head = ('<table class="grid"><thead><tr><th>severity</th><th>rule</th><th>confidence</th><th>action</th>'
            "<th>summary</th><th>cells</th></tr></thead><tbody>")

    def rows(unconfirmed: bool) -> tuple[int, str]:
        chosen = [(f, n) for f, n in ranked if f.unconfirmed == unconfirmed]
        return len(chosen), "".join(
            f'<tr><td><span class="sev sev-{"claim" if unconfirmed else e(f.severity)}">{e(f.severity)}</span></td>'
            f"<td><code>{e(f.id)}</code></td><td>{e(f.confidence or '')}</td><td>{e(f.action or '')}</td>"
            f"<td>{e(f.summary)}</td><td>{n}</td></tr>"
            for f, n in chosen
        )

    n_found, found = rows(False)
    n_claims, claims = rows(True)
    out = ""
    if n_found:
        out += (f'<section id="findings"><h2>Findings <span class="muted">({n_found})</span></h2>'
                f"{head}{found}</tbody></table></section>")
    if n_claims:
        out += (f'<section id="unconfirmed"><details><summary><h2>Unconfirmed claims <span class="muted">'
                f"({n_claims})</span></h2></summary><p class=\"muted\">Only the seed documents say so: they never "
                "stop or colour a cell; the cells' outcomes are evidence for or against them.</p>"
                f"{head}{claims}</tbody></table></details></section>")
    return out


def _stale_section(report: Report) -> str:
    stale = stale_rules(report)
    if not stale:
        return ""
    items = "".join(
        f'<li><code>{e(s.rule_id)}</code>: {e(s.suggestion)}<br><span class="muted">XPASS on '
        f"{e(', '.join(s.cells[:5]))}{e(f' and {len(s.cells) - 5} more') if len(s.cells) > 5 else ''}</span></li>"
        for s in stale
    )
    return (
        f'<section id="stale"><h2>Stale rules <span class="muted">({len(stale)})</span></h2>'
        f'<p class="muted">A cell a rule expected to fail passed: evidence against the rule.</p><ul>{items}</ul>'
        "</section>"
    )


def _uncovered_section(report: Report) -> str:
    nodeids = uncovered_cells(report)
    if not nodeids:
        return (
            '<section id="uncovered"><h2>Covered by no runner</h2>'
            '<p class="muted">Every cell ran on at least one runner.</p></section>'
        )
    reasons: dict[str, str] = {}
    for cell in report.cells:
        if cell.nodeid in nodeids and cell.reason and cell.nodeid not in reasons:
            reasons[cell.nodeid] = f"{cell.runner}: {one_line(cell.reason, 160)}"
    items = "".join(
        f"<li><code>{e(n)}</code>"
        + (f' <span class="muted">— {e(reasons[n])}</span>' if n in reasons else "")
        + "</li>"
        for n in nodeids
    )
    return (
        f'<section id="uncovered"><h2>Covered by no runner <span class="muted">({len(nodeids)})</span></h2>'
        '<p class="muted">Every runner reported these cells not-covered: their version axes matched no runner.'
        f"</p><ul>{items}</ul></section>"
    )


def _kv_rows(pairs: Iterable[tuple[str, Any]]) -> str:
    return "".join(f"<tr><th>{e(k)}</th><td>{e(plain(v))}</td></tr>" for k, v in pairs)


def _fingerprint_card(index: int, name: str, fp: Mapping[str, Any], is_open: bool = False) -> str:
    parts = [
        f'<details class="fp" id="runner-{index}"{" open" if is_open else ""}><summary><b>{e(name)}</b>'
        f'<span class="muted"> · {e(gpu_summary(fp))} · {e(stack_summary(fp))}</span></summary><div class="fp-body">'
    ]
    if fp.get("name") not in (None, name):
        parts.append(f'<p class="muted">Fingerprint name: {e(fp.get("name"))}</p>')
    reasons = fp.get("reasons") or []
    if reasons:
        parts.append(
            '<div class="reasons"><b>Could not read everything:</b><ul>'
            + "".join(f"<li>{e(r)}</li>" for r in reasons)
            + "</ul></div>"
        )
    known = [(k, fp[k]) for k in _FINGERPRINT_KEYS if k in fp and fp[k] not in (None, {}, [])]
    if known:
        parts.append(f'<table class="kv">{_kv_rows(known)}</table>')
    gpus = [g for g in fp.get("gpus") or [] if isinstance(g, Mapping)]
    if gpus:
        columns = [c for c in _GPU_COLUMNS if any(c in g for g in gpus)]
        extra_cols = sorted({k for g in gpus for k in g} - set(columns))
        columns += extra_cols
        head = "".join(f"<th>{e(c)}</th>" for c in columns)
        rows = "".join("<tr>" + "".join(f"<td>{e(plain(g.get(c, '')))}</td>" for c in columns) + "</tr>" for g in gpus)
        parts.append(
            f'<h4>GPUs</h4><div class="scroll"><table class="grid"><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>"
        )
    links = fp.get("links") or []
    if links:
        items = "".join(
            f"<li>GPU {e(link.get('a'))} ↔ GPU {e(link.get('b'))}: {e(link.get('kind'))} "
            f'<span class="muted">{e(link.get("path") or "")}</span></li>'
            if isinstance(link, Mapping)
            else f"<li>{e(plain(link))}</li>"
            for link in links
        )
        parts.append(f"<h4>Links</h4><ul>{items}</ul>")
    packages = fp.get("packages") or {}
    if packages:
        rows = "".join(
            f"<tr><th>{e(k)}</th><td>{e(v) if v is not None else '<span class=muted>not installed</span>'}</td></tr>"
            for k, v in sorted(packages.items())
        )
        parts.append(f'<h4>Packages</h4><table class="kv">{rows}</table>')
    shown = set(_FINGERPRINT_KEYS) | {"name", "gpus", "links", "packages", "reasons"}
    rest = {k: v for k, v in fp.items() if k not in shown}
    if rest:
        parts.append(
            "<h4>Other fields</h4><pre>" + e(json.dumps(rest, indent=2, ensure_ascii=False, sort_keys=True)) + "</pre>"
        )
    parts.append("</div></details>")
    return "".join(parts)


def render_html(report: Report) -> str:
    """The whole page as a string."""
    index_of = {id(cell): i for i, cell in enumerate(report.cells)}
    data = {
        "cells": [cell.to_dict() for cell in report.cells],
        "gpus": {name: gpu_summary(fp) for name, fp in report.runners.items()},
        "words": CELL_WORDS,
    }
    summary = report.summary
    meta = [f"created {e(report.created)}", f"pytest-gpucompat {e(report.tool_version)}"]
    if report.exitstatus is not None:
        meta.append(f"pytest exit status {e(report.exitstatus)}")
    interrupted = (
        '<p class="banner">The run was interrupted: the matrix is incomplete.</p>' if report.interrupted else ""
    )
    title = f"GPU compatibility report · {summary['cells']} cells · {summary['runners']} runners"
    single = len(report.runners) == 1
    cards = "".join(
        _fingerprint_card(i, name, fp, is_open=single) for i, (name, fp) in enumerate(report.runners.items())
    )
    return "".join(
        [
            '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">",
            '<link rel="icon" href="data:,">',
            f"<title>{e(title)}</title><style>{CSS}</style><script>{JS_ERRORS}</script></head><body>",
            '<header class="top"><h1>GPU compatibility matrix</h1>',
            f'<p class="muted">{" · ".join(meta)}</p></header>',
            interrupted,
            _summary_bar(report),
            _filters(report),
            f"<main>{_matrix(report, index_of)}</main>",
            _uncovered_section(report),
            _findings_section(report),
            _stale_section(report),
            f'<section id="runners"><h2>Runners <span class="muted">({len(report.runners)})</span></h2>{cards}'
            "</section>",
            '<aside id="detail" hidden aria-labelledby="detail-title"><div class="detail-head">'
            '<h2 id="detail-title">Cell</h2><button type="button" id="detail-close" aria-label="close">×</button>'
            '</div><div id="detail-body"></div></aside>',
            '<pre id="gc-errors" class="banner" data-count="0" hidden></pre>',
            '<output id="gc-selftest" data-result="not run" hidden></output>',
            f'<script type="application/json" id="gc-data">{_json_for_script(data)}</script>',
            f"<script>{JS}</script></body></html>\n",
        ]
    )
