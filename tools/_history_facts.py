"""The other facts of one release: the environment variables it reads, its attention backends (what each states
about head sizes, dtypes, KV-cache dtypes, block sizes and compute capability) and the requirements its metadata
pins. All read from the sources with `ast`; nothing is imported.
"""

from __future__ import annotations

import ast
import re
from email.parser import Parser
from typing import Any

from _history_ast import ClassRef, External, FuncRef, Project, json_value
from _history_exec import Interpreter
from packaging.markers import InvalidMarker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

try:  # Python 3.11+; on 3.10 an sdist's pyproject.toml is not read (wheels never need it)
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    tomllib = None  # type: ignore[assignment]

ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]{2,}$")
_ENV_HINT = re.compile(r"environ|getenv|[eE]nv\w*\(")
_ENV_READERS = ("getenv", "environ.get", "environ.setdefault")
_NOT_READERS = ("set", "unset", "del", "pop", "update", "clear", "_set", "patch")
TRACKED_EXTRAS = re.compile(r"^(torch|flashinfer.*|sgl-kernel|sglang-kernel|xformers|flash-attn|vllm|triton)$")
_CUDA_REQ = re.compile(r"^nvidia-.*-cu(\d+)$")
_CUDA_TAG = re.compile(r"cu(1\d)\d?")
"""`cu12`, `cu13`, `cu128`, `cu130`: the CUDA major is the first two digits."""
_LOCAL_CUDA = re.compile(r"\+cu(1\d)\d?(?![\d])")
_MARKER_ENV = {"sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
               "os_name": "posix", "implementation_name": "cpython", "platform_python_implementation": "CPython",
               "python_version": "3.12", "python_full_version": "3.12.0"}
ROOT_BACKEND = "AttentionBackend"


# -- environment variables


def extract_env(project: Project, ev: Interpreter) -> dict[str, dict[str, Any]]:
    """Every environment variable the package reads: registries (vLLM `environment_variables`, SGLang `Envs`
    classes) and literal names passed to os.getenv / os.environ.get / setdefault / os.environ[...] or to a
    package helper whose name says it reads the environment (`get_bool_env_var("X")`)."""
    defaults: dict[str, set[str]] = {}
    registry: dict[str, Any] = {}
    for path in sorted(project.files):
        text = project.files[path]
        if not path.endswith(".py") or not _ENV_HINT.search(text):
            continue
        mod_name = path[:-3].replace("/", ".").removesuffix(".__init__")
        mod = project.module(mod_name)
        if mod is None:
            continue
        if mod_name.endswith((".envs", ".environ")):
            registry.update(_registry(mod.tree))
        for node in ast.walk(mod.tree):
            name, default = _env_read(node)
            if name is not None and ENV_NAME.match(name):
                bucket = defaults.setdefault(name, set())
                if default is not _NONE:
                    bucket.add(repr(default))
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(defaults) | set(registry)):
        if name in registry:
            value = registry[name]
            out[name] = {} if value is _NONE else {"default": json_value(value, repr(value))}
        elif len(defaults[name]) == 1:
            out[name] = {"default": ast.literal_eval(next(iter(defaults[name])))}
        else:
            out[name] = {}
    return out


_NONE = object()


def _literal_default(call: ast.Call) -> Any:
    node = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "default"), None)
    if isinstance(node, ast.Constant) and node.value is not None and not isinstance(node.value, bytes):
        return node.value
    return _NONE


def _env_read(node: ast.AST) -> tuple[str | None, Any]:
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
            ast.unparse(node.value).endswith("environ") and isinstance(node.slice, ast.Constant) and \
            isinstance(node.slice.value, str):
        return node.slice.value, _NONE
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)):
        return None, _NONE
    func = ast.unparse(node.func)
    last = func.rsplit(".", 1)[-1]
    if func.endswith(_ENV_READERS) or func == "getenv":
        return node.args[0].value, _literal_default(node)
    if "env" in last.lower() and not last.lower().startswith(_NOT_READERS) and "environ" not in func and \
            not last[:1].isupper():  # a class such as SGLang's `EnvStr("default")` takes no name
        return node.args[0].value, _literal_default(node)
    return None, _NONE


