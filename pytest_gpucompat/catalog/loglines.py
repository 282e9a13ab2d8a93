"""One-line forms of a failure: an exception as `Type: first line` (`exception_line`), where it was raised
(`raised_at`), and the last exception line in an engine's log tail (`last_error`), as every adapter reports them.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import linecache
import os
import re
import traceback

_HEADER_ONLY = re.compile(r"^\d+ validation errors? for \S+$")
_CAUSE_LIMIT = 600


def exception_line(exc: BaseException) -> str:
    """`Type: first line of the message`, the form every EngineFailed/EngineUnavailable message takes; a first line
    that is only a header ("1 validation error for ModelConfig") is followed by the lines naming the cause. An exception
    without a message (a bare `assert` deep in an engine) says where it was raised instead: `AssertionError at
    vllm/v1/worker/gpu/attn_utils.py:232: assert kv_cache_shape[0] == num_blocks`, as failures.last_error reads it
    from a log."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    name = type(exc).__name__
    rest = [line for line in lines[1:] if not line.startswith("For further information")]
    if first and rest and (first.endswith(":") or _HEADER_ONLY.match(first)):
        # a header that says nothing by itself ("1 validation error for ModelConfig"): the lines that name the
        # field and the cause follow it; keep them, bounded (the whole traceback stays in the engine's log)
        first = f"{first.rstrip(':')}: {'; '.join(rest[:6])}"
        if len(first) > _CAUSE_LIMIT:
            first = first[: _CAUSE_LIMIT - 1] + "…"
    if first:
        return f"{name}: {first}"
    where = raised_at(exc)
    return f"{name} at {where}" if where else name


def raised_at(exc: BaseException) -> str | None:
    """The innermost frame of ``exc``'s traceback as `package/module.py:line: source line`: the module's dotted
    name gives the path, so it reads the same from any site directory."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    if not frames:
        return None
    frame, lineno = frames[-1]
    module = str(frame.f_globals.get("__name__") or "")
    filename = frame.f_code.co_filename
    if module and module != "__main__":
        package = os.path.basename(filename) == "__init__.py"
        path = module.replace(".", "/") + ("/__init__.py" if package else ".py")
    else:
        path = os.path.basename(filename)
    source = linecache.getline(filename, lineno).strip()
    return f"{path}:{lineno}" + (f": {source[:120]}" if source else "")


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
