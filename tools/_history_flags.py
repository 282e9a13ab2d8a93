"""The server command's flags of one release: run the function that builds the parser (vLLM `make_arg_parser` or
the `vllm serve` sub-parser, older `api_server` main blocks; SGLang `ServerArgs.add_cli_args`) in the interpreter and
record every `add_argument` with its dest, choices, default, action, type and deprecation.

Two package functions are replaced by mirrors because they inspect types at run time: vLLM's `get_kwargs(Config)`
(argparse kwargs from a config dataclass's annotations; its variants across releases are told apart by its source)
and SGLang's `add_cli_args_from_dataclass(parser, cls)` (flags from `Annotated[T, Arg(...)]` fields).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from _history_ast import ClassField, ClassRef, EnumMember, External, FuncRef, Instance, ParserObj, Unknown, json_value
from _history_exec import Interpreter

_DEPRECATED = re.compile(
    r"^\W*deprecated|(?:^|[.!?]\s)deprecated\b|\b(?:is|are|has been|was|now) deprecated\b|\(deprecated[.:,)]",
    re.IGNORECASE)
"""Help text that says the flag itself is deprecated ("[DEPRECATED] ...", "--x is deprecated", "Deprecated alias"),
not one that only will be ("will be deprecated in the next release") or mentions deprecated things."""
_TYPES = {"int", "float", "str", "bool"}


class FlagRecorder:
    """Collects flags from `add_argument` calls: option string -> attributes (the first registration wins)."""

    def __init__(self) -> None:
        self.flags: dict[str, dict[str, Any]] = {}

    def __call__(self, args: list[Any], kwargs: dict[str, Any], node: ast.Call) -> None:
        options = [a for a in args if isinstance(a, str)]
        flags = [o for o in options if o.startswith("-")]
        if not flags:
            return
        texts = {}
        for k in node.keywords:  # `**{**base, "default": X}` states a default too
            if k.arg is None and isinstance(k.value, ast.Dict):
                texts.update({key.value: ast.unparse(v) for key, v in zip(k.value.keys, k.value.values)
                              if isinstance(key, ast.Constant) and isinstance(key.value, str)})
        texts.update({k.arg: ast.unparse(k.value) for k in node.keywords if k.arg})
        self.add(flags, kwargs, texts)

    def add(self, flags: list[str], kwargs: dict[str, Any], texts: dict[str, str]) -> None:
        attrs = flag_attrs(flags, kwargs, texts)
        for flag in flags:
            self.flags.setdefault(flag, dict(attrs))


def flag_attrs(flags: list[str], kwargs: dict[str, Any], texts: dict[str, str]) -> dict[str, Any]:
    """The recorded attributes of one add_argument call (see the output format: absent ones are omitted)."""
    dest = kwargs.get("dest")
    if not isinstance(dest, str):
        first = next((f for f in flags if f.startswith("--")), flags[0])
        dest = first.lstrip("-").replace("-", "_")
    attrs: dict[str, Any] = {"dest": dest}
    if "choices" in kwargs:
        attrs["choices"] = choices_json(kwargs["choices"])
    if "default" in kwargs:
        attrs["default"] = json_value(_plain(kwargs["default"]), texts.get("default"))
    action = value_name(kwargs.get("action"))
    if action and action != "store":
        attrs["action"] = action
    kind = type_name(kwargs.get("type"))
    if kind:
        attrs["type"] = kind
    help_text = kwargs.get("help")
    if isinstance(help_text, Unknown):  # an f-string or concatenation: its source, without the string prefix
        help_text = re.sub(r"^[rfbuRFBU]*['\"]+", "", help_text.text)
    elif not isinstance(help_text, str):
        help_text = ""
    if kwargs.get("deprecated") is True or _DEPRECATED.search(" ".join((help_text or "").split())) or \
            (action and "deprecat" in action.lower()):
        attrs["deprecated"] = True
    return attrs


def _plain(value: Any) -> Any:
    if isinstance(value, EnumMember):
        return value.value if isinstance(value.value, (str, int, float, bool)) else value
    return value


def choices_json(value: Any) -> list[Any] | None:
    """Choices as a JSON list (a dict's keys, a set sorted, enum members as their values); None when unknown."""
    if isinstance(value, dict):
        value = list(value)
    elif isinstance(value, (set, frozenset)):
        value = sorted(value, key=lambda v: (type(v).__name__, repr(v)))
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for v in value:
        v = _plain(v)
        if isinstance(v, (str, int, float, bool)) or v is None:
            out.append(v)
        else:
            return None
    return out


def value_name(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, External):
        return value.short
    if isinstance(value, (ClassRef, FuncRef)):
        return value.name
    if isinstance(value, Unknown):
        return value.text.rsplit(".", 1)[-1] if re.fullmatch(r"[\w.]+", value.text) else "=" + value.text
    return None


def type_name(value: Any) -> str | None:
    if isinstance(value, External) and value.name.startswith("builtins.") and value.short in _TYPES:
        return value.short
    return None


# -- vLLM get_kwargs


def _function_text(func: FuncRef) -> str:
    text = ast.unparse(func.node)
    helper = func.module.defs.get("_compute_kwargs")
    if "_compute_kwargs" in text and isinstance(helper, ast.FunctionDef):
        text += "\n" + ast.unparse(helper)
    return text


def get_kwargs_hook(ev: Interpreter, func: FuncRef, args: list[Any], kwargs: dict[str, Any], node: ast.AST,
                    scope: Any) -> Any:
    """Mirror of vLLM's `get_kwargs(cls)`: field name -> argparse kwargs, with the branches that release's own
    implementation has (read from its source)."""
    cls = args[0] if args else kwargs.get("cls")
    if not isinstance(cls, ClassRef):
        return Unknown("get_kwargs(...)")
    src = _function_text(func)
    readable = {c.value for c in ast.walk(func.node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    helper = func.module.defs.get("_compute_kwargs")
    if isinstance(helper, ast.FunctionDef):
        readable |= {c.value for c in ast.walk(helper) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    out: dict[str, dict[str, Any]] = {}
    for f in ev.fields(cls):
        out[f.name] = _field_kwargs(ev, f, src, readable)
    return out


def _field_default(ev: Interpreter, f: ClassField, call_factory: bool = True) -> Any:
    if not ev.has_default(f):
        return Unknown("MISSING")
    expr = f.default
    if isinstance(expr, ast.Call) and not call_factory:
        for kw in expr.keywords:
            if kw.arg == "default_factory":
                return Unknown(ast.unparse(kw.value))
    value = ev.default_value(expr, f.module)
    ok = json_value(value, "")
    return value if ok != "=" else Unknown(_default_text(expr))


def _default_text(expr: ast.expr | None) -> str:
    if isinstance(expr, ast.Call):
        for kw in expr.keywords:
            if kw.arg == "default":
                return ast.unparse(kw.value)
            if kw.arg == "default_factory":
                return ast.unparse(kw.value) + "()"
    return ast.unparse(expr) if expr is not None else "MISSING"


def _builtin(name: str) -> External:
    return External("builtins." + name)


def _literal_choices(values: list[Any]) -> list[Any] | None:
    vals = [_plain(v) for v in values]
    if not vals or not all(isinstance(v, (str, int, float, bool)) for v in vals):
        return None
    try:
        return sorted(vals)
    except TypeError:
        return None


def _field_kwargs(ev: Interpreter, f: ClassField, src: str, readable: set[str]) -> dict[str, Any]:
    atoms = ev.type_atoms(f.annotation, f.module)
    kinds = {a[0] for a in atoms}
    if "enum" in kinds and "literal" not in kinds:
        kinds.add("class")
    kw: dict[str, Any] = {"default": _field_default(ev, f, "default_factory()" in src), "help": f.doc}
    literal = next((a[1] for a in atoms if a[0] == "literal"), None)
    nested = "Literal" in src
    if "is_dataclass" in src and "dataclass" in kinds:
        kw["type"] = External("parse_dataclass")
    elif "{bool, str, type(None)}" in src and kinds == {"bool", "str", "none"}:
        kw["type"] = _builtin("str")
        return kw
    elif "bool" in kinds:
        if "BooleanOptionalAction" in src:
            kw["action"] = External("argparse.BooleanOptionalAction")
        return kw
    elif "Literal" in src and literal is not None:
        choices = _literal_choices(literal)
        first = _plain(literal[0]) if literal else ""
        kw["type"] = _builtin(type(first).__name__)
        if not ('"metavar" if' in src and "str" in kinds):
            kw["choices"] = choices
    elif kinds & {"tuple", "list"} or ("set" in kinds and "contains_type(type_hints, set)" in src):
        coll = next(a for a in atoms if a[0] in ("tuple", "list", "set"))
        elem = coll[1]
        elem_lit = next((a[1] for a in elem if a[0] == "literal"), None)
        if nested and elem_lit is not None:
            kw["choices"] = _literal_choices(elem_lit)
        elem_kind = next((a[0] for a in elem if a[0] in _TYPES), None)
        kw["type"] = _builtin(elem_kind) if elem_kind else Unknown("elem")
    elif "int" in kinds:
        human = "human_readable_int" in src and f.name in readable
        kw["type"] = External("human_readable_int") if human else _builtin("int")
    elif "float" in kinds:
        kw["type"] = _builtin("float")
    elif "dict" in kinds:
        kw["type"] = External("json.loads")
    else:
        kw["type"] = _builtin("str")
    if "nullable_str" in src and "none" in kinds and "bool" not in kinds:  # the oldest get_kwargs (vLLM 0.8.4)
        kw["type"] = External("nullable_str")
    if "none" in kinds and kw.get("choices"):
        kw["choices"] = [*kw["choices"], None if "append(None)" in src else "None"]
    return kw


def get_field_hook(ev: Interpreter, func: FuncRef, args: list[Any], *_: Any) -> Any:
    """vLLM's `get_field(Config, "name")` (an EngineArgs field copying a config field's default): that default."""
    if len(args) == 2 and isinstance(args[0], ClassRef) and isinstance(args[1], str):
        f = next((f for f in ev.fields(args[0]) if f.name == args[1]), None)
        if f is not None:
            return _field_default(ev, f)
    return NotImplemented


# -- SGLang add_cli_args_from_dataclass


def unwrap_annotated(ev: Interpreter, f: ClassField) -> tuple[ast.expr, list[Any]]:
    """(inner annotation, evaluated metadata) of `Annotated[T, ...]` (an alias such as `A = Annotated` allowed)."""
    expr = f.annotation
    if isinstance(expr, ast.Subscript):
        sym = ev.resolve_symbol(expr.value, f.module)
        while sym[0] == "alias" and isinstance(sym[1], (ast.Name, ast.Attribute)):
            sym = ev.resolve_symbol(sym[1], sym[2])
        if sym[0] == "external" and sym[1].endswith("Annotated"):
            elts = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            scope = ev.module_scope(f.module)
            return elts[0], [ev.ev(e, scope) for e in elts[1:]]
    return expr, []


def dataclass_cli_hook(ev: Interpreter, func: FuncRef, args: list[Any], kwargs: dict[str, Any], node: ast.AST,
                       scope: Any) -> Any:
    """Mirror of SGLang's `add_cli_args_from_dataclass(parser, cls, fields=None)`."""
    recorder = ev.on_add_argument
    if len(args) < 2 or not isinstance(args[1], ClassRef) or not isinstance(recorder, FlagRecorder):
        return None
    only = kwargs.get("fields")
    for f in ev.fields(args[1]):
        if isinstance(only, (list, tuple)) and f.name not in only:
            continue
        inner, meta = unwrap_annotated(ev, f)
        arg = next((m for m in meta if isinstance(m, (Instance, str))), None)
        if arg is None:
            continue
        opts = dict(arg.kwargs) if isinstance(arg, Instance) else {"help": arg}
        if opts.get("no_cli") is True:
            continue
        cli = opts.get("cli_name") if isinstance(opts.get("cli_name"), str) else "--" + f.name.replace("_", "-")
        aliases = opts.get("aliases") if isinstance(opts.get("aliases"), (list, tuple)) else []
        kw: dict[str, Any] = {"dest": f.name, "help": opts.get("help", "")}
        if ev.has_default(f):
            kw["default"] = _field_default(ev, f)
        atoms = [a for a in ev.type_atoms(inner, f.module) if a[0] != "none"]
        kinds = {a[0] for a in atoms}
        action = opts.get("action")
        if action is not None:
            kw["action"] = action
            if isinstance(opts.get("action_kwargs"), dict):
                kw.update(opts["action_kwargs"])
        elif len(atoms) == 1 and "literal" in kinds:
            kw["choices"] = opts.get("choices") or atoms[0][1]
            kw["type"] = opts.get("type_parser") or _builtin(type(_plain(atoms[0][1][0])).__name__
                                                             if atoms[0][1] else "str")
        elif len(atoms) == 1 and "list" in kinds and opts.get("type_parser") is None:
            kind = next((a[0] for a in atoms[0][1] if a[0] in ("int", "float", "str")), "str")
            kw["type"] = _builtin(kind)
            if opts.get("choices"):
                kw["choices"] = opts["choices"]
        elif kinds == {"bool"}:
            kw["action"] = "store_true"
        else:
            kind = next(iter(kinds)) if len(kinds) == 1 else "str"
            kw["type"] = opts.get("type_parser") or _builtin(kind if kind in ("int", "float") else "str")
            if opts.get("choices"):
                kw["choices"] = opts["choices"]
        texts = {"default": _default_text(f.default)} if isinstance(kw.get("default"), Unknown) else {}
        recorder.add([cli, *[a for a in aliases if isinstance(a, str)]], kw, texts)
    return None


# -- roots


def _find_def(ev: Interpreter, prefix: str, name: str, prefer: tuple[str, ...]) -> FuncRef | None:
    names = [m for m in prefer if ev.project.has_module(m)]
    names += sorted(m for m in ev.project.by_module if m.startswith(prefix) and m not in names)
    for mod_name in names:
        if f"def {name}" not in ev.project.files[ev.project.by_module[mod_name]]:
            continue
        mod = ev.project.module(mod_name)
        d = mod.defs.get(name) if mod is not None else None
        if isinstance(d, ast.FunctionDef):
            return FuncRef(mod, d)
    return None


def vllm_flags(ev: Interpreter) -> dict[str, dict[str, Any]]:
    """`vllm serve`'s parser (the sub-command's `subparser_init`, else the `serve` sub-parser of vllm/scripts.py's
    `main`, else `make_arg_parser`), else the OpenAI API server's `parse_args()` or `__main__` block of the oldest
    releases."""
    recorder = FlagRecorder()
    ev.on_add_argument = recorder
    ev.hooks["get_kwargs"] = get_kwargs_hook
    ev.hooks["get_field"] = get_field_hook
    serve = ev.project.module("vllm.entrypoints.cli.serve")
    ran = False
    for node in serve.tree.body if serve is not None else []:
        if isinstance(node, ast.ClassDef):
            method = ev.class_attr(ClassRef(serve, node), "subparser_init")  # type: ignore[arg-type]
            if isinstance(method, FuncRef):
                ev.run(method, [Unknown("self"), ParserObj()], {})
                ran = True
    scripts = ev.project.module("vllm.scripts")
    main = scripts.defs.get("main") if scripts is not None and not ran else None
    if isinstance(main, ast.FunctionDef) and "serve_parser" in ast.unparse(main):
        ev.run(FuncRef(scripts, main), [], {})  # type: ignore[arg-type]
        ran = True
    if not ran:
        make = _find_def(ev, "vllm.entrypoints.", "make_arg_parser",
                         ("vllm.entrypoints.openai.cli_args", "vllm.entrypoints.common.cli_args"))
        if make is not None:
            ev.run(make, [ParserObj()] if make.node.args.args else [], {})
            ran = True
    if not ran:
        api = ev.project.module("vllm.entrypoints.openai.api_server")
        parse = api.defs.get("parse_args") if api is not None else None
        if isinstance(parse, ast.FunctionDef):
            ev.run(FuncRef(api, parse), [], {})  # type: ignore[arg-type]
        elif api is not None:
            from _history_scope import Scope

            for stmt in api.tree.body:
                if isinstance(stmt, ast.If) and "__main__" in ast.unparse(stmt.test):
                    ev.exec_uncertain(stmt.body, Scope(api, ev))
    return recorder.flags


def sglang_flags(ev: Interpreter) -> dict[str, dict[str, Any]]:
    """`ServerArgs.add_cli_args(parser)` of sglang/srt/server_args.py."""
    recorder = FlagRecorder()
    ev.on_add_argument = recorder
    ev.hooks["add_cli_args_from_dataclass"] = dataclass_cli_hook
    mod = ev.project.module("sglang.srt.server_args")
    cls = mod.defs.get("ServerArgs") if mod is not None else None
    if isinstance(cls, ast.ClassDef):
        server_args = ClassRef(mod, cls)  # type: ignore[arg-type]

        def declared_default(ev: Interpreter, func: FuncRef, args: list[Any], *_: Any) -> Any:
            """`_declared_default("x")`: the ServerArgs field's default."""
            f = next((f for f in ev.fields(server_args) if args and f.name == args[0]), None)
            return _field_default(ev, f) if f is not None else NotImplemented

        ev.hooks["_declared_default"] = declared_default
        method = ev.class_attr(server_args, "add_cli_args")
        if isinstance(method, FuncRef):
            ev.run(method, [ParserObj()], {})
    return recorder.flags