def _registry(tree: ast.Module) -> dict[str, Any]:
    """vLLM: `environment_variables = {"X": lambda: os.getenv("X", "d"), ...}`; SGLang: `class Envs:
    X = EnvBool(False)`. Name -> literal default (or _NONE)."""
    out: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if ast.unparse(target) != "environment_variables":
                continue
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    out[key.value] = _registry_default(key.value, value)
        elif isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and \
                        ast.unparse(stmt.value.func).startswith("Env") and isinstance(stmt.targets[0], ast.Name):
                    first = stmt.value.args[0] if stmt.value.args else None
                    out[stmt.targets[0].id] = first.value if isinstance(first, ast.Constant) and \
                        first.value is not None else _NONE
    return out


def _registry_default(name: str, value: ast.expr) -> Any:
    for call in ast.walk(value):
        if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant) and \
                call.args[0].value == name:
            return _literal_default(call)
    return _NONE


# -- attention backends


def extract_backends(project: Project, ev: Interpreter) -> dict[str, dict[str, Any]]:
    """Backend classes (a `...Backend` class whose own `get_name()` returns a literal) in the attention packages
    and in the modules the backend enum points at, and the enum's members (`"enum": true`). When several classes
    give one name (ROCm variants, older engine copies), the one the enum names wins, else a CUDA, V1 one; MLA
    prefill backends (their own registry) are left out. `class` says which class was read."""
    out: dict[str, dict[str, Any]] = {}
    enum_paths: dict[str, str] = {}
    for mod_name in sorted(project.by_module):
        text = project.files[project.by_module[mod_name]]
        if "class _Backend" not in text and "class AttentionBackendEnum" not in text:
            continue
        mod = project.module(mod_name)
        for node in mod.tree.body if mod is not None else []:
            if isinstance(node, ast.ClassDef) and node.name in ("_Backend", "AttentionBackendEnum"):
                for member in ev.enum_members(ClassRef(mod, node)):  # type: ignore[arg-type]
                    out.setdefault(member.name, {})["enum"] = True
                    if isinstance(member.value, str) and "." in member.value:
                        enum_paths[member.name] = member.value
    enum_modules = {path.rsplit(".", 1)[0] for path in enum_paths.values()}
    candidates: dict[str, list[tuple[tuple, ClassRef]]] = {}
    for mod_name in sorted(project.by_module):
        path = project.by_module[mod_name]
        if ".prefill" in mod_name or not (("attention" in path or "attn" in path or mod_name in enum_modules)
                                          and "def get_name" in project.files[path]):
            continue
        mod = project.module(mod_name)
        for node in mod.tree.body if mod is not None else []:
            if isinstance(node, ast.ClassDef) and "Backend" in node.name:
                name = _own_literal_return(node, "get_name")
                if isinstance(name, str) and name:
                    dotted = f"{mod_name}.{node.name}"
                    last = mod_name.rsplit(".", 1)[-1]
                    rank = (enum_paths.get(name) != dotted, last.startswith(_PLATFORM_PREFIXES),
                            ".v1." not in mod_name, last != name.lower(), dotted)
                    candidates.setdefault(name, []).append((rank, ClassRef(mod, node)))  # type: ignore[arg-type]
    for name, found in candidates.items():
        _, cls = min(found, key=lambda item: item[0])
        attrs = backend_attrs(ev, cls)
        attrs["class"] = f"{cls.module.name}.{cls.name}"
        out.setdefault(name, {}).update(attrs)
    return out


_PLATFORM_PREFIXES = ("rocm", "aiter", "cpu", "xpu", "tpu", "hpu", "ipex", "pallas", "openvino", "neuron")


def _own_literal_return(node: ast.ClassDef, method: str) -> Any:
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == method:
            ret = _single_return(stmt)
            if isinstance(ret, ast.Constant):
                return ret.value
    return None


def _single_return(func: ast.FunctionDef) -> ast.expr | None:
    returns: list[ast.Return] = []
    stack: list[ast.AST] = list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            returns.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return returns[0].value if len(returns) == 1 else None


def _method_return(ev: Interpreter, cls: ClassRef, name: str) -> tuple[ast.expr | None, FuncRef | None]:
    func = ev.class_attr(cls, name)
    if not isinstance(func, FuncRef) or not isinstance(func.node, ast.FunctionDef) or \
            (func.owner is not None and func.owner.name == ROOT_BACKEND):
        return None, None
    return _single_return(func.node), func


