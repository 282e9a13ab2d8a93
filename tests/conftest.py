import importlib.util

import pytest

pytest_plugins = ["pytester"]


def requires(module: str) -> None:
    """Skip unless ``module`` is installed, without importing it: pytester gives each test a copy of sys.modules and
    drops what the test imported, and a C extension (numpy under transformers) cannot be imported a second time."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
