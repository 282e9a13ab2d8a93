"""What /proc says of one process: its status fields and start time (a pid plus its start time names a process
even after the pid is reused).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, pgrp, ..., starttime at index 19."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def stat_int(pid: int, index: int) -> int | None:
    """One numeric field of ``stat_fields`` (1: the parent's pid, 19: the start time), or None when the process is
    gone or /proc cannot tell."""
    fields = stat_fields(pid)
    try:
        return int(fields[index]) if fields else None
    except (IndexError, ValueError):
        return None


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None when it is gone or /proc cannot tell)."""
    return stat_int(pid, 19)
