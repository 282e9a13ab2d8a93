"""The shipped knowledge base: every file loads, every seed claim is accounted for, and the rules behave."""

from __future__ import annotations

import re

import pytest

from pytest_gpucompat.kb import builtin_rule_files, load_kb, load_rule_file, matching_rules
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint

KB = load_kb()
ALL_CLAIMS = {f"S{i:02d}" for i in range(1, 144)}


@pytest.mark.parametrize("path", builtin_rule_files(), ids=lambda p: p.name)
def test_every_shipped_rule_file_loads(path):
    assert load_rule_file(path), f"{path.name} has no rules"


def test_every_seed_claim_is_a_rule_or_listed_as_not_encoded():
    encoded = {c for r in KB.rules for c in r.claims}
    listed = set(KB.not_encoded)
    missing = sorted(ALL_CLAIMS - encoded - listed)
    assert not missing, f"claims neither encoded nor listed: {missing}"
    assert not (encoded | listed) - ALL_CLAIMS
    assert all(reason.strip() for reason in KB.not_encoded.values())


def test_claims_contradicted_upstream_stay_visible_as_documents():
    seeds = [r for r in KB.rules if r.claims and any(s.kind == "seed" for s in r.sources)]
    assert seeds
    documents = [r for r in seeds if r.confidence == "documents"]
    assert documents, "contradicted or unverifiable claims keep confidence 'documents'"
    assert all(r.note for r in documents), [r.id for r in documents if not r.note]


def test_every_rule_cites_sources():
    for r in KB.rules:
        assert r.sources
        assert all(s.ref.strip() for s in r.sources), r.id


def fp(**kw):
    return Fingerprint(**kw)


def test_h200_with_cuda13_vllm_has_no_broken_findings():
    h200 = GPU(index=0, name="NVIDIA H200", architecture="hopper", compute_capability="9.0", memory_mib=143771)
    f = fp(gpus=(h200,), driver="580.159.04", cuda_driver="13.0", cuda_runtime="13.0",
           packages={"vllm": "0.26.0", "torch": "2.11.0+cu130"})
    broken = [r.id for r in matching_rules(KB, f) if r.severity == "broken" and r.confidence != "documents"]
    assert broken == []


def test_cuda13_wheels_on_an_older_driver_are_broken():
    a100 = GPU(index=0, name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
    f = fp(gpus=(a100,), driver="550.54.15", cuda_driver="12.4", packages={"vllm": "0.27.1"})
    broken = [r for r in matching_rules(KB, f) if r.severity == "broken" and r.confidence == "upstream"]
    assert broken, "a CUDA 13 build of vLLM on a 550 driver must be flagged"


def test_fp8_kv_cache_on_ampere_is_flagged_upstream():
    a100 = GPU(index=0, name="NVIDIA A100-SXM4-40GB", compute_capability="8.0")
    found = matching_rules(KB, fp(gpus=(a100,), packages={"vllm": "0.27.1"}), "vllm", {"kv_cache_dtype": "fp8_e4m3"})
    assert any(r.confidence == "upstream" for r in found)
    assert any("S06" in r.claims and r.confidence == "documents" for r in found), "the seed's claim stays visible"


def test_bf16_on_volta_is_flagged():
    v100 = GPU(index=0, name="Tesla V100-SXM2-32GB", compute_capability="7.0")
    found = matching_rules(KB, fp(gpus=(v100,)), "vllm", {"dtype": "bfloat16"})
    assert any(r.confidence == "upstream" and r.severity in ("broken", "degraded") for r in found)


def test_sglang_refuses_volta():
    v100 = GPU(index=0, name="Tesla V100-SXM2-32GB", compute_capability="7.0")
    found = matching_rules(KB, fp(gpus=(v100,), packages={"sglang": "0.4.0"}), "sglang", {})
    assert any(r.severity == "broken" and r.confidence == "upstream" for r in found)


def test_no_rule_matches_a_machine_without_gpu_or_driver_on_gpu_conditions():
    for r in matching_rules(KB, fp()):
        assert not r.when.has_gpu_condition and r.when.driver is None, r.id


def test_ids_are_readable():
    for r in KB.rules:
        assert re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", r.id)
