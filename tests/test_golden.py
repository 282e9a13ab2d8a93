"""Golden files: a small, sorted, versioned format; refused on another model, tokenizer or prompt set; judged with
the precision suite's metrics and thresholds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_gpucompat.catalog.base import Generation
from pytest_gpucompat.checks.golden import judge
from pytest_gpucompat.checks.golden_files import (
    FORMAT,
    GoldenFile,
    Recorded,
    dumps,
    file_name,
    load_golden,
    load_golden_source,
    match_golden,
    record,
)
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.workload.checkpoint import ModelIdentity

MODEL = ModelIdentity(name="qwen2-abc", weights="a" * 64, config="c" * 64, tokenizer="t" * 64)
PROMPTS = "p" * 64


def gen(tokens: list[int], shift: float = 0.0) -> Generation:
    """Greedy tokens whose top-3 are the token (-0.1), token+1 (-2.5), token+2 (-3.0), shifted by ``shift``."""
    steps = tuple({t: -0.1 - shift, t + 1: -2.5 + shift, t + 2: -3.0} for t in tokens)
    return Generation(token_ids=tuple(tokens), logprobs=steps)


REFERENCE = (gen([5, 6, 7, 8]), gen([9, 10, 11, 12]))


def golden(**changes: object) -> GoldenFile:
    base = GoldenFile(
        model=MODEL, prompts_name="builtin", prompts_digest=PROMPTS, max_tokens=4, top_n=3,
        reference=Recorded(engine="hf", generations=REFERENCE, dtype="float32", device="cpu", version="5.24.0",
                           runner="cpu-ref", fingerprint="no GPU, torch 2.13.0", kind="float32-cpu"),
        cells={"hf-dtype=bfloat16": Recorded(engine="hf", params={"dtype": "bfloat16"}, dtype="bfloat16",
                                             generations=(gen([5, 6, 7, 8], 0.01), gen([9, 10, 11, 12])))},
        prompts=({"id": "a", "ids": [1, 2], "text": "x"}, {"id": "b", "ids": [3], "text": None}),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_the_file_is_sorted_rounded_versioned_and_reads_back(tmp_path: Path) -> None:
    noisy = golden(reference=replace(golden().reference, generations=(  # type: ignore[arg-type]
        Generation((5,), ({5: -0.123456789, 6: -2.0},), text="hi"), Generation((9,), ({9: -0.5},)))), max_tokens=1)
    text = dumps(noisy)
    data = json.loads(text)
    assert data["format"] == FORMAT and list(data) == sorted(data)
    assert data["reference"]["kind"] == "float32-cpu" and data["reference"]["fingerprint"] == "no GPU, torch 2.13.0"
    assert data["reference"]["generations"][0]["logprobs"] == [{"5": -0.12346, "6": -2.0}]
    assert '\n     {"5": -0.12346, "6": -2.0}\n' in text  # one generated position per line: diffs show the token
    path = tmp_path / "g.json"
    path.write_text(text)
    back = load_golden(path)
    assert back.reference is not None and back.reference.generations[0].text == "hi"
    assert back.reference.generations[0].logprobs[0][5] == -0.12346
    assert back.model == MODEL and back.source == str(path)
    assert dumps(replace(back, source="")) == text  # written again, the same bytes


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("edit", "field", "problem"), [
    (lambda d: d.update(format=2), "format", "unsupported golden format 2"),
    (lambda d: d["model"].pop("weights"), "model.weights", "must be a non-empty string"),
    (lambda d: d["generation"].update(top_n=0), "generation.top_n", "must be a whole number >= 1"),
    (lambda d: d["reference"]["generations"].pop(), "reference.generations", "must be a list of 2 generations"),
    (lambda d: d["reference"]["generations"][0].update(token_ids=[1, "x", 3, 4]),
     "reference.generations[0].token_ids", "must be a list of token ids"),
    (lambda d: d["cells"]["hf-dtype=bfloat16"]["generations"][1]["logprobs"][2].update({"10": 0.5}),
     "cells.hf-dtype=bfloat16.generations[1].logprobs[2].10", "must be a logprob"),
    (lambda d: d["reference"]["generations"][0]["logprobs"].pop(), "reference.generations[0].logprobs",
     "must be a list of 4 mappings"),
])
def test_a_malformed_file_is_one_line_naming_file_and_field(tmp_path: Path, edit, field: str, problem: str) -> None:
    data = json.loads(dumps(golden()))
    edit(data)
    path = _write(tmp_path / "bad.json", data)
    with pytest.raises(InputError) as exc:
        load_golden(path)
    message = str(exc.value)
    assert message.startswith(f"{path}: field '{field}': ") and problem in message and "\n" not in message


def test_not_json_and_missing_paths_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{nope")
    with pytest.raises(InputError, match=r"x.json: not valid JSON"):
        load_golden_source(tmp_path)
    with pytest.raises(InputError, match="no such golden file or directory"):
        load_golden_source(tmp_path / "missing")


def _match(files: list[GoldenFile], model: ModelIdentity = MODEL, digest: str = PROMPTS, explicit: bool = False,
           tokens: int = 4):
    return match_golden(files, model, "builtin", digest, tokens, 3, where="golden/", explicit=explicit)


def test_match_finds_the_file_of_this_model_and_these_prompts() -> None:
    found = _match([golden(source="golden/x.json")])
    assert found.status == "found" and found.golden is not None
    renamed = replace(MODEL, name="copied-elsewhere")  # the same content under another directory name
    assert _match([golden()], model=renamed).status == "found"


@pytest.mark.parametrize(("model", "digest", "tokens", "words"), [
    (replace(MODEL, tokenizer="u" * 64), PROMPTS, 4, "recorded with another tokenizer"),
    (replace(MODEL, weights="b" * 64), PROMPTS, 4, "recorded for another model (qwen2-abc: weights sha256:aaaa"),
    (replace(MODEL, config="d" * 64), PROMPTS, 4, "recorded for another model config"),
    (MODEL, "q" * 64, 4, "recorded for another prompt set ('builtin' sha256:pppppppppppp"),
    (MODEL, PROMPTS, 8, "recorded with 4 tokens and top-3; this run asks 8 tokens and top-3"),
])
def test_another_model_tokenizer_or_prompt_set_is_refused(model, digest: str, tokens: int, words: str) -> None:
    found = _match([golden(source="golden/x.json")], model=model, digest=digest, tokens=tokens)
    assert found.status == "refused" and found.golden is None
    assert words in found.reason and "\n" not in found.reason and found.reason.startswith("x.json")


def test_an_unrelated_file_is_missing_unless_named() -> None:
    other = replace(MODEL, name="llama-xyz", weights="e" * 64)
    missing = _match([golden(source="g/x.json")], model=other)
    assert missing.status == "missing" and "no golden output for llama-xyz" in missing.reason
    assert _match([golden(source="g/x.json")], model=other, explicit=True).status == "refused"


def test_recording_merges_cells_and_replaces_another_models_file(tmp_path: Path) -> None:
    first = record(tmp_path, golden(cells={}))
    assert first.name == file_name("qwen2-abc", "builtin") == "qwen2-abc__builtin.json"
    record(tmp_path, golden(reference=None))
    both = load_golden(first)
    assert both.reference is not None and list(both.cells) == ["hf-dtype=bfloat16"]
    record(tmp_path, golden(model=replace(MODEL, weights="f" * 64), cells={}))  # retrained: same name, new file
    replaced = load_golden(first)
    assert replaced.model.weights == "f" * 64 and replaced.cells == {}
    assert oct(first.stat().st_mode & 0o777) == "0o644"


def test_judged_with_the_precision_metrics_and_thresholds() -> None:
    same = judge(golden(source="g/x.json"), "hf-dtype=float32", REFERENCE, "float32")
    assert same.compared and same.passed and same.metrics["golden_max_abs_logprob_delta"] == 0.0
    assert same.metrics["golden_first_divergence"] == 4.0 and "float32-cpu reference, hf 5.24.0, on cpu-ref" in \
        same.message
    drifted = (gen([5, 6, 7, 8], 0.02), gen([9, 10, 11, 12]))
    bad = judge(golden(source="g/x.json"), "hf-dtype=float32", drifted, "float32")
    assert not bad.passed and "max |dlogprob| 0.02 > 0.005" in bad.message
    assert bad.metrics["golden_max_abs_logprob_delta"] == pytest.approx(0.02)
    # the same drift is within the bf16 limits, and the golden run of the same cell is measured apart
    relaxed = judge(golden(source="g/x.json"), "hf-dtype=bfloat16", drifted, "bfloat16")
    assert relaxed.passed and relaxed.metrics["golden_cell_max_abs_logprob_delta"] == pytest.approx(0.01)
    diverged = (gen([5, 6, 99, 100]), gen([9, 10, 11, 12]))
    assert judge(golden(), "x", diverged, "bfloat16").metrics["golden_first_divergence"] == 2.0


def test_a_bfloat16_golden_reference_widens_the_limits() -> None:
    bf16 = golden(reference=replace(golden().reference, dtype="bfloat16", kind="bfloat16-gpu"))  # type: ignore
    drifted = (gen([5, 6, 7, 8], 0.1), gen([9, 10, 11, 12]))
    assert not judge(golden(), "x", drifted, "float32").passed
    assert judge(bf16, "x", drifted, "float32").passed  # 0.1 <= the bfloat16-reference class's 0.4


def test_without_a_reference_the_same_cell_judges() -> None:
    cells_only = golden(reference=None)
    verdict = judge(cells_only, "hf-dtype=bfloat16", REFERENCE, "bfloat16")
    assert verdict.compared and verdict.passed and "the same cell as recorded" in verdict.message
    assert not judge(cells_only, "vllm-dtype=bfloat16", REFERENCE, "bfloat16").compared
