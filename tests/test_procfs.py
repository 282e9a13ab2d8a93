"""The process table as psutil gives it: every question answers "cannot tell" for a process that is gone, a zombie
or unreadable, never an exception; start times are the kernel's clock ticks since boot, and do not move with the
clock; what a memory test and the group killer decide from them stays what it was."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_gpucompat.checks import ownership
from pytest_gpucompat.checks.ownership import Scope, owned_pids, owner_of, owner_scope
from pytest_gpucompat.engines.processes import ProcessGroup, group_alive, is_ours, process_group
from pytest_gpucompat.machine import procfs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="compares with /proc")

SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command name, read here without the code under test."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _zombie() -> subprocess.Popen[bytes]:
    """A child that exited and that nobody reaps (yet)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)  # it leads its own group
    deadline = time.monotonic() + 30
    while _stat(proc.pid)[0] != "Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    return proc


def test_start_times_and_parents_are_the_kernels() -> None:
    child = subprocess.Popen(SLEEP)
    try:
        for pid in (os.getpid(), child.pid, 1):
            assert procfs.start_time(pid) == int(_stat(pid)[19])
            assert procfs.parent_pid(pid) == int(_stat(pid)[1])
        assert procfs.descendants(os.getpid()) is not None and child.pid in procfs.descendants(os.getpid())
    finally:
        child.kill()
        child.wait()


def test_a_start_time_does_not_move_when_the_clock_is_stepped(monkeypatch: pytest.MonkeyPatch) -> None:
    """psutil's creation time is counted from a boot time read anew at each call: stepped between two reads, it is
    read again, so a pid plus start time written by one process still matches in another."""
    real = psutil.boot_time
    steps = iter([5.0, 0.0])  # stepped back by 5 s between the first two reads
    monkeypatch.setattr(psutil, "boot_time", lambda: real() + next(steps, 0.0))
    assert procfs.start_time(os.getpid()) == int(_stat(os.getpid())[19])


def test_a_process_that_is_gone_or_never_was_cannot_tell() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    for pid in (proc.pid, 2**22 + 11, 0, -5, 2**70):
        assert procfs.start_time(pid) is None and procfs.parent_pid(pid) is None and procfs.real_uid(pid) is None
        assert not procfs.exists(pid) and not procfs.is_zombie(pid) and procfs.environ(pid) is None
        assert procfs.command_text(pid) is None and procfs.rss_bytes(pid) is None
        assert procfs.descendants(pid) == set()
        assert ownership.command_line(pid) == "?" and not ownership.carries_token(pid, "t")
    assert is_ours(ProcessGroup(proc.pid, 1234))  # a gone leader: its group, while members live, is still ours
    assert not group_alive(process_group(proc.pid))


def test_a_zombie_is_there_and_named_but_holds_nothing() -> None:
    proc = _zombie()
    try:
        assert procfs.exists(proc.pid) and procfs.is_zombie(proc.pid)
        assert procfs.start_time(proc.pid) == int(_stat(proc.pid)[19])
        # psutil has no command line for it (ZombieProcess; an empty one before 6.0): it is named as /proc names it
        comm = Path(f"/proc/{proc.pid}/comm").read_text().strip()
        assert ownership.command_line(proc.pid) == f"[{comm}]"
        assert ownership.rss_mib(proc.pid) is None  # VmRSS: a zombie has no memory of its own
        assert not ownership.carries_token(proc.pid, os.environ.get(ownership.OWNER_ENV, "x"))
        group = process_group(proc.pid)
        assert is_ours(group) and not group_alive(group)  # a zombie leader alone: the group is gone
        assert proc.pid not in owned_pids(Scope("t", os.getpid(), None))
    finally:
        proc.wait()


def test_an_unreadable_process_is_not_in_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user's process where /proc is mounted with hidepid: psutil says AccessDenied, as /proc said EACCES."""
    child = subprocess.Popen(SLEEP)
    original = psutil.Process.__init__

    def denied(self: psutil.Process, pid: int | None = None, *args: object, **kwargs: object) -> None:
        if pid == child.pid:
            raise psutil.AccessDenied(pid)
        original(self, pid, *args, **kwargs)

    try:
        with owner_scope() as scope:
            monkeypatch.setattr(psutil.Process, "__init__", denied)
            assert not procfs.exists(child.pid) and procfs.start_time(child.pid) is None
            assert owner_of(child.pid, scope) == "unknown" and ownership.command_line(child.pid) == "?"
            assert ownership.process_uid(child.pid) is None and ownership.rss_mib(child.pid) is None
            assert is_ours(ProcessGroup(child.pid, 1))  # unreadable leader: as a gone one, the group is ours
    finally:
        child.kill()
        child.wait()


def test_a_tree_psutil_cannot_read_whole_is_walked_upwards(monkeypatch: pytest.MonkeyPatch) -> None:
    """children() needs every process's parent; one unreadable process makes psutil refuse the whole tree."""

    def refuse(self: psutil.Process, recursive: bool = False) -> list[psutil.Process]:
        raise psutil.AccessDenied(self.pid)

    with owner_scope() as scope:
        child = subprocess.Popen(SLEEP, env={k: v for k, v in os.environ.items() if k != ownership.OWNER_ENV})
        try:
            monkeypatch.setattr(psutil.Process, "children", refuse)
            assert procfs.descendants(scope.root) is None
            assert child.pid in owned_pids(scope)  # no token: ours by descent, found pid by pid
            monkeypatch.setattr(psutil.Process, "children", lambda self, recursive=False: [])
            assert child.pid not in owned_pids(scope)  # (the tree is what finds it)
        finally:
            child.kill()
            child.wait()


def test_a_process_that_exits_mid_walk_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pid listed, then gone before it is asked: not an error, not a member."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    live = subprocess.Popen(SLEEP, start_new_session=True)
    try:
        monkeypatch.setattr(psutil, "pids", lambda: [gone.pid, live.pid])
        assert procfs.pids() == [gone.pid, live.pid]
        with owner_scope() as scope:
            assert owned_pids(Scope(scope.token, os.getpid(), None)) == [live.pid]
        assert procfs.group_has_live_member(live.pid) and not procfs.group_has_live_member(gone.pid)
    finally:
        live.kill()
        live.wait()


def test_an_undecodable_command_line_is_shown_replaced() -> None:
    """Bytes that are not UTF-8 in argv: shown as U+FFFD, as before, so a report stays strict JSON."""
    proc = subprocess.Popen([os.fsencode(sys.executable), b"-c", b"import time; time.sleep(60)", b"\xff\xfe"])
    try:
        deadline = time.monotonic() + 30
        while b"\xff" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        line = ownership.command_line(proc.pid)
        assert line.endswith("\ufffd\ufffd") and line.encode("utf-8")
    finally:
        proc.kill()
        proc.wait()
