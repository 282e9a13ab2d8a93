"""Cells that share a GPU: what an engine needs of it, the GPU's budget, and whether a request fits, all pure.

GPU time is what a runner pays for, and one engine on a tiny model leaves most of an H200 idle. With
``--gpucompat-workers-per-gpu K`` several pytest-xdist workers run cells on one GPU; before an engine starts, its
worker reserves the engine's need in a ledger the run's workers share (``ledger.py``) and waits until the need fits
in the GPU's budget: its total memory times a safety fraction, less what processes outside the run hold. A request
for the whole GPU (a cell that measures device-wide figures, an engine whose need is unknown or exceeds the budget)
waits until the GPU holds nothing else of the run, and keeps everything else out meanwhile. Requests are served in
arrival order, so a large one is never starved by a stream of small ones. No files, no clock, no NVML here.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..catalog.registry import GpuMemory, default_dtype, descriptor, normalize_dtype

MAX_AUTO_WORKERS_PER_GPU = 4
CORES_PER_WORKER = 4
"""``--gpucompat-workers-per-gpu auto``: at most 4 workers a GPU, and 4 CPU cores each (engine starts are CPU-bound)."""


@dataclass(frozen=True)
class Need:
    """The GPU memory one engine holds once started, in MiB; None: the whole GPU. ``why`` says how it was told."""

    mib: float | None
    why: str


@dataclass(frozen=True)
class Request:
    """One entry of the ledger: a worker's reservation (``held``) or its place in the queue (not yet held).

    ``mib`` None asks for the whole GPU. ``ticket`` orders the queue; ``holder`` is the worker process as
    ``"pid:start-time"``, so a dead worker's entries can be told from a live one's whose pid was reused.
    """

    id: str
    holder: str
    gpus: tuple[str, ...]
    mib: float | None
    what: str
    ticket: int
    held: bool = False
    since: float = 0.0


def engine_need(engine: str, params: Mapping[str, Any], total_mib: float, weights_mib: float | None) -> Need:
    """The need of an engine started with ``params`` on a GPU of ``total_mib``, from its descriptor's ``gpu_memory``:
    vLLM ``gpu_memory_utilization`` × total, SGLang ``mem_fraction_static`` × total, TensorRT-LLM the weights and
    ``free_gpu_memory_fraction`` of what they leave, transformers the weights in the cell's dtype, each with its
    descriptor's overhead; the ``openai`` engine needs what its server needs (nothing for a given endpoint).
    ``weights_mib`` is the checkpoint's size in the dtype the engine loads (``load_dtype``); None when unknown."""
    if ":" in engine:
        return Need(None, f"{engine}: an engine by import path, its GPU memory is unknown")
    try:
        found = descriptor(engine)
    except ValueError:
        return Need(None, f"{engine}: unknown engine")
    if found is None:  # pragma: no cover - descriptor() returns None only for import paths
        return Need(None, f"{engine}: unknown engine")
    if str(params.get("device", "")).lower().startswith("cpu"):
        return Need(0.0, f"{found.name} runs on the CPU")
    memory = found.gpu_memory
    if memory is None and found.default_server is not None:
        return _server_need(found.name, found.default_server, params, total_mib, weights_mib)
    if memory is None:
        return Need(None, f"{found.name}: its GPU memory is unknown")
    return fraction_need(found.name, memory, params, total_mib, weights_mib)


def _server_need(client: str, default: str, params: Mapping[str, Any], total_mib: float,
                 weights_mib: float | None) -> Need:
    """The need of the server that engine ``client`` drives: the cell's ``server``, else ``default``."""
    if params.get("endpoint"):
        return Need(0.0, f"{client}: a server running elsewhere")
    if params.get("server_command"):
        return Need(None, f"{client}: a server command of its own, its GPU memory is unknown")
    name = str(params.get("server", default))
    try:
        server = descriptor(name)
    except ValueError:
        return Need(None, f"{client}: unknown server {name!r}")
    if server is None or server.server is None or server.gpu_memory is None:
        return Need(None, f"{client}: the GPU memory of server {name!r} is unknown")
    settings = {**{k: d.value for k, d in server.server.defaults.items()}, **params}
    need = fraction_need(server.name, server.gpu_memory, settings, total_mib, weights_mib)
    return Need(need.mib, f"{client} server {need.why}")


