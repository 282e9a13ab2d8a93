"""pytest-xdist: one worker per visible GPU, each pinned to its GPU before CUDA starts."""

from __future__ import annotations

import os

import pytest

from . import fingerprint as fpmod


def auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per visible GPU, at least one on a machine without GPUs."""
    return max(1, len(fpmod.collect().gpus))


def pin_worker_gpu(config: pytest.Config) -> str | None:
    """Give worker gwN the N-th visible GPU, by UUID, so an outer CUDA_VISIBLE_DEVICES is respected."""
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
    value = config.hook.pytest_gpucompat_gpu_for_worker(
        config=config, worker_index=int(digits), gpu_uuids=uuids
    ) or uuids[int(digits) % len(uuids)]
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    os.environ["CUDA_VISIBLE_DEVICES"] = str(value)
    return str(value)
