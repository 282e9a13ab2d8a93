"""The static model of one release's package: modules parsed on demand from the fetched sources, the values an
expression can statically have, and what a class declares (fields with defaults and docs, attributes, enum members).

Nothing is imported: a name is followed through `import`/`from ... import` across the release's own modules, and a
name from outside the package (typing, argparse, torch...) becomes an `External` known by its dotted name.
"""

from __future__ import annotations

import ast
import builtins
import warnings
from dataclasses import dataclass, field
from typing import Any


class Unknown:
    """A value that cannot be known statically; `text` is the source that produced it."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Unknown({self.text!r})"


@dataclass(frozen=True)
class External:
    """Something defined outside the package (or a builtin), known only by its dotted name."""

    name: str

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]


@dataclass(eq=False)
class Module:
    """One parsed source file and its top-level definitions (last definition wins, as at run time)."""

    name: str
    path: str
    tree: ast.Module
    is_package: bool
    defs: dict[str, ast.AST] = field(default_factory=dict)
    # ann_assign targets that are a `TypeAlias` or plain aliases are ordinary defs; AugAssign extends a def
    augments: dict[str, list[ast.AugAssign]] = field(default_factory=dict)
    stars: list[ast.ImportFrom] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class ClassRef:
    module: Module
    node: ast.ClassDef

    @property
    def name(self) -> str:
        return self.node.name


@dataclass(eq=False)
class FuncRef:
    """A function, maybe a method bound to a class (`owner`: where it is defined; `bound`: the class it was looked
    up on, which `cls` means inside it); `scope` is the enclosing scope of a nested function."""

    module: Module
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    owner: ClassRef | None = None
    bound: ClassRef | None = None
    scope: Any = None

    @property
    def name(self) -> str:
        return getattr(self.node, "name", "<lambda>")

    def decorators(self) -> set[str]:
        return decorator_names(self.node) if not isinstance(self.node, ast.Lambda) else set()


@dataclass(frozen=True)
class ModRef:
    name: str


@dataclass(eq=False)
class EnumMember:
    cls: ClassRef
    name: str
    value: Any


@dataclass(eq=False)
class Instance:
    """An instance of a package class, with the arguments it was made with (enough to read `Arg(help=...)`)."""

    cls: ClassRef
    args: list[Any]
    kwargs: dict[str, Any]


@dataclass(eq=False)
class FieldSpec:
    """`dataclasses.field(...)` / `pydantic.Field(...)` / `msgspec.field(...)`: their keyword arguments, unevaluated."""

    kwargs: dict[str, ast.expr]
    args: list[ast.expr]


class ParserObj:
    """An argparse parser, group or sub-parser: `add_argument` on it registers a flag, unless it is the sub-parser
    of another command than `serve` (`label`: the sub-command's name when known)."""

    SERVER_LABELS = (None, "serve")

    def __init__(self, label: str | None = None) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"ParserObj({self.label!r})"


@dataclass
class ClassField:
    """A dataclass-style field: its annotation and default expression, in the module that declares them."""

    name: str
    module: Module
    annotation: ast.expr
    default: ast.expr | None
    doc: str
    owner: ClassRef


BUILTIN_NAMES = frozenset(dir(builtins))
DATACLASS_DECORATORS = frozenset({"dataclass", "config", "dataclasses.dataclass", "pydantic_dataclass"})
FIELD_FACTORIES = frozenset({"field", "Field"})


class Project:
    """The package's modules, parsed lazily from `files` (wheel-layout path -> text)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self._modules: dict[str, Module | None] = {}
        self.by_module: dict[str, str] = {}
        for path in files:
            if path.endswith(".py"):
                dotted = path[:-3].replace("/", ".")
                if dotted.endswith(".__init__"):
                    dotted = dotted[: -len(".__init__")]
                self.by_module[dotted] = path

    def module(self, name: str) -> Module | None:
        if name in self._modules:
            return self._modules[name]
        path = self.by_module.get(name)
        mod = None
        if path is not None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    tree = ast.parse(self.files[path])
            except (SyntaxError, ValueError):
                tree = None
            if tree is not None:
                mod = Module(name, path, tree, path.endswith("__init__.py"))
                _collect_defs(mod, tree.body)
        self._modules[name] = mod
        return mod

    def find_def(self, module: Module, name: str, depth: int = 0) -> tuple[Module, ast.AST] | None:
        """Where `name` is defined for `module`: its own definitions, else what a `from x import *` brings."""
        if name in module.defs:
            return module, module.defs[name]
        if depth > 5 or name.startswith("_"):
            return None
        for stmt in module.stars:
            target = self.module(self.absolute(module, stmt.level, stmt.module))
            found = self.find_def(target, name, depth + 1) if target is not None else None
            if found is not None:
                return found
        return None

    def has_module(self, name: str) -> bool:
        return name in self.by_module

    def absolute(self, module: Module, level: int, target: str | None) -> str:
        """The dotted name a (relative) import names from `module`."""
        if level == 0:
            return target or ""
        parts = module.name.split(".")
        base = parts if module.is_package else parts[:-1]
        base = base[: len(base) - (level - 1)] if level > 1 else base
        return ".".join(base + ([target] if target else []))


def _collect_defs(mod: Module, body: list[ast.stmt]) -> None:
    """Top-level definitions, looking into `if`/`try` blocks (TYPE_CHECKING imports, optional imports)."""
    for stmt in body:
        if isinstance(stmt, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            mod.defs[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    if isinstance(mod.defs.get(target.id), ast.ClassDef) and isinstance(stmt.value, ast.Call):
                        continue  # `X = decorate(X)` / `X = defstruct("X", ...)`: the class statement says more
                    mod.defs[target.id] = stmt
                    mod.augments.pop(target.id, None)
                elif isinstance(target, ast.Tuple):
                    for i, elt in enumerate(target.elts):
                        if isinstance(elt, ast.Name):
                            mod.defs[elt.id] = ast.Subscript(value=stmt.value, slice=ast.Constant(i))
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            mod.defs[stmt.target.id] = stmt
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            mod.augments.setdefault(stmt.target.id, []).append(stmt)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names):
                mod.stars.append(stmt)
            for alias in stmt.names:
                if alias.name != "*":
                    mod.defs[alias.asname or alias.name.split(".")[0]] = _ImportDef(stmt, alias)
        elif isinstance(stmt, ast.If):
            _collect_defs(mod, stmt.body)
            _collect_defs(mod, stmt.orelse)
        elif isinstance(stmt, ast.Try):
            _collect_defs(mod, stmt.body)
            for handler in stmt.handlers:
                _collect_defs(mod, handler.body)
            _collect_defs(mod, stmt.orelse)


class _ImportDef(ast.AST):
    """A name bound by an import statement (kept as a pseudo-node in `Module.defs`)."""

    def __init__(self, stmt: ast.Import | ast.ImportFrom, alias: ast.alias) -> None:
        super().__init__()
        self.stmt = stmt
        self.alias = alias


def import_target(project: Project, module: Module, node: _ImportDef) -> Any:
    """What an import binds: a package module, a name of one, or an External."""
    stmt, alias = node.stmt, node.alias
    if isinstance(stmt, ast.Import):
        full = alias.name if alias.asname else alias.name.split(".")[0]
        return ModRef(full) if project.has_module(full) or _is_package_prefix(project, full) else External(full)
    base = project.absolute(module, stmt.level, stmt.module)
    sub = f"{base}.{alias.name}" if base else alias.name
    if project.has_module(sub):
        return ModRef(sub)
    if project.has_module(base):
        return ("from", base, alias.name)
    return External(sub)


def _is_package_prefix(project: Project, name: str) -> bool:
    return any(m.startswith(name + ".") for m in project.by_module)


def decorator_names(node: ast.ClassDef | ast.FunctionDef) -> set[str]:
    out = set()
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        out.add(ast.unparse(target))
        out.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return out


def is_dataclass_node(node: ast.ClassDef) -> bool:
    return bool(decorator_names(node) & DATACLASS_DECORATORS)


def class_body_fields(cls: ClassRef) -> list[ClassField]:
    """The class's own annotated fields in order (ClassVar/InitVar excluded), with attribute docstrings."""
    out: list[ClassField] = []
    body = cls.node.body
    for i, stmt in enumerate(body):
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        ann_text = ast.unparse(stmt.annotation)
        if "ClassVar" in ann_text or "InitVar" in ann_text:
            continue
        doc = ""
        nxt = body[i + 1] if i + 1 < len(body) else None
        if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
            doc = nxt.value.value
        out.append(ClassField(stmt.target.id, cls.module, stmt.annotation, stmt.value, doc, cls))
    return out


def json_value(value: Any, text: str | None = None) -> Any:
    """`value` as JSON when it is a JSON literal (tuples as lists), else `"=" + source text` (an unknown value's own
    source, which says more than the name it was reached by: `EngineArgs.x` -> `16 if ... else 128`)."""
    ok, out = _jsonable(value)
    if ok:
        return out
    if isinstance(value, (Unknown, External)):
        text = describe(value)
    if text is None:
        text = describe(value)
    return "=" + text


def _jsonable(value: Any) -> tuple[bool, Any]:
    if value is None or isinstance(value, (bool, str)):
        return True, value
    if isinstance(value, int):
        return True, value
    if isinstance(value, float):
        return (value == value and value not in (float("inf"), float("-inf"))), value
    if isinstance(value, (list, tuple)):
        items = [_jsonable(v) for v in value]
        return all(ok for ok, _ in items), [v for _, v in items]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return False, None
        items2 = {k: _jsonable(v) for k, v in value.items()}
        return all(ok for ok, _ in items2.values()), {k: v for k, (_, v) in items2.items()}
    return False, None


def describe(value: Any) -> str:
    """Source-like text for a non-JSON value."""
    if isinstance(value, Unknown):
        return value.text
    if isinstance(value, External):
        return value.name.removeprefix("builtins.")
    if isinstance(value, (ClassRef, FuncRef)):
        return value.name
    if isinstance(value, EnumMember):
        return f"{value.cls.name}.{value.name}"
    if isinstance(value, Instance):
        return f"{value.cls.name}(...)"
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(repr(v) for v in value)) + "}"
    return repr(value)
