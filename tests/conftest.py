import contextlib
import importlib
import importlib.util
import sys

import pytest
from _pytest.pytester import SysModulesSnapshot

pytest_plugins = ["pytester"]

# pytester gives each in-process run a copy of sys.modules and drops what the run imported. A C extension (numpy,
# torch) cannot be imported a second time, and a module kept by a plugin loaded once (yaml's loaders in
# pytest_gpucompat.inputs) would no longer be the one `except yaml.YAMLError` names: import them before any run.
for _name in ("yaml", "numpy", "torch"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_name)

# What a run imports later is kept too: torch registers an operator library the first time some of its submodules
# are imported (transformers imports torch.distributed.tensor to save a model), and tokenizers and safetensors are
# Rust extensions; each of them fails when imported a second time in one process.
_KEEP = frozenset({"yaml", "numpy", "torch", "transformers", "tokenizers", "safetensors", "huggingface_hub"})
_restore = SysModulesSnapshot.restore


def _restore_keeping_extensions(self: SysModulesSnapshot) -> None:
    kept = {name: mod for name, mod in sys.modules.items() if name.partition(".")[0] in _KEEP}
    _restore(self)
    sys.modules.update(kept)


SysModulesSnapshot.restore = _restore_keeping_extensions  # type: ignore[method-assign]


def requires(module: str) -> None:
    """Skip unless ``module`` is installed, without importing it in the test."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
