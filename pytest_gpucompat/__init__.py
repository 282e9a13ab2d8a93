"""pytest-gpucompat: know which GPU x driver x CUDA x engine combinations work before production does.

The names below are the public API (pluggy-style ``__all__``): what suites, conftest hooks and other tools import
from ``pytest_gpucompat``. Each is loaded on first use, so importing the package (for the pytest entry point or the
``gpucompat`` command) costs nothing; everything else is internal and may move.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC: dict[str, tuple[str, str]] = {
    # the machine and the test matrix
    "Fingerprint": ("machine.fingerprint", "Fingerprint"),
    "MatrixCell": ("workload.matrix", "MatrixCell"),
    "Cell": ("workload.matrix", "MatrixCell"),  # MatrixCell's earlier name, kept for the suites that import it
    # the knowledge base's answer for a cell, for pytest_gpucompat_decide implementations
    "Decision": ("kb.verdicts", "Decision"),
    "Finding": ("kb.verdicts", "Finding"),
    # engines
    "EngineSpec": ("catalog.base", "EngineSpec"),
    "Generation": ("catalog.base", "Generation"),
    "EngineFailed": ("catalog.base", "EngineFailed"),
    "EngineUnavailable": ("catalog.base", "EngineUnavailable"),
    # what the suites use besides the fixtures
    "engine_spec": ("fixtures", "engine_spec"),
    "reference_engine": ("fixtures", "reference_engine"),
    "fixed_prompts": ("workload.models", "fixed_prompts"),
    "model_vocab_size": ("workload.models", "model_vocab_size"),
    "round_metrics": ("common.metrics", "round_metrics"),
    "env_int": ("options", "env_int"),
    "compare_generations": ("checks.compare", "compare_generations"),
    "cosine_similarity": ("checks.compare", "cosine_similarity"),
    "thresholds_for": ("checks.compare", "thresholds_for"),
    "threshold_class": ("checks.golden", "threshold_class"),
    "verdict_drift": ("checks.compare", "verdict_drift"),
    "verdict_embeddings": ("checks.compare", "verdict_embeddings"),
    "MemorySample": ("checks.memory", "MemorySample"),
    "leak_verdict": ("checks.leaks", "leak_verdict"),
    "memory_verdict": ("checks.leaks", "memory_verdict"),
    "CyclePolicy": ("checks.leaks", "CyclePolicy"),
    "owner_scope": ("checks.ownership", "owner_scope"),
    "device_snapshot": ("checks.ownership", "device_snapshot"),
    "left_behind": ("checks.ownership", "left_behind"),
    "describe_processes": ("checks.ownership", "describe_processes"),
    "sample_memory": ("checks.memory", "sample"),
    "settle": ("checks.memory", "settle"),
    "create_destroy_cycles": ("checks.cycles", "create_destroy_cycles"),
    "one_process_run": ("checks.cycles", "one_process_run"),
    "finished_process_runs": ("checks.cycles", "finished_process_runs"),
    "left_running": ("checks.cycles", "left_running"),
    "stop_left_running": ("checks.cycles", "stop_left_running"),
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'pytest_gpucompat' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
