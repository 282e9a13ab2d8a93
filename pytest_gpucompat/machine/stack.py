"""The software stack a fingerprint records: which distributions matter (the registered engines, asked live, and
the kernels, runtimes and libraries beside them), their installed versions, and the CUDA version torch was built for.
Read from metadata files, never by importing the packages.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping

from ..catalog.registry import stack_packages, tracked_packages
from ..common.inputs import read_bytes
from ..common.installed import find

# Distributions whose versions matter for compatibility besides those the engines' descriptors declare (their
# `packages` and `stack_packages`): what several engines share. Several names may stand for one.
_OTHER_PACKAGES: Mapping[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "flashinfer-python": ("flashinfer-python", "flashinfer"),
    "xformers": ("xformers",),
    "flash-attn": ("flash-attn",),
    "triton": ("triton",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"),
    "cuda-runtime": ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12"),
}


def tracked_distributions() -> dict[str, tuple[str, ...]]:
    """Fingerprint key -> the distribution names that may carry it: the registered engines and what each declares
    beside itself (asked live, so an engine registered later is tracked too), and the packages they share."""
    return {**tracked_packages(), **stack_packages(), **_OTHER_PACKAGES}

_VERSION_FILE_BYTES = 64 * 1024  # torch/version.py: a dozen lines

def installed_packages(reasons: list[str] | None = None) -> dict[str, str]:
    """Versions of the tracked distributions, the first installed name of each in the order listed; metadata that
    cannot be read safely (a FIFO, a device) is a line in ``reasons`` (installed.find).

    Read from the distributions' own metadata directories (installed.py), not by importing importlib.metadata or
    scanning every installed distribution: either cost more than the rest of `gpucompat env`.
    """
    tracked = tracked_distributions()
    installed = find((name for names in tracked.values() for name in names), reasons)
    found: dict[str, str] = {}
    for key, names in tracked.items():
        version = next((installed[name].version for name in names if name in installed), None)
        if version:
            found[key] = version
    return dict(sorted(found.items()))


def cuda_runtime_version(packages: Mapping[str, str]) -> str | None:
    """The CUDA version torch (and so the engines) was built for, without importing torch."""
    if "torch" in packages:
        from_file = _torch_version_file()
        if from_file is not None:
            return from_file or None
        local = packages["torch"].partition("+")[2]
        if local.startswith("cu") and local[2:].isdigit():
            digits = local[2:]
            return f"{int(digits[:-1])}.{digits[-1]}"
        if local:
            return None
    runtime = packages.get("cuda-runtime")
    if runtime:
        return ".".join(runtime.split(".")[:2])
    return None


def _torch_version_file() -> str | None:
    """Read ``cuda = '13.0'`` from torch/version.py; "" means a CPU build, None means unknown."""
    torch = find(["torch"]).get("torch")
    try:
        raw = read_bytes(torch.location / "torch" / "version.py", _VERSION_FILE_BYTES) if torch is not None else b""
    except OSError:
        return None
    text = raw.decode("utf-8", "replace")
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith("cuda"):
            value = line.partition("=")[2].strip()
            return "" if value in ("None", "") else value.strip("'\"")
    return None
