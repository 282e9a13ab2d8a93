"""One error type for bad input, so every entry point can print one line and exit 2 instead of a traceback."""

from __future__ import annotations


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
