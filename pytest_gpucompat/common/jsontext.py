"""JSON text as RFC 8259 has it, for every JSON the package prints or writes.

Python's ``json.dumps`` writes ``NaN`` and ``Infinity`` by default: not JSON, so ``jq`` and every strict parser
refuse the whole output. A number that is not finite (a user's ``--max-model-len=1e999``, a metric that overflowed)
is written as a reason instead, a string saying what it was, so that the output stays one valid document.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any


def not_finite(value: float) -> str:
    """The reason written where a non-finite number was."""
    return f"not a finite number ({value!r})"


def finite(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``not_finite``'s reason; iterative, so any depth."""
    if isinstance(value, float):
        return value if math.isfinite(value) else not_finite(value)
    if not isinstance(value, (dict, list, tuple)):
        return value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            parent[key] = not_finite(item)
        elif isinstance(item, dict):
            copy: dict[Any, Any] = dict(item)
            parent[key] = copy
            stack.extend((v, copy, k) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            seq = list(item)
            parent[key] = seq
            stack.extend((v, seq, i) for i, v in enumerate(item))
        else:
            parent[key] = item
    return root[0]


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that never writes NaN or Infinity (see ``finite``); other arguments as json.dumps's."""
    kwargs["allow_nan"] = False
    try:
        return json.dumps(value, **kwargs)
    except ValueError:  # a non-finite number somewhere: replaced, then written again
        return json.dumps(finite(value), **kwargs)


def encoder_once(*, ensure_ascii: bool = True, allow_nan: bool = True) -> Callable[[Any], str]:
    """``json.dumps(value, ensure_ascii=..., allow_nan=...)`` (its other defaults) for a value of JSON types with no
    cycle: json's C encoder made once, where ``json.dumps`` and ``JSONEncoder.encode`` make one at each call (its
    making and the cycle check are most of what encoding a small dict costs). ``json.dumps`` itself where the C
    encoder is missing or writes anything else. A cycle is a RecursionError here, never an endless loop."""

    def plain(value: Any) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, allow_nan=allow_nan)

    try:
        from json import encoder as json_encoder

        make = getattr(json_encoder, "c_make_encoder", None)  # private to json, and None without its C speedups
        if make is None:
            return plain
        strings = json_encoder.encode_basestring_ascii if ensure_ascii else json_encoder.encode_basestring
        encode = make(None, json.JSONEncoder().default, strings, None, ": ", ", ", False, False, allow_nan)
        sample = {"a": [1, 2.5, -0.0, None, True, "é\n\u2028"], "b": {}, "c": [], "d": 10**20}

        def dumps(value: Any) -> str:
            return "".join(encode(value, 0))

        return dumps if dumps(sample) == plain(sample) else plain
    except (ImportError, TypeError, ValueError):  # another Python's encoder: the plain way
        return plain
