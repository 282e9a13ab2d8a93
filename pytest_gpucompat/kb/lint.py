"""`gpucompat rules --lint`: the flags, environment variables and settings rules name, checked against every
release of the engine the rule covers, offline (``kb.history``).

Configurations copied from articles carry flags that never existed, were removed or came later than the rule's range
says; a workaround that names a flag its release lacks sends a user from one error to the next. For each rule naming
something of an engine that has a release history:

- a flag or variable listed in ``flags`` must exist in every release of the rule's range (its ``when.packages``
  specifier on the engine, all releases without one); listed as ``{flag: NAME, versions: SPEC}`` it must exist in
  exactly the releases SPEC accepts, which checks both sides of each bound;
- every flag and engine variable the workaround or the summary names must be listed in ``flags``;
- every engine setting in ``when.params`` must exist in every release of the range, and each value the rule names
  must be one of its choices where the release states them;
- the range must agree with the rule's own ``flags`` entry for a setting it conditions on (kb.windows), and, for a
  rule with ``bounds``, equal the window its facts and code anchors give, in both directions (kb.windows).

Everything is read from the histories' runs, once per rule: lint time grows linearly with the history's size.

An engine without a history falls back to the installed engine's ``--help`` (flags only).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from ..catalog.registry import descriptor, help_commands, normalize_dtype
from ..common.textfit import fit
from ..common.versions import normalize_package
from ..machine.stack import installed_packages
from .history import History, histories, is_env_name, load_history, norm_flag
from .schema import CONFIDENCES, FlagFact, Rule
from .windows import flag_contradictions, rule_span, window_problems

_FLAG = re.compile(r"(?<![\w-])--[a-zA-Z0-9][\w-]*")


@dataclass(frozen=True)
class LintResult:
    rule_id: str
    engine: str
    checked: bool
    problems: tuple[str, ...] = ()
    reason: str = ""
    against: str = ""  # "history" or "--help"


def lint_rules(rules: Iterable[Rule], installed: Sequence[str] | None = None,
               known: Mapping[str, History] | None = None) -> list[LintResult]:
    """One result per rule that names a flag, an engine variable or an engine setting of an engine."""
    found = dict(known) if known is not None else histories()
    results = []
    for rule in rules:
        if rule.engine is None:
            continue
        history = found.get(rule.engine)
        result: LintResult | None = None
        if history is not None:
            result = _lint_against_history(rule, history)
        else:
            names = [f for f in rule.flags if f.startswith("--")]
            if names:
                result = _lint_against_help(rule, names, installed)
        bounded = _lint_bounds(rule, history if history is not None else stack_history(rule.engine, found))
        if bounded is not None:
            result = bounded if result is None else LintResult(
                rule.id, result.engine, True, result.problems + bounded.problems, against=bounded.against)
        if result is not None:
            results.append(result)
    return results


def stack_history(engine: str, known: Mapping[str, History] | None = None) -> History | None:
    """An engine's release facts read from its release notes (``<engine>-stack.json``), where it has no code
    history: the windows of its rules are computed from them."""
    key = f"{engine}-stack"
    if known is not None and key in known:
        return known[key]
    return load_history(key)


def _lint_bounds(rule: Rule, history: History | None) -> LintResult | None:
    if rule.bounds is None:
        return None
    engine = rule.engine or ""
    if history is None:
        return LintResult(rule.id, engine, True, (f"bounds: {engine} has no release history to compute the "
                                                  f"window from",), against="history")
    return LintResult(rule.id, engine, True, tuple(window_problems(rule, history)), against="history")


def named_in_text(rule: Rule) -> list[str]:
    """The flags (``--x``) and engine variables (``VLLM_X``) the rule's workaround and summary name."""
    found = descriptor(rule.engine) if rule.engine else None
    prefixes = found.env_prefixes if found is not None else ()
    text = " ".join(t for t in (rule.workaround, rule.summary) if t)
    names = [norm_flag(f) for f in _FLAG.findall(text)]
    if prefixes:
        alternatives = "|".join(map(re.escape, prefixes))
        names += re.findall(rf"\b(?:{alternatives})[A-Z0-9_]+\b", text)
    return list(dict.fromkeys(names))


