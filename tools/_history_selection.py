"""How a vLLM release chooses its attention backend, read from the release's own selector code: for each machine (a
compute capability, FlashInfer installed or not) the backend priority order per KV-cache dtype, and for each
candidate backend why it is invalid for a model dtype and KV-cache dtype (the release's own reason strings), which
head sizes it takes, whether importing it fails, and whether the attention layer asserts at its first forward pass
for a KV-cache dtype. Also what a forced backend that is invalid does (the release's message), and the KV-cache dtypes
the release's configuration accepts.

Everything is computed by running the release's functions (`_get_backend_priorities`, each backend's
`validate_configuration` and `supports_head_size`, the layer's query-quantization condition) in the concrete
interpreter of `_history_run` for each stated machine; nothing about a backend is typed here. What the interpreter
cannot decide is written as "unknown". Written to matrices/history/<engine>-selection.json (read by
pytest_gpucompat/kb/predict.py).
"""

from __future__ import annotations

import ast
import json
from typing import Any

from _history_ast import Project
from _history_run import Runner
from _history_runtypes import _UNKNOWN, Cls, Ext, Func, Machine, Member, Mod, Raised, Unknowable

FORMAT = 1
CAPABILITIES = ((6, 0), (6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0),
                (12, 0), (12, 1))
"""The CUDA compute capabilities of the GPUs vLLM can meet; a capability outside this list has no selection data."""
DTYPES = ("float16", "bfloat16", "float32")
HEAD_SIZES = tuple(range(4, 1025, 4))
"""Head sizes each backend is asked about (every multiple of 4 up to 1024; models use multiples of 8 or 16)."""
PROBE_HEAD = 128
FORCED = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION")
_SETTINGS: dict[str, Any] = {"block_size": None, "use_mla": False, "has_sink": False, "use_sparse": False,
                             "use_mm_prefix": False, "use_per_head_quant_scales": False, "has_sliding_window": False,
                             "use_non_causal": False, "use_batch_invariant": False, "use_kv_connector": False,
                             "use_pcp": False, "num_heads": None}
"""A plain decoder model with no sinks, sliding window, MLA or block size given: what the prediction is made for."""


def extract_selection(project: Project) -> dict[str, Any]:
    """The selection facts of one release (a dict for the history's runs), or {"error": ...} when its selector is
    not of the priority-list design this reading follows."""
    root = next(iter(project.by_module), "").split(".")[0]
    cuda = project.module(f"{root}.platforms.cuda")
    if cuda is None or "_get_backend_priorities" not in cuda.defs:
        return {"error": "no _get_backend_priorities in platforms/cuda.py (selector before the priority-list design)"}
    facts: dict[str, Any] = {"design": "priority", "kv_cache_dtypes": _cache_dtypes(project, root)}
    facts.update(_forced(cuda.defs))
    kvs = [k for k in facts["kv_cache_dtypes"] if isinstance(k, str)] or ["auto"]
    profiles: list[dict[str, Any]] = []
    machines: dict[str, int] = {}
    for major, minor in CAPABILITIES:
        for fi in (True, False):
            profile = _machine(project, root, Machine(major, minor, fi), kvs)
            if profile not in profiles:
                profiles.append(profile)
            machines[f"{major}.{minor}{'+' if fi else '-'}flashinfer"] = profiles.index(profile)
    facts["machines"] = machines
    facts["profiles"] = profiles
    return facts


