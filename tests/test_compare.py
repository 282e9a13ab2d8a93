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


# --- every figure and boundary of the drift verdict, both sides -------------------------------------------------

TWO = [
    gen([1, 2, 3], [{1: -0.1, 7: -2.0}, {2: -0.5, 9: -1.0}, {3: -0.2}]),
    gen([4, 5], [{4: -0.3}, {5: -0.4}]),
]
TWO_CAND = [
    gen([1, 9, 3], [{1: -0.2, 7: -2.0}, {9: -0.6, 2: -0.7}, {3: -0.2}]),  # diverges at 1, inside both tops
    gen([4, 5, 6], [{4: -0.3}, {5: -0.4}, {6: -1.0}]),                    # one token longer
]


def test_every_figure_of_a_comparison() -> None:
    m = compare_generations(TWO, TWO_CAND, top_n=2)
    assert m.as_dict() == {
        "num_prompts": 2, "top_n": 2, "compared_positions": 5, "token_agreement": 0.8, "exact_match_prompts": 0,
        "logprobs_close": True, "max_abs_logprob_delta": pytest.approx(0.4), "mean_abs_logprob_delta":
            pytest.approx((0.1 + 0.0 + 0.4 + 0.2 + 0.0 + 0.0) / 6), "logprob_pairs": 6, "worst_prompt": 0,
        "worst_position": 1, "length_mismatches": 1, "first_divergences": [1, None],
    }
    first, second = m.per_prompt
    assert (first.index, first.compared_positions, first.agreeing_positions, first.worst_position) == (0, 3, 2, 1)
    assert first.reference_token_in_candidate_top is True and first.candidate_token_in_reference_top is True
    assert not first.length_mismatch and second.length_mismatch and second.index == 1
    assert (second.first_divergence, second.reference_token_in_candidate_top) == (None, None)
    assert second.candidate_token_in_reference_top is None
    assert second.max_abs_logprob_delta == 0.0 and second.worst_position == 0


def test_only_positions_up_to_the_first_divergence_are_compared() -> None:
    ref = gen([1, 2, 3], [{1: -0.1}, {2: -0.1, 5: -3.0}, {3: -0.1}])
    cand = gen([1, 5, 3], [{1: -0.1}, {5: -0.2, 2: -0.3}, {3: -9.0}])  # position 2 differs a lot, but after it
    m = compare_generations([ref], [cand], top_n=2)
    assert m.logprob_pairs == 3 and m.max_abs_logprob_delta == pytest.approx(2.8)
    assert (m.worst_prompt, m.worst_position) == (0, 1)


def test_positions_without_logprobs_are_not_compared() -> None:
    ref = gen([1, 2], [{1: -0.1}])
    cand = gen([1, 3], [{1: -0.3}, {3: -0.1}])
    m = compare_generations([ref], [cand], top_n=2)
    (p,) = m.per_prompt
    assert m.logprob_pairs == 1 and m.max_abs_logprob_delta == pytest.approx(0.2)
    # the divergent position has no reference logprobs: neither token is known to be in the other's top
    assert p.first_divergence == 1 and p.reference_token_in_candidate_top is False
    assert p.candidate_token_in_reference_top is False and not m.logprobs_close
    m = compare_generations([cand], [ref], top_n=2)
    assert m.per_prompt[0].reference_token_in_candidate_top is False
    assert m.per_prompt[0].candidate_token_in_reference_top is False


def test_the_first_largest_delta_names_the_worst_place() -> None:
    ref = [gen([1, 2], [{1: -0.1}, {2: -0.1}]), gen([1, 2], [{1: -0.5}, {2: -0.5}])]
    cand = [gen([1, 2], [{1: -0.3}, {2: -0.3}]), gen([1, 2], [{1: -0.7}, {2: -0.7}])]
    m = compare_generations(ref, cand, top_n=1)
    assert (m.worst_prompt, m.worst_position) == (0, 0)
    assert m.mean_abs_logprob_delta == pytest.approx(0.2)


