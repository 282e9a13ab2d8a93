"""Code anchors (``bounds.anchors`` of the rules, kb/bounds.py) evaluated against every release read: where each
holds is stored in the engine's history under the anchor's digest, so lint compares windows without the wheels.

Evaluated on every run of the history tool from the cached sources (a few files per release), not kept in the
extraction cache: anchors are rule data and change more often than the extraction code, which the cache is keyed on.

Per release an anchor gives ``{"holds": bool, "file": path}`` (plus ``"value"``, the literal read, for ``value`` and
``assert_in``) when one of its files exists in the release, ``{"holds": false}`` without a file when none does.
Where several files match (a pattern, or alternatives for code that moved), it holds when it holds in one of them.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ANCHOR_KINDS = ("anchors",)
"""The history kinds this module adds to the facts of each release."""

_SPACE = re.compile(r"\s+")


def rule_anchors(rules_dir: Path, engine: str) -> dict[str, dict[str, Any]]:
    """Every anchor of the rules about ``engine`` in ``rules_dir``: digest -> the anchor's spec."""
    root = Path(__file__).resolve().parent.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from pytest_gpucompat.kb.load import load_rule_file

    out: dict[str, dict[str, Any]] = {}
    for path in sorted(rules_dir.glob("*.y*ml")):
        for rule in load_rule_file(path):
            if rule.engine == engine and rule.bounds is not None:
                for anchor in rule.bounds.anchors:
                    out[anchor.digest] = anchor.spec()
    return out


