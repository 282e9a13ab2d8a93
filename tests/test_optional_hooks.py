"""Installing the plugin must never break a pytest run: hooks of optional plugins (pytest-xdist) are declared
optional, so pytest starts whether or not those plugins are installed."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import _pytest.hookspec
import pytest

import pytest_gpucompat.hooks
import pytest_gpucompat.plugin
import pytest_gpucompat.session.collector


def _hook_functions() -> list[tuple[str, object]]:
    """Every ``pytest_*`` hook implementation the package registers (module-level plugin and plugin classes)."""
    found: list[tuple[str, object]] = []
    for module in (pytest_gpucompat.plugin, pytest_gpucompat.session.collector):
        for owner in (module, *(c for _, c in inspect.getmembers(module, inspect.isclass)
                                if c.__module__ == module.__name__)):
            for name, fn in vars(owner).items():
                if name.startswith("pytest_") and callable(fn):
                    found.append((f"{owner.__name__}.{name}", fn))
    return found


def test_every_hook_outside_pytest_and_gpucompat_is_optional() -> None:
    known = {n for n in dir(_pytest.hookspec) if n.startswith("pytest_")}
    known |= {n for n in dir(pytest_gpucompat.hooks) if n.startswith("pytest_")}
    foreign = [(where, fn) for where, fn in _hook_functions() if where.rsplit(".", 1)[1] not in known]
    assert foreign, "the plugin implements pytest-xdist hooks; this test must see them"
    not_optional = [where for where, fn in foreign
                    if not getattr(fn, "pytest_impl", {}).get("optionalhook", False)]
    assert not_optional == [], f"hooks of optional plugins must be @pytest.hookimpl(optionalhook=True): {not_optional}"


@pytest.mark.parametrize("args", [[], ["--gpucompat"]], ids=["plain", "gpucompat"])
def test_pytest_runs_without_xdist(tmp_path: Path, args: list[str]) -> None:
    """What a fresh install without pytest-xdist sees: ``-p no:xdist`` removes xdist's hook specifications."""
    (tmp_path / "test_plain.py").write_text("def test_a():\n    assert 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args, "test_plain.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "INTERNALERROR" not in proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