def test_no_pair_compared_has_no_worst_place() -> None:
    m = compare_generations([gen([1], [{1: -0.1}])], [gen([1], [{2: -0.1}])], top_n=1)
    assert (m.logprob_pairs, m.max_abs_logprob_delta, m.mean_abs_logprob_delta) == (0, 0.0, 0.0)
    assert (m.worst_prompt, m.worst_position) == (None, None)
    empty = compare_generations([gen([], [])], [gen([], [])], top_n=1)
    assert empty.token_agreement == 1.0 and empty.compared_positions == 0 and empty.exact_match_prompts == 1
    assert compare_generations([], [], top_n=1).as_dict()["worst_prompt"] is None


@pytest.mark.parametrize(("a", "b", "delta"), [
    (-math.inf, -math.inf, 0.0),  # both impossible: the same
    (-math.inf, -1.0, math.inf),
    (-1.0, -math.inf, math.inf),
    (math.nan, math.nan, math.inf),
    (math.nan, -1.0, math.inf),   # not a number on one side: as far apart as can be
    (-1.0, math.nan, math.inf),
])
def test_a_non_finite_logprob_is_the_same_only_as_itself(a: float, b: float, delta: float) -> None:
    m = compare_generations([gen([1], [{1: a}])], [gen([1], [{1: b}])], top_n=1)
    assert m.max_abs_logprob_delta == delta
    assert m.mean_abs_logprob_delta == (math.inf if math.isinf(delta) else 0.0)


def test_one_non_finite_delta_makes_the_mean_infinite() -> None:
    ref = gen([1, 2], [{1: -0.1}, {2: -1.0}])
    cand = gen([1, 2], [{1: -0.3}, {2: -math.inf}])
    assert compare_generations([ref], [cand], top_n=1).mean_abs_logprob_delta == math.inf


def test_top_n_keeps_the_most_likely_and_breaks_ties_by_token_id() -> None:
    # three tokens tie for the two places: the lower ids 3 and 5 are kept; 9 is compared on neither side
    ref = gen([1], [{9: -1.0, 5: -1.0, 3: -1.0}])
    cand = gen([1], [{9: -5.0, 5: -1.5, 3: -1.25}])
    assert compare_generations([ref], [cand], top_n=2).max_abs_logprob_delta == pytest.approx(0.5)
    assert compare_generations([ref], [cand], top_n=3).max_abs_logprob_delta == pytest.approx(4.0)
    assert compare_generations([ref], [cand], top_n=2).logprob_pairs == 2
    # an entry beyond top_n (the sampled token an engine adds) is left out
    extra, other = gen([1], [{1: -0.1, 4: -2.0, 8: -9.0}]), gen([1], [{1: -0.1, 4: -2.0, 8: -1.0}])
    assert compare_generations([extra], [other], top_n=2).logprob_pairs == 1  # {1, 4} and {1, 8}
    assert compare_generations([extra], [other], top_n=3).logprob_pairs == 3


def test_token_ids_and_logprobs_are_read_as_numbers() -> None:
    ref = gen([1], [{1: -1}])  # an int logprob, as a JSON file may hold
    cand = gen([1], [{1: -0.5, 2: -3}])
    m = compare_generations([ref], [cand], top_n=1)
    assert m.max_abs_logprob_delta == 0.5 and isinstance(m.max_abs_logprob_delta, float)


@pytest.mark.parametrize(("limit", "passed"), [(0.2, True), (0.19, False)])
def test_the_delta_limit_is_inclusive(limit: float, passed: bool) -> None:
    m = compare_generations([gen([1], [{1: -0.5}])], [gen([1], [{1: -0.25}])], top_n=1)
    assert m.max_abs_logprob_delta == 0.25
    ok, message = verdict_drift(m, {"max_abs_logprob_delta": limit + 0.05})
    assert ok is passed
    if not passed:
        assert message == ("drift: max |dlogprob| 0.25 > 0.24 (prompt 0, position 0) "
                           "[100.0% of 1 tokens agree, 1/1 prompts identical, max |dlogprob| 0.25]")
    else:
        assert message == "within thresholds: 100.0% of 1 tokens agree, 1/1 prompts identical, max |dlogprob| 0.25"


