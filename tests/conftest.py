import contextlib
import importlib
import importlib.util

import pytest

pytest_plugins = ["pytester"]

# pytester gives each in-process run a copy of sys.modules and drops what the run imported. A C extension (numpy,
# torch) cannot be imported a second time, and a module kept by a plugin loaded once (yaml's loaders in
# pytest_gpucompat.inputs) would no longer be the one `except yaml.YAMLError` names: import them before any run.
for _name in ("yaml", "numpy", "torch"):
    with contextlib.suppress(ImportError):
        importlib.import_module(_name)


def requires(module: str) -> None:
    """Skip unless ``module`` is installed, without importing it in the test."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
