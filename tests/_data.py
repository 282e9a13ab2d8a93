"""Data compared exactly: what ``==`` calls equal but a reader of JSON or YAML would not (``1 == True``,
``Version("8") == Version("8.0")``, a dict's key order, NaN never equal to itself)."""

from __future__ import annotations

import math
from typing import Any


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down, dict keys in the same order (NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)
