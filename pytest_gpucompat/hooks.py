"""Hooks a ``conftest.py`` (or a plugin) can implement to change the plugin's policy, in pytest-xdist's
``newhooks.py`` style: what each hook decides, when it is called, and an example. Each hook is ``firstresult``:
the first implementation that returns something other than None wins, and None keeps the built-in behaviour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .fingerprint import Fingerprint
    from .kb import Decision, Finding
    from .matrix import Cell


@pytest.hookspec(firstresult=True)
def pytest_gpucompat_decide(
    config: pytest.Config, cell: Cell, findings: tuple[Finding, ...], fingerprint: Fingerprint
) -> Decision | None:
    """Decide what the knowledge base's findings do to one cell: run it, skip it, or xfail it.

    Called once per cell at collection, after the rules were matched, and again for each runner of a fleet file
    when the fleet preview is printed (``fingerprint`` is then that runner's). ``findings`` are the cell's findings,
    unconfirmed claims included (``finding.unconfirmed``). Return a ``Decision`` to override the default policy
    (docs/knowledge-base.md), or None to keep it.

    Example: run every known-bad cell of one engine anyway, as a non-strict xfail::

        from pytest_gpucompat import Decision

        def pytest_gpucompat_decide(config, cell, findings, fingerprint):
            broken = [f for f in findings if f.severity == "broken" and not f.unconfirmed]
            if cell.engine == "sglang" and broken:
                return Decision("xfail", False, f"known bad, run anyway: {broken[0].id}", findings)
            return None
    """


@pytest.hookspec(firstresult=True)
def pytest_gpucompat_gpu_for_worker(config: pytest.Config, worker_index: int, gpu_uuids: list[str]) -> Any:
    """The ``CUDA_VISIBLE_DEVICES`` value for pytest-xdist worker ``gw<worker_index>``.

    Called in each worker at configure, before CUDA starts, when the plugin is on and NVML lists GPUs;
    ``gpu_uuids`` are the visible GPUs' UUIDs (an outer ``CUDA_VISIBLE_DEVICES`` already applied). Return None for
    the default, one GPU per worker (``gpu_uuids[worker_index % len(gpu_uuids)]``).

    Example: two GPUs per worker, for tensor-parallel cells (run with ``-n`` half the GPUs)::

        def pytest_gpucompat_gpu_for_worker(config, worker_index, gpu_uuids):
            pair = gpu_uuids[2 * worker_index: 2 * worker_index + 2]
            return ",".join(pair) if len(pair) == 2 else None
    """
