"""A rule's release window computed from the released code, and how its ``when.packages`` range differs from it.

The window of a rule with ``bounds`` (kb.bounds) is the read releases where every fact and every anchor holds and
every engine setting its ``when.params`` names exists. Lint (kb.lint) holds the rule's range to it in both
directions: a release covered outside the window, a release of the window left uncovered (unless ``bounds.narrower``
says why). Independently of bounds, a rule's range must agree with its own ``flags`` entry for a setting it
conditions on: a rule about a setting that is gone covers every release it is gone from, on the side it covers.

Everything here reads the history's runs once per rule: anchors were evaluated when the history was built.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ..catalog.registry import normalize_dtype
from ..common.versions import normalize_package
from .bounds import BACKEND_ATTRS, Anchor, Fact
from .history import History, norm_flag
from .schema import Rule
from .selection_window import selection_holds

KNOWN_CAPABILITIES = ("3.0", "3.2", "3.5", "3.7", "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5",
                      "8.0", "8.6", "8.7", "8.8", "8.9", "9.0", "10.0", "10.1", "10.3", "11.0", "12.0", "12.1")
"""The compute capabilities NVIDIA GPUs have: a rule's ``compute_capability <8.0`` is tested as these points."""


def capabilities(spec: SpecifierSet) -> tuple[str, ...]:
    """The compute capabilities NVIDIA GPUs have that ``spec`` admits: how a gate is compared and tested."""
    return tuple(c for c in KNOWN_CAPABILITIES if spec.contains(c, prereleases=True))


@dataclass(frozen=True)
class Part:
    """One thing the window rests on: its field in the rule, what it says, and the releases where it holds (None:
    it could not be judged; ``problem`` says why); ``unknown``: the releases whose history does not state what it
    tests (neither holding nor not: an absent fact is never read as false)."""

    field: str
    label: str
    holds: frozenset[int] | None
    problem: str = ""
    unknown: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Window:
    span: tuple[int, ...]  # the releases the rule's when.packages covers
    parts: tuple[Part, ...]
    releases: frozenset[int] | None  # None: not computable (a part has a problem)
    unknown: frozenset[int] = frozenset()  # where no part fails and some part's fact is not stated


def rule_span(rule: Rule, history: History) -> list[int] | None:
    """The read releases the rule covers; None when the rule is about the engine being absent."""
    for package, spec in rule.when.packages:
        if normalize_package(package) == history.package:
            return None if spec is None else history.in_range(spec if str(spec) else None)
    return history.in_range(None)


def compute(rule: Rule, history: History) -> Window | None:
    """The rule's window against ``history``; None for a rule without bounds or about the engine being absent."""
    span = rule_span(rule, history)
    if rule.bounds is None or span is None:
        return None
    read = frozenset(history.in_range(None))
    parts = [_fact_part(rule, history, f"bounds.facts[{i}]", fact, read)
             for i, fact in enumerate(rule.bounds.facts)]
    parts += [_anchor_part(history, f"bounds.anchors[{i}]", anchor) for i, anchor in enumerate(rule.bounds.anchors)]
    scoped = _scoped_dests(rule, history)
    for name, cond in rule.when.params:
        unset_only = cond.values is not None and all(v is None for v in cond.values)
        if history.dest_known(name) and name not in scoped and not unset_only:  # "not set" needs no setting
            have = frozenset(i for i in read if history.flag_for_dest(name, i) is not None)
            parts.append(Part(f"when.params.{name}", f"setting {name} exists", have))
    releases: frozenset[int] | None = read
    possible: frozenset[int] = read
    for part in parts:
        releases = None if part.holds is None or releases is None else releases & part.holds
        possible = possible & ((part.holds or frozenset()) | part.unknown)
    unknown = possible - releases if releases is not None else frozenset()
    return Window(tuple(span), tuple(parts), releases, unknown)


