"""pytest-xdist: workers pinned to their GPU before CUDA starts, one per GPU or ``--gpucompat-workers-per-gpu``
sharing each, and the cells of one engine kept on one worker when they share.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from ..gpushare.packing import auto_workers_per_gpu, gpu_of_worker
from ..machine import fingerprint as fpmod

WORKERS_PER_GPU = "gpucompat_workers_per_gpu"  # workerinput key: the controller's resolved number


def workers_per_gpu(config: pytest.Config) -> int:
    """``--gpucompat-workers-per-gpu`` as a number: ``auto`` from this machine's CPU cores and GPUs."""
    value = config.getoption("gpucompat_workers_per_gpu", 1)
    if value == "auto":
        return auto_workers_per_gpu(os.cpu_count(), len(fpmod.collect().gpus))
    return max(1, int(value or 1))


def packing(config: pytest.Config) -> bool:
    """Whether this run shares GPUs between workers: more than one worker per GPU, and GPUs to share."""
    return workers_per_gpu(config) > 1 and bool(fpmod.collect().gpus)


def _user_decides_workers(config: pytest.Config) -> bool:
    """Whether a plugin other than this one and pytest-xdist (a user's conftest.py) implements
    ``pytest_xdist_auto_num_workers``: its answer is theirs to give, this plugin's is only the default."""
    hook = getattr(config.hook, "pytest_xdist_auto_num_workers", None)
    if hook is None:
        return False
    ours = __name__.rsplit(".", 2)[0] + "."
    for impl in hook.get_hookimpls():
        module = getattr(impl.plugin, "__name__", "") or ""
        if not (module.startswith(ours) or module.split(".")[0] == "xdist"):
            return True
    return False


def auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker per visible GPU, or ``--gpucompat-workers-per-gpu`` per GPU; one without GPUs. None
    where the user's own ``pytest_xdist_auto_num_workers`` answers (a conftest is never shadowed)."""
    if _user_decides_workers(config):
        return None
    gpus = len(fpmod.collect().gpus)
    return max(1, gpus * workers_per_gpu(config)) if gpus else 1


def pin_worker_gpu(config: pytest.Config) -> str | None:
    """Give worker gwN its GPU by UUID (gwN // workers-per-GPU), so an outer CUDA_VISIBLE_DEVICES is respected."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    worker_id = str(workerinput.get("workerid", "gw0"))
    digits = worker_id.lstrip("gw")
    if not digits.isdigit():
        return None
    uuids = [g.uuid for g in fpmod.collect().gpus if g.uuid]
    if not uuids:
        return None
    per_gpu = max(1, int(workerinput.get(WORKERS_PER_GPU, 1)))
    value = config.hook.pytest_gpucompat_gpu_for_worker(
        config=config, worker_index=int(digits), gpu_uuids=uuids, workers_per_gpu=per_gpu
    ) or uuids[gpu_of_worker(int(digits), per_gpu, len(uuids))]
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    os.environ["CUDA_VISIBLE_DEVICES"] = str(value)
    return str(value)


def engine_scope(nodeid: str) -> str:
    """The work unit of a test when workers share GPUs: its parameter id (``tiny-qwen2-vllm-dtype=bfloat16-...``:
    model and cell), so every test of one engine configuration runs on the worker that started it instead of
    starting it once per worker; a test without parameters is a unit of its own."""
    head, bracket, rest = nodeid.partition("[")
    if not bracket or not rest.endswith("]"):
        return nodeid
    return "[" + rest


EXCLUSIVE_SCOPE = "exclusive "
"""Prefix of an exclusive test's work unit: apart from the shared tests of its engine configuration."""
APART_SCOPE = "apart "
"""Prefix of the work unit of a test that runs whole engine lives in child processes: a unit of its own."""


def make_scheduler(config: pytest.Config, log: Any, unit_kinds: Callable[[], Mapping[str, str]] | None = None) -> Any:
    """xdist's ``load`` scheduling by engine scope when workers share GPUs; None (xdist's own) otherwise.

    ``unit_kinds`` (read once every worker has collected) names the tests dealt out on their own: ``apart`` ones
    (whole engine lives in child processes: the memory tests) first, since they are the run's longest and use no
    engine of their scope, so the shared scopes fill the other workers beside them; ``exclusive`` ones after every
    other unit, since an exclusive test in the middle of a run makes every other worker give its engines back and
    start them again afterwards, and stalls them meanwhile (on an H200, a packed run slower than the serial one).
    """
    if config.getvalue("dist") != "load" or not packing(config):
        return None
    return engine_scope_scheduling()(config, log, unit_kinds)


@functools.cache
def engine_scope_scheduling() -> type:
    from xdist.scheduler import LoadScopeScheduling

    class EngineScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """LoadScopeScheduling over engine scopes (a whole scope goes to one worker): tests apart first, exclusive
        tests last."""

        def __init__(self, config: pytest.Config, log: Any = None,
                     unit_kinds: Callable[[], Mapping[str, str]] | None = None) -> None:
            super().__init__(config, log)
            self._unit_kinds = unit_kinds
            self._kinds: Mapping[str, str] = {}

        def schedule(self) -> None:
            if self.collection is None and self._unit_kinds is not None:
                self._kinds = self._unit_kinds()
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            kind = self._kinds.get(nodeid)
            if kind == "apart":
                return APART_SCOPE + nodeid
            scope = engine_scope(nodeid)
            return EXCLUSIVE_SCOPE + scope if kind == "exclusive" else scope

        def _assign_work_unit(self, node: Any) -> None:
            for scope in [s for s in self.workqueue if s.startswith(APART_SCOPE)][::-1]:
                self.workqueue.move_to_end(scope, last=False)
            for scope in [s for s in self.workqueue if s.startswith(EXCLUSIVE_SCOPE)]:
                self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    return EngineScopeScheduling
