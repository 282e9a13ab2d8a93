"""Golden outputs through pytest: record in one run, check in the next; another model refused with its reason; an
engine that computes differently flagged; a malformed file one line; a reference that does not fit never loaded."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import requires

from pytest_gpucompat.catalog.base import EngineSpec
from pytest_gpucompat.checks.golden_files import GoldenFile, Recorded, record
from pytest_gpucompat.session.golden_run import GoldenRun
from pytest_gpucompat.workload.models import build_tiny_model
from pytest_gpucompat.workload.prompts import prompt_set_for

SUITE = (Path(__file__).resolve().parent.parent / "suites" / "test_precision.py").read_text(encoding="utf-8")
BF16 = ("-k", "logprobs and hf and bfloat16", "-p", "no:randomly")


@pytest.fixture(autouse=True)
def _needs_transformers() -> None:
    requires("transformers")


@pytest.fixture(scope="module")
def golden_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Golden outputs of the default tiny model recorded the way the suite records them: hf float32 on the CPU, the
    suite's 16 tokens and top-5."""
    from pytest_gpucompat.engines.hf import HFEngine

    model = build_tiny_model("qwen2")
    prompts = prompt_set_for(model)
    engine = HFEngine()
    info = engine.start(EngineSpec("hf", str(model), {"dtype": "float32", "device": "cpu"}))
    try:
        out = tuple(engine.generate(prompts.ids, 16, 5))
    finally:
        engine.shutdown()
    run = GoldenRun(check_path=None, files=(), record_dir=None, runner="recorder", fingerprint="no GPU")
    target = tmp_path_factory.mktemp("golden")
    record(target, GoldenFile(
        model=run.identity(model), prompts_name=prompts.name, prompts_digest=prompts.digest, max_tokens=16, top_n=5,
        reference=Recorded(engine="hf", generations=out, dtype=info.dtype, device="cpu", version=info.version,
                           runner="recorder", fingerprint="no GPU", kind="float32-cpu"),
        prompts=tuple(prompts.to_dict()["prompts"])))
    return target


def cells_of(path: Path) -> dict[str, dict]:
    return {c["nodeid"].split("[", 1)[1].rstrip("]"): c for c in json.loads(path.read_text())["cells"]}


def test_record_on_one_run_check_on_the_next(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_precision=SUITE)
    recorded = pytester.runpytest("--gpucompat", *BF16, "--gpucompat-record-golden", "golden",
                                  "--gpucompat-runner", "recorder")
    recorded.assert_outcomes(passed=1)
    (path,) = (pytester.path / "golden").glob("*.json")
    assert path.name.endswith("__token-ids-8x16-seed3.json")
    data = json.loads(path.read_text())
    assert data["reference"]["kind"].startswith("float32-") and data["reference"]["runner"] == "recorder"
    assert list(data["cells"]) == ["hf-dtype=bfloat16"]

    checked = pytester.runpytest("--gpucompat", *BF16, "--gpucompat-golden", "golden", "--gpucompat-runner",
                                 "checker", "--gpucompat-report", "r.json")
    checked.assert_outcomes(passed=1)
    (cell,) = cells_of(pytester.path / "r.json").values()
    metrics = cell["metrics"]
    # the same machine: the golden reference is the live reference, up to the file's rounding
    assert metrics["golden_max_abs_logprob_delta"] == pytest.approx(metrics["max_abs_logprob_delta"], abs=1e-4)
    assert metrics["golden_cell_max_abs_logprob_delta"] < 1e-4 and metrics["golden_cell_token_agreement"] == 1.0
    assert cell["golden"]["status"] == "passed" and cell["golden"]["recorded_by"] == "recorder"
    assert cell["reference"]["kind"].startswith("float32-") and cell["prompts"]["name"] == "token-ids-8x16-seed3"

    from pytest_gpucompat.cli import main

    gate = ["diff", "r.json", "r.json", "--compare-fail", "golden_max_abs_logprob_delta:+50%"]
    assert main(gate) == 0  # a registered metric: the gate accepts it
    assert main(["report", "r.json", "--html", "r.html"]) == 0
    assert "golden Δlp" in (pytester.path / "r.html").read_text(encoding="utf-8")


