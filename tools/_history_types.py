"""What classes and type annotations say, statically: a class's bases and attributes, an Enum's members, a
dataclass's (or msgspec Struct's) fields with their defaults, and the parts of a type annotation (bool, int,
Literal values, list of X, a dataclass, an Enum...) as vLLM's `get_kwargs` and SGLang's `add_cli_args_from_dataclass`
inspect them at run time.
"""

from __future__ import annotations

import ast
from typing import Any

from _history_ast import (
    FIELD_FACTORIES,
    ClassField,
    ClassRef,
    EnumMember,
    External,
    FieldSpec,
    FuncRef,
    ModRef,
    Module,
    Unknown,
    _ImportDef,
    class_body_fields,
    import_target,
    is_dataclass_node,
)

Atom = tuple
"""A type-annotation part: ("bool",) ("int",) ("float",) ("str",) ("none",) ("any",) ("dict",)
("literal", values) ("list", atoms) ("set", atoms) ("tuple", atoms, has_ellipsis) ("dataclass", ClassRef)
("enum", ClassRef) ("class", name)."""

_MISSING = object()
_ENUM_BASES = frozenset({"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ReprEnum"})
_BUILTIN_ATOMS = {"bool": "bool", "int": "int", "float": "float", "str": "str", "dict": "dict", "Dict": "dict",
                  "Mapping": "dict", "MutableMapping": "dict", "Any": "any", "object": "any"}
_LIST_NAMES = frozenset({"list", "List"})
_SET_NAMES = frozenset({"set", "Set", "frozenset", "FrozenSet"})
_TUPLE_NAMES = frozenset({"tuple", "Tuple"})
_DICT_NAMES = frozenset({"dict", "Dict", "Mapping", "MutableMapping", "OrderedDict", "defaultdict"})


