"""A finished cell's line of the report made without its record (``report.model.plain_cell_line``) is the line its
record makes, byte for byte, and any cell the shortcut cannot vouch for goes the record's way."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest

from pytest_gpucompat.report.model import CellRecord, encode_cell, plain_cell_line

BASE: dict[str, Any] = {"nodeid": "t.py::test_cell[hf-a=0-b=1]", "outcome": "passed", "reason": None, "rules": (),
                        "findings": (), "metrics": {}, "series": {}, "duration_s": 0.25, "worker": None,
                        "engine": "hf", "params": {"a": 0, "b": 1}, "runner": "bench", "when": "call"}

VARIANTS: list[dict[str, Any]] = [
    {},
    {"outcome": "skipped", "reason": "known bad: rule x", "when": "setup"},
    {"outcome": "xfailed", "reason": "why"},
    {"outcome": "failed", "reason": "boom"},
    {"outcome": "error", "reason": None, "worker": "gw1"},
    {"outcome": "not-covered"},
    {"outcome": "no-such-outcome"},
    {"params": {}, "axes": {"gpu": "h100"}},
    {"params": {"x": 1.5, "y": None, "z": True, "w": "ü"}},
    {"params": {"x": float("nan")}},
    {"engine": None},
    {"test": "t.py::other"},
    {"test": ""},
    {"duration_s": 0},
    {"duration_s": math.inf},
    {"duration_s": None},
    {"runner": ""},
    {"rules": ("r1",)},
    {"findings": ({"id": "r1", "severity": "warning"},)},
    {"metrics": {"tokens_per_s": 3.0}},
    {"series": {"rss": [1.0, 2.0]}},
    {"log_tail": "last line"},
    {"log_tail": ""},
    {"explained_by": [{"id": "r1"}]},
    {"reruns": 2, "rerun_reason": "flaky"},
    {"gpu": "0"},
    {"extra": {"k": 1}},
    {"when": None},
]


def _record_line(cell: dict[str, Any]) -> str | None:
    try:
        return encode_cell(CellRecord.from_dict(cell))
    except ValueError:
        return None


@pytest.mark.parametrize(("one", "two"), list(itertools.combinations_with_replacement(range(len(VARIANTS)), 2)))
def test_the_same_line_as_the_record(one: int, two: int) -> None:
    cell = {**BASE, **VARIANTS[one], **VARIANTS[two]}
    try:
        line = plain_cell_line(cell)
    except ValueError:  # a value JSON cannot hold: the record's way refuses it too
        assert _record_line(cell) is None
        return
    if line is not None:
        assert line == _record_line(cell)


def test_a_quiet_cell_takes_the_shortcut() -> None:
    assert plain_cell_line(BASE) == _record_line(BASE)
    assert plain_cell_line({**BASE, "rules": ("r1",)}) is None
