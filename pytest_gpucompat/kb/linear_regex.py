"""Regular expressions that match in time linear in the text, whatever their shape: RE2 (``google-re2``).

A signature is user input run over engine output. Python's ``re`` backtracks: a pattern with no repeat at all,
a chain of alternations (``(?:x|x)`` forty times, then ``Q``), tries 2**40 ways on a 60-character line, and no shape
check can prove every pattern safe. RE2 compiles a pattern to an automaton and matches without backtracking, in time
proportional to the line times the pattern, so no pattern can make a search hang. What it does not accept
(backreferences, lookarounds, a repeat bound above 1000) is refused on load with RE2's own reason. ``\\d``, ``\\w``,
``\\s`` and ``\\b`` are ASCII classes in RE2, as in the logs they are written for.

A signature is searched line by line, never across lines. RE2's cost is mostly the call, not the text, so the lines
are searched at once: joined by newlines (``joined``), with ``^`` and ``$`` at each line's ends (``(?m)``) and no
part of the pattern able to match a newline (RE2's ``never_nl``), which finds what a search of each line finds.

RE2 is imported when the first pattern is compiled (a knowledge base with signatures), never by the plugin alone.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

MAX_PROGRAM_BYTES = 32 << 20
"""The memory RE2 may use for one pattern, its automaton's cache included. With RE2's default (8 MiB) the automaton of
``[ab]*a[ab]{999}Q`` outgrows its cache and a search of 64 KiB of log takes 1 s instead of 50 ms; what a pattern
really uses is a few MiB. A pattern that needs more to compile is refused on load."""
MAX_PROGRAM_SIZE = 2000
"""The most instructions a compiled pattern may have: RE2's time is linear in the text, times a factor that grows
with the pattern's size (``.*a.{999}Q``: 8,006 instructions, 125 ms on 64 KiB of log). At 2,000 a search of the
most text a signature meets takes tens of milliseconds; the shipped signatures have at most 78."""


class PatternError(ValueError):
    """A pattern RE2 refuses; the message is its reason, as one line."""


@dataclass(frozen=True)
class LinearPattern:
    """One compiled pattern. ``search`` says whether it occurs in a line, or in any of the lines ``joined`` makes
    (no match object: a signature identifies a failure, it extracts nothing). Equal and hashed by its text, so
    rules stay comparable."""

    pattern: str
    _compiled: Any = field(compare=False, repr=False)

    def search(self, text: str | bytes) -> bool:
        data = text if isinstance(text, bytes) else text.encode("utf-8", "replace")
        return self._compiled.search(data) is not None


def joined(lines: Iterable[str]) -> bytes:
    """Lines as one text a LinearPattern searches line by line: UTF-8, joined by newlines (a lone surrogate, from
    text decoded with surrogateescape, becomes ``?``)."""
    return "\n".join(lines).encode("utf-8", "replace")


_OPTIONS: Any = None


def compile_linear(text: str) -> LinearPattern:
    """``text`` compiled by RE2; PatternError (one line, RE2's reason) for what it does not accept."""
    global _OPTIONS
    import re2

    if _OPTIONS is None:
        options = re2.Options()
        options.log_errors = False  # RE2 would print each refusal on stderr itself
        options.never_capture = True  # groups only group: nothing is extracted, the automaton stays small
        options.never_nl = True  # a match never spans two lines of a joined text
        options.max_mem = MAX_PROGRAM_BYTES
        _OPTIONS = options
    try:
        compiled = re2.compile(b"(?m)" + text.encode("utf-8"), _OPTIONS)
    except re2.error as exc:
        raise PatternError(_reason(exc)) from None
    except (TypeError, ValueError, OverflowError) as exc:  # a text RE2's bindings cannot take (a lone surrogate)
        raise PatternError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    size = _program_size(compiled)
    if size > MAX_PROGRAM_SIZE:
        raise PatternError(f"it compiles to {size} instructions, more than {MAX_PROGRAM_SIZE}: a search of a long log "
                           "could take seconds (large repeat counts multiply a pattern's size)")
    return LinearPattern(text, compiled)


def _program_size(compiled: Any) -> int:
    """The compiled program's size, forward or reverse, as RE2 counts it (0 where the bindings do not say)."""
    regexp = getattr(compiled, "_regexp", None)
    sizes = [getattr(regexp, name, lambda: 0)() for name in ("ProgramSize", "ReverseProgramSize")]
    return max(size for size in sizes if isinstance(size, int))


def _reason(exc: Exception) -> str:
    """RE2's reason as text: its bindings give it as bytes."""
    raw = exc.args[0] if exc.args else exc
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return " ".join(text.split()) or "not accepted by RE2"
