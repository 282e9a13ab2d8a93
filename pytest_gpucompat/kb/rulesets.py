"""The result masks of ``kb.index`` as the rules they stand for: bit ``i`` of a mask is ``rules[i]``.

A large matrix gives tens of thousands of distinct result masks, most of them seen a few times, but the low half of
a mask takes a few thousand distinct values and so does its high half, and a half takes its values from a few hundred
of each of its quarters. So a result is its two halves' rules joined, each half remembered as a list made from its
quarters' lists, and each quarter's list made once from its bits: a new result costs two lookups and one list
concatenation (a new list, never one remembered here), and nothing is kept per result (no object per result for
the garbage collector to walk at every full collection). Lists rather than tuples: ``low + high`` makes the result
in one step of exactly its size, faster than unpacking two tuples into a new list. The tables are plain dicts, read
by the per-cell path with ``get`` (a plain dict's lookup is the interpreter's fastest), and a miss comes here.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress

from .schema import Rule

_MAX_PARTS = 16384  # distinct values remembered per half or quarter
_ZERO_ONE = bytes.maketrans(b"01", b"\x00\x01")


class Halves:
    """A mask's rules, in knowledge-base order, are the low half's rules (``low``, value ``mask & low_mask``) then
    the high half's (``high``, value ``mask >> bits``): ``low.get(value)``, or ``low_rules(value)`` where it is not
    there yet (likewise ``high``). The lists are shared and never handed out: a result is a new list joining two."""

    __slots__ = ("bits", "low_mask", "low", "high", "low_rules", "high_rules")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.bits = -(-len(rules) // 2)  # the low half's width; the high half has the rest
        self.low_mask = (1 << self.bits) - 1
        low = _Half(rules, 0, self.bits)
        high = _Half(rules, self.bits, len(rules) - self.bits)
        self.low, self.high = low.made, high.made
        self.low_rules: Callable[[int], list[Rule]] = low.rules_of  # bound methods: one call, not two, on a miss
        self.high_rules: Callable[[int], list[Rule]] = high.rules_of


class _Half:
    """A half's value -> its rules (``made``), each made on first sight from its two quarters' lists."""

    __slots__ = ("bits", "low_mask", "low", "high", "made")

    def __init__(self, rules: tuple[Rule, ...], base: int, width: int) -> None:
        self.bits = -(-width // 2)
        self.low_mask = (1 << self.bits) - 1
        self.low = _Quarter(rules[base:base + self.bits])
        self.high = _Quarter(rules[base + self.bits:base + width])
        self.made: dict[int, list[Rule]] = {}

    def rules_of(self, part: int) -> list[Rule]:
        low = part & self.low_mask
        high = part >> self.bits
        found = self.low.made.get(low)
        if found is None:
            found = self.low.rules_of(low)
        rest = self.high.made.get(high)
        if rest is None:
            rest = self.high.rules_of(high)
        found = found + rest
        made = self.made
        if len(made) < _MAX_PARTS:
            made[part] = found
        return found


class _Quarter:
    """A quarter's value -> the rules of its set bits (``made``), each made on first sight."""

    __slots__ = ("rules", "made")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = rules  # the quarter's rules, bit 0 first
        self.made: dict[int, list[Rule]] = {}

    def rules_of(self, part: int) -> list[Rule]:
        # the bits as bytes of 0 and 1, bit 0 first (bin() without its "0b", reversed): compress() keeps the rules
        # of the set ones and stops at the highest
        found = list(compress(self.rules, bin(part)[:1:-1].encode().translate(_ZERO_ONE)))
        if len(self.made) < _MAX_PARTS:
            self.made[part] = found
        return found
