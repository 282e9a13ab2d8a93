"""`gpucompat check` output: --severity, --quiet, and advice printed with the condition it is about."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pytest_gpucompat.cli import main
from pytest_gpucompat.kb import load_kb
from pytest_gpucompat.kb.describe import describe_when

RULES = textwrap.dedent("""
    rules:
      - id: t-bf16-needs-sm80
        summary: bf16 needs compute capability 8.0
        severity: broken
        failure: error-at-start
        engine: vllm
        confidence: upstream
        when: {compute_capability: "<8.0", params: {dtype: [bfloat16]}}
        workaround: use --dtype half
        sources: [{kind: code, ref: x}]
      - id: t-volta-slow-attention
        summary: attention falls back to a slower kernel on Volta
        severity: degraded
        failure: slow
        engine: vllm
        confidence: upstream
        when: {compute_capability: "<8.0"}
        sources: [{kind: doc, ref: x}]
      - id: t-use-fp16-on-volta
        summary: fp16 is the fast path on Volta
        severity: advice
        failure: none
        confidence: upstream
        when: {compute_capability: "<8.0"}
        workaround: Use dtype float16 on this GPU.
        sources: [{kind: doc, ref: x}]
      - id: t-docs-say-volta-hangs
        summary: an article says Volta hangs
        severity: broken
        failure: hang
        confidence: documents
        when: {compute_capability: "<8.0"}
        sources: [{kind: seed, ref: "000 §1"}]
      - id: t-no-gpu-recreate-container
        summary: "a GPU container can lose its GPU after systemctl daemon-reload"
        severity: advice
        failure: none
        confidence: upstream
        when: {gpu_count: "<1"}
        workaround: Recreate the container; a restart of the process inside it is not enough.
        sources: [{kind: issue, ref: x}]
      - id: t-driver-580-cuda-13
        summary: driver 580 with CUDA 13.0 wants the new compat package
        severity: advice
        failure: none
        confidence: upstream
        when: {driver: ">=580", cuda_driver: "==13.0"}
        sources: [{kind: doc, ref: x}]
