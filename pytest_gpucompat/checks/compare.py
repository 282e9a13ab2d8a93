"""Pure comparison of an engine's greedy output with the reference's, and the drift verdict.

In the spirit of vLLM's `check_logprobs_close` (at the first differing token each side's token must be inside the
other side's top-N) and SGLang's `check_close_model_outputs` (max |delta| of logprobs): walk both greedy sequences;
while the contexts are identical (up to and including the first divergent position) the two top-N distributions
are directly comparable, after it they are not. No torch here: plain floats in, frozen dataclasses out.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..catalog.base import Generation
from ..catalog.registry import normalize_dtype
from ..common.errors import InputError
from ..common.inputs import load_file
from ..common.paths import matrices_dir

DEFAULT_THRESHOLDS: dict[str, dict[str, Any]] = {
    # Used when no thresholds file is found; the same values as matrices/thresholds.yaml, which says how they were
    # calibrated.
    "float32": {"max_abs_logprob_delta": 0.005, "min_token_agreement": 0.9, "require_logprobs_close": True,
                "min_cosine": 0.99999},
    "bfloat16": {"max_abs_logprob_delta": 0.3, "min_token_agreement": 0.4, "require_logprobs_close": True,
                 "min_cosine": 0.999},
    "float16": {"max_abs_logprob_delta": 0.05, "min_token_agreement": 0.7, "require_logprobs_close": True,
                "min_cosine": 0.999},
    "fp8": {"max_abs_logprob_delta": 1.0, "min_token_agreement": 0.2, "require_logprobs_close": False,
            "min_cosine": 0.99},
    "bfloat16-reference": {"max_abs_logprob_delta": 0.4, "min_token_agreement": 0.4, "require_logprobs_close": True,
                           "min_cosine": 0.999},
}
REFERENCE_CLASS = "bfloat16-reference"
"""The thresholds a cell is held to at least when its reference ran in bfloat16 (it did not fit in float32)."""

_THRESHOLD_KEYS = frozenset({"max_abs_logprob_delta", "min_token_agreement", "require_logprobs_close", "min_cosine"})

@dataclass(frozen=True)
class PromptDrift:
    """One prompt's comparison."""

    index: int
    compared_positions: int
    """min(len(reference), len(candidate))."""
    agreeing_positions: int
    first_divergence: int | None
    """Position of the first differing token; None when all compared positions agree."""
    reference_token_in_candidate_top: bool | None
    """At the first divergence: is the reference's token in the candidate's top-N? None without divergence."""
    candidate_token_in_reference_top: bool | None
    max_abs_logprob_delta: float
    """Over positions with identical context, over tokens present in both top-N sets."""
    worst_position: int | None
    length_mismatch: bool

    @property
    def logprobs_close(self) -> bool:
        return self.first_divergence is None or bool(
            self.reference_token_in_candidate_top and self.candidate_token_in_reference_top
        )


@dataclass(frozen=True)
class DriftMetrics:
    """How far a candidate's greedy generations are from the reference's."""

    num_prompts: int
    top_n: int
    compared_positions: int
    token_agreement: float
    """Fraction of compared positions whose tokens are identical (position by position, up to the shorter one)."""
    exact_match_prompts: int
    logprobs_close: bool
    """Every prompt: identical, or at the first divergence each side's token in the other's top-N."""
    max_abs_logprob_delta: float
    mean_abs_logprob_delta: float
    logprob_pairs: int
    """How many (position, token) logprob pairs the deltas were taken over."""
    worst_prompt: int | None
    worst_position: int | None
    length_mismatches: int
    per_prompt: tuple[PromptDrift, ...]

    @property
    def first_divergences(self) -> tuple[int | None, ...]:
        return tuple(p.first_divergence for p in self.per_prompt)

    def as_dict(self) -> dict[str, Any]:
        """Flat, JSON-ready summary (per-prompt detail left out)."""
        return {
            "num_prompts": self.num_prompts,
            "top_n": self.top_n,
            "compared_positions": self.compared_positions,
            "token_agreement": self.token_agreement,
            "exact_match_prompts": self.exact_match_prompts,
            "logprobs_close": self.logprobs_close,
            "max_abs_logprob_delta": self.max_abs_logprob_delta,
            "mean_abs_logprob_delta": self.mean_abs_logprob_delta,
            "logprob_pairs": self.logprob_pairs,
            "worst_prompt": self.worst_prompt,
            "worst_position": self.worst_position,
            "length_mismatches": self.length_mismatches,
            "first_divergences": list(self.first_divergences),
        }


