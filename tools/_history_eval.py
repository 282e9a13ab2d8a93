"""A small abstract interpreter over a release's sources: evaluates expressions to concrete Python values where the
source makes them constant (literals, module constants, class attributes, enum values, comprehensions over those,
simple str/dict/list methods) and runs function bodies that build an argparse parser, following calls into the
package. Whatever it cannot know becomes `Unknown(source text)`; both arms of an `if` whose test is unknown run, so
every `add_argument` that some path reaches is seen.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from _history_ast import (
    BUILTIN_NAMES,
    ClassRef,
    EnumMember,
    External,
    FuncRef,
    Instance,
    ModRef,
    Module,
    ParserObj,
    Project,
    Unknown,
    _ImportDef,
    import_target,
)
from _history_calls import BoundMethod, BoundSuper, CallsMixin
from _history_scope import (
    _CONCRETE,
    MAX_STEPS,
    Break,
    Budget,
    Continue,
    Return,
    Scope,
    _concrete,
    _hashable,
    _text,
)
from _history_types import TypesMixin


class Evaluator(CallsMixin, TypesMixin):
    """Evaluates expressions and runs functions of one release. `hooks` replace package functions by name (the
    ones that inspect types at run time); `on_add_argument` receives each `add_argument` call on a parser."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self.hooks: dict[str, Callable[..., Any]] = {}
        self.on_add_argument: Callable[[list[Any], dict[str, Any], ast.Call], None] | None = None
        self._globals: dict[tuple[str, str], Any] = {}
        self._module_scopes: dict[str, Scope] = {}
        self._class_scopes: dict[int, Scope] = {}
        self.depth = 0
        self.steps = 0

    def module_scope(self, module: Module) -> Scope:
        scope = self._module_scopes.get(module.name)
        if scope is None:
            scope = self._module_scopes[module.name] = Scope(module, self, local=False)
        return scope

    def tick(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise Budget()

    # -- names

    def global_value(self, module: Module, name: str) -> Any:
        key = (module.name, name)
        if key in self._globals:
            return self._globals[key]
        self._globals[key] = Unknown(name)  # a cycle reads as unknown
        value = self._global(module, name)
        self._globals[key] = value
        return value

    def _global(self, module: Module, name: str) -> Any:
        found = self.project.find_def(module, name)
        if found is not None and found[0] is not module:
            return self.global_value(found[0], name)
        d = found[1] if found is not None else None
        scope = self.module_scope(module)
        if d is None:
            if name == "__name__":
                return module.name
            return External("builtins." + name) if name in BUILTIN_NAMES else Unknown(name)
        if isinstance(d, ast.ClassDef):
            return ClassRef(module, d)
        if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return FuncRef(module, d)
        if isinstance(d, _ImportDef):
            return self.import_value(module, d)
        value = self.ev(d.value if isinstance(d, (ast.Assign, ast.AnnAssign)) else d, scope)
        for aug in module.augments.get(name, []):
            value = self.binop(aug.op, value, self.ev(aug.value, scope), aug)
        return value

    def import_value(self, module: Module, d: _ImportDef) -> Any:
        target = import_target(self.project, module, d)
        if isinstance(target, tuple):
            mod = self.project.module(target[1])
            return self.global_value(mod, target[2]) if mod is not None else Unknown(target[2])
        return target

    # -- expressions

    def ev(self, node: ast.AST, scope: Scope) -> Any:
        self.tick()
        method = getattr(self, "_ev_" + type(node).__name__, None)
        if method is None:
            return Unknown(_text(node))
        try:
            return method(node, scope)
        except (Budget, Return, Break, Continue):
            raise
        except RecursionError:
            return Unknown(_text(node))
        except Exception:  # an operation on statically known values failed: the result is unknown
            return Unknown(_text(node))

    def _ev_Constant(self, node: ast.Constant, scope: Scope) -> Any:
        return node.value

    def _ev_Name(self, node: ast.Name, scope: Scope) -> Any:
        return scope.lookup(node.id)

    def _ev_Attribute(self, node: ast.Attribute, scope: Scope) -> Any:
        return self.attr(self.ev(node.value, scope), node.attr, node)

    def attr(self, obj: Any, name: str, node: ast.AST | None = None) -> Any:
        if isinstance(obj, ModRef):
            mod = self.project.module(obj.name)
            if mod is not None and self.project.find_def(mod, name) is not None:
                return self.global_value(mod, name)
            if self.project.has_module(f"{obj.name}.{name}"):
                return ModRef(f"{obj.name}.{name}")
            return Unknown(f"{obj.name}.{name}")
        if isinstance(obj, External):
            return External(f"{obj.name}.{name}")
        if isinstance(obj, ClassRef):
            return self.class_attr(obj, name)
        if isinstance(obj, BoundSuper):
            value = self.class_attr(obj.bound or obj.cls, name, after=obj.cls)
            if isinstance(value, FuncRef):
                value.bound = obj.bound or obj.cls
            return value
        if isinstance(obj, EnumMember):
            return obj.value if name == "value" else obj.name if name == "name" else Unknown(f"{obj.name}.{name}")
        if isinstance(obj, Instance):
            return obj.kwargs.get(name, Unknown(f"{obj.cls.name}().{name}"))
        if isinstance(obj, (ParserObj, *_CONCRETE)):
            return BoundMethod(obj, name)
        return Unknown(_text(node) if node is not None else name)

    def _ev_Subscript(self, node: ast.Subscript, scope: Scope) -> Any:
        container = self.ev(node.value, scope)
        key = self.ev(node.slice, scope)
        if isinstance(container, (dict, list, tuple, str)) and _concrete(key):
            return container[key]
        return Unknown(_text(node))

    def _ev_Slice(self, node: ast.Slice, scope: Scope) -> Any:
        parts = [self.ev(p, scope) if p is not None else None for p in (node.lower, node.upper, node.step)]
        return slice(*parts) if all(_concrete(p) for p in parts) else Unknown(_text(node))

    def _elements(self, elts: list[ast.expr], scope: Scope) -> list[Any] | None:
        out: list[Any] = []
        for e in elts:
            if isinstance(e, ast.Starred):
                inner = self.iterate(self.ev(e.value, scope))
                if inner is None:
                    return None
                out += inner
            else:
                out.append(self.ev(e, scope))
        return out

    def _ev_List(self, node: ast.List, scope: Scope) -> Any:
        out = self._elements(node.elts, scope)
        return out if out is not None else Unknown(_text(node))

    def _ev_Tuple(self, node: ast.Tuple, scope: Scope) -> Any:
        out = self._elements(node.elts, scope)
        return tuple(out) if out is not None else Unknown(_text(node))

    def _ev_Set(self, node: ast.Set, scope: Scope) -> Any:
        out = self._elements(node.elts, scope)
        return set(out) if out is not None and all(_hashable(v) for v in out) else Unknown(_text(node))

    def _ev_Dict(self, node: ast.Dict, scope: Scope) -> Any:
        out: dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values):
            value = self.ev(v, scope)
            if k is None:
                if not isinstance(value, dict):
                    return Unknown(_text(node))
                out.update(value)
                continue
            key = self.ev(k, scope)
            if not _hashable(key) or isinstance(key, Unknown):
                return Unknown(_text(node))
            out[key] = value
        return out

    def _ev_JoinedStr(self, node: ast.JoinedStr, scope: Scope) -> Any:
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
                continue
            value = self.ev(v.value, scope)
            if not isinstance(value, (str, int, float, bool, type(None))) or v.format_spec is not None:
                return Unknown(_text(node))
            parts.append(repr(value) if v.conversion == ord("r") else str(value))
        return "".join(parts)

    def _ev_BinOp(self, node: ast.BinOp, scope: Scope) -> Any:
        return self.binop(node.op, self.ev(node.left, scope), self.ev(node.right, scope), node)

    def binop(self, op: ast.operator, left: Any, right: Any, node: ast.AST) -> Any:
        if not (_concrete(left) and _concrete(right)):
            return Unknown(_text(node))
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.BitOr):
            return left | right
        if isinstance(op, ast.Mod) and isinstance(left, str):
            return left % right
        if isinstance(op, ast.Div):
            return left / right
        if isinstance(op, ast.FloorDiv):
            return left // right
        if isinstance(op, ast.Pow):
            return left**right
        return Unknown(_text(node))

    def _ev_UnaryOp(self, node: ast.UnaryOp, scope: Scope) -> Any:
        value = self.ev(node.operand, scope)
        if not _concrete(value):
            return Unknown(_text(node))
        if isinstance(node.op, ast.Not):
            return not value
        if isinstance(node.op, ast.USub):
            return -value
        return value if isinstance(node.op, ast.UAdd) else Unknown(_text(node))

    def _ev_BoolOp(self, node: ast.BoolOp, scope: Scope) -> Any:
        values = [self.ev(v, scope) for v in node.values]
        if not all(_concrete(v) for v in values):
            return Unknown(_text(node))
        result = values[0]
        for v in values[1:]:
            result = (result and v) if isinstance(node.op, ast.And) else (result or v)
        return result

    def _ev_Compare(self, node: ast.Compare, scope: Scope) -> Any:
        left = self.ev(node.left, scope)
        for op, comp in zip(node.ops, node.comparators):
            right = self.ev(comp, scope)
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, dict):
                right = list(right)
            if not (_concrete(left) and _concrete(right)):
                return Unknown(_text(node))
            ok = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.In: lambda a, b: a in b,
                  ast.NotIn: lambda a, b: a not in b, ast.Is: lambda a, b: a is b,
                  ast.IsNot: lambda a, b: a is not b, ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
                  ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}[type(op)](left, right)
            if not ok:
                return False
            left = right
        return True

    def _ev_IfExp(self, node: ast.IfExp, scope: Scope) -> Any:
        test = self.ev(node.test, scope)
        if _concrete(test):
            return self.ev(node.body if test else node.orelse, scope)
        return Unknown(_text(node))

    def _ev_Lambda(self, node: ast.Lambda, scope: Scope) -> Any:
        return FuncRef(scope.module, node, scope=scope if scope.vars is not None else None)

    def _comprehension(self, node: Any, scope: Scope, make: Callable[[Scope], Any]) -> list[Any] | None:
        results: list[Any] = []

        def walk(i: int, inner: Scope) -> bool:
            if i == len(node.generators):
                results.append(make(inner))
                return True
            gen = node.generators[i]
            items = self.iterate(self.ev(gen.iter, inner))
            if items is None:
                return False
            for item in items:
                child = Scope(inner.module, self, parent=inner)
                self.assign(gen.target, item, child)
                tests = [self.ev(t, child) for t in gen.ifs]
                if not all(_concrete(t) for t in tests):
                    return False
                if all(tests) and not walk(i + 1, child):
                    return False
            return True

        return results if walk(0, scope) else None

    def _ev_ListComp(self, node: ast.ListComp, scope: Scope) -> Any:
        out = self._comprehension(node, scope, lambda s: self.ev(node.elt, s))
        return out if out is not None else Unknown(_text(node))

    _ev_GeneratorExp = _ev_ListComp

    def _ev_SetComp(self, node: ast.SetComp, scope: Scope) -> Any:
        out = self._comprehension(node, scope, lambda s: self.ev(node.elt, s))
        return set(out) if out is not None and all(_hashable(v) for v in out) else Unknown(_text(node))

    def _ev_DictComp(self, node: ast.DictComp, scope: Scope) -> Any:
        out = self._comprehension(node, scope, lambda s: (self.ev(node.key, s), self.ev(node.value, s)))
        return dict(out) if out is not None and all(_hashable(k) for k, _ in out) else Unknown(_text(node))

    def iterate(self, value: Any) -> list[Any] | None:
        """The items a `for` over `value` sees, when statically known."""
        if isinstance(value, dict):
            return list(value)
        if isinstance(value, (list, tuple, str)):
            return list(value)
        if isinstance(value, (set, frozenset)):
            return sorted(value, key=repr)
        if isinstance(value, ClassRef) and self.is_enum(value):
            return list(self.enum_members(value))
        return None

    # -- statements: see _history_exec.Interpreter

    def exec_block(self, body: list[ast.stmt], scope: Scope) -> None:
        raise NotImplementedError

    def assign(self, target: ast.expr, value: Any, scope: Scope) -> None:
        raise NotImplementedError


