"""Loading the knowledge base: rule files validated into frozen ``kb.schema`` data.

Bad input stops with one ``InputError`` line naming the file, the rule id and the field. ``load_kb`` remembers what
it loaded, keyed on every file's path, identity, mtime and size, so a rule file rewritten in the same process is read
again.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

from packaging.specifiers import SpecifierSet

from ..catalog.registry import kb_engine_names
from ..common.errors import InputError
from ..common.inputs import as_text, load_file, text_field
from ..common.parsed_cache import load_yaml_cached
from ..common.paths import matrices_dir
from ..common.versions import norm_value, normalize_package, parse_specifier
from .bounds import parse_bounds
from .schema import (
    CONFIDENCES,
    FAILURES,
    INSTALL_STATES,
    INTERCONNECTS,
    MODEL_SHAPE,
    SEVERITIES,
    SOURCE_KINDS,
    SPECIFIER_FIELDS,
    Conditions,
    FlagFact,
    KnowledgeBase,
    ParamCondition,
    Rule,
    Source,
)
from .signatures import compile_signature, judging_all, remember_safe_patterns

_RULE_KEYS = {"id", "summary", "severity", "failure", "engine", "when", "symptom", "signature", "workaround",
              "flags", "confidence", "claims", "note", "sources", "bounds"}
_REQUIRED = ("id", "summary", "severity", "failure", "confidence", "sources")
_WHEN_KEYS = ({f.name for f in fields(Conditions)} - {"needs_gpus", "needs_memory", "needs_divisible"}
              | {"needs", "model_shape"})
"""A rule's ``when`` keys: the fields of ``Conditions``, but ``needs`` for the three needs fields and ``model_shape``,
read into ``params``."""
_NEEDS_KEYS = {"gpus", "gpu_memory_mib", "divisible"}
_ID = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
_CLAIM = re.compile(r"^S\d{2,3}$")
_OPERATOR_START = ("<", ">", "=", "!", "~")


def builtin_rule_files() -> list[Path]:
    """The rule files of the matrices directory. A directory named by GPUCOMPAT_MATRICES_DIR that holds none (a
    typo, an empty folder, a team's thresholds without rules) is an error: the knowledge base would be empty and
    every machine would read "no known problems"."""
    directory = matrices_dir()
    files = sorted((directory / "rules").glob("*.y*ml"))
    if not files and os.environ.get("GPUCOMPAT_MATRICES_DIR"):
        state = "does not exist" if not directory.is_dir() else "has no rule files under rules/"
        raise InputError(str(directory), "GPUCOMPAT_MATRICES_DIR",
                         f"{state}: the knowledge base would be empty (copy the shipped matrices/ there, or unset it)")
    return files


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """A path may be a rule file or a directory of them."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted(path.glob("*.y*ml")))
        else:
            out.append(path)
    return out


def file_stamp(path: str | Path) -> tuple[int, int, int, int] | None:
    """What tells one version of a file from another without reading it: (device, inode, mtime_ns, size) of the
    file the path resolves to now (the resolved file's identity, cheaper than resolving the path); None when it
    cannot be stat'ed (the loader then reports the file). A rewrite within the file system's timestamp granularity
    (a few milliseconds) that keeps the size is not seen."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def load_kb(extra: Iterable[str | os.PathLike[str]] = (), builtin: bool = True) -> KnowledgeBase:
    """The shipped rules (unless ``builtin`` is false) and ``extra`` files or directories, in that order.

    The same files, unchanged, give the same ``KnowledgeBase`` object (the matching indexes are kept per object);
    a file that changed on disk is read again. Parsing the shipped files takes tens of milliseconds, a stat of each
    file some microseconds.
    """
    shipped = [str(f) for f in builtin_rule_files()] if builtin else []
    files = tuple(shipped + [str(f) for f in expand_paths(extra)])
    stamps = tuple(file_stamp(f) for f in files)
    not_encoded = file_stamp(_not_encoded_path()) if builtin else None
    return _load_cached(files, stamps, builtin, not_encoded, len(shipped), judging_all())


@lru_cache(maxsize=8)
def _load_cached(files: tuple[str, ...], stamps: tuple[Any, ...], builtin: bool, not_encoded_stamp: Any,
                 shipped: int = 0, judged: bool = False) -> KnowledgeBase:
    """The knowledge base of ``files``, the first ``shipped`` of them the matrices' own: their parsed data may come
    from the per-user cache of parsed files (``common.parsed_cache``), validated here like any rule file's.
    ``judged``: loaded inside ``signatures.judging_every_pattern`` (a knowledge base loaded otherwise may have taken
    pattern verdicts from the per-user cache, so it is not the one a validation gets)."""
    del stamps, not_encoded_stamp, judged  # part of the cache key only
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for i, path in enumerate(files):
        for rule in load_rule_file(path, cached=i < shipped):
            if rule.id in seen:
                raise InputError(path, "id", f"duplicate id, first defined in {seen[rule.id]}", rule.id)
            seen[rule.id] = path
            rules.append(rule)
    not_encoded = load_not_encoded() if builtin else {}
    remember_safe_patterns()  # the signatures' safety verdicts, for the next start
    return KnowledgeBase(rules=tuple(rules), files=files, not_encoded=not_encoded)


def _not_encoded_path() -> Path:
    return matrices_dir() / "not_encoded.yaml"


def load_not_encoded() -> dict[str, str]:
    """``not_encoded.yaml``: claim id -> why no rule encodes it; validated like a rule file."""
    path = _not_encoded_path()
    if not path.exists():
        return {}
    source = str(path)
    data = load_yaml_cached(path) or {}
    if not isinstance(data, Mapping) or set(data) - {"not_encoded"}:
        raise InputError(source, None, "a mapping with one key, 'not_encoded', is required")
    entries = data.get("not_encoded") or []
    if not isinstance(entries, list):
        raise InputError(source, "not_encoded", "must be a list of {claim, reason}")
    out: dict[str, str] = {}
    for i, entry in enumerate(entries):
        where = f"not_encoded[{i}]"
        if not isinstance(entry, Mapping):
            raise InputError(source, where, "must be a mapping with 'claim' and 'reason'")
        claim, reason = (text_field(entry.get(k), source, f"{where}.{k}") for k in ("claim", "reason"))
        if not claim or not reason:
            raise InputError(source, f"{where}.{'reason' if claim else 'claim'}", "required")
        out[claim] = reason
    return out


def load_rule_file(path: str | Path, cached: bool = False) -> list[Rule]:
    """A rule file's rules, validated; ``cached``: its parsed data may come from ``common.parsed_cache`` (the
    shipped files: the same data, parsed once per content)."""
    source = str(path)
    data = load_yaml_cached(path) if cached else load_file(path, "yaml")
    if data is None:
        return []
    if not isinstance(data, Mapping) or set(data) - {"rules"}:
        raise InputError(source, None, "a rule file is a mapping with one key, 'rules'")
    raw_rules = data.get("rules") or []
    if not isinstance(raw_rules, list):
        raise InputError(source, "rules", "must be a list of rules")
    return [parse_rule(raw, source, i) for i, raw in enumerate(raw_rules)]


def parse_rule(raw: Any, source: str, index: int = 0) -> Rule:
    if not isinstance(raw, Mapping):
        raise InputError(source, f"rules[{index}]", "a rule must be a mapping")
    rid = raw.get("id")
    if not isinstance(rid, str) or not _ID.match(rid):
        raise InputError(source, f"rules[{index}].id", f"missing or invalid id {rid!r} (lowercase, digits, '-', '.')")

    def fail(fld: str, problem: str) -> InputError:
        return InputError(source, fld, problem, rid)

    unknown = set(map(str, raw)) - _RULE_KEYS
    if unknown:
        raise fail(sorted(unknown)[0], "unknown key")
    for key in _REQUIRED:
        if raw.get(key) in (None, "", []):
            raise fail(key, "required")
    _enum(raw["severity"], SEVERITIES, fail, "severity")
    _enum(raw["failure"], FAILURES, fail, "failure")
    _enum(raw["confidence"], CONFIDENCES, fail, "confidence")
    engine = raw.get("engine")
    if engine is not None:
        engine = normalize_package(str(engine))
        _enum(engine, kb_engine_names(), fail, "engine")  # asked live: an engine registered later counts
    sources = raw["sources"]
    if not isinstance(sources, list):
        raise fail("sources", "must be a list of {kind, ref}")
    parsed_sources = []
    for i, s in enumerate(sources):
        if not isinstance(s, Mapping) or set(s) != {"kind", "ref"}:
            raise fail(f"sources[{i}]", "must be {kind, ref}")
        _enum(s["kind"], SOURCE_KINDS, fail, f"sources[{i}].kind")
        parsed_sources.append(Source(kind=s["kind"], ref=_opt_str(s["ref"], fail, f"sources[{i}].ref") or ""))
    if raw["confidence"] == "verified" and not any(s.kind == "report" for s in parsed_sources):
        raise fail("confidence", "'verified' needs a source of kind 'report'")
    signature = compile_signature(raw.get("signature"), fail)
    if signature and raw["failure"] == "none":
        raise fail("signature", "identifies a failure, and failure 'none' says nothing fails")
    flag_facts = _flag_facts(raw.get("flags"), fail)
    claims = _str_list(raw.get("claims"), fail, "claims")
    for c in claims:
        if not _CLAIM.match(c):
            raise fail("claims", f"'{c}' is not a claim id like S06")
    return Rule(
        id=rid,
        summary=_opt_str(raw["summary"], fail, "summary") or "",
        severity=raw["severity"],
        failure=raw["failure"],
        confidence=raw["confidence"],
        sources=tuple(parsed_sources),
        engine=engine,
        when=parse_conditions(raw.get("when"), fail, engine),
        symptom=_opt_str(raw.get("symptom"), fail, "symptom"),
        workaround=_opt_str(raw.get("workaround"), fail, "workaround"),
        flags=tuple(f.name for f in flag_facts),
        flag_facts=flag_facts,
        claims=tuple(claims),
        note=_opt_str(raw.get("note"), fail, "note"),
        file=source,
        signature=signature,
        bounds=parse_bounds(raw.get("bounds"), fail),
    )


def _flag_facts(value: Any, fail: Any) -> tuple[FlagFact, ...]:
    """``flags``: names (``--enforce-eager``, ``VLLM_USE_V1``), or ``{flag: NAME, versions: SPEC}`` for one that
    exists only in some releases of the engine."""
    if value is None:
        return ()
    items = [value] if isinstance(value, (str, Mapping)) else value
    if not isinstance(items, list):
        raise fail("flags", "must be a list of names or {flag, versions}")
    out = []
    for i, item in enumerate(items):
        where = f"flags[{i}]"
        if isinstance(item, Mapping):
            unknown = set(map(str, item)) - {"flag", "versions"}
            if unknown or "flag" not in item:
                raise fail(f"{where}.{sorted(unknown)[0] if unknown else 'flag'}",
                           "unknown key" if unknown else "required")
            name = _opt_str(item["flag"], fail, f"{where}.flag") or ""
            text = _opt_str(item.get("versions"), fail, f"{where}.versions")
            try:
                versions = parse_specifier(text) if text and text != "none" else None
            except ValueError as exc:
                raise fail(f"{where}.versions", f"{exc} (or none: no release has it)") from None
            if not text:
                raise fail(f"{where}.versions", "required with flag: a specifier, or none")
        else:
            name, versions, text = _opt_str(item, fail, where) or "", None, None
        if not name:
            raise fail(where, "empty")
        out.append(FlagFact(name, versions, nowhere=text == "none"))
    return tuple(out)


def _enum(value: Any, allowed: Sequence[str], fail: Any, fld: str) -> None:
    if value not in allowed:
        raise fail(fld, f"'{value}' is not one of {', '.join(allowed)}")


def _opt_str(value: Any, fail: Any, fld: str) -> str | None:
    """A text field: a scalar's text, stripped; a list or mapping (``note: [..]``) is an error, not its repr."""
    if value is None:
        return None
    try:
        return as_text(value).strip()
    except ValueError as exc:
        raise fail(fld, str(exc)) from None


