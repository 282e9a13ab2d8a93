"""Hook specifications users can implement in a conftest.py to change policy (pytest-xdist's newhooks style)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .fingerprint import Fingerprint
    from .matrix import Cell
    from .verdicts import Decision, Finding


@pytest.hookspec(firstresult=True)
def pytest_gpucompat_decide(
    config: pytest.Config, cell: Cell, findings: tuple[Finding, ...], fingerprint: Fingerprint
) -> Decision | None:
    """Decide what the findings do to a cell (run, skip, xfail). Return None to keep the default policy."""


@pytest.hookspec(firstresult=True)
def pytest_gpucompat_gpu_for_worker(config: pytest.Config, worker_index: int, gpu_uuids: list[str]) -> Any:
    """The CUDA_VISIBLE_DEVICES value for a pytest-xdist worker. Return None for one GPU per worker."""
