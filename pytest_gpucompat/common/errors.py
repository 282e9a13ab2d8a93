"""One error type for bad input, so every entry point can print one line and exit 2 instead of a traceback.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def visible(text: str, keep: str = "\n\t") -> str:
    """``text`` with its control characters (ANSI escapes, carriage returns, bells, C1 codes) and lone surrogates
    written as ``\\u001b``-style escapes, so that text from a file or a log cannot move the cursor, recolour or
    clear a terminal, or hide itself in Markdown. The characters in ``keep`` (newline and tab: a block printed on
    purpose) stay; the escape is JSON's own, so a JSON document stays valid."""
    return _CONTROL.sub(lambda m: m.group() if m.group() in keep else f"\\u{ord(m.group()):04x}", text)


class InputError(Exception):
    """Malformed user input: a rule file, a fingerprint, a matrix. The message names the file and the field."""

    def __init__(self, source: str, field: str | None, problem: str, rule_id: str | None = None) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        self.rule_id = rule_id
        where = source
        if rule_id:
            where += f": rule '{rule_id}'"
        if field:
            where += f": field '{field}'"
        super().__init__(f"{where}: {problem}")
