"""What a failed engine says: its own last error line from its log, the process status, the log's tail and where
the whole log is kept. The one place these messages are made, for isolated children and servers alike.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
import re
import signal

from ..common.inputs import read_bytes
from .base import EngineFailed
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


# --------------------------------------------------------------------------------------------------------------
# The engine's own last error, from its log

# Prefixes loggers put before each line of a traceback: vLLM "(EngineCore_DP0 pid=12) " and
# "ERROR 01-02 03:04:05 [core.py:12] ", SGLang "[2025-01-02 03:04:05 TP0] ", ANSI colours.
_LOG_PREFIXES = re.compile(
    r"^(?:\x1b\[[0-9;]*m|\([\w.-]+ pid=\d+\)\s*|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d"
    r"(?:\.\d+)?\s+\[[^\]]*\]\s?|\[\d{4}-\d\d-\d\d[^\]]*\]\s?)+"
)
# A dotted name, then ": message" or nothing. Its last part must hold an exception word after its first letter
# (`_EXCEPTION_WORD`, searched apart): written as one pattern, `[A-Z]\w*(?:Error|...)\w*` backtracks quadratically
# on a long line of words that repeat "Error" and end in punctuation (21 s for 32 KiB, and a log line has no bound).
_EXCEPTION_LINE = re.compile(r"^(?P<name>(?:[A-Za-z_]\w*\.)*[A-Z]\w*)(?::\s*(?P<message>.*))?$")
_EXCEPTION_WORD = re.compile(r"Error|Exception|Exit|Interrupt|Failure|Fault|Dead|Timeout")
_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_SEE_ABOVE = re.compile(r"see (?:the )?root cause above|see (?:the )?(?:error|logs?) above", re.IGNORECASE)
_PACKAGE_ROOT = re.compile(r"^.*/(?:site|dist)-packages/")


def _strip_prefix(line: str) -> str:
    return _LOG_PREFIXES.sub("", line.rstrip())


def last_error(tail: str) -> str | None:
    """The last Python exception line in a log tail ("ModuleNotFoundError: No module named 'uvicorn'"), or None.

    An exception that only points elsewhere ("... See root cause above.") gives way to an earlier one; an exception
    without a message (a bare `assert`) is named with the failing frame's file:line and code line, the only
    place that says what failed."""
    lines = [_strip_prefix(line) for line in tail.splitlines()]
    found: list[tuple[int, str, str]] = []
    for i, line in enumerate(lines):
        match = _EXCEPTION_LINE.match(line)
        if match and _EXCEPTION_WORD.search(match.group("name").rpartition(".")[2], 1):
            found.append((i, match.group("name"), (match.group("message") or "").strip()))
    if not found:
        return None
    chosen = next((f for f in reversed(found) if not _SEE_ABOVE.search(f[2])), found[-1])
    i, name, message = chosen
    if message:
        return f"{name}: {message}"
    for j in range(i - 1, -1, -1):
        frame = _FRAME_LINE.match(lines[j])
        if frame:
            where = f"{_PACKAGE_ROOT.sub('', frame.group('file'))}:{frame.group('line')}"
            code = lines[j + 1].strip() if j + 1 < i else ""
            code = "" if _FRAME_LINE.match(code) or set(code) <= set("^~ ") else code
            return f"{name} at {where}: {code}" if code else f"{name} at {where}"
    return name


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
