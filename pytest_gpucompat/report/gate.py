"""The diff gate, composed once: the thresholds a ``--fail-on`` list asks for, checked against the reports they
judge, then the diff that decides. ``gpucompat diff`` (report/cli) and a run's ``--gpucompat-baseline``
(session/collector) both call it, so the two cannot judge the same pair of reports differently.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Sequence

from .diff import DiffResult, check_thresholds, diff_reports
from .model import Report
from .thresholds import parse_fail_on, uses_defaults


def check_fail_on(fail_on: Sequence[str], *reports: Report) -> None:
    """ValueError naming what is wrong: a ``--fail-on`` entry that does not parse, or one on a metric that neither
    the given reports nor the registry know."""
    thresholds, _ = parse_fail_on(fail_on)
    check_thresholds(thresholds, *reports)


def gate(baseline: Report, current: Report, fail_on: Sequence[str], *, allow_missing: bool,
         sources: tuple[str | None, str | None] = (None, None)) -> DiffResult:
    """The comparison the gate's exit status follows (``result.regressed``). ValueError as ``check_fail_on``."""
    thresholds, changed = parse_fail_on(fail_on)
    check_thresholds(thresholds, baseline, current)
    return diff_reports(baseline, current, thresholds, allow_missing=allow_missing, fail_on_changed=changed,
                        default_gate=uses_defaults(fail_on), sources=sources)
