"""Calls in the interpreter: methods of statically known str/dict/list/set values, builtins over known values,
package classes (an instance remembers its arguments) and package functions, which are run with their arguments
bound (a few are replaced by hooks that mirror what they compute from types at run time).
"""

from __future__ import annotations

import ast
import copy
import itertools
from collections.abc import Callable
from typing import Any

from _history_ast import FIELD_FACTORIES, ClassRef, External, FieldSpec, FuncRef, Instance, ParserObj, Unknown
from _history_scope import MAX_DEPTH, Return, Scope, _concrete, _enclosing_func, _text

_STR_METHODS = frozenset({"replace", "lower", "upper", "strip", "lstrip", "rstrip", "split", "join", "format",
                          "startswith", "endswith", "removeprefix", "removesuffix", "title", "capitalize"})
_DICT_METHODS = frozenset({"keys", "values", "items", "get", "pop", "copy", "update", "setdefault"})
_LIST_METHODS = frozenset({"copy", "append", "extend", "insert", "remove", "pop", "index", "count"})
_SET_METHODS = frozenset({"add", "update", "union", "copy", "difference", "intersection", "discard"})
_BUILTIN_CALLS: dict[str, Callable[..., Any]] = {
    "list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "sorted": sorted, "dict": dict, "len": len,
    "str": str, "int": int, "float": float, "bool": bool, "reversed": lambda x: list(reversed(x)),
    "enumerate": lambda x, start=0: list(enumerate(x, start)), "zip": lambda *a: list(zip(*a)),
    "range": lambda *a: list(range(*a)), "min": min, "max": max, "any": any, "all": all, "repr": repr,
    "permutations": lambda *a, **k: list(itertools.permutations(*a, **k)),
    "combinations": lambda *a, **k: list(itertools.combinations(*a, **k)),
    "product": lambda *a, **k: list(itertools.product(*a, **k)),
}


class BoundMethod:
    """`obj.name` for a known value or a parser, waiting for its call."""

    def __init__(self, obj: Any, name: str) -> None:
        self.obj, self.name = obj, name


class BoundSuper:
    """`super()` inside a method of `cls`; `bound` is the class the method was looked up on."""

    def __init__(self, cls: ClassRef, bound: ClassRef | None) -> None:
        self.cls, self.bound = cls, bound