def test_a_delta_without_a_place_names_none() -> None:
    m = compare_generations([gen([1], [{1: -0.1}])], [gen([1], [{2: -0.1}])], top_n=1)
    m = type(m)(**{**m.__dict__, "max_abs_logprob_delta": 1.0})
    ok, message = verdict_drift(m, {"max_abs_logprob_delta": 0.5})
    assert not ok and message.startswith("drift: max |dlogprob| 1 > 0.5 [")


@pytest.mark.parametrize(("limit", "passed"), [(0.5, True), (0.51, False)])
def test_the_agreement_limit_is_inclusive(limit: float, passed: bool) -> None:
    m = compare_generations([gen([1, 2], [{1: -0.1}, {2: -0.1}])], [gen([1, 3], [{1: -0.1}, {3: -0.1, 2: -0.2}])],
                            top_n=2)
    assert m.token_agreement == 0.5
    ok, message = verdict_drift(m, {"min_token_agreement": limit})
    assert ok is passed
    if not passed:
        assert message.startswith("drift: token agreement 50.0% < 51.0% [50.0% of 2 tokens agree, 0/1 prompts")


def test_an_absent_or_false_limit_is_not_checked() -> None:
    far = compare_generations([gen([1, 2], [{1: -0.1}, {2: -0.1}])], [gen([9, 9], [{9: -9.0}, {9: -9.0}])], top_n=1)
    assert verdict_drift(far, {})[0]
    assert verdict_drift(far, {"require_logprobs_close": False, "max_abs_logprob_delta": None,
                               "min_token_agreement": None})[0]
    ok, message = verdict_drift(far, {"require_logprobs_close": True})
    assert not ok and message.startswith(
        "drift: prompt 0 diverges at position 0 with reference token not in candidate top-N and candidate token "
        "not in reference top-N (top-1) [0.0% of 2 tokens agree, 0/1 prompts identical, max |dlogprob| 0]")


def test_the_prompt_named_is_the_first_that_is_not_close() -> None:
    close = gen([1], [{1: -0.1}])
    m = compare_generations([close, gen([1], [{1: -0.1, 2: -0.2}]), gen([1], [{1: -0.1}])],
                            [close, gen([2], [{2: -0.1}]), gen([3], [{3: -0.1}])], top_n=2)
    ok, message = verdict_drift(m, {"require_logprobs_close": True})
    assert "prompt 1 diverges at position 0 with reference token not in candidate top-N (top-2)" in message


def test_every_problem_is_named_in_one_line() -> None:
    far = compare_generations([gen([1, 2], [{1: -0.1}, {2: -0.1}])], [gen([1, 9], [{1: -0.9}, {9: -0.1}])], top_n=1)
    ok, message = verdict_drift(far, {"max_abs_logprob_delta": 0.1, "min_token_agreement": 0.9,
                                      "require_logprobs_close": True})
    assert not ok and message == (
        "drift: max |dlogprob| 0.8 > 0.1 (prompt 0, position 0); token agreement 50.0% < 90.0%; prompt 0 diverges "
        "at position 1 with reference token not in candidate top-N and candidate token not in reference top-N "
        "(top-1) [50.0% of 2 tokens agree, 0/1 prompts identical, max |dlogprob| 0.8]")


@pytest.mark.parametrize(("limit", "passed"), [(0.9, True), (0.9000001, False)])
def test_the_cosine_limit_is_inclusive(limit: float, passed: bool) -> None:
    ok, message = verdict_embeddings([0.95, 0.9, 0.99], {"min_cosine": limit})
    assert ok is passed
    assert message == ("embeddings within thresholds: min cosine 0.900000 over 3 prompts" if passed
                       else f"embedding drift: cosine 0.900000 < {limit} (prompt 1)")
    assert verdict_embeddings([0.1], {})[0]  # no limit: not checked
    with pytest.raises(ValueError, match="unknown threshold keys: cos"):
        verdict_embeddings([0.1], {"cos": 1})
    assert verdict_embeddings([], {}) == (False, "no embeddings to compare")