def _top(step: Mapping[int, float], top_n: int) -> dict[int, float]:
    """The `top_n` most likely entries of one position (engines may return one extra: the sampled token)."""
    if len(step) <= top_n:
        return {int(k): float(v) for k, v in step.items()}
    ranked = sorted(step.items(), key=lambda kv: (-float(kv[1]), int(kv[0])))[:top_n]
    return {int(k): float(v) for k, v in ranked}


def _compare_one(index: int, ref: Generation, cand: Generation, top_n: int) -> tuple[PromptDrift, list[float]]:
    n = min(len(ref.token_ids), len(cand.token_ids))
    first: int | None = None
    agreeing = 0
    for p in range(n):
        if ref.token_ids[p] == cand.token_ids[p]:
            agreeing += 1
        elif first is None:
            first = p
    deltas: list[float] = []
    worst = -1.0
    worst_pos: int | None = None
    # Contexts are identical up to and including the first divergent position.
    last = n - 1 if first is None else first
    for p in range(min(last + 1, len(ref.logprobs), len(cand.logprobs))):
        r = _top(ref.logprobs[p], top_n)
        c = _top(cand.logprobs[p], top_n)
        for token in r.keys() & c.keys():
            a, b = r[token], c[token]
            finite = math.isfinite(a) and math.isfinite(b)
            d = abs(a - b) if finite else (0.0 if a == b else math.inf)
            deltas.append(d)
            if d > worst:
                worst, worst_pos = d, p
    ref_in: bool | None = None
    cand_in: bool | None = None
    if first is not None:
        r_top = _top(ref.logprobs[first], top_n) if first < len(ref.logprobs) else {}
        c_top = _top(cand.logprobs[first], top_n) if first < len(cand.logprobs) else {}
        ref_in = ref.token_ids[first] in c_top
        cand_in = cand.token_ids[first] in r_top
    drift = PromptDrift(
        index=index,
        compared_positions=n,
        agreeing_positions=agreeing,
        first_divergence=first,
        reference_token_in_candidate_top=ref_in,
        candidate_token_in_reference_top=cand_in,
        max_abs_logprob_delta=max(worst, 0.0),
        worst_position=worst_pos,
        length_mismatch=len(ref.token_ids) != len(cand.token_ids),
    )
    return drift, deltas


def compare_generations(reference: Sequence[Generation], candidate: Sequence[Generation], top_n: int) -> DriftMetrics:
    """Compare two lists of greedy generations for the same prompts (same order)."""
    if len(reference) != len(candidate):
        raise ValueError(f"reference has {len(reference)} generations, candidate {len(candidate)}")
    if top_n < 1:
        raise ValueError("top_n must be >= 1")
    per_prompt: list[PromptDrift] = []
    all_deltas: list[float] = []
    for i, (ref, cand) in enumerate(zip(reference, candidate)):
        drift, deltas = _compare_one(i, ref, cand, top_n)
        per_prompt.append(drift)
        all_deltas.extend(deltas)
    compared = sum(p.compared_positions for p in per_prompt)
    agreeing = sum(p.agreeing_positions for p in per_prompt)
    worst = max(per_prompt, key=lambda p: p.max_abs_logprob_delta, default=None)
    finite = [d for d in all_deltas if math.isfinite(d)]
    mean = (math.fsum(finite) / len(finite)) if finite else 0.0
    if len(finite) != len(all_deltas):
        mean = math.inf
    return DriftMetrics(
        num_prompts=len(per_prompt),
        top_n=top_n,
        compared_positions=compared,
        token_agreement=(agreeing / compared) if compared else 1.0,
        exact_match_prompts=sum(
            1 for p in per_prompt if p.first_divergence is None and not p.length_mismatch
        ),
        logprobs_close=all(p.logprobs_close for p in per_prompt),
        max_abs_logprob_delta=max(all_deltas, default=0.0),
        mean_abs_logprob_delta=mean,
        logprob_pairs=len(all_deltas),
        worst_prompt=worst.index if worst is not None and worst.worst_position is not None else None,
        worst_position=worst.worst_position if worst is not None else None,
        length_mismatches=sum(1 for p in per_prompt if p.length_mismatch),
        per_prompt=tuple(per_prompt),
    )


