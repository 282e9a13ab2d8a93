"""Which reference this runner can afford, decided before anything is loaded: never OOM a runner to build one.

The precision checks want a float32 transformers reference of the same model. A 70B checkpoint in float32 needs
280 GB, more than most runners have, and loading it anyway would kill the run (or the machine's other jobs). So the
reference's memory is estimated from the checkpoint (parameters from the safetensors headers, activations for the
prompt lengths from config.json) and set against the free GPU memory (NVML, else torch) and the available host
memory (/proc/meminfo and the cgroup's limit), and the first that fits is taken: float32 on the GPU, float32 on
the CPU, bfloat16 on the GPU or the CPU (compared with wider thresholds: the `bfloat16-reference` class of
matrices/thresholds.yaml), or none (golden-only: the cell compares only with recorded golden outputs, or skips).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .checkpoint import DTYPE_BYTES, MIB

HEADROOM = 0.9
"""Use at most this share of what is free: allocators fragment, and other processes move."""
GPU_OVERHEAD_MIB = 1024.0
"""CUDA context, cuBLAS workspaces, the caching allocator's slack."""
HOST_OVERHEAD_MIB = 1024.0
"""torch and transformers themselves, and the copies a load makes."""
ACTIVATION_MARGIN = 1.25
KINDS = ("float32-gpu", "float32-cpu", "bfloat16-gpu", "bfloat16-cpu", "golden-only")
_DTYPES = ("float32", "bfloat16")
"""The dtypes a reference may run in, most precise first."""


@dataclass(frozen=True)
class ReferenceNeed:
    """MiB of weights and of activations a reference needs in each dtype; None where it cannot be told."""

    weights_mib: Mapping[str, float] | None
    activations_mib: Mapping[str, float]
    basis: str
    """How it was estimated, for the cell's report: `7,615,616,512 parameters (safetensors headers), ...`."""

    def on_gpu(self, dtype: str) -> tuple[float, float] | None:
        """(GPU MiB, host MiB) of a reference on the GPU: the weights pass through host memory while loading."""
        if self.weights_mib is None:
            return None
        weights = self.weights_mib[dtype]
        return weights + self.activations_mib[dtype] + GPU_OVERHEAD_MIB, weights + HOST_OVERHEAD_MIB

    def on_cpu(self, dtype: str) -> float | None:
        if self.weights_mib is None:
            return None
        return self.weights_mib[dtype] + self.activations_mib[dtype] + HOST_OVERHEAD_MIB


