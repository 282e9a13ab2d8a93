"""The one small interface every engine adapter implements, and the plain data it returns.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


class EngineUnavailable(Exception):
    """The engine cannot run here (not installed, no GPU, unsupported): the cell is skipped with this reason."""


class EngineFailed(Exception):
    """The engine crashed, hung or raised: the cell fails with this message and the engine's last log lines."""

    def __init__(self, message: str, log_tail: str = "", log_path: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.log_tail = log_tail
        self.log_path = log_path  # the engine's whole log, kept after the run


@dataclass(frozen=True)
class EngineSpec:
    """What to start: which engine, which model (a local directory), with which launch parameters."""

    engine: str
    model: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def key(self) -> tuple[str, str, tuple[tuple[str, str], ...]]:
        return (self.engine, self.model, tuple(sorted((k, repr(v)) for k, v in self.params.items())))


@dataclass(frozen=True)
class Generation:
    """One greedy completion: the new token ids and, per position, the top-N logprobs {token_id: logprob}."""

    token_ids: tuple[int, ...]
    logprobs: tuple[Mapping[int, float], ...]
    text: str | None = None


@dataclass(frozen=True)
class RunInfo:
    """What actually ran, as far as the engine tells: compared with what was asked to catch silent fallbacks."""

    engine: str
    version: str | None
    device: str
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    attention_backend: str | None = None
    start_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


class Engine(Protocol):
    """An engine started for one EngineSpec. Adapters raise EngineUnavailable from start() when they cannot run."""

    name: str

    def start(self, spec: EngineSpec) -> RunInfo: ...

    def generate(
        self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int
    ) -> list[Generation]: ...

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]: ...

    def shutdown(self) -> None: ...