def fraction_need(name: str, memory: GpuMemory, params: Mapping[str, Any], total_mib: float,
                  weights_mib: float | None) -> Need:
    """``memory`` applied to ``params``: the fraction the cell sets (or the default) of the total, the weights."""
    key = next((k for k in memory.params if params.get(k) is not None), None)
    value = params[key] if key is not None else memory.default
    try:
        fraction = float(value)
    except (TypeError, ValueError):
        return Need(None, f"{name}: {key}={value!r} is not a number")
    setting = f"{key or 'default fraction'} {fraction:g}"
    if not memory.weights:
        mib = fraction * total_mib + memory.overhead_mib
        return Need(mib, f"{name}: {setting} × {total_mib:.0f} MiB + {memory.overhead_mib:.0f} MiB")
    if weights_mib is None:
        return Need(None, f"{name}: the size of the checkpoint's weights cannot be told")
    mib = weights_mib + fraction * max(0.0, total_mib - weights_mib) + memory.overhead_mib
    if fraction:
        return Need(mib, f"{name}: weights {weights_mib:.0f} MiB + {setting} of the rest + "
                         f"{memory.overhead_mib:.0f} MiB")
    return Need(mib, f"{name}: weights {weights_mib:.0f} MiB + {memory.overhead_mib:.0f} MiB")


def cache_mib(memory: GpuMemory, params: Mapping[str, Any], total_mib: float,
              weights_mib: float | None) -> float | None:
    """The cache size a shared GPU gives an engine that takes one (``GpuMemory.cache_bytes``): half of what its
    memory fraction (the cell's, else the default) leaves after the weights. The other half is for what the engine
    would otherwise measure by profiling (activations, CUDA graphs, the compile workspace), so it stays inside the
    memory the ledger reserved for it. None: no size can be told (weights unknown, nothing left)."""
    key = next((k for k in memory.params if params.get(k) is not None), None)
    try:
        fraction = float(params[key] if key is not None else memory.default)
    except (TypeError, ValueError):
        return None
    if weights_mib is None or memory.weights:
        return None
    left = fraction * total_mib - weights_mib
    return left / 2 if left > 0 else None


def load_dtype(engine: str, params: Mapping[str, Any]) -> str | None:
    """The dtype an engine loads the weights in, for their size: the cell's ``dtype`` (fp8 is loaded as bfloat16
    first), without one the engine's ``default_dtype`` (transformers: float32), else the checkpoint's own (None)."""
    dtype = params.get("dtype")
    if dtype is None:
        return default_dtype(engine)
    name = normalize_dtype(dtype)
    return "bfloat16" if name == "fp8" else name


def budget_mib(total_mib: float, fraction: float, foreign_mib: float | None) -> float:
    """What the run's engines may reserve on a GPU: ``fraction`` of its memory less what others hold there."""
    return max(0.0, total_mib * fraction - (foreign_mib or 0.0))


def whole(request: Request, budget: float | None) -> bool:
    """Whether the request takes the whole GPU: asked so, or more than the budget could ever give."""
    return request.mib is None or (budget is not None and request.mib >= budget)


