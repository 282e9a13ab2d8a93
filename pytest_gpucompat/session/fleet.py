"""A fleet file in a pytest run: before anything executes, which cells each runner would skip or xfail.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from .state import RunState, live_cell_key


def format_fleet_preview(state: RunState, config: pytest.Config, items: Sequence[pytest.Item]) -> str:
    cells = [(item.nodeid, item.stash[live_cell_key].cell) for item in items if live_cell_key in item.stash]
    lines = [f"gpucompat fleet preview: {len(cells)} cells x {len(state.fleet)} runners"]
    for name, fp in state.fleet.items():
        counts = {"run": 0, "skip": 0, "xfail": 0, "not covered": 0}
        bad: list[str] = []
        for nodeid, cell in cells:
            cs = state.evaluate(config, cell, fp)
            if cs.not_covered or cs.decision is None:
                counts["not covered"] += 1
                continue
            decision = cs.decision
            counts[decision.action] = counts.get(decision.action, 0) + 1
            if decision.action != "run":
                bad.append(f"    {decision.action:<5} {nodeid}  {decision.reason}")
        summary = ", ".join(f"{v} {k}" for k, v in counts.items())
        lines.append(f"  {name}: {fp.summary()}")
        lines.append(f"    {summary}")
        lines.extend(bad)
    return "\n".join(lines)