class TypesMixin:
    """Class and type knowledge for the evaluator (which provides `project`, `ev`, `global_value`, `call_value`)."""

    project: Any
    _class_scopes: dict[int, Any]

    # -- classes

    def bases(self, cls: ClassRef) -> list[Any]:
        return [self.ev(b, self.module_scope(cls.module)) for b in cls.node.bases]

    def mro(self, cls: ClassRef) -> list[ClassRef]:
        """The class and its package bases, depth first (C3 is not needed for the single-line hierarchies read)."""
        out: list[ClassRef] = []
        stack = [cls]
        while stack and len(out) < 50:
            c = stack.pop(0)
            if any(c.node is o.node for o in out):
                continue
            out.append(c)
            stack = [b for b in self.bases(c) if isinstance(b, ClassRef)] + stack
        return out

    def is_enum(self, cls: ClassRef) -> bool:
        for c in self.mro(cls):
            for b in self.bases(c):
                if isinstance(b, External) and b.short in _ENUM_BASES:
                    return True
        return False

    def enum_members(self, cls: ClassRef) -> list[EnumMember]:
        out = []
        for stmt in cls.node.body:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else []
            for t in targets:
                if isinstance(t, ast.Name) and not t.id.startswith("_"):
                    value = self.ev(stmt.value, self.module_scope(cls.module))
                    out.append(EnumMember(cls, t.id, value))
        return out

    def class_attr(self, cls: ClassRef, name: str, after: ClassRef | None = None) -> Any:
        """`cls.name` looked up along the MRO (starting after `after`, for `super()`)."""
        chain = self.mro(cls)
        if after is not None:
            idx = next((i for i, c in enumerate(chain) if c.node is after.node), -1)
            chain = chain[idx + 1:]
        for c in chain:
            found = self._own_attr(c, cls, name)
            if found is not _MISSING:
                return found
        if name == "__name__":
            return cls.name
        if name == "__members__" and self.is_enum(cls):
            return {m.name: m for m in self.enum_members(cls)}
        return Unknown(f"{cls.name}.{name}")

    def _own_attr(self, c: ClassRef, bound: ClassRef, name: str) -> Any:
        hit: Any = _MISSING
        for stmt in c.node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                hit = FuncRef(c.module, stmt, owner=c, bound=bound)
            elif isinstance(stmt, ast.ClassDef) and stmt.name == name:
                hit = ClassRef(c.module, stmt)
            elif isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                value = self.ev(stmt.value, self.class_scope(c))
                hit = EnumMember(c, name, value) if self.is_enum(c) and not name.startswith("_") else value
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == name \
                    and stmt.value is not None:
                hit = self.default_value(stmt.value, c.module)
        return hit

    def class_scope(self, cls: ClassRef) -> Any:
        """The scope a class body's statements see: its own earlier attributes (lazily), then the module."""
        from _history_scope import Scope, Thunk

        scope = self._class_scopes.get(id(cls.node))
        if scope is None:
            scope = self._class_scopes[id(cls.node)] = Scope(cls.module, self)
            for stmt in cls.node.body:
                targets = stmt.targets if isinstance(stmt, ast.Assign) else \
                    [stmt.target] if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else []
                for t in targets:
                    if isinstance(t, ast.Name):
                        scope.vars[t.id] = Thunk(stmt.value, scope)
        return scope

    def default_value(self, expr: ast.expr | None, module: Module) -> Any:
        """A field's default as the class attribute reads: `field(default=X)` is X, `default_factory=f` is f()."""
        if expr is None:
            return Unknown("<no default>")
        scope = self.module_scope(module)
        value = self.ev(expr, scope)
        if isinstance(value, FieldSpec):
            if "default" in value.kwargs:
                return self.ev(value.kwargs["default"], scope)
            if value.args:
                return self.ev(value.args[0], scope)
            if "default_factory" in value.kwargs:
                factory = value.kwargs["default_factory"]
                made = self.call_value(self.ev(factory, scope), [], {}, factory, scope)
                return made if not isinstance(made, Unknown) else Unknown(ast.unparse(factory) + "()")
            return Unknown("<no default>")
        return value

    def has_default(self, f: ClassField) -> bool:
        if f.default is None:
            return False
        if isinstance(f.default, ast.Call) and _call_name(f.default) in FIELD_FACTORIES:
            kws = {k.arg for k in f.default.keywords}
            return bool(kws & {"default", "default_factory"}) or bool(f.default.args)
        return True

    def fields(self, cls: ClassRef) -> list[ClassField]:
        """Dataclass fields in definition order, bases first; a redefined field keeps its first position. A class
        whose annotations a module assigns from other classes (SGLang's namespaces) gets theirs too."""
        order: dict[str, ClassField] = {}
        for c in reversed(self.mro(cls)):
            for f in self._namespace_fields(c) + class_body_fields(c):
                order[f.name] = f
        return list(order.values())

    def _namespace_fields(self, cls: ClassRef) -> list[ClassField]:
        """`Cls.__annotations__ = {**_annotations, ...}` where `_annotations, ... = collect(NAMESPACES)`: the fields
        of the listed classes."""
        out: list[ClassField] = []
        for stmt in cls.module.tree.body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and ast.unparse(stmt.targets[0]) == f"{cls.name}.__annotations__"
                    and isinstance(stmt.value, ast.Dict)):
                continue
            for key, value in zip(stmt.value.keys, stmt.value.values):
                if key is None and isinstance(value, ast.Name):
                    out += self._fields_from_collector(cls.module, value.id)
        return out

    def _fields_from_collector(self, module: Module, name: str) -> list[ClassField]:
        for stmt in module.tree.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Tuple) \
                    and isinstance(stmt.value, ast.Call) and stmt.value.args:
                names = [e.id for e in stmt.targets[0].elts if isinstance(e, ast.Name)]
                if names[:1] == [name]:
                    sources = self.ev(stmt.value.args[0], self.module_scope(module))
                    if isinstance(sources, (list, tuple)):
                        return [f for c in sources if isinstance(c, ClassRef) for f in self.fields(c)]
        return []

    def is_dataclass_like(self, cls: ClassRef) -> bool:
        for c in self.mro(cls):
            if is_dataclass_node(c.node):
                return True
            for b in self.bases(c):
                if isinstance(b, External) and b.short in ("Struct", "BaseModel"):
                    return True
        return False

    # -- symbols and types

    def resolve_symbol(self, expr: ast.expr, module: Module, depth: int = 0) -> tuple:
        """What a name in a type annotation denotes: ("class", ClassRef), ("alias", expr, module),
        ("external", dotted), ("module", name), or ("unknown",)."""
        if depth > 20:
            return ("unknown",)
        if isinstance(expr, ast.Name):
            found = self.project.find_def(module, expr.id)
            if found is None:
                return ("external", "builtins." + expr.id) if expr.id in _BUILTIN_ATOMS or expr.id in (
                    "list", "tuple", "set", "frozenset", "type", "None") else ("unknown",)
            return self._resolve_def(found[0], expr.id, found[1], depth)
        if isinstance(expr, ast.Attribute):
            base = self.resolve_symbol(expr.value, module, depth + 1)
            if base[0] == "external":
                return ("external", f"{base[1]}.{expr.attr}")
            if base[0] == "module":
                mod = self.project.module(base[1])
                found = self.project.find_def(mod, expr.attr) if mod is not None else None
                if found is not None:
                    return self._resolve_def(found[0], expr.attr, found[1], depth + 1)
                if self.project.has_module(f"{base[1]}.{expr.attr}"):
                    return ("module", f"{base[1]}.{expr.attr}")
            if base[0] == "class":
                value = self.class_attr(base[1], expr.attr)
                if isinstance(value, ClassRef):
                    return ("class", value)
            return ("unknown",)
        return ("unknown",)

    def _resolve_def(self, module: Module, name: str, d: ast.AST, depth: int) -> tuple:
        if isinstance(d, ast.ClassDef):
            return ("class", ClassRef(module, d))
        if isinstance(d, (ast.Assign, ast.AnnAssign)):
            return ("alias", d.value, module)
        if isinstance(d, _ImportDef):
            target = import_target(self.project, module, d)
            if isinstance(target, tuple):
                mod = self.project.module(target[1])
                found = self.project.find_def(mod, target[2]) if mod is not None else None
                if found is None:
                    return ("unknown",)
                return self._resolve_def(found[0], target[2], found[1], depth + 1)
            if isinstance(target, ModRef):
                return ("module", target.name)
            return ("external", target.name)
        return ("unknown",)

    def type_atoms(self, expr: ast.expr | None, module: Module, depth: int = 0) -> list[Atom]:
        """The flattened parts of an annotation (Optional/Union/Annotated/aliases see-through)."""
        if expr is None or depth > 25:
            return [("any",)]
        if isinstance(expr, ast.Constant):
            if expr.value is None:
                return [("none",)]
            if isinstance(expr.value, str):
                try:
                    return self.type_atoms(ast.parse(expr.value, mode="eval").body, module, depth + 1)
                except SyntaxError:
                    return [("any",)]
            return [("any",)]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return self.type_atoms(expr.left, module, depth + 1) + self.type_atoms(expr.right, module, depth + 1)
        if isinstance(expr, ast.Subscript):
            return self._subscript_atoms(expr, module, depth)
        sym = self.resolve_symbol(expr, module)
        return self._symbol_atoms(sym, depth)

    def _symbol_atoms(self, sym: tuple, depth: int) -> list[Atom]:
        if sym[0] == "external":
            short = sym[1].rsplit(".", 1)[-1]
            if short in _BUILTIN_ATOMS:
                return [(_BUILTIN_ATOMS[short],)]
            if short == "None" or short == "NoneType":
                return [("none",)]
            if short in _LIST_NAMES:
                return [("list", [("any",)])]
            if short in _SET_NAMES:
                return [("set", [("any",)])]
            if short in _TUPLE_NAMES:
                return [("tuple", [("any",)], True)]
            return [("class", sym[1])]
        if sym[0] == "alias":
            return self.type_atoms(sym[1], sym[2], depth + 1)
        if sym[0] == "class":
            cls = sym[1]
            if self.is_enum(cls):
                return [("enum", cls)]
            if self.is_dataclass_like(cls):
                return [("dataclass", cls)]
            return [("class", cls.name)]
        return [("any",)]

    def _subscript_atoms(self, expr: ast.Subscript, module: Module, depth: int) -> list[Atom]:
        sym = self.resolve_symbol(expr.value, module)
        elems = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
        short = sym[1].rsplit(".", 1)[-1] if sym[0] == "external" else ""
        if short == "Optional":
            return self.type_atoms(elems[0], module, depth + 1) + [("none",)]
        if short == "Union":
            return [a for e in elems for a in self.type_atoms(e, module, depth + 1)]
        if short in ("Annotated", "ClassVar", "Final", "Required", "NotRequired"):
            return self.type_atoms(elems[0], module, depth + 1)
        if short == "Literal":
            return [("literal", self.literal_values(elems, module, depth))]
        if short in _LIST_NAMES:
            return [("list", self.type_atoms(elems[0], module, depth + 1))]
        if short in _SET_NAMES:
            return [("set", self.type_atoms(elems[0], module, depth + 1))]
        if short in _TUPLE_NAMES:
            has_ellipsis = any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in elems)
            parts = [self.type_atoms(e, module, depth + 1) for e in elems
                     if not (isinstance(e, ast.Constant) and e.value is Ellipsis)]
            return [("tuple", parts[0] if parts else [("any",)], has_ellipsis)]
        if short in _DICT_NAMES:
            return [("dict",)]
        if sym[0] == "alias":
            return self.type_atoms(sym[1], sym[2], depth + 1)
        return self._symbol_atoms(sym, depth)

    def literal_values(self, elems: list[ast.expr], module: Module, depth: int = 0) -> list[Any]:
        """Literal[...] arguments, with nested Literal aliases flattened and enum members as members."""
        out: list[Any] = []
        for e in elems:
            if isinstance(e, ast.Constant):
                out.append(e.value)
                continue
            sym = self.resolve_symbol(e, module)
            if sym[0] == "alias" or isinstance(e, ast.Subscript):
                atoms = self.type_atoms(e, module, depth + 1)
                lits = [v for a in atoms if a[0] == "literal" for v in a[1]]
                if lits:
                    out += lits
                    continue
            value = self.ev(e, self.module_scope(module))
            out.append(value)
        return out


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
    return ""
