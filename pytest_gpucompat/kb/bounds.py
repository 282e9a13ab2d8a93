"""A rule's ``bounds``: what its release window rests on, so that the window is computed from the released code and
not typed from the one release someone read.

- ``facts``: tests on what the release history extracts per release: an attention backend's declared compute
  capabilities, dtypes, KV-cache dtypes and head sizes (``{backend: FLASH_ATTN, refuses: compute_capability}``: the
  backend refuses every compute capability the rule's ``when`` names), or a build fact of an engine whose history is
  its release notes (``{release: cuda, matches: ">=12,<13"}``, ``{release: driver_floor, refuses: driver}``), or
  the outcome the engine's selection data predicts (``{selection: refused}``, ``{selection: asserts, picks:
  TRITON_ATTN}``; kb.predict, for every setting the rule's ``when`` names: its compute capabilities, KV-cache
  dtypes, forced backends, dtypes, head sizes and FlashInfer installed or absent). A rule that only restates the
  selection then follows the data: its window is where the prediction says what the rule says.
- ``anchors``: a piece of engine code the rule rests on: a file of the released wheel (alternatives where the code
  moved) and what must be found there (a list: alternatives where the code changed form): a literal of the source
  (``text``), a part of a string constant as the parser joins it (``string``: a message split over lines, an
  f-string as ``{name}``), a statement or expression compared as syntax trees (``code``), a literal's value
  (``value: Class.attr``, a method's or function's returned literal, a module variable) or the collection an
  ``assert EXPR in {...}`` tests (``assert_in``), optionally tested with ``equals``, ``contains``, ``excludes``,
  ``at_least`` or ``at_most``. ``tools/engine_history.py`` evaluates every anchor against every release it reads
  and stores where it holds under the anchor's digest; lint only reads that (its time does not grow with anchors).
  A value anchor with ``gate: compute_capability`` says the value read *is* the rule's compute-capability gate (a
  minimum capability of 89: ``when.compute_capability: "<8.9"``): lint then refuses the rule in every release where
  the value read and the typed gate disagree, so a gate that changed between releases splits the rule.
- ``narrower``: why ``when.packages`` is deliberately narrower than the computed window (e.g. only that release was
  run); lint then accepts a range inside the window, and nothing outside it.
- ``unknown``: why the range covers, or leaves out, the releases whose history does not state a fact the window
  rests on (release notes that name no CUDA version): such a release is neither inside nor outside the window, and
  lint refuses a range that reaches one (or stops short of one next to the window) unless this says why.

The window is the releases where every fact and anchor holds and every engine setting of ``when.params`` exists.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import SpecifierSet

from ..common.versions import parse_specifier

DIMENSIONS = ("compute_capability", "kv_cache_dtype", "dtype", "head_size", "driver")
"""What a fact may test, each read from the rule's ``when`` unless listed: ``when.compute_capability``,
``when.params.kv_cache_dtype``, ``when.params.dtype``, ``when.model_shape.head_size``, ``when.driver``."""
BACKEND_ATTRS = {"compute_capability": "compute_capability", "kv_cache_dtype": "kv_cache_dtypes",
                 "dtype": "dtypes", "head_size": "head_sizes"}
"""A dimension -> the backend attribute of the release history that declares what the backend supports."""
STACK_FIELDS = ("cuda", "trt", "container", "driver_floor", "driver_ga")
ANCHOR_FINDS = ("text", "string", "code", "value", "assert_in")
ANCHOR_TESTS = ("equals", "contains", "excludes", "at_least", "at_most")
GATES = ("compute_capability",)
"""What a value anchor may say it is (``gate``): the rule's ``when.compute_capability`` is then ``<V`` for the value
read, major*10+minor (a ``get_min_capability()`` of 89 is ``<8.9``), in every release the rule covers."""
OUTCOMES = ("chosen", "refused", "refused-at-init", "asserts")
"""What a ``selection`` fact may expect (kb.predict's ``Prediction.outcome``)."""

Fail = Callable[[str, str], Exception]


@dataclass(frozen=True)
class Fact:
    """``subject`` "backend" (a backend of the history), "release" (a build fact of the release) or "selection"
    (the predicted outcome: ``name`` the outcomes joined by "/", ``test`` "predicts", ``picks`` the backends it may
    choose, empty: any); ``test`` "refuses", "accepts" or "matches"; ``dimensions``: (dimension, values or None = the
    rule's own)."""

    subject: str
    name: str
    test: str
    dimensions: tuple[tuple[str, tuple[str, ...] | None], ...] = ()
    spec: SpecifierSet | None = None
    picks: tuple[str, ...] = ()

    @property
    def outcomes(self) -> tuple[str, ...]:
        return tuple(self.name.split("/")) if self.subject == "selection" else ()

    def describe(self) -> str:
        if self.subject == "selection":
            picks = f" with {'/'.join(self.picks)}" if self.picks else ""
            return f"the selection predicts {' or '.join(self.outcomes)}{picks}"
        if self.test == "matches":
            return f"{self.subject} {self.name} {self.spec}"
        dims = ", ".join(d if v is None else f"{d} {'/'.join(v)}" for d, v in self.dimensions)
        return f"{self.subject} {self.name} {self.test} {dims}"


@dataclass(frozen=True)
class Anchor:
    files: tuple[str, ...]
    find: str  # one of ANCHOR_FINDS
    what: tuple[str, ...]  # alternatives (the code changed form): any one found holds; the first found gives a value
    test: str | None = None  # one of ANCHOR_TESTS
    expected: Any = None
    gate: str | None = None  # GATES: the rule's condition the value read is (not part of the evaluated spec)

    def spec(self) -> dict[str, Any]:
        """The anchor as data: what the history tool evaluates and what its digest is of."""
        out: dict[str, Any] = {"files": list(self.files),
                               self.find: self.what[0] if len(self.what) == 1 else list(self.what)}
        if self.test is not None:
            out[self.test] = self.expected
        return out

    @property
    def digest(self) -> str:
        return anchor_digest(self.spec())

    def describe(self) -> str:
        test = f" {self.test} {json.dumps(self.expected)}" if self.test else ""
        what = " | ".join(repr(w) for w in self.what)
        return f"{' | '.join(self.files)}: {self.find} {what}{test}"


def anchor_digest(spec: Mapping[str, Any]) -> str:
    """The key an anchor's window is stored under: a changed anchor is a new key, so a window computed for the old
    one is never read as the new one's."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, ensure_ascii=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Bounds:
    facts: tuple[Fact, ...] = ()
    anchors: tuple[Anchor, ...] = ()
    narrower: str | None = None
    unknown: str | None = None


def parse_bounds(raw: Any, fail: Fail) -> Bounds | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise fail("bounds", "must be a mapping with facts, anchors, narrower and unknown")
    extra = set(map(str, raw)) - {"facts", "anchors", "narrower", "unknown"}
    if extra:
        raise fail(f"bounds.{sorted(extra)[0]}", "unknown key (known: facts, anchors, narrower, unknown)")
    facts = tuple(_fact(item, fail, f"bounds.facts[{i}]") for i, item in enumerate(_list(raw.get("facts"), fail,
                                                                                           "bounds.facts")))
    anchors = tuple(_anchor(item, fail, f"bounds.anchors[{i}]")
                    for i, item in enumerate(_list(raw.get("anchors"), fail, "bounds.anchors")))
    narrower = raw.get("narrower")
    if narrower is not None and (not isinstance(narrower, str) or not narrower.strip()):
        raise fail("bounds.narrower", "must say why the range is narrower than the window")
    why = narrower.strip() if isinstance(narrower, str) else None
    unstated = raw.get("unknown")
    if unstated is not None and (not isinstance(unstated, str) or not unstated.strip()):
        raise fail("bounds.unknown", "must say why the releases that state no such fact are covered as they are")
    if not facts and not anchors:
        raise fail("bounds", "needs facts or anchors: the window is computed from them")
    return Bounds(facts=facts, anchors=anchors, narrower=why,
                  unknown=unstated.strip() if isinstance(unstated, str) else None)


def _list(value: Any, fail: Fail, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise fail(where, "must be a list")
    return value


def _fact(raw: Any, fail: Fail, where: str) -> Fact:
    if not isinstance(raw, Mapping):
        raise fail(where, "must be a mapping such as {backend: FLASH_ATTN, refuses: compute_capability}")
    if "selection" in raw:
        return _selection_fact(raw, fail, where)
    subjects = [k for k in ("backend", "release") if k in raw]
    tests = [k for k in ("refuses", "accepts", "matches") if k in raw]
    unknown = set(map(str, raw)) - {"backend", "release", "refuses", "accepts", "matches"}
    if unknown:
        raise fail(f"{where}.{sorted(unknown)[0]}", "unknown key (known: backend or release, and refuses, accepts "
                                                    "or matches)")
    if len(subjects) != 1 or len(tests) != 1:
        raise fail(where, "needs one of backend / release and one of refuses / accepts / matches")
    subject, test = subjects[0], tests[0]
    name = raw[subject]
    if not isinstance(name, str) or not name:
        raise fail(f"{where}.{subject}", "must be a name")
    if subject == "release" and name not in STACK_FIELDS:
        raise fail(f"{where}.release", f"unknown build fact {name!r} (known: {', '.join(STACK_FIELDS)})")
    if test == "matches":
        if subject != "release":
            raise fail(f"{where}.matches", "is a test of a release's build fact (release: ...)")
        try:
            return Fact(subject, name, test, spec=parse_specifier(str(raw[test])))
        except ValueError as exc:
            raise fail(f"{where}.matches", str(exc)) from None
    value = raw[test]
    dims: list[tuple[str, tuple[str, ...] | None]] = []
    if isinstance(value, str):
        dims.append((value, None))
    elif isinstance(value, Mapping):
        for dim, vals in value.items():
            items = vals if isinstance(vals, list) else [vals]
            if not items or any(isinstance(v, (Mapping, list)) or v is None for v in items):
                raise fail(f"{where}.{test}.{dim}", "must be a value or a list of values")
            dims.append((str(dim), tuple(str(v) for v in items)))
    else:
        raise fail(f"{where}.{test}", "must name a dimension of the rule's when, or map dimensions to values")
    allowed = ("driver",) if subject == "release" else tuple(BACKEND_ATTRS)
    for dim, _ in dims:
        if dim not in allowed:
            raise fail(f"{where}.{test}", f"unknown dimension {dim!r} for a {subject} (known: {', '.join(allowed)})")
    if subject == "release" and (name != "driver_floor" or test != "refuses"):
        raise fail(f"{where}.{test}", "a release refuses a driver through its driver_floor only")
    return Fact(subject, name, test, dimensions=tuple(dims))


def _selection_fact(raw: Mapping[Any, Any], fail: Fail, where: str) -> Fact:
    unknown = set(map(str, raw)) - {"selection", "picks"}
    if unknown:
        raise fail(f"{where}.{sorted(unknown)[0]}", "unknown key (known with selection: picks)")
    outcomes = _names(raw["selection"])
    if not outcomes or any(o not in OUTCOMES for o in outcomes):
        raise fail(f"{where}.selection", f"must be one or more of {', '.join(OUTCOMES)}")
    picks = _names(raw.get("picks"))
    if picks is None or any(not p or not p.replace("_", "").isalnum() for p in picks):
        raise fail(f"{where}.picks", "must be a backend name or a list of them")
    return Fact("selection", "/".join(outcomes), "predicts", picks=tuple(p.upper() for p in picks))


def _names(value: Any) -> tuple[str, ...] | None:
    items = [] if value is None else value if isinstance(value, list) else [value]
    return tuple(items) if all(isinstance(v, str) for v in items) else None


MAX_ANCHOR_CHARS = 2000
"""The longest text an anchor may look for (the shipped ones are under 200 characters)."""


def python_problem(text: str, mode: str) -> str | None:
    """Why ``text`` (at most ``MAX_ANCHOR_CHARS``: the caller bounds it) is no Python ``mode`` source an anchor can
    hold, or None. Deep nesting and long unary or attribute chains make CPython's parser raise MemoryError or
    RecursionError rather than SyntaxError: whatever it raises is the answer, never a traceback."""
    try:
        ast.parse(text, mode=mode)
    except SyntaxError as exc:
        return f"does not parse as Python: {exc.msg}"
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        return f"does not parse as Python: {type(exc).__name__}"
    return None


def _anchor(raw: Any, fail: Fail, where: str) -> Anchor:
    if not isinstance(raw, Mapping):
        raise fail(where, "must be a mapping such as {file: vllm/x.py, text: '...'}")
    unknown = set(map(str, raw)) - {"file", "gate", *ANCHOR_FINDS, *ANCHOR_TESTS}
    if unknown:
        raise fail(f"{where}.{sorted(unknown)[0]}", f"unknown key (known: file, gate, {', '.join(ANCHOR_FINDS)}, "
                                                    f"{', '.join(ANCHOR_TESTS)})")
    files = raw.get("file")
    items = files if isinstance(files, list) else [files]
    if not items or not all(isinstance(f, str) and f.strip() and not f.startswith("/") and ".." not in f
                            for f in items):
        raise fail(f"{where}.file", "required: a path inside the released wheel, or a list of alternatives")
    finds = [k for k in ANCHOR_FINDS if k in raw]
    if len(finds) != 1:
        raise fail(where, f"needs exactly one of {', '.join(ANCHOR_FINDS)}")
    find = finds[0]
    raw_what = raw[find]
    whats = raw_what if isinstance(raw_what, list) else [raw_what]
    if not whats or not all(isinstance(w, str) and w.strip() for w in whats):
        raise fail(f"{where}.{find}", "must be a non-empty string or a list of alternatives")
    what = tuple(str(w).strip() for w in whats)
    for w in what:
        if len(w) > MAX_ANCHOR_CHARS:
            raise fail(f"{where}.{find}", f"longer than {MAX_ANCHOR_CHARS} characters: an anchor is a line of code "
                                          "or a message, not a file")
        if find in ("code", "assert_in"):
            problem = python_problem(w, "exec" if find == "code" else "eval")
            if problem is not None:
                raise fail(f"{where}.{find}", problem)
        if find == "value" and not all(part.isidentifier() for part in w.split(".")):
            raise fail(f"{where}.value", "must be a dotted name: NAME, Class.NAME or Class.method")
    tests = [k for k in ANCHOR_TESTS if k in raw]
    if len(tests) > 1:
        raise fail(where, f"takes at most one of {', '.join(ANCHOR_TESTS)}")
    if tests and find in ("text", "string", "code"):
        raise fail(f"{where}.{tests[0]}", f"tests a value: use it with value or assert_in, not {find}")
    test = tests[0] if tests else None
    expected = raw[test] if test else None
    if test in ("contains", "excludes"):
        expected = sorted(map(str, expected if isinstance(expected, list) else [expected]))
    if test in ("at_least", "at_most") and (not isinstance(expected, (int, float)) or isinstance(expected, bool)):
        raise fail(f"{where}.{test}", "must be a number")
    try:
        json.dumps(expected, allow_nan=False)
    except (TypeError, ValueError):
        raise fail(f"{where}.{test}", "must be a plain value (string, number, boolean, null or a list)") from None
    gate = raw.get("gate")
    if gate is not None and (gate not in GATES or find != "value"):
        raise fail(f"{where}.gate", f"must be one of {', '.join(GATES)}, on a value anchor (the value read is "
                                    "the gate)")
    return Anchor(files=tuple(str(f).strip() for f in items), find=find, what=what, test=test, expected=expected,
                  gate=gate)