def blocker(requests: Iterable[Request], me: Request, budgets: Mapping[str, float | None]) -> str | None:
    """None when ``me`` may take its memory now, else why not (one line).

    On each of its GPUs: nothing held whole by another holder; for a request of the whole GPU, nothing held at all
    and nobody ahead in the queue; otherwise no whole-GPU request ahead, and what is held plus what those ahead
    asked plus its own need within the budget. A holder that holds a GPU whole takes more of it at once.

    A holder that already holds an engine on the GPU (a precision test's engine asking for its reference) is not
    queued behind anyone: what it holds may be in use and is given back only after it gets this, while a request
    ahead of it (a cell that needs the GPU whole, above all) may be waiting for exactly that: the queue would then
    wait for itself. Only the room the others hold counts for it."""
    others = [r for r in requests if r.id != me.id]
    for gpu in me.gpus:
        here = [r for r in others if gpu in r.gpus]
        budget = budgets.get(gpu)
        if any(r.held and r.holder == me.holder and whole(r, budget) for r in here):
            continue  # its own exclusive cell starting an engine
        held = [r for r in here if r.held]
        holding = any(r.holder == me.holder for r in held)
        ahead = [] if holding else [r for r in here if not r.held and r.ticket < me.ticket]
        alone = [r for r in held if whole(r, budget)]
        if alone:
            return f"{gpu} is held whole by {describe_requests(alone[:1])}"
        if whole(me, budget):
            if held:
                return f"waits for {gpu} to hold no other engine of the run: {describe_requests(held)}"
            if ahead:
                return f"waits its turn on {gpu} behind {describe_requests(ahead)}"
            continue
        if any(whole(r, budget) for r in ahead):
            wholes = [r for r in ahead if whole(r, budget)]
            return f"waits behind a cell that needs {gpu} whole: {describe_requests(wholes)}"
        if budget is None:
            continue
        used = sum(r.mib or 0.0 for r in (*held, *ahead))
        assert me.mib is not None
        if used + me.mib > budget:
            return (f"needs {me.mib:.0f} MiB of {gpu}, {max(0.0, budget - used):.0f} of its {budget:.0f} MiB budget "
                    f"free: {describe_requests(held + ahead)}")
    return None


def stalled(requests: Iterable[Request], budgets: Mapping[str, float | None]) -> list[Request]:
    """The waiting requests when none of them can ever be granted: none fits now, and every worker holding room
    on the GPUs they wait for is itself waiting (so nobody will give room back); empty otherwise. The one with
    the latest ticket is the one to give up (``Ledger.reserve``)."""
    entries = list(requests)
    waiting = [r for r in entries if not r.held]
    if not waiting or any(blocker(entries, r, budgets) is None for r in waiting):
        return []
    gpus = {g for r in waiting for g in r.gpus}
    holders = {r.holder for r in entries if r.held and gpus & set(r.gpus)}
    return waiting if holders and holders <= {r.holder for r in waiting} else []


def describe_requests(requests: Sequence[Request]) -> str:
    shown = [f"{r.what} (pid {r.holder.partition(':')[0]}{'' if r.held else ', waiting'}"
             f"{'' if r.mib is None else f', {r.mib:.0f} MiB'})" for r in requests[:3]]
    more = f" and {len(requests) - 3} more" if len(requests) > 3 else ""
    return ", ".join(shown) + more


def first_waiter(requests: Iterable[Request], gpus: Sequence[str], holder: str) -> Request | None:
    """The request of another holder that waits longest for one of ``gpus``: the one a worker makes room for."""
    waiting = [r for r in requests if not r.held and r.holder != holder and set(r.gpus) & set(gpus)]
    return min(waiting, key=lambda r: r.ticket, default=None)


def shared_since(requests: Iterable[Request], released: Mapping[str, Mapping[str, float]], gpus: Sequence[str],
                 holder: str, since: float) -> bool:
    """Whether an engine of another worker was live on one of ``gpus`` at some time after ``since``: one held now,
    or one released after it (``released``: GPU -> holder -> when it last released an engine there)."""
    if any(r.held and r.holder != holder and set(r.gpus) & set(gpus) for r in requests):
        return True
    return any(when >= since for gpu in gpus for who, when in released.get(gpu, {}).items() if who != holder)


def auto_workers_per_gpu(cpus: int | None, gpus: int) -> int:
    """``--gpucompat-workers-per-gpu auto``: up to 4 workers a GPU, with 4 CPU cores for each."""
    per_gpu = (cpus or 1) // (CORES_PER_WORKER * max(1, gpus))
    return max(1, min(MAX_AUTO_WORKERS_PER_GPU, per_gpu))


def gpu_of_worker(worker_index: int, workers_per_gpu: int, gpu_count: int) -> int:
    """Worker gwN's GPU: consecutive workers share one, ``workers_per_gpu`` of them each."""
    return (worker_index // max(1, workers_per_gpu)) % max(1, gpu_count)