def _cache_dtypes(project: Project, root: str) -> list[str]:
    """The KV-cache dtypes the configuration accepts: the `CacheDType` Literal."""
    for name in (f"{root}.config.cache", f"{root}.config"):
        mod = project.module(name)
        node = mod.defs.get("CacheDType") if mod is not None else None
        value = getattr(node, "value", None)
        if isinstance(value, ast.Subscript):
            elts = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
            return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _forced(defs: dict[str, ast.AST]) -> dict[str, Any]:
    """What `get_attn_backend_cls` does with a forced backend that is invalid, and when no backend is valid: the
    exception and its message template, read from the `raise` statements."""
    out: dict[str, Any] = {}
    platform = next((n for n in defs.values() if isinstance(n, ast.ClassDef) and any(
        isinstance(f, ast.FunctionDef) and f.name == "get_attn_backend_cls" for f in n.body)), None)
    func = next((f for f in platform.body if isinstance(f, ast.FunctionDef) and f.name == "get_attn_backend_cls"),
                None) if platform is not None else None
    if func is None:
        return {"forced_invalid": "unknown", "none_valid": "unknown"}
    for stmt in ast.walk(func):
        if isinstance(stmt, ast.If) and "selected_backend is not None" in ast.unparse(stmt.test):
            raised = next((r for r in ast.walk(stmt) if isinstance(r, ast.Raise)), None)
            out["forced_invalid"] = _raise_text(raised) if raised is not None else {"action": "falls back"}
        if isinstance(stmt, ast.If) and "len(valid_backends_priorities) == 0" in ast.unparse(stmt.test):
            raised = next((r for r in ast.walk(stmt) if isinstance(r, ast.Raise)), None)
            out["none_valid"] = _raise_text(raised) if raised is not None else "unknown"
    out.setdefault("forced_invalid", "unknown")
    out.setdefault("none_valid", "unknown")
    return out


def _raise_text(node: ast.Raise) -> dict[str, Any]:
    exc = node.exc
    if not isinstance(exc, ast.Call) or not exc.args:
        return {"action": "raise", "error": ast.unparse(exc) if exc else "", "message": ""}
    arg = exc.args[0]
    if isinstance(arg, ast.JoinedStr):
        message = "".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                          for v in arg.values if isinstance(v, (ast.Constant, ast.FormattedValue)))
    else:
        message = ast.unparse(arg)
    return {"action": "raise", "error": ast.unparse(exc.func), "message": message}


def _call(runner: Runner, fn: Any, values: dict[str, Any]) -> Any:
    """Call a release function with the stated settings its signature names (and nothing else)."""
    node = fn.node if isinstance(fn, Func) else None
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        raise Unknowable("not a function")
    params = [a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]]
    if fn.is_bound and params:
        params = params[1:]
    kwargs = {k: values[k] for k in params if k in values}
    return runner.call(fn, [], kwargs)


def _machine(project: Project, root: str, machine: Machine, kvs: list[str]) -> dict[str, Any]:
    runner = Runner(project, machine)
    try:
        cuda = runner.module(f"{root}.platforms.cuda")
        cap = runner.capability(machine.major, machine.minor)
        decoder = _decoder(runner, project)
    except (Unknowable, Raised) as exc:
        return {"error": _short(exc)}
    prio_fn = cuda.ns.get("_get_backend_priorities")
    order: dict[str, Any] = {}
    members: dict[str, Member] = {}
    for kv in kvs:
        try:
            result = _call(runner, prio_fn, {"use_mla": False, "device_capability": cap, "kv_cache_dtype": kv,
                                             **_SETTINGS})
            names = [m.name for m in result if isinstance(m, Member)]
            members.update({m.name: m for m in result if isinstance(m, Member)})
            order[kv] = names
        except (Unknowable, Raised) as exc:
            order[kv] = f"unknown: {_short(exc)}"
    enum = next(iter(members.values())).cls if members else None
    for name in FORCED:
        if enum is not None and name not in members:
            try:
                member = runner.attr(enum, name)
                if isinstance(member, Member):
                    members[name] = member
            except (Unknowable, Raised):
                pass
    default = order.get("auto")
    out: dict[str, Any] = {"priority": default,
                           "priority_by_kv": {k: v for k, v in order.items() if v != default}}
    out["backends"] = {name: _backend(runner, member, cap, decoder, kvs) for name, member in sorted(members.items())}
    return out


def _decoder(runner: Runner, project: Project) -> Any:
    for path, text in project.files.items():
        if "class AttentionType" in text and path.endswith(".py"):
            mod = runner.module(path[:-3].replace("/", ".").removesuffix(".__init__"))
            cls = mod.ns.get("AttentionType")
            if isinstance(cls, Cls):
                return runner.attr(cls, "DECODER")
    return "decoder"


