"""The values of the selection interpreter (`_history_run`): what a release defines (modules, functions, classes,
enum members, NamedTuples), a name from outside the package (`Ext`), the machine it is run for, and the signals it
raises (`Unknowable`: the machine does not decide this; `Raised`: the code raised an exception).
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any


class Unknowable(Exception):
    """The code reached something the stated machine does not decide."""


class Raised(Exception):
    """An exception the interpreted code raised: its class name and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


@dataclass(frozen=True)
class Machine:
    major: int
    minor: int
    flashinfer: bool


@dataclass(frozen=True)
class Ext:
    """A name from outside the package (torch, logging, ...)."""

    name: str


@dataclass(eq=False)
class Mod:
    name: str
    ns: dict[str, Any]
    node: ast.Module | None
    done: bool = False


@dataclass(eq=False)
class Func:
    mod: Mod
    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
    closure: dict[str, Any] | None = None
    bound: Any = None
    kind: str = "function"  # function | classmethod | staticmethod | property
    owner: Cls | None = None
    is_bound: bool = False


@dataclass(eq=False)
class Cls:
    mod: Mod
    node: ast.ClassDef
    bases: list[Any]

    @property
    def name(self) -> str:
        return self.node.name

    def mro(self) -> list[Cls]:
        out: list[Cls] = [self]
        for base in self.bases:
            if isinstance(base, Cls):
                out.extend(c for c in base.mro() if c not in out)
        return out

    def base_names(self) -> set[str]:
        return {b.name.rsplit(".", 1)[-1] for c in self.mro() for b in c.bases if isinstance(b, Ext)}

    def __repr__(self) -> str:
        return f"<class {self.name}>"


@dataclass(eq=False)
class Member:
    """An enum member: printed as Python prints one (`AttentionBackendEnum.FLASH_ATTN`)."""

    cls: Cls
    name: str
    value: Any

    def __repr__(self) -> str:
        return f"{self.cls.name}.{self.name}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Member):
            return self is other or (self.cls is other.cls and self.name == other.name)
        native = any(b in (str, int) for b in self.cls.bases)  # `class AttentionType(str, Enum)` equals its value
        return native and isinstance(other, (str, int)) and self.value == other

    def __hash__(self) -> int:
        return hash((self.cls.name, self.name))


class NT(tuple):  # type: ignore[type-arg]
    """A NamedTuple instance: compares as its tuple (DeviceCapability(9, 0) >= DeviceCapability(8, 0))."""

    cls: Cls
    fields: tuple[str, ...]


@dataclass(eq=False)
class Super:
    cls: Cls
    obj: Any


class _Unknown:
    def __repr__(self) -> str:
        return "<unknown>"


_UNKNOWN = _Unknown()
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
        ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
        ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: operator.mod,
        ast.FloorDiv: operator.floordiv, ast.BitOr: operator.or_, ast.BitAnd: operator.and_, ast.Div: operator.truediv}
_PURE: dict[str, Any] = {
    "len": len, "min": min, "max": max, "any": any, "all": all, "sorted": sorted, "abs": abs, "repr": repr,
    "str": str, "int": int, "bool": bool, "float": float, "list": list, "tuple": tuple, "set": set, "dict": dict,
    "frozenset": frozenset, "enumerate": lambda *a: list(enumerate(*a)), "range": lambda *a: list(range(*a)),
    "zip": lambda *a: list(zip(*a)), "reversed": lambda x: list(reversed(x)), "print": lambda *a, **k: None}
_NATIVE = (str, list, dict, set, frozenset, tuple, int, float)
_NATIVE_METHODS = {"startswith", "endswith", "split", "rsplit", "lower", "upper", "replace", "strip", "get",
                   "items", "keys", "values", "append", "extend", "index", "count", "join", "format", "copy", "add",
                   "update", "pop", "setdefault", "removeprefix", "removesuffix", "isdigit", "insert", "remove"}
_EXCEPTIONS = {"Exception", "ValueError", "ImportError", "ModuleNotFoundError", "RuntimeError", "AssertionError",
               "NotImplementedError", "TypeError", "KeyError", "AttributeError", "OSError", "NameError"}
_DTYPE_ALIAS = {"half": "float16", "float": "float32", "bfloat": "bfloat16"}
_PLATFORM_NO = ("is_rocm", "is_xpu", "is_cpu", "is_tpu", "is_out_of_tree", "is_neuron", "is_hpu", "is_zen_cpu")
