"""GPU names as users write them: the catalog reads run-together GeForce names, and a fingerprint that names a GPU
without its compute capability is judged with the catalog's (a stated value always wins, an unknown name stays
unknown). Plain pytest through the public functions."""

from __future__ import annotations

import pytest
from packaging.version import Version

from pytest_gpucompat.catalog.gpus import lookup, normalize_name
from pytest_gpucompat.kb import KnowledgeBase, matching_rules, parse_rule
from pytest_gpucompat.kb.match import Facts, clear_facts_cache, facts_of, rule_matches
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint


@pytest.mark.parametrize(("name", "cc"), [
    ("rtx3090", "8.6"), ("RTX4090D", "8.9"), ("GTX1080Ti", "6.1"), ("rtx 3090ti", "8.6"),
    ("Tesla V100 SXM2 16GB", "7.0"), ("NVIDIA GeForce RTX 4090 D", "8.9"),
    ("RTX 5090 32Gb (ASUS ROG Astral OC)", "12.0"),
    ("a10g", "8.6"), ("V100S", "7.0"),
])
def test_names_users_type_find_their_model(name: str, cc: str) -> None:
    model = lookup(name)
    assert model is not None and model.compute_capability == cc


def test_run_together_words_are_split_only_for_geforce_families() -> None:
    assert normalize_name("RTX4090D") == " rtx 4090 d "
    assert normalize_name("a10g") == " a10g "  # not "a 10 g": A10G is its own model
    assert normalize_name("GTX1080Ti") == " gtx 1080 ti "


def _fp(*gpus: GPU) -> Fingerprint:
    return Fingerprint(name="t", gpus=gpus)


def test_a_named_gpu_without_compute_capability_takes_the_catalogs() -> None:
    clear_facts_cache()
    (gpu,) = facts_of(_fp(GPU(index=0, name="Tesla V100 SXM2 16GB"))).gpus
    assert gpu[1:3] == ("volta", Version("7.0"))


def test_a_stated_compute_capability_wins_and_an_unknown_name_stays_unknown() -> None:
    stated = facts_of(_fp(GPU(index=0, name="Tesla V100", compute_capability="7.5"))).gpus[0]
    unknown = facts_of(_fp(GPU(index=0, name="Mystery Accelerator 9000"))).gpus[0]
    assert stated[2] == Version("7.5")
    assert unknown[1:3] == (None, None)


def test_a_stated_architecture_that_disagrees_with_the_name_keeps_the_capability_unknown() -> None:
    (gpu,) = facts_of(_fp(GPU(index=0, name="V100", architecture="turing"))).gpus
    assert gpu[1:3] == ("turing", None)


def test_a_rule_on_compute_capability_matches_a_gpu_given_by_name_in_index_and_oracle() -> None:
    rule = parse_rule({"id": "volta-only", "summary": "s", "severity": "broken", "failure": "crash",
                       "when": {"compute_capability": "==7.0"}, "confidence": "upstream",
                       "sources": [{"kind": "doc", "ref": "r"}]}, "t.yaml")
    kb = KnowledgeBase(rules=(rule,))
    for name, expected in (("rtx3090", False), ("Tesla V100 SXM2 16GB", True), ("V100", True)):
        fp = _fp(GPU(index=0, name=name))
        assert rule_matches(rule, Facts.of(fp), None, {}) is expected
        assert (matching_rules(kb, fp) == [rule]) is expected
