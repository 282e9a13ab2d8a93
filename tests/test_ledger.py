"""The ledger the workers of a run share: reservations under flock, waiting with a deadline, dead workers'
entries reclaimed, the start gate; with a fake clock and fake processes, nothing waits for real."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.gpushare.ledger import GpuWaitTimeout, Ledger, StartGate, holder_alive, holder_id


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def ledgers(tmp_path: Path, *holders: str, alive: set[str] | None = None) -> tuple[Clock, list[Ledger]]:
    clock = Clock()
    live = alive if alive is not None else set(holders)
    return clock, [Ledger(tmp_path, h, clock=clock, sleep=clock.sleep, alive=lambda h: h in live) for h in holders]


BUDGET = {"G": 1000.0}


def test_reserve_waits_until_the_need_fits_then_fails_with_the_reason(tmp_path: Path) -> None:
    clock, (a, b) = ledgers(tmp_path, "1:1", "2:2")
    first = a.reserve(("G",), 700.0, "vllm on tiny", lambda: BUDGET, timeout_s=60)
    with pytest.raises(GpuWaitTimeout) as info:
        b.reserve(("G",), 400.0, "sglang on tiny", lambda: BUDGET, timeout_s=30)
    message = str(info.value)
    assert "sglang on tiny after waiting 30 s" in message
    assert "needs 400 MiB of G, 300 of its 1000 MiB budget free: vllm on tiny (pid 1, 700 MiB)" in message
    assert "\n" not in message
    assert clock.now >= 1030.0
    assert [e.id for e in a.snapshot().entries] == [first]  # the failed request left the queue
    a.release(first)
    assert b.reserve(("G",), 400.0, "sglang on tiny", lambda: BUDGET, timeout_s=30)


def test_make_room_is_asked_before_waiting(tmp_path: Path) -> None:
    clock, (a,) = ledgers(tmp_path, "1:1")
    idle = [a.reserve(("G",), 600.0, "idle engine", lambda: BUDGET, timeout_s=1)]

    def make_room() -> bool:
        if not idle:
            return False
        a.release(idle.pop())
        return True

    a.reserve(("G",), 600.0, "new engine", lambda: BUDGET, timeout_s=1, make_room=make_room)
    assert clock.now == 1000.0  # no wait: its own idle engine made room


def test_a_dead_workers_reservations_are_reclaimed(tmp_path: Path) -> None:
    alive = {"1:1", "2:2"}
    clock, (a, b) = ledgers(tmp_path, "1:1", "2:2", alive=alive)
    a.join()
    a.reserve(("G",), 950.0, "vllm", lambda: BUDGET, timeout_s=1)
    with pytest.raises(GpuWaitTimeout):
        b.reserve(("G",), 100.0, "hf", lambda: BUDGET, timeout_s=1)
    alive.discard("1:1")  # killed
    assert b.reserve(("G",), 100.0, "hf", lambda: BUDGET, timeout_s=1)
    state = b.snapshot()
    assert {e.holder for e in state.entries} == {"2:2"} and "1:1" not in state.members


def test_holders_are_told_apart_by_start_time() -> None:
    me = holder_id()
    assert holder_alive(me)
    pid, _, start = me.partition(":")
    if start != "None":  # /proc tells start times: a reused pid is another process
        assert not holder_alive(f"{pid}:{int(start) + 1}")
    proc = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    proc.start()
    gone = holder_id(proc.pid)
    proc.join()
    assert not holder_alive(gone)


def test_exclusive_waits_for_everyone_and_blocks_everyone(tmp_path: Path) -> None:
    clock, (a, b) = ledgers(tmp_path, "1:1", "2:2")
    engine = b.reserve(("G",), 100.0, "hf", lambda: BUDGET, timeout_s=1)
    with pytest.raises(GpuWaitTimeout, match="hold no other engine of the run: hf"):
        a.reserve(("G",), None, "exclusive test t.py::test_mem", lambda: BUDGET, timeout_s=5)
    b.release(engine)
    whole = a.reserve(("G",), None, "exclusive test t.py::test_mem", lambda: BUDGET, timeout_s=5)
    with pytest.raises(GpuWaitTimeout, match="held whole by exclusive test t.py::test_mem"):
        b.reserve(("G",), 1.0, "hf", lambda: BUDGET, timeout_s=5)
    assert a.reserve(("G",), 500.0, "its own engine", lambda: BUDGET, timeout_s=1)  # inside its exclusive hold
    a.release(whole)
    state = a.snapshot()
    assert state.released["G"]["1:1"] == clock.now


def test_released_times_and_members_survive_in_the_file(tmp_path: Path) -> None:
    clock, (a, b) = ledgers(tmp_path, "1:1", "2:2")
    a.join()
    b.join()
    entry = a.reserve(("G", "H"), 1.0, "vllm", lambda: {"G": 10.0, "H": 10.0}, timeout_s=1)
    clock.now = 2000.0
    a.release(entry)
    state = Ledger(tmp_path, "3:3", alive=lambda h: True).snapshot()
    assert state.members == ["1:1", "2:2"]
    assert state.released == {"G": {"1:1": 2000.0}, "H": {"1:1": 2000.0}}


def _hold_gate(directory: str, ready: Any, done: Any, quiet: bool = True) -> None:
    what = "vllm starting" if quiet else "vllm starting with its cache size given"
    with StartGate(directory, ["G"], timeout_s=5).held(what, quiet=quiet):
        ready.set()
        done.wait(30)


def test_the_start_gate_lets_one_start_at_a_time(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_gate, args=(str(tmp_path), ready, done))
    proc.start()
    try:
        assert ready.wait(60)
        clock = Clock()
        gate = StartGate(tmp_path, ["G"], timeout_s=2, clock=clock, sleep=clock.sleep)
        held_elsewhere = rf"waited 2 s .* for G, where pid {proc.pid} \(vllm starting\)"
        with pytest.raises(GpuWaitTimeout, match=held_elsewhere), gate.held("hf starting"):
            pass
    finally:
        done.set()
        proc.join(30)
    with gate.held("hf starting"), gate.held("nested"):  # free again, and reentrant within a process
        pass


def test_starts_that_measure_nothing_overlap_and_keep_a_measuring_start_out(tmp_path: Path) -> None:
    """vLLM given its KV-cache size measures nothing at start: such starts overlap one another, while one that
    profiles the GPU (quiet) waits until none of them is under way, and keeps them out while it is."""
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_gate, args=(str(tmp_path), ready, done, False))
    proc.start()
    try:
        assert ready.wait(60)
        clock = Clock()
        gate = StartGate(tmp_path, ["G"], timeout_s=2, clock=clock, sleep=clock.sleep)
        with gate.held("hf starting", quiet=False):  # beside the other worker's start
            pass
        with pytest.raises(GpuWaitTimeout, match="waited 2 s"), gate.held("sglang profiling", quiet=True):
            pass
    finally:
        done.set()
        proc.join(30)
    with gate.held("sglang profiling", quiet=True):  # free again once the overlapping start is done
        other = StartGate(tmp_path, ["G"], timeout_s=1, clock=clock, sleep=clock.sleep)
        with pytest.raises(GpuWaitTimeout, match=r"pid \d+ \(sglang profiling\)"), other.held("hf", quiet=False):
            pass


def test_a_gate_whose_holder_died_is_free(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_gate, args=(str(tmp_path), ready, done))
    proc.start()
    assert ready.wait(60)
    proc.kill()
    proc.join(30)
    with StartGate(tmp_path, ["G"], timeout_s=5).held("after a crash"):
        pass


def test_a_holder_gets_its_second_engine_while_an_exclusive_test_waits(tmp_path: Path) -> None:
    """The deadlock seen on the H200: A's engine in use, B's exclusive test queued, A asks for a reference engine.
    A gets it at once; B waits for both of A's to be given back, then runs."""
    _clock, (a, b) = ledgers(tmp_path, "1:1", "2:2")
    candidate = a.reserve(("G",), 300.0, "vllm", lambda: BUDGET, timeout_s=1)
    queued = b.enqueue(("G",), None, "exclusive test t.py::test_mem")
    reference = a.reserve(("G",), 100.0, "hf reference", lambda: BUDGET, timeout_s=1)  # no wait, no timeout
    assert b.try_take(queued, BUDGET) is not None
    a.release(reference)
    a.release(candidate)
    assert b.try_take(queued, BUDGET) is None