def test_another_models_golden_is_refused_and_none_is_missing(pytester: pytest.Pytester, golden_dir: Path) -> None:
    pytester.makepyfile(test_precision=SUITE)
    (named,) = golden_dir.glob("*.json")
    refused = pytester.runpytest("--gpucompat", *BF16, "--gpucompat-model", "tiny-llama", "--gpucompat-golden",
                                 str(named), "--gpucompat-report", "r.json")
    refused.assert_outcomes(failed=1)
    refused.stdout.fnmatch_lines([f"*golden refused: {named.name} was recorded for another model (qwen2-*: weights "
                                  "sha256:*; llama-*: weights sha256:*)*"])
    (cell,) = cells_of(pytester.path / "r.json").values()
    assert cell["golden"]["status"] == "refused" and not any(m.startswith("golden") for m in cell["metrics"])
    assert "max_abs_logprob_delta" in cell["metrics"]  # the reference was still compared
    missing = pytester.runpytest("--gpucompat", *BF16, "--gpucompat-model", "tiny-llama", "--gpucompat-golden",
                                 str(golden_dir), "--gpucompat-report", "m.json")
    missing.assert_outcomes(passed=1)
    (cell,) = cells_of(pytester.path / "m.json").values()
    assert cell["golden"]["status"] == "missing" and "no golden output for llama-" in cell["golden"]["reason"]


PERTURBED = textwrap.dedent("""
    from pathlib import Path

    from pytest_gpucompat.catalog.base import EngineSpec
    from pytest_gpucompat.engines.hf import HFEngine
    from pytest_gpucompat.workload.models import build_perturbed_model


    class PerturbedHF(HFEngine):
        \"\"\"The hf engine on weights * (1 + 1e-3 N(0, 1)): a runner whose kernels compute differently.\"\"\"

        def start(self, spec):
            noisy = build_perturbed_model(Path(spec.model), 1e-3, cache_dir=Path(__file__).parent / "models")
            return super().start(EngineSpec(spec.engine, str(noisy), spec.params))
""")
AGAINST_GOLDEN = textwrap.dedent("""
    import pytest

    @pytest.mark.gpucompat(engine=["hf", "pert:PerturbedHF"], params={"dtype": ["float32"], "isolated": [False]})
    def test_against_golden(gpucompat_cell, gpucompat_engine, gpucompat_prompts, gpucompat_golden):
        out = gpucompat_engine.engine.generate(gpucompat_prompts.ids, 16, 5)
        verdict = gpucompat_golden.check(out, "float32", 16, 5)
        assert verdict.compared and verdict.passed, verdict.message
""")


def test_an_engine_that_computes_differently_is_flagged(pytester: pytest.Pytester, golden_dir: Path) -> None:
    pytester.makepyfile(pert=PERTURBED, test_against_golden=AGAINST_GOLDEN)
    result = pytester.runpytest("--gpucompat", "--gpucompat-golden", str(golden_dir), "--gpucompat-report", "r.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*float32-cpu reference, hf *, on recorder): drift: max |dlogprob| * > 0.005*"])
    cells = cells_of(pytester.path / "r.json")
    exact = cells["tiny-qwen2-hf-dtype=float32-isolated=false"]["metrics"]["golden_max_abs_logprob_delta"]
    drift = cells["tiny-qwen2-pert:PerturbedHF-dtype=float32-isolated=false"]["metrics"]["golden_max_abs_logprob_delta"]
    assert exact < 1e-4 < 0.005 < drift


def test_a_malformed_golden_file_stops_the_run_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    pytester.makefile(".json", bad='{"format": 1, "model": {"weights": "x"}}')
    result = pytester.runpytest("--gpucompat", "--gpucompat-golden", "bad.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: gpucompat: bad.json: field 'model.name': must be a non-empty string"])


NO_MEMORY = textwrap.dedent("""
    import importlib

    reference = importlib.import_module("pytest_gpucompat.workload.reference")  # the module the fixtures will import

    _saved = {}


    def pytest_configure(config):
        _saved.update(gpu=reference.free_gpu_mib, host=reference.free_host_mib)
        reference.free_gpu_mib = lambda: None
        reference.free_host_mib = lambda: 64.0  # MiB: no reference fits


    def pytest_unconfigure(config):
        reference.free_gpu_mib, reference.free_host_mib = _saved["gpu"], _saved["host"]
""")


def test_a_reference_that_does_not_fit_is_never_loaded(pytester: pytest.Pytester, golden_dir: Path) -> None:
    pytester.makepyfile(test_precision=SUITE)
    pytester.makeconftest(NO_MEMORY)
    alone = pytester.runpytest("--gpucompat", *BF16, "-rs", "--gpucompat-report", "a.json")
    alone.assert_outcomes(skipped=1)
    alone.stdout.fnmatch_lines(["*no reference: no reference fits: float32 needs * on the CPU; bfloat16 needs *; "
                                "no GPU, 64 MiB host memory available; no --gpucompat-golden to compare with instead*"])
    with_golden = pytester.runpytest("--gpucompat", *BF16, "--gpucompat-golden", str(golden_dir),
                                     "--gpucompat-report", "r.json")
    with_golden.assert_outcomes(passed=1)
    (cell,) = cells_of(pytester.path / "r.json").values()
    assert cell["reference"]["kind"] == "golden-only" and "reference_s" not in cell["metrics"]
    assert "max_abs_logprob_delta" not in cell["metrics"] and cell["metrics"]["golden_max_abs_logprob_delta"] > 0
