"""The shape of the package: no import circle (lazy imports inside functions count too), modules of one
responsibility and a readable size, and a public API that names only what exists."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_gpucompat

PACKAGE = Path(pytest_gpucompat.__file__).resolve().parent
# A backstop against a module that grew several concepts, set well above the largest module so that a split is
# decided by what a module holds, never by its line count.
MAX_LINES = 800


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, type_checking: bool = False) -> set[str]:
    """The package modules ``name`` imports anywhere in its code; under ``if TYPE_CHECKING:`` too when asked."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:
                    found.add(sub)
                elif target in MODULES:
                    found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return out


@pytest.mark.parametrize("type_checking", [False, True], ids=["run-time", "with-type-checking-imports"])
def test_no_import_circle(type_checking: bool) -> None:
    """No two modules need each other, at run time nor for the type checker: a circle hidden behind
    ``TYPE_CHECKING`` is still two modules that cannot be understood apart."""
    graph = {name: {m for m in _imports(name, path, type_checking) if not name.startswith(m + ".")}  # own parent
             for name, path in MODULES.items()}
    assert _cycles(graph) == []


def _package_of(module: str) -> str:
    """``pytest_gpucompat.engines.child`` -> ``pytest_gpucompat.engines``; a root module is its own package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def test_no_package_level_circle() -> None:
    """Packages depend one way: a module of `engines` importing `checks` while `checks` imports `engines` is a
    circle between the two packages even when no two modules form one."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        graph.setdefault(_package_of(name), set()).update(
            p for p in map(_package_of, _imports(name, path)) if p != _package_of(name))
    assert _cycles(graph) == []


#: The floors under the engine adapters: they read the catalog (`pytest_gpucompat.catalog`), never the adapters'
#: package, so what a machine, a rule, a shared GPU, a workload or a report is does not hang on adapter code.
BELOW_ADAPTERS = ("catalog", "common", "machine", "kb", "gpushare", "workload", "report")


def test_floors_below_the_adapters_import_nothing_from_them() -> None:
    found = {name: sorted(m for m in _imports(name, path) if m == "pytest_gpucompat.engines"
                          or m.startswith("pytest_gpucompat.engines."))
             for name, path in MODULES.items() if name.split(".")[1:2] and name.split(".")[1] in BELOW_ADAPTERS}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_report_package_knows_nothing_of_pytest() -> None:
    """report/ is the model and its renderers: pytest's transport (stash keys, worker payloads, the report lock's
    UsageError) lives in session/. Lazy imports count."""
    found = {}
    for name, path in MODULES.items():
        if name.startswith("pytest_gpucompat.report."):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0]
            if bad := [m for m in names if m.split(".")[0] in ("pytest", "_pytest", "xdist")]:
                found[name] = bad
    assert found == {}


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_too_long() -> None:
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"split these modules by responsibility (over {MAX_LINES} lines): {long}"


def test_public_api_names_what_exists() -> None:
    missing = [name for name in pytest_gpucompat.__all__ if not hasattr(pytest_gpucompat, name)]
    assert missing == []


def test_fixtures_are_a_plugin_of_their_own() -> None:
    """Every fixture in fixtures.py exists through its own entry point, with no list to keep in plugin.py."""
    from importlib.metadata import entry_points

    plugins = {e.name: e.value for e in entry_points(group="pytest11")}
    assert plugins.get("gpucompat") == "pytest_gpucompat.plugin"
    assert plugins.get("gpucompat_fixtures") == "pytest_gpucompat.fixtures"
    assert "pytest_gpucompat.fixtures" not in _imports("pytest_gpucompat.plugin", MODULES["pytest_gpucompat.plugin"])


def _engine_words() -> set[str]:
    """Every spelling that names a registered engine, taken from the registry live: its name, aliases, module, the
    distribution that carries its version and the distributions its descriptor tracks for it."""
    from pytest_gpucompat.catalog.registry import descriptors

    words: set[str] = set()
    for d in descriptors():
        words.update((d.name, *d.aliases, d.distribution, *d.packages, *([d.module] if d.module else [])))
        for key, names in d.stack_packages.items():
            words.update((key, *names))
    return {w.strip().lower() for w in words}


def _engine_names_in(source: str, words: set[str]) -> list[tuple[int, str]]:
    """(line, text) of each string constant of ``source`` that is one of ``words`` (any case). Strings that stand
    alone as a statement (module, class, function and attribute docstrings) are prose and are skipped: an example
    there, such as a conftest hook that names one engine, is for the reader."""
    tree = ast.parse(source)
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
            and node.value.strip().lower() in words]


def test_no_module_outside_the_engines_names_an_engine() -> None:
    """What an engine is lives in its descriptor (catalog/registry.py): a module elsewhere that compares with an
    engine's name, or names its package, keeps a second list that a new engine would not be in. It asks the
    registry instead (`drives_server`, `reference_name`, `default_dtype`, `stack_packages`, ...)."""
    words = _engine_words()
    engines = PACKAGE / "engines"
    catalog = PACKAGE / "catalog" / "registry.py"  # the descriptors themselves
    found = {f"{path.relative_to(PACKAGE)}:{line}": text for path in sorted(MODULES.values())
             if engines not in path.parents and path != catalog
             for line, text in _engine_names_in(path.read_text(encoding="utf-8"), words)}
    assert found == {}, f"ask the engine registry instead of naming an engine: {found}"


def test_the_engine_name_search_skips_docstrings_only() -> None:
    source = ('"""Runs on vllm."""\n'
              'def f(engine):\n'
              '    """e.g. f("vllm")"""\n'
              '    return engine == "VLLM" or engine in ("hf", "other") or f"{engine}-vllm"\n')
    assert _engine_names_in(source, _engine_words()) == [(4, "VLLM"), (4, "hf")]
