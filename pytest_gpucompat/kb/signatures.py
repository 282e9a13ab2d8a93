"""Signatures: the failure text a rule recognises, so that a failed cell can say which known issue it is.

A rule's ``signature`` is a list of regular expressions; any one of them found in a line of a failed cell's reason
or engine log tail identifies the failure. They are user input run over engine output, so each is compiled once,
when its rule file is loaded, by RE2 (``kb.linear_regex``: a search takes time linear in the line, whatever the
pattern), and refused there when RE2 does not accept it or its shape is one that backtracking matchers choke on
(``kb.regex_safety``; its verdict on a pattern text is remembered in the per-user cache, ``common.parsed_cache``,
so a later start judges only new texts); the text searched is bounded: the start of the reason and the end of the log,
``MAX_TEXT_CHARS`` in all, line by line, each line cut at ``MAX_LINE_CHARS`` (a failure's own line is short; a
dumped configuration is not what a signature is about).

``explaining_rules`` is the one definition of "this failure matches a known issue": a rule explains a failed cell
when its signature matches and no known fact of the cell contradicts its ``when`` (``kb.match.contradiction``).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..catalog.registry import kb_engine_of
from ..common.parsed_cache import remember_texts, remembered_texts
from . import regex_safety
from .linear_regex import LinearPattern, PatternError, compile_linear, joined
from .match import Facts, contradiction
from .regex_safety import parse, risk
from .schema import CONFIDENCES, Rule

if TYPE_CHECKING:
    from ..machine.fingerprint import Fingerprint

MAX_TEXT_CHARS = 64 * 1024
"""How much failure text a signature is searched in: the reason's start and the log tail's end, this much in all."""
MAX_REASON_CHARS = 4 * 1024
MAX_LINE_CHARS = 2 * 1024
MAX_PATTERN_CHARS = 1000
_CONFIDENCE_ORDER = {c: i for i, c in enumerate(reversed(CONFIDENCES))}  # verified, upstream, documents


def compile_pattern(text: Any, fail: Callable[[str, str], Exception], fld: str) -> LinearPattern:
    """One regular expression of a signature (or of another table of failure texts), searched in one line at a
    time; ``fail(field, problem)`` makes the error that names the file."""
    if not isinstance(text, str) or not text.strip():
        raise fail(fld, "must be a non-empty string (a regular expression)")
    if len(text) > MAX_PATTERN_CHARS:
        raise fail(fld, f"longer than {MAX_PATTERN_CHARS} characters")
    if text not in _JUDGED_SAFE and text not in _remembered_safe():
        try:
            problem = risk(parse(text))
        except (re.error, RecursionError, OverflowError) as exc:
            raise fail(fld, f"not a regular expression: {' '.join(str(exc).split())}") from None
        if problem is not None:
            raise fail(fld, f"{problem}: it could take very long on a long log line; write the literal text, "
                            r"with one .* or \S+ between its parts")
        _JUDGED_SAFE.add(text)
    try:
        pattern = compile_linear(text)
    except PatternError as exc:
        raise fail(fld, f"not accepted by the linear-time matcher (RE2): {exc}") from None
    if pattern.search(""):
        raise fail(fld, "matches an empty text, so it would match every failure")
    return pattern


_SAFE_NAME = "safe-signatures"
_JUDGED_SAFE: set[str] = set()  # pattern texts this process found safe (`remember_safe_patterns` keeps them)
_SAFE_SALT: list[bytes | None] = []


def _safety_salt() -> bytes | None:
    """What a pattern's safety verdict depends on besides its text: ``kb.regex_safety``'s code and the Python whose
    ``re`` parser read the pattern (None where that code cannot be read: nothing is remembered then)."""
    if not _SAFE_SALT:
        try:
            code = Path(regex_safety.__file__).read_bytes()
        except OSError:
            _SAFE_SALT.append(None)
        else:
            _SAFE_SALT.append(hashlib.sha256(sys.version.encode("utf-8", "replace") + b"\0" + code).digest())
    return _SAFE_SALT[0]


def _remembered_safe() -> frozenset[str]:
    """The pattern texts an earlier process found safe (``common.parsed_cache.remembered_texts``: data only, read
    under its rules, an empty set when there is none it can trust); none while ``judging_every_pattern``."""
    if _JUDGE_ALL:
        return frozenset()
    salt = _safety_salt()
    return frozenset() if salt is None else remembered_texts(_SAFE_NAME, salt)


_JUDGE_ALL: list[bool] = []  # non-empty inside judging_every_pattern()


def judging_all() -> bool:
    """Whether rule files loaded now judge every pattern (inside ``judging_every_pattern``)."""
    return bool(_JUDGE_ALL)


@contextlib.contextmanager
def judging_every_pattern() -> Iterator[None]:
    """Rule files loaded inside judge every pattern again, whatever the per-user cache remembers: a validation
    (``rules --lint`` in CI) must give the same answer on every machine, so no cache may decide it."""
    _JUDGE_ALL.append(True)
    try:
        yield
    finally:
        _JUDGE_ALL.pop()


def remember_safe_patterns() -> None:
    """Keep the pattern texts this process found safe in the per-user cache, so later starts do not judge them
    again (called once the rule files are loaded); nothing where there is nothing new or the cache cannot be
    written."""
    salt = _safety_salt()
    if _JUDGED_SAFE and salt is not None:
        remember_texts(_SAFE_NAME, salt, _JUDGED_SAFE)
        _JUDGED_SAFE.clear()


def compile_signature(raw: Any, fail: Callable[[str, str], Exception]) -> tuple[LinearPattern, ...]:
    """A rule's ``signature``: a regular expression or a list of them (any of them identifies the failure)."""
    if raw is None:
        return ()
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise fail("signature", "must be a regular expression or a non-empty list of them")
    return tuple(compile_pattern(item, fail, f"signature[{i}]") for i, item in enumerate(items))


