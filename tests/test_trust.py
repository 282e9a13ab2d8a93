"""A gate people can trust: unconfirmed claims never raise alarms, a cell carries only the rules that concern it,
and cells whose needs exceed the runner are skipped before anything starts, naming the need and what it has."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_gpucompat import cli
from pytest_gpucompat.kb import cell_findings, concerns_cell, decide, findings_for, load_kb, matching_rules, parse_rule
from pytest_gpucompat.machine.fingerprint import load as load_fingerprints

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"

# Machines of every supported kind, each with a healthy software stack for it.
CLEAN = {
    "v100-vllm063": ("Tesla V100-SXM2-32GB", "7.0", 32768, "535.104.05", "12.2", "12.1", {"vllm": "0.6.3"}),
    "t4-vllm063": ("Tesla T4", "7.5", 15360, "535.183.01", "12.2", "12.1", {"vllm": "0.6.3"}),
    "a100-vllm085": ("NVIDIA A100-SXM4-80GB", "8.0", 81920, "550.54.15", "12.4", "12.4", {"vllm": "0.8.5"}),
    "l40s-sglang046": ("NVIDIA L40S", "8.9", 46068, "550.90.07", "12.4", "12.4", {"sglang": "0.4.6"}),
    "h100-vllm0101": ("NVIDIA H100 80GB HBM3", "9.0", 81559, "570.124.06", "12.8", "12.8", {"vllm": "0.10.1"}),
    "h200-sglang053": ("NVIDIA H200", "9.0", 143771, "580.95.05", "13.0", "12.8", {"sglang": "0.5.3"}),
}


def write_fingerprint(path: Path, gpu: str, cc: str, mib: int, driver: str, cuda_driver: str, cuda_runtime: str,
                      packages: dict[str, str], gpus: int = 1, params: dict | None = None) -> Path:
    path.write_text(json.dumps({
        "name": path.stem,
        "gpus": [{"name": gpu, "compute_capability": cc, "memory_mib": mib}] * gpus,
        "driver": driver, "cuda_driver": cuda_driver, "cuda_runtime": cuda_runtime,
        "packages": {**packages, "torch": "2.6.0"}, "params": params or {},
    }))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


# ------------------------------------------------------------------ unconfirmed claims never raise alarms


@pytest.mark.parametrize("kind", sorted(CLEAN))
def test_clean_machine_of_every_kind_has_no_known_problems(tmp_path, capsys, kind):
    env = write_fingerprint(tmp_path / f"{kind}.json", *CLEAN[kind])
    code, out = run_cli(capsys, "check", "--env", str(env), "--fail-on", "degraded")
    assert code == 0, out
    assert out.rstrip().splitlines()[-1].startswith("verdict: no known problems")
    code, out = run_cli(capsys, "check", "--env", str(env), "--json")
    doc = json.loads(out)
    assert doc["verdict"] == "no known problems"
    assert all(isinstance(f["unconfirmed"], bool) for f in doc["findings"])
    assert any(f["unconfirmed"] for f in doc["findings"]), "the seed claims are still listed, as unconfirmed"


def test_the_real_h200_fingerprint_has_no_known_problems(tmp_path, capsys):
    """The fingerprint the H200 run recorded (driver 580, CUDA 13, vLLM 0.26.0)."""
    report = json.loads((REPORTS / "h200-580.159.04-vllm-0.26.0.json").read_text())
    env = tmp_path / "h200.json"
    env.write_text(json.dumps(next(iter(report["runners"].values()))))
    code, out = run_cli(capsys, "check", "--env", str(env), "--fail-on", "degraded")
    assert code == 0, out
    assert out.rstrip().splitlines()[-1].startswith("verdict: no known problems")
    unconfirmed = out[out.index("UNCONFIRMED CLAIMS"):]
    assert "seed-s132-vllm-fifo-starvation-scheduler-policy" in unconfirmed  # still visible, as a claim
    assert "seed-s55-cuda-context-leak-after-24h" in unconfirmed
    assert "DEGRADED" not in out and "BROKEN" not in out


CLAIM_RULES = textwrap.dedent("""
    rules:
      - id: t-claim-v100-broken
        summary: "Claimed: nothing works on V100"
        severity: broken
        failure: error-at-start
        engine: vllm
        confidence: documents
        when: {compute_capability: "==7.0"}
        sources: [{kind: seed, ref: "000 §3"}]
      - id: t-upstream-v100-degraded
        summary: V100 falls back to a slower kernel
        severity: degraded
        failure: fallback
        engine: vllm
        confidence: upstream
        when: {compute_capability: "==7.0", params: {dtype: [float16]}}
        sources: [{kind: code, ref: x}]
