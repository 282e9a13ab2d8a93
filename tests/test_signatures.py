"""Signatures: which known issue a failure is. Pure functions of rules and failures, no pytest plugin involved."""

from __future__ import annotations

import json
import textwrap

import pytest
from _cost import cpu

from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.kb import load_kb, load_rule_file, parse_rule
from pytest_gpucompat.kb.linear_regex import LinearPattern
from pytest_gpucompat.kb.match import Facts, contradiction
from pytest_gpucompat.kb.signatures import (
    MAX_LINE_CHARS,
    MAX_TEXT_CHARS,
    Failure,
    compile_pattern,
    explained_by_entry,
    explaining_rules,
    failure_lines,
)
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint

H200 = GPU(index=0, name="NVIDIA H200", architecture="hopper", compute_capability="9.0", memory_mib=143771)
A100 = GPU(index=0, name="NVIDIA A100-SXM4-80GB", architecture="ampere", compute_capability="8.0", memory_mib=81920)
V100 = GPU(index=0, name="Tesla V100-SXM2-32GB", architecture="volta", compute_capability="7.0", memory_mib=32768)


def machine(gpu: GPU | None = H200, driver: str | None = "580.159.04", cuda_runtime: str | None = "13.0",
            **packages: str) -> Fingerprint:
    return Fingerprint(name="r", gpus=(gpu,) if gpu else (), driver=driver, cuda_runtime=cuda_runtime,
                       packages={k.replace("_", "-"): v for k, v in packages.items()})


def rule(**overrides):
    raw = {"id": "r1", "summary": "s", "severity": "broken", "failure": "error-at-start", "confidence": "upstream",
           "sources": [{"kind": "doc", "ref": "x"}], "signature": ["boom"]}
    raw.update(overrides)
    return parse_rule(raw, "team.yaml")


def failure(reason=None, log_tail=None, engine="vllm", params=None, fp=None):
    return Failure(fingerprint=fp or machine(vllm="0.26.0"), engine=engine, params=params or {}, reason=reason,
                   log_tail=log_tail, phase="setup")


def explained(rules, f):
    return [r.id for r in explaining_rules(rules, f)]


# --------------------------------------------------------------------------- the schema


@pytest.mark.parametrize(
    ("signature", "problem"),
    [
        (["(unclosed"], "not a regular expression"),
        (["(a+)+$"], "a repeat inside a repeat"),
        (["(x|xy)*z"], "an alternation inside a repeat"),
        ([r"(a)\1"], "a backreference"),
        (["error: .*x.*y"], "two unbounded repeats that can match the same text"),
        ([r"\S+a\S+c"], "two unbounded repeats that can match the same text"),
        ([r"(?i)A[a-z]*B[A-Z]+"], "two unbounded repeats that can match the same text"),
        ([r"x(?i:a[a-z]*b[A-Z]+)"], "two unbounded repeats that can match the same text"),
        ([r"a \d+ b \d+ c \d+ d \d+ e \d+"], "more than 4 unbounded repeats"),
        ([".*"], "matches an empty text"),
        (["x" * 1001], "longer than 1000"),
        ([""], "non-empty string"),
        ([3], "non-empty string"),
        ([], "non-empty list"),
        ({"any": ["x"]}, "non-empty list"),
    ],
)
def test_a_bad_signature_is_one_line_naming_file_rule_and_field(tmp_path, signature, problem):
    path = tmp_path / "team.yaml"
    path.write_text(textwrap.dedent(f"""
        rules:
          - id: team-rule
            summary: s
            severity: broken
            failure: crash
            confidence: upstream
            signature: {json.dumps(signature)}
            sources: [{{kind: doc, ref: x}}]
    """))
    with pytest.raises(InputError) as info:
        load_rule_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: rule 'team-rule': field 'signature") and problem in message
    assert "\n" not in message


def test_a_signature_identifies_a_failure_so_failure_none_has_none():
    with pytest.raises(InputError, match="field 'signature'.*failure 'none'"):
        rule(severity="advice", failure="none")


def test_a_signature_is_compiled_once_on_load_and_searched_line_by_line():
    r = rule(signature="^RuntimeError: boom$")  # one string is a list of one
    assert isinstance(r.signature[0], LinearPattern) and r.signature[0].pattern == "^RuntimeError: boom$"
    assert explained([r], failure(log_tail="INFO starting\nRuntimeError: boom\nexit")) == ["r1"]
    assert explained([rule(signature=r"starting\s+RuntimeError")],
                     failure(log_tail="INFO starting\nRuntimeError: boom")) == []  # never across lines


