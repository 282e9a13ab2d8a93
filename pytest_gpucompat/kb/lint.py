"""`gpucompat rules --lint`: which flags named by rules the installed engines really have.

Configurations copied from articles often carry flags that never existed or were removed; the
engine's own ``--help`` is the ground truth for the version installed here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..engines.registry import help_commands
from ..fingerprint import installed_packages
from .schema import Rule

_FLAG = re.compile(r"(?<![\w-])--[a-zA-Z0-9][\w-]*")


@dataclass(frozen=True)
class LintResult:
    rule_id: str
    engine: str
    checked: bool
    missing: tuple[str, ...]
    reason: str = ""


@lru_cache(maxsize=8)
def engine_flags(engine: str) -> frozenset[str] | None:
    """Flags the installed engine accepts, normalized to dashes; None when it cannot be asked."""
    flags: set[str] = set()
    for cmd in help_commands(engine):  # the engine registry says which commands list its flags
        if cmd[0] != sys.executable and shutil.which(cmd[0]) is None:
            continue
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            continue
        flags.update(_normalize(f) for f in _FLAG.findall(out.stdout + out.stderr))
    return frozenset(flags) if flags else None


def _normalize(flag: str) -> str:
    return flag.split("=", 1)[0].replace("_", "-").lower()


def lint_rules(rules: Iterable[Rule], installed: Sequence[str] | None = None) -> list[LintResult]:
    have = set(installed) if installed is not None else set(installed_packages())
    results = []
    for rule in rules:
        names = [f for f in rule.flags if f.startswith("--")]
        if not names or rule.engine is None:
            continue
        if rule.engine not in have:
            results.append(LintResult(rule.id, rule.engine, False, (), f"{rule.engine} is not installed"))
            continue
        known = engine_flags(rule.engine)
        if known is None:
            results.append(LintResult(rule.id, rule.engine, False, (), f"could not read {rule.engine} --help"))
            continue
        missing = tuple(f for f in names if _normalize(f) not in known)
        results.append(LintResult(rule.id, rule.engine, True, missing))
    return results


def format_lint(results: Sequence[LintResult]) -> str:
    lines = []
    for r in results:
        if not r.checked:
            continue
        state = "missing " + ", ".join(r.missing) if r.missing else "all flags exist"
        lines.append(f"{r.rule_id:<58} {r.engine:<13} {state}")
    skipped = sorted({r.reason for r in results if not r.checked})
    checked = sum(1 for r in results if r.checked)
    flagged = sum(1 for r in results if r.missing)
    lines.append(f"\n{checked} rules checked against installed engines, {flagged} name flags that do not exist")
    lines.extend(f"not checked: {reason}" for reason in skipped)
    return "\n".join(lines)
