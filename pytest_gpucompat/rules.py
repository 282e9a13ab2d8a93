"""The knowledge base: rule files loaded and validated into frozen data, and the pure matcher.

Matching is the hot path (every cell of every matrix against every rule), so conditions are
parsed once at load time and a fingerprint is turned into comparable facts once per evaluation.
"""

from __future__ import annotations

import fnmatch
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .errors import InputError
from .fingerprint import Fingerprint
from .paths import matrices_dir
from .versions import matches, normalize_package, parse_specifier, parse_version

SEVERITIES = ("broken", "degraded", "advice")
FAILURES = ("crash", "hang", "error-at-start", "oom", "wrong-output", "slow", "memory", "fallback", "precision",
            "none")
CONFIDENCES = ("documents", "upstream", "verified")
SOURCE_KINDS = ("seed", "code", "doc", "issue", "report")
ENGINES = ("vllm", "sglang", "tensorrt-llm")
INTERCONNECTS = ("pcie", "nvlink")

_RULE_KEYS = {"id", "summary", "severity", "failure", "engine", "when", "symptom", "workaround", "flags",
              "confidence", "claims", "note", "sources"}
_REQUIRED = ("id", "summary", "severity", "failure", "confidence", "sources")
_WHEN_KEYS = {"gpu", "arch", "compute_capability", "gpu_count", "gpu_memory_mib", "interconnect", "driver",
              "cuda_driver", "cuda_runtime", "packages", "params", "model"}
_ID = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
_CLAIM = re.compile(r"^S\d{2,3}$")
_OPERATOR_START = ("<", ">", "=", "!", "~")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Source:
    kind: str
    ref: str


@dataclass(frozen=True)
class ParamCondition:
    """A list of accepted values (None = not set), or a specifier on a numeric value."""

    values: tuple[Any, ...] | None = None
    specifier: SpecifierSet | None = None

    def holds(self, present: bool, value: Any) -> bool:
        if self.specifier is not None:
            number = _as_version(value) if present else None
            return number is not None and matches(self.specifier, number)
        assert self.values is not None
        key = _norm_value(value) if present else None
        return key in self.values


@dataclass(frozen=True)
class Conditions:
    gpu: tuple[str, ...] = ()
    arch: tuple[str, ...] = ()
    compute_capability: SpecifierSet | None = None
    gpu_count: SpecifierSet | None = None
    gpu_memory_mib: SpecifierSet | None = None
    interconnect: str | None = None
    driver: SpecifierSet | None = None
    cuda_driver: SpecifierSet | None = None
    cuda_runtime: SpecifierSet | None = None
    packages: tuple[tuple[str, SpecifierSet], ...] = ()
    params: tuple[tuple[str, ParamCondition], ...] = ()
    model: tuple[str, ...] = ()

    @property
    def has_gpu_condition(self) -> bool:
        return bool(self.gpu or self.arch or self.compute_capability or self.gpu_memory_mib)


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    severity: str
    failure: str
    confidence: str
    sources: tuple[Source, ...]
    engine: str | None = None
    when: Conditions = field(default_factory=Conditions)
    symptom: str | None = None
    workaround: str | None = None
    flags: tuple[str, ...] = ()
    claims: tuple[str, ...] = ()
    note: str | None = None
    file: str = ""


@dataclass(frozen=True)
class KnowledgeBase:
    rules: tuple[Rule, ...]
    files: tuple[str, ...] = ()
    not_encoded: Mapping[str, str] = field(default_factory=dict, hash=False)

    def by_id(self) -> dict[str, Rule]:
        return {r.id: r for r in self.rules}


# --------------------------------------------------------------------------- loading