""")


def test_fail_on_counts_only_evidence(tmp_path, capsys):
    kb = tmp_path / "rules.yaml"
    kb.write_text(CLAIM_RULES)
    env = write_fingerprint(tmp_path / "v100.json", *CLEAN["v100-vllm063"])
    args = ("check", "--no-builtin-rules", "--kb", str(kb), "--env", str(env))
    code, out = run_cli(capsys, *args, "--fail-on", "broken")
    assert code == 0, "a documents-only rule alone never fails the gate"
    assert "BROKEN" not in out and "t-claim-v100-broken] would be broken (error-at-start)" in out
    assert out.rstrip().splitlines()[-1] == "verdict: no known problems (0 recommendations, 1 unconfirmed claim)"
    env = write_fingerprint(tmp_path / "v100fp16.json", *CLEAN["v100-vllm063"], params={"dtype": "float16"})
    code, out = run_cli(capsys, "check", "--no-builtin-rules", "--kb", str(kb), "--env", str(env),
                        "--fail-on", "degraded")
    assert code == 1 and out.rstrip().splitlines()[-1].startswith("verdict: 1 degraded")


def test_an_unconfirmed_claim_never_stops_or_xfails_a_cell():
    rule = parse_rule(
        {"id": "t-claim", "summary": "s", "severity": "broken", "failure": "crash", "confidence": "documents",
         "engine": "vllm", "when": {"params": {"dtype": ["float16"]}}, "sources": [{"kind": "seed", "ref": "x"}]},
        "t.yaml",
    )
    (finding,) = findings_for([rule])
    assert finding.unconfirmed and finding.action == "annotate"
    decision = decide([finding])
    assert decision.action == "run" and decision.reason == "" and decision.findings == (finding,)


def rule(**fields):
    base = {"id": "t", "summary": "s", "severity": "advice", "failure": "none", "confidence": "upstream",
            "sources": [{"kind": "doc", "ref": "x"}]}
    return parse_rule({**base, **fields}, "t.yaml")


@pytest.mark.parametrize(("fields", "concerns"), [
    ({"engine": "vllm"}, False),  # no condition at all: general knowledge of the engine
    ({"when": {"gpu_count": ">=1"}}, False),  # machine-wide advice (nvidia-smi usage)
    ({"severity": "degraded", "failure": "memory", "when": {"gpu_count": ">=1"}}, False),
    ({"severity": "broken", "failure": "crash", "when": {"compute_capability": "<7.0"}}, True),  # breaks every cell
    ({"when": {"params": {"dtype": ["fp8"]}}}, True),
    ({"engine": "vllm", "when": {"packages": {"vllm": ">=0.26"}}}, True),
])
def test_a_cell_carries_only_the_rules_that_concern_it(fields, concerns):
    assert concerns_cell(rule(**fields)) is concerns


def test_h200_vllm_cell_carries_no_tool_advice():
    kb = load_kb()
    report = json.loads((REPORTS / "h200-580.159.04-vllm-0.26.0.json").read_text())
    fp = load_fingerprints_from_dict(report)
    rules = matching_rules(kb, fp, "vllm", {"dtype": "bfloat16", "enforce_eager": True})
    findings = cell_findings(rules)
    ids = [f.id for f in findings]
    assert len(rules) > 20 and len(ids) < 5, ids
    assert not [i for i in ids if "nvidia-smi" in i or i.startswith(("seed-s09-", "seed-s141-", "seed-s55-"))]
    # the claim about vLLM's default scheduler concerns a cell that keeps the default policy: listed, unconfirmed
    assert [f.id for f in findings if f.unconfirmed] == ["seed-s132-vllm-fifo-starvation-scheduler-policy"]
    assert "seed-s132-vllm-fifo-starvation-scheduler-policy" not in [
        f.id for f in cell_findings(matching_rules(kb, fp, "vllm", {"scheduling_policy": "priority"}))]


def load_fingerprints_from_dict(report: dict):
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(next(iter(report["runners"].values())), fh)
    return next(iter(load_fingerprints(fh.name).values()))


# ------------------------------------------------------------------ needs beyond the runner


@pytest.mark.parametrize(("engine", "params", "gpus", "detail"), [
    ("vllm", {"tensor_parallel_size": 2}, 1, "needs 2 GPUs (tensor_parallel_size=2), 1 visible"),
    ("vllm", {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, 2,
     "needs 4 GPUs (tensor_parallel_size=2 × pipeline_parallel_size=2), 2 visible"),
    ("vllm", {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, 4, None),
    ("vllm", {"tensor_parallel_size": 1}, 1, None),
    ("vllm", {"tensor_parallel_size": "two"}, 1, None),  # not a count: nothing to judge
    ("sglang", {"tp_size": 2, "dp_size": 2}, 2, "needs 4 GPUs (tp_size=2 × dp_size=2), 2 visible"),
    ("sglang", {"tp_size": 2, "dp_size": 2, "enable_dp_attention": True}, 2, None),
    ("sglang", {"tp_size": 4, "dp_size": 2, "enable_dp_attention": True}, 2, "needs 4 GPUs (tp_size=4), 2 visible"),
    ("tensorrt-llm", {"tensor_parallel_size": 8}, 4, "needs 8 GPUs (tensor_parallel_size=8), 4 visible"),
])
def test_parallel_cells_need_visible_gpus(tmp_path, engine, params, gpus, detail):
    env = write_fingerprint(tmp_path / "h200.json", *CLEAN["h100-vllm0101"][:6], {engine: "9.0"}, gpus=gpus)
    fp = next(iter(load_fingerprints(env).values()))
    findings = cell_findings(matching_rules(load_kb(), fp, engine, params))
    from pytest_gpucompat.kb.verdicts import with_details

    rules = matching_rules(load_kb(), fp, engine, params)
    needs = [f for f in with_details(findings, rules, fp, params) if f.id.endswith("needs-visible-gpus")]
    if detail is None:
        assert needs == []
    else:
        assert [f.detail for f in needs] == [detail]
        assert decide(needs).action == "skip" and detail in decide(needs).reason


def test_check_names_the_need_and_what_the_runner_has(tmp_path, capsys):
    env = write_fingerprint(tmp_path / "one.json", *CLEAN["h100-vllm0101"], params={"tensor_parallel_size": 2})
    code, out = run_cli(capsys, "check", "--env", str(env), "--fail-on", "broken")
    assert code == 1
    assert "[vllm-parallel-needs-visible-gpus]" in out
    assert "here: needs 2 GPUs (tensor_parallel_size=2), 1 visible" in out
    assert out.rstrip().splitlines()[-1].startswith("verdict: 1 broken")


def test_a_cell_that_needs_more_gpus_is_skipped_before_its_engine_starts(pytester):
    pytester.makefile(".json", one=json.dumps({
        "name": "one-h200", "gpus": [{"name": "NVIDIA H200", "compute_capability": "9.0", "memory_mib": 143771}],
        "driver": "580.159.04", "cuda_driver": "13.0", "cuda_runtime": "13.0",
        "packages": {"vllm": "0.26.0", "torch": "2.11.0"},
    }))
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="vllm", params={"tensor_parallel_size": [1, 2]})
        def test_cell(gpucompat_cell):
            assert gpucompat_cell.params["tensor_parallel_size"] == 1, "an engine would have started here"
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-env", "one.json", "--gpucompat-report", "r.json", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*[[]vllm-parallel-needs-visible-gpus[]]*needs 2 GPUs (tensor_parallel_size=2), "
                                 "1 visible*"])
    cells = json.loads((pytester.path / "r.json").read_text())["cells"]
    (tp2,) = [c for c in cells if c["params"]["tensor_parallel_size"] == 2]
    assert tp2["outcome"] == "skipped"
    assert tp2["reason"] == ("cannot run here: [vllm-parallel-needs-visible-gpus] needs 2 GPUs "
                             "(tensor_parallel_size=2), 1 visible")


def test_fleet_preview_honours_the_policy_hook(pytester):
    """One evaluation for the run and the preview: a conftest policy that runs everything previews no skip."""
    gpu = {"name": "NVIDIA H200", "compute_capability": "9.0", "memory_mib": 143771}
    pytester.makefile(".json", fleet=json.dumps({"fleet": {
        "one-gpu": {"gpus": [gpu], "packages": {"vllm": "0.26.0"}},
        "two-gpu": {"gpus": [gpu, gpu], "packages": {"vllm": "0.26.0"}},
    }}))
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="vllm", params={"tensor_parallel_size": [2]})
        def test_cell(gpucompat_cell):
            pass
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-env", "fleet.json", "--co")
    result.stdout.fnmatch_lines(["*one-gpu*", "*0 run, 1 skip*", "*needs 2 GPUs*", "*two-gpu*", "*1 run, 0 skip*"])
    pytester.makeconftest("""
        from pytest_gpucompat.kb import Decision

        def pytest_gpucompat_decide(config, cell, findings, fingerprint):
            return Decision("run", False, "policy: run everything", tuple(findings))
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-env", "fleet.json", "--co")
    result.stdout.fnmatch_lines(["*one-gpu*", "*1 run, 0 skip*"])


