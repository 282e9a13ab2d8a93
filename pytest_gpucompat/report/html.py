"""One self-contained HTML page for a report: the matrix, filters, details on click, fingerprints.

The page is opened from CI artifacts, often offline and behind strict proxies, so it carries its CSS and JS
inline, loads nothing (a Content-Security-Policy forbids it), and escapes every string from the report.
Per-cell details travel as JSON in a `<script type="application/json">` block and are put on screen with
`textContent`, never `innerHTML`. Opening the page with `#selftest` clicks the first cell, exercises the
filters and writes the result into `#gc-selftest`; JS errors are recorded into `#gc-errors` (both are
what the browser test reads from the dumped DOM). The page's structure is built here; its stylesheet and scripts
are in `html_assets.py`.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from ..checks import outputs
from ..common.errors import visible
from .charts import charts_section
from .cross import SUMMARY as CROSS_SUMMARY
from .cross import cell_id, figures_text, runner_pairs
from .diff import stale_rules
from .figures import ROW_ORDER, RULE_SKIPS, STATES, cell_state, cell_word, key_figures, rows_failures_first, rule_of
from .html_assets import COMPACT_FROM, CSS, JS, JS_ERRORS, OVER_MARK
from .html_deviations import deviations_section
from .html_runners import abbreviated, e, fingerprint_card, installs_notice, runner_header, what_if_banner, what_if_of
from .merge import matrix_rows, uncovered_cells
from .model import SEVERITIES, CellRecord, FindingRecord, Report
from .text import gpu_summary, model_of, models_in, one_line, plain

CELL_WORDS: dict[str, str] = {state: word for state, (word, _legend) in STATES.items()}
_PARAM_CHARS = 30  # a longer parameter value is cut, with the whole of it on hover
_FAILURES_SHOWN = 50  # cells in the Failures section; the rest are in the matrix, first
_LOG_LINES = 40  # the last lines of a cell's log tail shown inline
_LOG_CHARS = 4000  # and at most this many characters of them
_CAUSE_CHARS = 400
_OPEN_LOGS = 5  # with this many failures or fewer, their log tails are shown open


def _json_for_script(data: Any) -> str:
    """JSON that cannot end its <script> element early nor be read as markup."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for raw in ("&", "<", ">", "\u2028", "\u2029"):  # as \u0026 and so on, in this order
        text = text.replace(raw, f"\\u{ord(raw):04x}")
    return text


def _short_test(test: str) -> tuple[str, str]:
    path, _, func = test.rpartition("::")
    return path, func or test


def _state_counts(report: Report) -> Counter[str]:
    return Counter(cell_state(c) for c in report.cells)


# --- sections ------------------------------------------------------------------------------------------------------


def _claims(report: Report) -> int:
    return len({f.id for c in report.cells for f in c.findings if f.unconfirmed})


def _summary_bar(report: Report) -> str:
    summary = report.summary
    total = summary["cells"] or 1
    counts = _state_counts(report)
    segments = []
    legend = []
    for state, (_word, text) in STATES.items():
        n = counts[state]
        if n:
            pct = n / total * 100
            segments.append(f'<span class="seg s-{state}" style="width:{pct:.3f}%" title="{e(text)}: {n}"></span>')
        legend.append(f'<li class="{"" if n else "zero"}" data-state="{state}"><span class="swatch s-{state}"></span>'
                      f"{e(text)} <b>{n}</b></li>")
    claims = _claims(report)
    legend.append(f'<li class="{"" if claims else "zero"}"><span class="swatch s-claim"></span>'
                  f'<a href="#unconfirmed">unconfirmed claims</a> <b>{claims}</b> <span class="muted">(folded below; '
                  "never colour a cell)</span></li>")
    uncovered = summary["uncovered"]
    failing = summary["outcomes"]["failed"] + summary["outcomes"]["error"]
    facts = (
        f'<p class="facts"><b>{summary["cells"]}</b> cells · <b>{summary["nodeids"]}</b> test items · '
        f"<b>{summary['runners']}</b> runner{'s' if summary['runners'] != 1 else ''}"
        + (f' · <a href="#failures"><b>{failing}</b> failed or errored</a>' if failing else "")
        + (f' · <a href="#uncovered"><b>{uncovered}</b> covered by no runner</a>' if uncovered else "")
        + ' · <a href="#charts">charts</a> · <a href="#runners">runners</a></p>'
    )
    figures = ('<p class="muted figlegend">Figures in cells: <span class="fig m-good">within half the limit</span> '
               f'<span class="fig m-near">within the limit</span> <span class="fig m-over">{OVER_MARK}over the limit'
               '</span> <span class="fig m-plain">no limit (throughput)</span>; hover a figure for its limit.</p>')
    return (
        '<section class="summary" aria-label="Summary">'
        + facts
        + f'<div class="bar" role="img" aria-label="counts per state">{"".join(segments)}</div>'
        + f'<ul class="legend" id="legend">{"".join(legend)}</ul>{figures}</section>'
    )


