"""Both sides of every boundary the pure core decides on, through its public functions: a rule's GPU conditions
(architecture, compute capability, memory), the leak detector's latest-cycles window, the diff's noise band.

Each test names the side it pins; a comparison moved by one (`<=` to `<`, 4 to 3) fails one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import pytest

from pytest_gpucompat.checks.leaks import CyclePolicy, leak_verdict, memory_verdict
from pytest_gpucompat.checks.memory import MemorySample
from pytest_gpucompat.common.versions import is_version, norm_value
from pytest_gpucompat.kb import (
    WEIGHTS_PARAM,
    KnowledgeBase,
    Rule,
    describe_runner,
    evaluate_cell,
    matching_rules,
    parse_rule,
)
from pytest_gpucompat.kb.match import Facts, contradiction
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint
from pytest_gpucompat.machine.installs import EngineInstall
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


# --- the memory verdict's words and the cycle policy ----------------------------------------------------------------

def series(**columns: Sequence[float | None]) -> list[MemorySample]:
    n = len(next(iter(columns.values())))
    return [MemorySample(cycle=i, **{k: v[i] for k, v in columns.items()}) for i in range(n)]


def test_the_verdict_says_which_signal_fired_and_how() -> None:
    leaking = memory_verdict(series(host_rss_mib=[500, 900, 900, 901, 902, 903, 904],
                                    nvml_process_mib=[0, 700, 700, 700, 700, 700, 700]))
    assert leaking.message("vllm") == (
        "vllm leaks: host memory of the measuring process: leak: host_rss_mib: slope +0.86 MiB/cycle over 6 cycles "
        "(threshold 0.25), 5/5 cycles did not shrink, +4.0 MiB in total")
    clean = memory_verdict(series(host_rss_mib=[500, 900, 900, 900, 900, 900]))
    assert clean.message("vllm") == (
        "vllm: no leak (no leak: host_rss_mib: slope +0.00 MiB/cycle over 5 cycles (threshold 0.25), 4/4 cycles did "
        "not shrink, +0.0 MiB in total)")
    assert memory_verdict(series(host_rss_mib=[None] * 5)).message("hf") == "hf: no leak (no signal could be measured)"


FOREIGN = ({"pid": 4321, "mib": 900.0, "owner": "other", "command": "python neighbour.py"},
           {"pid": 77, "mib": 10.4, "owner": "before", "command": "Xorg"})


def with_others(rows: list[MemorySample], others: tuple[dict[str, object], ...]) -> list[MemorySample]:
    return [*rows[:-1], MemorySample(**{**rows[-1].as_dict(), "others": others})]


@pytest.mark.parametrize(("columns", "note"), [
    ({"nvml_device_used_mib": [600, 1400, 1500, 1600, 1700, 1800], "nvml_others_mib": [0, 100, 130, 160, 190, 220]},
     "not the engine's: device +100.0 MiB/cycle; held by pid 4321 (python neighbour.py) 900 MiB, other, "
     "pid 77 (Xorg) 10 MiB, before"),      # the larger of the two cross-checks
    ({"nvml_others_mib": [0, 100, 130, 160, 190, 220]},
     "not the engine's: device +30.0 MiB/cycle; held by pid 4321 (python neighbour.py) 900 MiB, other, "
     "pid 77 (Xorg) 10 MiB, before"),      # the device figure missing: the others' own
])
def test_memory_of_other_processes_is_named_never_blamed(columns: dict[str, list[float]], note: str) -> None:
    rows = with_others(series(nvml_process_mib=[0, 712, 712, 712, 712, 712], **columns), FOREIGN)
    verdict = memory_verdict(rows)
    assert not verdict.leaked and verdict.foreign_note() == note
    assert memory_verdict(series(nvml_process_mib=[0, 712, 712, 712, 712, 712], **columns)).foreign_note() is None
    no_cross_check = with_others(series(nvml_process_mib=[0, 712, 712, 712, 712, 712]), FOREIGN)
    assert memory_verdict(no_cross_check).foreign_note() is None


def test_samples_without_a_signal_are_judged_on_the_others() -> None:
    """Samples are MemorySample-like: an object without a signal's attribute has not measured it."""
    rows = [SimpleNamespace(cycle=i, host_rss_mib=v) for i, v in enumerate([500, 900, 900, 901, 902, 903, 904])]
    verdict = memory_verdict(rows)
    assert [v.metric for v in verdict.judged] == ["host_rss_mib"] and verdict.leaked