def _listing(ev: Interpreter, expr: ast.expr, func: FuncRef) -> Any:
    """A returned list literal as a list (non-literal items as their source text), else the expression's text."""
    if isinstance(expr, (ast.List, ast.Tuple)):
        scope = ev.module_scope(func.module)
        items = []
        for elt in expr.elts:
            value = ev.ev(elt, scope)
            items.append(value if isinstance(value, (int, str)) and not isinstance(value, bool) else ast.unparse(elt))
        return items
    return ast.unparse(expr)


def backend_attrs(ev: Interpreter, cls: ClassRef) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    impl = None
    ret, func = _method_return(ev, cls, "get_impl_cls")
    if ret is not None and func is not None:
        impl = ev.ev(ret, ev.module_scope(func.module))
    for target in (cls, impl):
        if "head_sizes" not in attrs and isinstance(target, ClassRef):
            ret, func = _method_return(ev, target, "get_supported_head_sizes")
            if ret is not None and func is not None:
                attrs["head_sizes"] = _listing(ev, ret, func)
    if "head_sizes" not in attrs:
        ret, func = _method_return(ev, cls, "supports_head_size")
        if ret is not None:
            attrs["head_sizes"] = ast.unparse(ret)
    kv = ev.class_attr(cls, "supported_kv_cache_dtypes")
    if isinstance(kv, (list, tuple)) and all(isinstance(v, str) for v in kv):
        attrs["kv_cache_dtypes"] = list(kv)
    dtypes = ev.class_attr(cls, "supported_dtypes")
    if isinstance(dtypes, (list, tuple)):
        attrs["dtypes"] = [d.short if isinstance(d, External) else json_value(d) for d in dtypes]
    ret, func = _method_return(ev, cls, "supports_compute_capability")
    if ret is not None and not (isinstance(ret, ast.Constant) and ret.value is True):
        attrs["compute_capability"] = capability_spec(ret)
    for method in ("get_supported_kernel_block_sizes", "get_supported_block_sizes"):
        ret, func = _method_return(ev, cls, method)
        if ret is not None and func is not None and "block_sizes" not in attrs:
            attrs["block_sizes"] = _listing(ev, ret, func)
    return attrs


_FLIP = {">=": "<=", "<=": ">=", ">": "<", "<": ">", "==": "==", "!=": "!="}
_OPS = {ast.GtE: ">=", ast.LtE: "<=", ast.Gt: ">", ast.Lt: "<", ast.Eq: "==", ast.NotEq: "!=", ast.In: "in"}


def capability_spec(expr: ast.expr) -> str:
    """`capability >= DeviceCapability(8, 0) and capability.major < 10` -> ">=8.0,<10.0"; anything else: its
    source text."""
    parts = expr.values if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.And) else [expr]
    specs: list[str] = []
    for part in parts:
        spec = _one_capability(part)
        if spec is None:
            return ast.unparse(expr)
        specs.append(spec)
    return ",".join(specs)