def _str_list(value: Any, fail: Any, fld: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise fail(fld, "must be a list")
    return [_opt_str(v, fail, f"{fld}[{i}]") or "" for i, v in enumerate(value)]


def parse_conditions(raw: Any, fail: Any, engine: str | None = None) -> Conditions:
    if raw is None:
        return Conditions()
    if not isinstance(raw, Mapping):
        raise fail("when", "must be a mapping of conditions")
    unknown = set(map(str, raw)) - _WHEN_KEYS
    if unknown:
        raise fail(f"when.{sorted(unknown)[0]}", "unknown condition")

    def spec(key: str) -> SpecifierSet | None:
        if raw.get(key) is None:
            return None
        try:
            return parse_specifier(as_text(raw[key]))
        except ValueError as exc:
            raise fail(f"when.{key}", str(exc)) from None

    interconnect = raw.get("interconnect")
    if interconnect is not None:
        _enum(interconnect, INTERCONNECTS, fail, "when.interconnect")
    packages = raw.get("packages") or {}
    if not isinstance(packages, Mapping):
        raise fail("when.packages", "must map package names to specifiers")
    parsed_packages: list[tuple[str, SpecifierSet | None]] = []
    for name, value in packages.items():
        if value in ("absent", "present"):  # not installed / installed in any version
            parsed_packages.append((normalize_package(str(name)), None if value == "absent" else SpecifierSet("")))
            continue
        try:
            parsed_packages.append((normalize_package(str(name)), parse_specifier(as_text(value))))
        except ValueError as exc:
            raise fail(f"when.packages.{name}", f"{exc} (or absent / present)") from None
    install = raw.get("install")
    if install is not None:
        _enum(install, INSTALL_STATES, fail, "when.install")
        if engine is None:
            raise fail("when.install", "needs the rule's engine: the install judged is that engine's")
    shape = raw.get("model_shape") or {}
    if not isinstance(shape, Mapping):
        raise fail("when.model_shape", f"must map facts of the model ({', '.join(MODEL_SHAPE)}) to values")
    unknown = set(map(str, shape)) - set(MODEL_SHAPE)
    if unknown:
        known = ", ".join(MODEL_SHAPE)
        raise fail(f"when.model_shape.{sorted(unknown)[0]}", f"unknown fact of a model (known: {known})")
    needs = raw.get("needs") or {}
    if not isinstance(needs, Mapping):
        raise fail("when.needs", "must be a mapping such as {gpus: [tensor_parallel_size, pipeline_parallel_size]}")
    unknown = set(map(str, needs)) - _NEEDS_KEYS
    if unknown:
        raise fail(f"when.needs.{sorted(unknown)[0]}", f"unknown need (known: {', '.join(sorted(_NEEDS_KEYS))})")
    needs_gpus = _str_list(needs.get("gpus"), fail, "when.needs.gpus")
    if "gpus" in needs and not needs_gpus:
        raise fail("when.needs.gpus", "must name the parameters whose product is the number of GPUs needed")
    needs_memory = _str_list(needs.get("gpu_memory_mib"), fail, "when.needs.gpu_memory_mib")
    if "gpu_memory_mib" in needs and not needs_memory:
        raise fail("when.needs.gpu_memory_mib", "must name the parameters whose product splits the weights")
    divisible = needs.get("divisible") or {}
    if not isinstance(divisible, Mapping) or not all(isinstance(k, str) and isinstance(v, str) and k and v
                                                     for k, v in divisible.items()):
        raise fail("when.needs.divisible", "must map a parameter to the one it must be divisible by, e.g. "
                                           "{num_attention_heads: tensor_parallel_size}")
    params = raw.get("params") or {}
    if not isinstance(params, Mapping):
        raise fail("when.params", "must map parameter names to values")
    parsed_params = []
    for name, value in params.items():
        if str(name) in MODEL_SHAPE:
            raise fail(f"when.params.{name}", "is a fact of the model: write it under when.model_shape")
        parsed_params.append((str(name), _param_condition(value, fail, f"when.params.{name}")))
    for name, value in shape.items():  # judged as parameters of the cell under these names
        parsed_params.append((str(name), _param_condition(value, fail, f"when.model_shape.{name}")))
    return Conditions(
        env=_env_conditions(raw.get("env"), fail),
        gpu=tuple(g.lower() for g in _str_list(raw.get("gpu"), fail, "when.gpu")),
        arch=tuple(a.lower() for a in _str_list(raw.get("arch"), fail, "when.arch")),
        **cast("dict[str, Any]", {name: spec(name) for name in SPECIFIER_FIELDS}),  # each a specifier, parsed alike
        interconnect=interconnect,
        packages=tuple(parsed_packages),
        params=tuple(parsed_params),
        model=tuple(m.lower() for m in _str_list(raw.get("model"), fail, "when.model")),
        needs_gpus=tuple(needs_gpus),
        needs_memory=tuple(needs_memory),
        needs_divisible=tuple(divisible.items()),
        install=(engine, str(install)) if install is not None and engine is not None else None,
    )


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _env_conditions(raw: Any, fail: Any) -> tuple[tuple[str, tuple[str | None, ...], bool], ...]:
    """``when.env``: variable -> the values under which the rule holds, a list (``null``: not set), or
    ``{not: [...]}`` for every value but those. Values are compared as the environment holds them: text, exactly."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not raw:
        raise fail("when.env", "must map environment variables to lists of values (null: not set) or {not: [...]}")
    out: list[tuple[str, tuple[str | None, ...], bool]] = []
    for name, values in raw.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise fail("when.env", f"not an environment variable's name: {str(name)[:80]!r}")
        negated = isinstance(values, Mapping)
        if negated:
            if set(map(str, values)) != {"not"}:
                raise fail(f"when.env.{name}", "a mapping here is {not: [values]}")
            values = values["not"]
        if not isinstance(values, list) or not values:
            raise fail(f"when.env.{name}", "must be a non-empty list of values (null: not set) or {not: [...]}")
        for value in values:
            if isinstance(value, bool) or not (value is None or isinstance(value, (str, int))):
                raise fail(f"when.env.{name}", "values are text or null (not set)")
        out.append((name, tuple(None if v is None else str(v) for v in values), negated))
    return tuple(out)


def _param_condition(value: Any, fail: Any, fld: str) -> ParamCondition:
    if isinstance(value, str) and value.strip().startswith(_OPERATOR_START):
        try:
            return ParamCondition(specifier=parse_specifier(value))
        except ValueError as exc:
            raise fail(fld, str(exc)) from None
    if isinstance(value, Mapping):
        raise fail(fld, "must be a value, a list of values, or a specifier string")
    values = value if isinstance(value, list) else [value]
    for i, v in enumerate(values):
        if isinstance(v, (Mapping, list)):
            raise fail(f"{fld}[{i}]", "must be a value (string, number, boolean or null), not a list or mapping")
    return ParamCondition(values=tuple(norm_value(v) for v in values))
