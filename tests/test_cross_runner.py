"""Runner against runner, output to output: the outputs a precision cell keeps, the pairs of a merged report, the
`gpucompat diff` gate on output drift, and how Markdown and HTML show them. Pure: no engine."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_gpucompat.catalog.base import Generation
from pytest_gpucompat.checks import outputs
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.report.cross import ALL_PAIRS_UP_TO, figures_text, runner_pairs
from pytest_gpucompat.report.diff import diff_reports, parse_threshold
from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.markdown import render_markdown
from pytest_gpucompat.report.merge import merge_reports
from pytest_gpucompat.report.model import Report

NODE = "suites/test_precision.py::test_logprobs_close_to_fp32_reference[tiny-qwen2-vllm-dtype=bfloat16]"
MODEL = "a" * 64
PROMPTS = "b" * 64


def _gens(shift: float = 0.0, flip_at: int | None = None) -> list[Generation]:
    """Two prompts of four tokens; ``shift`` moves every logprob, ``flip_at`` changes the greedy token there."""
    gens = []
    for p in range(2):
        ids, steps = [], []
        for pos in range(4):
            token = 10 + pos + p
            other = 50 + pos
            if flip_at is not None and pos == flip_at and p == 1:
                token, other = other, token
            ids.append(token)
            steps.append({token: -0.1 - shift, other: -2.5})
        gens.append(Generation(token_ids=tuple(ids), logprobs=tuple(steps)))
    return gens


def _report(runner: str, gens: list[Generation] | None, model: str = MODEL, outcome: str = "passed") -> Report:
    cell: dict[str, Any] = {"nodeid": NODE, "test": NODE.split("[")[0], "engine": "vllm",
                            "params": {"dtype": "bfloat16"}, "outcome": outcome}
    if gens is not None:
        cell["extra"] = {outputs.KEY: outputs.keep(model, PROMPTS, 4, 2, gens)}
    return Report.from_run({"name": runner}, [cell])


def test_kept_outputs_read_back_the_same() -> None:
    kept = outputs.keep(MODEL, PROMPTS, 4, 2, _gens(0.25))
    back = outputs.from_cell({outputs.KEY: kept})
    assert back is not None and back.max_tokens == 4 and back.top_n == 2
    assert back.generations == tuple(_gens(0.25))
    assert outputs.from_cell({}) is None


def test_malformed_outputs_name_the_field() -> None:
    kept = outputs.keep(MODEL, PROMPTS, 4, 2, _gens())
    kept["generations"][1]["logprobs"] = "nope"
    with pytest.raises(InputError, match=r"outputs\.generations\[1\]\.logprobs"):
        outputs.from_cell({outputs.KEY: kept}, "h200.json")


def test_merged_fleet_compares_each_pair_of_runners() -> None:
    fleet = merge_reports([_report("h200", _gens()), _report("a100", _gens(0.3, flip_at=2)),
                           _report("l4", _gens())])
    pairs = runner_pairs(fleet)
    assert [(p.first, p.second) for p in pairs] == [("h200", "a100"), ("h200", "l4"), ("a100", "l4")]
    same = pairs[1].figures
    assert same["outputs_max_abs_logprob_delta"] == 0.0 and same["outputs_first_divergence"] == 4.0
    moved = pairs[0].figures
    assert moved["outputs_first_divergence"] == 2.0
    assert moved["outputs_token_agreement"] < 1.0
    assert moved["outputs_max_abs_logprob_delta"] >= 0.3  # the shift, and the swapped token at the divergence
    assert figures_text(pairs[1])[0] == "none in 4 tokens"
    assert figures_text(pairs[0])[0] == "position 2"


def test_a_large_fleet_compares_each_runner_with_the_first_linear_in_runners() -> None:
    small = merge_reports([_report(f"r{i}", _gens()) for i in range(ALL_PAIRS_UP_TO)])
    assert len(runner_pairs(small)) == ALL_PAIRS_UP_TO * (ALL_PAIRS_UP_TO - 1) // 2  # a small fleet: every pair
    n = 40
    fleet = merge_reports([_report(f"r{i}", _gens(0.3 if i == 7 else 0.0)) for i in range(n)])
    pairs = runner_pairs(fleet)
    assert [(p.first, p.second) for p in pairs] == [("r0", f"r{i}") for i in range(1, n)]
    assert [p.second for p in pairs if p.figures["outputs_max_abs_logprob_delta"] > 0] == ["r7"]


def test_pairs_of_another_model_or_no_outputs_are_not_compared() -> None:
    fleet = merge_reports([_report("h200", _gens()), _report("a100", _gens(), model="c" * 64),
                           _report("old", None)])
    pairs = runner_pairs(fleet)
    assert len(pairs) == 1  # the report without outputs pairs with nobody
    assert pairs[0].reason is not None and "another model" in pairs[0].reason
    assert not pairs[0].figures


def test_diff_gates_on_output_drift_from_the_baseline() -> None:
    baseline, moved, same = _report("h200", _gens()), _report("h200", _gens(0.5)), _report("h200", _gens())
    gate = [parse_threshold("outputs_max_abs_logprob_delta:+0.3")]
    result = diff_reports(baseline, moved, gate)
    assert result.regressed
    assert result.regressions[0].metric == "outputs_max_abs_logprob_delta"
    assert result.regressions[0].before == "0" and result.regressions[0].after.startswith("0.5")
    assert not diff_reports(baseline, same, gate).regressed
    assert not diff_reports(baseline, _report("h200", None), gate).regressed  # nothing to compare: no figure


def test_markdown_and_html_show_the_pairs_html_keeps_outputs_out_of_the_page_data() -> None:
    fleet = merge_reports([_report("h200", _gens()), _report("a100", _gens(0.3, flip_at=2))])
    md = render_markdown(fleet)
    assert "### Runner against runner (1)" in md
    assert "| `tiny-qwen2-vllm-dtype=bfloat16` | h200 → a100 | position 2 | 2.4 | 87.5 % |" in md
    page = render_html(fleet)
    assert '<section id="cross">' in page and "h200 → a100" in page
    assert '"-0.1"' not in page and "2 generations, in the JSON report" in page
    single = render_markdown(_report("h200", _gens()))
    assert "Runner against runner" not in single


def test_a_gate_on_first_divergence_fails_any_changed_token() -> None:
    baseline = _report("h200", _gens())
    gate = [parse_threshold("outputs_first_divergence:-0.5")]
    assert diff_reports(baseline, _report("h200", _gens(0.01, flip_at=3)), gate).regressed
    assert not diff_reports(baseline, _report("h200", _gens(0.01)), gate).regressed


@pytest.mark.parametrize(("nodeid", "engine", "model"), [
    ("t.py::f[tiny-mistral-vllm-dtype=bfloat16]", "vllm", "tiny-mistral"),
    ("t.py::f[qwen2-300m-hf-dtype=float32]", "hf", "qwen2-300m"),
    ("t.py::f[my-hf-model-hf-dtype=float32]", "hf", "my-hf-model"),  # the engine's name inside the model's
    ("t.py::f[tiny-qwen2-hf]", "hf", "tiny-qwen2"),
    ("t.py::f[vllm-dtype=bfloat16]", "vllm", None),
    ("t.py::f", "hf", None),
])
def test_the_model_of_a_cell_comes_from_its_id(nodeid: str, engine: str, model: str | None) -> None:
    from pytest_gpucompat.report.text import model_of

    assert model_of(nodeid, engine) == model


def test_a_matrix_of_two_models_says_which_row_is_which() -> None:
    def cell(model: str) -> dict[str, Any]:
        return {"nodeid": f"t.py::f[{model}-vllm-dtype=bfloat16]", "test": "t.py::f", "engine": "vllm",
                "params": {"dtype": "bfloat16"}, "outcome": "passed"}

    two = Report.from_run({"name": "h200"}, [cell("tiny-qwen2"), cell("tiny-mistral")])
    md = render_markdown(two)
    assert "`model=tiny-qwen2 dtype=bfloat16`" in md and "`model=tiny-mistral dtype=bfloat16`" in md
    assert "model=<b>tiny-mistral</b>" in render_html(two)
    one = render_markdown(Report.from_run({"name": "h200"}, [cell("tiny-qwen2")]))
    assert "model=" not in one  # one model: nothing to tell apart
