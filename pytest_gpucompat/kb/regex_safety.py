"""Which regular expressions may be run over engine logs: the forms that make Python's backtracking matcher slow.

Signatures are written by users and run over logs that can hold long lines. A pattern is refused when it can
backtrack exponentially (a repeat inside a repeat, an alternation inside a repeat, a backreference) or cubically
(two unbounded repeats that can match the same characters with nothing between them that the first cannot match
too: ``a.*b.*c``, ``\\S+x\\S+``). What is left is at worst quadratic in a line's length, and signatures are searched
line by line with lines cut short (``kb.signatures``). Reading the pattern's parse tree is the only way to know its
shape; ``re`` keeps its parser in a private module, the same one in every supported Python.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from typing import Any

try:
    from re import _parser as _sre  # type: ignore[attr-defined]  # Python 3.11+
except ImportError:  # pragma: no cover - Python 3.10
    import sre_parse as _sre  # type: ignore[no-redef]

MAX_UNBOUNDED_REPEATS = 4
"""``*``, ``+`` and ``{n,}`` in one pattern."""

_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT} | ({_sre.POSSESSIVE_REPEAT} if hasattr(_sre, "POSSESSIVE_REPEAT")
                                                 else set())
_ZERO_WIDTH = {_sre.AT, _sre.ASSERT, _sre.ASSERT_NOT}
_ALPHABET = frozenset(string.printable + "\x00\x1b\u00e9\u2026")  # a sample of what logs hold
_CATEGORIES = {"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
               "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W"}


def parse(text: str) -> Any:
    """The parse tree of ``text`` (``re.error`` when it is not a regular expression)."""
    return _sre.parse(text)


def risk(parsed: Any) -> str | None:
    """What makes a parsed pattern slow on a long line, or None."""
    ignore_case = bool(parsed.state.flags & re.IGNORECASE) or _local_ignore_case(parsed)
    found = _nested(parsed, inside_repeat=False) or _overlapping(parsed, ignore_case)
    if found is None and _unbounded(parsed) > MAX_UNBOUNDED_REPEATS:
        found = f"more than {MAX_UNBOUNDED_REPEATS} unbounded repeats (*, +, {{n,}})"
    return found


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
    """Two unbounded repeats in one sequence that can share characters, with nothing between them that the
    first one could not match: the matcher tries every way to split the text between them."""
    items = _flat(parsed)
    repeats = [(i, _chars(op, av, ignore_case)) for i, (op, av) in enumerate(items)
               if op in _REPEATS and av[1] == _sre.MAXREPEAT]
    for a, (i, first) in enumerate(repeats):
        for j, second in repeats[a + 1:]:
            between: Sequence[tuple[Any, Any]] = items[i + 1:j]
            if first & second and all(_chars(op, av, ignore_case) <= first for op, av in between):
                return "two unbounded repeats that can match the same text"
    for op, av in items:  # each alternative of a branch is a sequence of its own
        if op == _sre.BRANCH:
            found = next((f for sub in av[1] if (f := _overlapping(sub, ignore_case))), None)
            if found:
                return found
    return None
