"""What a failed engine says: its own last error line from its log, the process status, the log's tail and where
the whole log is kept. The one place these messages are made, for isolated children and servers alike.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
import signal

from ..catalog.base import EngineFailed
from ..catalog.loglines import last_error
from ..common.inputs import read_bytes
from .processes import keep_log

LOG_TAIL_LINES = 40


def log_tail(path: str | os.PathLike[str] | None, n: int = LOG_TAIL_LINES, max_bytes: int = 256 * 1024) -> str:
    """The last `n` lines of a log file (reading at most `max_bytes` from its end); "" when it does not exist."""
    if path is None:
        return ""
    try:  # the bounded reader: a log replaced by a FIFO or a device is no log, not a wait
        data = read_bytes(path, max_bytes, part="tail")
    except OSError:
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:]) if n > 0 else ""


def failure_reason(status: str, tail: str) -> str:
    """What a failed cell says: the engine's own last error with the process status after it, or the status."""
    error = last_error(tail)
    return f"{error} ({status})" if error and error not in status else status


def exit_status(code: int | None, who: str = "engine process") -> str:
    """`engine process died: SIGSEGV`, `server exited with status 1`, from a return code (negative: a signal)."""
    if code is None:
        return f"{who} stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"{who} died: {name}"
    return f"{who} exited with status {code}"


def engine_failed(status: str, log_path: str | os.PathLike[str] | None, *, with_error: bool = True) -> EngineFailed:
    """The EngineFailed for a failure seen in `log_path`: its reason (the log's last error when `with_error`), its
    tail, and the log kept past the end of the run."""
    tail = log_tail(log_path)
    keep_log(log_path)
    reason = failure_reason(status, tail) if with_error else status
    return EngineFailed(reason, log_tail=tail, log_path=str(log_path) if log_path is not None else None)


def failure_text(what: str, exc: EngineFailed) -> str:
    """A failed cell's message: `<what> failed: <reason>`, then where the log is kept and its last lines."""
    where = f"log {exc.log_path}" if exc.log_path else "log"
    text = f"{what} failed: {exc.message}"
    if exc.log_tail:
        return f"{text}\n--- {where}, last lines ---\n{exc.log_tail}"
    return f"{text}\n--- {where} ---" if exc.log_path else text
