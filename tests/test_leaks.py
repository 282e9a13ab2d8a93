"""The leak verdicts: every signal judged, the one that fired named, other processes never blamed."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pytest_gpucompat.checks.leaks import CyclePolicy, leak_verdict, memory_verdict
from pytest_gpucompat.checks.memory import MemorySample


def samples(**columns: Sequence[float | None]) -> list[MemorySample]:
    n = len(next(iter(columns.values())))
    return [MemorySample(cycle=i, **{k: v[i] for k, v in columns.items()}) for i in range(n)]


# host RSS of a clean vLLM 0.26.0 engine on an H200 over 5 create/destroy cycles (cycle 0 before the first engine):
# its warm-up lasts two cycles
VLLM_CLEAN_HOST = [513.4, 1600.3, 1613.1, 1614.1, 1614.0, 1614.0]


def test_a_warm_up_that_lasts_a_cycle_longer_neither_flags_nor_hides_a_leak() -> None:
    clean = VLLM_CLEAN_HOST + [1614.0] * 3
    leaking = [v + max(0, i - 1) * 1.0 for i, v in enumerate(clean)]  # + 1 MiB per cycle from cycle 2
    # after five cycles neither is decided: the policy runs more
    assert leak_verdict(samples(host_rss_mib=leaking[:6]), "host_rss_mib").undecided
    assert not leak_verdict(samples(host_rss_mib=clean[:6]), "host_rss_mib").leaked
    # after eight, the leak is steady over the latest cycles and the clean engine is flat
    verdict = leak_verdict(samples(host_rss_mib=leaking), "host_rss_mib")
    assert verdict.leaked and verdict.slope_mib_per_cycle == pytest.approx(1.0, abs=0.2)
    clean_verdict = leak_verdict(samples(host_rss_mib=clean), "host_rss_mib")
    assert not clean_verdict.leaked and not clean_verdict.undecided


def test_allocator_leak_behind_a_flat_nvml_fires_on_the_allocator() -> None:
    # 2 MiB of live tensors per cycle inside a cached segment: NVML does not move
    verdict = memory_verdict(samples(nvml_process_mib=[0, 732, 732, 732, 732, 732],
                                     torch_allocated_mib=[0, 10, 12, 14, 16, 18],
                                     host_rss_mib=[500, 900, 900, 900.1, 900.1, 900.1]))
    assert verdict.leaked
    assert [v.metric for v in verdict.fired] == ["torch_allocated_mib"]
    assert "live CUDA tensors in the torch allocator" in verdict.message("hf")
    assert verdict.worst is not None and verdict.worst.metric == "torch_allocated_mib"


def test_a_helper_process_left_per_cycle_is_a_leak() -> None:
    verdict = memory_verdict(samples(started_processes=[0, 1, 2, 3, 4, 5],
                                     host_rss_mib=[500, 900, 900, 900, 900, 900]))
    assert [v.metric for v in verdict.fired] == ["started_processes"]
    assert "processes/cycle" in verdict.message("vllm")


def test_a_pool_started_once_is_not_a_leak() -> None:
    verdict = memory_verdict(samples(started_processes=[0, 4, 4, 4, 4, 4], started_rss_mib=[0, 80, 80, 80, 80, 80]))
    assert not verdict.leaked and not verdict.undecided


def test_another_tenant_growing_on_the_device_is_named_not_blamed() -> None:
    foreign = ({"pid": 4321, "mib": 900.0, "owner": "other", "command": "python neighbour.py"},)
    rows = samples(nvml_process_mib=[0, 712, 712, 712, 712, 712],
                   nvml_device_used_mib=[600, 1400, 1500, 1600, 1700, 1800],
                   nvml_others_mib=[0, 100, 200, 300, 400, 500])
    rows[-1] = MemorySample(**{**rows[-1].as_dict(), "others": foreign})
    verdict = memory_verdict(rows)
    assert not verdict.leaked
    note = verdict.foreign_note()
    assert note is not None and "pid 4321 (python neighbour.py)" in note and "+100.0 MiB/cycle" in note


def test_undecided_growth_asks_for_more_cycles_within_bounds() -> None:
    # growing over the latest cycles, but in jumps: undecided
    rows = samples(host_rss_mib=[500, 900, 900, 900, 905, 905])
    assert memory_verdict(rows).undecided
    policy = CyclePolicy(min_cycles=5, max_cycles=8, budget_s=100.0)
    assert policy.more(rows[:3], cycles_done=2, elapsed_s=1.0)  # below the minimum
    assert policy.more(rows, cycles_done=5, elapsed_s=10.0)  # undecided: one more
    assert not policy.more(rows, cycles_done=8, elapsed_s=10.0)  # at the maximum
    assert not policy.more(rows, cycles_done=5, elapsed_s=100.0)  # out of time
    flat = samples(host_rss_mib=[500, 900, 900, 900, 900, 900])
    assert not policy.more(flat, cycles_done=5, elapsed_s=1.0)


def test_policy_from_the_environment() -> None:
    assert CyclePolicy.from_env({}) == CyclePolicy()
    assert CyclePolicy.from_env({"GPUCOMPAT_MEMORY_CYCLES": "20"}) == CyclePolicy(20, 20, 300.0)
    assert CyclePolicy.from_env({"GPUCOMPAT_MEMORY_MAX_CYCLES": "9", "GPUCOMPAT_MEMORY_BUDGET_S": "60"}) == \
        CyclePolicy(5, 9, 60.0)
    for env, message in (({"GPUCOMPAT_MEMORY_CYCLES": "two"}, "not a number"),
                         ({"GPUCOMPAT_MEMORY_CYCLES": "2"}, "integer >= 3"),
                         ({"GPUCOMPAT_MEMORY_BUDGET_S": "nan"}, "finite")):
        with pytest.raises(ValueError, match=message):
            CyclePolicy.from_env(env)


# host RSS series recorded on an H200 (docs/reports), cycle 0 before the first engine
SGLANG_0_5_16_HOST = [507.81, 1090.73, 1091.44, 1092.0, 1092.56, 1093.17]  # Engine kept alive by atexit: +0.6/cycle
VLLM_0_25_SERIAL_HOST = [507.18, 1593.32, 1607.2, 1607.35, 1608.48, 1608.58, 1608.55, 1608.66]
VLLM_0_25_PACKED_HOST = [507.18, 1593.98, 1607.75, 1607.65, 1607.71, 1608.73, 1608.47, 1609.72, 1610.72]


def test_a_leak_over_every_cycle_is_reported_at_once() -> None:
    verdict = memory_verdict(samples(host_rss_mib=SGLANG_0_5_16_HOST))
    assert verdict.leaked and not verdict.unconfirmed
    assert not CyclePolicy().more(samples(host_rss_mib=SGLANG_0_5_16_HOST), cycles_done=5, elapsed_s=257.0)


def test_a_leak_over_the_latest_cycles_alone_is_confirmed_with_more_cycles() -> None:
    # the same vLLM 0.25.0 engine, two runs: clean over 7 cycles, leaking over the latest 4 of 8 in the other
    assert not memory_verdict(samples(host_rss_mib=VLLM_0_25_SERIAL_HOST)).leaked
    packed = samples(host_rss_mib=VLLM_0_25_PACKED_HOST)
    verdict = memory_verdict(packed)
    assert verdict.leaked and verdict.unconfirmed and [v.latest_only for v in verdict.fired] == [True]
    policy = CyclePolicy(min_cycles=5, max_cycles=12, budget_s=300.0)
    assert policy.more(packed, cycles_done=8, elapsed_s=86.0)  # more cycles decide it
    assert not policy.more(packed, cycles_done=12, elapsed_s=86.0)  # at the bound, the leak stands as seen
    assert not policy.more(packed, cycles_done=8, elapsed_s=300.0)
    # a steady 1 MiB/cycle (the detection goal) after that warm-up is still a leak once the cycles are run
    leaking = VLLM_0_25_PACKED_HOST[:3] + [VLLM_0_25_PACKED_HOST[2] + i * 1.0 for i in range(1, 11)]
    assert memory_verdict(samples(host_rss_mib=leaking)).leaked
    # and the helper-process or allocator signals that fire over every cycle are never held back
    both = samples(host_rss_mib=VLLM_0_25_PACKED_HOST, started_processes=list(range(9)))
    assert memory_verdict(both).leaked and not memory_verdict(both).unconfirmed