@dataclass(frozen=True)
class Choice:
    """The reference a cell compares with, and why: one of KINDS."""

    kind: str
    reason: str
    gpu: bool = False
    """A GPU torch can use was there: a CPU reference must then say so, as the hf engine would take the GPU."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown reference kind {self.kind!r} (one of {', '.join(KINDS)})")

    @property
    def runs(self) -> bool:
        """False for golden-only: no reference is loaded."""
        return self.kind != "golden-only"

    @property
    def dtype(self) -> str | None:
        return None if not self.runs else self.kind.split("-")[0]

    @property
    def device(self) -> str | None:
        return None if not self.runs else ("cuda" if self.kind.endswith("gpu") else "cpu")

    @property
    def engine_params(self) -> dict[str, str]:
        """The hf engine's params for this reference (empty for golden-only). The device only where it is not the
        engine's default, so that an hf float32 cell and the reference stay one loaded model."""
        if not self.runs:
            return {}
        return {"dtype": str(self.dtype), **({"device": "cpu"} if self.device == "cpu" and self.gpu else {})}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def estimate_need(params: int | None, config: Mapping[str, Any], prompt_lengths: Sequence[int], max_tokens: int,
                  weights_basis: str = "safetensors headers") -> ReferenceNeed:
    """Weights (``params`` x bytes per dtype) and activations of a greedy run over the prompts, all in one batch
    (the worst case): the KV cache of prompt + generated tokens, the prefill's logits over every position, its MLP
    and attention transients; times ACTIVATION_MARGIN. Pure."""
    nested = config.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, Mapping) else config

    def num(key: str, default: int = 0) -> int:
        value = text.get(key)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default

    hidden, layers, vocab = num("hidden_size"), num("num_hidden_layers"), num("vocab_size")
    heads = num("num_attention_heads", 1) or 1
    kv_heads, head_dim = num("num_key_value_heads", heads) or heads, num("head_dim", hidden // heads)
    inter = num("intermediate_size", 4 * hidden)
    batch, prompt = len(prompt_lengths), max(prompt_lengths, default=0)
    total = prompt + max_tokens
    activations: dict[str, float] = {}
    for dtype in _DTYPES:
        size = DTYPE_BYTES[dtype]
        kv = 2 * layers * batch * total * kv_heads * head_dim * size
        logits = batch * prompt * vocab * size + 3 * batch * vocab * 4
        mlp = batch * prompt * (3 * inter + 4 * hidden) * size
        scores = batch * heads * prompt * total * size
        activations[dtype] = (kv + logits + mlp + scores) * ACTIVATION_MARGIN / MIB
    weights = None if params is None else {d: params * DTYPE_BYTES[d] / MIB for d in _DTYPES}
    counted = "unknown parameters" if params is None else f"{params:,} parameters ({weights_basis})"
    basis = f"{counted}, {batch} prompts of at most {prompt} tokens + {max_tokens} generated"
    return ReferenceNeed(weights_mib=weights, activations_mib=activations, basis=basis)


def choose_reference(need: ReferenceNeed, free_gpu: float | None, free_host: float | None) -> Choice:
    """The first reference that fits, in the order of KINDS. ``free_gpu``: MiB free on the GPU the reference would
    use (None: no GPU torch can use); ``free_host``: MiB of host memory available (None: unknown, taken as
    enough). A need that cannot be told runs float32 where it always did (GPU if any, else CPU), saying so. Pure."""
    gpu_budget = None if free_gpu is None else free_gpu * HEADROOM
    host_budget = None if free_host is None else free_host * HEADROOM

    def host_fits(mib: float) -> bool:
        return host_budget is None or mib <= host_budget

    if need.weights_mib is None:
        where = ("gpu", "GPU") if free_gpu is not None else ("cpu", "CPU")
        return Choice(f"float32-{where[0]}", f"float32 on the {where[1]}: the checkpoint's size cannot be told "
                                             f"({need.basis})", gpu=free_gpu is not None)
    host_text = "unknown host memory" if free_host is None else f"{_gib(free_host)} host memory available"
    gpu_text = "no GPU" if free_gpu is None else f"{_gib(free_gpu)} free on the GPU"
    tried: list[str] = []
    for dtype in _DTYPES:
        on_gpu = need.on_gpu(dtype)
        on_cpu = need.on_cpu(dtype)
        assert on_gpu is not None and on_cpu is not None
        if gpu_budget is not None and on_gpu[0] <= gpu_budget and host_fits(on_gpu[1]):
            return Choice(f"{dtype}-gpu", f"{dtype} on the GPU: needs {_gib(on_gpu[0])}, {gpu_text}"
                                          + (f"; {'; '.join(tried)}" if tried else ""), gpu=True)
        if host_fits(on_cpu):
            why = f"{dtype} on the CPU: needs {_gib(on_cpu)}, {host_text}"
            if free_gpu is not None:
                why += f" (on the GPU it would need {_gib(on_gpu[0])}, {gpu_text})"
            return Choice(f"{dtype}-cpu", why + (f"; {'; '.join(tried)}" if tried else ""), gpu=free_gpu is not None)
        tried.append(f"{dtype} needs {_gib(on_gpu[0])} on the GPU or {_gib(on_cpu)} on the CPU")
    return Choice("golden-only", f"no reference fits: {'; '.join(tried)}; {gpu_text}, {host_text}",
                  gpu=free_gpu is not None)


# --------------------------------------------------------------------------- what is free here


def free_host_mib() -> float | None:
    """MemAvailable from /proc/meminfo, lowered to what the cgroup's memory limit leaves; None off Linux."""
    available = None
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = float(line.split()[1]) / 1024
                break
    limit = _cgroup_left_mib()
    if limit is not None:
        available = limit if available is None else min(available, limit)
    return available


def _cgroup_left_mib() -> float | None:
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        with contextlib.suppress(OSError, ValueError):
            raw = Path(limit_file).read_text().strip()
            if raw == "max" or int(raw) >= 1 << 60:
                return None
            return (int(raw) - int(Path(usage_file).read_text().strip())) / MIB
    return None


def free_gpu_mib() -> float | None:
    """MiB free on the GPU the reference would use (CUDA device 0 as this process sees it); None when torch
    cannot use a GPU here. NVML first (no CUDA context is made just to ask), else torch."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    free = _nvml_free_mib()
    if free is not None:
        return free
    with contextlib.suppress(Exception):
        return float(torch.cuda.mem_get_info(0)[0]) / MIB
    return None


def _nvml_free_mib() -> float | None:
    from ..machine.fingerprint import nvml, nvml_handle

    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    first = visible[0] if visible else "0"
    if not (first.isdigit() or first.startswith("GPU-")):
        return None  # a MIG instance: NVML's whole-GPU figure would be wrong, torch knows
    with nvml() as pynvml:
        if pynvml is None:
            return None
        try:
            return float(pynvml.nvmlDeviceGetMemoryInfo(nvml_handle(pynvml, first)).free) / MIB
        except Exception:
            return None


def reference_need(model_dir: str | os.PathLike[str], prompt_lengths: Sequence[int], max_tokens: int) -> ReferenceNeed:
    """The need of a checkpoint's reference for these prompts, from its files (nothing loaded)."""
    from .checkpoint import parameter_estimate, read_config

    path = Path(model_dir)
    try:
        config = read_config(path)
    except ValueError:
        config = {}
    params, basis = parameter_estimate(path)
    return estimate_need(params, config, prompt_lengths, max_tokens, basis)


ESTIMATE_MAX_TOKENS = 64
"""Generated tokens the estimate allows for (the suites ask 16; the weights dominate anyway)."""


def choose_for(model_dir: str | os.PathLike[str], prompt_lengths: Sequence[int],
               max_tokens: int = ESTIMATE_MAX_TOKENS) -> tuple[Choice, ReferenceNeed]:
    """The reference this runner can afford for a checkpoint and its prompts, measured now, and the estimate."""
    need = reference_need(model_dir, prompt_lengths, max_tokens)
    return choose_reference(need, free_gpu_mib(), free_host_mib()), need