def _filters(report: Report) -> str:
    counts = _state_counts(report)
    boxes = "".join(
        f'<label class="chk" title="{e(text)}"><input type="checkbox" name="state" value="{e(state)}" checked>'
        f'<span class="swatch s-{state}"></span>{e(word)} <span class="n">{counts[state]}</span></label>'
        for state, (word, text) in STATES.items()
        if counts[state]
    )
    engines = sorted({c.engine for c in report.cells if c.engine})
    options = "".join(f'<option value="{e(x)}">{e(x)}</option>' for x in engines)
    return (
        '<section class="filters" aria-label="Filters">'
        '<input type="search" id="f-text" placeholder="Filter: test, param, runner, rule id, reason…" '
        'aria-label="text filter" autocomplete="off">'
        f'<div class="outcomes" role="group" aria-label="states">{boxes}</div>'
        f'<select id="f-engine" aria-label="engine"><option value="">all engines</option>{options}</select>'
        '<span id="f-count" class="muted"></span></section>'
    )


def _chip(key: str, value: Any) -> str:
    return f'<span class="param">{e(key)}=<b>{abbreviated(plain(value), _PARAM_CHARS)}</b></span>'


def _shared_params(cells: list[CellRecord]) -> dict[str, Any]:
    """The parameters every cell of a test group has, with one value: shown once in the group's header."""
    if len(cells) < 2:
        return {}
    first = cells[0].params
    return {k: v for k, v in first.items() if all(k in c.params and c.params[k] == v for c in cells[1:])}


def _row_header(cell: CellRecord, shared: Mapping[str, Any], with_model: bool = False) -> str:
    chips = []
    model = model_of(cell.nodeid, cell.engine) if with_model else None
    if model:
        chips.append(_chip("model", model))
    if cell.engine:
        chips.append(f'<span class="engine">{e(cell.engine)}</span>')
    chips.extend(_chip(k, v) for k, v in cell.params.items() if k not in shared)
    chips.extend(
        f'<span class="axis">{e(k)} {abbreviated(plain(v), _PARAM_CHARS)}</span>' for k, v in cell.axes.items()
    )
    if not chips:
        _, sep, ident = cell.nodeid.partition("[")
        chips.append(f'<span class="param">{abbreviated("[" + ident if sep else "(no parameters)", 40)}</span>')
    return f'<th scope="row" class="rowhead" title="{e(cell.nodeid)}">{"".join(chips)}</th>'


def _search_text(row: Mapping[str, CellRecord]) -> str:
    parts: list[str] = []
    for cell in row.values():
        parts += [cell.nodeid, cell.engine or "", cell.runner, cell.outcome, cell_state(cell)]
        parts += [one_line(cell.reason, 400)]
        parts += [f"{k}={plain(v)}" for k, v in cell.params.items()]
        parts += [f"{k} {plain(v)}" for k, v in cell.axes.items()]
        parts += list(cell.rules) + [f.id for f in cell.findings] + [str(x["id"]) for x in cell.explained_by]
    return " ".join(dict.fromkeys(p for p in parts if p)).lower()