def test_workers_waiting_on_one_another_give_up_one_not_after_the_whole_wait(tmp_path: Path) -> None:
    """Two workers each hold an engine in use and each ask for room the other holds: nobody will give any back.
    The later request gives up after the stall time (not --gpucompat-gpu-wait's 1800 s), naming the cycle."""
    from pytest_gpucompat.gpushare.ledger import STALL_S

    clock, (a, b) = ledgers(tmp_path, "1:1", "2:2")
    a.reserve(("G",), 500.0, "vllm A", lambda: BUDGET, timeout_s=1)
    b.reserve(("G",), 400.0, "vllm B", lambda: BUDGET, timeout_s=1)
    a.enqueue(("G",), 300.0, "hf reference A")  # A waits (it cannot fit beside B's 400 MiB)
    start = clock.now
    with pytest.raises(GpuWaitTimeout, match="every worker holding room there waits too"):
        b.reserve(("G",), 300.0, "hf reference B", lambda: BUDGET, timeout_s=1800)
    assert STALL_S <= clock.now - start < STALL_S + 1


def test_a_wait_on_a_busy_holder_is_no_stall(tmp_path: Path) -> None:
    clock, (a, b) = ledgers(tmp_path, "1:1", "2:2")
    a.reserve(("G",), 900.0, "vllm A", lambda: BUDGET, timeout_s=1)  # A holds, and is not waiting: it will finish
    with pytest.raises(GpuWaitTimeout, match="after waiting 300 s"):
        b.reserve(("G",), 300.0, "hf B", lambda: BUDGET, timeout_s=300)