def test_accepted_patterns_stay_fast_on_the_worst_text_they_can_meet():
    """What the loader lets through is at worst quadratic in a line, and lines are cut at MAX_LINE_CHARS."""
    fail = lambda fld, problem: ValueError(problem)  # noqa: E731
    patterns = [compile_pattern(p, fail, "signature[0]") for p in
                ("a.*c", r"unrecognized arguments:.*--swap-space\b", r"(?:ab)+c", r"\S+: \d+ x", "[ab]+c",
                 r"[0-9.]+ MiB [0-9.]+ GiB")]
    lines = failure_lines("reason", "ab" * 40_000 + ("\n" + "ab" * 4_000) * 8)
    assert sum(map(len, lines)) <= MAX_TEXT_CHARS and max(map(len, lines)) == MAX_LINE_CHARS
    with cpu() as used:  # CPU time: a loaded machine stretches the wall clock, not the work done
        for pattern in patterns:
            assert not any(pattern.search(line) for line in lines)
    assert used.seconds < 5.0


def test_failure_lines_keep_the_reason_and_the_end_of_the_log():
    log = "early line\n" + ("x" * 100 + "\n") * 2000 + "ValueError: the end"
    lines = failure_lines("vllm failed: ValueError: the end", log)
    assert sum(map(len, lines)) <= MAX_TEXT_CHARS
    assert lines[0].startswith("vllm failed") and lines[-1] == "ValueError: the end" and "early line" not in lines
    assert failure_lines(None, None) == ()


# --------------------------------------------------------------------------- what explains a failure


def test_a_signature_in_the_reason_or_in_the_log_tail_explains_the_failure():
    rules = [rule(id="boom-rule")]
    assert explained(rules, failure(reason="vllm: LLM() failed: RuntimeError: boom")) == ["boom-rule"]
    assert explained(rules, failure(reason="engine exited", log_tail="INFO x\nRuntimeError: boom")) == ["boom-rule"]
    assert explained(rules, failure(reason="engine exited", log_tail="INFO all fine")) == []
    assert explained(rules, failure()) == []


def test_only_rules_the_cell_does_not_contradict_explain_it():
    """The failure's text is the evidence; a known fact that contradicts the rule's when rules it out, a fact the
    report does not record does not."""
    fp = machine(vllm="0.26.0")
    rules = [
        rule(id="other-engine", engine="sglang"),
        rule(id="other-driver", when={"driver": "<550"}),
        rule(id="other-gpu", when={"compute_capability": "<8.0"}),
        rule(id="other-version", engine="vllm", when={"packages": {"vllm": "<0.20"}}),
        rule(id="other-param", engine="vllm", when={"params": {"kv_cache_dtype": ["fp8"]}}),
        rule(id="enough-gpus", engine="vllm", when={"needs": {"gpus": ["tensor_parallel_size"]}}),
        rule(id="unrecorded-param", engine="vllm", when={"params": {"skip_tokenizer_init": [True]}}),
        rule(id="unlisted-package", engine="vllm", when={"packages": {"flashinfer-python": ">=0.2"}}),
        rule(id="same-everything", engine="vllm", when={"driver": ">=580", "gpu": ["*H200*"],
                                                        "params": {"kv_cache_dtype": ["auto"]}}),
    ]
    f = failure(reason="boom", params={"kv_cache_dtype": "auto", "tensor_parallel_size": 1}, fp=fp)
    assert explained(rules, f) == ["unrecorded-param", "unlisted-package", "same-everything"]
    facts = Facts.of(fp)
    params = {"kv_cache_dtype": "auto", "tensor_parallel_size": 1}
    assert [contradiction(r, facts, "vllm", params) for r in rules[:6]] == [
        "engine", "when.driver", "when.compute_capability", "when.packages.vllm", "when.params.kv_cache_dtype",
        "when.needs.gpus"]
    # a cell that needs more GPUs than the runner has is what the needs rule is about
    assert contradiction(rules[5], facts, "vllm", {"tensor_parallel_size": 2}) is None


def test_a_fingerprint_without_the_fact_does_not_contradict():
    fp = machine(gpu=None, driver=None, cuda_runtime=None)
    r = rule(when={"driver": "<550", "compute_capability": "<8.0", "gpu_count": ">=2"})
    assert explained([r], failure(reason="boom", engine=None, fp=fp)) == ["r1"]


