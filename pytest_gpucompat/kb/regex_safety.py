"""Which regular expressions may be run over engine logs: the forms that make Python's backtracking matcher slow.

Signatures are written by users and run over logs that can hold long lines. A pattern is refused when it can
backtrack exponentially (a repeat inside a repeat, an alternation inside a repeat, a backreference) or cubically
(two unbounded repeats that can match the same characters with nothing between them that the first cannot match
too: ``a.*b.*c``, ``\\S+x\\S+``, ``\\S+\\s*\\S+``), in any group, lookaround or optional part. Bounded repeats count
as repeats when their length can vary (``.{0,2000}.{0,2000}`` is as slow as ``.*.*``), and bounds are capped. What
is left is at worst quadratic in a line's length, and signatures are searched line by line with lines cut short
(``kb.signatures``). As a last guard, each pattern that passes is timed once on adversarial lines of growing
length up to the longest line searched (``too_slow``), and refused when one search takes longer than a line may.
Reading the pattern's parse tree is the only way to know its shape; ``re`` keeps its parser in a private module,
the same one in every supported Python.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import functools
import re
import string
import time
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
PROBE_LINE_CHARS = 2048
"""The longest line a pattern is timed on: ``kb.signatures.MAX_LINE_CHARS``."""
PROBE_BUDGET_S = 0.05
"""The most CPU time one search of a ``PROBE_LINE_CHARS`` line may take (a quadratic pattern takes a few ms)."""
_PROBE_FLOOR_S = 0.002

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


def too_slow(pattern: re.Pattern[str]) -> str | None:
    """Time the pattern on lines it is slowest on (each of its literal characters and a few others repeated, its
    literal text repeated), doubling their length up to PROBE_LINE_CHARS; a search over budget refuses it.

    The budget grows with the square of the length (what is allowed is at worst quadratic), so a pattern that is
    worse is stopped on a short line, long before it takes long. CPU time of this thread is measured, so a busy
    machine does not make a fine pattern look slow; an overrun is measured twice before it counts."""
    return _too_slow(pattern.pattern, pattern.flags)


@functools.lru_cache(maxsize=1024)
def _too_slow(text: str, flags: int) -> str | None:
    parsed = parse(text)
    if not _has_repeat(parsed):  # literals, classes and alternations: linear in the line
        return None
    pattern = re.compile(text, flags)
    literals = _literals(parsed)
    chars = list(dict.fromkeys([*literals[:8], "a", "0", " ", "-", "."]))
    runs = [run for run in ("".join(literals), max(_literal_runs(parsed), key=len, default="")) if run]
    length = 16
    while length <= PROBE_LINE_CHARS:
        allowed = max(PROBE_BUDGET_S * (length / PROBE_LINE_CHARS) ** 2, _PROBE_FLOOR_S)
        for line in [c * length for c in chars] + [(run * (length // len(run) + 1))[:length] for run in runs]:
            took = _time(pattern, line)
            if took > allowed and min(took, _time(pattern, line)) > allowed:
                return f"one search of a {length}-character line took {took * 1000:.0f} ms"
        length *= 2
    return None


def _time(pattern: re.Pattern[str], line: str) -> float:
    start = time.thread_time()
    pattern.search(line)
    return time.thread_time() - start


def _has_repeat(parsed: Any) -> bool:
    return any(op in _REPEATS or any(_has_repeat(sub) for sub in _subpatterns(av)) for op, av in parsed)


def _literals(parsed: Any) -> list[str]:
    """The literal characters of a pattern, in order."""
    out: list[str] = []
    for op, av in parsed:
        if op == _sre.LITERAL:
            out.append(chr(av))
        for sub in _subpatterns(av):
            out += _literals(sub)
    return out


def _literal_runs(parsed: Any) -> list[str]:
    """The runs of consecutive literal characters of a pattern's top-level sequence."""
    runs, run = [], ""
    for op, av in _flat(parsed):
        if op == _sre.LITERAL:
            run += chr(av)
        else:
            runs.append(run)
            run = ""
    return [*runs, run]