def _figures_html(cell: CellRecord) -> str:
    return "".join(
        f'<span class="fig m-{f.margin}" data-metric="{e(f.key.metric)}" title="{e(f.title)}'
        + (f' · OVER the limit">{OVER_MARK}' if f.margin == "over" else '">') + f"{e(f.text)}</span>"
        for f in key_figures(cell)
    )


def _cell_td(cell: CellRecord | None, index: int | None, host: str | None) -> str:
    if cell is None or index is None:
        return '<td class="cell o-missing" title="this runner has no such cell">–</td>'
    state = cell_state(cell)
    marks = []
    evidence = [f for f in cell.findings if not f.unconfirmed]  # unconfirmed claims never colour a cell
    if evidence:
        worst = min(
            (f.severity for f in evidence),
            key=lambda s: SEVERITIES.index(s) if s in SEVERITIES else len(SEVERITIES),
        )
        marks.append(f'<span class="mark sev-{e(worst)}" title="{len(evidence)} finding(s)">{len(evidence)}</span>')
    issue = cell.known_issue
    rule = rule_of(cell) if state in RULE_SKIPS else (str(issue["id"]) if issue else None)
    duration = f"{cell.duration_s:.1f} s" if cell.duration_s is not None and cell.ran else ""
    title = f"{cell.runner}: {STATES[state][1]}" + (f" — {one_line(cell.reason, 160)}" if cell.reason else "")
    if issue:
        title += f" — matches known issue {issue['id']}"
    if cell.deviations:
        title += f" — ran with {cell.deviations_text()}"
    if (attention := cell.attention_text()) is not None:
        title += f" — {attention}"
    if (rerun := cell.rerun_text()) is not None:
        title += f" — {one_line(rerun, 200)}"
    if duration:
        title += f" ({duration})"
    ran_on = host if host and cell.ran else None
    # why a cell did not run, as text (a title shows only on hover, and not at all on a phone): the rule id already
    # says it for a known-bad skip, the word for one that needs more GPUs
    why = cell.reason if not cell.ran and state not in RULE_SKIPS and state != "needs-gpus" else None
    return (
        f'<td class="cell o-{cell.outcome}" data-cell="{index}" data-outcome="{e(cell.outcome)}" '
        f'data-state="{state}" tabindex="0" role="button" aria-label="{e(title)}" title="{e(title)}">'
        f'<span class="word">{e(cell_word(cell, state))}</span>{"".join(marks)}'
        + (f'<span class="rule-id">{abbreviated(rule, 26)}</span>' if rule else "")
        + _figures_html(cell)
        + (f'<span class="ranon">ran on {abbreviated(ran_on, 22)}</span>' if ran_on else "")
        + (f'<span class="why">{abbreviated(one_line(why, 400), 90)}</span>' if why else "")
        + (f'<span class="why rerun">{abbreviated(one_line(rerun, 400), 90)}</span>' if rerun else "")
        + "</td>"
    )


def _group_rows(rows: list[tuple[str, dict[str, CellRecord]]]) -> list[list[dict[str, CellRecord]]]:
    groups: list[list[dict[str, CellRecord]]] = []
    current = None
    for _nodeid, row in rows:
        test = next(iter(row.values())).test
        if test != current:
            current = test
            groups.append([])
        groups[-1].append(row)
    return groups


