"""The attention backend each cell of a report ran with, beside the one predicted for it where the report says.

    python tools/gpu/backends.py REPORT.json

One line per cell of an engine that reports its attention backend: outcome, cell id, the backend it reported
(``engine_info.attention_backend``), and any field of the cell whose name speaks of a prediction (the report
format names it; none is required). The last line counts the cells whose prediction and report disagree; exit 1
when one does.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def predictions(cell: dict[str, Any]) -> dict[str, Any]:
    """Every field of the cell (or of its engine_info) whose name holds 'predict', with its value."""
    found: dict[str, Any] = {}
    for where in (cell, cell.get("engine_info") or {}):
        for key, value in where.items():
            if "predict" in key.lower():
                found[key] = value
    return found


def predicted_backend(found: dict[str, Any]) -> str | None:
    for value in found.values():
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            for key in ("attention_backend", "backend"):
                if isinstance(value.get(key), str):
                    return str(value[key])
    return None


def main(path: str) -> int:
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    disagree = 0
    for cell in report.get("cells", []):
        info = cell.get("engine_info") or {}
        found = predictions(cell)
        if not info.get("attention_backend") and not found:
            continue
        reported = info.get("attention_backend") or "-"
        predicted = predicted_backend(found)
        record = cell.get("attention_prediction")
        judged = record.get("matches") if isinstance(record, dict) else None
        if judged is True and reported == "-":  # failed before saying; its log holds the predicted failure
            reported = f"- ({record.get('confirmed_by') or 'confirmed'})"
        mark = "  DISAGREE" if judged is False or (
            judged is None and predicted is not None and reported != "-" and predicted != reported) else ""
        disagree += bool(mark)
        print(f"{cell.get('outcome', '?'):8} {cell.get('nodeid')}: reported {reported}, "
              f"predicted {predicted or '-'}{mark}")
    print(f"{disagree} cell(s) where the predicted and the reported backend disagree")
    return 1 if disagree else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
