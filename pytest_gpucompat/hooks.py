"""Hooks a ``conftest.py`` (or a plugin) can implement to change the plugin's policy, in pytest-xdist's
``newhooks.py`` style: what each hook decides, when it is called, and an example. Each hook is ``firstresult``:
the first implementation that returns something other than None wins, and None keeps the built-in behaviour.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .catalog.base import EngineSpec
    from .kb import Decision, Finding
    from .machine.fingerprint import Fingerprint
    from .workload.matrix import MatrixCell


@pytest.hookspec(firstresult=True)
def pytest_gpucompat_decide(
    config: pytest.Config, cell: MatrixCell, findings: tuple[Finding, ...], fingerprint: Fingerprint
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
def pytest_gpucompat_gpu_for_worker(
    config: pytest.Config, worker_index: int, gpu_uuids: list[str], workers_per_gpu: int
) -> Any:
    """The ``CUDA_VISIBLE_DEVICES`` value for pytest-xdist worker ``gw<worker_index>``.

    Called in each worker at configure, before CUDA starts, when the plugin is on and NVML lists GPUs;
    ``gpu_uuids`` are the visible GPUs' UUIDs (an outer ``CUDA_VISIBLE_DEVICES`` already applied) and
    ``workers_per_gpu`` is ``--gpucompat-workers-per-gpu`` (resolved when ``auto``). Return None for the default:
    ``workers_per_gpu`` consecutive workers per GPU, ``gpu_uuids[worker_index // workers_per_gpu % len(gpu_uuids)]``
    (one GPU per worker by default). Workers given the same GPU share it through its memory ledger.

    Example: two GPUs per worker, for tensor-parallel cells (run with ``-n`` half the GPUs)::

        def pytest_gpucompat_gpu_for_worker(config, worker_index, gpu_uuids):
            pair = gpu_uuids[2 * worker_index: 2 * worker_index + 2]
            return ",".join(pair) if len(pair) == 2 else None
    """


@pytest.hookspec(firstresult=True)
def pytest_gpucompat_gpu_need(config: pytest.Config, spec: EngineSpec, total_mib: float) -> float | None:
    """The GPU memory, in MiB, that an engine started for ``spec`` holds, when workers share GPUs.

    Called in a pytest-xdist worker that shares its GPU (``--gpucompat-workers-per-gpu``) before each engine it
    starts; ``total_mib`` is the memory of the worker's GPU. The engine starts once this much fits beside what the
    run's other engines reserved. Return None for the built-in estimate from the engine's descriptor
    (``pytest_gpucompat.gpushare.packing.engine_need``: vLLM ``gpu_memory_utilization`` × total, SGLang
    ``mem_fraction_static`` × total, TensorRT-LLM its weights and ``free_gpu_memory_fraction`` of the rest,
    transformers its weights in the cell's dtype, each plus an overhead); ``float("inf")`` gives the engine a GPU of
    its own.

    Example: peaks measured in an earlier run, kept in a file of your own::

        import json

        PEAKS_MIB = json.load(open("gpu-peaks.json"))  # {"vllm": 9000, "hf": 1500}

        def pytest_gpucompat_gpu_need(config, spec, total_mib):
            return PEAKS_MIB.get(spec.engine)
    """


@pytest.hookspec(firstresult=True)
def pytest_gpucompat_cell_exclusive(config: pytest.Config, item: pytest.Item) -> bool | None:
    """Whether a test must have its GPU to itself while it runs, when workers share GPUs.

    Called at the setup of each test in a pytest-xdist worker that shares its GPU (``--gpucompat-workers-per-gpu``),
    after skip marks were applied. An exclusive test waits until no other engine of the run is on its GPU (the
    worker's own idle engines are shut down) and keeps every other start out until its teardown. Return None for
    the default: tests marked ``@pytest.mark.gpucompat(..., exclusive=True)`` are exclusive; the others (the memory
    suite too: its verdicts judge the engine's own processes, and name other tenants without blaming them) share
    the GPU and record ``measured_under_sharing: 1`` when other engines were live beside them.

    Example: measure throughput on a GPU of its own, keep the memory suite's device-wide figures clean::

        def pytest_gpucompat_cell_exclusive(config, item):
            if item.originalname == "test_generates_requested_tokens":
                return True
            if item.module.__name__.endswith("test_memory"):
                return True
            return None
    """