def test_cosine_of_each_side_zero_and_its_clamp() -> None:
    assert cosine_similarity([0.0, 0.0], [1.0, 0.0]) == 0.0
    assert cosine_similarity([1.0, 0.0], [0.0, 0.0]) == 0.0
    assert cosine_similarity([3.0, 4.0], [4.0, 3.0]) == pytest.approx(24 / 25)
    # within [-1, 1] whatever the rounding (these two round to 1 + 2e-16 and -1 - 2e-16 unclamped)
    a, b = [-4.898619485211566, -0.09129825816118142, -1.010178704225238], [0.8282494558699316, 8.782983255570212,
                                                                            -2.375915246235751]
    assert cosine_similarity(a, a) == 1.0 and cosine_similarity(b, [-x for x in b]) == -1.0
    assert cosine_similarity([1, 2], [2, 4]) == pytest.approx(1.0) and cosine_similarity([2], [-3]) == -1.0
    with pytest.raises(ValueError, match="vectors differ in length: 1 vs 2"):
        cosine_similarity([1.0], [1.0, 2.0])


@pytest.mark.parametrize(("dtype", "key"), [
    ("FP8", "fp8"), ("fp8_e5m2", "fp8"), ("float8_e4m3fn", "fp8"), ("e4m3", "fp8"), ("E5M2", "fp8"),
    (" torch.bfloat16 ", "bfloat16"), ("TF32", "float32"), ("half", "float16"), ("int4", "int4"),
    ("e4m3x", "e4m3x"), ("torch.float8_e4m3fn", "fp8"), ("Torch.FP8", "fp8"),
])
def test_thresholds_key(dtype: str, key: str) -> None:
    assert thresholds_key(dtype) == key


@pytest.mark.parametrize(("text", "message"), [
    ("- 1\n", "expected a mapping of dtype -> thresholds"),
    ("thresholds: [1]\n", "`thresholds` must be a mapping of dtype -> thresholds"),
    ("float32: 0.1\n", "thresholds for 'float32' must be a mapping"),
    ("float32:\n  b: 1\n  a: 2\n", "unknown keys for 'float32': a, b"),
    ("float32:\n  require_logprobs_close: 1\n", "field 'float32.require_logprobs_close': must be true or false, not 1"),
    ("float32:\n  min_cosine: true\n", "field 'float32.min_cosine': must be a number, not True"),
    ("float32:\n  min_cosine: null\n", "field 'float32.min_cosine': must be a number, not None"),
    ("float32:\n  min_cosine: '0.9'\n", "field 'float32.min_cosine': must be a number, not '0.9'"),
    ("float32:\n  require_logprobs_close: null\n",
     "field 'float32.require_logprobs_close': must be true or false, not None"),
])
def test_a_bad_thresholds_file_is_named_with_its_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as exc:
        load_thresholds(str(path))
    assert str(exc.value) == f"{path}: {message}"


def test_a_thresholds_file_may_nest_its_table_and_be_empty(tmp_path: Path) -> None:
    nested = tmp_path / "n.yaml"
    nested.write_text("thresholds:\n  float16:\n    require_logprobs_close: false\n    min_cosine: 1\n")
    table = load_thresholds(nested)
    assert table["float16"] == {**DEFAULT_THRESHOLDS["float16"], "require_logprobs_close": False, "min_cosine": 1}
    assert {k: v for k, v in table.items() if k != "float16"} == {
        k: v for k, v in DEFAULT_THRESHOLDS.items() if k != "float16"}
    empty = tmp_path / "e.yaml"
    empty.write_text("")
    assert load_thresholds(empty) == DEFAULT_THRESHOLDS
    with pytest.raises(ValueError, match="thresholds file .* does not exist"):
        load_thresholds(tmp_path / "none.yaml")
    with pytest.raises(ValueError):
        load_thresholds(tmp_path)  # a directory is no thresholds file