""")
V100 = ('name: volta\ngpus: [{name: "Tesla V100-SXM2-32GB", compute_capability: "7.0"}]\n'
        'packages: {vllm: "0.6.3"}\nparams: {dtype: bfloat16}\n')
CPU = 'name: laptop\ngpus: []\npackages: {vllm: "0.6.3"}\n'
FLEET = ("fleet:\n  volta: {gpus: [{name: V100, compute_capability: '7.0'}], packages: {vllm: '0.6.3'}}\n"
         "  laptop: {gpus: []}\n")
OWN = ("--no-builtin-rules",)


@pytest.fixture
def kb(tmp_path: Path) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(RULES)
    return path


def check(capsys: pytest.CaptureFixture[str], kb: Path, env: str, *argv: str, tmp: Path) -> tuple[int, str]:
    path = tmp / "env.yaml"
    path.write_text(env)
    code = main(["check", "--env", str(path), "--kb", str(kb), *OWN, *argv])
    out, err = capsys.readouterr()
    assert err == ""
    return code, out


# ------------------------------------------------------------------------------------------------ --severity


def test_severity_broken_lists_only_broken_and_says_what_it_left_out(capsys, kb, tmp_path):
    code, out = check(capsys, kb, V100, "--severity", "broken", tmp=tmp_path)
    assert code == 0
    assert "t-bf16-needs-sm80" in out
    assert "DEGRADED" not in out and "t-volta-slow-attention" not in out
    assert "RECOMMENDATIONS" not in out and "Use dtype float16" not in out
    assert "[t-docs-say-volta-hangs]" in out  # a claim that would be broken is at that severity
    assert "not shown (--severity broken): 1 degraded, 1 recommendation" in out
    assert out.rstrip().splitlines()[-1] == "verdict: 1 broken, 1 degraded (1 recommendation, 1 unconfirmed claim)"


def test_severity_degraded_keeps_broken_and_degraded(capsys, kb, tmp_path):
    _, out = check(capsys, kb, V100, "--severity", "degraded", tmp=tmp_path)
    assert "BROKEN" in out and "DEGRADED" in out and "RECOMMENDATIONS" not in out
    assert "not shown (--severity degraded): 1 recommendation" in out


def test_severity_advice_is_everything(capsys, kb, tmp_path):
    _, everything = check(capsys, kb, V100, tmp=tmp_path)
    _, advice = check(capsys, kb, V100, "--severity", "advice", tmp=tmp_path)
    assert advice == everything and "not shown" not in advice


def test_fail_on_judges_every_finding_whatever_severity_shows(capsys, kb, tmp_path):
    code, out = check(capsys, kb, V100.replace("params: {dtype: bfloat16}\n", ""), "--severity", "broken",
                      "--fail-on", "degraded", tmp=tmp_path)
    assert "t-volta-slow-attention" not in out
    assert code == 1  # the degraded finding it did not list still fails the gate


def test_json_honours_severity_and_ignores_quiet(capsys, kb, tmp_path):
    _, out = check(capsys, kb, V100, "--json", "--severity", "broken", "--quiet", tmp=tmp_path)
    doc = json.loads(out)
    assert sorted(f["id"] for f in doc["findings"]) == ["t-bf16-needs-sm80", "t-docs-say-volta-hangs"]
    assert doc["verdict"] == "1 broken, 1 degraded"  # the verdict judges every finding
    _, out = check(capsys, kb, V100, "--json", tmp=tmp_path)
    assert len(json.loads(out)["findings"]) == 4


# ------------------------------------------------------------------------------------------------ --quiet


def test_quiet_prints_only_the_verdict_line(capsys, kb, tmp_path):
    code, out = check(capsys, kb, V100, "--quiet", "--fail-on", "broken", tmp=tmp_path)
    assert out == "verdict: 1 broken, 1 degraded (1 recommendation, 1 unconfirmed claim)\n"
    assert code == 1


def test_quiet_fleet_is_one_line_per_runner(capsys, kb, tmp_path):
    _, out = check(capsys, kb, FLEET, "-q", tmp=tmp_path)
    assert out.splitlines() == [
        "volta: verdict: 1 degraded (1 recommendation, 1 unconfirmed claim)",
        "laptop: verdict: no known problems (1 recommendation, 0 unconfirmed claims)",
    ]


# ------------------------------------------------------------------------------------------------ advice's condition


def test_advice_on_a_gpu_less_machine_says_when_it_applies(capsys, kb, tmp_path):
    _, out = check(capsys, kb, CPU, tmp=tmp_path)
    advice = out[out.index("RECOMMENDATIONS"):]
    lines = advice.splitlines()
    summary = next(i for i, line in enumerate(lines) if "lose its GPU" in line)
    assert lines[summary] == "- a GPU container can lose its GPU after systemctl daemon-reload"
    assert lines[summary + 1] == "    when: no GPU visible"
    assert lines[summary + 2].startswith("    do: Recreate the container;")
    assert all(len(line) <= 100 for line in out.splitlines())


def test_advice_without_workaround_prints_summary_and_condition(capsys, kb, tmp_path):
    env = 'gpus: [{name: "NVIDIA H200", compute_capability: "9.0"}]\ndriver: "580.65.06"\ncuda_driver: "13.0"\n'
    _, out = check(capsys, kb, env, tmp=tmp_path)
    assert "- driver 580 with CUDA 13.0 wants the new compat package\n" \
           "    when: driver >=580 and CUDA driver 13.0\n" in out
    assert "do:" not in out


def test_every_line_fits_a_narrow_terminal(capsys, kb, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "50")
    _, out = check(capsys, kb, V100, tmp=tmp_path)
    assert max(len(line) for line in out.splitlines()) <= 50
    assert "when: compute capability <8.0" in out.replace("\n      ", " ")


@pytest.mark.parametrize(("when", "engine", "phrase"), [
    ({"gpu_count": "<1"}, None, "no GPU visible"),
    ({"gpu_count": "==0"}, None, "no GPU visible"),
    ({"gpu_count": ">=2"}, None, ">=2 GPUs visible"),
    ({"gpu_count": "1"}, None, "1 GPU visible"),
    ({"driver": ">=580", "cuda_driver": "13.0"}, None, "driver >=580 and CUDA driver 13.0"),
    ({"packages": {"flashinfer": "absent"}}, "vllm", "engine vllm and flashinfer not installed"),
    ({"params": {"kv_cache_dtype": ["fp8", "fp8_e5m2"]}, "arch": ["volta"]}, "vllm",
     "engine vllm and architecture volta and kv_cache_dtype fp8 or fp8_e5m2"),
    ({"params": {"tensor_parallel_size": ">=4"}}, None, "tensor_parallel_size >=4"),
    ({}, None, ""),
])
def test_describe_when(tmp_path, when, engine, phrase):
    rule = {"id": "x", "summary": "s", "severity": "advice", "failure": "none", "confidence": "upstream",
            "sources": [{"kind": "doc", "ref": "r"}], "when": when}
    if engine:
        rule["engine"] = engine
    path = tmp_path / "kb.json"
    path.write_text(json.dumps({"rules": [rule]}))
    (loaded,) = load_kb([str(path)], builtin=False).rules
    assert describe_when(loaded) == phrase