def builtin_rule_files() -> list[Path]:
    return sorted((matrices_dir() / "rules").glob("*.y*ml"))


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """A path may be a rule file or a directory of them."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted(path.glob("*.y*ml")))
        else:
            out.append(path)
    return out


def load_kb(extra: Iterable[str | Path] = (), builtin: bool = True) -> KnowledgeBase:
    files = (builtin_rule_files() if builtin else []) + expand_paths(extra)
    return _load_cached(tuple(str(f) for f in files), builtin)


@lru_cache(maxsize=8)
def _load_cached(files: tuple[str, ...], builtin: bool) -> KnowledgeBase:
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in files:
        for rule in load_rule_file(path):
            if rule.id in seen:
                raise InputError(path, "id", f"duplicate id, first defined in {seen[rule.id]}", rule.id)
            seen[rule.id] = path
            rules.append(rule)
    not_encoded = load_not_encoded() if builtin else {}
    return KnowledgeBase(rules=tuple(rules), files=files, not_encoded=not_encoded)


def load_not_encoded() -> dict[str, str]:
    import yaml

    path = matrices_dir() / "not_encoded.yaml"
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return {str(e["claim"]): str(e["reason"]) for e in data.get("not_encoded", [])}


def load_rule_file(path: str | Path) -> list[Rule]:
    import yaml

    source = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(source, None, f"cannot read rule file: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(source, None, f"invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
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

    unknown = set(raw) - _RULE_KEYS
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
        _enum(engine, ENGINES, fail, "engine")
    sources = raw["sources"]
    if not isinstance(sources, list):
        raise fail("sources", "must be a list of {kind, ref}")
    parsed_sources = []
    for i, s in enumerate(sources):
        if not isinstance(s, Mapping) or set(s) != {"kind", "ref"}:
            raise fail(f"sources[{i}]", "must be {kind, ref}")
        _enum(s["kind"], SOURCE_KINDS, fail, f"sources[{i}].kind")
        parsed_sources.append(Source(kind=str(s["kind"]), ref=str(s["ref"])))
    if raw["confidence"] == "verified" and not any(s.kind == "report" for s in parsed_sources):
        raise fail("confidence", "'verified' needs a source of kind 'report'")
    claims = _str_list(raw.get("claims"), fail, "claims")
    for c in claims:
        if not _CLAIM.match(c):
            raise fail("claims", f"'{c}' is not a claim id like S06")
    return Rule(
        id=rid,
        summary=str(raw["summary"]).strip(),
        severity=raw["severity"],
        failure=raw["failure"],
        confidence=raw["confidence"],
        sources=tuple(parsed_sources),
        engine=engine,
        when=parse_conditions(raw.get("when"), fail),
        symptom=_opt_str(raw.get("symptom")),
        workaround=_opt_str(raw.get("workaround")),
        flags=tuple(_str_list(raw.get("flags"), fail, "flags")),
        claims=tuple(claims),
        note=_opt_str(raw.get("note")),
        file=source,
    )


def _enum(value: Any, allowed: Sequence[str], fail: Any, fld: str) -> None:
    if value not in allowed:
        raise fail(fld, f"'{value}' is not one of {', '.join(allowed)}")


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value).strip()


def _str_list(value: Any, fail: Any, fld: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise fail(fld, "must be a list")
    return [str(v) for v in value]


def parse_conditions(raw: Any, fail: Any) -> Conditions:
    if raw is None:
        return Conditions()
    if not isinstance(raw, Mapping):
        raise fail("when", "must be a mapping of conditions")
    unknown = set(raw) - _WHEN_KEYS
    if unknown:
        raise fail(f"when.{sorted(unknown)[0]}", "unknown condition")

    def spec(key: str) -> SpecifierSet | None:
        if raw.get(key) is None:
            return None
        try:
            return parse_specifier(str(raw[key]))
        except ValueError as exc:
            raise fail(f"when.{key}", str(exc)) from None

    interconnect = raw.get("interconnect")
    if interconnect is not None:
        _enum(interconnect, INTERCONNECTS, fail, "when.interconnect")
    packages = raw.get("packages") or {}
    if not isinstance(packages, Mapping):
        raise fail("when.packages", "must map package names to specifiers")
    parsed_packages = []
    for name, value in packages.items():
        try:
            parsed_packages.append((normalize_package(str(name)), parse_specifier(str(value))))
        except ValueError as exc:
            raise fail(f"when.packages.{name}", str(exc)) from None
    params = raw.get("params") or {}
    if not isinstance(params, Mapping):
        raise fail("when.params", "must map parameter names to values")
    parsed_params = []
    for name, value in params.items():
        parsed_params.append((str(name), _param_condition(value, fail, f"when.params.{name}")))
    return Conditions(
        gpu=tuple(g.lower() for g in _str_list(raw.get("gpu"), fail, "when.gpu")),
        arch=tuple(a.lower() for a in _str_list(raw.get("arch"), fail, "when.arch")),
        compute_capability=spec("compute_capability"),
        gpu_count=spec("gpu_count"),
        gpu_memory_mib=spec("gpu_memory_mib"),
        interconnect=interconnect,
        driver=spec("driver"),
        cuda_driver=spec("cuda_driver"),
        cuda_runtime=spec("cuda_runtime"),
        packages=tuple(parsed_packages),
        params=tuple(parsed_params),
        model=tuple(m.lower() for m in _str_list(raw.get("model"), fail, "when.model")),
    )


def _param_condition(value: Any, fail: Any, fld: str) -> ParamCondition:
    if isinstance(value, str) and value.strip().startswith(_OPERATOR_START):
        try:
            return ParamCondition(specifier=parse_specifier(value))
        except ValueError as exc:
            raise fail(fld, str(exc)) from None
    if isinstance(value, Mapping):
        raise fail(fld, "must be a value, a list of values, or a specifier string")
    values = value if isinstance(value, list) else [value]
    return ParamCondition(values=tuple(_norm_value(v) for v in values))


def _norm_value(value: Any) -> Any:
    """Compare parameter values loosely: 16 == 16.0 == "16", "FP8" == "fp8", True == "true"."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip().lower()


