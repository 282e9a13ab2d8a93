"""One run per report path: two runs writing one report would each replace the other's file."""

from __future__ import annotations

import contextlib
import os

import pytest

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, so the report path is not guarded
    fcntl = None  # type: ignore[assignment]


class ReportLock:
    """An exclusive lock on ``REPORT.lock``, held from configure to unconfigure: two runs writing one report
    would each replace the other's file and the last writer would win in silence, so the second is refused."""

    def __init__(self, report: str) -> None:
        self.report, self.path = report, f"{report}.lock"
        self._fd: int | None = None
        if fcntl is None:
            return
        try:
            while self._fd is None:
                self._fd = self._take()
        except OSError as exc:
            raise pytest.UsageError(f"gpucompat: --gpucompat-report {report}: cannot lock {self.path}: "
                                    f"{exc.strerror or exc}") from None
        os.ftruncate(self._fd, 0)
        os.write(self._fd, f"{os.getpid()}\n".encode())

    def _take(self) -> int | None:
        """The locked file's descriptor; None when the file was replaced meanwhile (take the new one)."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise pytest.UsageError(
                f"gpucompat: {self.report} is being written by another run (pid {owner})"
            ) from None
        try:
            current = os.stat(self.path).st_ino
        except FileNotFoundError:
            current = None
        if current != os.fstat(fd).st_ino:  # the run that held it removed it between our open and our lock
            os.close(fd)
            return None
        return fd

    def release(self) -> None:
        """Remove the file while still holding it (a run that opened it meanwhile sees that and retries)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None