def _backend(runner: Runner, member: Member, cap: Any, decoder: Any, kvs: list[str]) -> dict[str, Any]:
    try:
        cls = runner.call(runner.attr(member, "get_class"), [], {})
    except Raised as exc:
        if exc.kind in ("ImportError", "ModuleNotFoundError"):
            return {"import_error": exc.message}
        return {"error": _short(exc)}
    except Unknowable as exc:
        return {"unknown": _short(exc)}
    if not isinstance(cls, Cls):
        return {"unknown": "backend class not resolved"}
    found: dict[tuple[str, str], list[str]] = {}
    for dtype in DTYPES:
        for kv in kvs:
            values = {"head_size": PROBE_HEAD, "dtype": Ext(f"torch.{dtype}"), "kv_cache_dtype": kv,
                      "device_capability": cap, "attn_type": decoder, **_SETTINGS}
            try:
                reasons = _call(runner, runner.attr(cls, "validate_configuration"), values)
                if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
                    raise Unknowable("validate_configuration returned no list of reasons")
                found[dtype, kv] = [r for r in reasons if r != "head_size not supported"]
            except (Unknowable, Raised) as exc:
                found[dtype, kv] = [f"unknown: {_short(exc)}"]
    out: dict[str, Any] = {"class": f"{cls.mod.name}.{cls.name}", "reasons": factor(found, kvs),
                           "head_sizes": _heads(runner, cls)}
    accepted = [kv for kv in kvs if any(not found.get((d, kv), ["?"]) for d in DTYPES)]
    refusals = _init_refusals(runner, cls, accepted)
    if refusals:
        out["refuses_at_init"] = refusals
    asserts = {kv: text for kv, text in _forward_asserts(runner, cls, kvs).items() if kv in accepted}
    if asserts:
        out["asserts_at_forward"] = asserts
    return out


def _merge_orders(lists: list[list[str]]) -> list[str]:
    """One order of every reason that keeps each list's own order (the order validate_configuration checks in):
    a topological sort of the lists' consecutive pairs, ties broken by first appearance."""
    seen: list[str] = []
    after: dict[str, set[str]] = {}
    for reasons in lists:
        for r in reasons:
            if r not in seen:
                seen.append(r)
        for a, b in zip(reasons, reasons[1:]):
            after.setdefault(b, set()).add(a)
    out: list[str] = []
    while len(out) < len(seen):
        ready = [r for r in seen if r not in out and after.get(r, set()) <= set(out)]
        out.append(ready[0] if ready else next(r for r in seen if r not in out))  # a cycle: first seen
    return out


