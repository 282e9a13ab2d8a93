"""GitHub-flavoured Markdown summary of a report, for `$GITHUB_STEP_SUMMARY`, PR comments and terminals.

Status words, no emoji: they survive terminals, grep and screen readers. Everything taken from the report is
escaped, since a reason or a log line can contain `|`, `<` or backticks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from .diff import stale_rules
from .merge import matrix_rows, uncovered_cells
from .model import OUTCOMES, SEVERITIES, CellRecord, FindingRecord, Report
from .text import engine_versions, format_params, gpu_summary, one_line, stack_summary

STATUS_WORDS: dict[str, str] = {
    "passed": "passed",
    "failed": "**FAILED**",
    "xfailed": "xfailed",
    "xpassed": "**XPASS**",
    "skipped": "skipped",
    "error": "**ERROR**",
    "not-covered": "not covered",
}

_ESCAPE = str.maketrans({c: "\\" + c for c in "\\`*_[]<>|~"})


def _text(value: object, limit: int = 300) -> str:
    """One line of plain text, Markdown-escaped and shortened (reasons can be whole tracebacks)."""
    return one_line(str(value), limit).translate(_ESCAPE)


def _code(value: object, table: bool = False) -> str:
    """Inline code that the value cannot break out of (CommonMark code spans).

    The fence is one backtick longer than the longest backtick run in the value, so no run inside can close it;
    a value that starts or ends with a backtick is padded with a space (stripped again by the renderer). Inside the
    span `<` is literal text, never HTML; whitespace (newlines included) is folded to single spaces so a table row
    stays one line, and in a table `|` is escaped, which GFM does before it looks for code spans.
    """
    text = " ".join(str(value).split())
    if not text:
        return ""
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    if table:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(row) + " |" for row in rows)
    return lines


def _short_test(test: str) -> str:
    path, _, func = test.rpartition("::")
    return f"{path.rsplit('/', 1)[-1]}::{func}" if path else test


def _counts_line(report: Report) -> str:
    summary = report.summary
    parts = [f"{n} {outcome}" for outcome, n in summary["outcomes"].items() if n]
    cells = summary["cells"]
    runners = summary["runners"]
    return (
        f"**{cells} cell{'s' if cells != 1 else ''}** ({summary['nodeids']} test items) on "
        f"**{runners} runner{'s' if runners != 1 else ''}**: " + (", ".join(parts) or "nothing ran") + "."
    )


def _where(cell: CellRecord) -> str:
    return f"{_code(cell.nodeid)} on **{_text(cell.runner)}**"


def render_markdown(report: Report, *, max_rows: int = 300, max_items: int = 50) -> str:
    """The whole summary; long matrices and lists are cut at `max_rows` / `max_items` with a note."""
    runners = list(report.runners)
    out: list[str] = ["## GPU compatibility report", ""]
    if report.interrupted:
        out += ["> [!WARNING]", "> The run was interrupted: the matrix is incomplete.", ""]
    out += [_counts_line(report), ""]
    exit_part = "" if report.exitstatus is None else f", pytest exit status {report.exitstatus}"
    out += [f"Created {_text(report.created)} by pytest-gpucompat {_text(report.tool_version)}{exit_part}.", ""]

    summary = report.summary
    present = [o for o in OUTCOMES if summary["outcomes"][o]]
    if present and runners:
        out += _table(
            ["Outcome", *(_text(r) for r in runners), "Total"],
            [
                [o, *(str(summary["per_runner"].get(r, {}).get(o, 0)) for r in runners), str(summary["outcomes"][o])]
                for o in present
            ],
        )
        out.append("")

    out += ["### Runners", ""]
    out += _table(
        ["Runner", "GPU", "Driver / CUDA", "Engines"],
        [
            [
                _text(name),
                _text(gpu_summary(fp)),
                _text(stack_summary(fp)),
                _text(", ".join(f"{k} {v}" for k, v in engine_versions(fp)) or "none"),
            ]
            for name, fp in report.runners.items()
        ],
    )
    out.append("")

    rows = matrix_rows(report)
    out += ["### Matrix", ""]
    if not rows:
        out += ["No gpucompat cells in this report.", ""]
    else:
        table_rows = []
        for _nodeid, row in rows[:max_rows]:
            any_cell = next(iter(row.values()))
            table_rows.append(
                [
                    _code(_short_test(any_cell.test), table=True),
                    _text(any_cell.engine or "-"),
                    _code(format_params(any_cell.params), table=True) if any_cell.params else "",
                    *(STATUS_WORDS[row[r].outcome] if r in row else "-" for r in runners),
                ]
            )
        out += _table(["Test", "Engine", "Params", *(_text(r) for r in runners)], table_rows)
        if len(rows) > max_rows:
            out.append(f"\n{len(rows) - max_rows} more rows not shown; see the HTML report.")
        out.append("")

    failures = [c for c in report.cells if c.outcome in ("failed", "error")]
    if failures:
        out += [f"### Failures ({len(failures)})", ""]
        for cell in failures[:max_items]:
            rules = f" Rules: {', '.join(_code(r) for r in cell.rules)}." if cell.rules else ""
            reason = _text(cell.reason) if cell.reason else "no reason recorded"
            out.append(f"- {_where(cell)}: {cell.outcome}: {reason}.{rules}")
        if len(failures) > max_items:
            out.append(f"- … and {len(failures) - max_items} more")
        out.append("")

    out += _findings_section(report, max_items)
    out += _stale_section(report, max_items)

    uncovered = uncovered_cells(report)
    if uncovered:
        out += [f"### Covered by no runner ({len(uncovered)})", ""]
        out += [f"- {_code(n)}" for n in uncovered[:max_items]]
        if len(uncovered) > max_items:
            out.append(f"- … and {len(uncovered) - max_items} more")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def _findings_section(report: Report, max_items: int) -> list[str]:
    by_id: dict[str, tuple[FindingRecord, list[CellRecord]]] = {}
    for cell in report.cells:
        for finding in cell.findings:
            by_id.setdefault(finding.id, (finding, []))[1].append(cell)
    if not by_id:
        return []
    out = ["### Findings", ""]
    severities = list(SEVERITIES) + sorted({f.severity for f, _ in by_id.values()} - set(SEVERITIES))
    groups = [(f"#### {severity}", [(f, cells) for f, cells in by_id.values()
                                    if f.severity == severity and not f.unconfirmed]) for severity in severities]
    groups.append(("#### Unconfirmed claims: only the seed documents say so, never counted as a problem",
                   [(f, cells) for f, cells in by_id.values() if f.unconfirmed]))
    for title, group in groups:
        if not group:
            continue
        out += [f"{title} ({len(group)})", ""]
        for finding, cells in group[:max_items]:
            meta = ", ".join(x for x in (finding.confidence, finding.action) if x)
            meta = f" ({_text(meta)})" if meta else ""
            count = f"{len(cells)} cell{'s' if len(cells) != 1 else ''}"
            out.append(f"- {_code(finding.id)}{meta}: {_text(finding.summary)} ({count})")
        if len(group) > max_items:
            out.append(f"- … and {len(group) - max_items} more")
        out.append("")
    return out


def _stale_section(report: Report, max_items: int) -> list[str]:
    stale = stale_rules(report)
    if not stale:
        return []
    out = [f"### Stale rules ({len(stale)})", "", "A cell a rule expected to fail passed (XPASS):", ""]
    for rule in stale[:max_items]:
        example = _text(rule.cells[0])
        more = f" and {len(rule.cells) - 1} more" if len(rule.cells) > 1 else ""
        out.append(f"- {_code(rule.rule_id)}: {_text(rule.suggestion)}; XPASS on {example}{more}")
    out.append("")
    return out


def write_step_summary(md: str) -> bool:
    """Append to the GitHub Actions job summary when `$GITHUB_STEP_SUMMARY` is set; False when it is not."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(md if md.endswith("\n") else md + "\n")
    return True
