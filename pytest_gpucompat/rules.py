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
from .inputs import as_text, load_file, parse_yaml, text_field
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
              "cuda_driver", "cuda_runtime", "packages", "params", "model", "needs"}
_NEEDS_KEYS = {"gpus", "gpu_memory_mib"}
WEIGHTS_PARAM = "model_weights_mib"
"""The model's weights in MiB for the cell's dtype: measured from the checkpoint by the plugin, or given in a
fingerprint's ``params`` for ``gpucompat check``; what ``needs.gpu_memory_mib`` divides over the GPUs."""
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
    # the cell needs the product of these parameters' values (absent = 1) in GPUs: holds when fewer are visible
    needs_gpus: tuple[str, ...] = ()
    # the model's weights split over the product of these parameters must fit the smallest visible GPU
    needs_memory: tuple[str, ...] = ()
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


def safe_load_yaml(text: str, source: str = "<yaml>") -> Any:
    """Safe YAML as every loader reads it: libyaml when present, no aliases, bounded nesting (see ``inputs``)."""
    return parse_yaml(text, source)


def load_not_encoded() -> dict[str, str]:
    """``not_encoded.yaml``: claim id -> why no rule encodes it; validated like a rule file."""
    path = matrices_dir() / "not_encoded.yaml"
    if not path.exists():
        return {}
    source = str(path)
    data = load_file(path, "yaml") or {}
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


def load_rule_file(path: str | Path) -> list[Rule]:
    source = str(path)
    data = load_file(path, "yaml")
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
        _enum(engine, ENGINES, fail, "engine")
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
        when=parse_conditions(raw.get("when"), fail),
        symptom=_opt_str(raw.get("symptom"), fail, "symptom"),
        workaround=_opt_str(raw.get("workaround"), fail, "workaround"),
        flags=tuple(_str_list(raw.get("flags"), fail, "flags")),
        claims=tuple(claims),
        note=_opt_str(raw.get("note"), fail, "note"),
        file=source,
    )


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


def parse_conditions(raw: Any, fail: Any) -> Conditions:
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
    parsed_packages = []
    for name, value in packages.items():
        try:
            parsed_packages.append((normalize_package(str(name)), parse_specifier(as_text(value))))
        except ValueError as exc:
            raise fail(f"when.packages.{name}", str(exc)) from None
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
        needs_gpus=tuple(needs_gpus),
        needs_memory=tuple(needs_memory),
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
    for i, v in enumerate(values):
        if isinstance(v, (Mapping, list)):
            raise fail(f"{fld}[{i}]", "must be a value (string, number, boolean or null), not a list or mapping")
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
        and _needs_hold(rule.when, facts, params)
    )


def describe_runner(rule: Rule, fp: Fingerprint, params: Mapping[str, Any]) -> str:
    """What this runner has, for each machine condition the rule names: a reason that says "needs 2 GPUs, 1
    visible" or "this runner: Tesla V100 (compute capability 7.0)" instead of the rule's summary alone."""
    w = rule.when
    parts: list[str] = []
    if w.needs_gpus:
        need = gpus_needed(w.needs_gpus, params)
        factors = " × ".join(f"{n}={params[n]}" for n in w.needs_gpus if params.get(n) is not None)
        parts.append(f"needs {need} GPU{'' if need == 1 else 's'}" + (f" ({factors})" if factors else "")
                     + f", {len(fp.gpus)} visible")
    if w.needs_memory:
        need_mib = memory_needed(w.needs_memory, params)
        split = [f"{n}={params[n]}" for n in w.needs_memory if params.get(n) is not None]
        have = [g.memory_mib for g in fp.gpus if g.memory_mib is not None]
        if need_mib is not None:
            parts.append(f"needs {need_mib:,.0f} MiB of weights per GPU" + (f" (split by {' × '.join(split)})"
                         if split else "") + (f", the smallest GPU has {min(have):,} MiB" if have else ""))
    has: list[str] = []
    if w.gpu_count is not None and not w.needs_gpus:
        has.append(f"{len(fp.gpus)} GPU{'' if len(fp.gpus) == 1 else 's'} visible")
    if w.has_gpu_condition:
        gpus = dict.fromkeys(
            f"{g.name} (compute capability {g.compute_capability or '?'}"
            + (f", {g.memory_mib} MiB" if w.gpu_memory_mib is not None and g.memory_mib is not None else "") + ")"
            for g in fp.gpus
        )
        has.append(", ".join(gpus) or "no GPU")
    for label, name, value in (("driver", "driver", fp.driver), ("CUDA driver", "cuda_driver", fp.cuda_driver),
                               ("CUDA runtime", "cuda_runtime", fp.cuda_runtime)):
        if getattr(w, name) is not None:
            has.append(f"{label} {value or 'unknown'}")
    if w.interconnect is not None:
        has.append(f"interconnect {fp.interconnect or 'unknown'}")
    if w.packages:
        installed = {normalize_package(k): v for k, v in fp.packages.items()}
        has.extend(f"{name} {installed.get(name, 'not installed')}" for name, _ in w.packages)
    if has:
        parts.append("this runner: " + "; ".join(has))
    return "; ".join(parts)