def _lint_against_history(rule: Rule, history: History) -> LintResult | None:
    settings = [name for name, _ in rule.when.params if history.dest_known(name)]
    facts = [f for f in rule.flag_facts if f.name.startswith("--") or is_env_name(f.name)]
    listed = {norm_flag(t) for f in rule.flag_facts for t in _FLAG.findall(f.name)} | {
        f.name for f in rule.flag_facts if is_env_name(f.name)}
    unlisted = [n for n in named_in_text(rule) if n not in listed]
    if not (settings or facts or unlisted):
        return None
    span = rule_span(rule, history)
    if span is None:
        return LintResult(rule.id, rule.engine or "", False, reason=f"the rule is about {history.engine} absent")
    problems = [f"the workaround or summary names {n}: list it in flags (with versions where it is not in every "
                f"release the rule covers)" for n in unlisted]
    problems += flag_contradictions(rule, history, span)
    for fact in facts:
        problems += _fact_problems(fact, span, history)
    scoped = {attrs.get("dest") for f in rule.flag_facts if (f.versions is not None or f.nowhere)
              and f.name.startswith("--") and "=" not in f.name for attrs in _all_attrs(history, f.name)}
    stated = {(attrs.get("dest"), f.name.partition("=")[2].lower()) for f in rule.flag_facts if "=" in f.name
              for attrs in _all_attrs(history, f.name)}
    for name, cond in rule.when.params:
        if cond.values is not None and all(v is None for v in cond.values):
            continue  # "not set" holds in a release without the setting too
        if name in settings and name not in scoped:
            values = [v for v in cond.values or () if not (isinstance(v, str) and (name, v.lower()) in stated)]
            problems += _setting_problems(name, values, span, history)
    return LintResult(rule.id, rule.engine or "", True, tuple(problems), against="history")


def _all_attrs(history: History, flag: str) -> list[Mapping[str, object]]:
    return [attrs for _, _, attrs in history.runs.get("flags", {}).get(norm_flag(flag), ())]


def _kind(name: str) -> str:
    return "flags" if name.startswith("-") else "env"


def _has(history: History, name: str, i: int) -> bool:
    """Release ``i`` has the flag or variable; ``--flag=value``: the flag, and it accepts the value (when the
    release states its choices)."""
    flag, eq, value = name.partition("=")
    attrs = history.item(_kind(flag), flag, i)
    if attrs is None:
        return False
    choices = attrs.get("choices")
    return not (eq and isinstance(choices, list) and _norm_value(flag, value) not in
                {_norm_value(flag, str(c)) for c in choices})


def _fact_problems(fact: FlagFact, span: list[int], history: History) -> list[str]:
    have = [i for i in history.in_range(None) if _has(history, fact.name, i)]
    where = history.ranges(have) or "none"
    what = "accepts it" if "=" in fact.name else "has it"
    if fact.nowhere:
        return [f"{fact.name}: the rule says no {history.engine} release {what}; {where} do"] if have else []
    if fact.versions is None:
        present = set(have)
        missing = [i for i in span if i not in present]
        if missing:
            return [f"{fact.name}: {history.engine} {history.ranges(missing)} (which the rule covers) lacks it; "
                    f"{where} {what}"]
        return []
    stated = set(history.in_range(fact.versions))
    if stated != set(have):
        return [f"{fact.name}: the rule says {history.engine} {fact.versions} {what}; {where} do"]
    return []


def _norm_value(name: str, value: str) -> str:
    """A value as the engine takes it: dtypes by their one name (``bf16`` is ``bfloat16``), others lower-cased."""
    return normalize_dtype(value) if name.lstrip("-").replace("_", "-") == "dtype" else value.lower()


def _setting_problems(name: str, values: Sequence[object], span: list[int], history: History) -> list[str]:
    missing = [i for i in span if history.flag_for_dest(name, i) is None]
    problems = []
    if missing:
        problems.append(f"setting {name} does not exist in {history.engine} {history.ranges(missing)}, which the "
                        f"rule covers (it exists in {history.dest_where(name)})")
    for value in values:
        if not isinstance(value, str):
            continue
        refused = []
        for i in span:
            found = history.flag_for_dest(name, i)
            choices = found[1].get("choices") if found else None
            if isinstance(choices, list) and _norm_value(name, value) not in {_norm_value(name, str(c))
                                                                                 for c in choices}:
                refused.append(i)
        if refused:
            problems.append(f"{value!r} is not a choice of {name} in {history.engine} {history.ranges(refused)}")
    return problems


