"""`gpucompat diff` in the CI's own UI: the Markdown for the job summary (`$GITHUB_STEP_SUMMARY`, `--markdown FILE`),
the `::error` annotations GitHub Actions shows on the run, and the `--json` form.

The Markdown opens with the headline and the regressions, then the two runs and what differed between them, then the
figures that moved (worse first) and the other lists; cells are named by their full node id (and runner), never
shortened. The JSON carries every list with full node ids, for tools.

Pure functions: nothing here reads files, clocks or the environment.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .compare import VERDICTS, CompareRow
from .diff import Change, DiffResult
from .diff_text import verdict_line
from .markdown import _code, _table, _text

MAX_ROWS = 200
"""Rows per table of the Markdown: a job summary is limited (1 MiB on GitHub); the JSON has them all."""


def _cell(key: str, result: DiffResult) -> str:
    name = result.names.get(key)
    shown = _code(key, table=True)
    return f"{shown}<br>{_text(name.line)}" if name is not None and name.params else shown


def _change_row(change: Change, result: DiffResult) -> list[str]:
    what = change.metric if change.kind == "metric" and change.metric else change.kind
    return [_cell(change.key, result), _text(what), _text(change.before), _text(change.after), _text(change.detail)]


def _changes(title: str, changes: Sequence[Change], result: DiffResult) -> list[str]:
    if not changes:
        return []
    rows = [_change_row(c, result) for c in changes[:MAX_ROWS]]
    more = [f"… and {len(changes) - MAX_ROWS} more (`--json` lists them all)", ""] if len(changes) > MAX_ROWS else []
    return [f"### {title} ({len(changes)})", "",
            *_table(["cell", "what", "baseline", "current", "detail"], rows), "", *more]


def _rows_section(rows: Sequence[CompareRow], result: DiffResult) -> list[str]:
    moved = sorted((r for r in rows if r.moved), key=lambda r: VERDICTS.index(r.verdict))
    if not moved:
        return ["### Figures", "", f"No figure moved beyond the runs' noise ({len(rows)} compared).", ""]
    table = _table(["cell", "metric", "baseline", "current", "Δ", "change", "noise", "verdict"],
                   ([_cell(r.key, result), _text(r.metric), f"{r.before:.6g}", f"{r.after:.6g}", r.delta, r.change,
                     r.noise, f"**{r.verdict}**" if r.worse else r.verdict] for r in moved[:MAX_ROWS]))
    more = [f"… and {len(moved) - MAX_ROWS} more", ""] if len(moved) > MAX_ROWS else []
    return [f"### Figures beyond the runs' noise ({len(moved)} of {len(rows)}), worse first", "", *table, "", *more]


def _runs(result: DiffResult) -> list[str]:
    lines: list[str] = []
    if result.runs is not None:
        base, cur = result.runs
        lines += _table(["", "baseline", "current"], [
            ["report", _code(base.source or "", True), _code(cur.source or "", True)],
            ["runners", _text(", ".join(base.runners)), _text(", ".join(cur.runners))],
            ["created", _text(base.created), _text(cur.created)],
            ["cells", str(base.cells), str(cur.cells)],
            ["gpucompat", _text(base.tool_version), _text(cur.tool_version)],
        ]) + [""]
    if result.environment:
        lines += [f"### What differs between the runs ({len(result.environment)})", "",
                  *_table(["what", "baseline", "current"],
                          ([_text(c.what), _text(c.before), _text(c.after)] for c in result.environment)), ""]
    elif result.runs is not None:
        lines += ["Nothing differs between the runs' fingerprints or the harness's settings.", ""]
    return lines


def _plain(title: str, items: Iterable[str]) -> list[str]:
    items = list(items)
    if not items:
        return []
    return [f"### {title} ({len(items)})", "", *(f"- {item}" for item in items[:MAX_ROWS]), ""]


def render_diff_markdown(result: DiffResult) -> str:
    """The diff as Markdown: headline, regressions first, then the runs, the figures and the rest."""
    headline = verdict_line(result).removeprefix("gpucompat diff: ")
    lines = [f"## gpucompat diff: {_text(headline, 1000)}", "",
             f"matched {_text(result.matching)}; {result.compared} cells compared", ""]
    lines += _changes("Regressions", result.regressions, result)
    lines += _plain("New broken findings", (
        f"{_cell(n.key, result)}: {_code(n.finding_id)}" + (f" ({_text(n.confidence)})" if n.confidence else "")
        + f": {_text(n.summary)}" for n in result.new_broken))
    lost = "Lost coverage" + (" (allowed)" if result.allow_missing else " (a regression; --allow-missing accepts it)")
    lines += _changes(lost, result.lost, result)
    if result.incomplete:
        lines += [f"**{_text(result.incomplete)}**", ""]
    lines += _runs(result)
    lines += _rows_section(result.rows, result)
    lines += _changes("Changed outcomes", result.outcome_changes, result)
    lines += _changes("Improvements", result.improvements, result)
    lines += _changes("Within noise (beyond a threshold, not beyond the runs' spread)", result.within_noise, result)
    lines += _plain("Stale rules (a known-bad cell passed)", (
        f"{_code(s.rule_id)}: {_text(s.suggestion)}; XPASS on {len(s.cells)} cell(s), e.g. {_code(s.cells[0])}"
        for s in result.stale_rules))
    lines += _plain("New cells", (_cell(k, result) for k in result.new_cells))
    lines += _plain("Missing cells", (_cell(k, result) for k in result.missing_cells))
    return "\n".join(lines).rstrip("\n") + "\n"


def _escape_data(text: str) -> str:
    """GitHub's workflow-command escaping of a message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_annotations(result: DiffResult, limit: int = 50) -> list[str]:
    """`::error title=...::message` lines, one per regression (GitHub shows at most 10 per step, so the worst come
    first: outcomes, new broken findings, lost coverage, then figures), and a last one when more were left out."""
    items: list[tuple[str, str]] = []
    for c in [c for c in result.regressions if c.kind == "outcome"] + [
            c for c in result.regressions if c.kind != "outcome"]:
        what = f"{c.metric} {c.before} → {c.after}" if c.kind == "metric" else f"{c.before} → {c.after}"
        items.append((f"gpucompat regression: {result.name(c.key)}",
                      f"{c.key}: {what}" + (f" ({c.detail})" if c.detail else "")))
    for n in result.new_broken:
        items.append((f"gpucompat new broken finding: {n.finding_id}", f"{n.key}: {n.summary}"))
    if not result.allow_missing:
        for c in result.lost:
            items.append((f"gpucompat lost coverage: {result.name(c.key)}",
                          f"{c.key}: {c.before} → {c.after}" + (f" ({c.detail})" if c.detail else "")))
    if result.incomplete:
        items.append(("gpucompat: incomplete report", result.incomplete))
    if result.fail_on_changed:
        for row in result.changed:
            items.append((f"gpucompat changed figure: {result.name(row.key)}",
                          f"{row.key}: {row.metric} {row.before:.6g} → {row.after:.6g} ({row.change}, {row.verdict})"))
    lines = [f"::error title={_escape_property(title)}::{_escape_data(message)}" for title, message in items[:limit]]
    if len(items) > limit:
        lines.append(f"::error title=gpucompat::{len(items) - limit} more regression(s): see the job summary")
    return lines


