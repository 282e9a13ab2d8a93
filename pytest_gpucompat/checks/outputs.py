"""A precision cell's own outputs, kept in its report, so that two runners' reports compare output to output.

Golden files compare a runner with the one runner that recorded them; a fleet has more runners than that. Each
precision cell therefore keeps, under ``outputs`` in the report, what the model said: the greedy token ids and
top-N logprobs (the golden files' format and rounding), with the model's content digest and the prompts' digest,
so that `gpucompat merge` and `gpucompat diff` can put any two runners' runs of one cell side by side and refuse
a pair that asked another model or other prompts. Pure: no engine, no file.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..catalog.base import Generation
from .compare import compare_generations
from .golden import drift_figures
from .golden_files import _Reader, generation_dict

KEY = "outputs"
"""The cell's key in the report."""
PREFIX = "outputs_"
"""The figures of one runner's outputs against another's (or a baseline's): ``outputs_max_abs_logprob_delta``..."""


@dataclass(frozen=True)
class CellOutputs:
    """What one cell generated, and for what: the model by content, the prompts by digest."""

    model: str
    prompts: str
    max_tokens: int
    top_n: int
    generations: tuple[Generation, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "prompts": self.prompts, "max_tokens": self.max_tokens, "top_n": self.top_n,
                "generations": [generation_dict(_without_text(g)) for g in self.generations]}


def _without_text(gen: Generation) -> Generation:
    """Text stays out of the report's outputs: the prompts' digest already names what was asked."""
    return gen if gen.text is None else Generation(token_ids=gen.token_ids, logprobs=gen.logprobs)


def from_cell(extra: Mapping[str, Any], source: str = "report") -> CellOutputs | None:
    """The outputs a cell kept (its report entry's extra keys); None when it kept none. A malformed entry raises
    errors.InputError naming the field."""
    data = extra.get(KEY)
    if data is None:
        return None
    read = _Reader(source)
    entry = read.mapping(data, KEY)
    gens = entry.get("generations")
    if not isinstance(gens, list) or not gens:
        raise read.fail(f"{KEY}.generations", "must be a non-empty list of generations")
    return CellOutputs(
        model=str(read.text(entry, "model", f"{KEY}.")), prompts=str(read.text(entry, "prompts", f"{KEY}.")),
        max_tokens=read.whole(entry, "max_tokens", f"{KEY}."), top_n=read.whole(entry, "top_n", f"{KEY}."),
        generations=tuple(read.generation(g, f"{KEY}.generations[{i}]") for i, g in enumerate(gens)))


def why_not_comparable(first: CellOutputs, second: CellOutputs) -> str | None:
    """One line when two cells' outputs cannot be compared (another model, other prompts, another length)."""
    if first.model != second.model:
        return f"another model (sha256:{first.model[:12]} vs sha256:{second.model[:12]})"
    if first.prompts != second.prompts:
        return f"other prompts (sha256:{first.prompts[:12]} vs sha256:{second.prompts[:12]})"
    if first.max_tokens != second.max_tokens or len(first.generations) != len(second.generations):
        return (f"another generation length ({len(first.generations)} x {first.max_tokens} vs "
                f"{len(second.generations)} x {second.max_tokens})")
    return None


def drift(first: CellOutputs, second: CellOutputs) -> dict[str, float]:
    """The precision suite's figures of ``second`` against ``first`` (prefixed ``outputs_``), over the top-N both
    kept; callers check `why_not_comparable` first."""
    metrics = compare_generations(first.generations, second.generations, min(first.top_n, second.top_n))
    return drift_figures(metrics, PREFIX)


IDENTICAL: Mapping[str, float] = {PREFIX + "max_abs_logprob_delta": 0.0, PREFIX + "mean_abs_logprob_delta": 0.0,
                                  PREFIX + "token_agreement": 1.0, PREFIX + "logprobs_close": 1.0}
"""The figures of a run against itself: the baseline side when `gpucompat diff` gates on output drift
(``first_divergence`` is the generation length, set per cell)."""


def identical(max_tokens: int) -> dict[str, float]:
    """The figures of a run of ``max_tokens`` tokens per prompt against itself."""
    return {**IDENTICAL, PREFIX + "first_divergence": float(max_tokens)}


def keep(model_digest: str, prompts_digest: str, max_tokens: int, top_n: int,
         generations: Sequence[Generation]) -> dict[str, Any]:
    """The ``outputs`` entry of a cell, as the report stores it."""
    return CellOutputs(model_digest, prompts_digest, max_tokens, top_n, tuple(generations)).to_dict()


__all__ = ["KEY", "PREFIX", "CellOutputs", "drift", "from_cell", "identical", "keep",
           "why_not_comparable"]
