"""A concrete interpreter for the few functions that decide an engine's attention backend: it runs a release's own
selector code (read with `ast`, never imported) for one stated machine and setting, so that what the data says a
release picks is what that release's code computes, not a reading typed by hand.

It runs the subset of Python those functions use (assignments, `if`, `for`, `try`, `raise`, `assert`, calls, class
and enum attributes, NamedTuples, f-strings). What it cannot know (a value from outside the package that the stated
machine does not fix) raises `Unknowable`: the caller records "unknown", never a guess. The machine's facts (its
compute capability, that it is a CUDA platform, whether FlashInfer is installed) are the only inputs; every other
package the wheel imports is taken as installed.
"""

from __future__ import annotations

import ast
from typing import Any

from _history_ast import Project
from _history_runexpr import Evaluator
from _history_runtypes import (
    _BIN,
    _PLATFORM_NO,
    _UNKNOWN,
    Cls,
    Ext,
    Machine,
    Mod,
    Raised,
    Unknowable,
    _Break,
    _Continue,
    _Return,
)


class Runner(Evaluator):
    """Runs one release's functions for one machine. Modules execute on first use, top-level statements that cannot
    be known are skipped (their names are unknown), and an import of a package the machine lacks fails the module."""

    def __init__(self, project: Project, machine: Machine, budget: int = 400_000) -> None:
        self.project = project
        self.machine = machine
        self.mods: dict[str, Mod] = {}
        self.steps = budget
        self.platform: Any = None

    # -- modules and imports

    def module(self, name: str) -> Mod:
        mod = self.mods.get(name)
        if mod is not None:
            return mod
        parsed = self.project.module(name)
        if parsed is None:
            raise Unknowable(f"module {name} not in the release")
        mod = Mod(name, {"__name__": name}, parsed.tree)
        self.mods[name] = mod
        mod.ns["__file__"] = parsed.path
        for stmt in parsed.tree.body:
            try:
                self.exec_stmt(stmt, mod, mod.ns)
            except (Unknowable, TypeError, AttributeError, KeyError, IndexError, ValueError, ZeroDivisionError):
                for target in _bound_names(stmt):
                    mod.ns.setdefault(target, _UNKNOWN)
            except Raised as exc:
                if exc.kind in ("ImportError", "ModuleNotFoundError"):
                    del self.mods[name]
                    raise
                for target in _bound_names(stmt):
                    mod.ns.setdefault(target, _UNKNOWN)
        mod.done = True
        return mod

    def import_name(self, dotted: str) -> Any:
        top = dotted.split(".")[0]
        if top == "flashinfer" and not self.machine.flashinfer:
            raise Raised("ModuleNotFoundError", f"No module named '{dotted}'")
        if self.project.has_module(dotted):
            return self.module(dotted)
        if top == self.root or any(m.startswith(dotted + ".") for m in self.project.by_module):
            # a compiled extension of the package (vllm._C, vllm_flash_attn._vllm_fa3_C): built into the wheel
            return Ext(dotted)
        return Ext(dotted)

    @property
    def root(self) -> str:
        return next(iter(self.project.by_module), "").split(".")[0]

    def _from_import(self, stmt: ast.ImportFrom, mod: Mod, env: dict[str, Any]) -> None:
        base = self._absolute(mod.name, stmt.level, stmt.module)
        target = self.import_name(base) if base else None
        for alias in stmt.names:
            if alias.name == "*":
                if isinstance(target, Mod):
                    env.update({k: v for k, v in target.ns.items() if not k.startswith("_")})
                continue
            try:
                value = self._imported(alias.name, base, target)
            except (Unknowable, TypeError, AttributeError, KeyError, IndexError, ValueError, ZeroDivisionError):
                # one name the machine cannot fix (a lazy module attribute) leaves only that name unknown, not the
                # other names of the same statement, as Python binds each name of `from m import a, b` on its own
                value = _UNKNOWN
            env[alias.asname or alias.name] = value

    def _imported(self, name: str, base: str, target: Any) -> Any:
        """The value `from base import name` binds, `target` being what `base` imported as."""
        sub = f"{base}.{name}"
        if name == "current_platform" and base.endswith(".platforms"):
            return self.current_platform()
        if isinstance(target, Mod):
            if name in target.ns:
                return target.ns[name]
            if self.project.has_module(sub):
                return self.module(sub)
            if "__getattr__" in target.ns:
                return self.call(target.ns["__getattr__"], [name], {})
            if self.project.by_module.get(base, "").endswith("__init__.py"):
                return Ext(sub)  # a compiled extension module of the package (`from . import _vllm_fa2_C`)
            if not target.done:
                # a module still running its own imports (a circular import): this interpreter does not run
                # parent packages first as Python does, so the name is unknown here, not an ImportError
                return _UNKNOWN
            raise Raised("ImportError", f"cannot import name '{name}' from '{base}'")
        if sub == "typing.TYPE_CHECKING":
            return False  # what runs, not what a type checker reads
        value = self.import_name(sub) if self.project.has_module(sub) else Ext(sub)
        if isinstance(value, Ext) and sub.split(".")[0] == "flashinfer" and not self.machine.flashinfer:
            raise Raised("ModuleNotFoundError", f"No module named '{sub}'")
        return value

    def _absolute(self, current: str, level: int, target: str | None) -> str:
        if level == 0:
            return target or ""
        path = self.project.by_module.get(current, "")
        parts = current.split(".")
        base = parts if path.endswith("__init__.py") else parts[:-1]
        base = base[: len(base) - (level - 1)] if level > 1 else base
        return ".".join(base + ([target] if target else []))

    def current_platform(self) -> Any:
        if self.platform is None:
            mod = self.module(f"{self.root}.platforms.cuda")
            cls = mod.ns.get("CudaPlatformBase") or mod.ns.get("CudaPlatform")
            if not isinstance(cls, Cls):
                raise Unknowable("no CUDA platform class")
            self.platform = Platform(self, cls)
        return self.platform

    def capability(self, major: int, minor: int) -> Any:
        """The release's own DeviceCapability(major, minor)."""
        cls = self.module(f"{self.root}.platforms.interface").ns.get("DeviceCapability")
        if not isinstance(cls, Cls):
            raise Unknowable("no DeviceCapability class")
        return self.construct(cls, [major, minor], {})

    # -- statements

    def tick(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise Unknowable("step budget exhausted")

    def run_body(self, body: list[ast.stmt], mod: Mod, env: dict[str, Any]) -> None:
        for stmt in body:
            self.exec_stmt(stmt, mod, env)

    def exec_stmt(self, stmt: ast.stmt, mod: Mod, env: dict[str, Any]) -> None:
        self.tick()
        if isinstance(stmt, ast.Expr):
            if not isinstance(stmt.value, ast.Constant):
                self.ev(stmt.value, mod, env)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            if stmt.value is None:
                return
            value = self.ev(stmt.value, mod, env)
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                self.assign(target, value, mod, env)
        elif isinstance(stmt, ast.AugAssign):
            op = _BIN.get(type(stmt.op))
            if op is None or not isinstance(stmt.target, ast.Name):
                raise Unknowable("augmented assignment")
            env[stmt.target.id] = op(self.ev(stmt.target, mod, env), self.ev(stmt.value, mod, env))
        elif isinstance(stmt, ast.If):
            self.run_body(stmt.body if self.truth(self.ev(stmt.test, mod, env)) else stmt.orelse, mod, env)
        elif isinstance(stmt, ast.Return):
            raise _Return(None if stmt.value is None else self.ev(stmt.value, mod, env))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            env[stmt.name] = self.make_func(stmt, mod, env if env is not mod.ns else None)
        elif isinstance(stmt, ast.ClassDef):
            env[stmt.name] = Cls(mod, stmt, [self._base(b, mod, env) for b in stmt.bases])
        elif isinstance(stmt, ast.Import):
            for alias in stmt.names:
                value = self.import_name(alias.name)
                env[alias.asname or alias.name.split(".")[0]] = (
                    value if alias.asname else (self.import_name(alias.name.split(".")[0])))
        elif isinstance(stmt, ast.ImportFrom):
            self._from_import(stmt, mod, env)
        elif isinstance(stmt, ast.Try):
            self._try(stmt, mod, env)
        elif isinstance(stmt, ast.Raise):
            self._raise(stmt, mod, env)
        elif isinstance(stmt, ast.Assert):
            if not self.truth(self.ev(stmt.test, mod, env)):
                raise Raised("AssertionError", ast.unparse(stmt.test))
        elif isinstance(stmt, ast.For):
            self._for(stmt, mod, env)
        elif isinstance(stmt, ast.With):
            for item in stmt.items:
                self.ev(item.context_expr, mod, env)
            self.run_body(stmt.body, mod, env)
        elif isinstance(stmt, ast.Break):
            raise _Break()
        elif isinstance(stmt, ast.Continue):
            raise _Continue()
        elif isinstance(stmt, (ast.Pass, ast.Global, ast.Nonlocal, ast.Delete)):
            return
        else:
            raise Unknowable(type(stmt).__name__)

    def _base(self, node: ast.expr, mod: Mod, env: dict[str, Any]) -> Any:
        try:
            return self.ev(node, mod, env)
        except (Unknowable, Raised):
            return Ext(ast.unparse(node))

    def _try(self, stmt: ast.Try, mod: Mod, env: dict[str, Any]) -> None:
        try:
            self.run_body(stmt.body, mod, env)
        except Raised as exc:
            for handler in stmt.handlers:
                names = _handler_names(handler.type)
                if names is None or exc.kind in names or "Exception" in names or (
                        exc.kind == "ModuleNotFoundError" and "ImportError" in names):
                    if handler.name:
                        env[handler.name] = exc.message
                    self.run_body(handler.body, mod, env)
                    break
            else:
                raise
        else:
            self.run_body(stmt.orelse, mod, env)
        finally:
            self.run_body(stmt.finalbody, mod, env)

    def _raise(self, stmt: ast.Raise, mod: Mod, env: dict[str, Any]) -> None:
        exc = stmt.exc
        if exc is None:
            raise Unknowable("bare raise")
        kind = exc.func if isinstance(exc, ast.Call) else exc
        name = kind.id if isinstance(kind, ast.Name) else kind.attr if isinstance(kind, ast.Attribute) else "Exception"
        message = ""
        if isinstance(exc, ast.Call) and exc.args:
            message = str(self.ev(exc.args[0], mod, env))
        raise Raised(name, message)

    def _for(self, stmt: ast.For, mod: Mod, env: dict[str, Any]) -> None:
        items = self.ev(stmt.iter, mod, env)
        if not isinstance(items, (list, tuple, set, frozenset, dict, str)):
            raise Unknowable("loop over an unknown value")
        for item in list(items):
            self.assign(stmt.target, item, mod, env)
            try:
                self.run_body(stmt.body, mod, env)
            except _Break:
                return
            except _Continue:
                continue
        self.run_body(stmt.orelse, mod, env)

    def assign(self, target: ast.expr, value: Any, mod: Mod, env: dict[str, Any]) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = list(value) if isinstance(value, (list, tuple)) else None
            if values is None or len(values) != len(target.elts):
                raise Unknowable("unpacking")
            for t, v in zip(target.elts, values):
                self.assign(t, v, mod, env)
        elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and \
                isinstance(env.get(target.value.id), Mod) and env[target.value.id].name == "<object>":
            env[target.value.id].ns[target.attr] = value  # `self.x = ...` on an object with stated attributes
        # other attribute and item stores change state the selection does not read: not modelled





class Platform:
    """`current_platform` on the stated machine: its capability and kind are the machine's; the rest is the
    release's own CUDA platform class run with `cls` bound to this object."""

    def __init__(self, runner: Runner, cls: Cls) -> None:
        self.runner = runner
        self.cls = cls

    def fact(self, name: str) -> Any:
        m = self.runner.machine
        if name == "get_device_capability":
            return lambda *a, **k: self.runner.capability(m.major, m.minor)
        if name in _PLATFORM_NO:
            return lambda *a, **k: False
        if name in ("is_cuda", "is_cuda_alike"):
            return lambda *a, **k: True
        if name == "device_name":
            return "cuda"
        return None


def _handler_names(node: ast.expr | None) -> set[str] | None:
    if node is None:
        return None
    elts = node.elts if isinstance(node, ast.Tuple) else [node]
    return {e.id if isinstance(e, ast.Name) else e.attr if isinstance(e, ast.Attribute) else "" for e in elts}


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*"]
    if isinstance(stmt, (ast.Try, ast.If)):
        return [n for s in [*stmt.body, *getattr(stmt, "orelse", [])] for n in _bound_names(s)]
    return []
