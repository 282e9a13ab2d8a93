"""The hf reference on CPU with a tiny model: real generation, finite logprobs, determinism, calibrated drift."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gpucompat.catalog.base import EngineFailed, EngineSpec, EngineUnavailable
from pytest_gpucompat.checks.compare import compare_generations, cosine_similarity, thresholds_for, verdict_drift
from pytest_gpucompat.engines import create
from pytest_gpucompat.engines.hf import HFEngine
from pytest_gpucompat.workload.models import build_perturbed_model, build_tiny_model, fixed_prompts

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

N, LENGTH, TOKENS, TOP_N = 8, 16, 16, 5


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    """The tiny model gains nothing from threads; under pytest-xdist they only fight over the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model("qwen2", tmp_path_factory.mktemp("hf-models"))


def _start(model: Path, **params: object) -> HFEngine:
    engine = HFEngine()
    engine.start(EngineSpec("hf", str(model), {"device": "cpu", **params}))
    return engine


@pytest.fixture(scope="module")
def fp32(model_dir: Path) -> Iterator[HFEngine]:
    engine = _start(model_dir, dtype="float32")
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return fixed_prompts(N, LENGTH, 512, seed=11)


@pytest.fixture(scope="module")
def reference(fp32: HFEngine, prompts: list[list[int]]) -> list:
    return fp32.generate(prompts, TOKENS, TOP_N)


def test_registry_creates_the_hf_adapter() -> None:
    assert isinstance(create("hf"), HFEngine)
    assert isinstance(create("transformers"), HFEngine)


def test_run_info_reports_what_ran(model_dir: Path) -> None:
    engine = HFEngine()
    info = engine.start(EngineSpec("hf", str(model_dir), {"device": "cpu", "dtype": "bf16"}))
    try:
        assert info.engine == "hf"
        assert info.version == transformers.__version__
        assert info.device == "cpu"
        assert info.dtype == "bfloat16"
        assert info.attention_backend in ("sdpa", "eager", "flash_attention_2", "flex_attention")
        assert info.start_s is not None and info.start_s >= 0
        assert info.extra["torch"] == torch.__version__
    finally:
        engine.shutdown()


def test_generates_the_requested_tokens_with_finite_logprobs(reference: list, prompts: list[list[int]]) -> None:
    assert len(reference) == N
    for gen in reference:
        assert len(gen.token_ids) == TOKENS
        assert len(gen.logprobs) == TOKENS
        for token, top in zip(gen.token_ids, gen.logprobs):
            assert len(top) == TOP_N
            assert all(math.isfinite(v) and v <= 0.0 for v in top.values())
            assert max(top, key=top.get) == token  # greedy: the chosen token is the top-1
            assert 0 <= token < 512


def test_logprobs_are_a_log_softmax(fp32: HFEngine, prompts: list[list[int]]) -> None:
    (gen,) = fp32.generate(prompts[:1], 1, 512)
    total = math.fsum(math.exp(v) for v in gen.logprobs[0].values())
    assert abs(total - 1.0) < 1e-4


def test_generation_is_deterministic(model_dir: Path, fp32: HFEngine, reference: list, prompts: list) -> None:
    assert fp32.generate(prompts, TOKENS, TOP_N) == reference
    fresh = _start(model_dir, dtype="float32")
    try:
        assert fresh.generate(prompts, TOKENS, TOP_N) == reference
    finally:
        fresh.shutdown()


def test_batching_equal_lengths_matches_one_by_one(fp32: HFEngine, reference: list, prompts: list) -> None:
    singles = [fp32.generate([p], TOKENS, TOP_N)[0] for p in prompts[:3]]
    metrics = compare_generations(reference[:3], singles, TOP_N)
    assert metrics.token_agreement == 1.0
    assert metrics.max_abs_logprob_delta < 1e-4
    mixed = fp32.generate([prompts[0], prompts[1][:7]], 4, TOP_N)  # different lengths, separate batches
    assert mixed[0].token_ids == reference[0].token_ids[:4]
    assert len(mixed[1].token_ids) == 4


def test_fp32_against_itself_is_exact(fp32: HFEngine, reference: list, prompts: list) -> None:
    metrics = compare_generations(reference, fp32.generate(prompts, TOKENS, TOP_N), TOP_N)
    assert metrics.max_abs_logprob_delta == 0.0
    ok, message = verdict_drift(metrics, thresholds_for("float32"))
    assert ok, message


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_drift_is_within_thresholds(model_dir: Path, reference: list, prompts: list, dtype: str) -> None:
    engine = _start(model_dir, dtype=dtype)
    try:
        metrics = compare_generations(reference, engine.generate(prompts, TOKENS, TOP_N), TOP_N)
    finally:
        engine.shutdown()
    assert metrics.max_abs_logprob_delta > 0.0  # it really ran in lower precision
    ok, message = verdict_drift(metrics, thresholds_for(dtype))
    assert ok, message


def test_perturbed_weights_are_detected_at_fp32(
    model_dir: Path, reference: list, prompts: list, tmp_path_factory: pytest.TempPathFactory
) -> None:
    noisy = build_perturbed_model(model_dir, 1e-3, cache_dir=tmp_path_factory.mktemp("perturbed"))
    engine = _start(noisy, dtype="float32")
    try:
        metrics = compare_generations(reference, engine.generate(prompts, TOKENS, TOP_N), TOP_N)
    finally:
        engine.shutdown()
    ok, message = verdict_drift(metrics, thresholds_for("float32"))
    assert not ok
    assert "max |dlogprob|" in message
    # detected with room to spare, not at the edge of the threshold
    assert metrics.max_abs_logprob_delta > 2 * thresholds_for("float32")["max_abs_logprob_delta"]


def test_embeddings_are_normalized_and_deterministic(model_dir: Path, fp32: HFEngine, prompts: list) -> None:
    vectors = fp32.embed(prompts[:3])
    assert len(vectors) == 3 and all(len(v) == 512 for v in vectors)  # the tiny model's hidden size
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1.0) < 1e-5 for v in vectors)
    assert fp32.embed(prompts[:3]) == vectors
    last = _start(model_dir, dtype="float32", pooling="last")
    try:
        other = last.embed(prompts[:1])
    finally:
        last.shutdown()
    assert cosine_similarity(vectors[0], other[0]) < 0.999


def test_bad_params_fail_or_skip_in_one_line(model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineFailed, match="unknown params kv_cache_dtype"):
        HFEngine().start(EngineSpec("hf", str(model_dir), {"device": "cpu", "kv_cache_dtype": "fp8"}))
    with pytest.raises(EngineUnavailable, match="does not run dtype"):
        HFEngine().start(EngineSpec("hf", str(model_dir), {"device": "cpu", "dtype": "int3"}))
    with pytest.raises(EngineUnavailable, match="fp8 needs an FP8-capable GPU"):
        HFEngine().start(EngineSpec("hf", str(model_dir), {"device": "cpu", "dtype": "fp8"}))
    with pytest.raises(EngineFailed, match="loading .* failed") as info:
        HFEngine().start(EngineSpec("hf", str(tmp_path / "missing"), {"device": "cpu"}))
    assert "\n" not in info.value.message
    with pytest.raises(EngineFailed, match="not started"):
        HFEngine().generate([[5, 6]], 2, 2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_requested_without_cuda_is_unavailable(model_dir: Path) -> None:
    with pytest.raises(EngineUnavailable, match="no CUDA device"):
        HFEngine().start(EngineSpec("hf", str(model_dir), {"device": "cuda"}))
