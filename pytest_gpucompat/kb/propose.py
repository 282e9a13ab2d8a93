"""A proposed rule for failures no rule explains: ``when`` from what they share, a signature from their error.

Pure functions from ``signatures.Failure`` to a plain rule mapping, valid against the rule schema (``kb.load``): what
``gpucompat explain`` prints for the author to check, narrow and commit. Nothing here guesses a cause; the rule
says where the failure was seen, and its ``note`` asks for the rest.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..catalog.loglines import last_error
from ..catalog.registry import descriptor, kb_engine_names
from ..common.versions import normalize_package
from .failure_modes import FailureMode, classify
from .regex_safety import MAX_UNBOUNDED_REPEATS
from .signatures import Failure, compile_pattern

MAX_SIGNATURE_CHARS = 160
"""A signature is made from at most this much of the error line: enough to tell one failure from another."""
_MAX_ID_CHARS = 64
# What changes from one run of the same failure to the next: paths, ids, addresses, numbers.
# A path starts where a run of path characters starts (the lookbehind): tried at every character of a long run with
# no "/" in it, `[\w.~-]*/` scanned the rest of the run each time (12 s for one 16 KiB word, quadratic).
_VOLATILE = re.compile(
    r"(?P<path>(?:<[\w-]+>|(?<![\w.~-])[\w.~-]*)/[^\s'\"`,;:)\]]+)"
    r"|(?P<uuid>\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b)"
    r"|(?P<hex>\b0x[0-9a-fA-F]+\b)"
    r"|(?P<number>\d+(?:\.\d+)*)"
)
_GENERAL = {"path": r"\S+", "uuid": r"[0-9a-fA-F-]+", "hex": r"0x[0-9a-fA-F]+", "number": r"[0-9.]+"}
_SPECIAL = re.compile(r"([\\.^$*+?{}\[\]|()])")
_WORD = re.compile(r"[a-z0-9]+")
_VALUE_TYPES = (str, int, float, bool)


def error_line(failure: Failure) -> str:
    """The failure's own error: the last exception line of its log tail, else the exception the reason names
    (after the harness's "vllm: LLM() failed: "), else the reason's first line."""
    found = last_error(failure.log_tail) if failure.log_tail else None
    if found:
        return found.strip()
    reason = next((line.strip() for line in (failure.reason or "").splitlines() if line.strip()), "")
    for start in (m.end() for m in re.finditer(r": ", reason)):
        found = last_error(reason[start:])
        if found:
            return found.strip()
    return reason


def generalise(line: str) -> str:
    """A signature for ``line``: its text regex-escaped, with paths, ids, addresses and numbers generalised; cut at
    ``MAX_SIGNATURE_CHARS`` and before more volatile parts than a signature may repeat."""
    text = line.strip()
    if len(text) > MAX_SIGNATURE_CHARS:
        cut = text.rfind(" ", 0, MAX_SIGNATURE_CHARS)
        text = text[: cut if cut > MAX_SIGNATURE_CHARS // 2 else MAX_SIGNATURE_CHARS]
    out: list[str] = []
    position = repeats = 0
    for match in _VOLATILE.finditer(text):
        if repeats == MAX_UNBOUNDED_REPEATS:
            return "".join(out).rstrip() or _escape(text[:match.start()])
        out.append(_escape(text[position:match.start()]))
        out.append(_GENERAL[str(match.lastgroup)])
        position, repeats = match.end(), repeats + 1
    out.append(_escape(text[position:]))
    return "".join(out)


def _escape(text: str) -> str:
    """Only what a regular expression would read as syntax: a readable signature in YAML (not ``re.escape``'s
    backslash before every space)."""
    return _SPECIAL.sub(r"\\\1", text)


def signature_of(failure: Failure) -> str | None:
    """The signature a proposed rule gets: the generalised error line, or where generalising made a pattern the
    loader would refuse (two wide repeats side by side), the error line's text up to its first volatile part."""
    line = error_line(failure)
    if not line:
        return None
    signature = generalise(line)
    try:
        compile_pattern(signature, lambda fld, problem: ValueError(problem), "signature")
    except ValueError:
        first = _VOLATILE.search(line)
        signature = _escape(line[: first.start() if first else MAX_SIGNATURE_CHARS].strip()[:MAX_SIGNATURE_CHARS])
    return signature or None


def group_failures(failures: Iterable[Failure]) -> list[list[Failure]]:
    """Failures of one kind together: the same engine and the same signature, in first-seen order."""
    groups: dict[tuple[str | None, str | None], list[Failure]] = {}
    for failure in failures:
        groups.setdefault((failure.kb_engine, signature_of(failure)), []).append(failure)
    return list(groups.values())


def _package(engine: str | None) -> str | None:
    """The distribution that is the engine's version (``vllm``; ``transformers`` for ``hf``), as fingerprints name
    it; None for an engine given by import path."""
    try:
        found = descriptor(engine) if engine else None
    except ValueError:
        return None
    return normalize_package(found.distribution) if found is not None else None


def _shared(values: Iterable[Any]) -> Any:
    """The one value every failure has, else None."""
    distinct = set(values)
    return next(iter(distinct)) if len(distinct) == 1 else None


def proposed_when(failures: Sequence[Failure]) -> dict[str, Any]:
    """What the failures share: GPU names (any of those seen), driver, CUDA, the engine's version, parameters."""
    fps = [f.fingerprint for f in failures]
    when: dict[str, Any] = {}
    if all(fp.gpus for fp in fps):
        when["gpu"] = sorted({g.name for fp in fps for g in fp.gpus})
    for key in ("driver", "cuda_driver", "cuda_runtime"):
        value = _shared(getattr(fp, key) for fp in fps)
        if value:
            when[key] = value
    package = _package(failures[0].kb_engine)
    version = _shared(fp.packages.get(package) for fp in fps) if package else None
    if package and version:
        when["packages"] = {package: f"=={version}"}
    params = {}
    mapped = failures[0].kb_engine != failures[0].engine  # an openai cell named by its server: not its own params
    for name, value in failures[0].params.items():
        if name == "model" or (mapped and name == "server") or not isinstance(value, (*_VALUE_TYPES, type(None))):
            continue
        if all(name in f.params and f.params[name] == value for f in failures):
            params[name] = [value]
    if params:
        when["params"] = params
    return when


def _rule_id(failures: Sequence[Failure], line: str, version: str | None, taken: set[str]) -> str:
    words = "-".join(_WORD.findall(_VOLATILE.sub(" ", line).lower())[:8]) or "failure"
    base = "-".join(p for p in (failures[0].kb_engine or "runner", version, words) if p)
    base = re.sub(r"[^a-z0-9.\-]+", "-", base.lower()).strip("-.")
    if len(base) > _MAX_ID_CHARS:
        base = base[:_MAX_ID_CHARS].rsplit("-", 1)[0]
    rule_id, n = base, 2
    while rule_id in taken:
        rule_id, n = f"{base}-{n}", n + 1
    taken.add(rule_id)
    return rule_id


def propose_rule(failures: Sequence[Failure], source: str, taken: set[str],
                 modes: Sequence[FailureMode]) -> dict[str, Any]:
    """The rule that would explain ``failures`` (one group of ``group_failures``): verified by the report at
    ``source``; ``taken`` holds the ids in use (the new one is added)."""
    first = failures[0]
    line = error_line(first)
    signature = signature_of(first)
    failure, severity = classify(failures, modes)
    when = proposed_when(failures)
    engine = first.kb_engine if first.kb_engine in kb_engine_names() else None
    version = next(iter(when.get("packages", {}).values()), "").lstrip("=") or None
    who = " ".join(p for p in (first.kb_engine or "engine-independent test", version) if p)
    runners = sorted({f.runner for f in failures if f.runner})
    seen = f"{len(failures)} failed cell{'s' if len(failures) != 1 else ''}" + (
        f" on {', '.join(runners)}" if runners else "")
    rule: dict[str, Any] = {
        "id": _rule_id(failures, line, version, taken),
        "summary": _one_line(f"{who} fails: {line or 'no error text recorded'}"),
        "severity": severity,
        "failure": failure,
        "engine": engine,
        "when": when,
    }
    if line:
        rule["symptom"] = _one_line(line)
    if signature:
        rule["signature"] = [signature]
    rule.update({
        "confidence": "verified",
        "note": f"Proposed by gpucompat explain from {seen}: when: is what they share. Narrow it to the cause, "
                "say what goes wrong and add a workaround.",
        "sources": [{"kind": "report", "ref": source}],
    })
    return rule


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 200 else line[:199] + "…"


def proposals_yaml(rules: Sequence[Mapping[str, Any]], width: int = 120) -> str:
    """A rule file holding the proposals, ready for ``--kb`` or ``matrices/rules/``, written as the shipped rule
    files are: lists and mappings of plain values on one line (``gpu: [NVIDIA H200]``)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def flat(values: Iterable[Any]) -> bool:
        return all(isinstance(v, (*_VALUE_TYPES, type(None))) for v in values)

    Dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=flat(v)))
    Dumper.add_representer(dict, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v.items(),
                                                                  flow_style=flat(v.values())))
    return yaml.dump({"rules": [dict(r) for r in rules]}, Dumper=Dumper, sort_keys=False, allow_unicode=True,
                     width=width, indent=2)
