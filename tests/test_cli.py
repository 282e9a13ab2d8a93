"""The gpucompat command: env, check (what-if), rules; bad input exits 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from pytest_gpucompat.cli import main

RULES = textwrap.dedent("""
    rules:
      - id: team-bf16-needs-sm80
        summary: bf16 needs compute capability 8.0
        severity: broken
        failure: error-at-start
        engine: vllm
        confidence: upstream
        when: {compute_capability: "<8.0", params: {dtype: [bfloat16]}}
        workaround: use --dtype half
        sources: [{kind: code, ref: vllm worker.py}]
      - id: team-use-fp16-on-volta
        summary: use fp16 on Volta
        severity: advice
        failure: none
        confidence: upstream
        when: {compute_capability: "<8.0"}
        workaround: Use dtype float16 on this GPU.
        sources: [{kind: doc, ref: x}]
""")
V100 = 'gpus: [{name: "Tesla V100-SXM2-32GB", compute_capability: "7.0"}]\npackages: {vllm: "0.6.3"}\n'


@pytest.fixture
def files(tmp_path):
    kb = tmp_path / "team.yaml"
    kb.write_text(RULES)
    env = tmp_path / "v100.yaml"
    env.write_text(V100 + "params: {dtype: bfloat16}\n")
    return kb, env


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_env_json_is_valid_input_for_check(capsys, tmp_path):
    code, out, _ = run(capsys, "env", "--json", "--name", "ci-1")
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "ci-1" and data["schema"] == 1 and "reasons" in data
    path = tmp_path / "env.json"
    path.write_text(out)
    code, out, _ = run(capsys, "check", "--env", str(path), "--json")
    assert code == 0
    assert json.loads(out)["fingerprint"]["name"] == "ci-1"


def test_env_text(capsys):
    code, out, _ = run(capsys, "env")
    assert code == 0 and "driver:" in out and "packages:" in out


def test_check_json_findings(capsys, files):
    kb, env = files
    code, out, _ = run(capsys, "check", "--env", str(env), "--kb", str(kb), "--json")
    assert code == 0
    doc = json.loads(out)
    by_id = {f["id"]: f for f in doc["findings"]}
    f = by_id["team-bf16-needs-sm80"]
    for key in ("id", "severity", "engine", "summary", "workaround", "sources", "confidence"):
        assert key in f
    assert (f["severity"], f["engine"]) == ("broken", "vllm")
    assert by_id["team-use-fp16-on-volta"]["engine"] is None


def test_check_human_output_groups_by_severity_and_ends_with_recommendations(capsys, files):
    kb, env = files
    code, out, _ = run(capsys, "check", "--env", str(env), "--kb", str(kb))
    assert code == 0
    broken = out.index("BROKEN")
    recommendations = out.index("RECOMMENDATIONS")
    assert broken < recommendations
    assert "Use dtype float16 on this GPU." in out[recommendations:]


@pytest.mark.parametrize(("fail_on", "expected"), [("broken", 1), ("degraded", 1)])
def test_fail_on(capsys, files, fail_on, expected):
    kb, env = files
    code, _, _ = run(capsys, "check", "--env", str(env), "--kb", str(kb), "--fail-on", fail_on)
    assert code == expected


def test_fail_on_clean_fingerprint_is_zero(capsys, tmp_path, files):
    kb, _ = files
    env = tmp_path / "h200.yaml"
    env.write_text('gpus: [{name: "NVIDIA H200", compute_capability: "9.0"}]\n')
    code, out, _ = run(capsys, "check", "--env", str(env), "--kb", str(kb), "--fail-on", "broken")
    assert code == 0


def test_fleet_check_json(capsys, tmp_path, files):
    kb, _ = files
    env = tmp_path / "fleet.yaml"
    env.write_text("fleet:\n  volta: {gpus: [{name: V100, compute_capability: '7.0'}]}\n  cpu: {}\n")
    code, out, _ = run(capsys, "check", "--env", str(env), "--kb", str(kb), "--json")
    docs = json.loads(out)["fleet"]
    assert [d["fingerprint"]["name"] for d in docs] == ["volta", "cpu"]


@pytest.mark.parametrize(
    ("content", "name", "fragment"),
    [
        ("driver: not-a-version\n", "env.yaml", "field 'driver'"),
        ("rules: [{id: x, summary: s, severity: fatal, failure: crash, confidence: upstream, "
         "sources: [{kind: doc, ref: r}]}]\n", "kb.yaml", "rule 'x': field 'severity'"),
        ("rules:\n  - id: [\n", "kb.yaml", "invalid YAML"),
    ],
)
def test_bad_input_exit_2_one_line(capsys, tmp_path, content, name, fragment):
    path = tmp_path / name
    path.write_text(content)
    flag = "--env" if name == "env.yaml" else "--kb"
    code, out, err = run(capsys, "check", flag, str(path))
    assert code == 2
    assert err.count("\n") == 1 and fragment in err and str(path) in err
    assert "Traceback" not in err


def test_rules_list_and_filters(capsys, files):
    kb, _ = files
    code, out, _ = run(capsys, "rules", "--kb", str(kb), "--severity", "advice", "--json")
    rules = json.loads(out)
    assert code == 0 and rules and all(r["severity"] == "advice" for r in rules)
    assert "team-use-fp16-on-volta" in {r["id"] for r in rules}
    code, out, _ = run(capsys, "rules", "--kb", str(kb), "--engine", "vllm")
    assert "team-bf16-needs-sm80" in out and "team-use-fp16-on-volta" not in out


def test_rules_lint_without_history_or_engine_says_what_was_not_checked(capsys, tmp_path):
    kb = tmp_path / "flags.yaml"
    kb.write_text("rules: [{id: f, summary: s, severity: advice, failure: none, confidence: documents, "
                  "engine: tensorrt-llm, flags: ['--max_batch_size'], sources: [{kind: seed, ref: r}]}]\n")
    code, out, _ = run(capsys, "rules", "--kb", str(kb), "--no-builtin-rules", "--engine", "tensorrt-llm", "--lint")
    assert code == 0
    assert "not checked: tensorrt-llm has no release history and is not installed (1 rules)" in out


def test_lint_checks_only_the_engines_own_flags(tmp_path):
    """A flag written with another tool's command ("nvidia-smi --query-gpu") is not held against the engine."""
    from pytest_gpucompat.kb import load_kb
    from pytest_gpucompat.kb.lint import lint_rules

    kb = tmp_path / "flags.yaml"
    kb.write_text("rules:\n"
                  "  - {id: own, summary: s, severity: advice, failure: none, confidence: documents, engine: vllm,\n"
                  "     flags: ['--swap-space'], sources: [{kind: seed, ref: r}]}\n"
                  "  - {id: other-tool, summary: s, severity: advice, failure: none, confidence: documents,\n"
                  "     engine: vllm, flags: ['nvidia-smi --query-gpu'], sources: [{kind: seed, ref: r}]}\n")
    rules = load_kb([kb], builtin=False).rules
    results = lint_rules(rules, installed=[], known={})  # no history: the installed engine's --help would decide
    assert [(r.rule_id, r.reason) for r in results] == [("own", "vllm has no release history and is not installed")]


def test_console_script_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "pytest_gpucompat.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("gpucompat ")