def failure_lines(reason: str | None, log_tail: str | None) -> tuple[str, ...]:
    """What a signature is searched in: the lines of the start of the reason, then of the end of the log tail
    (a failure's own line is at the end of its log), ``MAX_TEXT_CHARS`` together, each cut at ``MAX_LINE_CHARS``."""
    head = (reason or "")[:MAX_REASON_CHARS]
    tail = (log_tail or "")[len(head) - MAX_TEXT_CHARS:]
    return tuple(line[:MAX_LINE_CHARS] for line in head.splitlines() + tail.splitlines() if line.strip())


def signature_matches(signature: Iterable[LinearPattern], lines: Sequence[str] | bytes) -> bool:
    """Whether a pattern of ``signature`` is found in one of ``lines`` (or in the lines ``linear_regex.joined``
    made of them: joined once, searched by every rule)."""
    text = lines if isinstance(lines, bytes) else joined(lines)
    return any(pattern.search(text) for pattern in signature)


@dataclass(frozen=True)
class Failure:
    """One failed or errored cell, as explaining it needs: the runner's fingerprint, what the cell ran, what it
    said, and where it is (``runner``, ``nodeid``) for the readers."""

    fingerprint: Fingerprint
    engine: str | None
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    reason: str | None = None
    log_tail: str | None = None
    phase: str | None = None  # the pytest phase of the outcome: setup (the engine did not start), call, teardown
    runner: str = ""
    nodeid: str = ""

    @property
    def kb_engine(self) -> str | None:
        """The engine a rule would name: the cell's, or the server an ``openai`` cell started."""
        return kb_engine_of(self.engine, self.params)

    @property
    def lines(self) -> tuple[str, ...]:
        return failure_lines(self.reason, self.log_tail)


def explaining_rules(rules: Iterable[Rule], failure: Failure) -> tuple[Rule, ...]:
    """The rules whose signature matches the failure's text and whose ``when`` no known fact of the cell
    contradicts; verified first, then upstream, then documents, in knowledge-base order within each.

    A condition on something the report does not record (a parameter the adapter sets itself, a package the
    fingerprint did not list) does not rule a rule out: the failure's own text is the evidence. One that the cell
    or its runner does record and that does not hold does (another engine, driver, GPU or version)."""
    lines = failure.lines
    if not lines:
        return ()
    signed = [r for r in rules if r.signature]
    if not signed:
        return ()
    facts = Facts.of(failure.fingerprint)
    params = {**failure.fingerprint.params, **failure.params}
    engine = failure.kb_engine
    text = joined(lines)
    found = [r for r in signed
             if contradiction(r, facts, engine, params) is None and signature_matches(r.signature, text)]
    return tuple(sorted(found, key=lambda r: _CONFIDENCE_ORDER.get(r.confidence, len(CONFIDENCES))))


def explained_by_entry(rule: Rule) -> dict[str, Any]:
    """A rule as a report's ``explained_by`` records it: what it is and what to do about it."""
    return {"id": rule.id, "severity": rule.severity, "confidence": rule.confidence, "failure": rule.failure,
            "summary": rule.summary, "workaround": rule.workaround}