def test_an_openai_cell_is_explained_by_the_rules_of_the_engine_it_serves():
    r = rule(id="vllm-rule", engine="vllm")
    assert explained([r], failure(reason="boom", engine="openai", params={"server": "vllm"})) == ["vllm-rule"]
    assert explained([r], failure(reason="boom", engine="openai", params={"server": "sglang"})) == []
    assert explained([r], failure(reason="boom", engine="hf")) == []


def test_the_best_evidence_comes_first():
    rules = [rule(id="claim", confidence="documents", sources=[{"kind": "seed", "ref": "s"}]),
             rule(id="upstream"),
             rule(id="verified", confidence="verified", sources=[{"kind": "report", "ref": "r.json"}])]
    assert explained(rules, failure(reason="boom")) == ["verified", "upstream", "claim"]
    assert explained_by_entry(rules[1]) == {"id": "upstream", "severity": "broken", "confidence": "upstream",
                                            "failure": "error-at-start", "summary": "s", "workaround": None}


# --------------------------------------------------------------------------- the shipped rules


def test_every_shipped_signature_matches_the_symptom_its_rule_documents():
    """Signatures are taken from the failure texts the rules already cite, not invented."""
    signed = [r for r in load_kb().rules if r.signature]
    assert len(signed) >= 20
    for r in signed:
        symptom = " ".join((r.symptom or "").split())
        assert any(p.search(symptom) for p in r.signature), r.id
        assert r.confidence != "documents", r.id


def test_shipped_rules_explain_the_failures_seen_on_real_machines():
    kb = load_kb().rules
    embed = failure(reason="vllm: LLM() failed: ValueError: Tokenizer not available when `skip_tokenizer_init=True`",
                    params={"task": "embed", "dtype": "bfloat16"})
    assert explained(kb, embed) == ["vllm-0.26-pooling-needs-tokenizer"]
    qwen3_asr = "ValueError: 'qwen3_asr' is already used by a Transformers config, pick another name."
    on = machine(sglang="0.5.16", transformers="5.17.0")
    assert explained(kb, failure(log_tail=qwen3_asr, engine="sglang", fp=on)) == [
        "sglang-0.5.16-import-fails-with-transformers-5.17"]
    pinned = machine(sglang="0.5.16", transformers="5.12.1")  # the version SGLang pins: not this issue
    assert explained(kb, failure(log_tail=qwen3_asr, engine="sglang", fp=pinned)) == []


def test_one_text_several_rules_the_machine_tells_them_apart():
    kb = load_kb().rules
    fp8 = ("ValueError: FP8 KV cache is not supported by the Triton attention backend on NVIDIA A100 (compute "
           "capability 8.0); native FP8 (fp8e4nv) requires SM89+. Re-run with --kv-cache-dtype bfloat16.")
    params = {"kv_cache_dtype": "fp8_e4m3"}
    on_a100 = failure(reason=fp8, params=params, fp=machine(A100, vllm="0.27.1"))
    on_v100 = failure(reason=fp8, params=params, fp=machine(V100, driver="570.86.15", cuda_runtime="12.8",
                                                             vllm="0.27.1"))
    assert explained(kb, on_a100) == ["vllm-v1-fp8-kv-triton-needs-sm89"]  # cc 8.0: not the pre-Ampere rule
    assert set(explained(kb, on_v100)) == {"vllm-v1-fp8-kv-triton-needs-sm89", "vllm-v1-fp8-kv-pre-ampere-unsupported"}
    on_v100_flashinfer = failure(reason=fp8, params={**params, "attention_backend": "FLASHINFER"},
                                 fp=on_v100.fingerprint)
    assert explained(kb, on_v100_flashinfer) == ["vllm-v1-fp8-kv-pre-ampere-unsupported"]
    driver = "RuntimeError: The NVIDIA driver on your system is too old (found version 12020)."
    old = machine(A100, driver="535.104.05", cuda_runtime="13.0", vllm="0.26.0")
    assert set(explained(kb, failure(reason=driver, fp=old))) == {"cuda-13-runtime-needs-r580",
                                                                  "vllm-cuda13-wheels-need-driver-580"}
    assert explained(kb, failure(reason=driver)) == []  # driver 580 with CUDA 13: none of them