def diff_json(result: DiffResult) -> dict[str, Any]:
    """Everything the text shows, with full node ids: for tools (`gpucompat diff --json`)."""

    def change(c: Change) -> dict[str, Any]:
        return {"key": c.key, "nodeid": c.nodeid, "runner": c.runner, "name": result.name(c.key), "kind": c.kind,
                "metric": c.metric, "before": c.before, "after": c.after, "detail": c.detail}

    return {
        "verdict": verdict_line(result).removeprefix("gpucompat diff: "),
        "regressed": result.regressed,
        "clean": result.clean,
        "matching": result.matching,
        "compared": result.compared,
        "runs": [{"source": side.source, "runners": list(side.runners), "created": side.created,
                  "cells": side.cells, "tool_version": side.tool_version} for side in result.runs or ()],
        "environment": [{"what": c.what, "before": c.before, "after": c.after} for c in result.environment],
        "regressions": [change(c) for c in result.regressions],
        "new_broken": [{"key": n.key, "nodeid": n.nodeid, "runner": n.runner, "finding": n.finding_id,
                        "confidence": n.confidence, "summary": n.summary} for n in result.new_broken],
        "lost": [change(c) for c in result.lost],
        "lost_allowed": result.allow_missing,
        "incomplete": result.incomplete,
        "outcome_changes": [change(c) for c in result.outcome_changes],
        "improvements": [change(c) for c in result.improvements],
        "within_noise": [change(c) for c in result.within_noise],
        "figures": [{"key": r.key, "name": result.name(r.key), "metric": r.metric, "before": r.before,
                     "after": r.after, "delta": r.after - r.before, "change": r.change, "noise_band": r.band,
                     "noise_measured": r.measured, "verdict": r.verdict} for r in result.rows],
        "stale_rules": [{"rule": s.rule_id, "confidence": s.confidence, "suggestion": s.suggestion,
                         "cells": list(s.cells)} for s in result.stale_rules],
        "new_cells": list(result.new_cells),
        "missing_cells": list(result.missing_cells),
    }
