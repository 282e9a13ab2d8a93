"""Processes we start, and only those: process groups checked against their leader's start time before every
signal, the one group killer, the parent-death signal for what we spawn, and this process's private state
directory (0700, ours, removed at exit but for the logs of engines that failed).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..machine.procfs import group_has_live_member, start_time

# --------------------------------------------------------------------------------------------------------------
# The private state directory

_STATE: dict[str, Any] = {"dir": None, "pid": None}
_KEPT: set[str] = set()


def _check_private(path: Path) -> Path:
    """`path` must be a real directory (no symlink) owned by us with no access for others; else refuse it."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(f"gpucompat: {path} is not a private directory of this user; refusing to use it")
    return path


def state_dir() -> Path:
    """This process's private directory (mkdtemp: created here, mode 0700), removed at exit but for kept logs."""
    if _STATE["dir"] is None or _STATE["pid"] != os.getpid():
        _STATE["dir"], _STATE["pid"] = Path(tempfile.mkdtemp(prefix="gpucompat-")), os.getpid()
        atexit.register(_remove_state_dir, _STATE["dir"], os.getpid())
    return _check_private(_STATE["dir"])


def log_note(path: str | os.PathLike[str] | None) -> str:
    """`, log: PATH` for a progress line, only for a log that outlives the run (under --gpucompat-log-dir): one in
    the private directory may be removed at exit, and a path that is gone by the time a reader looks misleads."""
    if path is None or _STATE["dir"] is None:
        return f", log: {path}" if path is not None else ""
    private = Path(_STATE["dir"])
    return "" if private in Path(path).parents else f", log: {path}"


def keep_log(path: str | os.PathLike[str] | None) -> None:
    """Keep this log (and the logs named after it, e.g. a server's) when the private directory is removed."""
    if path is not None:
        _KEPT.add(str(path))



def _remove_state_dir(path: Path, pid: int) -> None:
    if os.getpid() != pid:
        return
    with contextlib.suppress(OSError):
        for entry in os.scandir(path):
            if any(entry.path.startswith(kept) for kept in _KEPT):
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
        os.rmdir(path)  # fails, as it should, while a kept log is in it


def new_log(name: str) -> Path:
    """A new, uniquely named log in the private directory."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    fd, path = tempfile.mkstemp(prefix=f"{safe}-", suffix=".log", dir=state_dir())
    os.close(fd)
    return Path(path)


_LOG_FLAGS = os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def open_log(path: Path) -> None:
    """Create (mode 0600) or truncate a log: its name is predictable and its directory may be shared, so a
    symlink, a FIFO or a device planted there, or a file of another user, is refused (PermissionError, one line)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(path, _LOG_FLAGS | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        fd = _open_own_log(path, _LOG_FLAGS)
        os.ftruncate(fd, 0)
    os.close(fd)


def append_log(path: str | os.PathLike[str]) -> int:
    """A descriptor appending to a log (``open_log``'s checks; created 0600 when missing)."""
    try:
        fd = os.open(path, _LOG_FLAGS | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _open_own_log(Path(path), _LOG_FLAGS | os.O_APPEND)
    os.set_blocking(fd, True)
    return fd


def _open_own_log(path: Path, flags: int) -> int:
    """Open an existing log that must be a regular file of this user with one name; else PermissionError."""
    def refuse(problem: str) -> PermissionError:
        return PermissionError(errno.EPERM, f"{problem}; refusing to write an engine log there", str(path))

    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse("is a symlink") from None
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise refuse("is not a regular file") from None
        raise
    st = os.fstat(fd)
    problem = ("is not a regular file" if not stat.S_ISREG(st.st_mode)
               else "belongs to another user" if st.st_uid != os.geteuid()
               else "has other hard links" if st.st_nlink != 1 else None)
    if problem is not None:
        os.close(fd)
        raise refuse(problem)
    if st.st_mode & 0o077:
        os.fchmod(fd, 0o600)
    if flags & getattr(os, "O_NONBLOCK", 0):
        os.set_blocking(fd, True)
    return fd


# --------------------------------------------------------------------------------------------------------------
# Process groups: only ours, checked before every kill


@dataclass(frozen=True)
class ProcessGroup:
    """A process group we started: its id (= its leader's pid) and the leader's start time, so that a pid reused
    by an unrelated process is never signalled."""

    pgid: int
    start: int | None


def process_group(pid: int) -> ProcessGroup:
    """The group led by `pid`, which we just started, with its leader's start time."""
    return ProcessGroup(pid, start_time(pid))


def is_ours(group: ProcessGroup) -> bool:
    """A live leader must be the process we started (same start time); a gone leader's id stays reserved by the
    kernel while members of its group live, so its group is still the one we started."""
    if group.pgid <= 1:
        return False
    started = start_time(group.pgid)
    return started is None or (group.start is not None and started == group.start)


def signal_group(group: ProcessGroup, sig: int) -> None:
    """Send `sig` to a group we started, after checking it still is ours."""
    if is_ours(group):
        with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
            os.killpg(group.pgid, sig)


def group_alive(group: ProcessGroup) -> bool:
    """True while a process of the group still runs; zombies (unreaped by a container's PID 1) do not count."""
    try:
        os.killpg(group.pgid, 0)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return group_has_live_member(group.pgid)


def kill_groups(groups: Iterable[ProcessGroup], grace_s: float = 2.0,
                alive: Callable[[], bool] = lambda: False, also: Callable[[int], None] | None = None) -> bool:
    """Kill process groups we started: SIGTERM, up to `grace_s` for all of them (and `alive()`) to be gone, then
    SIGKILL and up to 5 s more. `also(sig)` signals what a group kill may miss (a child not yet in its group).
    The one place that kills process groups; True when everything is gone."""
    groups = list(dict.fromkeys(groups))
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for group in groups:
            signal_group(group, sig)
        if also is not None:
            also(sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and (alive() or any(group_alive(g) for g in groups)):
            time.sleep(0.05)
        if not alive() and not any(group_alive(g) for g in groups):
            return True
    return False


def _prctl() -> Callable[..., int] | None:
    """libc's prctl (Linux), looked up in this process so that a preexec_fn loads nothing after fork."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def death_signal_preexec(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A preexec_fn that has the kernel send `sig` to the new process when the thread that started it exits or
    its process dies (SIGKILL included): PR_SET_PDEATHSIG. None where there is no prctl."""
    prctl = _prctl()
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG = 1

    return preexec
