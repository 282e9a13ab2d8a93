"""Memory cycles, run inside a child process so that what they measure belongs to one process alone.

``create_destroy_cycles`` repeats create -> generate -> destroy of one engine in the same process and
samples memory after each destroy (PyTorch's CudaMemoryLeakCheck way: settle first, then read);
``one_process_run`` is one whole engine life in a process that then exits, for measuring what a
finished process leaves behind on the device (the seeds' "CUDA context leak", claim S55).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..engines import create
from ..engines.base import EngineSpec
from .memory import MemorySample, settle


def _device_index(spec: EngineSpec) -> int | None:
    """CUDA ordinal 0 of this process when the engine runs on a GPU, None for host-only runs."""
    device = str(spec.params.get("device", ""))
    if device.startswith("cpu"):
        return None
    try:
        import torch

        return 0 if torch.cuda.is_available() else None
    except ImportError:
        return 0 if os.environ.get("CUDA_VISIBLE_DEVICES", "") not in ("", "-1") else None


def create_destroy_cycles(
    spec: EngineSpec,
    cycles: int,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    on_cycle: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Samples before the first engine (cycle 0) and after each destroy (cycles 1..N), as plain dicts.

    ``on_cycle`` runs after each destroy, before sampling: the detection benchmark plants leaks through it.
    """
    device = _device_index(spec)
    samples: list[MemorySample] = [settle(device, cycle=0)]
    timings = []
    for cycle in range(1, cycles + 1):
        t0 = time.perf_counter()
        engine = create(spec.engine)
        engine.start(spec)
        engine.generate(prompts, max_tokens, 1)
        engine.shutdown()
        del engine
        timings.append(time.perf_counter() - t0)
        if on_cycle is not None:
            on_cycle(cycle)
        samples.append(settle(device, cycle=cycle))
    return [dict(dataclasses.asdict(s), cycle_s=t) for s, t in zip(samples, [0.0, *timings])]


def one_process_run(spec: EngineSpec, prompts: Sequence[Sequence[int]], max_tokens: int) -> dict[str, Any]:
    """Start, generate, sample while up; the caller measures the device after this process has exited."""
    device = _device_index(spec)
    engine = create(spec.engine)
    engine.start(spec)
    engine.generate(prompts, max_tokens, 1)
    up = settle(device, cycle=0)
    engine.shutdown()
    return dataclasses.asdict(up)
