"""Rules scoped to the install and the model their evidence had: the shipped fp8_e5m2 rule and the incomplete-install
rules, through the same matching the plugin and `gpucompat check` use."""

from __future__ import annotations

import pytest

from pytest_gpucompat.catalog.registry import tracked_packages
from pytest_gpucompat.kb import load_kb, matching_rules
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint
from pytest_gpucompat.machine.installs import EngineInstall

H200 = GPU(index=0, name="NVIDIA H200", architecture="hopper", compute_capability="9.0", memory_mib=143771)
A100 = GPU(index=0, name="NVIDIA A100-SXM4-80GB", architecture="ampere", compute_capability="8.0", memory_mib=81920)
E5M2 = "vllm-0.26-fp8-e5m2-kv-fails-at-start-on-hopper"
TRITON = "vllm-fp8-e5m2-kv-triton-asserts"
FI_MISMATCH = "vllm-0.26-fp8-e5m2-kv-flashinfer-query-dtype-mismatch"
NO_FLASHINFER = "vllm-without-flashinfer-fails-at-start"


def ids(fp: Fingerprint, params: dict, engine: str | None = "vllm") -> set[str]:
    return {r.id for r in matching_rules(load_kb(), fp, engine, params)}


@pytest.mark.parametrize("packages, params, fires", [
    ({"vllm": "0.26.0"}, {"kv_cache_dtype": "fp8_e5m2"}, True),  # the evidence: no FlashInfer, no backend chosen
    ({"vllm": "0.26.0"}, {"kv_cache_dtype": "fp8_e5m2", "head_size": 64}, True),
    ({"vllm": "0.26.0", "flashinfer-python": "0.6.14"}, {"kv_cache_dtype": "fp8_e5m2"}, False),  # a default install
    ({"vllm": "0.26.0"}, {"kv_cache_dtype": "fp8_e4m3"}, False),
    ({"vllm": "0.26.0"}, {"kv_cache_dtype": "fp8_e5m2", "attention_backend": "FLASHINFER"}, False),
    ({"vllm": "0.21.0"}, {"kv_cache_dtype": "fp8_e5m2"}, False),
    ({"vllm": "0.35.0"}, {"kv_cache_dtype": "fp8_e5m2"}, False),
    ({"vllm": "0.26.0"}, {"kv_cache_dtype": "fp8_e5m2", "head_size": 256}, False),  # a shape no evidence had
])
def test_the_e5m2_rule_fires_only_under_the_conditions_of_its_evidence(packages, params, fires) -> None:
    assert (E5M2 in ids(read_from_a_machine(packages), params)) is fires


def read_from_a_machine(packages: dict[str, str]) -> Fingerprint:
    """A fingerprint as `gpucompat env` writes it: every tracked package listed, the engine's install judged."""
    return Fingerprint(gpus=(H200,), packages=packages, installs={"vllm": EngineInstall(packages["vllm"], False)})


def test_a_hand_written_fingerprint_that_does_not_list_flashinfer_does_not_say_it_is_absent() -> None:
    fp = Fingerprint(gpus=(H200,), packages={"vllm": "0.26.0"})
    found = ids(fp, {"kv_cache_dtype": "fp8_e5m2"})
    assert E5M2 not in found and NO_FLASHINFER not in found
    assert NO_FLASHINFER in ids(read_from_a_machine({"vllm": "0.26.0"}), {})
    assert NO_FLASHINFER not in ids(read_from_a_machine({"vllm": "0.26.0", "flashinfer-python": "0.6.14"}), {})


def test_with_flashinfer_e5m2_fails_another_way_on_the_release_it_was_seen_on() -> None:
    with_fi = {"vllm": "0.26.0", "flashinfer-python": "0.6.14"}
    found = ids(read_from_a_machine(with_fi), {"kv_cache_dtype": "fp8_e5m2", "head_size": 128})
    assert FI_MISMATCH in found and E5M2 not in found
    assert FI_MISMATCH not in ids(read_from_a_machine({**with_fi, "vllm": "0.27.0"}), {"kv_cache_dtype": "fp8_e5m2"})
    # seen at head sizes 64 and 128 (h200-...-e5m2-flashinfer-predicted.json): a head size no run had is not claimed
    assert FI_MISMATCH in ids(read_from_a_machine(with_fi), {"kv_cache_dtype": "fp8_e5m2", "head_size": 64})
    assert FI_MISMATCH not in ids(read_from_a_machine(with_fi), {"kv_cache_dtype": "fp8_e5m2", "head_size": 256})


def test_choosing_triton_fails_with_or_without_flashinfer() -> None:
    fp = read_from_a_machine({"vllm": "0.26.0", "flashinfer-python": "0.6.14"})
    found = ids(fp, {"kv_cache_dtype": "fp8_e5m2", "attention_backend": "TRITON_ATTN"})
    assert TRITON in found and E5M2 not in found
    a100 = Fingerprint(gpus=(A100,), packages={"vllm": "0.26.0"}, installs={"vllm": EngineInstall("0.26.0", False)})
    assert E5M2 not in ids(a100, {"kv_cache_dtype": "fp8_e5m2"})


@pytest.mark.parametrize("engine", list(tracked_packages()))  # every engine whose install is checked
def test_an_engine_installed_without_its_requirements_is_a_finding(engine: str) -> None:
    rule = f"{engine}-installed-without-its-requirements"
    missing = EngineInstall("1.0", False, ("flashinfer-python==0.6.14 (not installed)",))
    incomplete = Fingerprint(gpus=(H200,), packages={engine: "1.0"}, installs={engine: missing})
    complete = Fingerprint(gpus=(H200,), packages={engine: "1.0"}, installs={engine: EngineInstall("1.0", True)})
    unknown = Fingerprint(gpus=(H200,), packages={engine: "1.0"})
    assert rule in ids(incomplete, {}, engine) and rule in ids(incomplete, {}, None)  # a cell, and `check`
    assert rule not in ids(complete, {}, engine) and rule not in ids(unknown, {}, engine)
    other = next(name for name in tracked_packages() if name != engine)
    assert rule not in ids(Fingerprint(gpus=(H200,), packages={engine: "1.0", other: "1.0"},
                                       installs={other: missing, engine: EngineInstall("1.0", True)}), {}, None)