def window_problems(rule: Rule, history: History) -> list[str]:
    """How the rule's range differs from its computed window, and bounds that cannot be judged."""
    window = compute(rule, history)
    if window is None or rule.bounds is None:
        return []
    problems = [f"{p.field}: {p.problem}" for p in window.parts if p.problem]
    problems += gate_problems(rule, history, window.span)
    if window.releases is None:
        return problems
    span, inside, unknown = set(window.span), window.releases, window.unknown
    where = history.ranges(inside) or "no release"
    outside = sorted(span - inside - unknown)
    reached = sorted(unknown & (span | _neighbours(history, span)))
    if reached and rule.bounds.unknown is None:
        said = ", ".join(p.label for p in window.parts if p.unknown)
        problems.append(f"{history.engine} {history.ranges(unknown)} state no fact for {said}: the window is unknown "
                        f"there, not false; cover those releases or leave them out, and say why in bounds.unknown")
    elif not reached and rule.bounds.unknown is not None:
        problems.append("bounds.unknown: no release next to or inside the range leaves a fact unstated; remove it")
    if outside:
        problems.append(f"when.packages covers {history.engine} {history.ranges(outside)}, where its bounds do not "
                        f"hold (they hold in {where}{suggest(history, inside)}); first: {_first(history, outside)}")
    left = sorted(inside - span)
    if left and rule.bounds.narrower is None:
        problems.append(f"when.packages leaves {history.engine} {history.ranges(left)} uncovered, where its bounds "
                        f"hold (they hold in {where}{suggest(history, inside)}); first: {_first(history, left)}; "
                        f"widen the range, or say why it is narrower in bounds.narrower")
    elif not left and rule.bounds.narrower is not None and not outside:
        problems.append(f"bounds.narrower: when.packages is the whole window ({where}); remove it")
    return problems


def _neighbours(history: History, releases: set[int]) -> set[int]:
    """The read releases just before and just after each stretch of ``releases`` (a rule's range)."""
    read = history.in_range(None)
    pos = {r: k for k, r in enumerate(read)}
    out = set()
    for i in releases:
        for k in (pos[i] - 1, pos[i] + 1):
            if 0 <= k < len(read) and read[k] not in releases:
                out.add(read[k])
    return out


def _first(history: History, indexes: Sequence[int]) -> str:
    return history.releases[indexes[0]].text


def suggest(history: History, releases: Iterable[int]) -> str:
    """``; when.packages: ">=A,<B"`` for a window of consecutive read releases, else ``""``."""
    have = sorted(releases)
    read = history.in_range(None)
    if not have or read[read.index(have[0]):read.index(have[0]) + len(have)] != have:
        return ""
    low = history.releases[have[0]].text
    after = have[-1] + 1
    if after >= len(history.releases):
        return f'; when.packages: ">={low}"'
    return f'; when.packages: ">={low},<{history.releases[after].text}"'


# -- facts


def _fact_part(rule: Rule, history: History, fld: str, fact: Fact, read: frozenset[int]) -> Part:
    if fact.subject == "selection":
        predicted, problem = selection_holds(rule, history, fact, read)
        return Part(f"{fld}.selection", fact.describe(), predicted, problem)
    kind = "backends" if fact.subject == "backend" else "stack"
    label = fact.describe()
    if not history.known(kind, fact.name):
        what = f"backend {fact.name!r}" if kind == "backends" else f"build fact {fact.name!r}"
        return Part(f"{fld}.{fact.subject}", label, None, f"no {history.engine} release in "
                                                           f"{Path(history.source).name} has {what}")
    if fact.test == "matches":
        spec = fact.spec
        assert spec is not None
        unstated = frozenset(i for i in read if _version(history.item(kind, fact.name, i)) is None)
        return Part(fld, label, frozenset(i for i in read - unstated
                                          if _version_in(history.item(kind, fact.name, i), spec)), unknown=unstated)
    dims = []
    for dim, values in fact.dimensions:
        found = values if values is not None else _when_values(rule, dim)
        if not found:
            return Part(f"{fld}.{fact.test}", label, None, f"the rule's when names no {dim} to test")
        dims.append((dim, found))
    if fact.subject == "release":
        floors = {i: _version(history.item(kind, fact.name, i)) for i in read}
        spec = rule.when.driver
        return Part(fld, label, frozenset(i for i, floor in floors.items()
                                          if floor is not None and spec is not None and _all_below(spec, floor)),
                    unknown=frozenset(i for i, floor in floors.items() if floor is None))
    holds = set()
    for i in read:
        attrs = history.item(kind, fact.name, i)
        if attrs is None:
            continue
        verdicts = [_accepts(attrs.get(BACKEND_ATTRS[dim]), dim, v) for dim, values in dims for v in values]
        wanted = (lambda v: v is False) if fact.test == "refuses" else (lambda v: v is not False)
        if all(wanted(v) for v in verdicts):
            holds.add(i)
    return Part(fld, label, frozenset(holds))


def _when_values(rule: Rule, dim: str) -> tuple[str, ...]:
    w = rule.when
    if dim == "driver":
        return (str(w.driver),) if w.driver is not None else ()
    if dim == "compute_capability":
        spec = w.compute_capability
        return () if spec is None else capabilities(spec)
    name = "head_size" if dim == "head_size" else dim
    for param, cond in w.params:
        if param == name:
            return tuple(str(v) for v in cond.values or () if v is not None and str(v).lower() != "auto")
    return ()


