"""The environment variables that change how an engine behaves, as the fingerprint records them (its `env`).

Which ones: names that start with a registered engine's `env_prefixes` (catalog/registry.py, the one list: VLLM_,
SGLANG_, SGL_, TRTLLM_, TLLM_, HF_, TRANSFORMERS_, ...) or with a prefix of the libraries under every engine
(LIBRARY_ENV_PREFIXES: NCCL_, CUDA_, TORCH_). A name that looks like a credential (registry.SECRET_NAME: TOKEN, KEY,
SECRET, PASSWORD, CREDENTIAL, AUTH) is kept with the value "<redacted>": that it was set can matter, its value must
never reach a report. Pure apart from reading os.environ; no engine is imported.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..catalog.registry import SECRET_NAME, env_prefixes
from ..common.errors import InputError
from ..common.inputs import text_field

#: Prefixes of the libraries every engine runs on; the engines' own prefixes come from their descriptors.
LIBRARY_ENV_PREFIXES: tuple[str, ...] = ("NCCL_", "CUDA_", "TORCH_")
#: The value recorded for a variable whose name looks like a credential.
REDACTED = "<redacted>"


def recorded_prefixes() -> tuple[str, ...]:
    """The prefixes of the variables a fingerprint records: the registry's, then the libraries'."""
    return tuple(dict.fromkeys((*env_prefixes(), *LIBRARY_ENV_PREFIXES)))


def redact(name: str, value: str) -> str:
    """`value`, or REDACTED when `name` looks like a credential."""
    return REDACTED if SECRET_NAME.search(name) else value


def engine_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The recorded variables of `environ` (default os.environ), sorted by name, credentials redacted."""
    env = os.environ if environ is None else environ
    prefixes = recorded_prefixes()
    return {name: redact(name, env[name]) for name in sorted(env) if name.startswith(prefixes)}


def env_field(data: Any, source: str, where: str) -> dict[str, str]:
    """A fingerprint file's `env`: names to string values (`VLLM_USE_V1: "1"`; an unquoted 1 is refused, like a GPU
    name that is a number). Missing or null: {} (files of older versions have none). Credentials are redacted here
    too, so a hand-written file cannot carry one into a report."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(source, where, "must map environment variable names to their values")
    out: dict[str, str] = {}
    for name, value in data.items():
        if not isinstance(name, str) or not name or "=" in name or "\x00" in name:
            raise InputError(source, f"{where}.{name}", "not an environment variable name")
        text = text_field(value, source, f"{where}.{name}", numbers=False)
        if text is None:
            raise InputError(source, f"{where}.{name}", "must be a string, not null")
        out[name] = redact(name, text)
    return dict(sorted(out.items()))
