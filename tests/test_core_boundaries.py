"""Both sides of every boundary the pure core decides on, through its public functions: a rule's GPU conditions
(architecture, compute capability, memory), the leak detector's latest-cycles window, the diff's noise band.

Each test names the side it pins; a comparison moved by one (`<=` to `<`, 4 to 3) fails one of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pytest_gpucompat.checks.leaks import leak_verdict
from pytest_gpucompat.checks.memory import MemorySample
from pytest_gpucompat.kb import KnowledgeBase, matching_rules, parse_rule
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint
from pytest_gpucompat.report.diff import diff_reports, parse_threshold
from pytest_gpucompat.report.model import Report

A100 = GPU(index=0, name="NVIDIA A100-SXM4-40GB", architecture="ampere", compute_capability="8.0", memory_mib=40960)
H200 = GPU(index=1, name="NVIDIA H200", architecture="hopper", compute_capability="9.0", memory_mib=143771)
V100 = GPU(index=0, name="Tesla V100-SXM2-32GB", architecture="volta", compute_capability="7.0", memory_mib=32768)
UNNAMED = GPU(index=0, name="NVIDIA A100-SXM4-40GB", compute_capability="8.0", memory_mib=40960)  # no architecture


def matches(when: dict[str, object], *gpus: GPU) -> bool:
    rule = parse_rule({"id": "r1", "summary": "s", "severity": "broken", "failure": "crash",
                       "confidence": "upstream", "sources": [{"kind": "doc", "ref": "x"}], "when": when}, "t.yaml")
    return [r.id for r in matching_rules(KnowledgeBase(rules=(rule,)), Fingerprint(gpus=gpus))] == ["r1"]


# --- a rule's GPU conditions ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("gpus", "expected"), [
    ((A100,), True),
    ((H200,), False),                    # another architecture
    ((V100,), False),
    ((UNNAMED,), False),                 # an architecture the fingerprint does not know does not hold
    ((H200, A100), True),                # any one GPU of the machine
    ((), False),                         # no GPU at all
])
def test_arch_matches_its_architecture_and_no_other(gpus: tuple[GPU, ...], expected: bool) -> None:
    assert matches({"arch": ["ampere"]}, *gpus) is expected


def test_arch_and_name_must_hold_on_the_same_gpu() -> None:
    assert not matches({"arch": ["hopper"], "gpu": ["*A100*"]}, A100, H200)
    assert matches({"arch": ["hopper"], "gpu": ["*H200*"]}, A100, H200)


@pytest.mark.parametrize(("spec", "gpu", "expected"), [
    ("<8.0", V100, True), ("<8.0", A100, False),      # 8.0 itself is outside "<8.0"
    ("<=8.0", A100, True), ("<=8.0", H200, False),
    (">=9.0", H200, True), (">=9.0", A100, False),
    (">8.0", A100, False), (">8.0", H200, True),
])
def test_compute_capability_edges(spec: str, gpu: GPU, expected: bool) -> None:
    assert matches({"compute_capability": spec}, gpu) is expected


@pytest.mark.parametrize(("spec", "expected"), [
    ("<40960", False), ("<=40960", True), (">40960", False), (">=40960", True), ("<40961", True), (">40959", True),
])
def test_gpu_memory_edges(spec: str, expected: bool) -> None:
    assert matches({"gpu_memory_mib": spec}, A100) is expected


# --- the leak detector's window -------------------------------------------------------------------------------------

def samples(values: Sequence[float]) -> list[MemorySample]:
    return [MemorySample(cycle=i, nvml_process_mib=v) for i, v in enumerate(values)]


def test_growth_over_the_latest_four_cycles_is_a_leak() -> None:
    """Five cycles after warm-up: the whole series shrank, the latest four grew steadily (2 MiB per cycle)."""
    verdict = leak_verdict(samples([0.0, 30.0, 10.0, 12.0, 14.0, 16.0]))
    assert verdict.leaked and verdict.latest_only
    assert verdict.slope_mib_per_cycle == pytest.approx(2.0)


def test_growth_over_the_latest_three_cycles_alone_is_not() -> None:
    """The docstring's "latest four or more": three steady cycles after a drop are no trend yet."""
    verdict = leak_verdict(samples([0.0, 20.0, 20.0, 10.0, 12.0, 14.0]))
    assert not verdict.leaked and verdict.recent_slope is not None and verdict.recent_slope < 0


def test_three_samples_are_judged_and_two_are_not() -> None:
    assert leak_verdict(samples([0.0, 10.0, 12.0, 14.0])).leaked
    two = leak_verdict(samples([0.0, 10.0, 12.0]))
    assert not two.leaked and "not enough samples after warm-up (2; need 3)" in two.message


@pytest.mark.parametrize(("per_cycle", "leaked"), [(0.5, False), (0.5 + 1 / 64, True)])
def test_the_slope_threshold_is_exclusive(per_cycle: float, leaked: bool) -> None:
    """nvml_process_mib's threshold is 0.5 MiB per cycle: exactly that is noise, anything above it grows."""
    verdict = leak_verdict(samples([0.0] + [100.0 + i * per_cycle for i in range(6)]))
    assert verdict.leaked is leaked


# --- the diff's noise band ------------------------------------------------------------------------------------------

NODE = "suites/test_smoke.py::test_generates_requested_tokens[tiny-qwen2-hf-dtype=float32]"


def report(metrics: dict[str, float]) -> Report:
    cell = {"nodeid": NODE, "outcome": "passed", "runner": "h200", "metrics": metrics}
    return Report.from_run({"schema": 1, "name": "h200"}, [cell], exitstatus=0)


@pytest.mark.parametrize(("after", "kind"), [
    (750.0, "within_noise"),       # a drop of exactly the spread (25 %): inside the band, as documented
    (749.0, "regressions"),        # one token/s more: outside it
    (901.0, "none"),               # within the threshold itself: nothing to judge
])
def test_the_noise_band_includes_its_edge(after: float, kind: str) -> None:
    result = diff_reports(report({"tokens_per_s": 1000.0, "tokens_per_s_spread": 0.25}),
                          report({"tokens_per_s": after}), [parse_threshold("tokens_per_s:-10%")])
    found = {name for name in ("regressions", "within_noise") if getattr(result, name)}
    assert found == ({kind} - {"none"})
    assert result.regressed is (kind == "regressions")


def test_the_threshold_edge_is_not_a_regression() -> None:
    """`-10%` fails on a drop of more than 10 %: exactly 10 % passes, 10.1 % fails (no spread recorded)."""
    threshold = [parse_threshold("tokens_per_s:-10%")]
    assert not diff_reports(report({"tokens_per_s": 1000.0}), report({"tokens_per_s": 900.0}), threshold).regressed
    assert diff_reports(report({"tokens_per_s": 1000.0}), report({"tokens_per_s": 899.0}), threshold).regressed