def test_the_policy_judges_with_the_warm_up_it_is_given() -> None:
    rows = series(host_rss_mib=[0, 10, 20, 30, 30, 30, 31, 32, 33])
    policy = CyclePolicy()
    assert not policy.more(rows, cycles_done=8, elapsed_s=1.0)  # a leak over every cycle after one warm-up
    assert policy.more(rows, cycles_done=8, elapsed_s=1.0, warmup=2)  # after two: the latest cycles alone


@pytest.mark.parametrize(("env", "policy"), [
    ({"GPUCOMPAT_MEMORY_CYCLES": "3"}, CyclePolicy(3, 12, 300.0)),              # the smallest minimum
    ({"GPUCOMPAT_MEMORY_CYCLES": ""}, CyclePolicy()),                           # empty: unset
    ({"GPUCOMPAT_MEMORY_BUDGET_S": "0"}, CyclePolicy(5, 12, 0.0)),              # no budget: the minimum only
    ({"GPUCOMPAT_MEMORY_BUDGET_S": "0.5"}, CyclePolicy(5, 12, 0.5)),
    ({"GPUCOMPAT_MEMORY_CYCLES": "20", "GPUCOMPAT_MEMORY_BUDGET_S": "60"}, CyclePolicy(20, 20, 60.0)),
    ({"GPUCOMPAT_MEMORY_CYCLES": "7", "GPUCOMPAT_MEMORY_MAX_CYCLES": "7"}, CyclePolicy(7, 7, 300.0)),
])
def test_policy_bounds_from_the_environment(env: dict[str, str], policy: CyclePolicy) -> None:
    assert CyclePolicy.from_env(env) == policy


@pytest.mark.parametrize(("env", "message"), [
    ({"GPUCOMPAT_MEMORY_CYCLES": "2"}, "GPUCOMPAT_MEMORY_CYCLES='2': must be an integer >= 3"),
    ({"GPUCOMPAT_MEMORY_MAX_CYCLES": "2"}, "GPUCOMPAT_MEMORY_MAX_CYCLES='2': must be an integer >= 3"),
    ({"GPUCOMPAT_MEMORY_BUDGET_S": "-1"}, "GPUCOMPAT_MEMORY_BUDGET_S='-1': must be a finite number >= 0"),
    ({"GPUCOMPAT_MEMORY_BUDGET_S": "inf"}, "GPUCOMPAT_MEMORY_BUDGET_S='inf': must be a finite number >= 0"),
    ({"GPUCOMPAT_MEMORY_CYCLES": "5.0"}, "GPUCOMPAT_MEMORY_CYCLES='5.0': not a number"),
])
def test_policy_refuses_bad_bounds_with_one_line(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        CyclePolicy.from_env(env)
    assert str(refused.value) == message


def test_policy_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCOMPAT_MEMORY_CYCLES", "7")
    assert CyclePolicy.from_env() == CyclePolicy(7, 12, 300.0)


# --- versions and loose values --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("580.65.06", True), ("2.11.0+cu130", True), ("1.4.0rc1", True), ("N/A", False), ("", False), (None, False),
    (["1.0"], False),  # not text at all: no version, no crash
])
def test_is_version(text: object, expected: bool) -> None:
    assert is_version(text) is expected


@pytest.mark.parametrize(("value", "expected"), [
    (True, "true"), (False, "false"), ("False", "false"), (" FP8 ", "fp8"), (16.0, "16"), (16.5, "16.5"),
    ("16", "16"), (0, "0"), (None, None),
])
def test_loose_values(value: object, expected: object) -> None:
    assert norm_value(value) == expected


