"""The one evaluation pipeline (``kb.evaluate``): pure functions, no pytest plugin involved."""

from __future__ import annotations

from pytest_gpucompat.kb import (
    KnowledgeBase,
    cell_findings,
    decide,
    evaluate_cell,
    evaluate_machine,
    findings_for,
    load_kb,
    matching_rules,
    parse_rule,
)
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint

H200 = GPU(index=0, name="NVIDIA H200", architecture="hopper", compute_capability="9.0", memory_mib=143771)
ONE_H200 = Fingerprint(name="one", gpus=(H200,), driver="580.159.04", cuda_driver="13.0", cuda_runtime="13.0",
                       packages={"vllm": "0.26.0", "torch": "2.11.0"})


def rule(**overrides):
    raw = {"id": "r1", "summary": "s", "severity": "broken", "failure": "crash", "confidence": "upstream",
           "sources": [{"kind": "doc", "ref": "x"}]}
    raw.update(overrides)
    return parse_rule(raw, "test.yaml")


def test_a_cell_outside_its_fleet_axes_is_not_covered():
    verdict = evaluate_cell(load_kb(), ONE_H200, "vllm", {}, axes={"gpu": "*A100*"})
    assert verdict.not_covered == "gpu *A100* (this runner: NVIDIA H200)"
    assert verdict.decision is None and verdict.findings == ()
    verdict = evaluate_cell(load_kb(), ONE_H200, "vllm", {}, axes={"vllm": ">=0.26", "compute_capability": ">=9.0"})
    assert verdict.not_covered is None and verdict.decision is not None


def test_a_stopped_cell_says_what_the_runner_has_and_a_running_one_is_shared():
    kb = load_kb()
    stopped = evaluate_cell(kb, ONE_H200, "vllm", {"tensor_parallel_size": 2})
    assert stopped.decision.action == "skip"
    assert "needs 2 GPUs (tensor_parallel_size=2), 1 visible" in stopped.decision.reason
    ran = evaluate_cell(kb, ONE_H200, "vllm", {"tensor_parallel_size": 1})
    assert ran.decision.action == "run"
    again = evaluate_cell(kb, ONE_H200, "vllm", {"tensor_parallel_size": 1, "dtype": "bfloat16"})
    assert again.decision is ran.decision, "computed once per distinct set of matched rules"


def test_the_pipeline_is_matching_then_relevance_then_policy():
    kb = load_kb()
    for engine, params in [("vllm", {"kv_cache_dtype": "fp8"}), ("sglang", {"tp_size": 1}), ("hf", {})]:
        rules = matching_rules(kb, ONE_H200, engine, params)
        findings = tuple(cell_findings(rules))
        verdict = evaluate_cell(kb, ONE_H200, engine, params)
        assert [f.id for f in verdict.findings] == [f.id for f in findings]
        assert verdict.decision.action == decide(findings).action


def test_run_known_bad_and_measured_facts():
    kb = KnowledgeBase(rules=(rule(engine="vllm", when={"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}),))
    assert evaluate_cell(kb, ONE_H200, "vllm", {}).decision.action == "run"  # weights unknown: not judged
    big = {"model_weights_mib": 200_000}
    skipped = evaluate_cell(kb, ONE_H200, "vllm", {}, measured=big)
    assert skipped.decision.action == "skip" and "the smallest GPU has 143,771 MiB" in skipped.decision.reason
    forced = evaluate_cell(kb, ONE_H200, "vllm", {}, measured=big, run_known_bad=True)
    assert (forced.decision.action, forced.decision.strict, forced.decision.known_bad_run) == ("xfail", True, True)
    assert evaluate_cell(kb, ONE_H200, "vllm", {"tensor_parallel_size": 2}, measured=big).decision.action == "run"


def test_evaluate_machine_lists_every_matching_rule_with_details():
    fp = Fingerprint(gpus=(H200,), packages={"vllm": "0.26.0"}, params={"tensor_parallel_size": 2})
    kb = load_kb()
    found = evaluate_machine(kb, fp)
    assert [f.id for f in found] == [f.id for f in findings_for(matching_rules(kb, fp))]
    (needs,) = [f for f in found if f.id == "vllm-parallel-needs-visible-gpus"]
    assert needs.detail == "needs 2 GPUs (tensor_parallel_size=2), 1 visible"


def test_the_knowledge_base_modules_do_not_import_pytest():
    import subprocess
    import sys

    code = ("import sys, pytest_gpucompat.kb, pytest_gpucompat.kb.check, pytest_gpucompat.kb.lint\n"
            "assert 'pytest' not in sys.modules and '_pytest' not in sys.modules, 'kb imports pytest'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_remembered_needs_verdicts_follow_every_value_that_matters():
    """The needs verdicts are remembered per fingerprint by the needs parameters a cell has: each order of asking
    gives the rule-by-rule answer (absent and null alike, 2 and "2" alike, a list never remembered)."""
    from pytest_gpucompat.kb import clear_match_cache
    from pytest_gpucompat.kb.match import Facts, rule_matches

    kb = KnowledgeBase(rules=(rule(engine="vllm", when={"needs": {"gpus": ["tensor_parallel_size"]}}),
                              rule(id="r2", engine="vllm", when={"needs": {"gpu_memory_mib": ["tp_size"]}})))
    cells = [{}, {"tensor_parallel_size": 2}, {"tensor_parallel_size": None}, {"tensor_parallel_size": "2"},
             {"tensor_parallel_size": 1}, {"tp_size": 2, "model_weights_mib": 400_000},
             {"tp_size": 4, "model_weights_mib": 400_000}, {"tensor_parallel_size": [2]}, {"dtype": "bf16"}]
    expected = [[r.id for r in kb.rules if rule_matches(r, Facts.of(ONE_H200), "vllm", c)] for c in cells]
    assert expected[1] == ["r1"] and expected[5] == ["r2"] and expected[6] == []
    for order in (cells, cells[::-1]):
        clear_match_cache()
        got = {id(c): [r.id for r in matching_rules(kb, ONE_H200, "vllm", c)] for c in order}
        assert [got[id(c)] for c in cells] == expected
