"""Which processes a memory test started, and who holds the GPU's memory.

A leak is only ours when a process we started holds it. Engines start workers, schedulers and servers; a helper
left running may be re-parented to PID 1 (or call setsid), so descent alone loses it. An owner token in the
environment survives both: every process started below an `owner_scope` inherits it, and its environment says so
later (the process table is asked through ``machine.procfs``). Processes that existed before the test, or that carry
no token and descend from nothing of ours, are other tenants of the GPU (another xdist worker, a neighbour job):
reported, never blamed.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ..machine.procfs import (
    command_text,
    descendants,
    environ,
    exists,
    is_zombie,
    now_ticks,
    opens_under,
    parent_pid,
    pids,
    real_uid,
    rss_bytes,
    start_time,
)

MIB = 1024 * 1024
OWNER_ENV = "GPUCOMPAT_MEMORY_OWNER"

Owner = Literal["ours", "before", "other", "unknown"]


@dataclass(frozen=True)
class Scope:
    """One test's processes: those that carry `token`, or descend from `root`, and started at or after `since`."""

    token: str
    root: int
    since: int | None
    """Start time (clock ticks since boot) of the scope; processes started earlier existed before the test."""


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    mib: float
    owner: Owner
    command: str


@dataclass(frozen=True)
class DeviceSnapshot:
    """NVML's view of one GPU at one moment: memory used and the processes it lists."""

    used_mib: float
    processes: tuple[GpuProcess, ...]
    listed: bool
    """Whether NVML could list processes (it cannot in some containers: then nothing can be attributed)."""

    def mib(self, owner: Owner) -> float:
        return sum(p.mib for p in self.processes if p.owner == owner)

    @property
    def unexplained_mib(self) -> float:
        """Memory in use that no listed process holds (driver state, or a context that outlived its process)."""
        return max(0.0, self.used_mib - sum(p.mib for p in self.processes))


@contextlib.contextmanager
def owner_scope() -> Iterator[Scope]:
    """Mark every process started from here on (until exit) as this test's, through the environment."""
    token = uuid.uuid4().hex
    previous = os.environ.get(OWNER_ENV)
    os.environ[OWNER_ENV] = token
    pid = os.getpid()
    try:
        yield Scope(token, pid, now_ticks())
    finally:
        if previous is None:
            os.environ.pop(OWNER_ENV, None)
        else:
            os.environ[OWNER_ENV] = previous


def current_scope() -> Scope | None:
    """The scope this process runs in, when an owner_scope above it (here or in a parent) set one."""
    token = os.environ.get(OWNER_ENV)
    return None if not token else Scope(token, os.getpid(), None)


def descends_from(pid: int, ancestor: int, max_depth: int = 64) -> bool:
    """Whether `pid` is `ancestor` or one of its descendants, walking up the parent links."""
    for _ in range(max_depth):
        if pid == ancestor:
            return True
        parent = parent_pid(pid)
        if parent is None or parent in (0, pid):
            return False
        pid = parent
    return False


def process_uid(pid: int) -> int | None:
    """The real user id of a process, None when it is gone or cannot be read."""
    return real_uid(pid)


def carries_token(pid: int, token: str, name: str = OWNER_ENV) -> bool:
    """Whether the process runs as this user and its environment holds our owner token as ``name`` (unreadable
    environments: no). A process of another user never counts as ours, whatever its environment says (as root,
    every process's environment is readable, and a token someone learned could be copied into one)."""
    if not token or process_uid(pid) != os.getuid():
        return False
    found = environ(pid)
    return found is not None and found.get(name) == token


def command_line(pid: int, limit: int = 160) -> str:
    """The process's command line, shortened; ``[name]`` when it has none; ``?`` when it cannot be read."""
    text = command_text(pid)
    if text is None:
        return "?"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def uses_gpu(pid: int) -> bool | None:
    """Whether the process has an NVIDIA device open; None when its descriptors cannot be read (another user)."""
    return opens_under(pid, "/dev/nvidia")


def owner_of(pid: int, scope: Scope) -> Owner:
    """Ours (started under the scope), before (already running when it began), other, or unknown: not in the table,
    or a process there that has no GPU open, so NVML's number is a PID of another namespace (containers)."""
    if not exists(pid):
        return "unknown"
    if carries_token(pid, scope.token) or (descends_from(pid, scope.root) and _started_since(pid, scope.since)):
        return "ours"
    if uses_gpu(pid) is False:
        return "unknown"
    started = start_time(pid)
    if scope.since is not None and started is not None and started < scope.since:
        return "before"
    return "other"


def owned_pids(scope: Scope) -> list[int]:
    """Live (not zombie) processes of the scope other than its root: what the test started and is still running."""
    below = descendants(scope.root)
    found = []
    for pid in pids():
        if pid == scope.root or is_zombie(pid):
            continue
        descends = pid in below if below is not None else descends_from(pid, scope.root)
        if carries_token(pid, scope.token) or (descends and _started_since(pid, scope.since)):
            found.append(pid)
    return sorted(found)