def _one_capability(node: ast.expr) -> str | None:
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _OPS):
        return None
    op, left, right = _OPS[type(node.ops[0])], node.left, node.comparators[0]
    if not _is_capability(left) and _is_capability(right) and op != "in":
        left, right, op = right, left, _FLIP[op]
    if not _is_capability(left):
        return None
    if isinstance(right, ast.Call) and ast.unparse(right.func).endswith("DeviceCapability") and op != "in":
        nums = [a.value for a in right.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
        if len(nums) == 2 and not isinstance(left, ast.Attribute):
            return f"{op}{nums[0]}.{nums[1]}"
        return None
    if isinstance(left, ast.Attribute) and left.attr == "major":
        if op == "in" and isinstance(right, (ast.List, ast.Tuple, ast.Set)):
            majors = sorted(e.value for e in right.elts if isinstance(e, ast.Constant) and isinstance(e.value, int))
            if majors and majors == list(range(majors[0], majors[-1] + 1)) and len(majors) == len(right.elts):
                return f">={majors[0]}.0,<{majors[-1] + 1}.0"
            return None
        if isinstance(right, ast.Constant) and isinstance(right.value, int):
            n = right.value
            return {"==": f">={n}.0,<{n + 1}.0", ">=": f">={n}.0", ">": f">={n + 1}.0", "<": f"<{n}.0",
                    "<=": f"<{n + 1}.0", "!=": f"!={n}.*"}.get(op)
    return None


def _is_capability(node: ast.expr) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "major":
        node = node.value
    return isinstance(node, ast.Name) and "capab" in node.id


# -- requirements


def extract_requires(files: dict[str, str], filename: str) -> dict[str, dict[str, Any]]:
    """Requirements without an extra (for Linux x86_64), and `name[extra]` for the tracked packages; `cuda` from a
    `+cuXY` local version or an `nvidia-*-cuXX` requirement."""
    lines = _requirement_lines(files)
    specs: dict[str, set[str]] = {}
    cuda: dict[int, set[int]] = {}  # evidence class (lower is stronger) -> CUDA majors
    for line in lines:
        try:
            req = Requirement(line)
        except (InvalidRequirement, InvalidMarker):
            continue
        name = canonicalize_name(req.name)
        marker = str(req.marker) if req.marker else ""
        extras = re.findall(r"extra\s*==\s*[\"']([^\"']+)[\"']", marker)
        spec = f"@ {req.url}" if req.url else str(req.specifier)
        for extra in extras or [""]:
            try:
                applies = req.marker is None or req.marker.evaluate({**_MARKER_ENV, "extra": extra})
            except Exception:
                applies = False
            if not applies:
                continue
            if extra and not TRACKED_EXTRAS.match(name):
                continue
            specs.setdefault(f"{name}[{canonicalize_name(extra)}]" if extra else name, set()).add(spec)
            if not extra:
                _cuda_evidence(name, req, cuda)
    local = _LOCAL_CUDA.search(filename)
    if local:
        cuda[0] = {int(local.group(1))}
    out = {k: {"specifier": ",".join(sorted(s for s in v if s))} for k, v in sorted(specs.items())}
    if cuda:
        major = str(max(cuda[min(cuda)]))
        out["cuda"] = {"major": major, "specifier": f"=={major}.*"}
    return out


def _cuda_evidence(name: str, req: Requirement, cuda: dict[int, set[int]]) -> None:
    """What a requirement says of the CUDA major: `nvidia-*-cu12`, an extra such as `[cu13]`, a `cuda-python`
    pin (weakest)."""
    match = _CUDA_REQ.match(name)
    if match:
        cuda.setdefault(1, set()).add(int(match.group(1)))
    for extra in req.extras:
        m = _CUDA_TAG.fullmatch(extra)
        if m:
            cuda.setdefault(2, set()).add(int(m.group(1)))
    if name in ("cuda-python", "cuda-bindings"):
        for s in req.specifier:
            if s.operator in ("==", ">=", "~=") and s.version.split(".")[0].isdigit():
                cuda.setdefault(3, set()).add(int(s.version.split(".")[0]))


def _requirement_lines(files: dict[str, str]) -> list[str]:
    meta = next((t for p, t in sorted(files.items()) if p.endswith(".dist-info/METADATA")), None)
    if meta is None:
        meta = files.get("_sdist/PKG-INFO")
    if meta is not None:
        reqs = Parser().parsestr(meta).get_all("Requires-Dist") or []
        if reqs:
            return [str(r) for r in reqs]
    pyproject = files.get("_sdist/pyproject.toml")
    if pyproject and tomllib is not None:
        try:
            project = tomllib.loads(pyproject).get("project", {})
        except tomllib.TOMLDecodeError:
            project = {}
        deps = [d for d in project.get("dependencies", []) if isinstance(d, str)]
        for extra, items in (project.get("optional-dependencies") or {}).items():
            deps += [f"{d}; extra == '{extra}'" for d in items if isinstance(d, str) and ";" not in d]
        if deps:
            return deps
    return _requirement_file("_sdist/requirements.txt", files, set())


def _requirement_file(path: str, files: dict[str, str], seen: set[str]) -> list[str]:
    if path in seen or path not in files:
        return []
    seen.add(path)
    out: list[str] = []
    for raw in files[path].splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line.startswith("-r "):
            out += _requirement_file("_sdist/" + line[3:].strip(), files, seen)
        elif line and not line.startswith(("#", "-")):
            out.append(line)
    return out
