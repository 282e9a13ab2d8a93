"""The shapes a signature may have: the forms that make a backtracking matcher slow are refused on load.

Signatures are matched by RE2 (``kb.linear_regex``), in time linear in the line whatever their shape, so this
check is no longer what keeps a search from hanging. It keeps rule files to the forms that are fast in every
matcher a team runs them with (a rule's signature is also pasted into ``grep -P`` and Python scripts over the same
logs), and its refusal says how to write the pattern instead. Refused: a repeat inside a repeat, an alternation
inside a repeat, a backreference (exponential when backtracking); two repeats that can match the same characters
with nothing between them that the first cannot match too (``a.*b.*c``, ``\\S+x\\S+``, ``\\S+\\s*\\S+``: cubic),
in any group, lookaround or optional part; too many unbounded repeats and repeat bounds too large. Reading the
pattern's parse tree is the only way to know its shape; ``re`` keeps its parser in a private module, the same one
in every supported Python.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
import string
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

try:
    from re import _parser as _sre  # type: ignore[attr-defined]  # Python 3.11+
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre

MAX_UNBOUNDED_REPEATS = 4
"""``*``, ``+`` and ``{n,}`` in one pattern."""
MAX_REPEAT_BOUND = 1000
"""The largest ``n`` of one ``{m,n}``."""
MAX_TOTAL_BOUND = 2048
"""The sum of the bounds of all bounded repeats, each times the bounds of the repeats around it."""

_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT} | ({_sre.POSSESSIVE_REPEAT} if hasattr(_sre, "POSSESSIVE_REPEAT")
                                                 else set())
_ZERO_WIDTH = {_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT}
_ALPHABET = frozenset(string.printable + "\x00\x1b\u00e9\u2026")  # a sample of what logs hold
_CATEGORIES = {"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
               "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W"}


def parse(text: str) -> Any:
    """The parse tree of ``text`` (``re.error`` when it is not a regular expression). Python's warnings about
    its own future syntax (``[[:alpha:]]``) are not printed: RE2 decides what the pattern means."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _sre.parse(text)


def risk(parsed: Any) -> str | None:
    """What makes a parsed pattern slow on a long line, or None."""
    ignore_case = bool(parsed.state.flags & re.IGNORECASE) or _local_ignore_case(parsed)
    found = _nested(parsed, inside_repeat=False) or _overlapping(parsed, ignore_case)
    if found is None and _unbounded(parsed) > MAX_UNBOUNDED_REPEATS:
        found = f"more than {MAX_UNBOUNDED_REPEATS} unbounded repeats (*, +, {{n,}})"
    return found or _bounds(parsed)


def _bounds(parsed: Any, outer: int = 1) -> str | None:
    """A repeat bound above MAX_REPEAT_BOUND, or bounds adding up (nested ones multiplied) above MAX_TOTAL_BOUND."""
    total = 0
    stack = [(parsed, outer)]
    while stack:
        sub, factor = stack.pop()
        for op, av in sub:
            inner = factor
            if op in _REPEATS and av[1] != _sre.MAXREPEAT:
                if av[1] > MAX_REPEAT_BOUND:
                    return f"a repeat bound above {MAX_REPEAT_BOUND} ({{{av[0]},{av[1]}}})"
                inner = factor * max(av[1], 1)
                total += inner
                if total > MAX_TOTAL_BOUND:
                    return f"repeat bounds adding up to more than {MAX_TOTAL_BOUND}"
            stack.extend((child, inner) for child in _subpatterns(av))
    return None


def _local_ignore_case(parsed: Any) -> bool:
    """Whether a group anywhere turns case-insensitivity on (``(?i:...)``): then every set is taken as if it were."""
    for op, av in parsed:
        if op == _sre.SUBPATTERN and av[1] & re.IGNORECASE:
            return True
        if any(_local_ignore_case(sub) for sub in _subpatterns(av)):
            return True
    return False


def _subpatterns(av: Any) -> Iterable[Any]:
    """The nested patterns of one parsed item's argument (groups, branches, lookarounds, conditionals)."""
    for item in av if isinstance(av, (tuple, list)) else (av,):
        if isinstance(item, _sre.SubPattern):
            yield item
        elif isinstance(item, (tuple, list)):
            yield from _subpatterns(item)


