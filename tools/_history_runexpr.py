"""The expression half of the selection interpreter (`_history_run`): values, names, attributes, calls.

Values are Python's own where the code computes them (ints, strings, lists, tuples), and small records for what the
release defines (modules, functions, classes, enum members, NamedTuples). A value from outside the package is an
`Ext` known by its dotted name; comparing it, or asking whether it is true, raises `Unknowable`.
"""

from __future__ import annotations

import ast
import operator
import posixpath
from typing import Any

from _history_ast import Project
from _history_runtypes import (
    _BIN,
    _CMP,
    _DTYPE_ALIAS,
    _EXCEPTIONS,
    _NATIVE,
    _NATIVE_METHODS,
    _PURE,
    _UNKNOWN,
    NT,
    Cls,
    Ext,
    Func,
    Machine,
    Member,
    Mod,
    Raised,
    Super,
    Unknowable,
    _Return,
    _Unknown,
)


class Evaluator:
    """Expressions and calls; statements and modules are `_history_run.Runner`'s."""

    machine: Machine
    project: Project

    def module(self, name: str) -> Mod:
        raise NotImplementedError

    def import_name(self, dotted: str) -> Any:
        raise NotImplementedError

    def run_body(self, body: list[ast.stmt], mod: Mod, env: dict[str, Any]) -> None:
        raise NotImplementedError

    def tick(self) -> None:
        raise NotImplementedError

    def truth(self, value: Any) -> bool:
        if isinstance(value, (Ext, _Unknown, Func, Cls)) and not isinstance(value, (Func, Cls)):
            raise Unknowable(f"truth of {value}")
        return bool(value)

    # -- expressions

    def ev(self, node: ast.AST, mod: Mod, env: dict[str, Any]) -> Any:
        self.tick()
        method = getattr(self, "_ev_" + type(node).__name__, None)
        if method is None:
            raise Unknowable(f"expression {type(node).__name__}")
        return method(node, mod, env)

    def _ev_Constant(self, node: ast.Constant, mod: Mod, env: dict[str, Any]) -> Any:
        return node.value

    def _ev_Name(self, node: ast.Name, mod: Mod, env: dict[str, Any]) -> Any:
        name = node.id
        for scope in (env, mod.ns):
            if name in scope:
                value = scope[name]
                if value is _UNKNOWN:
                    raise Unknowable(f"{name} could not be computed")
                return value
        if name in _PURE:
            return _PURE[name]
        if name in _EXCEPTIONS or name in ("isinstance", "getattr", "hasattr", "super", "NotImplemented", "type",
                                           "object", "issubclass", "callable", "next", "iter"):
            return Ext(name)
        raise Unknowable(f"name {name}")

    def _ev_Attribute(self, node: ast.Attribute, mod: Mod, env: dict[str, Any]) -> Any:
        return self.attr(self.ev(node.value, mod, env), node.attr)

    def _ev_Subscript(self, node: ast.Subscript, mod: Mod, env: dict[str, Any]) -> Any:
        value = self.ev(node.value, mod, env)
        key = self.ev(node.slice, mod, env)
        if isinstance(value, Cls) and isinstance(key, str):  # Enum["NAME"]
            member = self.attr(value, key)
            if isinstance(member, Member):
                return member
            raise Raised("KeyError", key)
        if isinstance(value, (Ext, _Unknown)):
            return Ext(f"{value}[...]")
        try:
            return value[key]
        except (KeyError, IndexError) as exc:
            raise Raised(type(exc).__name__, str(key)) from None
        except TypeError:
            raise Unknowable("subscript") from None

    def _ev_Slice(self, node: ast.Slice, mod: Mod, env: dict[str, Any]) -> Any:
        return slice(*(None if p is None else self.ev(p, mod, env) for p in (node.lower, node.upper, node.step)))

    def _ev_List(self, node: ast.List, mod: Mod, env: dict[str, Any]) -> Any:
        out: list[Any] = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                out.extend(self.ev(elt.value, mod, env))
            else:
                out.append(self.ev(elt, mod, env))
        return out

    def _ev_Tuple(self, node: ast.Tuple, mod: Mod, env: dict[str, Any]) -> Any:
        return tuple(self._ev_List(node, mod, env))  # type: ignore[arg-type]

    def _ev_Set(self, node: ast.Set, mod: Mod, env: dict[str, Any]) -> Any:
        return _hashable_set(self._ev_List(node, mod, env))  # type: ignore[arg-type]

    def _ev_Dict(self, node: ast.Dict, mod: Mod, env: dict[str, Any]) -> Any:
        out: dict[Any, Any] = {}
        for k, v in zip(node.keys, node.values):
            if k is None:
                out.update(self.ev(v, mod, env))
            else:
                out[_key(self.ev(k, mod, env))] = self.ev(v, mod, env)
        return out

    def _ev_JoinedStr(self, node: ast.JoinedStr, mod: Mod, env: dict[str, Any]) -> Any:
        parts = []
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                v = self.ev(value.value, mod, env)
                if isinstance(v, (Ext, _Unknown)):
                    raise Unknowable("formatting an unknown value")
                text = repr(v) if value.conversion == ord("r") else str(v)
                if value.format_spec is not None:
                    spec = self._ev_JoinedStr(value.format_spec, mod, env)  # type: ignore[arg-type]
                    text = format(v, spec)
                parts.append(text)
            else:
                parts.append(str(self.ev(value, mod, env)))
        return "".join(parts)

    def _ev_BinOp(self, node: ast.BinOp, mod: Mod, env: dict[str, Any]) -> Any:
        left, right = self.ev(node.left, mod, env), self.ev(node.right, mod, env)
        op = _BIN.get(type(node.op))
        if op is None or _opaque(left) or _opaque(right):
            if isinstance(node.op, ast.BitOr):  # `X | None` in an annotation-like value
                return Ext("union")
            raise Unknowable("binary operation")
        try:
            return op(left, right)
        except TypeError:
            raise Unknowable("binary operation") from None

    def _ev_UnaryOp(self, node: ast.UnaryOp, mod: Mod, env: dict[str, Any]) -> Any:
        value = self.ev(node.operand, mod, env)
        if isinstance(node.op, ast.Not):
            return not self.truth(value)
        if _opaque(value):
            raise Unknowable("unary operation")
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}[type(node.op)](value)

    def _ev_BoolOp(self, node: ast.BoolOp, mod: Mod, env: dict[str, Any]) -> Any:
        """Three-valued: an operand that decides (`False` in an `and`, `True` in an `or`) decides even when an
        operand before it is unknown (the operands read state, they do not change it)."""
        value: Any = None
        unknown: Unknowable | None = None
        for operand in node.values:
            try:
                value = self.ev(operand, mod, env)
                decides = self.truth(value) == isinstance(node.op, ast.Or)
            except Unknowable as exc:
                unknown = unknown or exc
                continue
            if decides:
                return value
        if unknown is not None:
            raise unknown
        return value

    def _ev_Compare(self, node: ast.Compare, mod: Mod, env: dict[str, Any]) -> Any:
        left = self.ev(node.left, mod, env)
        for op, comp in zip(node.ops, node.comparators):
            right = self.ev(comp, mod, env)
            if isinstance(op, (ast.In, ast.NotIn)):
                if _opaque(right) or (_opaque(left) and not isinstance(left, Ext)):
                    raise Unknowable("membership in an unknown value")
            elif (_opaque(left) or _opaque(right)) and not (isinstance(left, Ext) and isinstance(right, Ext)) \
                    and not (isinstance(op, (ast.Is, ast.IsNot)) and (left is None or right is None)
                             and not isinstance(left, _Unknown) and not isinstance(right, _Unknown)):
                raise Unknowable(f"comparison with {left if _opaque(left) else right}")
            try:
                ok = _CMP[type(op)](left, right)
            except TypeError:
                raise Unknowable("comparison") from None
            if not ok:
                return False
            left = right
        return True

    def _ev_IfExp(self, node: ast.IfExp, mod: Mod, env: dict[str, Any]) -> Any:
        return self.ev(node.body if self.truth(self.ev(node.test, mod, env)) else node.orelse, mod, env)

    def _ev_Lambda(self, node: ast.Lambda, mod: Mod, env: dict[str, Any]) -> Any:
        return Func(mod, node, dict(env))

    def _ev_NamedExpr(self, node: ast.NamedExpr, mod: Mod, env: dict[str, Any]) -> Any:
        env[node.target.id] = value = self.ev(node.value, mod, env)
        return value

    def _comprehension(self, node: Any, mod: Mod, env: dict[str, Any], make: Any) -> list[Any]:
        out: list[Any] = []
        inner = dict(env)

        def walk(i: int) -> None:
            if i == len(node.generators):
                out.append(make(inner))
                return
            gen = node.generators[i]
            items = self.ev(gen.iter, mod, inner)
            if not isinstance(items, (list, tuple, set, frozenset, dict, str)):
                raise Unknowable("comprehension over an unknown value")
            for item in list(items):
                self.assign(gen.target, item, mod, inner)
                if all(self.truth(self.ev(cond, mod, inner)) for cond in gen.ifs):
                    walk(i + 1)

        walk(0)
        return out

    def _ev_ListComp(self, node: ast.ListComp, mod: Mod, env: dict[str, Any]) -> Any:
        return self._comprehension(node, mod, env, lambda inner: self.ev(node.elt, mod, inner))

    _ev_GeneratorExp = _ev_ListComp

    def _ev_SetComp(self, node: ast.SetComp, mod: Mod, env: dict[str, Any]) -> Any:
        return _hashable_set(self._ev_ListComp(node, mod, env))  # type: ignore[arg-type]

    def _ev_DictComp(self, node: ast.DictComp, mod: Mod, env: dict[str, Any]) -> Any:
        pairs = self._comprehension(node, mod, env, lambda i: (self.ev(node.key, mod, i), self.ev(node.value, mod, i)))
        return dict(pairs)

    def assign(self, target: ast.expr, value: Any, mod: Mod, env: dict[str, Any]) -> None:
        raise NotImplementedError

    # -- attributes

    def attr(self, obj: Any, name: str) -> Any:
        if isinstance(obj, Mod):
            if name in obj.ns:
                if obj.ns[name] is _UNKNOWN:
                    raise Unknowable(f"{obj.name}.{name} could not be computed")
                return obj.ns[name]
            sub = f"{obj.name}.{name}"
            try:
                return self.module(sub)
            except Unknowable:
                pass
            if "__getattr__" in obj.ns:
                return self.call(obj.ns["__getattr__"], [name], {})
            raise Unknowable(f"{sub} not found")
        if isinstance(obj, Cls):
            return self.class_attr(obj, name, obj)
        if isinstance(obj, Member):
            if name == "name":
                return obj.name
            if name == "value":
                return obj.value
            return self.class_attr(obj.cls, name, obj)
        if isinstance(obj, NT):
            if name in obj.fields:
                return obj[obj.fields.index(name)]
            if name == "_asdict":
                return lambda: dict(zip(obj.fields, obj))
            return self.class_attr(obj.cls, name, obj)
        if isinstance(obj, Super):
            mro = obj.cls.mro() if not isinstance(obj.obj, (NT, Member)) else obj.cls.mro()
            for c in mro[1:]:
                found = self._own_attr(c, name, obj.obj)
                if found is not _MISSING:
                    return found
            raise Unknowable(f"super().{name}")
        if isinstance(obj, Ext):
            if obj.name == "typing" and name == "TYPE_CHECKING":
                return False
            if obj.name in ("torch", "torch.dtype") or obj.name.startswith("torch."):
                if obj.name == "torch":
                    return Ext(f"torch.{_DTYPE_ALIAS.get(name, name)}")
                return Ext(f"{obj.name}.{name}")
            return Ext(f"{obj.name}.{name}")
        fact = getattr(obj, "fact", None)
        if fact is not None:  # the platform
            value = fact(name)
            return value if value is not None else self.class_attr(obj.cls, name, obj)
        if isinstance(obj, _NATIVE) and name in _NATIVE_METHODS:
            return getattr(obj, name)
        if isinstance(obj, Func) and name in ("__name__", "__qualname__"):
            return getattr(obj.node, "name", "<lambda>")
        raise Unknowable(f"attribute {name} of {type(obj).__name__}")

    def class_attr(self, cls: Cls, name: str, via: Any) -> Any:
        if name == "__name__" or name == "__qualname__":
            return cls.name
        if name == "__module__":
            return cls.mod.name
        for c in cls.mro():
            found = self._own_attr(c, name, via)
            if found is not _MISSING:
                return found
        raise Unknowable(f"{cls.name}.{name}")

    def _own_attr(self, cls: Cls, name: str, via: Any) -> Any:
        is_enum = bool(cls.base_names() & {"Enum", "IntEnum", "StrEnum"})
        for stmt in reversed(cls.node.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                func = self.make_func(stmt, cls.mod, None)
                func.owner = cls
                if func.kind == "staticmethod":
                    return func
                if func.kind == "classmethod":
                    return Func(func.mod, func.node, None, via if not isinstance(via, Member) else via.cls,
                                "classmethod", cls, True)
                if isinstance(via, Cls):
                    return func
                bound = Func(func.mod, func.node, None, via, func.kind, cls, True)
                return self.call(bound, [], {}) if func.kind == "property" else bound
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
                stmt, ast.AnnAssign) and stmt.value is not None else []
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                value = self.ev(stmt.value, cls.mod, {})  # type: ignore[union-attr]
                if is_enum and not name.startswith("_") and not isinstance(value, Func):
                    return Member(_enum_root(cls), name, value)
                return value
        return _MISSING

    def make_func(self, node: ast.FunctionDef | ast.AsyncFunctionDef, mod: Mod, closure: dict[str, Any] | None) -> Func:
        names = {d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else "" for d in
                 node.decorator_list}
        kind = next((k for k in ("classmethod", "staticmethod", "property") if k in names), "function")
        return Func(mod, node, closure, kind=kind)

    # -- calls

    def _ev_Call(self, node: ast.Call, mod: Mod, env: dict[str, Any]) -> Any:
        fn = self.ev(node.func, mod, env)
        args: list[Any] = []
        for a in node.args:
            if isinstance(a, ast.Starred):
                value = self.ev(a.value, mod, env)
                if _opaque(value):
                    raise Unknowable("star arguments")
                args.extend(value)
            else:
                args.append(self.ev(a, mod, env))
        kwargs: dict[str, Any] = {}
        for k in node.keywords:
            value = self.ev(k.value, mod, env)
            if k.arg is None:
                if not isinstance(value, dict):
                    raise Unknowable("keyword star arguments")
                kwargs.update(value)
            else:
                kwargs[k.arg] = value
        if fn == Ext("super"):
            owner, first = env.get("__class__"), env.get("__self__")
            if not isinstance(owner, Cls):
                raise Unknowable("super() outside a method")
            return Super(owner, first)
        return self.call(fn, args, kwargs)

    def call(self, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if isinstance(fn, Func):
            return self.run_func(fn, args, kwargs)
        if isinstance(fn, Cls):
            return self.construct(fn, args, kwargs)
        if isinstance(fn, Ext):
            return self.external(fn.name, args, kwargs)
        if callable(fn):
            py_args = [self._native(a) for a in args]
            py_kwargs = {k: self._native(v) for k, v in kwargs.items()}
            try:
                return fn(*py_args, **py_kwargs)
            except (TypeError, ValueError) as exc:
                raise Unknowable(f"native call: {exc}") from None
        raise Unknowable(f"call of {type(fn).__name__}")

    def _native(self, value: Any) -> Any:
        if isinstance(value, Func):
            return lambda *a, **k: self.call(value, list(a), k)
        return value

    def run_func(self, fn: Func, args: list[Any], kwargs: dict[str, Any]) -> Any:
        node = fn.node
        env: dict[str, Any] = dict(fn.closure or {})
        if fn.is_bound:
            args = [fn.bound, *args]
        params = node.args
        positional = [*params.posonlyargs, *params.args]
        defaults = [None] * (len(positional) - len(params.defaults)) + list(params.defaults)
        for i, p in enumerate(positional):
            if i < len(args):
                env[p.arg] = args[i]
            elif p.arg in kwargs:
                env[p.arg] = kwargs.pop(p.arg)
            elif defaults[i] is not None:
                env[p.arg] = self.ev(defaults[i], fn.mod, {})  # type: ignore[arg-type]
            else:
                raise Unknowable(f"missing argument {p.arg}")
        if params.vararg is not None:
            env[params.vararg.arg] = tuple(args[len(positional):])
        elif len(args) > len(positional):
            raise Unknowable("too many arguments")
        for p, d in zip(params.kwonlyargs, params.kw_defaults):
            if p.arg in kwargs:
                env[p.arg] = kwargs.pop(p.arg)
            elif d is not None:
                env[p.arg] = self.ev(d, fn.mod, {})
            else:
                raise Unknowable(f"missing argument {p.arg}")
        if params.kwarg is not None:
            env[params.kwarg.arg] = kwargs
        elif kwargs:
            raise Unknowable(f"unexpected arguments {sorted(kwargs)}")
        if fn.owner is not None:
            env["__class__"] = fn.owner
            if positional:
                env["__self__"] = env[positional[0].arg]
        if isinstance(node, ast.Lambda):
            return self.ev(node.body, fn.mod, env)
        try:
            self.run_body(node.body, fn.mod, env)
        except _Return as r:
            return r.value
        return None

    def construct(self, cls: Cls, args: list[Any], kwargs: dict[str, Any]) -> Any:
        bases = cls.base_names()
        if "NamedTuple" in bases:
            fields, values = [], []
            for stmt in cls.node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    fields.append(stmt.target.id)
                    i = len(fields) - 1
                    if i < len(args):
                        values.append(args[i])
                    elif stmt.target.id in kwargs:
                        values.append(kwargs[stmt.target.id])
                    elif stmt.value is not None:
                        values.append(self.ev(stmt.value, cls.mod, {}))
                    else:
                        raise Unknowable(f"{cls.name}: missing {stmt.target.id}")
            out = NT(values)
            out.cls, out.fields = cls, tuple(fields)
            return out
        if bases & {"Enum", "IntEnum", "StrEnum"} and len(args) == 1:
            for stmt in cls.node.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
                    member = self.attr(cls, stmt.targets[0].id)
                    if isinstance(member, Member) and member.value == args[0]:
                        return member
            raise Raised("ValueError", f"{args[0]!r} is not a valid {cls.name}")
        raise Unknowable(f"instance of {cls.name}")

    def external(self, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        short = name.rsplit(".", 1)[-1]
        if name in _EXCEPTIONS:
            return Ext(name)
        if name == "isinstance":
            obj, kinds = args
            kinds = kinds if isinstance(kinds, tuple) else (kinds,)
            if all(isinstance(k, type) for k in kinds):
                return isinstance(obj, kinds)
            if all(isinstance(k, Cls) for k in kinds):
                owner = obj.cls if isinstance(obj, (NT, Member)) else None
                return owner is not None and any(k in owner.mro() for k in kinds)
            raise Unknowable("isinstance")
        if name in ("getattr", "hasattr"):
            try:
                value = self.attr(args[0], args[1])
            except Unknowable:
                if len(args) > 2 and name == "getattr":
                    return args[2]
                if name == "hasattr":
                    return False
                raise
            return True if name == "hasattr" else value
        if name == "torch.cuda.get_device_capability":  # the machine's, as torch answers: (major, minor)
            return (self.machine.major, self.machine.minor)
        if name == "torch.cuda.is_available":
            return True
        if name in ("os.getenv", "os.environ.get"):
            return args[1] if len(args) > 1 else kwargs.get("default")
        if name == "os.path.join":
            return posixpath.join(*args)
        if name == "os.path.dirname":
            return posixpath.dirname(args[0])
        if name in ("os.path.exists", "os.path.isfile"):
            return args[0] in self.project.files
        if name == "importlib.import_module":
            return self.import_name(args[0])
        if name == "importlib.util.find_spec":
            if str(args[0]).split(".")[0] == "flashinfer" and not self.machine.flashinfer:
                return None
            return Ext(f"spec:{args[0]}")
        if short in ("cast",) and len(args) == 2:
            return args[1]
        if short in ("cache", "lru_cache", "wraps"):
            return args[0] if args and isinstance(args[0], Func) else (lambda f: f)
        return Ext(f"{name}()")


class _Missing:
    pass


_MISSING = _Missing()


def _opaque(value: Any) -> bool:
    return isinstance(value, (Ext, _Unknown))


def _key(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        raise Unknowable("unhashable key") from None
    return value


def _hashable_set(values: list[Any]) -> Any:
    try:
        return set(values)
    except TypeError:
        return list(values)


def _enum_root(cls: Cls) -> Cls:
    return cls
