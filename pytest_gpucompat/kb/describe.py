"""A rule's ``when`` in words ("no GPU visible and driver >=580"), for findings whose condition is the point.

``describe_runner`` (kb.match) says what *this runner* has for a problem's conditions; advice has no problem on the
runner to explain, so `gpucompat check` prints the condition the advice is about instead. Without it a line such as
"Recreate the container" reads as an instruction for every machine, when it applies only where no GPU is visible.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet

from ..common.versions import matches, parse_version
from .schema import SPECIFIER_FIELDS, Conditions, ParamCondition, Rule


def describe_when(rule: Rule) -> str:
    """The rule's engine and conditions as one short phrase; ``""`` for a rule that applies everywhere."""
    w = rule.when
    parts = [f"engine {rule.engine}"] if rule.engine else []
    parts.extend(_machine(w))
    parts.extend(_packages(w))
    for name, cond in w.params:
        parts.append(_param(name, cond))
    if w.model:
        parts.append("model " + " or ".join(w.model))
    if w.needs_gpus:
        parts.append(f"more GPUs needed ({' × '.join(w.needs_gpus)}) than visible")
    for dividend, divisor in w.needs_divisible:
        parts.append(f"{dividend} not divisible by {divisor}")
    if w.needs_memory:
        parts.append(f"the weights per GPU (split by {' × '.join(w.needs_memory)}) larger than the smallest GPU")
    return " and ".join(parts)


def _spec(spec: SpecifierSet) -> str:
    """``==13.0`` (and the ``==13.0.*`` a bare ``13.0`` is read as) as ``13.0``; anything else as written
    (``>=580``, ``<590,>=580``)."""
    items = list(spec)
    if len(items) == 1 and items[0].operator == "==":
        return items[0].version.removesuffix(".*")
    return str(spec) or "any"


def _gpu_count(spec: SpecifierSet) -> str:
    """The phrase for the common cases ("no GPU visible", "2 GPUs visible") rather than ``gpu_count <1``."""
    if matches(spec, parse_version("0")) and not matches(spec, parse_version("1")):
        return "no GPU visible"
    shown = _spec(spec)
    return f"{shown} GPU{'' if shown == '1' else 's'} visible"


_LABELS = {"cuda_driver": "CUDA driver", "cuda_runtime": "CUDA runtime"}
GPU_SPECIFIERS = ("gpu_count", "compute_capability", "gpu_memory_mib")  # said with the GPU conditions


def condition_label(name: str) -> str:
    """How a condition on a machine fact is named in words: ``CUDA driver`` for ``cuda_driver``; a field without a
    label of its own by its name (``when.python`` as ``python``)."""
    return _LABELS.get(name, name.replace("_", " "))


def _machine(w: Conditions) -> list[str]:
    parts: list[str] = []
    if w.gpu_count is not None:
        parts.append(_gpu_count(w.gpu_count))
    if w.gpu:
        parts.append("GPU " + " or ".join(w.gpu))
    if w.arch:
        parts.append("architecture " + " or ".join(w.arch))
    if w.compute_capability is not None:
        parts.append(f"compute capability {_spec(w.compute_capability)}")
    if w.gpu_memory_mib is not None:
        parts.append(f"GPU memory {_spec(w.gpu_memory_mib)} MiB")
    if w.interconnect is not None:
        parts.append(f"interconnect {w.interconnect}")
    for name in SPECIFIER_FIELDS:  # the driver, CUDA, and any other version fact of the machine
        spec = getattr(w, name)
        if spec is not None and name not in GPU_SPECIFIERS:
            parts.append(f"{condition_label(name)} {_spec(spec)}")
    return parts


def _packages(w: Conditions) -> list[str]:
    parts = []
    for name, spec in w.packages:
        if spec is None:
            parts.append(f"{name} not installed")
        else:
            parts.append(f"{name} {_spec(spec)}" if str(spec) else f"{name} installed")
    if w.install is not None:
        engine, state = w.install
        parts.append(f"{engine} installed {'with' if state == 'complete' else 'without'} every requirement it declares")
    for name, values, negated in w.env:
        listed = " or ".join("not set" if v is None else f"={v}" for v in values)
        parts.append(f"{name} {'not ' if negated else ''}{listed}")
    return parts


def _param(name: str, cond: ParamCondition) -> str:
    if cond.specifier is not None:
        return f"{name} {_spec(cond.specifier)}"
    values = ["not set" if v is None else str(v) for v in cond.values or ()]
    return f"{name} {' or '.join(values)}"
