"""Pure comparison and drift verdicts: hand-made generations with known answers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_gpucompat.catalog.base import Generation
from pytest_gpucompat.checks.compare import (
    DEFAULT_THRESHOLDS,
    compare_generations,
    cosine_similarity,
    load_thresholds,
    thresholds_for,
    thresholds_key,
    verdict_drift,
    verdict_embeddings,
)


def gen(tokens: list[int], tops: list[dict[int, float]]) -> Generation:
    return Generation(token_ids=tuple(tokens), logprobs=tuple(tops))


REF = gen(
    [1, 2, 3, 4],
    [
        {1: -0.1, 7: -2.5, 8: -3.0},
        {2: -0.2, 9: -1.9, 8: -4.0},
        {3: -0.6, 5: -0.8, 6: -3.0},
        {4: -0.3, 5: -2.0, 6: -3.5},
    ],
)


def test_identical_generations() -> None:
    m = compare_generations([REF, REF], [REF, REF], top_n=3)
    assert m.num_prompts == 2 and m.compared_positions == 8
    assert m.token_agreement == 1.0 and m.exact_match_prompts == 2
    assert m.logprobs_close and m.max_abs_logprob_delta == 0.0 and m.mean_abs_logprob_delta == 0.0
    assert m.first_divergences == (None, None)
    ok, message = verdict_drift(m, DEFAULT_THRESHOLDS["float32"])
    assert ok and message.startswith("within thresholds")


def test_divergence_inside_each_others_top_n_is_close() -> None:
    cand = gen(
        [1, 2, 5, 6],
        [
            {1: -0.11, 7: -2.5, 8: -3.0},
            {2: -0.2, 9: -1.95, 8: -4.0},
            {5: -0.65, 3: -0.7, 6: -3.0},
            {6: -0.1, 4: -2.0},
        ],
    )
    m = compare_generations([REF], [cand], top_n=3)
    (p,) = m.per_prompt
    assert p.first_divergence == 2
    assert p.reference_token_in_candidate_top and p.candidate_token_in_reference_top
    assert m.logprobs_close
    assert m.token_agreement == 0.5
    # positions 0..2 share their context; position 3 (after the divergence) is not compared
    assert m.max_abs_logprob_delta == pytest.approx(0.15)
    assert (m.worst_prompt, m.worst_position) == (0, 2)
    assert m.logprob_pairs == 9


def test_divergence_outside_top_n_is_not_close() -> None:
    cand = gen([1, 9, 9, 9], [{1: -0.1, 7: -2.5, 8: -3.0}, {9: -0.1, 8: -4.0, 6: -5.0}, {9: -1.0}, {9: -1.0}])
    m = compare_generations([REF], [cand], top_n=3)
    (p,) = m.per_prompt
    assert p.first_divergence == 1
    assert p.reference_token_in_candidate_top is False
    assert p.candidate_token_in_reference_top is True
    assert not m.logprobs_close
    ok, message = verdict_drift(m, {"require_logprobs_close": True})
    assert not ok
    assert "prompt 0 diverges at position 1 with reference token not in candidate top-N" in message
    assert "\n" not in message


def test_top_n_restricts_what_counts_as_inside() -> None:
    # the candidate returned one extra entry (vLLM returns top-N plus the sampled token)
    cand = gen([1, 9], [{1: -0.1, 7: -2.5, 8: -3.0}, {9: -0.5, 2: -0.6, 8: -4.0}])
    ref = gen([1, 2], [{1: -0.1, 7: -2.5, 8: -3.0}, {2: -0.2, 9: -1.9, 8: -4.0}])
    assert compare_generations([ref], [cand], top_n=3).logprobs_close
    assert not compare_generations([ref], [cand], top_n=1).logprobs_close


def test_delta_threshold_and_agreement_messages() -> None:
    cand = gen([1, 2, 3, 4], [{1: -0.5, 7: -2.5}, {2: -0.2}, {3: -0.6}, {4: -0.3}])
    m = compare_generations([REF], [cand], top_n=3)
    assert m.max_abs_logprob_delta == pytest.approx(0.4)
    ok, message = verdict_drift(m, {"max_abs_logprob_delta": 0.1, "min_token_agreement": 1.0})
    assert not ok
    assert "max |dlogprob| 0.4 > 0.1 (prompt 0, position 0)" in message
    ok, _ = verdict_drift(m, {"max_abs_logprob_delta": 0.5})
    assert ok
    low = compare_generations([REF], [gen([9, 9, 9, 9], [{9: -0.1}] * 4)], top_n=3)
    ok, message = verdict_drift(low, {"min_token_agreement": 0.9})
    assert not ok and "token agreement 0.0% < 90.0%" in message


def test_length_mismatch_and_non_finite() -> None:
    short = gen([1, 2], [REF.logprobs[0], REF.logprobs[1]])
    m = compare_generations([REF], [short], top_n=3)
    assert m.length_mismatches == 1 and m.exact_match_prompts == 0
    assert m.compared_positions == 2 and m.token_agreement == 1.0
    inf = gen([1, 2, 3, 4], [{1: -math.inf}, *REF.logprobs[1:]])
    m = compare_generations([REF], [inf], top_n=3)
    assert math.isinf(m.max_abs_logprob_delta)
    assert not verdict_drift(m, {"max_abs_logprob_delta": 1.0})[0]


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="reference has 1 generations, candidate 2"):
        compare_generations([REF], [REF, REF], top_n=3)
    with pytest.raises(ValueError):
        compare_generations([REF], [REF], top_n=0)
    with pytest.raises(ValueError, match="unknown threshold keys: max_delta"):
        verdict_drift(compare_generations([REF], [REF], 3), {"max_delta": 1})


def test_metrics_summary_is_json_ready() -> None:
    import json

    data = compare_generations([REF], [REF], top_n=3).as_dict()
    assert json.loads(json.dumps(data))["token_agreement"] == 1.0


def test_cosine_similarity() -> None:
    assert cosine_similarity([1.0, 0.0], [1.0, 0.0]) == pytest.approx(1.0)
    assert cosine_similarity([1.0, 0.0], [0.0, 2.0]) == pytest.approx(0.0)
    assert cosine_similarity([1.0, 1.0], [-1.0, -1.0]) == pytest.approx(-1.0)
    assert cosine_similarity([0.0, 0.0], [1.0, 1.0]) == 0.0
    with pytest.raises(ValueError):
        cosine_similarity([1.0], [1.0, 2.0])


def test_verdict_embeddings() -> None:
    ok, message = verdict_embeddings([0.99999, 0.999995], {"min_cosine": 0.9999})
    assert ok and "min cosine 0.999990" in message
    ok, message = verdict_embeddings([0.9999, 0.98], {"min_cosine": 0.999})
    assert not ok and "prompt 1" in message
    assert not verdict_embeddings([], {"min_cosine": 0.9})[0]


def test_thresholds_file_is_the_calibrated_table() -> None:
    table = load_thresholds()
    assert table == DEFAULT_THRESHOLDS
    assert set(table) >= {"float32", "bfloat16", "float16", "fp8"}
    assert table["float32"]["max_abs_logprob_delta"] < table["float16"]["max_abs_logprob_delta"]
    assert table["float16"]["max_abs_logprob_delta"] < table["bfloat16"]["max_abs_logprob_delta"]


def test_thresholds_keys_and_overrides(tmp_path: Path) -> None:
    assert thresholds_key("bf16") == "bfloat16"
    assert thresholds_key("torch.float16") == "float16"
    assert thresholds_key("fp8_e4m3") == "fp8" and thresholds_key("float8_e5m2") == "fp8"
    assert thresholds_for("fp32") == DEFAULT_THRESHOLDS["float32"]
    with pytest.raises(ValueError, match="'auto'"):
        thresholds_for("auto")
    custom = tmp_path / "t.yaml"
    custom.write_text("bf16:\n  max_abs_logprob_delta: 0.5\nint4:\n  min_token_agreement: 0.1\n")
    table = load_thresholds(custom)
    assert table["bfloat16"]["max_abs_logprob_delta"] == 0.5
    assert table["bfloat16"]["min_cosine"] == DEFAULT_THRESHOLDS["bfloat16"]["min_cosine"]
    assert thresholds_for("int4", table) == {"min_token_agreement": 0.1}
    bad = tmp_path / "bad.yaml"
    bad.write_text("float32:\n  max_delta: 1\n")
    with pytest.raises(ValueError, match="unknown keys for 'float32': max_delta"):
        load_thresholds(bad)
    with pytest.raises(ValueError, match="does not exist"):
        load_thresholds(tmp_path / "missing.yaml")


def test_matrices_dir_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "thresholds.yaml").write_text("float32:\n  max_abs_logprob_delta: 0.123\n")
    monkeypatch.setenv("GPUCOMPAT_MATRICES_DIR", str(tmp_path))
    assert load_thresholds()["float32"]["max_abs_logprob_delta"] == 0.123


def test_a_bfloat16_reference_loosens_each_limit_to_its_class() -> None:
    from pytest_gpucompat.checks.compare import REFERENCE_CLASS, loosest

    wide = DEFAULT_THRESHOLDS[REFERENCE_CLASS]
    assert thresholds_for("float32", reference="float32") == DEFAULT_THRESHOLDS["float32"]
    fp32 = thresholds_for("float32", reference="bf16")
    assert fp32["max_abs_logprob_delta"] == wide["max_abs_logprob_delta"]
    assert fp32["min_token_agreement"] == min(wide["min_token_agreement"], DEFAULT_THRESHOLDS["float32"]
                                              ["min_token_agreement"])
    assert thresholds_for("fp8", reference="bfloat16")["max_abs_logprob_delta"] == 1.0  # fp8's own is looser
    assert thresholds_for("fp8", reference="bfloat16")["require_logprobs_close"] is False
    assert loosest({"min_cosine": 0.99}, {"max_abs_logprob_delta": 0.1}) == {"min_cosine": 0.99,
                                                                              "max_abs_logprob_delta": 0.1}