def _lint_against_help(rule: Rule, names: list[str], installed: Sequence[str] | None) -> LintResult:
    engine = rule.engine or ""
    have = set(installed) if installed is not None else set(installed_packages())
    if engine not in have:
        return LintResult(rule.id, engine, False, reason=f"{engine} has no release history and is not installed")
    flags = engine_flags(engine)
    if flags is None:
        return LintResult(rule.id, engine, False, reason=f"could not read {engine} --help")
    missing = [f for f in names if norm_flag(f) not in flags]
    return LintResult(rule.id, engine, True, tuple(f"{f} is not in the installed {engine}'s --help" for f in missing),
                      against="--help")


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
        flags.update(norm_flag(f) for f in _FLAG.findall(out.stdout + out.stderr))
    return frozenset(flags) if flags else None


def bounds_summary(rules: Iterable[Rule], known: Mapping[str, History] | None = None) -> str:
    """How many upstream / verified rules about an engine have a computed window (facts or code anchors), and
    against how many releases each engine's windows were computed."""
    found = dict(known) if known is not None else histories()
    about = [r for r in rules if r.engine is not None and r.confidence in CONFIDENCES[1:]]
    bounded = [r for r in about if r.bounds is not None]
    per_engine = []
    for engine in sorted({r.engine for r in bounded if r.engine}):
        history = found.get(engine) or stack_history(engine, found)
        n = sum(1 for r in bounded if r.engine == engine)
        releases = f"{sum(1 for x in history.releases if x.read)} releases" if history else "no history"
        per_engine.append(f"{engine} {n} ({releases})")
    justified = sum(1 for r in bounded if r.bounds is not None and (r.bounds.narrower or r.bounds.unknown))
    typed = sorted(r.id for r in about if r.bounds is None and _typed_range(r))
    shown = ", ".join(typed[:5]) + (", ..." if len(typed) > 5 else "")
    return (f"{len(bounded)} of {len(about)} upstream/verified engine rules have a window computed from the released "
            f"code or release notes: {', '.join(per_engine) or 'none'}; {justified} of them with a bound narrower "
            f"than the window or over releases that state no fact, said why; {len(typed)} with a typed release range "
            f"that neither a window nor a scoped flag holds"
            + (f" ({shown}; `gpucompat rules ID` shows one)" if typed else ""))


def _typed_range(rule: Rule) -> bool:
    """Whether the rule bounds its own engine's releases (a ``when.packages`` range on the engine's package) with
    nothing to hold the range to: no bounds, and no flag entry scoped to releases (lint holds those ranges)."""
    engine = normalize_package(rule.engine or "")
    scoped = any(f.versions is not None for f in rule.flag_facts)
    return not scoped and any(normalize_package(name) == engine and spec is not None and str(spec)
                              for name, spec in rule.when.packages)


def format_lint(results: Sequence[LintResult], known: Mapping[str, History] | None = None,
                width: int | None = None, rules: Sequence[Rule] | None = None) -> str:
    found = dict(known) if known is not None else histories()
    lines = []
    for r in results:
        for problem in r.problems:
            lines.append(fit(f"{r.rule_id} ({r.engine}): {problem}", width))
    checked = [r for r in results if r.checked]
    flagged = sum(1 for r in results if r.problems)
    against = "; ".join(f"{h.engine} {h.span()} ({sum(1 for x in h.releases if x.read)} releases)"
                        for h in found.values())
    lines.append(fit(f"{len(checked)} rules checked against the engines' release history ({against or 'none'}) or "
                     f"an installed engine's --help: {flagged} with problems", width))
    lines.extend(fit(f"not checked: {reason} ({n} rules)", width)
                 for reason, n in sorted(Counter(r.reason for r in results if not r.checked).items()))
    if rules is not None:
        lines.append(fit(bounds_summary(rules, found), width))
    return "\n".join(lines)
