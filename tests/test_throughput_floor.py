"""The throughput floor check, and the declaration seam it was added through (common/checkkinds.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpucompat.checks.throughput_floor import (
    FIGURE,
    LIMIT,
    Floor,
    decide,
    figures,
    floor_for,
    load_floors,
    run_floor,
)
from pytest_gpucompat.common import checkkinds
from pytest_gpucompat.common.checkkinds import Chart, CheckKind, Display, KeyFigure, Metric
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.common.metrics import KEY_FIGURES, METRICS, markdown_table

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = load_floors()


def test_below_the_floor_fails_at_or_above_passes() -> None:
    assert decide(99.9, 100.0, "vllm", "NVIDIA H200").passed is False
    assert decide(100.0, 100.0, "vllm", "NVIDIA H200").passed is True
    passed = decide(812.0, 100.0, "vllm", "NVIDIA H200")
    assert passed.passed is True and "812 tokens/s, at least its floor of 100" in passed.reason
    assert "below its floor" in decide(4.0, 5.0, "hf", None).reason


def test_no_floor_for_this_gpu_is_no_verdict_with_its_reason() -> None:
    verdict = decide(5000.0, floor_for(SHIPPED, "NVIDIA B200", "vllm"), "vllm", "NVIDIA B200")
    assert verdict.passed is None and "no throughput floor for vllm on NVIDIA B200" in verdict.reason
    assert floor_for(SHIPPED, None, "vllm") is None  # a floor for hf on CPU is none for vllm there
    assert figures(verdict) == {FIGURE: 5000.0}


def test_floors_match_gpu_globs_first_entry_first() -> None:
    floors = (Floor("nvidia h200*", {"vllm": 500.0}), Floor("*", {"vllm": 1.0, "hf": 2.0}), Floor("cpu", {"hf": 9.0}))
    assert floor_for(floors, "NVIDIA H200 NVL", "vllm") == 500.0
    assert floor_for(floors, "NVIDIA H200", "hf") == 2.0
    assert floor_for(floors, None, "hf") == 2.0


@pytest.mark.parametrize("block, field", [
    ("throughput_floors: {gpu: cpu}", "throughput_floors"),
    ("throughput_floors: [{gpu: cpu}]", "throughput_floors[0]"),
    ("throughput_floors: [{gpu: cpu, floors: {hf: -1}}]", "throughput_floors[0].floors.hf"),
    ("throughput_floors: [{gpu: cpu, floors: {hf: true}}]", "throughput_floors[0].floors.hf"),
])
def test_a_bad_floor_block_is_one_line_naming_the_field(tmp_path: Path, block: str, field: str) -> None:
    path = tmp_path / "matrices.yaml"
    path.write_text(block + "\n")
    with pytest.raises(InputError) as info:
        load_floors(path)
    assert info.value.field == field and "\n" not in str(info.value)


def test_the_committed_h200_reports_pass_their_floors() -> None:
    """The evidence the shipped H200 floors cite: every committed H200 cell's tokens/s is at least its floor."""
    judged = 0
    for path in sorted((ROOT / "docs" / "reports").glob("h200-*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("runners"), dict):
            continue
        gpus = {r["name"]: (r.get("gpus") or [{}])[0].get("name") for r in data["runners"].values()}
        for cell in data.get("cells", ()):
            value = cell.get("metrics", {}).get("tokens_per_s")
            floor = floor_for(SHIPPED, gpus.get(cell.get("runner")), cell["engine"])
            if value is None or floor is None:
                continue
            judged += 1
            assert value >= floor, f"{path.name} {cell['nodeid']}: {value} tokens/s under the floor {floor}"
    assert judged >= 50


def test_a_declared_kind_reaches_the_diff_the_report_and_docs_ci() -> None:
    kind = next(k for k in checkkinds.kinds() if k.name == "throughput_floor")
    for metric in kind.metrics:
        assert METRICS[metric.name] is metric  # gpucompat diff reads it in its direction
        assert f"| `{metric.name}` | {metric.better or '—'} | {metric.unit} |" in markdown_table()
    assert markdown_table() in (ROOT / "docs" / "ci.md").read_text()
    assert [f for f in KEY_FIGURES if f.metric == FIGURE] == list(kind.figures)
    assert [f.metric for f in KEY_FIGURES][:4] == [
        "max_abs_logprob_delta", "token_agreement", "golden_max_abs_logprob_delta", "min_cosine"]


def test_every_declaration_names_code_that_exists() -> None:
    for kind in checkkinds.kinds():
        for target in [kind.run, *(s.resolver for s in kind.limits)]:
            if target:
                assert callable(checkkinds.load(target)), target


def test_a_figure_is_coloured_against_its_kinds_limit() -> None:
    from pytest_gpucompat.report.figures import key_figures
    from pytest_gpucompat.report.record import CellRecord

    cell = CellRecord.from_dict({"nodeid": "suite.py::t[hf]", "test": "t", "engine": "hf", "outcome": "passed",
                                 "metrics": {FIGURE: 40.0, LIMIT: 10.0}})
    (figure,) = [f for f in key_figures(cell) if f.key.metric == FIGURE]
    assert (figure.limit, figure.used) == (10.0, 0.25)
    assert "at least 10" in figure.title


def test_a_kind_that_names_what_is_not_declared_is_refused() -> None:
    m = Metric("x_made_up", "higher", "s", "s", "x")
    with pytest.raises(ValueError, match="no declared metric"):
        checkkinds.register(CheckKind("made-up", "x", (m,), (KeyFigure("y_made_up", "y", None),)))
    with pytest.raises(ValueError, match="no declared limit source"):
        checkkinds.register(CheckKind("made-up", "x", (m,), (KeyFigure("x_made_up", "x", "nowhere"),)))
    with pytest.raises(ValueError, match="declared twice"):
        checkkinds.register(CheckKind("made-up", "x", (METRICS["tokens_per_s"],)))
    assert "made-up" not in {k.name for k in checkkinds.kinds()}


def test_its_figure_text_and_chart_come_from_its_declaration() -> None:
    """No renderer names the floor: its matrix-cell text is its metric's `display`, its chart its kind's `charts`."""
    from pytest_gpucompat.common.metrics import CHARTS
    from pytest_gpucompat.report.charts import charts_section
    from pytest_gpucompat.report.figures import format_value
    from pytest_gpucompat.report.model import Report

    assert (format_value(FIGURE, 12345.6), format_value(FIGURE, 81.24)) == ("12,346 tok/s", "81.2 tok/s")
    assert [c.chart for c in CHARTS] == ["drift", "memory", "performance", "throughput-floor"]
    cells = [{"nodeid": f"s.py::test_floor[{engine}]", "test": "s.py::test_floor", "engine": engine, "runner": "r",
              "outcome": "passed" if value >= 100 else "failed", "metrics": {FIGURE: value, LIMIT: 100.0}}
             for engine, value in (("hf", 400.0), ("vllm", 50.0), ("sglang", 0.0))]  # 0 tok/s: an infinite share
    section = charts_section(Report.from_dict({"schema_version": 1, "tool_version": "0", "created": "x",
                                               "runners": {"r": {}}, "cells": cells}))
    assert 'data-chart="throughput-floor"' in section and 'data-chart="drift"' not in section
    assert section.count('class="pt"') == 3 and "Throughput against its floor" in section


@pytest.mark.parametrize(("kind", "message"), [
    (CheckKind("made-up", "x", (Metric("x_made_up", "higher", "s", "s", "x", display=Display(style="%q")),)),
     "no valid display style"),
    (CheckKind("made-up", "x", (Metric("x_made_up", "higher", "s", "s", "x"),),
               charts=(Chart("made-up", "against-limit", ("x_made_up",)),)), "no shown figure with a limit"),
    (CheckKind("made-up", "x", (Metric("x_made_up", "higher", "s", "s", "x"),),
               charts=(Chart("made-up", "per-engine", ("x_made_up",)),)), "one label per metric"),
    (CheckKind("made-up", "x", (Metric("x_made_up", "higher", "s", "s", "x"),),
               charts=(Chart("performance", "per-cycle", ("x_made_up",)),)), "is per-engine elsewhere"),
    (CheckKind("made-up", "x", (Metric("x_made_up", "higher", "s", "s", "x"),), charts=(Chart("c", "per-cycle", ()),)),
     "shows no metric"),
])
def test_a_display_or_chart_that_cannot_show_its_metric_is_refused(kind: CheckKind, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        checkkinds.register(kind)
    assert "made-up" not in {k.name for k in checkkinds.kinds()}


@pytest.fixture(scope="module")
def started_hf(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    pytest.importorskip("transformers")
    from pytest_gpucompat.catalog.base import EngineSpec
    from pytest_gpucompat.engines import create
    from pytest_gpucompat.workload.models import build_tiny_model, fixed_prompts, model_vocab_size

    model = build_tiny_model("qwen2", tmp_path_factory.mktemp("models"))
    engine = create("hf")
    engine.start(EngineSpec("hf", str(model), {"dtype": "float32", "device": "cpu"}))
    yield engine, fixed_prompts(4, 12, model_vocab_size(model), seed=1)
    engine.shutdown()


def test_the_real_hf_engine_on_cpu_against_its_floors(started_hf) -> None:  # type: ignore[no-untyped-def]
    """Floors 50x under and over what this runner measured (a shared CI runner's load moves it, not 50x)."""
    engine, prompts = started_hf
    measured = run_floor(engine, "hf", None, prompts, rounds=1, floors=())
    assert measured.passed is None and measured.tokens_per_s > 0, measured.reason
    rate = measured.tokens_per_s
    above = run_floor(engine, "hf", None, prompts, rounds=1, floors=(Floor("cpu", {"hf": rate / 50}),))
    assert above.passed is True, above.reason
    below = run_floor(engine, "hf", None, prompts, rounds=1, floors=(Floor("cpu", {"hf": rate * 50}),))
    assert below.passed is False and "below its floor" in below.reason
    assert figures(below) == {FIGURE: below.tokens_per_s, LIMIT: rate * 50}
