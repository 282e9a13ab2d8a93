"""Command text that fits the terminal: `gpucompat check`, `explain` and `diff` print no line wider than it.

The width is the terminal's (`shutil.get_terminal_size`: $COLUMNS first), or 100 columns when it is unknown (a
pipe, a CI log). A long line is wrapped at spaces and indented under its first line; a word that alone is wider
than the room left (a pytest node id, a path) is shortened in the middle with an ellipsis, so that both the test
name and its parameters' tail stay readable. JSON output never passes through here.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import shutil
import textwrap

DEFAULT_WIDTH = 100
MIN_WIDTH = 40
ELLIPSIS = "…"


def terminal_width() -> int:
    """Columns of the terminal ($COLUMNS first), DEFAULT_WIDTH when unknown, never fewer than MIN_WIDTH."""
    return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def shorten_middle(text: str, width: int) -> str:
    """`text`, or when longer than `width` its head and tail joined by an ellipsis, `width` characters in all."""
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:max(width, 0)]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[len(text) - tail:] if tail else "")


def fit_line(line: str, width: int, hanging: str = "  ") -> list[str]:
    """One line as lines of at most `width` characters: wrapped at spaces, the continuations indented `hanging`
    deeper than the line (under a list item's text for `- item` lines), over-long words shortened in the middle."""
    if len(line) <= width:
        return [line]
    body = line.lstrip(" ")
    indent = " " * min(len(line) - len(body), width // 2)
    extra = "  " if body.startswith("- ") else hanging
    subsequent = indent + extra if len(indent) + len(extra) < width // 2 else indent
    room = max(width - len(subsequent), 1)
    words = [shorten_middle(word, room) for word in body.split(" ")]
    return textwrap.wrap(" ".join(words), width, initial_indent=indent, subsequent_indent=subsequent,
                         break_long_words=False, break_on_hyphens=False, drop_whitespace=True) or [""]


def fit(text: str, width: int | None = None, hanging: str = "  ") -> str:
    """Every line of `text` fitted to `width` (default: the terminal's), the trailing newline kept."""
    width = width or terminal_width()
    ending = "\n" if text.endswith("\n") else ""
    lines = text[: len(text) - len(ending)].split("\n")
    return "\n".join(out for line in lines for out in fit_line(line, width, hanging)) + ending
