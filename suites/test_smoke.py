"""Smoke inference: the engine starts, generates what was asked, stays finite and deterministic.

Run with ``pytest --gpucompat suites/``. Engines that are not installed, or need a GPU that is
not there, skip with the reason; an engine that crashes or hangs fails its cell with its log tail.
"""

from __future__ import annotations

import math
import statistics
import time

import pytest

from pytest_gpucompat import env_int, fixed_prompts, model_vocab_size, round_metrics

PROMPTS = 4
PROMPT_LEN = 12
MAX_TOKENS = 16
TOP_N = 5
REPEATS = 10  # the seed documents report degenerate output from the 7th identical request (claim S02)
# One sample of 4 x 16 tokens differed by 15% between two runs of one H200 setup: figures are medians over rounds,
# with their spread recorded so that `gpucompat diff` can tell a change from noise. At least 3 rounds for a spread.
ROUNDS = max(3, env_int("GPUCOMPAT_ROUNDS", 5))


@pytest.mark.gpucompat(matrix="smoke")
def test_generates_requested_tokens(gpucompat_cell, gpucompat_engine, gpucompat_model, gpucompat_record):
    engine = gpucompat_engine.engine
    prompts = fixed_prompts(PROMPTS, PROMPT_LEN, model_vocab_size(gpucompat_model), seed=1)

    # Warm-up round, not measured: first calls pay for compilation, graph capture and cache allocation.
    engine.generate(prompts[:1], 1, TOP_N)
    outputs = engine.generate(prompts, MAX_TOKENS, TOP_N)
    ttft: list[float] = []
    seconds: list[float] = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        engine.generate(prompts[:1], 1, TOP_N)
        ttft.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        engine.generate(prompts, MAX_TOKENS, TOP_N)
        seconds.append(time.perf_counter() - t0)
    figures = {
        **round_metrics("tokens_per_s", [PROMPTS * MAX_TOKENS / s for s in seconds]),
        **round_metrics("ttft_s", ttft),
        "generate_s": statistics.median(seconds),
        "rounds": float(ROUNDS),
    }
    for name, value in figures.items():
        gpucompat_record(name, value)

    assert len(outputs) == PROMPTS
    for i, out in enumerate(outputs):
        assert len(out.token_ids) == MAX_TOKENS, f"prompt {i}: {len(out.token_ids)} tokens, asked {MAX_TOKENS}"
        assert len(out.logprobs) == MAX_TOKENS, f"prompt {i}: logprobs for {len(out.logprobs)} positions"
        for pos, (token, top) in enumerate(zip(out.token_ids, out.logprobs)):
            assert top, f"prompt {i} position {pos}: no logprobs returned"
            bad = [v for v in top.values() if not math.isfinite(v)]
            assert not bad, f"prompt {i} position {pos}: non-finite logprobs {bad}"
            assert token in top, f"prompt {i} position {pos}: greedy token {token} not in its own top-{TOP_N}"
            assert top[token] >= max(top.values()) - 1e-3, (
                f"prompt {i} position {pos}: greedy token {token} is not the most likely ({top})"
            )


@pytest.mark.gpucompat(matrix="smoke")
def test_identical_requests_give_identical_output(gpucompat_cell, gpucompat_engine, gpucompat_model,
                                                  gpucompat_record):
    engine = gpucompat_engine.engine
    prompt = fixed_prompts(1, PROMPT_LEN, model_vocab_size(gpucompat_model), seed=2)
    first = engine.generate(prompt, MAX_TOKENS, TOP_N)[0]
    t0 = time.perf_counter()
    for n in range(2, REPEATS + 1):
        again = engine.generate(prompt, MAX_TOKENS, TOP_N)[0]
        assert again.token_ids == first.token_ids, (
            f"request {n} of {REPEATS} differs from the first: {list(again.token_ids)} != {list(first.token_ids)}"
        )
    gpucompat_record("repeat_request_s", (time.perf_counter() - t0) / (REPEATS - 1))