def test_k_selects_a_suite_by_its_module_name():
    """The documented id scheme: ``-k test_memory`` is the memory suite alone, while ``-k memory`` also matches the
    parameter ``gpu_memory_utilization`` in other suites' cell ids."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent

    def collected(expr: str) -> set[str]:
        proc = subprocess.run([sys.executable, "-m", "pytest", "--gpucompat", "suites", "--co", "-q", "-p",
                               "no:cacheprovider", "-k", expr], cwd=root, capture_output=True, text=True, timeout=120)
        return {line.split("::")[0] for line in proc.stdout.splitlines() if "::" in line}

    assert collected("test_memory") == {"suites/test_memory.py"}
    assert collected("memory") > {"suites/test_memory.py"}


def checkpoint(path: Path, gib: int, dtype: str = "bfloat16") -> Path:
    """A local checkpoint whose weight file is sparse: its size is real to the filesystem, its disk use is nil."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"torch_dtype": dtype, "vocab_size": 32}))
    with open(path / "model.safetensors", "wb") as fh:
        fh.truncate(gib * 1024**3)
    return path


def test_weights_are_measured_for_the_cells_dtype(tmp_path):
    from pytest_gpucompat.workload.checkpoint import weights_mib

    model = checkpoint(tmp_path / "m", 2)
    assert weights_mib(model) == weights_mib(model, "auto") == 2048
    assert weights_mib(model, "float32") == 4096 and weights_mib(model, "fp8") == 1024
    assert weights_mib(model, "no-such-dtype") is None and weights_mib(tmp_path / "missing") is None
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{}")
    assert weights_mib(tmp_path / "empty") is None


