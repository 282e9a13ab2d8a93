"""What the kernel says of a process, asked through psutil: whether it is there, its parent and descendants, its
start time (a pid plus its start time names a process even after the pid is reused), state, user, environment,
command line and resident memory, and whether a process group still has a live member.

Every question answers None (or no) when the process is gone, is a zombie that cannot tell, or may not be read
(another user's, /proc mounted with hidepid): psutil's NoSuchProcess, ZombieProcess and AccessDenied, and a pid that
names no process at all. This module is imported by the run's process checks only, never by a run without
--gpucompat, so psutil costs such a run nothing.

Two answers psutil does not give as they are needed, so they are computed here:
- ``start_time`` in clock ticks since boot (/proc/PID/stat's unit): psutil's ``create_time()`` is seconds since the
  epoch, counted from a boot time it reads anew at each call, which moves when the clock is stepped. A start time is
  written where other processes compare it later (a GPU ledger entry, a report), so it is the difference of the
  two, read together (again should the boot time move in between), and does not move.
- ``opens_under`` (a GPU open): psutil's ``open_files()`` lists regular files only, and a GPU is a character device
  (/dev/nvidia*), so /proc/PID/fd is read here (Linux only), the one place left that reads /proc by hand.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import TypeVar

import psutil

T = TypeVar("T")

TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_CANNOT_TELL = (psutil.Error, OSError, ValueError, OverflowError)


def ask(pid: int | str, question: Callable[[psutil.Process], T]) -> T | None:
    """``question(process)``; None when the process is gone, a zombie that cannot answer, not ours to read, or
    ``pid`` names no process (``"self"``: this process)."""
    try:
        return question(psutil.Process(None if pid == "self" else int(pid)))
    except _CANNOT_TELL:
        return None


def pids() -> list[int]:
    """Every process of this PID namespace (none when the table cannot be listed)."""
    try:
        return list(psutil.pids())
    except _CANNOT_TELL:
        return []


def exists(pid: int) -> bool:
    """Whether the process is in this namespace's table and readable (a zombie is)."""
    return ask(pid, psutil.Process.status) is not None


def is_zombie(pid: int) -> bool:
    """Exited and not yet reaped (a container's PID 1 may never reap it)."""
    return ask(pid, psutil.Process.status) in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def parent_pid(pid: int) -> int | None:
    return ask(pid, psutil.Process.ppid)


def descendants(pid: int) -> set[int] | None:
    """The process's children, theirs and so on (empty when it is gone); None when the process table cannot be read
    whole (another user's process where /proc is mounted with hidepid): ask ``parent_pid`` of each then."""
    try:
        return {child.pid for child in psutil.Process(pid).children(recursive=True)}
    except (psutil.AccessDenied, PermissionError):  # psutil before 7.1 let PermissionError through
        return None
    except _CANNOT_TELL:
        return set()


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None when it is gone or cannot be read)."""

    def ticks(proc: psutil.Process) -> int | None:
        for _ in range(3):
            booted = psutil.boot_time()
            created = proc.create_time()
            if psutil.boot_time() == booted:
                return round((created - booted) * TICKS_PER_S)
            proc = psutil.Process(proc.pid)  # the clock was stepped meanwhile: ask again (create_time is cached)
        return None

    return ask(pid, ticks)


def now_ticks() -> int | None:
    """Now, in the clock ticks since boot that ``start_time`` counts (the clock of /proc/uptime); None where there is
    no such clock."""
    clock = getattr(time, "CLOCK_BOOTTIME", None)
    return None if clock is None else int(time.clock_gettime(clock) * TICKS_PER_S)


def real_uid(pid: int) -> int | None:
    return ask(pid, lambda proc: int(proc.uids().real))


def environ(pid: int) -> dict[str, str] | None:
    """The environment the process started with (the kernel bounds it: argv and environment together are at most
    3/4 of the 8 MiB stack limit at exec)."""
    return ask(pid, psutil.Process.environ)


def _text(raw: str) -> str:
    """psutil's text with undecodable bytes (kept as surrogates) shown as U+FFFD: printable and strict JSON."""
    return os.fsencode(raw).decode("utf-8", "replace")


def command_text(pid: int) -> str | None:
    """The command line, arguments joined by spaces; ``[name]`` when it has none (kernel threads, zombies); None when
    it cannot be read."""

    def text(proc: psutil.Process) -> str:
        try:
            line = " ".join(proc.cmdline()).strip()
        except psutil.ZombieProcess:
            line = ""
        return _text(line) or f"[{_text(proc.name()).strip()}]"

    return ask(pid, text)


def rss_bytes(pid: int | str) -> int | None:
    """Resident set size; None for a process with no memory of its own (a zombie, a kernel thread) or unreadable."""

    def rss(proc: psutil.Process) -> int | None:
        info = proc.memory_info()
        return None if info.vms == 0 else int(info.rss)

    return ask(pid, rss)


def group_has_live_member(pgid: int) -> bool:
    """Whether a process of group ``pgid`` that is not a zombie is in the table (yes when it cannot be listed)."""
    try:
        every = psutil.pids()
    except _CANNOT_TELL:
        return True
    for pid in every:
        try:
            if os.getpgid(pid) != pgid:
                continue
        except OSError:
            continue
        status = ask(pid, psutil.Process.status)
        if status is not None and status not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return True
    return False


def opens_under(pid: int, prefix: str) -> bool | None:
    """Whether the process has a file under ``prefix`` open; None when its descriptors cannot be read (another
    user's process, or no /proc)."""
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{name}").startswith(prefix):
                return True
    return False