def _matrix(report: Report, index_of: Mapping[int, int]) -> str:
    runners = list(report.runners)
    rows = rows_failures_first(matrix_rows(report))
    if not rows:
        return '<p class="empty">No gpucompat cells in this report.</p>'
    summary = report.summary["per_runner"]
    head = "".join(
        runner_header(i, name, report.runners[name], summary.get(name, {})) for i, name in enumerate(runners)
    )
    hosts = {name: found[1] for name, fp in report.runners.items() if (found := what_if_of(fp))}
    with_model = len(models_in(report.cells)) > 1
    body: list[str] = []
    for group in _group_rows(rows):
        firsts = [next(iter(row.values())) for row in group]
        shared = _shared_params(firsts)
        path, func = _short_test(firsts[0].test)
        chips = "".join(_chip(k, v) for k, v in shared.items())
        body.append(
            f'<tr class="group"><th colspan="{len(runners) + 1}" scope="rowgroup"><div class="ghead">'
            f'<span class="func">{e(func)}</span> <span class="path">{e(path)}</span>'
            + (f'<span class="shared"><span class="muted">every row:</span> {chips}</span>' if chips else "")
            + "</div></th></tr>"
        )
        for row, any_cell in zip(group, firsts):
            states = " ".join(sorted({cell_state(c) for c in row.values()}))
            tds = "".join(
                _cell_td(row.get(name), index_of.get(id(row[name])) if name in row else None, hosts.get(name))
                for name in runners
            )
            body.append(
                f'<tr class="row" data-engine="{e(any_cell.engine or "")}" data-states="{e(states)}" '
                f'data-search="{e(_search_text(row))}">{_row_header(any_cell, shared, with_model)}{tds}</tr>'
            )
    return (
        f'<p class="muted roworder">{e(ROW_ORDER)}</p><div id="matrix" class="matrix-wrap'
        f'{" compact" * (len(runners) >= COMPACT_FROM)}" tabindex="0" role="region" '
        'aria-label="matrix (scrolls inside its box)"><table class="matrix"><thead><tr>'
        f'<th class="corner" scope="col">test · engine · params</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
        '<p id="no-rows" class="empty" hidden>No rows match the filters.</p>'
    )


def _log_tail(text: str) -> str:
    """The last lines of a log tail, bounded, its control characters made visible (escaped by the caller)."""
    lines = visible(text.rstrip()).splitlines()
    shown = "\n".join(lines[-_LOG_LINES:])
    if len(shown) > _LOG_CHARS:
        shown = "…" + shown[-(_LOG_CHARS - 1):]
    return shown


def _known_issue_html(cell: CellRecord) -> str:
    issue = cell.known_issue
    if not issue:
        return '<p class="issue muted">No known issue matches this failure (<code>gpucompat explain</code>).</p>'
    text = f'<p class="issue">Matches known issue <code>{e(issue.get("id"))}</code>'
    if issue.get("summary"):
        text += f": {e(one_line(issue['summary'], _CAUSE_CHARS))}"
    if issue.get("workaround"):
        text += f'<br><span class="workaround">Workaround: {e(one_line(issue["workaround"], _CAUSE_CHARS))}</span>'
    return text + "</p>"


def _failure_item(cell: CellRecord, open_logs: bool) -> str:
    state = cell_state(cell)
    path, func = _short_test(cell.test)
    chips = "".join(_chip(k, v) for k, v in cell.params.items())
    chips += "".join(f'<span class="axis">{e(k)} {abbreviated(plain(v), _PARAM_CHARS)}</span>'
                     for k, v in cell.axes.items())
    head = (
        f'<p class="fail-head"><span class="pill o-{e(cell.outcome)}" data-state="{state}">{e(STATES[state][1])}</span>'
        f' <span class="func" title="{e(cell.nodeid)}">{e(func)}</span> <span class="path">{e(path)}</span>'
        + (f' <span class="engine">{e(cell.engine)}</span>' if cell.engine else "")
        + chips
        + f' <span class="muted">on</span> <b class="runner">{e(cell.runner)}</b></p>'
    )
    cause = one_line(cell.reason, _CAUSE_CHARS) or "no reason recorded"
    what = "why a rule expected it to fail" if cell.outcome == "xpassed" else "cause"
    body = f'<p class="cause"><span class="muted">{what}:</span> {e(visible(cause))}</p>'
    if cell.outcome == "xpassed":
        body += '<p class="issue muted">It passed: evidence against the rule (see Stale rules).</p>'
    else:
        body += _known_issue_html(cell)
    if cell.log_tail and cell.log_tail.strip():
        n = len(cell.log_tail.rstrip().splitlines())
        label = f"log tail (last {_LOG_LINES} of {n} lines)" if n > _LOG_LINES else f"log tail ({n} lines)"
        body += (f'<details class="log"{" open" if open_logs else ""}><summary>{e(label)}</summary>'
                 f'<pre class="log">{e(_log_tail(cell.log_tail))}</pre></details>')
    else:
        body += '<p class="muted">No log tail recorded.</p>'
    return f'<li class="failure" data-outcome="{e(cell.outcome)}">{head}{body}</li>'


