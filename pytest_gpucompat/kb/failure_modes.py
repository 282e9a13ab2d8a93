"""What kind of failure a failed cell shows: the table of ``matrices/failure_modes.yaml``, validated on load.

``gpucompat explain`` proposes a rule for a failure no rule explains; its ``failure`` and ``severity`` come from the
first entry of the table that the failure satisfies (a pattern in its text, the pytest phase it failed in). The
table is data, so that a team can teach it its own harness's words (``GPUCOMPAT_MATRICES_DIR``).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..common.errors import InputError
from ..common.inputs import load_file
from ..common.paths import matrices_dir
from .linear_regex import LinearPattern
from .load import file_stamp
from .schema import FAILURES, SEVERITIES
from .signatures import Failure, compile_pattern, signature_matches

_KEYS = {"failure", "severity", "pattern", "phase"}
_PHASES = ("setup", "call", "teardown")
DEFAULT = ("crash", "broken")
"""A failure no entry describes (or a matrices directory without the table): it broke, and nothing says more."""


@dataclass(frozen=True)
class FailureMode:
    failure: str
    severity: str
    pattern: LinearPattern | None = None
    phase: str | None = None

    def describes(self, failure: Failure, lines: Sequence[str]) -> bool:
        if self.phase is not None and failure.phase != self.phase:
            return False
        return self.pattern is None or signature_matches((self.pattern,), lines)


def table_path() -> Path:
    return matrices_dir() / "failure_modes.yaml"


def load_failure_modes(path: str | Path | None = None) -> tuple[FailureMode, ...]:
    """The table (``path``, default the matrices directory's); () when the file does not exist. Bad input is one
    ``InputError`` naming the file and the entry's field."""
    target = Path(path) if path is not None else table_path()
    return _load(str(target), file_stamp(target))


@lru_cache(maxsize=4)
def _load(source: str, stamp: Any) -> tuple[FailureMode, ...]:
    if stamp is None and not Path(source).exists():
        return ()
    data = load_file(source, "yaml") or {}
    if not isinstance(data, Mapping) or set(map(str, data)) - {"failure_modes"}:
        raise InputError(source, None, "a mapping with one key, 'failure_modes', is required")
    entries = data.get("failure_modes") or []
    if not isinstance(entries, list):
        raise InputError(source, "failure_modes", "must be a list of {failure, severity, pattern, phase}")
    return tuple(_entry(entry, source, f"failure_modes[{i}]") for i, entry in enumerate(entries))


def _entry(raw: Any, source: str, where: str) -> FailureMode:
    def fail(fld: str, problem: str) -> InputError:
        return InputError(source, f"{where}.{fld}", problem)

    if not isinstance(raw, Mapping):
        raise InputError(source, where, "must be a mapping with failure and severity")
    unknown = set(map(str, raw)) - _KEYS
    if unknown:
        raise fail(sorted(unknown)[0], "unknown key")
    for key, allowed in (("failure", FAILURES), ("severity", SEVERITIES), ("phase", _PHASES)):
        value = raw.get(key)
        if (value is not None or key != "phase") and value not in allowed:
            raise fail(key, f"'{value}' is not one of {', '.join(allowed)}")
    pattern = compile_pattern(raw["pattern"], fail, "pattern") if raw.get("pattern") is not None else None
    return FailureMode(failure=raw["failure"], severity=raw["severity"], pattern=pattern, phase=raw.get("phase"))


def classify(failures: Sequence[Failure], modes: Sequence[FailureMode]) -> tuple[str, str]:
    """(failure, severity) for a group of failures of one kind: the first entry that describes them all."""
    texts = [(f, f.lines) for f in failures]
    for mode in modes:
        if all(mode.describes(f, lines) for f, lines in texts):
            return mode.failure, mode.severity
    return DEFAULT
