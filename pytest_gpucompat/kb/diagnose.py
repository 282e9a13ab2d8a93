"""``gpucompat explain --log FILE``: a raw engine log or traceback from production, answered with the known issue.

A user's log is not a report cell: there is no fingerprint unless one is given (``--env``, ``--collect-env``) and no
engine unless the log or the user names it. The same matching as a failed cell's (``kb.signatures``) runs on the
log's end (where the error is), with the stated facts ruling rules out where they contradict them. Only the end is
read, ``TAIL_BYTES`` at most, whatever the file's size: a 100 MB log costs the same as a 1 KB one.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import BinaryIO

from ..catalog.registry import descriptor, kb_engine_names
from ..common.errors import InputError
from ..common.inputs import NotRegularFileError, open_regular
from ..machine.fingerprint import Fingerprint
from .schema import Rule
from .signatures import MAX_TEXT_CHARS, Failure, explaining_rules

TAIL_BYTES = 4 * MAX_TEXT_CHARS  # UTF-8 of the characters failure_lines searches, with room for wide ones
_TEXT_CONTROLS = frozenset("\t\n\r\f\b\x1b")  # what a terminal log holds besides text (ANSI colours, progress bars)


def read_log_tail(path: str, stdin: BinaryIO | None = None) -> tuple[str, int]:
    """The end of the log at ``path`` (``-``: ``stdin``, read to its end keeping only the tail) and its size."""
    try:
        if path == "-":
            assert stdin is not None
            tail, size = b"", 0
            while chunk := stdin.read(1 << 20):
                size += len(chunk)
                tail = (tail + chunk)[-TAIL_BYTES:]
        else:
            with open_regular(path) as handle:
                size = os.fstat(handle.fileno()).st_size
                handle.seek(max(0, size - TAIL_BYTES))
                tail = handle.read(TAIL_BYTES)
    except FileNotFoundError:
        raise InputError(path, None, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, None, "is a directory, not a file") from None
    except NotRegularFileError as exc:
        raise InputError(path, None, str(exc)) from None
    except OSError as exc:
        raise InputError(path, None, f"cannot read: {exc.strerror or exc}") from None
    # NUL runs are a log's hole, not its end: a file truncated under a writer that does not append (logrotate's
    # copytruncate) reads as zeros up to the writer's offset. What is left must read as text, or it is no log.
    text = tail.replace(b"\0", b"").decode("utf-8", errors="replace")
    if not text.strip() or sum(1 for c in text if c == "\ufffd" or (c < " " and c not in _TEXT_CONTROLS)
                               or c == "\x7f") > len(text) // 100:
        raise InputError("<stdin>" if path == "-" else path, None, "not a text log (its last "
                         f"{len(tail):,} bytes are binary, not text)")
    return text, size


def diagnose(rules: Sequence[Rule], log: str, fingerprint: Fingerprint | None = None,
             engine: str | None = None) -> tuple[Rule, ...]:
    """The rules whose signature the log's end matches and that no stated fact contradicts; documents-only rules
    (unconfirmed claims) are left out: they name no known issue. An engine not given is the one the log names (its
    package in a traceback's paths, ``vllm/...``, ``sglang/...``, ``tensorrt_llm/...``); a log that names none or
    several is judged for each, since an engine not known is not a contradiction."""
    candidates: tuple[str | None, ...] = (engine,) if engine else engines_named(log) or (None, *kb_engine_names())
    found: dict[str, Rule] = {}
    for candidate in candidates:
        failure = Failure(fingerprint=fingerprint or Fingerprint(), engine=candidate,
                          params=dict((fingerprint.params if fingerprint else {}) or {}), log_tail=log)
        for rule in explaining_rules(rules, failure):
            if rule.confidence != "documents":
                found.setdefault(rule.id, rule)
    return tuple(found.values())


def engines_named(log: str) -> tuple[str, ...]:
    """The engines whose package a log names as a module path (``vllm/``, ``vllm.``), in the registry's order."""
    named = []
    for name in kb_engine_names():
        d = descriptor(name)
        modules = {p.replace("-", "_") for p in (d.packages if d else (name,))}
        if any(f"{m}/" in log or f"{m}." in log for m in modules):
            named.append(name)
    return tuple(named)


def format_diagnosis(source: str, size: int, found: Sequence[Rule]) -> str:
    read = f"{source}: the last {min(size, TAIL_BYTES):,} of {size:,} bytes read"
    if not found:
        return (f"{read}\nnot known: no rule's signature matches this log. If it is an incompatibility, "
                "`gpucompat explain REPORT` on a run that hit it proposes a rule.")
    lines = [read]
    for rule in found:
        lines.append(f"- [{rule.id}] {rule.summary} ({rule.severity}, {rule.confidence}"
                     f"{', ' + rule.engine if rule.engine else ''})")
        if rule.workaround:
            lines.append(f"    workaround: {rule.workaround}")
        if rule.sources:
            lines.append("    sources: " + "; ".join(s.ref for s in rule.sources[:3]))
    return "\n".join(lines)
