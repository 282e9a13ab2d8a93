"""One self-contained HTML page for a report: the matrix, filters, details on click, fingerprints.

The page is opened from CI artifacts, often offline and behind strict proxies, so it carries its CSS and JS
inline, loads nothing (a Content-Security-Policy forbids it), and escapes every string from the report.
Per-cell details travel as JSON in a `<script type="application/json">` block and are put on screen with
`textContent`, never `innerHTML`. Opening the page with `#selftest` clicks the first cell, exercises the
filters and writes the result into `#gc-selftest`; JS errors are recorded into `#gc-errors` (both are
what the browser test reads from the dumped DOM).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from .diff import stale_rules
from .merge import matrix_rows, uncovered_cells
from .model import (
    OUTCOMES,
    SEVERITIES,
    Cell,
    Finding,
    Report,
    engine_versions,
    gpu_summary,
    stack_summary,
)

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


def _plain(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _short_test(test: str) -> tuple[str, str]:
    path, _, func = test.rpartition("::")
    return path, func or test


def _first_line(text: str | None, limit: int = 160) -> str:
    line = " ".join((text or "").split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


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


def _row_header(cell: Cell) -> str:
    chips = []
    if cell.engine:
        chips.append(f'<span class="engine">{e(cell.engine)}</span>')
    chips.extend(f'<span class="param">{e(k)}=<b>{e(_plain(v))}</b></span>' for k, v in cell.params.items())
    chips.extend(f'<span class="axis">{e(k)} {e(_plain(v))}</span>' for k, v in cell.axes.items())
    if not chips:
        _, sep, ident = cell.nodeid.partition("[")
        chips.append(f'<span class="param">{e("[" + ident if sep else "(no parameters)")}</span>')
    return f'<th scope="row" class="rowhead" title="{e(cell.nodeid)}">{"".join(chips)}</th>'


def _search_text(row: Mapping[str, Cell]) -> str:
    parts: list[str] = []
    for cell in row.values():
        parts += [cell.nodeid, cell.engine or "", cell.runner, cell.outcome, _first_line(cell.reason, 400)]
        parts += [f"{k}={_plain(v)}" for k, v in cell.params.items()]
        parts += [f"{k} {_plain(v)}" for k, v in cell.axes.items()]
        parts += list(cell.rules) + [f.id for f in cell.findings]
    return " ".join(dict.fromkeys(p for p in parts if p)).lower()


def _cell_td(cell: Cell | None, index: int | None) -> str:
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
    title = f"{cell.runner}: {cell.outcome}" + (f" — {_first_line(cell.reason)}" if cell.reason else "")
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
    by_id: dict[str, tuple[Finding, int]] = {}
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
            reasons[cell.nodeid] = f"{cell.runner}: {_first_line(cell.reason)}"
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
    return "".join(f"<tr><th>{e(k)}</th><td>{e(_plain(v))}</td></tr>" for k, v in pairs)


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
        rows = "".join("<tr>" + "".join(f"<td>{e(_plain(g.get(c, '')))}</td>" for c in columns) + "</tr>" for g in gpus)
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
            else f"<li>{e(_plain(link))}</li>"
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
            f"<title>{e(title)}</title><style>{_CSS}</style><script>{_JS_ERRORS}</script></head><body>",
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
            f"<script>{_JS}</script></body></html>\n",
        ]
    )


_CSS = """
:root{--fg:#0f172a;--muted:#64748b;--line:#e2e8f0;--bg:#ffffff;--soft:#f8fafc;
--pass:#16a34a;--pass-bg:#dcfce7;--fail:#dc2626;--fail-bg:#fee2e2;--err:#7f1d1d;--xf:#d97706;--xf-bg:#fef3c7;
--xp:#9333ea;--xp-bg:#f3e8ff;--skip:#64748b;--skip-bg:#f1f5f9;}
*{box-sizing:border-box}
body{margin:0;padding:20px 28px 60px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",
"Liberation Sans",Arial,sans-serif;color:var(--fg);background:var(--bg)}
h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:28px 0 10px}h4{margin:14px 0 6px;font-size:13px}
code,pre,.param,.axis{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace}
code{font-size:12.5px}pre{white-space:pre-wrap;word-break:break-word}
a{color:#2563eb;text-decoration:none}a:hover{text-decoration:underline}
.muted{color:var(--muted);font-weight:normal}
.banner{background:#fef2f2;border:1px solid #fecaca;color:#991b1b;padding:8px 12px;border-radius:6px}
.summary{margin:16px 0 10px}.facts{margin:0 0 8px}
.bar{display:flex;height:14px;border-radius:7px;overflow:hidden;background:var(--soft);border:1px solid var(--line)}
.bar .seg{display:block;height:100%}
.legend{display:flex;flex-wrap:wrap;gap:6px 16px;list-style:none;padding:0;margin:8px 0 0}
.legend li{display:flex;align-items:center;gap:6px}.legend li.zero{opacity:.45}
.swatch{display:inline-block;width:12px;height:12px;border-radius:3px;flex:none}
.swatch.o-passed,.seg.o-passed{background:var(--pass)}.swatch.o-failed,.seg.o-failed{background:var(--fail)}
.swatch.o-error,.seg.o-error{background:var(--err)}.swatch.o-xfailed,.seg.o-xfailed{background:var(--xf)}
.swatch.o-xpassed,.seg.o-xpassed{background:var(--xp)}.swatch.o-skipped,.seg.o-skipped{background:#94a3b8}
.swatch.o-not-covered,.seg.o-not-covered{background:repeating-linear-gradient(45deg,#cbd5e1 0 3px,#f1f5f9 3px 6px)}
.filters{display:flex;flex-wrap:wrap;align-items:center;gap:10px 18px;padding:10px 12px;background:var(--soft);
border:1px solid var(--line);border-radius:8px;margin:12px 0}
#f-text{flex:1 1 260px;min-width:200px;padding:6px 10px;border:1px solid #cbd5e1;border-radius:6px;font:inherit}
#f-engine{padding:5px 8px;border:1px solid #cbd5e1;border-radius:6px;font:inherit;background:#fff}
.outcomes{display:flex;flex-wrap:wrap;gap:4px 12px}.chk{display:flex;align-items:center;gap:5px;cursor:pointer}
.chk .n{color:var(--muted);font-size:12px}
.matrix-wrap{max-height:76vh;overflow:auto;border:1px solid var(--line);border-radius:8px;width:fit-content;
max-width:100%}
table.matrix{border-collapse:separate;border-spacing:0}
.matrix thead th{position:sticky;top:0;z-index:2;background:#fff;border-bottom:2px solid var(--line);
text-align:left;vertical-align:bottom;padding:8px 10px;font-weight:normal}
.matrix th.corner{left:0;z-index:3;color:var(--muted);font-size:12px}
.runner{min-width:150px;max-width:240px}.runner .rname{font-weight:600;font-size:14px;color:var(--fg)}
.runner .gpu{font-weight:600;color:#334155;font-size:12.5px}.runner .sw,.runner .pk{font-size:11.5px;color:var(--muted)}
.runner .rc{font-size:11.5px;margin-top:2px}.rc .ok{color:var(--pass)}.rc .bad{color:var(--fail);font-weight:600}
tr.group th{background:var(--soft);text-align:left;padding:7px 10px;border-top:1px solid var(--line);
border-bottom:1px solid var(--line);position:sticky;left:0}
tr.group .func{font-weight:600}tr.group .path{color:var(--muted);font-size:12px;margin-left:6px}
th.rowhead{position:sticky;left:0;z-index:1;background:#fff;text-align:left;font-weight:normal;padding:5px 10px;
border-bottom:1px solid var(--line);white-space:nowrap}
.engine{display:inline-block;background:#1e293b;color:#fff;border-radius:4px;padding:1px 6px;font-size:12px;
margin-right:6px}
.param,.axis{display:inline-block;font-size:12px;margin-right:6px;color:#334155}
.axis{color:#0e7490}
td.cell{border-bottom:1px solid var(--line);border-left:1px solid #fff;padding:5px 10px;cursor:pointer;
white-space:nowrap;font-size:13px;font-weight:600;transition:filter .1s}
td.cell:hover{filter:brightness(.95)}td.cell:focus{outline:2px solid #2563eb;outline-offset:-2px}
td.cell.selected{outline:3px solid #1d4ed8;outline-offset:-3px}
td.cell .dur{display:block;font-size:11px;font-weight:normal;opacity:.75}
td.cell.dim{opacity:.25}
.o-passed{background:var(--pass-bg);color:#166534}.o-failed{background:var(--fail-bg);color:#991b1b}
.o-error{background:#991b1b;color:#fff}.o-xfailed{background:var(--xf-bg);color:#92400e}
.o-xpassed{background:var(--xp-bg);color:#6b21a8}.o-skipped{background:var(--skip-bg);color:#475569}
td.o-not-covered,.pill.o-not-covered{background:repeating-linear-gradient(45deg,#f8fafc 0 6px,#e2e8f0 6px 12px);
color:var(--muted);font-weight:normal;font-style:italic}
td.o-missing{color:#cbd5e1;cursor:default;text-align:center;border-bottom:1px solid var(--line)}
.mark{display:inline-block;min-width:17px;margin-left:6px;padding:0 4px;border-radius:9px;font-size:11px;
text-align:center;color:#fff;background:#64748b;vertical-align:1px}
.sev-broken{background:#dc2626;color:#fff}.sev-degraded{background:#d97706;color:#fff}
.sev-advice{background:#2563eb;color:#fff}.sev-claim{background:#e5e7eb;color:#374151}
#unconfirmed summary h2{display:inline}
.sev{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px}
.empty{color:var(--muted);padding:12px}
table.grid{border-collapse:collapse;font-size:13px}table.grid th,table.grid td{border:1px solid var(--line);
padding:4px 8px;text-align:left;vertical-align:top}table.grid thead th{background:var(--soft)}
table.kv{border-collapse:collapse;font-size:13px}table.kv th{text-align:left;color:var(--muted);
font-weight:normal;padding:2px 14px 2px 0;vertical-align:top}table.kv td{padding:2px 0;word-break:break-word}
.scroll{overflow-x:auto}
details.fp{border:1px solid var(--line);border-radius:8px;margin:8px 0;background:#fff}
details.fp>summary{padding:8px 12px;cursor:pointer}details.fp[open]>summary{border-bottom:1px solid var(--line)}
.fp-body{padding:6px 14px 12px}.reasons{background:#fffbeb;border:1px solid #fde68a;border-radius:6px;
padding:6px 10px;margin:8px 0;color:#78350f}.reasons ul{margin:4px 0 0;padding-left:20px}
#detail{position:fixed;top:0;right:0;bottom:0;width:min(520px,100vw);background:#fff;z-index:10;
border-left:1px solid var(--line);box-shadow:-12px 0 32px rgba(15,23,42,.16);overflow:auto;padding:0 18px 24px}
.detail-head{position:sticky;top:0;background:#fff;display:flex;align-items:center;justify-content:space-between;
padding:14px 0 8px;border-bottom:1px solid var(--line)}
.detail-head h2{margin:0;font-size:16px;display:flex;align-items:center;gap:8px}
#detail-close{border:0;background:transparent;font-size:24px;line-height:1;cursor:pointer;color:var(--muted)}
#detail h3{font-size:12px;text-transform:uppercase;letter-spacing:.05em;color:var(--muted);margin:16px 0 6px}
.pill{display:inline-block;padding:1px 9px;border-radius:10px;font-size:12px;font-weight:600}
.nodeid{font-size:12.5px;word-break:break-all;background:var(--soft);padding:6px 8px;border-radius:6px;margin-top:10px}
.reason{background:#fff7ed;border:1px solid #fed7aa;border-radius:6px;padding:8px 10px;margin:0;font-size:12.5px}
.rule{display:inline-block;background:var(--soft);border:1px solid var(--line);border-radius:4px;padding:0 6px;
margin:0 6px 4px 0;font-size:12px}
.finding{border:1px solid var(--line);border-radius:6px;padding:8px 10px;margin-bottom:8px}
.finding .fhead{display:flex;flex-wrap:wrap;gap:6px;align-items:center;margin-bottom:4px}
.log{background:#0f172a;color:#e2e8f0;padding:10px;border-radius:6px;font-size:12px;max-height:50vh;overflow:auto}
"""

_JS_ERRORS = """
(function(){var errors=[];
function flush(){var el=document.getElementById('gc-errors');if(!el)return;
el.setAttribute('data-count',String(errors.length));el.textContent=errors.join('\\n');if(errors.length)el.hidden=false;}
function record(msg){errors.push(String(msg));flush();}
window.addEventListener('error',function(ev){var t=ev.target;var what=ev.message||(t&&(t.src||t.href))||'unknown';
record('error: '+what+(ev.lineno?' (line '+ev.lineno+')':''));},true);
window.addEventListener('unhandledrejection',function(ev){record('unhandled rejection: '+ev.reason);});
document.addEventListener('securitypolicyviolation',function(ev){record('blocked: '+ev.blockedURI+' ('+
ev.violatedDirective+')');});
var original=console.error;console.error=function(){record('console.error: '+Array.prototype.join.call(arguments,' '));
return original.apply(console,arguments);};
document.addEventListener('DOMContentLoaded',flush);window.gcRecordError=record;})();
"""

_JS = """
(function(){'use strict';
var data=JSON.parse(document.getElementById('gc-data').textContent);
var cells=data.cells;
var detail=document.getElementById('detail');
var body=document.getElementById('detail-body');
var title=document.getElementById('detail-title');
var rows=Array.prototype.slice.call(document.querySelectorAll('tr.row'));
var groups=Array.prototype.slice.call(document.querySelectorAll('tr.group'));
var boxes=Array.prototype.slice.call(document.querySelectorAll('input[name=outcome]'));
var text=document.getElementById('f-text');
var engine=document.getElementById('f-engine');
var count=document.getElementById('f-count');
var selected=null;
function el(tag,cls,txt){var n=document.createElement(tag);if(cls)n.className=cls;
if(txt!==undefined&&txt!==null)n.textContent=String(txt);return n;}
function plain(v){return typeof v==='string'?v:JSON.stringify(v);}
function kvTable(obj){var t=el('table','kv');Object.keys(obj).forEach(function(k){var r=t.insertRow();
r.appendChild(el('th',null,k));r.appendChild(el('td',null,plain(obj[k])));});return t;}
function add(sectionTitle,node){body.appendChild(el('h3',null,sectionTitle));body.appendChild(node);}
function show(index,td){var c=cells[index];if(!c)return;
body.textContent='';title.textContent='';
title.appendChild(el('span','pill o-'+c.outcome,data.words[c.outcome]||c.outcome));
title.appendChild(el('span',null,c.test.split('::').pop()));
var where=el('div','muted',c.runner+(data.gpus[c.runner]?' · '+data.gpus[c.runner]:''));
where.style.marginTop='8px';body.appendChild(where);
body.appendChild(el('div','nodeid',c.nodeid));
if(c.reason){add('Reason',el('pre','reason',c.reason));}
if(c.rules&&c.rules.length){var rl=el('div');c.rules.forEach(function(r){rl.appendChild(el('span','rule',r));});
add('Rules',rl);}
if(c.findings&&c.findings.length){var fl=el('div');c.findings.forEach(function(f){var box=el('div','finding');
var h=el('div','fhead');
h.appendChild(el('span','sev sev-'+(f.unconfirmed?'claim':f.severity),(f.unconfirmed?'unconfirmed ':'')+f.severity));
h.appendChild(el('code',null,f.id));
[f.confidence,f.action].forEach(function(x){if(x)h.appendChild(el('span','muted',x));});box.appendChild(h);
if(f.summary)box.appendChild(el('div',null,f.summary));
var extra={};Object.keys(f).forEach(function(k){
if(['id','severity','confidence','action','summary','unconfirmed'].indexOf(k)<0
&&f[k]!==null&&f[k]!==undefined)extra[k]=f[k];});if(Object.keys(extra).length)box.appendChild(kvTable(extra));
fl.appendChild(box);});add('Findings',fl);}
var metrics={};Object.keys(c.metrics||{}).forEach(function(k){var v=c.metrics[k];
metrics[k]=(v===null?'n/a':(Math.abs(v)>=1000||Number.isInteger(v)?v:Number(v.toPrecision(4))));});
if(Object.keys(metrics).length)add('Metrics',kvTable(metrics));
var info={};if(c.engine)info.engine=c.engine;
Object.keys(c.params||{}).forEach(function(k){info['param '+k]=c.params[k];});
Object.keys(c.axes||{}).forEach(function(k){info['axis '+k]=c.axes[k];});
if(c.duration_s!==null&&c.duration_s!==undefined)info.duration=c.duration_s.toFixed(2)+' s';
if(c.when)info.phase=c.when;if(c.worker)info.worker=c.worker;
if(Object.keys(info).length)add('Cell',kvTable(info));
var known=['nodeid','test','engine','params','axes','outcome','reason','rules','findings','metrics','duration_s',
'log_tail','worker','runner','when'];var other={};Object.keys(c).forEach(function(k){
if(known.indexOf(k)<0&&c[k]!==null&&c[k]!==undefined)other[k]=c[k];});
if(Object.keys(other).length)add('Other',kvTable(other));
if(c.log_tail){add('Log tail',el('pre','log',c.log_tail.replace(/\\x1b\\[[0-9;?]*[ -\\/]*[@-~]/g,'')));}
detail.hidden=false;
if(selected)selected.classList.remove('selected');selected=td||null;if(selected)selected.classList.add('selected');}
function hide(){detail.hidden=true;if(selected){selected.classList.remove('selected');selected=null;}}
document.addEventListener('click',function(ev){var td=ev.target.closest?ev.target.closest('td[data-cell]'):null;
if(td){show(Number(td.getAttribute('data-cell')),td);}});
document.addEventListener('keydown',function(ev){if(ev.key==='Escape'){hide();return;}
var td=ev.target&&ev.target.closest?ev.target.closest('td[data-cell]'):null;
if(td&&(ev.key==='Enter'||ev.key===' ')){ev.preventDefault();show(Number(td.getAttribute('data-cell')),td);}});
document.getElementById('detail-close').addEventListener('click',hide);
function apply(){var words=(text?text.value:'').toLowerCase().split(/\\s+/).filter(Boolean);
var want=engine?engine.value:'';var on={};boxes.forEach(function(b){on[b.value]=b.checked;});var shown=0;
rows.forEach(function(tr){var ok=(!want||tr.getAttribute('data-engine')===want);
var hay=tr.getAttribute('data-search')||'';
for(var i=0;ok&&i<words.length;i++){if(hay.indexOf(words[i])<0)ok=false;}
if(ok){ok=(tr.getAttribute('data-outcomes')||'').split(' ').some(function(o){return on[o];});}
tr.hidden=!ok;if(ok)shown++;
Array.prototype.forEach.call(tr.querySelectorAll('td[data-outcome]'),function(td){
td.classList.toggle('dim',!on[td.getAttribute('data-outcome')]);});});
groups.forEach(function(g){var n=g.nextElementSibling;var any=false;
while(n&&!n.classList.contains('group')){if(!n.hidden){any=true;break;}n=n.nextElementSibling;}g.hidden=!any;});
if(count)count.textContent=shown+' of '+rows.length+' rows';
var none=document.getElementById('no-rows');if(none)none.hidden=shown>0||rows.length===0;return shown;}
if(text)text.addEventListener('input',apply);if(engine)engine.addEventListener('change',apply);
boxes.forEach(function(b){b.addEventListener('change',apply);});
apply();
if(location.hash==='#selftest'){var out=document.getElementById('gc-selftest');var problems=[];
try{boxes.forEach(function(b){b.checked=false;});if(apply()!==0)problems.push('outcome filter left rows visible');
boxes.forEach(function(b){b.checked=true;});if(apply()!==rows.length)problems.push('outcome filter lost rows');
if(text){text.value='no-such-cell-zz9';if(apply()!==0)problems.push('text filter left rows visible');
text.value='';apply();}
var first=document.querySelector('td[data-cell]');
var bad=null,best=-1;Array.prototype.forEach.call(document.querySelectorAll(
'td[data-outcome=failed],td[data-outcome=error]'),function(td){var c=cells[Number(td.getAttribute('data-cell'))];
var score=(c.log_tail?2:0)+(c.reason?1:0)+(c.findings.length?1:0);if(score>best){best=score;bad=td;}});
if(!first){problems.push('no clickable cell');}
[first,bad].forEach(function(td){if(!td)return;td.click();var c=cells[Number(td.getAttribute('data-cell'))];
if(detail.hidden)problems.push('details did not open');
if(body.textContent.indexOf(c.nodeid)<0)problems.push('details lack the nodeid of '+c.nodeid);
if(c.reason&&body.textContent.indexOf(c.reason.split('\\n')[0])<0)problems.push('details lack the reason');
if(!td.classList.contains('selected'))problems.push('cell not marked selected');});
}catch(err){problems.push('exception: '+err);}
var result=problems.length?'fail: '+problems.join('; '):'ok';
out.setAttribute('data-result',result);out.textContent=result;}
})();
"""
