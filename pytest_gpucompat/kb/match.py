"""Matching, one rule at a time: a fingerprint's facts, one function per condition kind, and ``rule_matches``.

Every condition kind is judged by exactly one function here. ``rule_matches`` combines them for one rule and is the
reference definition of a match: the tests and ``bench/run.py`` use it as the oracle for ``kb.index``, which answers
the same question for a whole knowledge base from bit masks computed with these same functions
(``MACHINE_CONDITIONS``, ``package_holds``, ``param_holds``, ``engine_holds``, ``needs_hold``).
PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from operator import attrgetter
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ..catalog.cuda_drivers import driver_range, spelled
from ..catalog.gpus import lookup
from ..common.versions import matches, norm_value, normalize_package, parse_specifier, parse_version
from ..machine.fingerprint import GPU, Fingerprint
from .describe import GPU_SPECIFIERS, condition_label
from .schema import SPECIFIER_FIELDS, WEIGHTS_PARAM, Conditions, ParamCondition, Rule


@dataclass(frozen=True)
class Facts:
    """A fingerprint turned into parsed, comparable values once, so each rule check is cheap."""

    gpus: tuple[tuple[str, str | None, Version | None, Version | None], ...]  # name, arch, cc, memory
    gpu_count: Version
    interconnect: str | None
    versions: Mapping[str, Version | None]  # MACHINE_VERSIONS: the driver's, CUDA's, ... (None: not known)
    packages: Mapping[str, Version]
    installs: Mapping[str, bool | None] = field(default_factory=dict)  # engine -> complete (None: unknown)
    # every tracked package the machine has is listed (a fingerprint read from a machine, which records `installs`
    # for its engines): a package it does not list is known to be absent; in a hand-written file it is not known
    packages_listed: bool = False
    env: Mapping[str, str] = field(default_factory=dict)  # the runner's engine variables (fingerprint ``env``)
    # without a driver version, the drivers the stated CUDA driver version allows (catalog.cuda_drivers)
    driver_range: tuple[Version, Version | None] | None = None

    @classmethod
    def of(cls, fp: Fingerprint) -> Facts:
        """The fingerprint's facts, remembered for fingerprints whose fields are all of the types they are written
        in (``_plain``): the cache finds a fingerprint by equality, and equal fingerprints of other types (a GPU of
        1 MiB and one of True, a driver of 535 and one of 535.0) are different facts."""
        return _facts(fp) if _plain(fp) else facts_of(fp)


def facts_of(fp: Fingerprint) -> Facts:
    """``Facts.of`` without its cache: ``kb.index`` builds each fingerprint's facts once into the fingerprint's
    index, found by identity, so hashing the fingerprint (each of its GPUs) to find them again is work lost."""
    return Facts(
        gpus=tuple(_gpu_facts(g) for g in fp.gpus),
        gpu_count=parse_version(str(len(fp.gpus))),
        interconnect=fp.interconnect,
        versions={name: _ver(getattr(fp, name)) for name in MACHINE_VERSIONS},
        packages=package_versions(fp),
        installs=_installs(fp),
        packages_listed=bool(getattr(fp, "installs", None)),
        env=dict(getattr(fp, "env", None) or {}),
        driver_range=_driver_range(fp),
    )


def _gpu_facts(gpu: GPU) -> tuple[str, str | None, Version | None, Version | None]:
    """A GPU's name, architecture, compute capability and memory. Where the record gives a name and no compute
    capability (a hand-written fingerprint, a report's "Tesla V100 SXM2 16GB"), the GPU catalog's model of that name
    gives it and its architecture: the name states them as surely as NVML would, and a rule about V100s is about
    that GPU. A stated value always wins."""
    arch, cc = (gpu.architecture or "").lower() or None, _ver(gpu.compute_capability)
    if cc is None:
        model = lookup(gpu.name)
        if model is not None and arch in (None, model.architecture):
            arch, cc = model.architecture, _ver(model.compute_capability)
    return gpu.name.lower(), arch, cc, _ver(str(gpu.memory_mib)) if gpu.memory_mib is not None else None


def _driver_range(fp: Fingerprint) -> tuple[Version, Version | None] | None:
    if fp.driver is not None:
        return None
    cuda = _ver(fp.cuda_driver)
    return driver_range(cuda) if cuda is not None else None


_facts = lru_cache(maxsize=1024)(facts_of)  # as many as kb.index remembers fingerprints
_GPU_FIELDS = attrgetter("name", "architecture", "compute_capability", "memory_mib")  # what facts_of reads of a GPU
_PACKAGE_NAMES: dict[str, str] = {}  # a package's name as written -> normalize_package's


def package_versions(fp: Fingerprint) -> dict[str, Version]:
    """``Facts.packages``: each package whose version parses, by its normalized name."""
    packages = {}
    for name, version in fp.packages.items():
        parsed = _ver(version)
        if parsed is not None:
            packages[package_name(name)] = parsed
    return packages


def _is_text(value: Any) -> bool:
    return value is None or value.__class__ is str


def _plain(fp: Fingerprint) -> bool:
    """Whether every field ``facts_of`` reads is of the type a fingerprint file gives it (texts str or None, a GPU's
    MiB int or None, an install's ``complete`` bool or None), so equal fingerprints make equal facts."""
    if not all(map(_is_text, (fp.driver, fp.cuda_driver, fp.cuda_runtime, fp.interconnect))):
        return False
    for name, arch, cc, mib in map(_GPU_FIELDS, fp.gpus):
        if not (name.__class__ is str and _is_text(arch) and _is_text(cc) and (mib is None or mib.__class__ is int)):
            return False
    env = getattr(fp, "env", None) or {}
    if not all(map(_is_text, (*fp.packages, *fp.packages.values(), *env, *env.values()))):
        return False
    installs = getattr(fp, "installs", None)
    if isinstance(installs, Mapping):
        for state in installs.values():
            complete = state.get("complete") if isinstance(state, Mapping) else getattr(state, "complete", None)
            if complete is not None and complete.__class__ is not bool:
                return False
    return True


def package_name(name: str) -> str:
    """``normalize_package``, remembered per name as written (canonicalize_name runs a regular expression; a fleet
    has a handful of names)."""
    normal = _PACKAGE_NAMES.get(name)
    if normal is None:
        normal = normalize_package(name)
        if len(_PACKAGE_NAMES) < 4096:
            _PACKAGE_NAMES[name] = normal
    return normal


class _Unknown:
    """A package a hand-written fingerprint does not list: neither installed nor known to be absent."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()


def package_fact(facts: Facts, name: str) -> Any:
    """A package's version; None when the machine is known not to have it; UNKNOWN when nobody said."""
    version = facts.packages.get(name)
    if version is None and not facts.packages_listed:
        return UNKNOWN
    return version


def _installs(fp: Fingerprint) -> dict[str, bool | None]:
    """Engine -> whether it is installed with every requirement it declares (None: not known)."""
    installs = getattr(fp, "installs", None)
    if not isinstance(installs, Mapping):
        return {}
    out: dict[str, bool | None] = {}
    for engine, state in installs.items():
        complete = state.get("complete") if isinstance(state, Mapping) else getattr(state, "complete", None)
        out[str(engine)] = complete if isinstance(complete, bool) else None
    return out


def install_holds(w: Conditions, installs: Mapping[str, bool | None]) -> bool:
    """``when.install``: the rule's engine is installed with (complete) or without (incomplete) every requirement
    it declares; an engine whose install is not known holds neither."""
    assert w.install is not None
    engine, wanted = w.install
    complete = installs.get(engine)
    return complete is not None and complete == (wanted == "complete")


def env_holds(w: Conditions, env: Mapping[str, str]) -> bool:
    """``when.env``: each named variable has one of the listed values (None: the variable is not set), or for a
    negated condition none of them."""
    return all((env.get(name) in values) != negated for name, values, negated in w.env)


def _ver(text: str | None) -> Version | None:
    if text is None:
        return None
    try:
        return parse_version(text)
    except ValueError:
        return None


def clear_facts_cache() -> None:
    _facts.cache_clear()
    _VKEYS.clear()
    _PACKAGE_NAMES.clear()


# --------------------------------------------------------------------------- one function per condition kind


def spec_holds(spec: SpecifierSet, value: Version | None) -> bool:
    """A version condition: a fact the fingerprint lacks does not hold."""
    return value is not None and matches(spec, value)


def gpu_holds(w: Conditions, gpu: tuple[str, str | None, Version | None, Version | None]) -> bool:
    """``gpu``, ``arch``, ``compute_capability`` and ``gpu_memory_mib`` on one GPU."""
    name, arch, cc, memory = gpu
    if w.gpu and not any(fnmatch.fnmatchcase(name, g) for g in w.gpu):
        return False
    if w.arch and arch not in w.arch:
        return False
    if w.compute_capability is not None and not spec_holds(w.compute_capability, cc):
        return False
    return w.gpu_memory_mib is None or spec_holds(w.gpu_memory_mib, memory)


def gpus_hold(w: Conditions, gpus: Sequence[tuple[str, str | None, Version | None, Version | None]]) -> bool:
    """The GPU conditions hold for one and the same visible GPU, any of them."""
    return any(gpu_holds(w, g) for g in gpus)


_VKEYS: dict[int, tuple[Version, str]] = {}  # id -> (the version, kept alive so its id stays its own; its text)


def vkey(version: Version | None) -> str | None:
    """A key for a version that two versions share only when every specifier treats them alike: its text
    (``8`` and ``8.0`` are equal versions but not to ``===8.0``). Remembered per version object (``parse_version``
    returns the same object for the same text), since ``Version.__str__`` takes microseconds."""
    if version is None:
        return None
    entry = _VKEYS.get(id(version))
    if entry is not None and entry[0] is version:
        return entry[1]
    key = str(version)
    if len(_VKEYS) < 4096:
        _VKEYS[id(version)] = (version, key)
    return key


def _gpus_key(gpus: Sequence[tuple[str, str | None, Version | None, Version | None]]) -> Hashable:
    """``gpus_hold`` asks whether any GPU qualifies, so eight alike GPUs share one GPU's key: each distinct GPU
    once, in order of first appearance."""
    return tuple(dict.fromkeys((n, a, vkey(c), vkey(m)) for n, a, c, m in gpus))


@dataclass(frozen=True)
class MachineCondition:
    """A condition on one fact of the machine. ``kb.index`` decides it once per distinct ``key(fact)`` per
    knowledge base; ``rule_matches`` calls ``holds`` directly. ``holds`` is only asked when ``tested`` is true."""

    name: str
    fields: tuple[str, ...]  # the ``Conditions`` fields it judges
    tested: Callable[[Conditions], bool]  # whether a rule's conditions test this fact
    fact: Callable[[Facts], Any]  # the machine's value
    key: Callable[[Any], Hashable]  # a cache key two values share only when ``holds`` treats them alike
    holds: Callable[[Conditions, Any], bool]
    known: Callable[[Facts], bool] = lambda f: True  # whether the fingerprint has the fact (``contradiction``)


MACHINE_VERSIONS: tuple[str, ...] = tuple(name for name in SPECIFIER_FIELDS if name not in GPU_SPECIFIERS)
"""The version conditions on a version the fingerprint records in a field of the same name (``driver``,
``cuda_driver``, ``cuda_runtime``): each is read once into ``Facts.versions`` and judged by its
``version_condition``, so such a condition is its ``Conditions`` field alone (docs/extending.md, "Add a rule
field")."""


def version_condition(name: str, fact: Callable[[Facts], Any] | None = None,
                      known: Callable[[Facts], bool] = lambda f: True) -> MachineCondition:
    """The condition ``when.NAME``, one version specifier (``Conditions.NAME``), on a version of the machine:
    ``Facts.versions[NAME]`` unless ``fact`` says where it is (one it lacks does not hold)."""
    condition = attrgetter(name)

    def version(f: Facts) -> Version | None:
        return f.versions[name]

    def holds(w: Conditions, value: Any) -> bool:
        spec = condition(w)
        return spec is not None and spec_holds(spec, value)

    return MachineCondition(name, (name,), lambda w: condition(w) is not None, fact or version, vkey, holds, known)


def spec_holds_on_range(spec: SpecifierSet, lower: Version, upper: Version | None) -> bool:
    """Whether ``spec`` holds for every version of [lower, upper) (upper None: no end): each clause a bound
    (``<``, ``<=``, ``>=``, ``>``) that the whole range keeps; any other clause cannot be told from a range."""
    for clause in spec:
        bound = parse_version(clause.version)
        if clause.operator in ("<", "<="):
            if upper is None or upper > bound:
                return False
        elif clause.operator == ">=":
            if lower < bound:
                return False
        elif clause.operator == ">":
            if lower <= bound:
                return False
        else:
            return False
    return True


def _driver_fact(f: Facts) -> Any:
    """The driver's version, or the range of drivers its stated CUDA version allows (``Facts.driver_range``)."""
    return f.versions["driver"] if f.versions["driver"] is not None else f.driver_range


def _driver_holds(w: Conditions, value: Any) -> bool:
    if isinstance(value, tuple):
        return w.driver is not None and spec_holds_on_range(w.driver, *value)
    return w.driver is not None and spec_holds(w.driver, value)


def _driver_key(value: Any) -> Hashable:
    return (vkey(value[0]), vkey(value[1])) if isinstance(value, tuple) else vkey(value)


_DRIVER = MachineCondition("driver", ("driver",), lambda w: w.driver is not None, _driver_fact, _driver_key,
                           _driver_holds, known=lambda f: f.versions["driver"] is not None)
"""``when.driver``: on the driver's version, or on every driver the stated CUDA driver version allows."""

MACHINE_CONDITIONS: tuple[MachineCondition, ...] = (
    *(_DRIVER if name == "driver" else version_condition(name) for name in MACHINE_VERSIONS),
    version_condition("gpu_count", attrgetter("gpu_count"), known=lambda f: bool(f.gpus)),
    MachineCondition("interconnect", ("interconnect",),
                     lambda w: w.interconnect is not None, lambda f: f.interconnect, lambda v: v,
                     lambda w, v: v == w.interconnect),
    MachineCondition("install", ("install",),
                     lambda w: w.install is not None, lambda f: f.installs,
                     lambda v: tuple(sorted(v.items())), install_holds,
                     known=lambda f: bool(f.installs)),
    MachineCondition("env", ("env",),
                     lambda w: bool(w.env), lambda f: f.env,
                     lambda v: tuple(sorted(v.items())), env_holds),
    MachineCondition("gpus", ("gpu", "arch", "compute_capability", "gpu_memory_mib"),
                     lambda w: w.has_gpu_condition, lambda f: f.gpus,
                     _gpus_key, gpus_hold,
                     known=lambda f: bool(f.gpus)),
)

# ------------------------------------------------------------------ a fingerprint's fields as keys of its facts
#
# ``kb.index`` decides each machine fact once per distinct value. Reading the value from ``Facts`` means making the
# facts (parsing every version) and writing each version back as its key; these functions make a key from the
# fingerprint's own fields instead, one that two fingerprints share only where ``facts_of`` makes the same fact of
# them: the fields as written, where they are of a type whose equal values are alike (str, int, None). Anything
# else is NO_KEY, and the index decides that fact from the facts as before.

NO_KEY: Any = object()


def _text_key(name: str, fp: Fingerprint) -> Any:
    """A version field (``Facts.versions[name]``, ``_ver`` of it) or the interconnect: the text itself (else NO_KEY).
    Bound to its field by ``partial`` in ``RAW_FACT_KEYS`` rather than made as a closure at import: tools/mutation.py
    changes a function per call, so a closure made before a mutant is chosen would never run the mutant."""
    value = getattr(fp, name)
    return value if value is None or value.__class__ is str else NO_KEY


def gpus_fields_key(fp: Fingerprint) -> Any:
    """``Facts.gpus`` is made from each GPU's name, architecture, compute capability and MiB, and the GPU conditions
    and ``needs`` ask only whether any GPU qualifies and for the smallest: each distinct GPU's fields once, in
    order of first appearance (``_gpus_key``'s rule, on the fields as written)."""
    gpus = tuple(dict.fromkeys(map(_GPU_FIELDS, fp.gpus)))
    for name, arch, cc, mib in gpus:
        if (name.__class__ is not str or (arch is not None and arch.__class__ is not str)
                or (cc is not None and cc.__class__ is not str) or (mib is not None and mib.__class__ is not int)):
            return NO_KEY
    return gpus


def smallest_gpu_mib_of(gpus: Sequence[tuple[Any, Any, Any, int | None]]) -> float | None:
    """``needs_machine``'s smallest GPU for the GPUs of a ``gpus_fields_key``: the same parse of each MiB."""
    sizes = [float(key) for *_, mib in gpus
             if mib is not None and (key := vkey(_ver(str(mib)))) is not None]
    return min(sizes) if sizes else None


def package_keys(fp: Fingerprint) -> tuple[dict[str, Any], Any]:
    """Per package the fingerprint names (by ``package_name``), a key of what ``facts_of`` and ``package_fact``
    make of it: its version as written and whether the machine lists every package (an unparsable version counts
    as absent, which that decides); NO_KEY for a name or version that is not a str, or a package named twice. Then
    the key of a package it does not name."""
    listed = bool(getattr(fp, "installs", None))
    keys: dict[str, Any] = {}
    for name, version in fp.packages.items():
        if name.__class__ is not str:
            return {}, NO_KEY  # facts_of decides (or refuses) such a fingerprint
        normal = package_name(name)
        keys[normal] = (version, listed) if normal not in keys and version.__class__ is str else NO_KEY
    return keys, (None, listed)


def _driver_text_key(fp: Fingerprint) -> Any:
    """``_driver_fact`` is made from the driver, or without one from the CUDA version the driver supports."""
    driver, cuda = fp.driver, fp.cuda_driver
    if not (_is_text(driver) and _is_text(cuda)):
        return NO_KEY
    return (driver, None) if driver is not None else (None, cuda)


RAW_FACT_KEYS: dict[str, Callable[[Fingerprint], Any]] = {
    **{name: partial(_text_key, name) for name in MACHINE_VERSIONS},
    "driver": _driver_text_key,
    "gpu_count": lambda fp: len(fp.gpus),
    "interconnect": partial(_text_key, "interconnect"),
    "install": lambda fp: tuple(sorted(_installs(fp).items())),  # the facts' own key, made without the rest
    "env": lambda fp: tuple(sorted(dict(getattr(fp, "env", None) or {}).items())),
    "gpus": gpus_fields_key,
}
"""Per machine condition (``MACHINE_CONDITIONS``' names), its key from the fingerprint's fields (``field_key``)."""


def field_key(name: str) -> Callable[[Fingerprint], Any]:
    """The machine condition's key from the fingerprint's fields; for one without (a condition added without its
    entry in ``RAW_FACT_KEYS``), always NO_KEY: the index decides it from the facts, as exactly and more slowly."""
    return RAW_FACT_KEYS.get(name, _no_key)


def _no_key(fp: Fingerprint) -> Any:
    return NO_KEY


PACKAGE_FIELDS = ("packages",)  # judged by package_holds, per package
PARAM_FIELDS = ("params", "model")  # judged by param_holds, per parameter name
NEEDS_FIELDS = ("needs_gpus", "needs_memory", "needs_divisible")  # judged by needs_hold


def package_holds(w: Conditions, package: str, version: Version | None) -> bool:
    """The conditions on one (normalized) package's version; a package that is not installed holds only an
    ``absent`` condition (a specifier of None), and one whose presence is not known (UNKNOWN) holds none."""
    if version is UNKNOWN:
        return not any(name == package for name, _ in w.packages)
    return all(version is None if spec is None else spec_holds(spec, version)
               for name, spec in w.packages if name == package)


def machine_holds(w: Conditions, facts: Facts) -> bool:
    """The conditions on the machine: GPUs, driver, CUDA, links, package versions."""
    for cond in MACHINE_CONDITIONS:
        if cond.tested(w) and not cond.holds(w, cond.fact(facts)):
            return False
    return all(package_holds(w, name, package_fact(facts, name)) for name, _ in w.packages)


def _as_version(value: Any) -> Version | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return parse_version(str(value))
    except ValueError:
        return None


def param_condition_holds(cond: ParamCondition, present: bool, value: Any) -> bool:
    """One ``params`` entry: a specifier on a numeric value, or any of a list of values (None = not set)."""
    if cond.specifier is not None:
        number = _as_version(value) if present else None
        return number is not None and matches(cond.specifier, number)
    assert cond.values is not None
    return (norm_value(value) if present else None) in cond.values


def param_names(w: Conditions) -> tuple[str, ...]:
    """The cell parameters a rule's conditions test (``model`` for a ``model`` condition)."""
    names = dict.fromkeys(name for name, _ in w.params)
    if w.model:
        names["model"] = None
    return tuple(names)


def param_holds(w: Conditions, name: str, params: Mapping[str, Any]) -> bool:
    """The conditions on one parameter of the cell: its ``params`` entries and, for ``model``, the globs."""
    for cond_name, cond in w.params:
        if cond_name == name and not param_condition_holds(cond, name in params, params.get(name)):
            return False
    if name == "model" and w.model:
        model = params.get("model")
        if model is None or not any(fnmatch.fnmatchcase(str(model).lower(), g) for g in w.model):
            return False
    return True


def params_hold(w: Conditions, params: Mapping[str, Any]) -> bool:
    """The conditions on the cell: engine parameters and the model."""
    return all(param_holds(w, name, params) for name in param_names(w))


def engine_holds(wanted: str | None, facts: Facts, engine: str | None, params: Mapping[str, Any]) -> bool:
    """A rule's ``engine``: the cell's engine; without one (``gpucompat check``) the engine is installed or
    ``params.engine`` names it."""
    if wanted is None:
        return True
    if engine is not None:
        return engine == wanted
    return engine_installed(wanted, facts.packages) or norm_value(params.get("engine")) == wanted


def engine_installed(wanted: str, packages: Mapping[str, Version]) -> bool:
    """``engine_holds`` without an engine, by the machine: the rule's engine is installed (``Facts.packages``)."""
    return wanted in packages


def _whole(value: Any) -> int | None:
    """A parameter's value as a positive whole number (``28``, ``"28"``), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number > 0 else None


def gpus_needed(names: Sequence[str], params: Mapping[str, Any]) -> int | None:
    """The product of the named parameters (absent or null = 1); None when one is not a positive whole number."""
    total = 1
    for name in names:
        value = params.get(name)
        if value is None:
            continue
        number = _whole(value)
        if number is None:
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
    sizes = [float(key) for g in facts.gpus if (key := vkey(g[3])) is not None]  # vkey: str(), remembered per version
    return min(sizes) if sizes else None


def _divisible_pairs(w: Conditions, params: Mapping[str, Any]) -> list[tuple[str, int | None, str, int | None]]:
    """``needs.divisible``'s pairs with the cell's values as whole numbers (None: not known)."""
    return [(dividend, _whole(params.get(dividend)), divisor, _whole(params.get(divisor)))
            for dividend, divisor in w.needs_divisible]


def indivisible(w: Conditions, params: Mapping[str, Any]) -> tuple[tuple[str, int, str, int], ...] | None:
    """``needs.divisible``: the pairs whose dividend the divisor does not divide, or None when a pair is divisible
    or has a value that is not known (the need then does not hold: nothing is judged on an unknown)."""
    out = []
    for dividend, a, divisor, b in _divisible_pairs(w, params):
        if a is None or b is None or a % b == 0:
            return None
        out.append((dividend, a, divisor, b))
    return tuple(out)


def needs_machine(facts: Facts) -> tuple[int, float | None]:
    """All that ``needs`` look at on the machine: how many GPUs are visible and the smallest one's MiB. ``kb.index``
    shares needs verdicts between fingerprints that agree on these."""
    return len(facts.gpus), _smallest_gpu_mib(facts)


def needs_hold(w: Conditions, facts: Facts, params: Mapping[str, Any]) -> bool:
    """``needs``: holds (a problem) when the cell needs more than this runner has; a need that cannot be told (no
    weights measured, a GPU of unknown size) is not judged. Compares the cell with the machine, so ``kb.index``
    applies it after the masks."""
    if not has_needs(w):
        return True
    return needs_hold_on(w, needs_machine(facts), params)


def needs_hold_on(w: Conditions, machine: tuple[int, float | None], params: Mapping[str, Any]) -> bool:
    """``needs_hold`` given ``needs_machine(facts)``: the machine enters only through those two numbers. A
    fingerprint that lists no GPU does not say how many it has (a hand-written file, a pasted report, a machine
    without NVML), so a GPU need is not judged there: "0 visible" would blame every such report on its GPU count,
    and a machine that truly has none cannot run the cell at all, which is a skip of its own, not this finding."""
    gpu_count, smallest_mib = machine
    if w.needs_divisible and indivisible(w, params) is None:
        return False
    if w.needs_gpus:
        need = gpus_needed(w.needs_gpus, params)
        if need is None or not gpu_count or need <= gpu_count:
            return False
    if w.needs_memory:
        need_mib = memory_needed(w.needs_memory, params)
        if need_mib is None or smallest_mib is None or need_mib <= smallest_mib:
            return False
    return True


def has_needs(w: Conditions) -> bool:
    return bool(w.needs_gpus or w.needs_memory or w.needs_divisible)


def rule_matches(rule: Rule, facts: Facts, engine: str | None, params: Mapping[str, Any]) -> bool:
    """Every condition must hold; a condition on a field the fingerprint lacks does not hold.

    The reference definition of a match, one rule at a time, and the test oracle for ``kb.index.matching_rules``,
    which must give the same rules in the same order (``params`` here are the fingerprint's merged with the cell's).
    """
    w = rule.when
    return (
        engine_holds(rule.engine, facts, engine, params)
        and machine_holds(w, facts)
        and params_hold(w, params)
        and needs_hold(w, facts, params)
    )


def contradiction(rule: Rule, facts: Facts, engine: str | None, params: Mapping[str, Any]) -> str | None:
    """The first condition of ``rule`` that a known fact of a cell contradicts, as its field (``engine``,
    ``when.driver``, ``when.packages.vllm``, ``when.params.dtype``, ``when.needs.gpus``), or None.

    ``rule_matches`` with unknown facts taken to hold: a field the fingerprint lacks, a package it did not list, a
    parameter the cell does not record. Explaining a failure asks this, since the failure's own text is the
    evidence and a report records only part of what the engine was started with."""
    if rule.engine is not None and engine != rule.engine:
        return "engine"
    w = rule.when
    for cond in MACHINE_CONDITIONS:
        if cond.tested(w):
            value = cond.fact(facts)
            if value is not None and cond.known(facts) and not cond.holds(w, value):
                return "when." + next(f for f in cond.fields if getattr(w, f) not in (None, ()))
    for name, _ in w.packages:
        version = facts.packages.get(name)
        if version is not None and not package_holds(w, name, version):
            return f"when.packages.{name}"
    for name in param_names(w):
        if name in params and not param_holds(w, name, params):
            return "when.model" if name == "model" and w.model else f"when.params.{name}"
    if w.needs_gpus:
        need = gpus_needed(w.needs_gpus, params)
        if need is not None and facts.gpus and need <= len(facts.gpus):
            return "when.needs.gpus"
    if w.needs_memory:
        need_mib, have = memory_needed(w.needs_memory, params), _smallest_gpu_mib(facts)
        if need_mib is not None and have is not None and need_mib <= have:
            return "when.needs.gpu_memory_mib"
    if any(a is not None and b is not None and a % b == 0 for _, a, _, b in _divisible_pairs(w, params)):
        return "when.needs.divisible"
    return None


# --------------------------------------------------------------------------- explaining a match


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
    for dividend, a, divisor, b in indivisible(w, params) or ():
        parts.append(f"{dividend}={a} is not divisible by {divisor}={b}")
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
    for name in MACHINE_VERSIONS:  # the driver, CUDA, and any other version the fingerprint records
        if getattr(w, name) is None:
            continue
        drivers = _driver_range(fp) if name == "driver" else None
        if drivers is not None:
            lower, upper = drivers
            has.append(f"a driver for CUDA {fp.cuda_driver} ({spelled(lower)}"
                       + (f" to below {spelled(upper)})" if upper else " or newer)"))
        else:
            has.append(f"{condition_label(name)} {getattr(fp, name) or 'unknown'}")
    if w.interconnect is not None:
        has.append(f"interconnect {fp.interconnect or 'unknown'}")
    if w.packages:
        installed = {normalize_package(k): v for k, v in fp.packages.items()}
        has.extend(f"{name} {installed.get(name, 'not installed')}" for name, _ in w.packages)
    if w.install is not None:
        state = (getattr(fp, "installs", None) or {}).get(w.install[0])
        missing = state.get("missing") if isinstance(state, Mapping) else getattr(state, "missing", None)
        if missing:
            has.append(f"{w.install[0]} installed without " + ", ".join(map(str, missing)))
        elif state is not None:
            has.append(f"{w.install[0]} installed with every requirement it declares")
    if has:
        parts.append("this runner: " + "; ".join(has))
    return "; ".join(parts)


# --------------------------------------------------------------------------- fleet axes

_FINGERPRINT_AXES = ("driver", "cuda_driver", "cuda_runtime", "compute_capability")
_GLOB_AXES = ("gpu", "arch")


def axis_mismatch(axes: Mapping[str, str], fp: Fingerprint) -> str | None:
    """Why this runner does not cover a cell meant for these fleet axes (None when it does)."""
    if not axes:
        return None
    facts = Facts.of(fp)
    for axis, value in axes.items():
        if axis in _GLOB_AXES:
            names = [g.name for g in fp.gpus] if axis == "gpu" else [g.architecture or "" for g in fp.gpus]
            if not any(fnmatch.fnmatchcase(n.lower(), value.lower()) for n in names):
                have = ", ".join(n or "unknown" for n in names) or "no GPU"  # a GPU of unknown architecture
                return f"{axis} {value} (this runner: {have})"
            continue
        spec = parse_specifier(value)
        if axis in _FINGERPRINT_AXES:
            if axis == "compute_capability":
                ccs = [g[2] for g in facts.gpus if g[2] is not None]
                if not any(matches(spec, cc) for cc in ccs):
                    return f"compute capability {value} (this runner: {', '.join(map(str, ccs)) or 'none'})"
                continue
            version = facts.versions[axis]
            if version is None or not matches(spec, version):
                return f"{axis} {value} (this runner: {getattr(fp, axis) or 'none'})"
            continue
        package = normalize_package(axis)
        version = facts.packages.get(package)
        if version is None or not matches(spec, version):
            return f"{package} {value} (this runner: {fp.packages.get(package, 'not installed')})"
    return None
