import contextlib
import importlib
import importlib.util
import os
import site
import sys
import sysconfig

import pytest
from _pytest.pytester import SysModulesSnapshot

pytest_plugins = ["pytester"]

# pytester gives each in-process run a copy of sys.modules and drops what the run imported. A C extension (numpy,
# torch) cannot be imported a second time, and a module kept by a plugin loaded once (yaml's loaders in
# pytest_gpucompat.common.inputs) would no longer be the one `except yaml.YAMLError` names: import them before any
# run.
for _name in ("yaml", "numpy", "torch"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_name)

# What a run imports later is kept too: torch registers an operator library the first time some of its submodules
# are imported (transformers imports torch.distributed.tensor to save a model), and tokenizers and safetensors are
# Rust extensions; each of them fails when imported a second time in one process.
# Not only those: any installed library may do the same (a transformers release began importing its `kernels`
# package, whose second import failed every in-process run after the first), so every module imported from an
# installed distribution is kept; only the runs' own test files and conftests are dropped.
_KEEP = frozenset({"yaml", "numpy", "torch", "transformers", "tokenizers", "safetensors", "huggingface_hub"})
_HERE = os.path.realpath(os.path.join(os.path.dirname(__file__), os.pardir)) + os.sep
_INSTALLED = tuple(sorted({os.path.realpath(p) + os.sep for p in (
    *site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["purelib"],
    sysconfig.get_paths()["platlib"], *(e for e in sys.path if e and os.path.isdir(e)))
    if not (os.path.realpath(p) + os.sep).startswith(_HERE)}))
_restore = SysModulesSnapshot.restore


def _installed(module: object) -> bool:
    path = getattr(module, "__file__", None)
    return isinstance(path, str) and os.path.realpath(path).startswith(_INSTALLED)


def _restore_keeping_extensions(self: SysModulesSnapshot) -> None:
    kept = {name: mod for name, mod in sys.modules.items() if name.partition(".")[0] in _KEEP or _installed(mod)}
    _restore(self)
    sys.modules.update(kept)


SysModulesSnapshot.restore = _restore_keeping_extensions  # type: ignore[method-assign]


def requires(module: str) -> None:
    """Skip unless ``module`` is installed, without importing it in the test."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")


@pytest.fixture(autouse=True)
def _terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commands fit their text to the terminal ($COLUMNS first): the same width wherever the tests run."""
    monkeypatch.setenv("COLUMNS", "100")
