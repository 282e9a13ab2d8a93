"""The interpreter's scopes and control flow: a scope holds a function's locals (assignments evaluated lazily, as
`Thunk`s) and falls back to its module's globals; `Return`/`Break`/`Continue` carry control flow out of statements,
`Budget` stops an interpretation that runs too long.
"""

from __future__ import annotations

import ast
from typing import Any

from _history_ast import EnumMember, FuncRef, Module, Unknown

MAX_DEPTH = 14
MAX_STEPS = 3_000_000
_CONCRETE = (str, int, float, bool, type(None), list, tuple, dict, set, frozenset)


class Budget(Exception):
    """The interpreter ran out of steps: what is left is unknown."""


class Return(Exception):  # noqa: N818 - control flow, not an error
    def __init__(self, value: Any) -> None:
        self.value = value


class Break(Exception):  # noqa: N818
    pass


class Continue(Exception):  # noqa: N818
    pass


class Thunk:
    """A local assigned but not yet needed: evaluated on first use (most assignments in a parser builder are never
    read for a flag, and following their calls would walk the whole engine)."""

    __slots__ = ("node", "scope", "done", "value")

    def __init__(self, node: ast.expr, scope: Scope) -> None:
        self.node, self.scope, self.done, self.value = node, scope, False, None


class Scope:
    def __init__(self, module: Module, ev: Any, parent: Scope | None = None,
                 func: FuncRef | None = None, local: bool = True) -> None:
        self.module, self.evaluator, self.parent, self.func = module, ev, parent, func
        self.vars: dict[str, Any] | None = {} if local else None
        self.candidates: list[Any] = []

    def lookup(self, name: str) -> Any:
        scope: Scope | None = self
        while scope is not None:
            if scope.vars is not None and name in scope.vars:
                value = scope.vars[name]
                if isinstance(value, Thunk):
                    if not value.done:
                        value.done, value.value = True, Unknown(name)
                        value.value = self.evaluator.ev(value.node, value.scope)
                    return value.value
                return value
            scope = scope.parent
        return self.evaluator.global_value(self.module, name)


def _enclosing_func(scope: Scope | None) -> FuncRef | None:
    while scope is not None:
        if scope.func is not None:
            return scope.func
        scope = scope.parent
    return None


def _text(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:
        return type(node).__name__


def _concrete(value: Any) -> bool:
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_concrete(v) for v in value)
    if isinstance(value, dict):
        return all(_concrete(k) and _concrete(v) for k, v in value.items())
    return isinstance(value, (*_CONCRETE, slice, EnumMember))


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
