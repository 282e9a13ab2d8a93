"""The statement half of the interpreter: runs function bodies (assignments, `if` on both arms when the test is
unknown, `for` over statically known items, nested functions, local imports), so that a function building an argparse
parser reaches every `add_argument` it can make.
"""

from __future__ import annotations

import ast
from typing import Any

from _history_ast import ClassRef, EnumMember, FuncRef, ParserObj, Unknown, _ImportDef
from _history_eval import Evaluator
from _history_scope import Break, Continue, Return, Scope, Thunk, _concrete, _hashable, _text


class Interpreter(Evaluator):
    """Evaluator plus statements."""

    def exec_block(self, body: list[ast.stmt], scope: Scope) -> None:
        for stmt in body:
            self.tick()
            method = getattr(self, "_ex_" + type(stmt).__name__, None)
            if method is not None:
                method(stmt, scope)

    def exec_uncertain(self, body: list[ast.stmt], scope: Scope) -> None:
        """Run a block that may or may not run: a `return`/`break`/`continue` in it ends only this block (the path
        that skips it goes on), a value returned becomes a candidate result."""
        try:
            self.exec_block(body, scope)
        except Return as r:
            scope.candidates.append(r.value)
        except (Break, Continue):
            pass

    def _ex_Expr(self, stmt: ast.Expr, scope: Scope) -> None:
        if isinstance(stmt.value, ast.Call) and not self._has_effect(stmt.value, scope):
            return
        self.ev(stmt.value, scope)

    def _has_effect(self, call: ast.Call, scope: Scope) -> bool:
        """Whether a call can add a flag or change a kwargs dict: it is on a parser or a known container, or it
        passes one."""
        nodes = [*call.args, *(k.value for k in call.keywords)]
        if isinstance(call.func, ast.Attribute):
            nodes.append(call.func.value)
        for n in nodes:
            if isinstance(n, ast.Starred):
                n = n.value
            if isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)):
                value = self.ev(n, scope)
                if isinstance(value, (ParserObj, dict, list, set)):
                    return True
        return False

    def _ex_Assign(self, stmt: ast.Assign, scope: Scope) -> None:
        lazy = scope.vars is not None and all(isinstance(t, ast.Name) for t in stmt.targets) and \
            not (isinstance(stmt.value, ast.Call) and self._has_effect(stmt.value, scope))
        if lazy:
            thunk = Thunk(stmt.value, scope)
            for t in stmt.targets:
                scope.vars[t.id] = thunk  # type: ignore[index, union-attr]
            return
        value = self.ev(stmt.value, scope)
        for t in stmt.targets:
            self.assign(t, value, scope)

    def _ex_AnnAssign(self, stmt: ast.AnnAssign, scope: Scope) -> None:
        if stmt.value is not None:
            self.assign(stmt.target, self.ev(stmt.value, scope), scope)

    def _ex_AugAssign(self, stmt: ast.AugAssign, scope: Scope) -> None:
        current = self.ev(stmt.target, scope) if not isinstance(stmt.target, ast.Name) else \
            scope.lookup(stmt.target.id)
        value = self.binop(stmt.op, current, self.ev(stmt.value, scope), stmt)
        if isinstance(current, (list, dict, set)) and isinstance(stmt.op, (ast.Add, ast.BitOr)) and \
                not isinstance(value, Unknown):
            if isinstance(current, list):
                current[:] = value
            else:
                current.update(value)
            value = current
        self.assign(stmt.target, value, scope)

    def assign(self, target: ast.expr, value: Any, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            if scope.vars is not None:
                scope.vars[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = list(value) if isinstance(value, (list, tuple)) else None
            if items is None and isinstance(value, EnumMember):
                items = None
            for i, elt in enumerate(target.elts):
                if isinstance(elt, ast.Starred):
                    self.assign(elt.value, Unknown(_text(elt)), scope)
                    continue
                ok = items is not None and len(items) == len(target.elts)
                self.assign(elt, items[i] if ok else Unknown(_text(elt)), scope)  # type: ignore[index]
        elif isinstance(target, ast.Subscript):
            container = self.ev(target.value, scope)
            key = self.ev(target.slice, scope)
            in_dict = isinstance(container, dict) and _hashable(key) and not isinstance(key, Unknown)
            in_list = isinstance(container, list) and isinstance(key, int) and -len(container) <= key < len(container)
            if in_dict or in_list:
                container[key] = value

    def _ex_Delete(self, stmt: ast.Delete, scope: Scope) -> None:
        for t in stmt.targets:
            if isinstance(t, ast.Subscript):
                container = self.ev(t.value, scope)
                key = self.ev(t.slice, scope)
                if isinstance(container, dict) and _hashable(key):
                    container.pop(key, None)
            elif isinstance(t, ast.Name) and scope.vars is not None:
                scope.vars.pop(t.id, None)

    def _ex_If(self, stmt: ast.If, scope: Scope) -> None:
        test = self.ev(stmt.test, scope)
        if _concrete(test) and not isinstance(test, EnumMember):
            self.exec_block(stmt.body if test else stmt.orelse, scope)
        else:
            self.exec_uncertain(stmt.body, scope)
            self.exec_uncertain(stmt.orelse, scope)

    def _ex_For(self, stmt: ast.For, scope: Scope) -> None:
        items = self.iterate(self.ev(stmt.iter, scope))
        if items is None or len(items) > 5000:
            self.assign(stmt.target, Unknown(_text(stmt.target)), scope)
            self.exec_uncertain(stmt.body, scope)
            return
        for item in items:
            self.assign(stmt.target, item, scope)
            try:
                self.exec_block(stmt.body, scope)
            except Continue:
                continue
            except Break:
                return
        self.exec_block(stmt.orelse, scope)

    _ex_AsyncFor = _ex_For

    def _ex_While(self, stmt: ast.While, scope: Scope) -> None:
        self.exec_uncertain(stmt.body, scope)

    def _ex_With(self, stmt: ast.With, scope: Scope) -> None:
        for item in stmt.items:
            if item.optional_vars is not None:
                self.assign(item.optional_vars, Unknown(_text(item.optional_vars)), scope)
        self.exec_block(stmt.body, scope)

    _ex_AsyncWith = _ex_With

    def _ex_Try(self, stmt: ast.Try, scope: Scope) -> None:
        self.exec_block(stmt.body, scope)
        self.exec_block(stmt.orelse, scope)
        self.exec_block(stmt.finalbody, scope)

    def _ex_Return(self, stmt: ast.Return, scope: Scope) -> None:
        raise Return(self.ev(stmt.value, scope) if stmt.value is not None else None)

    def _ex_Break(self, stmt: ast.Break, scope: Scope) -> None:
        raise Break()

    def _ex_Continue(self, stmt: ast.Continue, scope: Scope) -> None:
        raise Continue()

    def _ex_FunctionDef(self, stmt: ast.FunctionDef, scope: Scope) -> None:
        if scope.vars is not None:
            scope.vars[stmt.name] = FuncRef(scope.module, stmt, scope=scope)

    _ex_AsyncFunctionDef = _ex_FunctionDef

    def _ex_ClassDef(self, stmt: ast.ClassDef, scope: Scope) -> None:
        if scope.vars is not None:
            scope.vars[stmt.name] = ClassRef(scope.module, stmt)

    def _ex_Import(self, stmt: ast.Import | ast.ImportFrom, scope: Scope) -> None:
        if scope.vars is None:
            return
        for alias in stmt.names:
            if alias.name != "*":
                name = alias.asname or alias.name.split(".")[0]
                scope.vars[name] = self.import_value(scope.module, _ImportDef(stmt, alias))

    _ex_ImportFrom = _ex_Import

