"""Golden files keep the attention backend and KV-cache dtype each recording ran; a cell judged against a recording
made on another backend or KV-cache dtype says which two, live and after the run. Files without them still read."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.catalog.base import Generation, RunInfo
from pytest_gpucompat.checks import outputs
from pytest_gpucompat.checks.golden import backend_difference, judge
from pytest_gpucompat.checks.golden_files import (
    GoldenFile,
    Recorded,
    dumps,
    load_golden,
    load_golden_source,
    parse,
    record,
)
from pytest_gpucompat.report.golden import check_report, checks_json, with_checks
from pytest_gpucompat.report.model import Report
from pytest_gpucompat.session.golden_run import CellGolden, GoldenRun
from pytest_gpucompat.workload.checkpoint import ModelIdentity
from pytest_gpucompat.workload.matrix import MatrixCell
from pytest_gpucompat.workload.prompts import Prompt, PromptSet

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"
MODEL = ModelIdentity(name="qwen2-abc", weights="a" * 64, config="c" * 64, tokenizer="t" * 64)
PROMPT_SET = PromptSet(name="builtin", prompts=(Prompt("a", (1, 2)), Prompt("b", (3,))))
PROMPTS = PROMPT_SET.digest
CELL = MatrixCell("vllm", {"dtype": "bfloat16", "kv_cache_dtype": "fp8_e4m3"})


def gen(tokens: list[int], shift: float = 0.0) -> Generation:
    steps = tuple({t: -0.1 - shift, t + 1: -2.5 + shift, t + 2: -3.0} for t in tokens)
    return Generation(token_ids=tuple(tokens), logprobs=steps)


OUT = (gen([5, 6, 7, 8]), gen([9, 10, 11, 12]))
CLOSE = (gen([5, 6, 7, 8], 0.01), gen([9, 10, 11, 12]))


def golden(reference_backend: str | None = "sdpa", reference_kv: str | None = "float32",
           cell_backend: str | None = "FLASHINFER", cell_kv: str | None = "fp8_e4m3") -> GoldenFile:
    return GoldenFile(
        model=MODEL, prompts_name="builtin", prompts_digest=PROMPTS, max_tokens=4, top_n=3,
        reference=Recorded(engine="hf", generations=OUT, dtype="float32", device="cuda", version="5.24.0",
                           runner="ref", kind="float32-gpu", attention_backend=reference_backend,
                           kv_cache_dtype=reference_kv),
        cells={CELL.id: Recorded(engine="vllm", params=dict(CELL.params), dtype="bfloat16", generations=OUT,
                                 runner="ref", attention_backend=cell_backend, kv_cache_dtype=cell_kv)},
        prompts=({"id": "a", "ids": [1, 2], "text": None}, {"id": "b", "ids": [3], "text": None}),
        source="g.json")


def test_the_backend_and_kv_cache_dtype_are_written_and_read_back(tmp_path: Path) -> None:
    data = json.loads(dumps(golden()))
    assert data["reference"]["attention_backend"] == "sdpa" and data["reference"]["kv_cache_dtype"] == "float32"
    assert data["cells"][CELL.id]["attention_backend"] == "FLASHINFER"
    path = record(tmp_path, golden())
    back = load_golden(path)
    assert back.reference is not None and back.reference.attention_backend == "sdpa"
    assert back.cells[CELL.id].kv_cache_dtype == "fp8_e4m3"


def test_a_file_recorded_without_them_still_reads_and_writes_none() -> None:
    data = json.loads(dumps(golden(None, None, None, None)))
    assert "attention_backend" not in data["reference"] and "kv_cache_dtype" not in data["cells"][CELL.id]
    old = parse(data, "old.json")
    assert old.reference is not None and old.reference.attention_backend is None
    for path in (REPORTS / "golden-previous").glob("*.json"):  # recorded before they were kept
        assert load_golden(path).reference.attention_backend is None  # type: ignore[union-attr]
    with pytest.raises(Exception, match="attention_backend"):
        data["reference"]["attention_backend"] = 3
        parse(data, "bad.json")


def test_the_committed_cpu_golden_files_say_what_ran() -> None:
    for golden_file in load_golden_source(REPORTS / "golden"):
        if golden_file.model.name.startswith("qwen2-300m-"):  # recorded before they were kept
            continue
        recorded = [golden_file.reference, *golden_file.cells.values()]
        assert all(r is not None and r.attention_backend == "sdpa" for r in recorded), golden_file.source
        assert all(r is not None and r.kv_cache_dtype == r.dtype for r in recorded), golden_file.source


def test_backend_difference_names_both_sides_only_when_both_are_known() -> None:
    ref = golden().reference
    assert ref is not None
    assert backend_difference("vllm", "FLASH_ATTN", "bfloat16", ref) == (
        "attention vllm FLASH_ATTN vs hf sdpa, KV cache bfloat16 vs float32")
    assert backend_difference("hf", "SDPA", "torch.float32", ref) is None  # spelled otherwise, the same
    assert backend_difference("vllm", None, None, ref) is None
    assert backend_difference("vllm", "FLASH_ATTN", "bfloat16", replace(ref, attention_backend=None,
                                                                        kv_cache_dtype=None)) is None
    assert backend_difference("vllm", "FLASH_ATTN", "float32", ref) == "attention vllm FLASH_ATTN vs hf sdpa"


def test_judged_against_another_backend_the_verdict_says_which_two() -> None:
    verdict = judge(golden(), CELL.id, CLOSE, "fp8", engine="vllm", attention_backend="FLASH_ATTN",
                    kv_cache_dtype="fp8_e4m3")
    assert verdict.passed and verdict.compared
    assert verdict.backends == {"backends": "attention vllm FLASH_ATTN vs hf sdpa, KV cache fp8_e4m3 vs float32",
                                "cell_backends": "attention vllm FLASH_ATTN vs vllm FLASHINFER"}
    assert "recorded on another backend: attention vllm FLASH_ATTN vs hf sdpa" in verdict.message
    same = judge(golden(), CELL.id, CLOSE, "fp8", engine="vllm", attention_backend="FLASHINFER",
                 kv_cache_dtype="fp8_e4m3")
    assert same.backends == {"backends": "attention vllm FLASHINFER vs hf sdpa, KV cache fp8_e4m3 vs float32"}
    unknown = judge(golden(), CELL.id, CLOSE, "fp8")  # the candidate did not say what it ran
    assert unknown.backends == {} and "another backend" not in unknown.message
    assert verdict.metrics == unknown.metrics  # the figures do not depend on it
    no_reference = judge(replace(golden(), reference=None), CELL.id, CLOSE, "fp8", engine="vllm",
                         attention_backend="FLASH_ATTN", kv_cache_dtype="fp8_e4m3")
    assert "recorded on another backend: attention vllm FLASH_ATTN vs vllm FLASHINFER" in no_reference.message


def test_a_live_cell_notes_the_backends_and_records_its_own(tmp_path: Path) -> None:
    check_dir = tmp_path / "check"
    record(check_dir, golden())
    run = GoldenRun(check_path=str(check_dir), files=load_golden_source(check_dir), record_dir=tmp_path / "rec",
                    runner="here", fingerprint="fp")
    run._identities["m"] = MODEL
    notes: dict[str, Any] = {}
    metrics: dict[str, float] = {}
    cell = CellGolden(run=run, cell=CELL, model=Path("m"), prompts=PROMPT_SET, note=notes.__setitem__,
                      record_metric=metrics.__setitem__)
    info = RunInfo(engine="vllm", version="0.26.0", device="cuda", dtype="bfloat16", kv_cache_dtype="fp8_e4m3",
                   attention_backend="FLASH_ATTN")
    verdict = cell.check(CLOSE, "fp8", 4, 3, info=info)
    assert verdict is not None and verdict.passed
    assert notes["golden"]["status"] == "passed"
    assert notes["golden"]["backends"] == "attention vllm FLASH_ATTN vs hf sdpa, KV cache fp8_e4m3 vs float32"
    assert notes["golden"]["cell_backends"] == "attention vllm FLASH_ATTN vs vllm FLASHINFER"
    cell.check(CLOSE, "fp8", 4, 3)
    assert "backends" not in notes["golden"]  # without what ran, nothing is claimed
    reference_info = RunInfo(engine="hf", version="5.24.0", device="cuda", dtype="float32",
                             kv_cache_dtype="float32", attention_backend="sdpa")
    path = cell.record(CLOSE, info, 4, 3, reference=OUT, reference_info=reference_info, reference_kind="float32-gpu")
    assert path is not None
    written = load_golden(path)
    assert written.cells[CELL.id].attention_backend == "FLASH_ATTN"
    assert written.cells[CELL.id].kv_cache_dtype == "fp8_e4m3"
    assert written.reference is not None and written.reference.attention_backend == "sdpa"


def report_with(engine_info: dict[str, Any] | None) -> Report:
    extra: dict[str, Any] = {outputs.KEY: outputs.keep(MODEL.digest, PROMPTS, 4, 3, CLOSE)}
    if engine_info is not None:
        extra["engine_info"] = engine_info
    cell = {"nodeid": f"suites/test_precision.py::test_logprobs_close_to_fp32_reference[tiny-qwen2-{CELL.id}]",
            "engine": "vllm", "params": dict(CELL.params), "outcome": "passed", "metrics": {}, "extra": extra}
    return Report.from_run({"name": "h200"}, [cell])


def test_judged_after_the_run_from_the_cells_engine_info(tmp_path: Path) -> None:
    files = (replace(golden(), source=str(tmp_path / "g.json")),)
    report = report_with({"engine": "vllm", "dtype": "bfloat16", "kv_cache_dtype": "fp8_e4m3",
                          "attention_backend": "FLASH_ATTN"})
    (check,) = check_report(report, files, "golden")
    assert check.status == "passed"
    assert check.backends["backends"] == "attention vllm FLASH_ATTN vs hf sdpa, KV cache fp8_e4m3 vs float32"
    entry = with_checks(report, [check], "golden").cells[0].extra["golden"]
    assert entry["backends"] == check.backends["backends"] and entry["cell_backends"].endswith("vs vllm FLASHINFER")
    assert checks_json([check])[0]["backends"] == check.backends["backends"]
    (silent,) = check_report(report_with(None), files, "golden")  # an older report: nothing said, nothing claimed
    assert silent.status == "passed" and silent.backends == {}