def _as_version(value: Any) -> Version | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return parse_version(str(value))
    except ValueError:
        return None


# --------------------------------------------------------------------------- matching


@dataclass(frozen=True)
class Facts:
    """A fingerprint turned into parsed, comparable values once, so each rule check is cheap."""

    gpus: tuple[tuple[str, str | None, Version | None, Version | None], ...]  # name, arch, cc, memory
    gpu_count: Version
    interconnect: str | None
    driver: Version | None
    cuda_driver: Version | None
    cuda_runtime: Version | None
    packages: Mapping[str, Version]

    @classmethod
    def of(cls, fp: Fingerprint) -> Facts:
        return _facts(fp)


@lru_cache(maxsize=256)
def _facts(fp: Fingerprint) -> Facts:
    def ver(text: str | None) -> Version | None:
        if text is None:
            return None
        try:
            return parse_version(text)
        except ValueError:
            return None

    packages = {}
    for name, version in fp.packages.items():
        parsed = ver(version)
        if parsed is not None:
            packages[normalize_package(name)] = parsed
    return Facts(
        gpus=tuple(
            (g.name.lower(), (g.architecture or "").lower() or None, ver(g.compute_capability),
             ver(str(g.memory_mib)) if g.memory_mib is not None else None)
            for g in fp.gpus
        ),
        gpu_count=parse_version(str(len(fp.gpus))),
        interconnect=fp.interconnect,
        driver=ver(fp.driver),
        cuda_driver=ver(fp.cuda_driver),
        cuda_runtime=ver(fp.cuda_runtime),
        packages=packages,
    )


def rule_matches(rule: Rule, facts: Facts, engine: str | None, params: Mapping[str, Any]) -> bool:
    """Every condition must hold; a condition on a field the fingerprint lacks does not hold.

    The reference definition of a match, one rule at a time; ``matching_rules`` gives the same answer for a
    whole knowledge base through an index built from these same functions.
    """
    return (
        _engine_holds(rule.engine, facts, engine, params)
        and _fingerprint_holds(rule.when, facts)
        and _params_hold(rule.when, params)
    )


def _engine_holds(wanted: str | None, facts: Facts, engine: str | None, params: Mapping[str, Any]) -> bool:
    if wanted is None:
        return True
    if engine is not None:
        return engine == wanted
    return wanted in facts.packages or _norm_value(params.get("engine")) == wanted


def _fingerprint_holds(w: Conditions, facts: Facts) -> bool:
    """The conditions on the machine: GPUs, driver, CUDA, links, package versions."""
    if w.driver is not None and (facts.driver is None or not matches(w.driver, facts.driver)):
        return False
    if w.cuda_driver is not None and (facts.cuda_driver is None or not matches(w.cuda_driver, facts.cuda_driver)):
        return False
    if w.cuda_runtime is not None and (
        facts.cuda_runtime is None or not matches(w.cuda_runtime, facts.cuda_runtime)
    ):
        return False
    if w.gpu_count is not None and not matches(w.gpu_count, facts.gpu_count):
        return False
    if w.interconnect is not None and facts.interconnect != w.interconnect:
        return False
    for name, spec in w.packages:
        version = facts.packages.get(name)
        if version is None or not matches(spec, version):
            return False
    return not (w.has_gpu_condition and not any(_gpu_holds(w, g) for g in facts.gpus))


def _params_hold(w: Conditions, params: Mapping[str, Any]) -> bool:
    """The conditions on the cell: engine parameters and the model."""
    for name, cond in w.params:
        if not cond.holds(name in params, params.get(name)):
            return False
    if w.model:
        model = params.get("model")
        if model is None or not any(fnmatch.fnmatchcase(str(model).lower(), g) for g in w.model):
            return False
    return True