def _started_since(pid: int, since: int | None) -> bool:
    """Whether ``pid`` started at or after ``since`` (clock ticks since boot; one tick of slack for now's rounding
    to whole ticks): a child the root started before the scope (multiprocessing's resource tracker, say) was not
    started by the test. Unknown either way: counted, as before the scope could tell."""
    started = start_time(pid) if since is not None else None
    return started is None or since is None or started >= since - 1


def rss_mib(pid: int | str) -> float | None:
    """Resident set size of a process in MiB (``pid`` may be "self"); None when it is gone or cannot be read."""
    rss = rss_bytes(pid)
    return None if rss is None else rss / MIB


def nvml_index(device_index: int) -> int:
    """NVML numbers GPUs in PCI order and ignores CUDA_VISIBLE_DEVICES: map a CUDA ordinal to an NVML index.

    Only plain integer lists are mapped (UUID lists are left as given); without the variable the index is kept.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not visible:
        return device_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if device_index < len(entries) and entries[device_index].isdigit():
        return int(entries[device_index])
    return device_index


def held_mib(pynvml: Any, handle: Any) -> tuple[dict[int, float], bool]:
    """MiB per pid of the processes NVML lists on the device, and whether it could list them."""
    held: dict[int, float] = {}
    listed = False
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        fn = getattr(pynvml, getter, None)
        if fn is None:
            continue
        try:
            procs = fn(handle)
        except Exception:
            continue
        listed = True
        for proc in procs:  # a process using compute and graphics is listed twice with the same memory
            if proc.usedGpuMemory is not None:
                held[int(proc.pid)] = max(held.get(int(proc.pid), 0.0), float(proc.usedGpuMemory) / MIB)
    return held, listed


def device_memory(handle_of: Callable[[Any], Any]) -> tuple[float, dict[int, float], bool] | None:
    """MiB used on the GPU that ``handle_of(pynvml)`` names, MiB per process NVML lists there, and whether it could
    list them; None without NVML or without that GPU."""
    from ..machine.fingerprint import nvml

    with nvml() as pynvml:
        if pynvml is None:
            return None
        try:
            handle = handle_of(pynvml)
            # A tenant that allocates between the two reads would show as memory no process holds: read the process
            # list before and after the device figure, and again while they differ.
            held, listed = held_mib(pynvml, handle)
            for _ in range(3):
                used = float(pynvml.nvmlDeviceGetMemoryInfo(handle).used) / MIB
                again, listed = held_mib(pynvml, handle)
                if again == held:
                    break
                held = again
        except Exception:
            return None
    return used, held, listed


def device_snapshot(device_index: int, scope: Scope) -> DeviceSnapshot | None:
    """Memory used on one GPU (CUDA ordinal) and each listed process with its owner; None without NVML or GPU."""
    found = device_memory(lambda nvml: nvml.nvmlDeviceGetHandleByIndex(nvml_index(device_index)))
    if found is None:
        return None
    used, held, listed = found
    processes = tuple(GpuProcess(pid, mib, owner_of(pid, scope), command_line(pid))
                      for pid, mib in sorted(held.items()))
    return DeviceSnapshot(used, processes, listed)


@dataclass(frozen=True)
class LeftBehind:
    """What stayed on the device between two snapshots, by who holds it."""

    ours_mib: float
    """Memory of our processes that were not there before, and the growth of ours that were."""
    unexplained_growth_mib: float
    others_growth_mib: float
    ours: tuple[GpuProcess, ...]
    others: tuple[GpuProcess, ...]

    @property
    def blamed_mib(self) -> float:
        """Memory the test is answerable for: its own live processes, and growth no live process explains."""
        return self.ours_mib + max(0.0, self.unexplained_growth_mib)


def left_behind(before: DeviceSnapshot, after: DeviceSnapshot) -> LeftBehind:
    """Attribute what `after` holds beyond `before`: our processes still alive are ours whole; growth held by
    other processes is theirs; growth of memory that no listed process holds counts against us (a context that
    outlived its process), unless NVML cannot list processes at all."""
    held_before = {p.pid: p.mib for p in before.processes}
    ours = tuple(p for p in after.processes if p.owner == "ours" and p.mib > held_before.get(p.pid, 0.0))
    others = tuple(p for p in after.processes if p.owner != "ours" and p.mib > 0)
    ours_mib = sum(p.mib - held_before.get(p.pid, 0.0) for p in ours)  # a process of ours from before: its growth
    others_growth = sum(p.mib - held_before.get(p.pid, 0.0) for p in others)
    unexplained = after.unexplained_mib - before.unexplained_mib if after.listed else 0.0
    return LeftBehind(ours_mib, unexplained, others_growth, ours, others)


def describe_processes(processes: Sequence[GpuProcess]) -> str:
    """'pid 123 (python helper.py) 512 MiB, ...' for a failure message."""
    return ", ".join(f"pid {p.pid} ({p.command}) {p.mib:.0f} MiB" for p in processes) or "none"


def as_dicts(processes: Sequence[GpuProcess]) -> list[dict[str, Any]]:
    return [{"pid": p.pid, "mib": p.mib, "owner": p.owner, "command": p.command} for p in processes]

