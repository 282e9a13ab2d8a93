"""GitHub-flavoured Markdown summary of a report, for `$GITHUB_STEP_SUMMARY`, PR comments and terminals.

Status words, no emoji: they survive terminals, grep and screen readers. Everything taken from the report is
escaped, since a reason or a log line can contain `|`, `<` or backticks. Each matrix cell adds its key figures
(metrics.KEY_FIGURES, worded as the HTML page does: figures.format_value); rows come regressions first; the whole
summary stays under GitHub's 1 MiB job-summary limit, cutting the matrix with a pointer to the full report.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable, Sequence

from ..common.errors import visible
from ..common.metrics import KEY_FIGURES
from .cross import SUMMARY as CROSS_SUMMARY
from .cross import cell_id, figures_text, runner_pairs
from .diff import stale_rules
from .figures import ROW_ORDER, RULE_SKIPS, cell_state, cell_word, format_value, rows_failures_first, rule_of
from .merge import matrix_rows, uncovered_cells
from .model import DEVIATIONS_SUMMARY, OUTCOMES, SEVERITIES, CellRecord, FindingRecord, Report, deviation_groups
from .text import (
    engine_versions,
    format_params,
    gpu_summary,
    incomplete_installs,
    model_of,
    models_in,
    one_line,
    stack_summary,
)

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
    return visible(one_line(str(value), limit)).translate(_ESCAPE)


def _code(value: object, table: bool = False) -> str:
    """Inline code that the value cannot break out of (CommonMark code spans).

    The fence is one backtick longer than the longest backtick run in the value, so no run inside can close it;
    a value that starts or ends with a backtick is padded with a space (stripped again by the renderer). Inside the
    span `<` is literal text, never HTML; whitespace (newlines included) is folded to single spaces so a table row
    stays one line, and in a table `|` is escaped, which GFM does before it looks for code spans.
    """
    text = visible(" ".join(str(value).split()))  # an ANSI escape or a NUL is shown, not sent to the reader
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


#: GitHub refuses a step's job summary ($GITHUB_STEP_SUMMARY) larger than this, in bytes.
GITHUB_SUMMARY_LIMIT = 1024 * 1024
#: What `render_markdown` stays within by default: under GitHub's limit, with room for what else the step writes.
MAX_SUMMARY_BYTES = 1_000_000
_NOTE_BYTES = 400  # kept free for the notes that say what was cut



def _size(lines: Iterable[str]) -> int:
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def render_markdown(report: Report, *, max_rows: int = 300, max_items: int = 50,
                    max_bytes: int = MAX_SUMMARY_BYTES) -> str:
    """The whole summary; long matrices and lists are cut at `max_rows` / `max_items` with a note, and the matrix
    stops where the summary would pass `max_bytes` (UTF-8): the job summary of a 20,000-cell run still fits."""
    head = _head(report, max_items)
    tail = _tail(report, max_items)
    budget = max_bytes - _size(head) - _size(tail) - _NOTE_BYTES
    out = head + _matrix(report, max_rows, budget) + tail
    text = "\n".join(out).rstrip("\n") + "\n"
    if len(text.encode("utf-8")) <= max_bytes:
        return text
    # only a report with thousands of runners or findings gets here: cut at a line, and say so
    cut = text.encode("utf-8")[: max(0, max_bytes - _NOTE_BYTES)].decode("utf-8", "ignore").rpartition("\n")[0]
    return f"{cut}\n\n… summary cut at {max_bytes:,} bytes: see the HTML/JSON report.\n"


def _head(report: Report, max_items: int) -> list[str]:
    runners = list(report.runners)
    out: list[str] = ["## GPU compatibility report", ""]
    if report.interrupted:
        out += ["> [!WARNING]", "> The run was interrupted: the matrix is incomplete.", ""]
    out += _what_if_banner(report)
    out += _installs_notice(report)
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
    out += _environment_lines(report, max_items)
    return out


def _what_if_banner(report: Report) -> list[str]:
    """`What-if: evaluated against FILE; cells ran on HOST` for each runner whose fingerprint came from a file."""
    lines = []
    for name, fp in report.runners.items():
        if not fp.get("what_if"):
            continue
        whose = f" for runner **{_text(name)}**" if len(report.runners) > 1 else ""
        host = _text(fp.get("host") or "an unnamed machine")
        lines.append(f"> What-if: evaluated against {_code(fp['what_if'])}{whose}; cells ran on {host}.")
    if not lines:
        return []
    note = ("> Cells marked *(ran)* really ran there; the others were decided from the what-if fingerprint "
            "(skipped, not covered).")
    return ["> [!NOTE]", *[x for line in lines for x in (line, ">")], note, ""]


def _installs_notice(report: Report) -> list[str]:
    """A warning per runner whose install of an engine lacks its declared requirements (fingerprint `installs`)."""
    lines = incomplete_installs(report.runners)
    if not lines:
        return []
    return ["> [!WARNING]", *[x for line in lines for x in (f"> {_text(line, 2000)}.", ">")][:-1], ""]


def kernel_packages() -> tuple[str, ...]:
    """The engines' kernel packages (some descriptor's `acceleration`) that a fingerprint records by version, in
    the fingerprint's order: named next to the runners table when a fingerprint has them. Asked of the registry, so
    a kernel a new engine declares is named too."""
    from ..catalog.registry import descriptors
    from ..machine.stack import tracked_distributions

    kernels = {name for d in descriptors() for name in d.acceleration}
    return tuple(key for key in tracked_distributions() if key in kernels)


def _environment_lines(report: Report, max_items: int) -> list[str]:
    """Per runner: kernel packages beyond the engines, and the engine environment (the fingerprint's `env`)."""
    out = []
    for name, fp in report.runners.items():
        packages = fp.get("packages") or {}
        kernels = [f"{k} {packages[k]}" for k in kernel_packages() if packages.get(k)]
        env = fp.get("env") or {}
        if not kernels and not env:
            continue
        parts = [f"kernels {_text(', '.join(kernels))}"] if kernels else []
        if env:
            items = [_code(f"{k}={v}") for k, v in list(env.items())[:max_items]]
            more = f" and {len(env) - max_items} more" if len(env) > max_items else ""
            parts.append(f"environment {', '.join(items)}{more}")
        out.append(f"- **{_text(name)}**: " + "; ".join(parts))
    return out + [""] if out else []


def _cell_text(cell: CellRecord, what_if: bool) -> str:
    """A runner's column of a matrix row: status word, *(ran)* in a what-if run, the key figures it recorded."""
    word = STATUS_WORDS[cell.outcome]
    state = cell_state(cell)
    if state in RULE_SKIPS:  # a skip a rule decided: say so, and which rule
        rule = rule_of(cell)
        word = cell_word(cell, state) + (f" ({_code(rule, table=True)})" if rule else "")
    elif cell.known_issue:  # a failure a rule's signature identifies
        word += f" (known issue {_code(cell.known_issue['id'], table=True)})"
    if cell.reruns:  # pytest-rerunfailures ran it again: a pass that needed it is flaky
        word += " *(flaky)*" if cell.flaky else f" *({cell.reruns} rerun{'' if cell.reruns == 1 else 's'})*"
    if what_if and cell.ran:
        word += " *(ran)*"
    figures = [format_value(key.metric, float(value))
               for key in KEY_FIGURES if (value := cell.metrics.get(key.metric)) is not None]
    return f"{word}: {_text(', '.join(figures))}" if figures else word


def _params_text(cell: CellRecord, with_model: bool) -> str:
    """The cell's parameters, after its model where the report ran more than one."""
    model = model_of(cell.nodeid, cell.engine) if with_model else None
    text = " ".join(t for t in (f"model={model}" if model else "", format_params(cell.params) if cell.params else "")
                    if t)
    return _code(text, table=True) if text else ""


def _matrix(report: Report, max_rows: int, budget: int) -> list[str]:
    runners = list(report.runners)
    rows = matrix_rows(report)
    out = ["### Matrix", ""]
    if not rows:
        return out + ["No gpucompat cells in this report.", ""]
    what_if = {name for name, fp in report.runners.items() if fp.get("what_if")}
    rows = rows_failures_first(rows)  # stable: test order within a rank
    with_model = len(models_in(report.cells)) > 1
    lines = _table(["Test", "Engine", "Params", *(_text(r) for r in runners)], [])
    out += [ROW_ORDER, ""]
    used = _size(out) + _size(lines)
    shown = 0
    for _nodeid, row in rows[:max_rows]:
        any_cell = next(iter(row.values()))
        line = "| " + " | ".join([
            _code(_short_test(any_cell.test), table=True),
            _text(any_cell.engine or "-"),
            _params_text(any_cell, with_model),
            *(_cell_text(row[r], r in what_if) if r in row else "-" for r in runners),
        ]) + " |"
        used += len(line.encode("utf-8")) + 1
        if used > budget:
            break
        lines.append(line)
        shown += 1
    out += lines if shown else []
    if shown < len(rows):
        left = sum(len(row) for _, row in rows[shown:])
        out.append(f"\n… {left:,} more cell{'s' if left != 1 else ''} ({len(rows) - shown:,} of {len(rows):,} rows) "
                   "not shown: see the HTML/JSON report.")
    out.append("")
    return out


def _tail(report: Report, max_items: int) -> list[str]:
    out: list[str] = []
    failures = [c for c in report.cells if c.outcome in ("failed", "error")]
    if failures:
        out += [f"### Failures ({len(failures)})", ""]
        for cell in failures[:max_items]:
            rules = f" Rules: {', '.join(_code(r) for r in cell.rules)}." if cell.rules else ""
            reason = _text(cell.reason) if cell.reason else "no reason recorded"
            out.append(f"- {_where(cell)}: {cell.outcome}: {reason}.{rules}{_known_issue(cell)}")
        if len(failures) > max_items:
            out.append(f"- … and {len(failures) - max_items} more")
        out.append("")

    rerun = [c for c in report.cells if c.reruns]
    if rerun:
        flaky = sum(1 for c in rerun if c.flaky)
        out += [f"### Rerun cells ({len(rerun)}, {flaky} flaky: passed only on a rerun)", ""]
        out += [f"- {_where(c)}: {_text(c.rerun_text())}" for c in rerun[:max_items]]
        if len(rerun) > max_items:
            out.append(f"- … and {len(rerun) - max_items} more")
        out.append("")

    out += _deviations_section(report, max_items)
    out += _attention_section(report, max_items)
    out += _cross_section(report, max_items)
    out += _findings_section(report, max_items)
    out += _stale_section(report, max_items)

    uncovered = uncovered_cells(report)
    if uncovered:
        out += [f"### Covered by no runner ({len(uncovered)})", ""]
        out += [f"- {_code(n)}" for n in uncovered[:max_items]]
        if len(uncovered) > max_items:
            out.append(f"- … and {len(uncovered) - max_items} more")
        out.append("")
    return out


def _deviations_section(report: Report, max_items: int) -> list[str]:
    groups = deviation_groups(report.cells)
    if not groups:
        return []
    out = [f"### Settings that differ from the engines' defaults ({len(groups)})", "", DEVIATIONS_SUMMARY, ""]
    for engine, text, count in groups[:max_items]:
        out.append(f"- {_code(engine or 'engine')}, {count} cell(s) ran: {_code(one_line(text, 600))}")
    if len(groups) > max_items:
        out.append(f"- … and {len(groups) - max_items} more")
    return out + [""]


def _attention_section(report: Report, max_items: int) -> list[str]:
    """The cells whose attention backend was predicted: how many as predicted, each other one listed."""
    cells = [(c, t) for c in report.cells if (t := c.attention_text()) is not None]
    if not cells:
        return []
    same = sum(1 for c, _ in cells if c.extra["attention_prediction"].get("matches") is True)
    out = [f"### Attention backend predicted vs reported ({same} of {len(cells)} as predicted)", ""]
    others = [(c, t) for c, t in cells if c.extra["attention_prediction"].get("matches") is not True]
    out += [f"- {_where(c)}: {_text(t)}" for c, t in others[:max_items]]
    if len(others) > max_items:
        out.append(f"- … and {len(others) - max_items} more")
    return out + ([""] if others else [])


def _cross_section(report: Report, max_items: int) -> list[str]:
    pairs = runner_pairs(report)
    if not pairs:
        return []
    rows = [[_code(_short_test(p.test), table=True), _code(cell_id(p), table=True),
             f"{_text(p.first)} → {_text(p.second)}", *(_text(t) for t in figures_text(p))] for p in pairs[:max_items]]
    out = [f"### Runner against runner ({len(pairs)})", "", CROSS_SUMMARY, ""]
    out += _table(["Test", "Cell", "Runners", "First divergence", "Max \\|Δlogprob\\|", "Token agreement"], rows)
    if len(pairs) > max_items:
        out.append(f"\n… and {len(pairs) - max_items} more pairs: see the HTML/JSON report.")
    return out + [""]


def _known_issue(cell: CellRecord) -> str:
    """" Matches known issue `id`: summary; workaround: ..." for a failure a rule's signature identifies."""
    issue = cell.known_issue
    if not issue:
        return ""
    text = f" Matches known issue {_code(issue['id'])}" + (f": {_text(issue['summary'])}" if issue.get("summary")
                                                          else "")
    return text + (f"; workaround: {_text(issue['workaround'])}" if issue.get("workaround") else "")


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
    # appended to as the file it is: never through a symlink, never into a device or FIFO (an OSError naming it)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "is a symlink; refusing to write through it", path) from None
        raise
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "is not a regular file", path)
        handle.write(md if md.endswith("\n") else md + "\n")
    return True
