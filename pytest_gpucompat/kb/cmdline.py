"""``gpucompat check --args "vllm serve ..." [--to vllm==X]``: will this command line still work on that release?

Each flag and value of the user's own command line is checked against the engine's release history (``kb.history``)
for the release installed (or the fingerprint's) and the target: a flag the release does not know (removed, renamed,
not yet added), a value that is not one of its choices, an abbreviation argparse only accepts while no other flag
shares the prefix, a deprecated flag, and the defaults that changed between the two releases. The target fingerprint
(the engine at the target release, the packages it pins exactly at their pinned versions, the command line's
settings as parameters) then goes through the knowledge base like any other: an upgrade check before the upgrade.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..catalog.registry import descriptor
from ..common.errors import InputError
from ..common.versions import normalize_package, parse_version
from ..machine.fingerprint import Fingerprint
from .history import History, load_history, norm_flag
from .launch import MAX_COMMAND_CHARS, launch_of, words_of

_NO_VALUE = {"store_true", "store_false", "store_const", "BooleanOptionalAction", "count", "help", "version",
             "append_const"}
_MAX_DEFAULTS = 12


@dataclass(frozen=True)
class Given:
    """One flag as the user wrote it, with its value (None: none given)."""

    written: str
    value: str | None


@dataclass(frozen=True)
class FlagCheck:
    given: Given
    flag: str  # the release's own spelling, or the written one normalized when unknown
    problems: tuple[str, ...] = ()  # what breaks on the target
    notes: tuple[str, ...] = ()  # what a user should know but does not break

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class CommandCheck:
    engine: str
    current: str | None  # the release installed here (or the fingerprint's); None: unknown
    target: str | None  # the release checked against; None: not known, so no flag was checked
    flags: tuple[FlagCheck, ...]
    defaults_changed: tuple[tuple[str, Any, Any], ...] = ()  # flags not given whose default differs
    settings: Mapping[str, Any] = field(default_factory=dict, hash=False)  # dest -> value, for the KB
    assumed: tuple[str, ...] = ()  # what the target fingerprint assumes ("torch 2.13.0, pinned by vllm 0.34.0")
    unchecked: str | None = None  # why the flags were not checked against a release (its settings still read)
    env: Mapping[str, str] = field(default_factory=dict, hash=False)  # variables the command line sets

    @property
    def broken(self) -> bool:
        return any(not f.ok for f in self.flags)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "current": self.current, "target": self.target, "broken": self.broken,
                "flags": [{"written": f.given.written, "value": f.given.value, "flag": f.flag,
                           "problems": list(f.problems), "notes": list(f.notes)} for f in self.flags],
                "defaults_changed": [{"flag": n, "current": a, "target": b} for n, a, b in self.defaults_changed],
                "settings": dict(self.settings),
                "assumed": list(self.assumed), "unchecked": self.unchecked, "env": dict(self.env)}


def engine_of(argv: Sequence[str]) -> str | None:
    """The engine whose server or tool the command line starts (``kb.launch``), else None."""
    return launch_of(argv).engine


def split_args(text: str, source: str = "--args") -> list[str]:
    """The words of a pasted command line (``kb.launch.words_of``: quoting, ``\\`` continuations, ``$`` prompts)."""
    if len(text) > MAX_COMMAND_CHARS:
        raise InputError(source, None, f"a command line of {len(text):,} characters (at most {MAX_COMMAND_CHARS:,})")
    try:
        return words_of(text)
    except ValueError as exc:
        raise InputError(source, None, f"not a command line: {exc}") from None


def parse_target(text: str, engine: str | None) -> tuple[str | None, str]:
    """``vllm==0.34.0`` or ``0.34.0`` -> (engine or None, version)."""
    name, sep, version = text.partition("==")
    if not sep:
        name, version = "", text
    try:
        parse_version(version)
    except ValueError as exc:
        raise InputError("--to", None, f"{exc} (write ENGINE==VERSION, e.g. vllm==0.26.0)") from None
    if name.strip():
        try:
            found = descriptor(name.strip())
        except ValueError as exc:
            raise InputError("--to", None, str(exc)) from None
        if found is None or (engine is not None and found.name != engine):
            raise InputError("--to", None, f"names {name.strip()}, but the command line starts {engine}")
        return found.name, version.strip()
    return engine, version.strip()


def check_command(argv: Sequence[str], engine: str, current: str | None, target: str | None) -> CommandCheck:
    """Check ``argv`` against ``target`` (default: ``current``) in ``engine``'s history.

    ``argv`` is the whole command line as pasted (``kb.launch`` takes the launcher's words off: ``python -m``,
    variables, docker's options). Where no release can be checked (the engine has no flag history, the release is
    not known or not in it), the flags are not judged but the settings are still read, so the knowledge base can
    judge them: a report that names no version still says ``--quantization awq``."""
    launch = launch_of(argv)
    words = launch.args if launch.command is not None or launch.image is not None else tuple(argv)
    current = current or launch.image_version
    history = load_history(engine)
    goal = target or current
    why = _unchecked(history, engine, goal, target)
    if why is not None or history is None or goal is None:
        settings = {**generic_settings(words, engine), **launch.settings}
        return CommandCheck(engine, current, goal, (), settings=settings, unchecked=why, env=dict(launch.env))
    t = _index(history, goal, "--to" if target else "installed")
    c = history.index_of(current) if current is not None else None
    if c is not None and not history.releases[c].read:
        c = None
    underscores = getattr(descriptor(engine), "cli_underscores", False)
    checks = [_check_flag(g, history, t, c, underscores) for g in given_flags(words, history, t)]
    settings = dict(generic_settings(words, engine, positional_only=True))
    for fc in checks:
        attrs = history.item("flags", fc.flag, t) if fc.ok else None
        if attrs and isinstance(attrs.get("dest"), str):
            settings[str(attrs["dest"])] = _value(fc.given.value, attrs)
    changed: list[tuple[str, Any, Any]] = []
    if c is not None and c != t:
        given = {fc.flag for fc in checks}
        before, after = history.flags_at(c), history.flags_at(t)
        for name in sorted(set(before) & set(after) - given):
            a, b = before[name].get("default"), after[name].get("default")
            if a != b:
                changed.append((name, a, b))
    return CommandCheck(engine, current, goal, tuple(checks), tuple(changed), settings, env=dict(launch.env))


def _unchecked(history: History | None, engine: str, goal: str | None, target: str | None) -> str | None:
    """Why the flags cannot be checked against a release, or None. A release named with ``--to`` that the history
    lacks stays an error (the user asked for it); the installed or stated one only loses the flag check."""
    if history is None:
        return f"{engine} has no release history of its flags: flags not checked, settings read as written"
    if goal is None:
        return f"the {engine} release is not known: flags not checked (name it with --to {engine}==X)"
    if target is not None:
        return None
    i = history.index_of(goal)
    if i is None:
        return f"{engine} {goal} is not in the release history ({history.span()}): flags not checked"
    if not history.releases[i].read:
        return f"{engine} {goal} could not be read: flags not checked"
    return None


def generic_settings(words: Sequence[str], engine: str, positional_only: bool = False) -> dict[str, Any]:
    """The settings a command line names, read without a release's flags: ``--name value`` / ``--name=value`` as
    ``name`` (dashes as underscores, the engine's aliases resolved: ``-tp 2`` is ``tensor_parallel_size``), a
    switch as True, and the model (``vllm serve MODEL``'s positional, ``--model``, ``--model-path``) as ``model``.
    ``positional_only``: only the model, where the release's own flags give the rest."""
    found = descriptor(engine)
    aliases = found.setting_aliases if found is not None else {}
    settings: dict[str, Any] = {}
    i, first_positional = 0, True
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-" or _is_number(word):
            if first_positional and not positional_only and "model" not in settings:
                settings["model"] = word
            elif first_positional and positional_only:
                settings.setdefault("model", word)
            first_positional = False
            continue
        first_positional = False
        name, eq, value = word.partition("=")
        key = name.lstrip("-").replace("-", "_")
        if not key:
            continue
        text: str | None
        if eq:
            text = value
        elif i < len(words) and (not words[i].startswith("-") or _is_number(words[i])):
            text = words[i]
            i += 1
        else:
            text = None
        key = aliases.get(key, key)
        if key in ("model_path", "model_dir", "checkpoint_dir", "engine_dir"):
            key = "model" if key == "model_path" or "model" not in settings else key
        if positional_only and key != "model":
            continue
        settings[key] = _value(text, {}) if text is None or text.lower() not in _SWITCH_WORDS \
            else _SWITCH_WORDS[text.lower()]
    return settings


_SWITCH_WORDS = {"enable": True, "disable": False, "true": True, "false": False}


def _index(history: History, version: str, what: str) -> int:
    i = history.index_of(version)
    if i is None:
        raise InputError("--to" if what == "--to" else "--args", None,
                         f"{history.engine} {version} is not in the release history ({history.span()}); "
                         f"re-make it with tools/engine_history.py")
    if not history.releases[i].read:
        raise InputError("--to", None, f"{history.engine} {version} could not be read: {history.releases[i].error}")
    return i


def given_flags(argv: Sequence[str], history: History, index: int) -> list[Given]:
    """The flags of ``argv`` with their values: a flag that takes a value (by the release's own action) takes the
    next word unless it is written ``--flag=value``; positional words (the command, a model path) are skipped."""
    out = []
    words = list(argv)
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("-") or word == "-" or _is_number(word):
            continue
        name, eq, value = word.partition("=")
        if eq:
            out.append(Given(name, value))
            continue
        attrs = history.item("flags", name, index) or history.item("flags", _positive(name), index)
        takes_value = not (attrs and attrs.get("action") in _NO_VALUE) and not name.startswith("--no-")
        if takes_value and i < len(words) and (not words[i].startswith("-") or _is_number(words[i])):
            out.append(Given(name, words[i]))
            i += 1
        else:
            out.append(Given(name, None))
    return out


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _positive(flag: str) -> str:
    return "--" + flag[5:] if flag.startswith("--no-") else flag


def _check_flag(given: Given, history: History, t: int, c: int | None, underscores: bool) -> FlagCheck:
    release = history.releases[t].text
    name = given.written
    notes: list[str] = []
    if "_" in name and name.startswith("--") and not underscores:
        return FlagCheck(given, norm_flag(name), (f"{history.engine} spells it {norm_flag(name)}",))
    flag = norm_flag(name) if name.startswith("--") else name
    attrs = history.item("flags", flag, t)
    if attrs is None and flag.startswith("--no-"):
        positive = history.item("flags", _positive(flag), t)
        if positive is not None and positive.get("action") == "BooleanOptionalAction":
            flag, attrs = _positive(flag), positive
    if attrs is None:
        matches = [f for f in history.flags_at(t) if f.startswith(flag)] if flag.startswith("--") else []
        if len(matches) == 1:
            notes.append(f"an abbreviation of {matches[0]}: argparse takes it only while no other flag starts "
                         f"with {flag}")
            flag, attrs = matches[0], history.item("flags", matches[0], t)
        elif len(matches) > 1:
            return FlagCheck(given, flag, (f"ambiguous in {release}: could be {', '.join(sorted(matches)[:5])}",))
    if attrs is None:
        return FlagCheck(given, flag, (_why_missing(flag, history, t, c),), tuple(notes))
    problems = []
    choices = attrs.get("choices")
    if given.value is not None and isinstance(choices, list) and choices \
            and given.value not in {str(x) for x in choices}:
        then = ""
        if c is not None:
            before = history.item("flags", flag, c)
            was = before.get("choices") if before else None
            if isinstance(was, list) and given.value in {str(x) for x in was}:
                then = f"; {history.releases[c].text} accepts it"
        problems.append(f"{given.value!r} is not one of its choices in {release} "
                        f"({', '.join(map(str, choices[:12]))}{', ...' if len(choices) > 12 else ''}){then}")
    if attrs.get("deprecated"):
        notes.append(f"deprecated in {release}")
    if c is not None and c != t:
        before = history.item("flags", flag, c)
        if before is not None and before.get("default") != attrs.get("default"):
            notes.append(f"its default changed: {before.get('default')!r} in {history.releases[c].text}, "
                         f"{attrs.get('default')!r} in {release}")
    return FlagCheck(given, flag, tuple(problems), tuple(notes))


def _why_missing(flag: str, history: History, t: int, c: int | None) -> str:
    release = history.releases[t].text
    where = history.where("flags", flag)
    if c is not None and history.item("flags", flag, c) is not None:
        gone = next((j for j in range(c + 1, t + 1) if history.item("flags", flag, j) is None), t) if c < t else t
        text = f"removed in {history.releases[gone].text} (exists in {where})"
        renamed = _renamed(flag, history, c, gone)
        return text + (f"; perhaps now {renamed}" if renamed else "")
    if where == "none":
        return f"no release of {history.engine} has it ({history.span()})"
    return f"{release} does not have it (exists in {where})"


def _renamed(flag: str, history: History, before: int, after: int) -> str | None:
    """A flag new in ``after`` that sets the same engine setting, else one whose name is close."""
    old, new = history.flags_at(before), history.flags_at(after)
    added = [f for f in new if f not in old]
    dest = old[flag].get("dest")
    same = [f for f in added if dest is not None and new[f].get("dest") == dest]
    if same:
        return same[0]
    close = difflib.get_close_matches(flag, added, n=1, cutoff=0.75)
    return close[0] if close else None


def _value(text: str | None, attrs: Mapping[str, Any]) -> Any:
    """The value a setting takes: booleans for switches, numbers where the text is one, else the text.

    Read with a pattern, never a recursive parser: the text is the user's (5,000 dashes before a digit made
    ``ast.literal_eval`` recurse until it crashed). A number with more digits than a float holds, or one that is not
    finite (``1e999``), stays text: the KB compares it as written, and JSON output cannot hold Infinity."""
    if text is None:
        action = attrs.get("action")
        return action != "store_false"
    word = text.strip()
    if word in ("True", "False"):
        return word == "True"
    if len(word) > _MAX_NUMBER_CHARS:
        return text
    if _INT.fullmatch(word):
        return int(word)
    if _FLOAT.fullmatch(word):
        number = float(word)
        return number if math.isfinite(number) else text
    return text


_MAX_NUMBER_CHARS = 64
_INT = re.compile(r"[+-]?\d+(?:_\d+)*")
_FLOAT = re.compile(r"[+-]?(?:\d+(?:_\d+)*\.?\d*(?:_\d+)*|\.\d+(?:_\d+)*)(?:[eE][+-]?\d+)?")


def target_fingerprint(fp: Fingerprint, check: CommandCheck) -> tuple[Fingerprint, tuple[str, ...]]:
    """``fp`` with the engine at the target release, every package the target pins exactly (``==X``) at X when the
    fingerprint tracks it, the engine's install state unknown, and the command line's settings as parameters."""
    history = load_history(check.engine)
    t = history.index_of(check.target) if history is not None and check.target is not None else None
    env = {**fp.env, **check.env}
    if history is None or t is None or check.target is None:  # no release to pin: the settings alone
        packages = dict(fp.packages)
        assumed = []
        if check.target is not None and packages.get(check.engine) != check.target:
            packages[check.engine] = check.target
            assumed.append(f"{check.engine} {check.target}")
        return replace(fp, packages=packages, env=env, params={**fp.params, **check.settings}), tuple(assumed)
    packages = dict(fp.packages)
    found = descriptor(check.engine)
    name = found.distribution if found is not None else check.engine
    assumed = []
    if packages.get(check.engine) != check.target:
        assumed.append(f"{check.engine} {check.target}")
    packages[check.engine] = check.target
    tracked = {normalize_package(k): k for k in packages}
    for req, runs in history.runs.get("requires", {}).items():
        key = tracked.get(req)
        if key is None or key == check.engine:
            continue
        for first, last, attrs in runs:
            spec = str(attrs.get("specifier", ""))
            if first <= t <= last and spec.startswith("==") and "*" not in spec and "," not in spec:
                pinned = spec[2:]
                if packages.get(key) != pinned:
                    assumed.append(f"{key} {pinned} (pinned by {name} {check.target})")
                packages[key] = pinned
    installs = {k: v for k, v in fp.installs.items() if k != check.engine}
    return (replace(fp, packages=packages, installs=installs, env=env, params={**fp.params, **check.settings}),
            tuple(assumed))


def format_command_check(check: CommandCheck) -> str:
    moving = check.current is not None and check.target is not None and check.current != check.target
    head = f"{check.engine} {check.current} -> {check.target}" if moving else f"{check.engine} {check.target or ''}"
    if check.unchecked is not None:
        lines = [f"{head.rstrip()}: {check.unchecked}"]
        if check.settings:
            lines.append("  settings: " + ", ".join(f"{k}={v}" for k, v in check.settings.items()))
    else:
        lines = [f"{head}: " + ("this command line breaks" if check.broken else "every flag and value is accepted")]
    for fc in check.flags:
        shown = fc.given.written + (f" {fc.given.value}" if fc.given.value is not None else "")
        state = "; ".join(fc.problems) if fc.problems else "ok"
        lines.append(f"  {shown:<32} {state}")
        lines.extend(f"  {'':<32} note: {note}" for note in fc.notes)
    if check.defaults_changed:
        lines.append(f"defaults that changed {check.current} -> {check.target} (flags this command does not set):")
        lines.extend(f"  {name}: {a!r} -> {b!r}" for name, a, b in check.defaults_changed[:_MAX_DEFAULTS])
        more = len(check.defaults_changed) - _MAX_DEFAULTS
        if more > 0:
            lines.append(f"  ... and {more} more (--json lists them all)")
    if check.assumed:
        lines.append("the target machine assumed: " + ", ".join(check.assumed))
    return "\n".join(lines)