def _accepts(declared: object, dim: str, value: str) -> bool | None:
    """Whether a backend's declared support accepts ``value``; None when it declares nothing readable (then it is
    neither a refusal nor a promise)."""
    if declared is None:
        return None
    if dim == "compute_capability":
        try:
            return SpecifierSet(str(declared)).contains(value, prereleases=True)
        except InvalidSpecifier:
            return None
    if dim == "head_size":
        try:
            size = int(value)
        except ValueError:
            return None
        if isinstance(declared, list):
            return size in declared
        return _head_size_expr(str(declared), size)
    if isinstance(declared, list):
        norm: Callable[[str], str] = normalize_dtype if dim == "dtype" else str.lower
        return norm(value) in {norm(str(d)) for d in declared}
    return None


def _head_size_expr(text: str, size: int) -> bool | None:
    """``head_size % 8 == 0 and head_size <= 256`` evaluated for one size: comparisons, and/or/not, + - * // %
    of the name ``head_size`` and integers only; anything else is unreadable (None)."""
    if len(text) > 1000:  # a declared head-size test is one short expression
        return None
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None

    def ev(node: ast.AST) -> int | bool:
        if isinstance(node, ast.Name) and node.id == "head_size":
            return size
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BoolOp):
            vals = [bool(ev(v)) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            a, b = int(ev(node.left)), int(ev(node.right))
            ops: dict[type, Callable[[int, int], int]] = {
                ast.Mod: lambda x, y: x % y, ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y,
                ast.Mult: lambda x, y: x * y, ast.FloorDiv: lambda x, y: x // y}
            return ops[type(node.op)](a, b)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators, strict=True):
                right = ev(right_node)
                cmp = {ast.Eq: left == right, ast.NotEq: left != right, ast.Lt: left < right,
                       ast.LtE: left <= right, ast.Gt: left > right, ast.GtE: left >= right}.get(type(op))
                if not cmp:
                    return False
                left = right
            return True
        raise ValueError("unreadable")

    try:
        return bool(ev(tree))
    except (ValueError, ZeroDivisionError, KeyError, RecursionError, OverflowError, MemoryError):
        return None


def _version(attrs: object) -> Version | None:
    value = attrs.get("value") if isinstance(attrs, dict) else None
    try:
        return Version(str(value)) if value is not None else None
    except InvalidVersion:
        return None


def _version_in(attrs: object, spec: SpecifierSet) -> bool:
    v = _version(attrs)
    return v is not None and spec.contains(v, prereleases=True)


def _all_below(spec: SpecifierSet, floor: Version) -> bool:
    """Every version ``spec`` accepts is below ``floor``: it has an upper bound at or under it."""
    for s in spec:
        if s.version.endswith(".*"):
            continue
        v = Version(s.version)
        if (s.operator == "<" and v <= floor) or (s.operator in ("<=", "==", "===") and v < floor):
            return True
    return False


# -- anchors


def _anchor_part(history: History, fld: str, anchor: Anchor) -> Part:
    runs = history.runs.get("anchors", {}).get(anchor.digest)
    label = anchor.describe()
    if not runs:
        return Part(fld, label, None, f"not evaluated in {Path(history.source).name} (anchor {anchor.digest}): "
                                      f"re-make it with tools/engine_history.py")
    if not any("file" in attrs for _, _, attrs in runs):
        return Part(f"{fld}.file", label, None, f"{' | '.join(anchor.files)} matches no file in any "
                                                f"{history.engine} release ({history.span()})")
    holds = frozenset(i for first, last, attrs in runs if attrs.get("holds") is True
                      for i in range(first, last + 1) if history.releases[i].read)
    if not holds:
        there = history.ranges(i for first, last, attrs in runs if "file" in attrs for i in range(first, last + 1))
        return Part(fld, label, None, f"holds in no {history.engine} release ({history.span()}): the file is there "
                                      f"({there}) but not what the anchor finds")
    return Part(fld, label, holds)


def gate_problems(rule: Rule, history: History, span: Sequence[int]) -> list[str]:
    """A value anchor that is the rule's compute-capability gate (``gate``) against the gate the rule types: in
    every release it covers, ``when.compute_capability`` must be ``<V`` for the value V read there."""
    assert rule.bounds is not None
    problems = []
    typed = rule.when.compute_capability
    covered = set(span)
    for k, anchor in enumerate(rule.bounds.anchors):
        if anchor.gate is None:
            continue
        wrong: dict[str, list[int]] = {}
        for first, last, attrs in history.runs.get("anchors", {}).get(anchor.digest, ()):
            value = attrs.get("value")
            there = [i for i in range(first, last + 1) if i in covered]
            if not there or "file" not in attrs:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                wrong.setdefault(f"reads {value!r}, not a capability", []).extend(there)
                continue
            gate = SpecifierSet(f"<{value // 10}.{value % 10}")
            if typed is None or capabilities(typed) != capabilities(gate):
                wrong.setdefault(f"reads {value}, so the gate there is compute_capability {gate}", []).extend(there)
        for said, releases in wrong.items():
            problems.append(f"bounds.anchors[{k}].gate: the anchor {said} in {history.engine} "
                            f"{history.ranges(sorted(releases))}, where the rule types {typed or 'no gate'}: derive "
                            f"the gate from the value (split the rule where the value changes)")
    return problems


# -- when against the rule's own flags


def _scoped_dests(rule: Rule, history: History) -> set[str]:
    return {str(attrs.get("dest")) for f in rule.flag_facts if f.versions is not None and "=" not in f.name
            and f.name.startswith("--")
            for _, _, attrs in history.runs.get("flags", {}).get(norm_flag(f.name), ())}


def flag_contradictions(rule: Rule, history: History, span: Sequence[int]) -> list[str]:
    """A rule conditioned on a setting (``when.params``) whose own ``flags`` entry gives the releases the setting's
    flag exists in: a range with no release of that flag is a rule about the setting being gone, and must cover
    every release it is gone from on the side(s) it covers (``--rope-theta <0.11.1`` and ``vllm >=0.26`` leave
    0.11.1-0.25 out). A value-level entry (``--flag=value``) counts where the rule names that one value."""
    problems = []
    covered = set(span)
    if not covered:
        return []
    read = history.in_range(None)
    narrower = rule.bounds is not None and rule.bounds.narrower is not None
    for name, cond in rule.when.params:
        values = [str(v).lower() for v in cond.values or () if v is not None]
        for fact in rule.flag_facts:
            if fact.versions is None or fact.nowhere or not fact.name.startswith("--"):
                continue
            flag, eq, value = fact.name.partition("=")
            dests = {attrs.get("dest") for _, _, attrs in history.runs.get("flags", {}).get(norm_flag(flag), ())}
            if name not in dests or (eq and values != [value.lower()]):
                continue
            have = set(history.in_range(fact.versions))
            if covered & have:
                continue
            expected = set()
            for stretch in _stretches([i for i in read if i not in have], read):
                if covered & set(stretch):
                    expected.update(stretch)
            left = sorted(expected - covered)
            if left and not narrower:
                problems.append(f"when contradicts flags: {fact.name} exists in {history.engine} {fact.versions}, "
                                f"so {name} is gone from {history.ranges(sorted(expected))}, but when.packages leaves "
                                f"{history.ranges(left)} out{suggest(history, expected)}")
    return problems


def _stretches(indexes: list[int], read: list[int]) -> list[list[int]]:
    """Runs of consecutive read releases."""
    pos = {r: k for k, r in enumerate(read)}
    out: list[list[int]] = []
    for i in indexes:
        if out and pos[i] == pos[out[-1][-1]] + 1:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def describe(rule: Rule, history: History | None) -> list[str]:
    """``gpucompat rules ID``: what the rule's window rests on, where each part holds, and how its range compares."""
    if rule.bounds is None:
        return ["bounds: none (the release window is typed in when.packages, not computed)"]
    if history is None:
        return [f"bounds: {rule.engine} has no release history to compute the window from"]
    window = compute(rule, history)
    if window is None:
        return [f"bounds: the rule is about {history.engine} absent"]
    read = sum(1 for r in history.releases if r.read)
    lines = [f"bounds, against {read} {history.engine} releases ({history.span()}, {Path(history.source).name}):"]
    for part in window.parts:
        holds = (history.ranges(part.holds) or "no release") if part.holds is not None else f"? {part.problem}"
        lines.append(f"  {part.field}: {part.label}")
        lines.append(f"    holds in {holds}")
        if part.unknown:
            lines.append(f"    not stated in {history.ranges(part.unknown)}")
    where = "not computable" if window.releases is None else (history.ranges(window.releases) or "no release")
    lines.append(f"window: {where}{suggest(history, window.releases or ())}")
    lines.append(f"when.packages covers: {history.ranges(window.span) or 'no release'}")
    if window.unknown:
        lines.append(f"unknown (a fact not stated): {history.ranges(window.unknown)}")
    if rule.bounds.narrower:
        lines.append(f"narrower: {rule.bounds.narrower}")
    if rule.bounds.unknown:
        lines.append(f"unknown: {rule.bounds.unknown}")
    return lines