def evaluate_release(anchors: Mapping[str, Mapping[str, Any]], files: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The anchors' results in one release, from its files (path -> text)."""
    paths = sorted(files)
    out: dict[str, dict[str, Any]] = {}
    for digest, spec in anchors.items():
        matched = _matching(spec["files"], paths)
        if not matched:  # evaluated, no file: told apart from an anchor the history never evaluated
            out[digest] = {"holds": False}
            continue
        result: dict[str, Any] = {"holds": False, "file": matched[0]}
        for path in matched:
            found = evaluate(spec, files[path])
            if found["holds"] or ("value" in found and "value" not in result):
                result = {**found, "file": path}
            if found["holds"]:
                break
        out[digest] = result
    return out


def _matching(patterns: Iterable[str], paths: list[str]) -> list[str]:
    out: list[str] = []
    for pattern in patterns:
        hits = [p for p in paths if p == pattern] or (
            [p for p in paths if fnmatch.fnmatchcase(p, pattern)] if any(c in pattern for c in "*?[") else [])
        out.extend(h for h in hits if h not in out)
    return out


def evaluate(spec: Mapping[str, Any], text: str) -> dict[str, Any]:
    """One anchor against one file's text: ``{"holds": ...}`` and, for value and assert_in, the value read. An
    anchor or a file the parser cannot take (too deep, too long: MemoryError, RecursionError) does not hold."""
    try:
        return _evaluate(spec, text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return {"holds": False}


def _evaluate(spec: Mapping[str, Any], text: str) -> dict[str, Any]:
    if "text" in spec:
        flat = _SPACE.sub(" ", text)
        return {"holds": any(_SPACE.sub(" ", t).strip() in flat for t in _alternatives(spec["text"]))}
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {"holds": False}
    if "code" in spec:
        return {"holds": any(_has_code(tree, c) for c in _alternatives(spec["code"]))}
    if "string" in spec:
        strings = _strings(tree)
        return {"holds": any(want in s for want in _alternatives(spec["string"]) for s in strings)}
    found = _MISSING
    for alternative in _alternatives(spec["value"] if "value" in spec else spec["assert_in"]):
        found = _value(tree, alternative) if "value" in spec else _asserted(tree, alternative)
        if found is not _MISSING:
            break
    if found is _MISSING:
        return {"holds": False}
    return {"holds": _test(spec, found), "value": found}


_MISSING = object()


def _alternatives(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def _strings(tree: ast.Module) -> list[str]:
    """Every string constant as the parser joined it; an f-string with ``{expression}`` for each value."""
    out = []
    inner = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                inner.add(id(value))
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif isinstance(value, ast.FormattedValue):
                    inner.add(id(value.value))
                    parts.append("{" + ast.unparse(value.value) + "}")
            out.append("".join(parts))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inner:
            out.append(node.value)
    return out


def _norm(node: ast.AST) -> str:
    """A node's syntax tree as text, positions left out and set literals' items ordered."""
    if isinstance(node, ast.Set):
        return "Set(" + ",".join(sorted(_norm(e) for e in node.elts)) + ")"
    if isinstance(node, ast.AST):
        fields = []
        for name, value in ast.iter_fields(node):
            if name in ("ctx", "type_comment", "kind"):
                continue
            if isinstance(value, list):
                fields.append(f"{name}=[{','.join(_norm(v) for v in value)}]")
            else:
                fields.append(f"{name}={_norm(value)}")
        return f"{type(node).__name__}({','.join(fields)})"
    return repr(node)


def _has_code(tree: ast.Module, code: str) -> bool:
    snippet = ast.parse(code.strip()).body
    if len(snippet) == 1 and isinstance(snippet[0], ast.Expr):
        want = _norm(snippet[0].value)
        return any(isinstance(n, ast.expr) and _norm(n) == want for n in ast.walk(tree))
    want_list = [_norm(s) for s in snippet]
    for node in ast.walk(tree):
        for body in (getattr(node, f, None) for f in ("body", "orelse", "finalbody", "handlers")):
            if isinstance(body, list) and len(body) >= len(want_list):
                norms = [_norm(s) for s in body]
                for i in range(len(norms) - len(want_list) + 1):
                    if norms[i:i + len(want_list)] == want_list:
                        return True
    return False


def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return _MISSING
    try:
        value = ast.literal_eval(node)  # type: ignore[arg-type]
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING
    return _json(value)


def _json(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted((_json(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def _value(tree: ast.Module, dotted: str) -> Any:
    """``NAME``: a module-level assignment or a function's single returned literal; ``Class.NAME``: a class
    attribute's literal, or the literal a method returns (the last return of its body)."""
    *owner, name = dotted.split(".")
    scope: list[ast.stmt] = tree.body
    if owner:
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == owner[-1]]
        if not classes:
            return _MISSING
        scope = classes[0].body
    for stmt in scope:
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return _literal(stmt.value)
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name:
            return _literal(stmt.value)
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            returns = [n for n in ast.walk(stmt) if isinstance(n, ast.Return)]
            return _literal(returns[-1].value) if returns else _MISSING
    return _MISSING


def _asserted(tree: ast.Module, expr: str) -> Any:
    """The literal collection of the first ``assert EXPR in <literal>`` (or ``EXPR in <literal>`` of a raising
    ``if not``) in the file."""
    want = _norm(ast.parse(expr.strip(), mode="eval").body)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        # `assert x in {...}`, or one alternative of `assert x in {...} or x.startswith(...)`
        tests = node.test.values if isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.Or) \
            else [node.test]
        for test in tests:
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.In) \
                    and _norm(test.left) == want:
                found = _literal(test.comparators[0])
                if found is not _MISSING:
                    return found
    return _MISSING


def _test(spec: Mapping[str, Any], found: Any) -> bool:
    if "equals" in spec:
        expected = spec["equals"]
        if isinstance(found, list) and isinstance(expected, list):
            return sorted(map(repr, found)) == sorted(map(repr, expected))
        return bool(found == expected)
    if "at_least" in spec or "at_most" in spec:
        if not isinstance(found, (int, float)) or isinstance(found, bool):
            return False
        return found >= spec["at_least"] if "at_least" in spec else found <= spec["at_most"]
    items = {str(v) for v in found} if isinstance(found, list) else {str(found)}
    if "contains" in spec:
        return set(spec["contains"]) <= items
    if "excludes" in spec:
        return not set(spec["excludes"]) & items
    return True


def read_anchored(zip_path: Path, anchors: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``evaluate_release`` on a cached release archive, reading only the members some anchor names."""
    if not anchors:
        return {}
    with zipfile.ZipFile(zip_path) as zf:
        names = sorted(n for n in zf.namelist() if n.endswith(".py"))
        wanted = {n for spec in anchors.values() for n in _matching(spec["files"], names)}
        files = {n: zf.read(n).decode("utf-8", "replace") for n in sorted(wanted)}
    return evaluate_release(anchors, {**dict.fromkeys(names, ""), **files})