def gpus_needed(names: Sequence[str], params: Mapping[str, Any]) -> int | None:
    """The product of the named parameters (absent or null = 1); None when one is not a positive whole number."""
    total = 1
    for name in names:
        value = params.get(name)
        if value is None:
            continue
        if isinstance(value, bool):
            return None
        try:
            number = int(str(value).strip())
        except ValueError:
            return None
        if number < 1:
            return None
        total *= number
    return total


def memory_needed(names: Sequence[str], params: Mapping[str, Any]) -> float | None:
    """MiB of weights per GPU: the model's weights split over the product of the named parameters; None when the
    weights are not known or a parameter is not a count."""
    weights = params.get(WEIGHTS_PARAM)
    split = gpus_needed(names, params)
    if split is None or isinstance(weights, bool) or not isinstance(weights, (int, float)) or weights <= 0:
        return None
    return float(weights) / split


def _smallest_gpu_mib(facts: Facts) -> float | None:
    sizes = [float(str(g[3])) for g in facts.gpus if g[3] is not None]
    return min(sizes) if sizes else None


def _needs_hold(w: Conditions, facts: Facts, params: Mapping[str, Any]) -> bool:
    """A need is a problem (the condition holds) when the cell needs more than this runner has; a need that cannot
    be told (no weights measured, a GPU of unknown size) is not judged."""
    if w.needs_gpus:
        need = gpus_needed(w.needs_gpus, params)
        if need is None or need <= len(facts.gpus):
            return False
    if w.needs_memory:
        need_mib, have = memory_needed(w.needs_memory, params), _smallest_gpu_mib(facts)
        if need_mib is None or have is None or need_mib <= have:
            return False
    return True


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
    an index (see ``_KbIndex``): machine conditions are decided once per fingerprint, each parameter value once
    per knowledge base.
    """
    last = _LAST
    fpi = last[2] if last is not None and last[0] is kb and last[1] is fp else _fingerprint_index(kb, fp)
    fp_params = fp.params
    if fp_params:
        merged: Mapping[str, Any] = {**fp_params, **(params or {})}
    else:
        merged = params if params is not None and type(params) is dict else dict(params or {})
    if engine is not None:
        candidates = fpi.by_engine.get(engine)
        if candidates is None:
            candidates = fpi.candidates(engine, None)
    else:
        key = _norm_value(merged.get("engine"))
        candidates = fpi.by_engine_param.get(key)
        if candidates is None:
            candidates = fpi.candidates(None, key)
    found = fpi.kb_index.match(candidates, merged)
    if fpi.kb_index.has_needs:
        found = [r for r in found if _needs_hold(r.when, fpi.facts, merged)]
    return found


# --------------------------------------------------------------------------- the matching index

_MAX_CACHED = 16384  # values per parameter name, and distinct result sets, remembered per knowledge base
_MAX_FINGERPRINTS = 256  # fingerprints remembered per knowledge base
_MAX_KBS = 32
_UNCACHEABLE = object()


def _value_key(value: Any) -> Any:
    """A dict key for a parameter value that two values share only when every condition treats them alike.

    ``1``, ``1.0`` and ``True`` are equal in Python but not to the conditions ("1" vs "true"; ``1.0`` and ``-0.0``
    parse as other versions than ``1`` and ``0``), so the type is part of the key; other types are not cached.
    """
    cls = value.__class__
    if cls is str:
        return value
    if cls is int or cls is bool or value is None:
        return (cls, value)
    if cls is float:
        return (cls, repr(value))
    return _UNCACHEABLE


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


def _vkey(version: Version | None) -> str | None:
    """A key for a version that two versions share only when every specifier treats them alike."""
    return None if version is None else str(version)


def _machine_fields(facts: Facts) -> list[tuple[Any, Any, Any]]:
    """(field, cache key, value) for each machine fact a condition can test; packages are ("package", name)."""
    fields: list[tuple[Any, Any, Any]] = [
        ("driver", _vkey(facts.driver), facts.driver),
        ("cuda_driver", _vkey(facts.cuda_driver), facts.cuda_driver),
        ("cuda_runtime", _vkey(facts.cuda_runtime), facts.cuda_runtime),
        ("gpu_count", _vkey(facts.gpu_count), facts.gpu_count),
        ("interconnect", facts.interconnect, facts.interconnect),
        ("gpus", tuple((n, a, _vkey(c), _vkey(m)) for n, a, c, m in facts.gpus), facts.gpus),
    ]
    return fields


def _field_holds(w: Conditions, field_name: Any, value: Any) -> bool:
    """``_fingerprint_holds`` restricted to the conditions on one machine fact."""
    if field_name == "driver":
        return w.driver is None or (value is not None and matches(w.driver, value))
    if field_name == "cuda_driver":
        return w.cuda_driver is None or (value is not None and matches(w.cuda_driver, value))
    if field_name == "cuda_runtime":
        return w.cuda_runtime is None or (value is not None and matches(w.cuda_runtime, value))
    if field_name == "gpu_count":
        return w.gpu_count is None or matches(w.gpu_count, value)
    if field_name == "interconnect":
        return w.interconnect is None or value == w.interconnect
    if field_name == "gpus":
        return not (w.has_gpu_condition and not any(_gpu_holds(w, g) for g in value))
    _, package = field_name
    specs = [spec for name, spec in w.packages if name == package]
    return all(value is not None and matches(spec, value) for spec in specs)


def _machine_field_names(w: Conditions) -> list[Any]:
    names: list[Any] = [f for f in ("driver", "cuda_driver", "cuda_runtime", "gpu_count", "interconnect")
                        if getattr(w, f) is not None]
    if w.has_gpu_condition:
        names.append("gpus")
    names.extend(("package", name) for name, _ in w.packages)
    return names


class _KbIndex:
    """A knowledge base as bit masks: bit ``i`` stands for ``kb.rules[i]``.

    A rule's conditions are a conjunction of conditions that each test one thing: one machine fact (the driver, the
    GPUs, one package's version, ...), the engine, or one parameter of the cell. So the rules a cell matches are the
    AND of one mask per thing tested: for each machine fact, the rules whose conditions on it hold for the
    fingerprint's value; the rules whose engine condition holds; for each parameter name some rule tests, the rules
    whose conditions on it hold for the cell's value (or its absence). Each mask is computed with the reference
    functions above the first time a value is seen and then remembered, so a value is checked against the rules
    once per knowledge base, not once per cell; each distinct result becomes its list of rules once.
    """

    __slots__ = ("kb", "rules", "all_mask", "machine_conditions", "machine_tables", "engine_free",
                 "engine_masks", "param_mask", "conditions", "tables", "absent", "plans", "results",
                 "chunks", "fingerprints", "has_needs")

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = weakref.ref(kb)
        self.rules = tuple(kb.rules)
        self.all_mask = (1 << len(self.rules)) - 1
        self.engine_free = 0  # rules without an engine condition
        self.engine_masks: dict[str, int] = {}
        self.param_mask = 0  # rules with parameter or model conditions
        # needs compare parameters with the machine: judged after the index
        self.has_needs = any(r.when.needs_gpus or r.when.needs_memory for r in self.rules)
        by_field: dict[Any, list[tuple[int, Conditions]]] = {}
        by_name: dict[str, list[tuple[int, Conditions]]] = {}
        for i, rule in enumerate(self.rules):
            bit = 1 << i
            w = rule.when
            for field_name in _machine_field_names(w):
                by_field.setdefault(field_name, []).append((bit, w))
            if rule.engine is None:
                self.engine_free |= bit
            else:
                self.engine_masks[rule.engine] = self.engine_masks.get(rule.engine, 0) | bit
            names = {name for name, _ in w.params}
            if w.model:
                names.add("model")
            if names:
                self.param_mask |= bit
            for name in names:
                by_name.setdefault(name, []).append((bit, w))
        self.machine_conditions = {f: tuple(entries) for f, entries in by_field.items()}
        self.machine_tables: dict[Any, dict[Any, int]] = {f: {} for f in self.machine_conditions}
        self.conditions = {name: tuple(entries) for name, entries in by_name.items()}
        self.tables: dict[str, dict[Any, int]] = {name: {} for name in self.conditions}
        self.absent = {name: self._mask(name, False, None) for name in self.conditions}
        self.plans: dict[tuple[Any, ...], tuple[int, tuple[tuple[str, dict[Any, int]], ...]]] = {}
        self.results: dict[int, tuple[Rule, ...]] = {}
        # rules by byte of a mask: chunks[i][b] lists the rules of the set bits of byte value b at byte i
        self.chunks: list[list[tuple[Rule, ...] | None]] = [[None] * 256 for _ in range((len(self.rules) + 7) // 8)]
        self.fingerprints: dict[Fingerprint, _FingerprintIndex] = {}

    # ---------------------------------------------------------------- machine

    def machine_mask(self, facts: Facts) -> int:
        """The rules whose machine conditions all hold for these facts."""
        mask = self.all_mask
        fields = _machine_fields(facts)
        fields.extend((("package", name), _vkey(version), version) for name, version in facts.packages.items())
        seen_packages = set()
        for field_name, key, value in fields:
            table = self.machine_tables.get(field_name)
            if table is None:
                continue
            if isinstance(field_name, tuple):
                seen_packages.add(field_name)
            mask &= self._machine_bits(table, field_name, key, value)
        for field_name, table in self.machine_tables.items():  # conditions on packages this machine lacks
            if isinstance(field_name, tuple) and field_name not in seen_packages:
                mask &= self._machine_bits(table, field_name, None, None)
        return mask

    def _machine_bits(self, table: dict[Any, int], field_name: Any, key: Any, value: Any) -> int:
        bits = table.get(key)
        if bits is None:
            bits = self.all_mask
            for bit, w in self.machine_conditions[field_name]:
                if not _field_holds(w, field_name, value):
                    bits &= ~bit
            if len(table) < _MAX_CACHED:
                table[key] = bits
        return bits

    # ---------------------------------------------------------------- parameters

    def _mask(self, name: str, present: bool, value: Any) -> int:
        """All rules but those whose conditions on ``name`` fail for this value (or its absence)."""
        mask = self.all_mask
        one = {name: value} if present else {}
        for bit, w in self.conditions[name]:
            if not _name_holds(w, name, one):
                mask &= ~bit
        return mask

    def _plan(self, keys: tuple[Any, ...]) -> tuple[int, tuple[tuple[str, dict[Any, int]], ...]]:
        """For cells whose parameters have these names: the mask of the tested names they lack, and the tables of
        those they have."""
        present = [name for name in keys if name in self.tables]
        absent = self.all_mask
        for name, bits in self.absent.items():
            if name not in present:
                absent &= bits
        plan = (absent, tuple((name, self.tables[name]) for name in present))
        if len(self.plans) < _MAX_CACHED:
            self.plans[keys] = plan
        return plan

    def match(self, candidates: int, params: Mapping[str, Any]) -> list[Rule]:
        mask = candidates
        if mask & self.param_mask:
            keys = tuple(params)
            plan = self.plans.get(keys)
            if plan is None:
                plan = self._plan(keys)
            mask &= plan[0]
            for name, table in plan[1]:
                value = params[name]
                key = value if value.__class__ is str else _value_key(value)
                bits = None if key is _UNCACHEABLE else table.get(key)
                if bits is None:
                    bits = self._mask(name, True, value)
                    if key is not _UNCACHEABLE and len(table) < _MAX_CACHED:
                        table[key] = bits
                mask &= bits
        found = self.results.get(mask)
        if found is None:
            found = self._rules_of(mask)
            if len(self.results) < _MAX_CACHED:
                self.results[mask] = found
        return list(found)

    def _rules_of(self, mask: int) -> tuple[Rule, ...]:
        found: list[Rule] = []
        chunks = self.chunks
        for i, byte in enumerate(mask.to_bytes(len(chunks), "little")):
            if byte:
                part = chunks[i][byte]
                if part is None:
                    part = chunks[i][byte] = tuple(self.rules[i * 8 + j] for j in range(8) if byte >> j & 1)
                found.extend(part)
        return tuple(found)


class _FingerprintIndex:
    """The rules whose machine conditions hold on one fingerprint, and of those the ones each engine can match."""

    __slots__ = ("kb_index", "facts", "machine", "installed_engines", "by_engine", "by_engine_param")

    def __init__(self, kb_index: _KbIndex, facts: Facts) -> None:
        self.kb_index = kb_index
        self.facts = facts
        self.machine = kb_index.machine_mask(facts)
        self.installed_engines = 0
        for name, bits in kb_index.engine_masks.items():
            if _engine_holds(name, facts, None, {}):  # no engine given: the rule's engine is installed here
                self.installed_engines |= bits
        self.by_engine: dict[str, int] = {}
        self.by_engine_param: dict[Any, int] = {}

    def candidates(self, engine: str | None, engine_param: Any) -> int:
        """Rules whose machine and engine conditions hold: for ``engine``, or (no engine) the ``engine`` parameter."""
        kbi = self.kb_index
        if engine is not None:
            mask = self.machine & (kbi.engine_free | kbi.engine_masks.get(engine, 0))
            self.by_engine[engine] = mask
        else:
            named = kbi.engine_masks.get(engine_param, 0) if isinstance(engine_param, str) else 0
            mask = self.machine & (kbi.engine_free | self.installed_engines | named)
            if len(self.by_engine_param) < _MAX_CACHED:
                self.by_engine_param[engine_param] = mask
        return mask


_KB_INDEXES: dict[int, _KbIndex] = {}
_LAST: tuple[KnowledgeBase, Fingerprint, _FingerprintIndex] | None = None


def _fingerprint_index(kb: KnowledgeBase, fp: Fingerprint) -> _FingerprintIndex:
    global _LAST
    kb_index = _KB_INDEXES.get(id(kb))
    if kb_index is None or kb_index.kb() is not kb:
        if len(_KB_INDEXES) >= _MAX_KBS:
            _KB_INDEXES.clear()
        kb_index = _KB_INDEXES[id(kb)] = _KbIndex(kb)
    index = kb_index.fingerprints.get(fp)
    if index is None:
        if len(kb_index.fingerprints) >= _MAX_FINGERPRINTS:
            kb_index.fingerprints.clear()
        index = kb_index.fingerprints[fp] = _FingerprintIndex(kb_index, Facts.of(fp))
    _LAST = (kb, fp, index)
    return index


def clear_match_cache() -> None:
    """Forget the matching indexes (they are rebuilt on the next call): for benchmarks, and to free memory."""
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
