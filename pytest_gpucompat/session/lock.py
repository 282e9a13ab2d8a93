"""One run per report path: two runs writing one report would each replace the other's file.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

import pytest

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock, so the report path is not guarded
    fcntl = None  # type: ignore[assignment]

_ATTEMPTS = 100  # a lock file replaced this many times in a row: something other than a run is at work


class ReportLock:
    """An exclusive lock on ``REPORT.lock``, held from configure to unconfigure: two runs writing one report
    would each replace the other's file and the last writer would win in silence, so the second is refused.

    The lock file may sit in a shared directory, so it is opened without following a symlink and without blocking
    (a FIFO), must be a regular file, and is only written when this run created it: a file found there (another
    user's, or a run's that crashed) is locked, then removed and made anew. What the file holds is only shown as a
    pid, or escaped and shortened."""

    def __init__(self, report: str) -> None:
        self.report, self.path = report, f"{report}.lock"
        self._fd: int | None = None
        if fcntl is None:
            return
        try:
            for _ in range(_ATTEMPTS):
                self._fd = self._take()
                if self._fd is not None:
                    break
            else:
                raise OSError(errno.EAGAIN, "it keeps being replaced by another process")
            os.write(self._fd, f"{os.getpid()}\n".encode())
        except OSError as exc:
            raise pytest.UsageError(f"gpucompat: --gpucompat-report {report}: cannot lock {self.path}: "
                                    f"{exc.strerror or exc}") from None

    def _refuse(self, problem: str) -> pytest.UsageError:
        return pytest.UsageError(f"gpucompat: --gpucompat-report {self.report}: {self.path} {problem}; "
                                 f"refusing to use it (remove it if no run holds it)")

    def _open(self) -> tuple[int, bool] | None:
        """(descriptor, created by us), the descriptor a regular file's; None when the name vanished meanwhile."""
        flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | flags, 0o644), True
        except FileExistsError:
            pass
        try:
            fd = os.open(self.path, os.O_RDONLY | flags)  # never written: not ours
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise self._refuse("is a symlink") from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise self._refuse("is not a regular file")
        return fd, False

    def _take(self) -> int | None:
        """The locked file's descriptor, a file this run created; None when the file was replaced meanwhile or was
        found there (then it is removed while locked: take a new one)."""
        opened = self._open()
        if opened is None:
            return None
        fd, created = opened
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            st = os.fstat(fd)
            owner = _pid_text(os.pread(fd, 64, 0))
            os.close(fd)
            if st.st_uid != os.geteuid():
                raise pytest.UsageError(
                    f"gpucompat: {self.report} is locked by a process of another user (uid {st.st_uid}, "
                    f"pid {owner}) through {self.path}") from None
            raise pytest.UsageError(
                f"gpucompat: {self.report} is being written by another run (pid {owner})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        if not self._same_file(fd):  # the run that held it removed it between our open and our lock
            os.close(fd)
            return None
        if not created:  # a file found there: ours to remove (we hold its lock), never to write into
            try:
                os.unlink(self.path)
            except OSError as exc:
                os.close(fd)
                raise self._refuse(f"cannot be replaced ({exc.strerror or exc})") from None
            os.close(fd)
            return None
        return fd

    def _same_file(self, fd: int) -> bool:
        """Whether ``self.path`` still names the file open as ``fd``."""
        try:
            current = os.lstat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        """Remove the file while still holding it (a run that opened it meanwhile sees that and retries); a file
        that replaced it meanwhile is not ours and stays."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            if self._same_file(self._fd):
                os.unlink(self.path)
        os.close(self._fd)
        self._fd = None


def _pid_text(raw: bytes) -> str:
    """What a lock file holds, as shown in a message: a pid as is, anything else escaped and shortened."""
    text = raw.decode("utf-8", "replace").strip()
    if text.isdigit() and text.isascii() and len(text) <= 10:
        return text
    if not text:
        return "unknown"
    shown = ascii(text[:32])[1:-1]
    return f"unreadable: '{shown}{'...' if len(text) > 32 else ''}'"
