"""The process an engine is started from never touches torch.cuda before the engine does.

vLLM (as shipped) forks its engine core; a process that counted CUDA devices or made a context before that fork
leaves the engine core unable to use CUDA ("Cannot re-initialize CUDA in forked subprocess": every memory cell of
vLLM 0.26.0 failed so on an H200). The memory cycles and samples run in that process: none of them may call
torch.cuda before the engine, whatever the machine.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pytest_gpucompat.catalog.base import EngineSpec, Generation, RunInfo
from pytest_gpucompat.checks import memory
from pytest_gpucompat.checks.cycles import create_destroy_cycles

torch = pytest.importorskip("torch")


class StandIn:
    """An engine that does nothing: what is measured around it is the harness's own doing."""

    name = "stand-in"

    def start(self, spec: EngineSpec) -> RunInfo:
        return RunInfo(engine=self.name, version=None, device="cuda")

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        return [Generation(token_ids=(1,) * max_tokens, logprobs=()) for _ in prompts]

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        return [[1.0] for _ in prompts]

    def shutdown(self) -> None:
        pass


@pytest.fixture
def cuda_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every torch.cuda call made (recorded, and refused): code that swallows the refusal is still caught."""
    calls: list[str] = []

    def forbidding(name: str):  # type: ignore[no-untyped-def]
        def forbidden(*args: object, **kwargs: object) -> None:
            calls.append(name)
            raise AssertionError(f"torch.cuda.{name} called in the engine's parent process")
        return forbidden

    for name in ("is_available", "device_count", "current_device", "init", "_lazy_init", "get_device_name",
                 "synchronize", "empty_cache", "memory_allocated", "memory_reserved"):
        monkeypatch.setattr(torch.cuda, name, forbidding(name))
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return calls


def test_memory_cycles_leave_torch_cuda_alone(cuda_calls: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    spec = EngineSpec(f"{__name__}:StandIn", "/model", {})
    rows = create_destroy_cycles(spec, 2, [[1, 2, 3]], 2)
    assert [r["cycle"] for r in rows] == [0, 1, 2]
    assert cuda_calls == []


def test_samples_leave_torch_cuda_alone(cuda_calls: list[str]) -> None:
    memory.settle(0, cycle=0)
    memory.sample(0, cycle=1)
    assert cuda_calls == []