def test_a_missing_default_file_is_the_built_in_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCOMPAT_MATRICES_DIR", str(tmp_path))
    table = load_thresholds()
    assert table == DEFAULT_THRESHOLDS and table is not DEFAULT_THRESHOLDS
    table["float32"]["min_cosine"] = 0.0
    assert DEFAULT_THRESHOLDS["float32"]["min_cosine"] == 0.99999  # a copy: the defaults are not changed


def test_thresholds_for_names_what_is_missing() -> None:
    with pytest.raises(ValueError) as exc:
        thresholds_for("int3", {"b": {}, "a": {}})
    assert str(exc.value) == "no thresholds for dtype 'int3' (have: a, b)"
    with pytest.raises(ValueError) as exc:
        thresholds_for("float32", {"float32": {"min_cosine": 0.9}}, reference="bf16")
    assert str(exc.value) == "no thresholds for a bf16 reference: bfloat16-reference is not in the table"
    own = {"float32": {"min_cosine": 0.9}}
    assert thresholds_for("float32", own, reference="fp32") == {"min_cosine": 0.9}
    assert thresholds_for("float32", own, reference="bfloat16-reference") == {"min_cosine": 0.9}


def test_loosest_takes_each_limit_at_its_looser_value() -> None:
    from pytest_gpucompat.checks.compare import loosest

    tight = {"max_abs_logprob_delta": 0.1, "min_token_agreement": 0.9, "min_cosine": 0.999,
             "require_logprobs_close": True}
    loose = {"max_abs_logprob_delta": 0.4, "min_token_agreement": 0.4, "min_cosine": 0.99,
             "require_logprobs_close": False}
    assert loosest(tight, loose) == loose and loosest(loose, tight) == loose
    both = loosest({"require_logprobs_close": True}, {"require_logprobs_close": 1})
    assert both == {"require_logprobs_close": True} and both["require_logprobs_close"] is True
    assert loosest({"min_cosine": 0.9, "x": 1}, {"min_cosine": 0.8, "x": 2}) == {"min_cosine": 0.8, "x": 1}


def test_what_the_comparison_refuses_says_why() -> None:
    with pytest.raises(ValueError, match=r"^top_n must be >= 1$"):
        compare_generations([REF], [REF], top_n=0)
    with pytest.raises(ValueError, match=r"^unknown threshold keys: a, b$"):
        verdict_drift(compare_generations([REF], [REF], 1), {"b": 1, "a": 2, "min_cosine": 0.9})
    with pytest.raises(ValueError) as exc:
        thresholds_for("auto", DEFAULT_THRESHOLDS)
    assert str(exc.value) == ("no thresholds for dtype 'auto': use the dtype the engine reported it ran "
                              "(RunInfo.dtype)")


def test_a_thresholds_file_that_is_not_yaml_or_too_long_a_value_is_named(tmp_path: Path) -> None:
    broken = tmp_path / "t.yaml"
    broken.write_text("float32: [1\n")
    with pytest.raises(ValueError) as exc:
        load_thresholds(broken)
    assert str(exc.value).startswith(f"{broken}: invalid YAML") and "\n" not in str(exc.value)
    long = tmp_path / "l.yaml"
    long.write_text("float32:\n  min_cosine: '" + "x" * 100 + "'\n")
    with pytest.raises(ValueError) as exc:
        load_thresholds(long)
    assert str(exc.value) == f"{long}: field 'float32.min_cosine': must be a number, not '" + "x" * 39


def test_positions_past_the_shorter_generation_are_not_compared() -> None:
    """Even where both sides carry logprobs for them (an engine that returned one step more than its tokens)."""
    ref = gen([1, 2], [{1: -0.1}, {2: -0.1}, {3: -0.1}])
    cand = gen([1, 2, 3], [{1: -0.1}, {2: -0.1}, {3: -5.0}])
    m = compare_generations([ref], [cand], top_n=1)
    assert m.logprob_pairs == 2 and m.max_abs_logprob_delta == 0.0


def test_a_thresholds_file_is_yaml_whatever_its_name(tmp_path: Path) -> None:
    named = tmp_path / "thresholds.json"
    named.write_text("float32:\n  min_cosine: 0.9\n")
    assert load_thresholds(named)["float32"]["min_cosine"] == 0.9
