"""Precision drift: each engine and dtype against the float32 transformers reference on the same model.

Greedy tokens and top-N logprobs are compared the way vLLM's check_logprobs_close does (at the first
divergent token each side's choice must be in the other's top-N) plus SGLang-style max |delta logprob|;
the tolerances per dtype live in matrices/thresholds.yaml. A dtype or KV-cache dtype the engine
silently replaced is flagged as a degraded finding with what actually ran.

The reference is float32 where it fits the runner, else bfloat16 with wider thresholds, else none
(gpucompat_reference_choice). With --gpucompat-golden the same outputs are also judged against golden
outputs recorded on another runner (golden_* figures); with --gpucompat-record-golden they are recorded.
"""

from __future__ import annotations

import pytest

from pytest_gpucompat import (
    compare_generations,
    cosine_similarity,
    fixed_prompts,
    model_vocab_size,
    reference_engine,
    threshold_class,
    thresholds_for,
    verdict_drift,
    verdict_embeddings,
)
from pytest_gpucompat.catalog.registry import normalize_dtype

PROMPT_LEN = 16
MAX_TOKENS = 16
TOP_N = 5


def _same_dtype(asked: str, ran: str | None) -> bool:
    return normalize_dtype(asked) == normalize_dtype(ran or "")


def _check_what_ran(cell, info, flag, record) -> None:
    asked = str(cell.params.get("dtype", "auto"))
    if asked not in ("auto", "fp8") and info.dtype and not _same_dtype(asked, info.dtype):
        flag("runtime-dtype-replaced", f"asked dtype {asked}, the engine ran {info.dtype}")
    asked_kv = cell.params.get("kv_cache_dtype")
    if asked_kv not in (None, "auto") and info.kv_cache_dtype is not None:
        ran = str(info.kv_cache_dtype).lower()
        if "fp8" not in ran and "float8" not in ran:
            flag("runtime-kv-cache-dtype-replaced", f"asked KV cache {asked_kv}, the engine ran {info.kv_cache_dtype}")
    if info.attention_backend:
        record("attention_backend_known", 1.0)


@pytest.mark.gpucompat(matrix="precision")
def test_logprobs_close_to_fp32_reference(gpucompat_cell, gpucompat_engine, gpucompat_reference_choice,
                                          gpucompat_prompts, gpucompat_golden, gpucompat_pool, gpucompat_model,
                                          gpucompat_record, gpucompat_flag, request):
    prompts = gpucompat_prompts.ids  # fixed ids for tiny models, the model's own tokens of real text otherwise

    candidate = gpucompat_engine.engine.generate(prompts, MAX_TOKENS, TOP_N)
    key = threshold_class(gpucompat_cell.params, gpucompat_engine.info.dtype)  # the report's golden check uses it too
    _check_what_ran(gpucompat_cell, gpucompat_engine.info, gpucompat_flag, gpucompat_record)
    gpucompat_golden.keep(candidate, MAX_TOKENS, TOP_N)  # what the model said, for runner-to-runner comparisons
    problems = []
    # None without --gpucompat-golden; a recording made on another backend or KV dtype is noted with both
    golden = gpucompat_golden.check(candidate, key, MAX_TOKENS, TOP_N, info=gpucompat_engine.info)
    if golden is not None and not golden.passed:
        problems.append(golden.message)

    choice = gpucompat_reference_choice
    if choice.runs:
        started = reference_engine(request, gpucompat_pool, gpucompat_model, **choice.engine_params)
        reference = started.engine.generate(prompts, MAX_TOKENS, TOP_N)
        gpucompat_golden.record(candidate, gpucompat_engine.info, MAX_TOKENS, TOP_N, reference=reference,
                                reference_info=started.info, reference_kind=choice.kind)  # only when recording
        metrics = compare_generations(reference, candidate, TOP_N)
        for name in ("max_abs_logprob_delta", "mean_abs_logprob_delta", "token_agreement"):
            gpucompat_record(name, float(getattr(metrics, name)))
        gpucompat_record("logprobs_close", 1.0 if metrics.logprobs_close else 0.0)
        ok, message = verdict_drift(metrics, thresholds_for(key, reference=str(choice.dtype)))
        if not ok:
            problems.append(f"drifted from the {choice.dtype} reference: {message}")
    else:  # golden-only: no reference fits this runner
        gpucompat_golden.record(candidate, gpucompat_engine.info, MAX_TOKENS, TOP_N)
        if not problems and (golden is None or not golden.compared):
            why = golden.message if golden is not None else "no --gpucompat-golden to compare with instead"
            pytest.skip(f"no reference: {choice.reason}; {why}")
    assert not problems, f"{gpucompat_cell.engine} {key}: " + "; ".join(problems)


@pytest.mark.gpucompat(matrix="embedding")
def test_embeddings_close_to_fp32_reference(gpucompat_cell, gpucompat_engine, gpucompat_reference_choice,
                                            gpucompat_pool, gpucompat_model, gpucompat_record, request):
    # the dtype asked for, else (an engine as shipped picks its own) the one the engine says it ran
    dtype = str(gpucompat_cell.params.get("dtype") or gpucompat_engine.info.dtype or "auto")
    prompts = fixed_prompts(4, PROMPT_LEN, model_vocab_size(gpucompat_model), seed=4)
    try:
        candidate = gpucompat_engine.engine.embed(prompts)
    except NotImplementedError as exc:
        pytest.skip(f"{gpucompat_cell.engine} does not embed with this model and these parameters: {exc}")
    # the reference pools the way the engine says it did (vLLM here: mean; SGLang: the last token)
    pooling = str((gpucompat_engine.info.extra or {}).get("pooling") or "mean")
    if pooling not in ("mean", "last"):
        pytest.skip(f"{gpucompat_cell.engine} pools with {pooling!r}; the reference pools by mean or last token")
    choice = gpucompat_reference_choice
    if not choice.runs:
        pytest.skip(f"no reference: {choice.reason}")
    reference = reference_engine(request, gpucompat_pool, gpucompat_model, pooling=pooling,
                                 **choice.engine_params).engine.embed(prompts)
    sims = [cosine_similarity(a, b) for a, b in zip(reference, candidate)]
    gpucompat_record("min_cosine", min(sims))
    ok, message = verdict_embeddings(sims, thresholds_for(dtype, reference=str(choice.dtype)))
    assert ok, f"{gpucompat_cell.engine} {dtype} embeddings drifted: {message}"