def _failures_section(report: Report) -> str:
    """Failed and errored cells, then XPASS ones, before the matrix: each with its cause, the known issue that
    explains it (with the rule's workaround) and its log tail, as plain HTML (readable without JavaScript)."""
    failing = [c for c in report.cells if c.outcome in ("failed", "error")]
    xpassed = [c for c in report.cells if c.outcome == "xpassed"]
    cells = failing + xpassed
    if not cells:
        return ""
    shown = cells[:_FAILURES_SHOWN]
    open_logs = len(cells) <= _OPEN_LOGS
    items = "".join(_failure_item(c, open_logs) for c in shown)
    more = (f'<p class="muted">… and {len(cells) - len(shown)} more: the matrix below lists them first.</p>'
            if len(cells) > len(shown) else "")
    counts = f"{len(failing)} failed or errored" + (f", {len(xpassed)} XPASS" if xpassed else "")
    return (f'<section id="failures" aria-label="Failures"><h2>Failures <span class="muted">({e(counts)})</span>'
            f'</h2><ol class="failures">{items}</ol>{more}</section>')


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
    head = ('<div class="scroll"><table class="grid"><thead><tr><th>severity</th><th>rule</th><th>confidence</th>'
            "<th>action</th><th>summary</th><th>cells</th></tr></thead><tbody>")

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
                f"{head}{found}</tbody></table></div></section>")
    if n_claims:
        out += (f'<section id="unconfirmed"><details><summary><h2>Unconfirmed claims <span class="muted">'
                f"({n_claims})</span></h2></summary><p class=\"muted\">Only the seed documents say so: they never "
                "stop or colour a cell; the cells' outcomes are evidence for or against them.</p>"
                f"{head}{claims}</tbody></table></div></details></section>")
    return out


def _cross_section(report: Report) -> str:
    pairs = runner_pairs(report)
    if not pairs:
        return ""
    rows = "".join(
        f"<tr><td><code>{e(p.test.rpartition('::')[2] or p.test)}</code></td><td><code>{e(cell_id(p))}</code></td>"
        f"<td>{e(p.first)} → {e(p.second)}</td>"
        + "".join(f"<td>{e(t)}</td>" for t in figures_text(p)) + "</tr>"
        for p in pairs
    )
    return (f'<section id="cross"><h2>Runner against runner <span class="muted">({len(pairs)})</span></h2>'
            f'<p class="muted">{e(CROSS_SUMMARY)}</p><div class="scroll"><table class="grid"><thead><tr><th>test</th>'
            "<th>cell</th><th>runners</th><th>first divergence</th><th>max |Δlogprob|</th>"
            f"<th>token agreement</th></tr></thead><tbody>{rows}</tbody></table></div></section>")


def _embedded(cell: CellRecord) -> dict[str, Any]:
    """A cell as the page's script shows it: its outputs (kilobytes of logprobs) stay in the JSON report."""
    data = cell.to_dict()
    kept = data.pop(outputs.KEY, None)
    if isinstance(kept, Mapping) and isinstance(kept.get("generations"), list):
        data[outputs.KEY] = f"{len(kept['generations'])} generations, in the JSON report"
    elif kept is not None:
        data[outputs.KEY] = "in the JSON report"
    return data


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


def render_html(report: Report) -> str:
    """The whole page as a string."""
    index_of = {id(cell): i for i, cell in enumerate(report.cells)}
    data = {
        "cells": [_embedded(cell) for cell in report.cells],
        "gpus": {name: gpu_summary(fp) for name, fp in report.runners.items()},
        "words": CELL_WORDS,
        "states": [cell_state(cell) for cell in report.cells],
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
        fingerprint_card(i, name, fp, is_open=single) for i, (name, fp) in enumerate(report.runners.items())
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
            what_if_banner(report.runners),
            installs_notice(report.runners),
            _summary_bar(report),
            _failures_section(report),
            _filters(report),
            f"<main>{_matrix(report, index_of)}</main>",
            deviations_section(report),
            charts_section(report),
            _uncovered_section(report),
            _cross_section(report),
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