def test_a_model_too_big_for_the_gpu_is_skipped_before_it_loads(pytester, tmp_path):
    model = checkpoint(tmp_path / "big-model", 100)  # 100 GiB of bf16 weights
    pytester.makefile(".json", h100=json.dumps({
        "name": "h100", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "memory_mib": 81559}],
        # a release the engine history does not hold: vLLM's own --dtype takes no fp8 (kb/settings.py would skip it)
        "driver": "570.124.06", "cuda_driver": "12.8", "cuda_runtime": "12.8", "packages": {"vllm": "9.0.0"},
    }))
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="vllm", params={"dtype": ["bfloat16", "fp8"], "tensor_parallel_size": [1]})
        def test_cell(gpucompat_cell, gpucompat_model):
            assert gpucompat_cell.params["dtype"] == "fp8", "an engine would have loaded the weights here"
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-env", "h100.json", "--gpucompat-model", str(model), "-rs",
                                "--gpucompat-no-builtin-rules", "--gpucompat-kb", str(RULES_DIR / "gpu-features.yaml"))
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*[[]model-weights-exceed-gpu-memory[]]*needs 102,400 MiB of weights per GPU "
                                 "(split by tensor_parallel_size=1), the smallest GPU has 81,559 MiB*"])


RULES_DIR = Path(__file__).resolve().parent.parent / "matrices" / "rules"
