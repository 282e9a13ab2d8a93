"""The result masks of ``kb.index`` as the rules they stand for: bit ``i`` of a mask is ``rules[i]``.

A large matrix gives tens of thousands of distinct result masks, most of them seen a few times, but the low half of
a mask takes a few thousand distinct values and so does its high half, and a half takes its values from a few hundred
of each of its quarters. So a result is its two halves' rules joined, each half remembered as a list made from its
quarters' lists, and each quarter's list made once from its bits: a new result costs two lookups and one list
concatenation (a new list, never one remembered here), and nothing is kept per result (no object per result for
the garbage collector to walk at every full collection). Lists rather than tuples: ``low + high`` makes the result
in one step of exactly its size, faster than unpacking two tuples into a new list.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from itertools import compress
from typing import Any

from .schema import Rule

_MAX_PARTS = 16384  # distinct values remembered per half or quarter
_ZERO_ONE = bytes.maketrans(b"01", b"\x00\x01")


class Halves:
    """A mask's rules, in knowledge-base order, are ``halves.low[mask & halves.low_mask] +
    halves.high[mask >> halves.bits]`` (a new list; the halves' lists are shared and never handed out): the per-cell
    path of ``kb.index`` reads these four attributes."""

    __slots__ = ("bits", "low_mask", "low", "high")

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.bits = -(-len(rules) // 2)  # the low half's width; the high half has the rest
        self.low_mask = (1 << self.bits) - 1
        self.low = _Half(rules, 0, self.bits)
        self.high = _Half(rules, self.bits, len(rules) - self.bits)


class _Half(dict[int, list[Rule]]):
    """A half's value -> its rules, made on first sight from its two quarters (``__missing__``)."""

    __slots__ = ("bits", "low_mask", "low", "high")

    def __init__(self, rules: tuple[Rule, ...], base: int, width: int) -> None:
        super().__init__()
        self.bits = -(-width // 2)
        self.low_mask = (1 << self.bits) - 1
        self.low = _Quarter(rules[base:base + self.bits])
        self.high = _Quarter(rules[base + self.bits:base + width])

    def __missing__(self, part: int) -> list[Rule]:
        found = self.low[part & self.low_mask] + self.high[part >> self.bits]
        if len(self) < _MAX_PARTS:
            self[part] = found
        return found


class _Quarter(dict[int, list[Rule]]):
    """A quarter's value -> the rules of its set bits, made on first sight (``__missing__``)."""

    __slots__ = ("rules",)

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        super().__init__()
        self.rules = rules  # the quarter's rules, bit 0 first

    def __missing__(self, part: Any) -> list[Rule]:
        # the bits as bytes of 0 and 1, bit 0 first (bin() without its "0b", reversed): compress() keeps the rules
        # of the set ones and stops at the highest
        found = list(compress(self.rules, bin(part)[:1:-1].encode().translate(_ZERO_ONE)))
        if len(self) < _MAX_PARTS:
            self[part] = found
        return found