def _init_refusals(runner: Runner, cls: Cls, kvs: list[str]) -> dict[str, str]:
    """KV-cache dtypes the backend's implementation refuses when the attention layers are built, after the
    selector chose it: a `raise` its `__init__` reaches with only the KV-cache dtype and the machine known (a test
    that needs anything else is not followed, so what is written is reached for certain)."""
    try:
        impl = runner.call(runner.attr(cls, "get_impl_cls"), [], {})
    except (Unknowable, Raised):
        return {}
    init = next(((c, f) for c in impl.mro() for f in c.node.body
                 if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None) if isinstance(impl, Cls) else None
    if init is None:
        return {}
    owner, func = init
    out: dict[str, str] = {}
    for kv in kvs:
        env: dict[str, Any] = {a.arg: _UNKNOWN for a in [*func.args.args, *func.args.kwonlyargs]}
        env.update({"self": _Bag(runner, {"kv_cache_dtype": kv}), "kv_cache_dtype": kv, "__class__": owner})
        found = _reached_raise(runner, func.body, owner.mod, env)
        if found is not None:
            out[kv] = found
    return out


def _reached_raise(runner: Runner, body: list[ast.stmt], mod: Mod, env: dict[str, Any]) -> str | None:
    """The `raise` a block reaches for certain (its exception and message), running what can be run and leaving
    out what cannot (an unknown `if` is not entered)."""
    for stmt in body:
        if isinstance(stmt, ast.Raise):
            try:
                runner.exec_stmt(stmt, mod, env)
            except Raised as exc:
                return f"{exc.kind}: {exc.message}"
            except Unknowable:
                return _template(stmt)
            return None
        if isinstance(stmt, ast.If):
            try:
                taken = runner.truth(runner.ev(stmt.test, mod, env))
            except (Unknowable, Raised):
                continue
            found = _reached_raise(runner, stmt.body if taken else stmt.orelse, mod, env)
            if found is not None:
                return found
            continue
        if isinstance(stmt, (ast.Return,)):
            return None
        try:
            runner.exec_stmt(stmt, mod, env)
        except (Unknowable, Raised):
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                    if isinstance(target, ast.Name):
                        env[target.id] = _UNKNOWN
    return None


def _template(stmt: ast.Raise) -> str:
    text = _raise_text(stmt)
    return f"{text['error']}: {text['message']}"


def factor(found: dict[tuple[str, str], list[str]], kvs: list[str]) -> dict[str, Any]:
    """Why a backend is invalid per (model dtype, KV-cache dtype), factored: the reasons of (bfloat16, auto), those
    a dtype adds, those a KV-cache dtype adds, and any pair that is not their union, with the order the release
    lists reasons in. `kb.predict.reasons` puts them back together."""
    order = _merge_orders(list(found.values()))
    base = found.get(("bfloat16", "auto"), [])
    by_dtype = {d: [r for r in found[d, "auto"] if r not in base] for d in DTYPES if (d, "auto") in found}
    by_kv = {k: [r for r in found["bfloat16", k] if r not in base] for k in kvs if ("bfloat16", k) in found}
    exact = {}
    for (d, k), reasons in found.items():
        union = set(base) | set(by_dtype.get(d, [])) | set(by_kv.get(k, []))
        if reasons != [r for r in order if r in union]:
            exact[f"{d}/{k}"] = reasons
    return {"order": order, "base": base, "dtype": {d: v for d, v in by_dtype.items() if v},
            "kv": {k: v for k, v in by_kv.items() if v}, "exact": exact}


def _heads(runner: Runner, cls: Cls) -> Any:
    ok: list[int] = []
    try:
        fn = runner.attr(cls, "supports_head_size")
        for h in HEAD_SIZES:
            if runner.call(fn, [h], {}):
                ok.append(h)
    except (Unknowable, Raised) as exc:
        return f"unknown: {_short(exc)}"
    return progressions(ok)


def progressions(values: list[int]) -> list[list[int]]:
    """Sorted values as [first, last, step] runs: [[8, 256, 8]] is every multiple of 8 from 8 to 256."""
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][2] == 0:
            out[-1][1:] = [v, v - out[-1][0]]
        elif out and v - out[-1][1] == out[-1][2]:
            out[-1][1] = v
        else:
            out.append([v, v, 0])
    return out


def _forward_asserts(runner: Runner, cls: Cls, kvs: list[str]) -> dict[str, str]:
    """KV-cache dtypes for which the attention layer's first forward pass fails an `assert` with this backend: the
    layer quantizes queries when its `__init__` condition holds for the backend's implementation, and `forward`
    then asserts the KV-cache dtype is one it can quantize for."""
    layer = _layer(runner)
    if layer is None:
        return {}
    cond, check, where = layer
    try:
        impl = runner.call(runner.attr(cls, "get_impl_cls"), [], {})
    except (Unknowable, Raised):
        impl = None
    out: dict[str, str] = {}
    for kv in kvs:
        try:
            if not isinstance(impl, Cls):
                raise Unknowable("implementation class unknown")
            quant = _impl_quant(runner, impl, kv)
            env = {"self": _Bag(runner, {"impl": _Bag(runner, {"supports_quant_query_input": quant}),
                                         "kv_cache_dtype": kv})}
            if runner.truth(runner.ev(cond.test, where, env)) and not runner.truth(runner.ev(check.test, where, env)):
                out[kv] = f"AssertionError: assert {ast.unparse(check.test)}"
        except (Unknowable, Raised):
            if kv.startswith("fp8"):
                out[kv] = "unknown"
    return out