def _gpu_holds(w: Conditions, gpu: tuple[str, str | None, Version | None, Version | None]) -> bool:
    name, arch, cc, memory = gpu
    if w.gpu and not any(fnmatch.fnmatchcase(name, g) for g in w.gpu):
        return False
    if w.arch and arch not in w.arch:
        return False
    if w.compute_capability is not None and (cc is None or not matches(w.compute_capability, cc)):
        return False
    return not (w.gpu_memory_mib is not None and (memory is None or not matches(w.gpu_memory_mib, memory)))


def matching_rules(
    kb: KnowledgeBase, fp: Fingerprint, engine: str | None = None, params: Mapping[str, Any] | None = None
) -> list[Rule]:
    """The rules of ``kb`` that match ``fp`` running ``engine`` with ``params``, in knowledge-base order.

    The same answer as ``[r for r in kb.rules if rule_matches(r, Facts.of(fp), engine, merged_params)]``, from
    an index: the machine conditions are decided once per (knowledge base, fingerprint), and each parameter value
    is checked once against every rule that names it (see ``_Candidates``).
    """
    last = _LAST
    if last is not None and last[0] is kb and last[1] is fp:
        index = last[2]
    else:
        index = _fingerprint_index(kb, fp)
    fp_params = fp.params
    if fp_params:
        merged: Mapping[str, Any] = {**fp_params, **(params or {})}
    else:
        merged = params if params is not None and type(params) is dict else dict(params or {})
    if engine is not None:
        candidates = index.by_engine.get(engine) or index.candidates_for(engine, None)
    else:
        key = _norm_value(merged.get("engine"))
        candidates = index.by_engine_param.get(key) or index.candidates_for(None, key)
    return candidates.match(merged)


# --------------------------------------------------------------------------- the matching index

_MAX_VALUES = 4096  # cached parameter values per name, and result sets, per candidate list
_MAX_FINGERPRINTS = 256  # fingerprint indexes kept per knowledge base
_UNCACHEABLE = object()
_MISSING = object()


def _value_key(value: Any) -> Any:
    """A dict key for a parameter value that two values share only when every condition treats them alike.

    ``1``, ``1.0`` and ``True`` are equal in Python but not to the conditions ("1" vs "true"; ``1.0`` and ``-0.0``
    parse as other versions), so the type is part of the key; other types are not cached.
    """
    cls = value.__class__
    if cls is str:
        return value
    if cls is int or cls is bool or value is None:
        return (cls, value)
    if cls is float:
        return (cls, repr(value))
    return _UNCACHEABLE


class _Candidates:
    """The rules that can still match once the machine and the engine are known, with their parameter conditions.

    Bit ``i`` of a mask stands for ``rules[i]``. For each parameter name that some candidate tests, ``tables[name]``
    maps a value to the mask of candidates whose conditions on that name hold for it (candidates that do not test
    the name have their bit set); ``absent[name]`` is the mask when the cell lacks the name. A cell's result is the
    AND of the masks of its values, and each distinct result is turned into its list of rules once.
    """

    __slots__ = ("rules", "conditions", "names", "all_mask", "tables", "absent", "absent_rest", "results")

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        # name -> ((bit, rule's conditions on that name), ...); "model" also carries the model globs
        by_name: dict[str, list[tuple[int, Conditions]]] = {}
        for i, rule in enumerate(self.rules):
            names = {name for name, _ in rule.when.params}
            if rule.when.model:
                names.add("model")
            for name in sorted(names):
                by_name.setdefault(name, []).append((1 << i, rule.when))
        self.conditions = {name: tuple(entries) for name, entries in by_name.items()}
        self.names = frozenset(self.conditions)
        self.all_mask = (1 << len(self.rules)) - 1
        self.tables: dict[str, dict[Any, int]] = {name: {} for name in self.conditions}
        self.absent = {name: self._mask(name, False, None) for name in self.conditions}
        self.absent_rest: dict[tuple[str, ...], int] = {}
        self.results: dict[int, tuple[Rule, ...]] = {}

    def _mask(self, name: str, present: bool, value: Any) -> int:
        """Candidates whose conditions on ``name`` hold for this value (or its absence); others pass."""
        mask = self.all_mask
        one = {name: value} if present else {}
        for bit, w in self.conditions[name]:
            if not _name_holds(w, name, one):
                mask &= ~bit
        return mask

    def _absent_except(self, present: tuple[str, ...]) -> int:
        mask = self.absent_rest.get(present)
        if mask is None:
            mask = self.all_mask
            for name, absent in self.absent.items():
                if name not in present:
                    mask &= absent
            if len(self.absent_rest) < _MAX_VALUES:
                self.absent_rest[present] = mask
        return mask

    def match(self, params: Mapping[str, Any]) -> list[Rule]:
        if not self.conditions:
            return list(self.rules)
        mask = self.all_mask
        present: list[str] = []
        tables = self.tables
        for name, value in params.items():
            table = tables.get(name)
            if table is None:
                continue
            present.append(name)
            key = _value_key(value)
            bits = table.get(key, None) if key is not _UNCACHEABLE else None
            if bits is None:
                bits = self._mask(name, True, value)
                if key is not _UNCACHEABLE and len(table) < _MAX_VALUES:
                    table[key] = bits
            mask &= bits
        mask &= self._absent_except(tuple(present))
        found = self.results.get(mask)
        if found is None:
            found = tuple(r for i, r in enumerate(self.rules) if mask >> i & 1)
            if len(self.results) < _MAX_VALUES:
                self.results[mask] = found
        return list(found)


