"""The gpucompat section at the end of a pytest run: the answer first (what failed and which known problems broke
cells), then the rest. Pure: lines from the collector's cells, written by ``ReportCollector.terminal_summary``.

Everything here comes from cells, engine logs and rule files, so the caller passes every line through
``errors.visible``: an engine's log or a hostile rule file must not recolour or clear the terminal.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..common.textfit import shorten_middle
from ..kb.verdicts import problems_text, severity_heading
from .record import rerun_text
from .text import one_line

MAX_LISTED = 10  # failed cells and broken findings named, each; the rest counted ("... and N more")
_FAILED = ("failed", "error")


def summary_lines(cells: Sequence[Mapping[str, Any]], where: str, width: int) -> list[str]:
    """The counts line, each failed or errored cell (node id, engine, one-line reason) and each broken finding,
    then what the report has always said: evidence against rules, degraded findings, known issues, log tails."""
    counts: dict[str, int] = {}
    for c in cells:
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    lines = [f"{len(cells)} cells on {where}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))]
    lines += failed_lines(cells, width)
    lines += flaky_lines(cells, width)
    lines += findings_lines(cells, width)
    for c in cells:
        refuted = [f["id"] for f in c["findings"] if c["outcome"] == "passed" and f.get("unconfirmed")
                   and f["severity"] == "broken"]
        if c["outcome"] == "xpassed" and c["rules"]:
            refuted = c["rules"]
        if refuted:
            lines.append(f"evidence against rule(s) {', '.join(refuted)}: {c['nodeid']} passed")
    unsettled = [state for c in cells if (state := (c.get("extra") or {}).get("harness_state") or
                                          c.get("harness_state"))]
    if unsettled:
        lines.append(f"{len(unsettled)} cell(s) ran in a process whose state is unknown: {one_line(unsettled[0])}")
    for c in cells:
        for issue in (c.get("explained_by") or [])[:1]:
            workaround = f"; workaround: {issue['workaround']}" if issue.get("workaround") else ""
            lines.append(f"{c['nodeid']}: matches known issue {issue['id']}{workaround}")
    for c in cells:
        if c["outcome"] in _FAILED and c.get("log_tail"):
            lines.append(f"{c['nodeid']}: engine log tail:")
            lines.extend(f"    {line}" for line in str(c["log_tail"]).splitlines()[-10:])
    return lines


def failed_lines(cells: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    """``FAILED test_x.py::test_gen[vllm-fp8] (vllm): reason``, one line each, at most MAX_LISTED: the first
    thing to read after a red run, without scrolling up through tracebacks."""
    failed = [c for c in cells if c["outcome"] in _FAILED]
    if not failed:
        return []
    lines = [f"failed cells ({len(failed)}):"]
    for c in failed[:MAX_LISTED]:
        label = "FAILED" if c["outcome"] == "failed" else "ERROR"
        engine = f" ({c['engine']})" if c.get("engine") else ""
        if c.get("reruns"):
            engine = f"{engine} after {c['reruns']} rerun{'' if c['reruns'] == 1 else 's'}"
        reason = one_line(c.get("reason")) or "no reason recorded"
        lines.append(_one_line(f"  {label} ", short_nodeid(str(c["nodeid"])), f"{engine}: ", reason, width))
    return lines + _more(len(failed))


def flaky_lines(cells: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    """``flaky test_x.py::t[p] (hf): passed on attempt 2; first failure: ...``: each cell that passed only on a
    rerun (pytest-rerunfailures), which the counts line would call passed like any other."""
    flaky = [c for c in cells if c["outcome"] == "passed" and c.get("reruns")]
    if not flaky:
        return []
    lines = [f"flaky cells, passed only on a rerun ({len(flaky)}):"]
    for c in flaky[:MAX_LISTED]:
        engine = f" ({c['engine']})" if c.get("engine") else ""
        text = (rerun_text("passed", int(c["reruns"]), one_line(c.get("rerun_reason")) or None) or "").removeprefix(
            "flaky: ")
        lines.append(_one_line("  flaky ", short_nodeid(str(c["nodeid"])), f"{engine}: ", text, width))
    return lines + _more(len(flaky))


def findings_lines(cells: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    """Each broken, then each degraded finding (evidence, not an unconfirmed claim) attached to a cell of the run,
    with how many cells it concerned, under the headings and after the count `gpucompat check` prints for the
    same findings (kb.verdicts): a skipped known-bad cell is not a failure, but it is the first thing to know."""
    found: dict[str, dict[str, tuple[str, int]]] = {"broken": {}, "degraded": {}}
    for c in cells:
        for f in c["findings"]:
            level = found.get(f["severity"])
            if level is not None and f.get("confidence") != "documents" and not f.get("unconfirmed"):
                summary, n = level.get(f["id"], (one_line(f.get("summary")), 0))
                level[f["id"]] = (summary, n + 1)
    if not any(found.values()):
        return []
    lines = [f"known problems: {problems_text({s: len(ids) for s, ids in found.items()})}"]
    for severity, ids in found.items():
        if not ids:
            continue
        lines.append(severity_heading(severity, len(ids)))
        for rule_id, (summary, n) in list(ids.items())[:MAX_LISTED]:
            lines.append(_one_line("  ", f"[{rule_id}]", " ", f"{summary} ({n} cell{'' if n == 1 else 's'})", width))
        lines += _more(len(ids))
    return lines


def short_nodeid(nodeid: str) -> str:
    """The node id without the directories of its file (``suites/llm/test_x.py::t[p]`` -> ``test_x.py::t[p]``):
    the file name and the parameters tell the cells apart; a directory seldom does."""
    path, sep, rest = nodeid.partition("::")
    return f"{path.rsplit('/', 1)[-1]}{sep}{rest}"


def _one_line(head: str, name: str, middle: str, tail: str, width: int) -> str:
    """``head + name + middle + tail`` in at most ``width`` characters. A line too long gives the tail (the reason)
    a third of the width, the name (a node id, shortened in the middle) the rest but never less than half of it,
    and what the tail still does not fit is cut with an ellipsis."""
    if len(head) + len(name) + len(middle) + len(tail) > width:
        keep = min(len(tail), max(20, width // 3))
        name = shorten_middle(name, max(width // 2, width - len(head) - len(middle) - keep))
    room = width - len(head) - len(name) - len(middle)
    return head + name + middle + (one_line(tail, max(room, 10)))


def _more(total: int) -> list[str]:
    return [f"  ... and {total - MAX_LISTED} more"] if total > MAX_LISTED else []