def _nested(parsed: Any, inside_repeat: bool) -> str | None:
    """Exponential forms: a repeat or an alternation inside a repeat, a backreference."""
    for op, av in parsed:
        if op in (_sre.GROUPREF, getattr(_sre, "GROUPREF_EXISTS", None)):
            return "a backreference"
        if op in _REPEATS:
            repeats = av[1] > 1
            if repeats and inside_repeat:
                return "a repeat inside a repeat"
            found = _nested(av[2], inside_repeat or repeats)
        elif op == _sre.BRANCH and inside_repeat:
            return "an alternation inside a repeat"
        else:
            found = next((f for sub in _subpatterns(av) if (f := _nested(sub, inside_repeat))), None)
        if found:
            return found
    return None


def _unbounded(parsed: Any) -> int:
    count = 0
    for op, av in parsed:
        if op in _REPEATS and av[1] == _sre.MAXREPEAT:
            count += 1
        count += sum(_unbounded(sub) for sub in _subpatterns(av))
    return count


def _flat(parsed: Any) -> list[tuple[Any, Any]]:
    """The items of a pattern in sequence, groups opened (a group without a repeat is just its items)."""
    out: list[tuple[Any, Any]] = []
    for op, av in parsed:
        if op == _sre.SUBPATTERN:
            out += _flat(av[-1])
        elif op == getattr(_sre, "ATOMIC_GROUP", None):
            out += _flat(av)
        else:
            out.append((op, av))
    return out


def _chars(op: Any, av: Any, ignore_case: bool) -> frozenset[str]:
    """The characters (of a sample alphabet) an item can match; every one of them for what is not understood."""
    if op == _sre.LITERAL:
        found = {chr(av)}
    elif op == _sre.NOT_LITERAL:
        found = set(_ALPHABET - {chr(av)})
    elif op == _sre.ANY:
        found = set(_ALPHABET - {"\n"})
    elif op == _sre.IN:
        found, negate = set(), False
        for sub_op, sub_av in av:
            if sub_op == _sre.NEGATE:
                negate = True
            elif sub_op == _sre.LITERAL:
                found.add(chr(sub_av))
            elif sub_op == _sre.RANGE:
                found |= {c for c in _ALPHABET if sub_av[0] <= ord(c) <= sub_av[1]}
            elif sub_op == _sre.CATEGORY and str(sub_av) in _CATEGORIES:
                found |= {c for c in _ALPHABET if re.match(_CATEGORIES[str(sub_av)], c)}
            else:
                found |= _ALPHABET
        found = set(_ALPHABET - found) if negate else found
    elif op in _ZERO_WIDTH:
        return frozenset()
    else:
        found = set().union(*(_chars(o, a, ignore_case) for sub in _subpatterns(av) for o, a in sub)) \
            if list(_subpatterns(av)) else set(_ALPHABET)
    if ignore_case:
        found |= {c.swapcase() for c in found}
    return frozenset(found)


def _overlapping(parsed: Any, ignore_case: bool) -> str | None:
    """Two repeats of varying length in one sequence that can share characters, with nothing between them that
    must match a character the first one cannot: the matcher tries every way to split the text between them.
    Every nested sequence (a group, a lookaround, an optional or repeated part, a branch) is checked too."""
    items = _flat(parsed)
    repeats = [(i, _chars(op, av, ignore_case), av[1] == _sre.MAXREPEAT) for i, (op, av) in enumerate(items)
               if op in _REPEATS and av[0] != av[1]]
    for a, (i, first, unbounded) in enumerate(repeats):
        for j, second, _ in repeats[a + 1:]:
            between: Sequence[tuple[Any, Any]] = items[i + 1:j]
            if first & second and not any(_separates(op, av, first, ignore_case) for op, av in between):
                kind = "unbounded repeats" if unbounded else "repeats"
                return f"two {kind} that can match the same text"
    for _op, av in items:
        found = next((f for sub in _subpatterns(av) if (f := _overlapping(sub, ignore_case))), None)
        if found:
            return found
    return None


def _separates(op: Any, av: Any, first: frozenset[str], ignore_case: bool) -> bool:
    """Whether an item between two repeats must match at least one character that the first cannot."""
    try:
        least = _sre.SubPattern(_STATE, [(op, av)]).getwidth()[0]
    except Exception:  # noqa: BLE001 - an item not understood separates nothing
        return False
    return least > 0 and not (_chars(op, av, ignore_case) & first)


_STATE = _sre.State() if hasattr(_sre, "State") else _sre.Pattern()