class _Bag(Mod):
    """An object with stated attributes (the layer's `self` as the condition reads it)."""

    def __init__(self, runner: Runner, attrs: dict[str, Any]) -> None:
        super().__init__("<object>", attrs, None, True)


def _layer(runner: Runner) -> tuple[ast.If, ast.Assert, Mod] | None:
    for path, text in runner.project.files.items():
        if "self.query_quant = " not in text or "assert self.kv_cache_dtype in" not in text:
            continue
        mod = runner.module(path[:-3].replace("/", ".").removesuffix(".__init__"))
        tree = runner.project.module(mod.name)
        cond = check = None
        for node in ast.walk(tree.tree) if tree else []:
            if isinstance(node, ast.If) and any(isinstance(s, ast.Assign) and "self.query_quant" in ast.unparse(
                    s.targets[0]) and isinstance(s.value, ast.Call) for s in node.body):
                cond = node
            if isinstance(node, ast.If) and ast.unparse(node.test) == "self.query_quant is not None":
                check = next((s for s in node.body if isinstance(s, ast.Assert)), None)
        if cond is not None and check is not None:
            return cond, check, mod
    return None


def _impl_quant(runner: Runner, impl: Cls, kv: str) -> Any:
    """The implementation's `supports_quant_query_input` for a KV-cache dtype: set in its `__init__` (read with
    only `self.kv_cache_dtype` known), else a class attribute."""
    for c in impl.mro():
        init = next((f for f in c.node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        for node in ast.walk(init) if init is not None else []:
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "self.supports_quant_query_input":
                env = {"self": _Bag(runner, {"kv_cache_dtype": kv})}
                return runner.truth(runner.ev(node.value, c.mod, env))
    return runner.truth(runner.attr(impl, "supports_quant_query_input"))


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__


def render_selection(engine: str, tool: str, tool_version: str, releases: list[Any],
                     facts: dict[str, dict[str, Any]], since: str) -> str:
    """`<engine>-selection.json`: the grid asked about, the releases read (from `since`), and the selection facts as
    runs of consecutive releases with identical facts (one run per line; deterministic, diff-friendly)."""
    from packaging.version import Version

    def dumps(value: Any) -> str:
        return json.dumps(value, separators=(", ", ": "), ensure_ascii=False, sort_keys=True)

    chosen = [r for r in releases if Version(r.text) >= Version(since)]
    rows = []
    for r in chosen:
        row = {"version": r.text, "sha256": r.artifact.sha256 if r.artifact else ""}
        sel = facts.get(r.text, {}).get("selection")
        if r.error is not None or sel is None:
            row["error"] = r.error or "not read"
        elif "error" in sel:
            row["error"] = sel["error"]
        rows.append(row)
    runs: list[dict[str, Any]] = []
    key = None
    for r in chosen:
        sel = facts.get(r.text, {}).get("selection")
        if r.error is not None or sel is None or "error" in sel:
            continue  # unread: neither ends a run nor starts one
        this = dumps(sel)
        if runs and this == key:
            runs[-1]["last"] = r.text
        else:
            runs.append({"first": r.text, "last": r.text, **sel})
            key = this
    grid = {"capabilities": [f"{a}.{b}" for a, b in CAPABILITIES], "dtypes": list(DTYPES),
            "head_sizes": [HEAD_SIZES[0], HEAD_SIZES[-1], HEAD_SIZES[1] - HEAD_SIZES[0]],
            "probe_head_size": PROBE_HEAD, "settings": _SETTINGS, "forced": list(FORCED)}
    lines = ["{", f' "format": {FORMAT},', f' "engine": {dumps(engine)},', f' "tool": {dumps(tool)},',
             f' "tool_version": {dumps(tool_version)},', f' "grid": {dumps(grid)},', ' "releases": [',
             ",\n".join("  " + dumps(row) for row in rows), " ],", ' "runs": [',
             ",\n".join("  " + dumps(run) for run in runs), " ]", "}"]
    return "\n".join(lines) + "\n"
