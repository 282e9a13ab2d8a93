"""Runner against runner, output to output: every pair of runners that ran one precision cell, compared on what
the model said (outputs.py), in the fleet report and in `gpucompat diff`.

A golden file compares each runner with the runner that recorded it; this compares each runner with each other
one (the H200 with the A100, vLLM 0.25 with 0.26), with the precision suite's figures. Every pair is a small
fleet's answer (up to ``ALL_PAIRS_UP_TO`` runners of a cell); a larger one compares each runner with the cell's
first runner instead, so a fleet of N runners costs N comparisons per cell, not N²/2. Pure functions.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import combinations

from ..checks import outputs
from ..common.errors import InputError
from .model import CellRecord, Report


@dataclass(frozen=True)
class RunnerPair:
    """One cell as two runners ran it: the second's figures against the first's, or why they do not compare."""

    nodeid: str
    test: str
    engine: str | None
    params: Mapping[str, object]
    first: str
    second: str
    figures: Mapping[str, float] = field(default_factory=dict)
    reason: str | None = None
    length: int | None = None
    """Tokens generated per prompt: a first divergence at this position means none."""


def cell_outputs(cell: CellRecord) -> tuple[outputs.CellOutputs | None, str | None]:
    """A cell's outputs, or None with the reason (a malformed entry is a reason, not an error: one bad cell of a
    merged fleet must not hide the others)."""
    try:
        return outputs.from_cell(cell.extra, f"{cell.runner}: {cell.nodeid}"), None
    except InputError as exc:
        return None, str(exc)


ALL_PAIRS_UP_TO = 8
"""Runners of one cell up to which every pair is compared (28 pairs); above, each against the first runner."""

_Read = tuple[outputs.CellOutputs | None, str | None]


def pair(first: CellRecord, second: CellRecord, read: tuple[_Read, _Read] | None = None) -> RunnerPair | None:
    """The two cells compared; None when either kept no outputs (not a precision cell, or an older report).
    ``read``: the two cells' outputs as ``cell_outputs`` gave them, where the caller read them already."""
    (a, bad_a), (b, bad_b) = read if read is not None else (cell_outputs(first), cell_outputs(second))
    base = RunnerPair(nodeid=first.nodeid, test=first.test or first.nodeid, engine=first.engine,
                      params=first.params, first=first.runner, second=second.runner)
    if bad_a or bad_b:
        return replace(base, reason=f"malformed outputs: {bad_a or bad_b}")
    if a is None or b is None:
        return None
    why = outputs.why_not_comparable(a, b)
    if why:
        return replace(base, reason=why)
    return replace(base, figures=outputs.drift(a, b), length=a.max_tokens)


def runner_pairs(report: Report) -> tuple[RunnerPair, ...]:
    """Every pair of runners of every cell that kept outputs, in the report's runner order; for a cell of more than
    ``ALL_PAIRS_UP_TO`` runners, each runner against the first that ran it."""
    order = {name: i for i, name in enumerate(report.runners)}
    by_node: dict[str, list[CellRecord]] = {}
    for cell in report.cells:
        if outputs.KEY in cell.extra:
            by_node.setdefault(cell.nodeid, []).append(cell)
    found: list[RunnerPair] = []
    for cells in by_node.values():
        cells.sort(key=lambda c: order.get(c.runner, len(order)))
        read = [cell_outputs(c) for c in cells]  # once per cell, however many pairs it is in
        ends = (combinations(range(len(cells)), 2) if len(cells) <= ALL_PAIRS_UP_TO
                else ((0, j) for j in range(1, len(cells))))
        found.extend(p for i, j in ends if (p := pair(cells[i], cells[j], (read[i], read[j]))) is not None)
    return tuple(found)


SUMMARY = ("Each precision cell that two runners ran, compared on what the model said (greedy tokens and top-N "
           "logprobs), the second runner against the first, with the precision suite's figures; a cell that more "
           f"than {ALL_PAIRS_UP_TO} runners ran, each runner against the first of them.")


def cell_id(p: RunnerPair) -> str:
    """The parametrization of the pair's test item (``tiny-qwen2-vllm-dtype=bfloat16-...``): model, engine and
    parameters in one, which is what tells two pairs of one test apart."""
    head, sep, rest = p.nodeid.partition("[")
    return rest[:-1] if sep and rest.endswith("]") else head


def figures_text(p: RunnerPair) -> tuple[str, str, str]:
    """(first divergence, max |Δlogprob|, token agreement) as a table shows them; the reason when not compared."""
    if p.reason:
        return (f"not compared: {p.reason}", "", "")
    f = p.figures
    first = f.get(outputs.PREFIX + "first_divergence")
    agree = f.get(outputs.PREFIX + "token_agreement")
    delta = f.get(outputs.PREFIX + "max_abs_logprob_delta")
    none = first is not None and p.length is not None and first >= p.length
    return ("-" if first is None else f"none in {p.length} tokens" if none else f"position {first:.0f}",
            "-" if delta is None else f"{delta:.4g}",
            "-" if agree is None else f"{agree * 100:.1f} %")