class CallsMixin:
    """Call evaluation for the evaluator (which provides `ev`, `literal_values`, `iterate`, `exec_block`...)."""

    hooks: dict[str, Callable[..., Any]]
    on_add_argument: Callable[[list[Any], dict[str, Any], ast.Call], None] | None
    depth: int

    def _ev_Call(self, node: ast.Call, scope: Scope) -> Any:
        func = self.ev(node.func, scope)
        if isinstance(func, External) and func.short == "get_args" and node.args:
            values = self.literal_values([node.args[0]], scope.module)
            return tuple(values) if values and not any(isinstance(v, Unknown) for v in values) else Unknown(_text(node))
        if isinstance(func, External) and func.name.split(".")[-1] == "super" or \
                (isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args):
            fn = _enclosing_func(scope)
            if fn is not None and fn.owner is not None:
                return BoundSuper(fn.owner, fn.bound)
            return Unknown("super()")
        args = self._elements(node.args, scope)
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            value = self.ev(kw.value, scope)
            if kw.arg is None:
                if not isinstance(value, dict):
                    return self.call_value(func, args or [], kwargs, node, scope, unknown_kwargs=True)
                kwargs.update(value)
            else:
                kwargs[kw.arg] = value
        if args is None:
            return Unknown(_text(node))
        return self.call_value(func, args, kwargs, node, scope)

    def call_value(self, func: Any, args: list[Any], kwargs: dict[str, Any], node: ast.AST, scope: Scope,
                   unknown_kwargs: bool = False) -> Any:
        if isinstance(func, BoundMethod):
            return self._method(func, args, kwargs, node)
        if unknown_kwargs:
            return Unknown(_text(node))
        if isinstance(func, FuncRef):
            hook = self.hooks.get(func.name)
            if hook is not None:
                result = hook(self, func, args, kwargs, node, scope)
                if result is not NotImplemented:
                    return result
            if func.name in ("optional_type", "parse_type") and len(args) == 1:
                return args[0]
            return self.run(func, args, kwargs)
        if isinstance(func, ClassRef):
            if func.name.endswith("ArgumentParser"):
                return ParserObj()
            return Instance(func, args, kwargs)
        if isinstance(func, External):
            return self._external_call(func, args, kwargs, node)
        return Unknown(_text(node))

    def _external_call(self, func: External, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        short = func.short
        if short.endswith("ArgumentParser"):
            return ParserObj()
        if short in FIELD_FACTORIES and isinstance(node, ast.Call):
            return FieldSpec({k.arg: k.value for k in node.keywords if k.arg}, list(node.args))
        if short in ("deepcopy", "copy") and args:
            return copy.deepcopy(args[0]) if _concrete(args[0]) else args[0]
        if short == "cast" and len(args) == 2:
            return args[1]
        if func.name.startswith(("builtins.", "itertools.")) and short in _BUILTIN_CALLS:
            if short == "list" and len(args) == 1 and not _concrete(args[0]):
                items = self.iterate(args[0])
                return items if items is not None else Unknown(_text(node))
            if all(_concrete(a) for a in args) and all(_concrete(v) for v in kwargs.values()):
                return _BUILTIN_CALLS[short](*args, **kwargs)
        return Unknown(_text(node))

    def _method(self, bm: BoundMethod, args: list[Any], kwargs: dict[str, Any], node: ast.AST) -> Any:
        obj, name = bm.obj, bm.name
        if isinstance(obj, ParserObj):
            if name == "add_argument" and self.on_add_argument is not None and isinstance(node, ast.Call):
                if obj.label in ParserObj.SERVER_LABELS:
                    self.on_add_argument(args, kwargs, node)
                return Unknown("Action")
            if name == "add_subparsers":
                return ParserObj("<sub-commands>")
            if name == "add_parser":
                return ParserObj(args[0] if args and isinstance(args[0], str) else None)
            return ParserObj(obj.label)
        allowed = _STR_METHODS if isinstance(obj, str) else _DICT_METHODS if isinstance(obj, dict) else \
            _LIST_METHODS if isinstance(obj, list) else _SET_METHODS if isinstance(obj, (set, frozenset)) else \
            frozenset()
        if name not in allowed:
            return Unknown(_text(node))
        if name in ("join", "format") and not all(_concrete(a) for a in args):
            return Unknown(_text(node))
        result = getattr(obj, name)(*args, **kwargs)
        if name in ("keys", "values", "items"):
            return list(result)
        return result

    def run(self, func: FuncRef, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run a package function with the given arguments; its return value (unknown past the depth limit)."""
        if self.depth >= MAX_DEPTH:
            return Unknown(f"{func.name}(...)")
        node = func.node
        scope = Scope(func.module, self, parent=func.scope, func=func)
        params = node.args
        positional = params.posonlyargs + params.args
        decorators = func.decorators()
        if func.owner is not None and "classmethod" in decorators:
            args = [func.bound or func.owner, *args]
        defaults = params.defaults
        first_default = len(positional) - len(defaults)
        for i, p in enumerate(positional):
            if i < len(args):
                value = args[i]
            elif p.arg in kwargs:
                value = kwargs.pop(p.arg)
            elif i >= first_default:
                value = self.ev(defaults[i - first_default], self.module_scope(func.module))
            else:
                value = Unknown(p.arg)
            scope.vars[p.arg] = value  # type: ignore[index]
        for p, d in zip(params.kwonlyargs, params.kw_defaults):
            scope.vars[p.arg] = kwargs.pop(p.arg) if p.arg in kwargs else (  # type: ignore[index]
                self.ev(d, self.module_scope(func.module)) if d is not None else Unknown(p.arg))
        if params.vararg is not None:
            scope.vars[params.vararg.arg] = tuple(args[len(positional):])  # type: ignore[index]
        if params.kwarg is not None:
            scope.vars[params.kwarg.arg] = dict(kwargs)  # type: ignore[index]
        self.depth += 1
        try:
            if isinstance(node, ast.Lambda):
                return self.ev(node.body, scope)
            self.exec_block(node.body, scope)
        except Return as r:
            return r.value
        finally:
            self.depth -= 1
        return scope.candidates[-1] if scope.candidates else None