def test_a_false_setting_equals_its_spelling_in_a_rule() -> None:
    assert norm_value(False) == norm_value("false") == norm_value("FALSE") != norm_value(True)


# --- a rule's needs, what a finding says about the runner, the fleet axes -------------------------------------------

def rule_of(when: dict[str, object], engine: str | None = None) -> Rule:
    raw: dict[str, object] = {"id": "r1", "summary": "s", "severity": "broken", "failure": "crash",
                              "confidence": "upstream", "sources": [{"kind": "doc", "ref": "x"}], "when": when}
    if engine:
        raw["engine"] = engine
    return parse_rule(raw, "t.yaml")


def needs_match(when: dict[str, object], gpus: tuple[GPU, ...], params: dict[str, object]) -> bool:
    kb = KnowledgeBase(rules=(rule_of(when),))
    return [r.id for r in matching_rules(kb, Fingerprint(gpus=gpus), None, params)] == ["r1"]


@pytest.mark.parametrize(("params", "gpus", "expected"), [
    ({"tensor_parallel_size": 2}, (A100, A100), False),   # exactly enough GPUs
    ({"tensor_parallel_size": 2}, (A100,), True),         # one short
    ({"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, (A100, A100, A100), True),  # the product
    ({"tensor_parallel_size": "2"}, (A100,), True),       # a count written as text
    ({"tensor_parallel_size": 0, "pipeline_parallel_size": 2}, (A100,), False),  # not a count: not judged
    ({"tensor_parallel_size": True, "pipeline_parallel_size": 2}, (A100,), False),
    ({"tensor_parallel_size": "two", "pipeline_parallel_size": 2}, (A100,), False),
    ({"tensor_parallel_size": None, "pipeline_parallel_size": 2}, (A100,), True),  # absent or null counts as 1
    ({"tensor_parallel_size": 2}, (), False),             # no GPU listed: how many is not known, not judged
    ({}, (), False),
])
def test_needs_gpus_edges(params: dict[str, object], gpus: tuple[GPU, ...], expected: bool) -> None:
    assert needs_match({"needs": {"gpus": ["tensor_parallel_size", "pipeline_parallel_size"]}}, gpus,
                       params) is expected


@pytest.mark.parametrize(("params", "expected"), [
    ({WEIGHTS_PARAM: 40960}, False),                            # exactly the GPU's memory
    ({WEIGHTS_PARAM: 40961}, True),
    ({WEIGHTS_PARAM: 81922, "tensor_parallel_size": 2}, True),  # split over the GPUs
    ({WEIGHTS_PARAM: 81920, "tensor_parallel_size": 2}, False),
    ({WEIGHTS_PARAM: 0}, False), ({WEIGHTS_PARAM: True}, False), ({WEIGHTS_PARAM: "90000"}, False), ({}, False),
    ({WEIGHTS_PARAM: 90000, "tensor_parallel_size": 0}, False),
])
def test_needs_memory_edges(params: dict[str, object], expected: bool) -> None:
    assert needs_match({"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}, (A100, H200), params) is expected


def test_needs_memory_of_a_gpu_of_unknown_size_is_not_judged() -> None:
    assert not needs_match({"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}, (UNSIZED,), {WEIGHTS_PARAM: 1e9})


UNSIZED = GPU(index=0, name="NVIDIA A100-SXM4-40GB", architecture="ampere", compute_capability="8.0")
TP_PP = ["tensor_parallel_size", "pipeline_parallel_size"]


@pytest.mark.parametrize(("when", "fp", "params", "said"), [
    ({"needs": {"gpus": TP_PP}}, Fingerprint(gpus=(A100,)), {"tensor_parallel_size": 2, "pipeline_parallel_size": 2},
     "needs 4 GPUs (tensor_parallel_size=2 × pipeline_parallel_size=2), 1 visible"),
    ({"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}, Fingerprint(gpus=(H200, A100)),
     {"tensor_parallel_size": 2, WEIGHTS_PARAM: 100000},
     "needs 50,000 MiB of weights per GPU (split by tensor_parallel_size=2), the smallest GPU has 40,960 MiB"),
    ({"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}, Fingerprint(), {WEIGHTS_PARAM: 100000},
     "needs 100,000 MiB of weights per GPU"),
    ({"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}, Fingerprint(gpus=(A100,)), {}, ""),
    ({"gpu_count": ">=2"}, Fingerprint(gpus=(A100,)), {}, "this runner: 1 GPU visible"),
    ({"gpu_count": ">=2"}, Fingerprint(gpus=(A100, A100)), {}, "this runner: 2 GPUs visible"),
    ({"gpu_count": ">=2"}, Fingerprint(), {}, "this runner: 0 GPUs visible"),
    ({"gpu": ["*A100*"], "gpu_memory_mib": ">1"}, Fingerprint(gpus=(A100, A100, H200)), {},
     "this runner: NVIDIA A100-SXM4-40GB (compute capability 8.0, 40960 MiB), "
     "NVIDIA H200 (compute capability 9.0, 143771 MiB)"),
    ({"arch": ["ampere"]}, Fingerprint(gpus=(A100, GPU(index=2, name="X"))), {},
     "this runner: NVIDIA A100-SXM4-40GB (compute capability 8.0), X (compute capability ?)"),
    ({"arch": ["ampere"]}, Fingerprint(), {}, "this runner: no GPU"),
    ({"driver": "<580", "cuda_driver": ">=12", "cuda_runtime": "12.8", "interconnect": "pcie"},
     Fingerprint(driver="550.54.15"), {},
     "this runner: driver 550.54.15; CUDA driver unknown; CUDA runtime unknown; interconnect unknown"),
    ({"driver": "<580", "cuda_driver": ">=12", "cuda_runtime": "12.8", "interconnect": "pcie"},
     Fingerprint(cuda_driver="12.4", cuda_runtime="12.8", interconnect="nvlink"), {},
     "this runner: a driver for CUDA 12.4 (550.54.14 to below 555.42.02); CUDA driver 12.4; CUDA runtime 12.8; "
     "interconnect nvlink"),
    ({"packages": {"vllm": ">=0.20", "flashinfer_python": "absent"}},
     Fingerprint(packages={"vllm": "0.26.0", "TensorRT_LLM": "1.0"}), {},
     "this runner: vllm 0.26.0; flashinfer-python not installed"),
    ({"install": "incomplete"},
     Fingerprint(installs={"vllm": EngineInstall("0.26.0", False, ("flashinfer-python==0.6.14 (not installed)", "x"))}),
     {}, "this runner: vllm installed without flashinfer-python==0.6.14 (not installed), x"),
    ({"install": "complete"}, Fingerprint(installs={"vllm": EngineInstall("0.26.0", True)}), {},
     "this runner: vllm installed with every requirement it declares"),
    ({"install": "complete"}, Fingerprint(), {}, ""),
    ({"params": {"dtype": ["float16"]}}, Fingerprint(gpus=(A100,)), {"dtype": "float16"}, ""),
    ({"needs": {"gpus": ["tensor_parallel_size"]}, "arch": ["ampere"]}, Fingerprint(gpus=(A100,)),
     {"tensor_parallel_size": 2},
     "needs 2 GPUs (tensor_parallel_size=2), 1 visible; this runner: NVIDIA A100-SXM4-40GB (compute capability 8.0)"),
])
def test_what_a_finding_says_about_the_runner(when: dict[str, object], fp: Fingerprint, params: dict[str, object],
                                              said: str) -> None:
    rule = rule_of(when, "vllm" if "install" in when else None)
    assert describe_runner(rule, fp, params) == said


FLEET_FP = Fingerprint(gpus=(A100, H200), driver="550.54.15", cuda_driver="12.4", packages={"vllm": "0.26.0"})


@pytest.mark.parametrize(("axes", "not_covered"), [
    ({"gpu": "*h200*"}, None),
    ({"gpu": "*B200*"}, "gpu *B200* (this runner: NVIDIA A100-SXM4-40GB, NVIDIA H200)"),
    ({"arch": "Hopper"}, None),
    ({"arch": "blackwell"}, "arch blackwell (this runner: ampere, hopper)"),
    ({"compute_capability": ">=9.0"}, None),
    ({"compute_capability": ">=10.0"}, "compute capability >=10.0 (this runner: 8.0, 9.0)"),
    ({"driver": ">=550.54.15"}, None),
    ({"driver": ">550.54.15"}, "driver >550.54.15 (this runner: 550.54.15)"),
    ({"cuda_runtime": ">=12"}, "cuda_runtime >=12 (this runner: none)"),
    ({"vllm": "==0.26.*"}, None),
    ({"vllm": "<0.26"}, "vllm <0.26 (this runner: 0.26.0)"),
    ({"sglang": ">=0.5"}, "sglang >=0.5 (this runner: not installed)"),
    ({"TensorRT_LLM": ">=1"}, "tensorrt-llm >=1 (this runner: not installed)"),
    ({"vllm": ">=0.26", "gpu": "*B200*"}, "gpu *B200* (this runner: NVIDIA A100-SXM4-40GB, NVIDIA H200)"),
])
def test_fleet_axes_say_what_this_runner_has(axes: dict[str, str], not_covered: str | None) -> None:
    verdict = evaluate_cell(KnowledgeBase(rules=()), FLEET_FP, "vllm", {}, axes=axes)
    assert verdict.not_covered == not_covered
    assert (verdict.decision is None) is (not_covered is not None)


def test_fleet_axes_on_a_runner_without_gpus() -> None:
    kb = KnowledgeBase(rules=())
    assert evaluate_cell(kb, Fingerprint(), "vllm", {}, axes={"gpu": "*"}).not_covered == "gpu * (this runner: no GPU)"
    assert evaluate_cell(kb, Fingerprint(), "vllm", {}, axes={"compute_capability": ">=1"}).not_covered == (
        "compute capability >=1 (this runner: none)")


# --- the trend itself: most cycles grow, the growth spread over them, above the threshold ---------------------------

def host(values: Sequence[float]) -> list[MemorySample]:
    return [MemorySample(cycle=i, host_rss_mib=v) for i, v in enumerate(values)]


@pytest.mark.parametrize(("values", "leaked", "detail"), [
    # 4 of 7 cycles grew (0.57 < 0.6): a zigzag, not a trend
    ([0, 100, 103, 102, 105, 104, 107, 106, 109], False,
     "no steady growth (jumps, not a trend): host_rss_mib: slope +1.10 MiB/cycle over 8 cycles (threshold 0.25), "
     "4/7 cycles did not shrink, +9.0 MiB in total"),
    # exactly 3 of 5 (0.6): enough
    ([0, 100, 103, 106, 105, 104, 107], True,
     "leak: host_rss_mib: slope +1.06 MiB/cycle over 6 cycles (threshold 0.25), 3/5 cycles did not shrink, "
     "+7.0 MiB in total"),
    # a cycle that shrank by exactly the threshold did not shrink
    ([0, 100, 101, 102, 101.75, 101.5, 102.5], True,
     "leak: host_rss_mib: slope +0.39 MiB/cycle over 6 cycles (threshold 0.25), 5/5 cycles did not shrink, "
     "+2.5 MiB in total"),
    # less than 1 MiB in all, but 0.3 MiB every cycle
    ([0, 100, 100.3, 100.6, 100.9], True,
     "leak: host_rss_mib: slope +0.30 MiB/cycle over 4 cycles (threshold 0.25), 3/3 cycles did not shrink, "
     "+0.9 MiB in total"),
])
def test_a_trend_is_most_cycles_growing(values: list[float], leaked: bool, detail: str) -> None:
    verdict = leak_verdict(host(values), "host_rss_mib")
    assert verdict.leaked is leaked and verdict.message == detail


def test_samples_of_one_cycle_have_no_slope() -> None:
    verdict = leak_verdict([MemorySample(cycle=3, host_rss_mib=v) for v in (0, 10, 20, 30)], "host_rss_mib")
    assert not verdict.leaked and verdict.slope_mib_per_cycle == 0.0


def test_a_threshold_of_the_callers_own() -> None:
    rows = host([0, 10, 12, 14, 16, 18])
    assert leak_verdict(rows, "host_rss_mib").leaked
    assert not leak_verdict(rows, "host_rss_mib", threshold_mib_per_cycle=5).leaked


def test_an_unknown_metric_is_named_with_the_known_ones() -> None:
    with pytest.raises(ValueError) as refused:
        leak_verdict(host([1, 2, 3]), "gpu_mib")
    assert str(refused.value) == (
        "unknown memory metric 'gpu_mib'; known: host_rss_mib, torch_allocated_mib, torch_reserved_mib, "
        "nvml_process_mib, nvml_device_used_mib, nvml_others_mib, started_processes, started_rss_mib")


def test_a_sample_without_the_metric_is_not_usable() -> None:
    rows = [SimpleNamespace(cycle=i, host_rss_mib=v) for i, v in enumerate([0, 10, 12, 14])]
    verdict = leak_verdict(rows, "torch_allocated_mib")
    assert not verdict.leaked and verdict.cycles == 0


def test_the_warm_up_reaches_every_signal_and_cross_check() -> None:
    rows = [MemorySample(cycle=i, host_rss_mib=v, nvml_device_used_mib=v)
            for i, v in enumerate([0, 30, 10, 12, 14, 16])]
    one, two = memory_verdict(rows), memory_verdict(rows, warmup=2)
    assert [v.latest_only for v in one.judged + one.cross_checks] == [True, True]  # 30 -> 10 is in the window
    assert [v.latest_only for v in two.judged + two.cross_checks] == [False, False]  # after it: every cycle grew


def test_no_samples_at_all() -> None:
    verdict = memory_verdict([])
    assert not verdict.leaked and verdict.message("hf") == "hf: no leak (no signal could be measured)"
    assert verdict.foreign_note() is None


@pytest.mark.parametrize(("values", "message"), [
    # the slope exactly at the threshold over every cycle: no leak, and no jump either
    ([0, 1, 2, 3], "no leak: host_rss_mib: slope +1.00 MiB/cycle over 4 cycles (threshold 1), 3/3 cycles did not "
                   "shrink, +3.0 MiB in total"),
    # exactly at the threshold over the latest five cycles, below it over all nine
    ([0, 0, 0, 0, 0, 1, 2, 3, 4], "no leak: host_rss_mib: slope +0.50 MiB/cycle over 9 cycles (threshold 1), 8/8 "
                                  "cycles did not shrink, +4.0 MiB in total"),
])
def test_a_slope_at_the_threshold_is_no_growth(values: list[float], message: str) -> None:
    verdict = leak_verdict(host(values), "host_rss_mib", warmup=0, threshold_mib_per_cycle=1.0)
    assert not verdict.leaked and verdict.message.startswith(message)


def test_too_few_samples_say_which_signal_and_how_many() -> None:
    verdict = leak_verdict(host([0, 10, 20]), "host_rss_mib")
    assert (verdict.metric, verdict.cycles, verdict.leaked, verdict.slope_mib_per_cycle) == ("host_rss_mib", 2, False,
                                                                                             None)
    assert verdict.message == "host_rss_mib: not enough samples after warm-up (2; need 3) to judge a trend"


def test_every_signal_is_named_in_the_verdict() -> None:
    both = memory_verdict(series(host_rss_mib=[0, 10, 20, 30, 40], nvml_process_mib=[0, 5, 10, 15, 20]))
    assert both.message("hf") == (
        "hf leaks: GPU memory of the engine's processes, helpers left running included: leak: nvml_process_mib: "
        "slope +5.00 MiB/cycle over 4 cycles (threshold 0.5), 3/3 cycles did not shrink, +15.0 MiB in total; "
        "host memory of the measuring process: leak: host_rss_mib: slope +10.00 MiB/cycle over 4 cycles "
        "(threshold 0.25), 3/3 cycles did not shrink, +30.0 MiB in total")
    neither = memory_verdict(series(host_rss_mib=[7, 7, 7, 7, 7], nvml_process_mib=[3, 3, 3, 3, 3]))
    text = neither.message("hf")
    assert text.startswith("hf: no leak (no leak: ") and text.count("; no leak: ") == 1


def test_flat_device_memory_beside_other_processes_is_said_as_flat() -> None:
    rows = with_others(series(nvml_process_mib=[0, 712, 712, 712, 712, 712],
                              nvml_device_used_mib=[900, 900, 900, 900, 900, 900]), FOREIGN[:1])
    assert memory_verdict(rows).foreign_note() == (
        "not the engine's: device +0.0 MiB/cycle; held by pid 4321 (python neighbour.py) 900 MiB, other")


# --- a rule's install condition, what contradicts a rule, the rest of what a runner is told ------------------------

@pytest.mark.parametrize(("complete", "wanted", "holds"), [
    (True, "complete", True), (False, "complete", False), (None, "complete", False),
    (True, "incomplete", False), (False, "incomplete", True), (None, "incomplete", False),
])
def test_install_holds_on_the_side_it_names(complete: bool | None, wanted: str, holds: bool) -> None:
    kb = KnowledgeBase(rules=(rule_of({"install": wanted}, "vllm"),))
    fp = Fingerprint(installs={"vllm": EngineInstall("0.26.0", complete)})
    assert [r.id for r in matching_rules(kb, fp, "vllm", {})] == (["r1"] if holds else [])
    # an engine whose install is not recorded at all holds neither side
    assert matching_rules(kb, Fingerprint(installs={"sglang": EngineInstall("0.5", True)}), "vllm", {}) == []


def contradicted(when: dict[str, object], fp: Fingerprint, params: dict[str, object]) -> str | None:
    return contradiction(rule_of(when), Facts.of(fp), None, params)


@pytest.mark.parametrize(("when", "params", "field"), [
    ({"model": ["*llama*"]}, {"model": "Qwen/Qwen2-0.5B"}, "when.model"),
    ({"model": ["*llama*"]}, {"model": "meta-llama/Llama-3-8B"}, None),
    # the model matches; another parameter is what contradicts
    ({"model": ["*llama*"], "params": {"dtype": ["float16"]}}, {"model": "meta-llama/x", "dtype": "bfloat16"},
     "when.params.dtype"),
    # the parameter holds; the model, tested after it, is what contradicts
    ({"model": ["*llama*"], "params": {"dtype": ["float16"]}}, {"model": "Qwen/x", "dtype": "float16"}, "when.model"),
    ({"params": {"dtype": ["float16"]}}, {"dtype": "bfloat16"}, "when.params.dtype"),
])
def test_what_contradicts_a_parameter_or_the_model(when: dict[str, object], params: dict[str, object],
                                                    field: str | None) -> None:
    assert contradicted(when, Fingerprint(gpus=(A100,)), params) == field


@pytest.mark.parametrize(("fp", "params", "field"), [
    (Fingerprint(gpus=(A100,)), {WEIGHTS_PARAM: 40960}, "when.needs.gpu_memory_mib"),  # fits exactly: not short
    (Fingerprint(gpus=(A100,)), {WEIGHTS_PARAM: 40961}, None),                         # short: the rule may hold
    (Fingerprint(gpus=(A100,)), {WEIGHTS_PARAM: 81920, "tensor_parallel_size": 2}, "when.needs.gpu_memory_mib"),
    (Fingerprint(gpus=(A100,)), {WEIGHTS_PARAM: 0}, None),       # weights not known: not contradicted
    (Fingerprint(gpus=(A100,)), {}, None),
    (Fingerprint(gpus=(UNSIZED,)), {WEIGHTS_PARAM: 1}, None),    # a GPU of unknown size: not contradicted
    (Fingerprint(), {WEIGHTS_PARAM: 1}, None),
])
def test_what_contradicts_a_memory_need(fp: Fingerprint, params: dict[str, object], field: str | None) -> None:
    assert contradicted({"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}, fp, params) == field


@pytest.mark.parametrize(("params", "said"), [
    ({WEIGHTS_PARAM: 1}, "needs 1 MiB of weights per GPU"),
    ({WEIGHTS_PARAM: 0.5}, "needs 0 MiB of weights per GPU"),
    ({WEIGHTS_PARAM: 0}, ""),
    ({WEIGHTS_PARAM: -5}, ""),
    ({WEIGHTS_PARAM: 4000, "tensor_parallel_size": 2, "pipeline_parallel_size": 2},
     "needs 1,000 MiB of weights per GPU (split by tensor_parallel_size=2 × pipeline_parallel_size=2)"),
])
def test_the_weights_a_runner_is_told_it_needs(params: dict[str, object], said: str) -> None:
    assert describe_runner(rule_of({"needs": {"gpu_memory_mib": TP_PP}}), Fingerprint(), params) == said


@pytest.mark.parametrize(("state", "said"), [
    ({"complete": False, "missing": ["flashinfer-python==0.6.14 (not installed)"]},
     "this runner: vllm installed without flashinfer-python==0.6.14 (not installed)"),
    ({"complete": True}, "this runner: vllm installed with every requirement it declares"),
])
def test_an_install_written_by_hand_is_described_too(state: dict[str, object], said: str) -> None:
    fp = Fingerprint(installs={"vllm": state})  # type: ignore[dict-item]  # a hand-written fingerprint's mapping
    assert describe_runner(rule_of({"install": "incomplete"}, "vllm"), fp, {}) == said


NO_ARCH = GPU(index=0, name="NVIDIA A100-SXM4-40GB", compute_capability="8.0")
NO_MEMORY = GPU(index=0, name="NVIDIA H200", architecture="hopper", compute_capability="9.0")


@pytest.mark.parametrize(("axes", "fp", "not_covered"), [
    # every axis is checked, whichever kind comes first
    ({"gpu": "*H200*", "driver": ">=600"}, FLEET_FP, "driver >=600 (this runner: 550.54.15)"),
    ({"compute_capability": ">=9.0", "driver": ">=600"}, FLEET_FP, "driver >=600 (this runner: 550.54.15)"),
    ({"driver": ">=550", "vllm": "<0.26"}, FLEET_FP, "vllm <0.26 (this runner: 0.26.0)"),
    # a GPU whose memory is not known still has its compute capability
    ({"compute_capability": ">=9.0"}, Fingerprint(gpus=(NO_MEMORY,)), None),
    # a GPU whose architecture is not known has none to match, and says so
    ({"arch": "ampere"}, Fingerprint(gpus=(NO_ARCH,)), "arch ampere (this runner: unknown)"),
    ({"arch": "ampere"}, Fingerprint(gpus=(NO_ARCH, H200)), "arch ampere (this runner: unknown, hopper)"),
])
def test_every_fleet_axis_is_checked(axes: dict[str, str], fp: Fingerprint, not_covered: str | None) -> None:
    assert evaluate_cell(KnowledgeBase(rules=()), fp, "vllm", {}, axes=axes).not_covered == not_covered


def test_a_package_nobody_listed_is_unknown_not_absent() -> None:
    from pytest_gpucompat.kb.match import UNKNOWN, package_fact

    assert package_fact(Facts.of(Fingerprint()), "vllm") is UNKNOWN and repr(UNKNOWN) == "UNKNOWN"
    assert str(package_fact(Facts.of(Fingerprint(packages={"sglang": "0.5.1"})), "sglang")) == "0.5.1"