def cosine_similarity(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity of two vectors (0.0 when either is all zeros)."""
    if len(a) != len(b):
        raise ValueError(f"vectors differ in length: {len(a)} vs {len(b)}")
    dot = math.fsum(float(x) * float(y) for x, y in zip(a, b))
    na = math.sqrt(math.fsum(float(x) * float(x) for x in a))
    nb = math.sqrt(math.fsum(float(y) * float(y) for y in b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return max(-1.0, min(1.0, dot / (na * nb)))


def _check_thresholds(thresholds: Mapping[str, Any]) -> None:
    unknown = set(thresholds) - _THRESHOLD_KEYS
    if unknown:
        raise ValueError(f"unknown threshold keys: {', '.join(sorted(unknown))}")


def verdict_drift(metrics: DriftMetrics, thresholds: Mapping[str, Any]) -> tuple[bool, str]:
    """(passed, one-line message): the drift verdict for one cell. Absent threshold keys are not checked."""
    _check_thresholds(thresholds)
    problems: list[str] = []
    max_delta = thresholds.get("max_abs_logprob_delta")
    if max_delta is not None and not metrics.max_abs_logprob_delta <= float(max_delta):
        where = ""
        if metrics.worst_prompt is not None:
            where = f" (prompt {metrics.worst_prompt}, position {metrics.worst_position})"
        problems.append(f"max |dlogprob| {metrics.max_abs_logprob_delta:.4g} > {float(max_delta):.4g}{where}")
    min_agree = thresholds.get("min_token_agreement")
    if min_agree is not None and metrics.token_agreement < float(min_agree):
        problems.append(f"token agreement {metrics.token_agreement:.1%} < {float(min_agree):.1%}")
    if thresholds.get("require_logprobs_close") and not metrics.logprobs_close:
        bad = next(p for p in metrics.per_prompt if not p.logprobs_close)
        side = []
        if not bad.reference_token_in_candidate_top:
            side.append("reference token not in candidate top-N")
        if not bad.candidate_token_in_reference_top:
            side.append("candidate token not in reference top-N")
        problems.append(
            f"prompt {bad.index} diverges at position {bad.first_divergence} with {' and '.join(side)}"
            f" (top-{metrics.top_n})"
        )
    summary = (
        f"{metrics.token_agreement:.1%} of {metrics.compared_positions} tokens agree, "
        f"{metrics.exact_match_prompts}/{metrics.num_prompts} prompts identical, "
        f"max |dlogprob| {metrics.max_abs_logprob_delta:.3g}"
    )
    if problems:
        return False, "drift: " + "; ".join(problems) + f" [{summary}]"
    return True, "within thresholds: " + summary


def verdict_embeddings(similarities: Sequence[float], thresholds: Mapping[str, Any]) -> tuple[bool, str]:
    """(passed, message) for per-prompt cosine similarities between candidate and reference embeddings."""
    _check_thresholds(thresholds)
    if not similarities:
        return False, "no embeddings to compare"
    worst = min(similarities)
    worst_i = list(similarities).index(worst)
    min_cos = thresholds.get("min_cosine")
    if min_cos is not None and worst < float(min_cos):
        return False, f"embedding drift: cosine {worst:.6f} < {float(min_cos)} (prompt {worst_i})"
    return True, f"embeddings within thresholds: min cosine {worst:.6f} over {len(similarities)} prompts"


def thresholds_key(dtype: str) -> str:
    """The thresholds table key for an engine dtype: `bf16` -> `bfloat16`, `fp8_e4m3` -> `fp8`, and so on."""
    text = str(dtype).strip().lower().removeprefix("torch.")
    if text.startswith("fp8") or text.startswith("float8") or text in ("e4m3", "e5m2"):
        return "fp8"
    return "float32" if text == "tf32" else normalize_dtype(text)  # the engines' one dtype alias table


def load_thresholds(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Thresholds per dtype from `thresholds.yaml` (the matrices directory's unless `path` is given).

    Missing file -> the built-in DEFAULT_THRESHOLDS; a file's dtypes override the defaults key by key.
    """
    if path is None:
        candidate = matrices_dir() / "thresholds.yaml"
    else:
        candidate = Path(path)
        if not os.path.lexists(candidate):
            raise ValueError(f"thresholds file {candidate} does not exist")
    table = {k: dict(v) for k, v in DEFAULT_THRESHOLDS.items()}
    if not os.path.lexists(candidate):
        return table  # a directory, a FIFO or a dangling link is not "no file": load_file refuses it
    try:
        data = load_file(candidate, "yaml") or {}
    except InputError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(data, dict):
        raise ValueError(f"{candidate}: expected a mapping of dtype -> thresholds")
    body = data.get("thresholds", data)
    if not isinstance(body, dict):
        raise ValueError(f"{candidate}: `thresholds` must be a mapping of dtype -> thresholds")
    for dtype, values in body.items():
        if not isinstance(values, dict):
            raise ValueError(f"{candidate}: thresholds for {dtype!r} must be a mapping")
        unknown = set(values) - _THRESHOLD_KEYS
        if unknown:
            raise ValueError(f"{candidate}: unknown keys for {dtype!r}: {', '.join(sorted(map(str, unknown)))}")
        for name, value in values.items():
            boolean = name == "require_logprobs_close"
            if value is not None and isinstance(value, bool) != boolean or not isinstance(value, (bool, int, float)):
                kind = "true or false" if boolean else "a number"
                raise ValueError(f"{candidate}: field '{dtype}.{name}': must be {kind}, not {value!r:.40}")
        key = thresholds_key(str(dtype))
        table.setdefault(key, {}).update(values)
    return table


def thresholds_for(dtype: str, table: Mapping[str, Mapping[str, Any]] | None = None,
                   reference: str = "float32") -> dict[str, Any]:
    """The thresholds of one dtype (loading the default table when none is given). With a ``reference`` that ran
    in bfloat16 rather than float32, each limit is the looser of the dtype's and the REFERENCE_CLASS's."""
    table = load_thresholds() if table is None else table
    key = thresholds_key(dtype)
    if key == "auto":
        raise ValueError("no thresholds for dtype 'auto': use the dtype the engine reported it ran (RunInfo.dtype)")
    if key not in table:
        raise ValueError(f"no thresholds for dtype {dtype!r} (have: {', '.join(sorted(table))})")
    own = dict(table[key])
    if thresholds_key(reference) in ("float32", REFERENCE_CLASS):
        return own
    if REFERENCE_CLASS not in table:
        raise ValueError(f"no thresholds for a {reference} reference: {REFERENCE_CLASS} is not in the table")
    return loosest(own, table[REFERENCE_CLASS])


def loosest(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Each limit of two threshold sets at its looser value (a key only one set has is kept as it is). Pure."""
    out = {**b, **a}
    for key in a.keys() & b.keys():
        if key == "max_abs_logprob_delta":
            out[key] = max(a[key], b[key])
        elif key in ("min_token_agreement", "min_cosine"):
            out[key] = min(a[key], b[key])
        elif key == "require_logprobs_close":
            out[key] = bool(a[key] and b[key])
    return out