def _name_holds(w: Conditions, name: str, params: Mapping[str, Any]) -> bool:
    """``_params_hold`` restricted to the conditions on one parameter name."""
    for cond_name, cond in w.params:
        if cond_name == name and not cond.holds(name in params, params.get(name)):
            return False
    if name == "model" and w.model:
        model = params.get("model")
        if model is None or not any(fnmatch.fnmatchcase(str(model).lower(), g) for g in w.model):
            return False
    return True


class _FingerprintIndex:
    """The rules of a knowledge base whose machine conditions hold on one fingerprint, by engine."""

    __slots__ = ("facts", "rules", "by_engine", "by_engine_param")

    def __init__(self, kb: KnowledgeBase, facts: Facts) -> None:
        self.facts = facts
        self.rules = tuple(r for r in kb.rules if _fingerprint_holds(r.when, facts))
        self.by_engine: dict[str, _Candidates] = {}
        self.by_engine_param: dict[Any, _Candidates] = {}

    def candidates_for(self, engine: str | None, engine_param: Any) -> _Candidates:
        """Rules whose engine condition holds: for ``engine``, or (engine None) for the ``engine`` parameter."""
        facts = self.facts
        probe = {} if engine_param is None else {"engine": engine_param}
        rules = [r for r in self.rules if _engine_holds(r.engine, facts, engine, probe)]
        candidates = _Candidates(rules)
        if engine is not None:
            self.by_engine[engine] = candidates
        else:
            self.by_engine_param[engine_param] = candidates
        return candidates


class _KbIndex:
    __slots__ = ("kb", "fingerprints")

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = weakref.ref(kb)
        self.fingerprints: dict[Fingerprint, _FingerprintIndex] = {}


_KB_INDEXES: dict[int, _KbIndex] = {}
_LAST: tuple[KnowledgeBase, Fingerprint, _FingerprintIndex] | None = None


def _fingerprint_index(kb: KnowledgeBase, fp: Fingerprint) -> _FingerprintIndex:
    global _LAST
    kb_index = _KB_INDEXES.get(id(kb))
    if kb_index is None or kb_index.kb() is not kb:
        if len(_KB_INDEXES) >= 32:
            _KB_INDEXES.clear()
        kb_index = _KB_INDEXES[id(kb)] = _KbIndex(kb)
    index = kb_index.fingerprints.get(fp)
    if index is None:
        if len(kb_index.fingerprints) >= _MAX_FINGERPRINTS:
            kb_index.fingerprints.clear()
        index = kb_index.fingerprints[fp] = _FingerprintIndex(kb, Facts.of(fp))
    _LAST = (kb, fp, index)
    return index


def clear_match_cache() -> None:
    """Forget the matching indexes (they are rebuilt on the next call); for benchmarks and long-lived processes."""
    global _LAST
    _LAST = None
    _KB_INDEXES.clear()
    _facts.cache_clear()


def filter_rules(
    rules: Iterable[Rule], engine: str | None = None, severity: str | None = None, confidence: str | None = None
) -> list[Rule]:
    out = []
    for r in rules:
        if engine is not None and (r.engine or "none") != normalize_package(engine):
            continue
        if severity is not None and r.severity != severity:
            continue
        if confidence is not None and r.confidence != confidence:
            continue
        out.append(r)
    return out
