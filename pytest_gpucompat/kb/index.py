"""``matching_rules``: every rule of a knowledge base against a cell at once, through bit masks.

The hot path (every cell of every matrix against every rule). The answer is by definition that of
``kb.match.rule_matches`` rule by rule; the masks are computed with the same per-condition functions and remembered,
so each value of a machine fact (found by the fingerprint's own fields: ``match.RAW_FACT_KEYS``) and each parameter
value is judged once per knowledge base, and a fingerprint is parsed only where one of its values is new. The indexes
are process-wide, keyed by the ``KnowledgeBase`` object (``kb.load.load_kb`` returns the same object for unchanged
files); ``clear_match_cache`` forgets them.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from ..common.versions import norm_value
from ..machine.fingerprint import Fingerprint
from .match import (
    MACHINE_CONDITIONS,
    NO_KEY,
    UNKNOWN,
    WEIGHTS_PARAM,
    Facts,
    clear_facts_cache,
    engine_installed,
    facts_of,
    field_key,
    gpus_fields_key,
    has_needs,
    needs_hold_on,
    needs_machine,
    package_holds,
    package_keys,
    package_versions,
    param_holds,
    param_names,
    smallest_gpu_mib_of,
    vkey,
)
from .paramkey import KEY_ERRORS, exact_key, written_exactly
from .paramkey import key_of as _key  # bound here: one global lookup per cell
from .rulesets import Halves
from .schema import Conditions, KnowledgeBase, Rule

_MAX_CACHED = 16384  # values per parameter name, and parameter sets, remembered per knowledge base
_MAX_KEPT = 4096  # parameter sets remembered per (knowledge base, GPU count and smallest GPU)
_MAX_FINGERPRINTS = 1024  # fingerprints remembered per knowledge base (a fleet of runners, a what-if sweep)
_MAX_KBS = 32
_UNCACHEABLE = object()
_EXACT_TYPES = frozenset((str, int, bool, type(None)))  # equal values of one of these types are alike
_RAW_ENGINE_TYPES = frozenset((str, type(None)))  # engine parameter values remembered as they are (candidates)
_CONDITIONS_BY_NAME = {c.name: c for c in MACHINE_CONDITIONS}


def matching_rules(
    kb: KnowledgeBase, fp: Fingerprint, engine: str | None = None, params: Mapping[str, Any] | None = None
) -> list[Rule]:
    """The rules of ``kb`` that match ``fp`` running ``engine`` with ``params``, in knowledge-base order.

    The same answer as ``[r for r in kb.rules if rule_matches(r, Facts.of(fp), engine, merged_params)]``, from
    an index (see ``_KbIndex``): machine conditions are decided once per fingerprint from tables of the facts'
    values, each parameter value once per knowledge base, and what a cell's parameters leave of the rules is
    remembered by their exact content (``_KbIndex.kept_mask``), so a cell of a known parameter set costs one
    key (``kb.paramkey``) and a few lookups.
    """
    last = _LAST
    fpi = last[2] if last[1] is fp and last[0] is kb else None
    if fpi is None:
        fpi = _fingerprint_index(kb, fp)
    if fp.params or params is None:
        merged: Mapping[str, Any] = {**fp.params, **(params or {})}
    else:
        merged = params
    if engine is not None:
        candidates = fpi.by_engine.get(engine)
        if candidates is None:
            candidates = fpi.candidates(engine, None)
    else:
        engine_param = merged.get("engine")
        candidates = (fpi.by_engine_param.get(engine_param) if engine_param.__class__ in _RAW_ENGINE_TYPES
                      else None)  # any other type: not a key (see candidates)
        if candidates is None:
            candidates = fpi.candidates(None, engine_param)
    # the rest is _KbIndex's work, inlined (a call costs as much as a dict lookup, and this runs per cell)
    try:  # the parameters' content as one exact key (kb.paramkey)
        key: bytes | None = _key(merged)
    except KEY_ERRORS:  # a mapping other than a dict, or a value the key's writer cannot write exactly
        merged, key = exact_key(merged, _key)
    kept = fpi.kept.get(key)
    if kept is None:
        kept = fpi.kept_sized.get(key)
        if kept is None:
            kept = fpi.kb_index.kept_mask(fpi, merged, key)
    # masks travel as their (low, high) halves, split once per distinct mask: two ANDs of half-width ints per cell
    # instead of an AND, a mask and a shift of full-width ones; each half's rules come from kb.rulesets (plain
    # dicts read with get: a miss is made there, once per distinct half)
    c_low, c_high = candidates
    k_low, k_high = kept
    low = c_low & k_low
    high = c_high & k_high
    found = fpi.low.get(low)
    if found is None:
        found = fpi.low_rules(low)
    rest = fpi.high.get(high)
    if rest is None:
        rest = fpi.high_rules(high)
    return found + rest


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


def _machine_field_names(w: Conditions) -> list[Any]:
    """The machine facts a rule's conditions test: condition names, ("package", name) for each package."""
    names: list[Any] = [c.name for c in MACHINE_CONDITIONS if c.tested(w)]
    names.extend(("package", name) for name, _ in w.packages)
    return names


def _grouped(field_name: Any, entries: list[tuple[int, Conditions]]) -> tuple[tuple[int, Conditions], ...]:
    """The rules testing one machine fact as (their bits, one of their conditions), one entry per distinct
    condition on that fact: ``_field_holds`` reads only the fields a ``MachineCondition`` declares (for a package,
    the entries that name it), so rules equal in those are judged alike."""
    if isinstance(field_name, tuple):
        def key(w: Conditions) -> Any:
            return tuple(entry for entry in w.packages if entry[0] == field_name[1])
    else:
        fields = _CONDITIONS_BY_NAME[field_name].fields

        def key(w: Conditions) -> Any:
            return tuple(getattr(w, f) for f in fields)
    groups: dict[Any, tuple[int, Conditions]] = {}
    out: list[tuple[int, Conditions]] = []
    for bit, w in entries:
        try:
            k = key(w)
            hash(k)
        except TypeError:  # a value that is no key: judged on its own
            out.append((bit, w))
            continue
        found = groups.get(k)
        groups[k] = (bit, w) if found is None else (found[0] | bit, found[1])
    return (*out, *groups.values())


def _field_holds(w: Conditions, field_name: Any, value: Any) -> bool:
    if isinstance(field_name, tuple):
        return package_holds(w, field_name[1], value)
    return _CONDITIONS_BY_NAME[field_name].holds(w, value)


class _KbIndex:
    """A knowledge base as bit masks: bit ``i`` stands for ``kb.rules[i]``.

    A rule's conditions are a conjunction of conditions that each test one thing: one machine fact (the driver, the
    GPUs, one package's version, ...), the engine, or one parameter of the cell. So the rules a cell matches are the
    AND of one mask per thing tested: for each machine fact, the rules whose conditions on it hold for the
    fingerprint's value; the rules whose engine condition holds; for each parameter name some rule tests, the rules
    whose conditions on it hold for the cell's value (or its absence). Each mask is computed with the per-condition
    functions of ``kb.match`` the first time a value is seen and then remembered, so a value is checked against the
    rules once per knowledge base, not once per cell. ``needs`` compare the cell with the machine: judged for the
    rules with needs that the masks leave, once per (machine's GPU count and smallest GPU, values of the needs'
    parameters). A result mask becomes its list of rules through ``kb.rulesets``.
    """

    __slots__ = ("kb", "rules", "all_mask", "machine_conditions", "machine_tables", "field_probes",
                 "package_field_probes", "gpu_sizes", "engine_free", "engine_masks", "param_mask", "conditions",
                 "tables", "absent",
                 "plans", "halves", "pairs", "fingerprints", "needs_mask", "needs_rules", "needs_names", "needs_ids",
                 "needs_by_machine", "kept_by_count", "kept_by_machine", "by_content", "verdicts")

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = weakref.ref(kb)
        self.rules = tuple(kb.rules)
        self.all_mask = (1 << len(self.rules)) - 1
        self.engine_free = 0  # rules without an engine condition
        self.engine_masks: dict[str, int] = {}
        self.param_mask = 0  # rules with parameter or model conditions, or needs: a cell's parameters matter
        # needs compare the cell with the machine: judged per cell, only for the rules that have them
        self.needs_rules = tuple((1 << i, r.when) for i, r in enumerate(self.rules) if has_needs(r.when))
        self.needs_mask = 0
        needs_names: dict[str, None] = {}
        for bit, w in self.needs_rules:
            self.needs_mask |= bit
            needs_names.update(dict.fromkeys((*w.needs_gpus, *w.needs_memory, *((WEIGHTS_PARAM,) if w.needs_memory
                                                                                  else ()),
                                              *(name for pair in w.needs_divisible for name in pair))))
        self.needs_names = tuple(needs_names)  # the parameters every needs verdict depends on
        # (the needs parameters a cell has, their values' keys) -> a small id; needs_machine(facts) -> needs id ->
        # the rules whose needs fail
        self.needs_ids: dict[tuple[Any, ...], int] = {}
        self.needs_by_machine: dict[tuple[int, float | None], dict[int | None, int]] = {}
        # the parameters' exact content (kb.paramkey) -> their verdict; GPU count, or needs_machine(facts) for cells
        # whose needs read the GPUs' size -> content -> kept mask (kept_mask)
        self.kept_by_count: dict[int, dict[bytes | None, tuple[int, int]]] = {}
        self.by_content: dict[bytes, tuple[int, int | None]] = {}
        self.kept_by_machine: dict[tuple[int, float | None], dict[bytes | None, tuple[int, int]]] = {}
        self.param_mask |= self.needs_mask
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
            names = param_names(w)
            if names:
                self.param_mask |= bit
            for name in names:
                by_name.setdefault(name, []).append((bit, w))
        # per machine fact, the rules that test it grouped by what they say of it: each distinct condition is judged
        # once per fact value (many rules share a driver or package window)
        self.machine_conditions = {f: _grouped(f, entries) for f, entries in by_field.items()}
        self.machine_tables: dict[Any, dict[Any, int]] = {f: {} for f in self.machine_conditions}
        # the machine conditions some rule tests, each with its fingerprint fields' key (match.field_key), its
        # table by that key and its table by fact; each package some rule tests, its tables by key
        # (match.package_keys) and by fact
        self.field_probes: tuple[tuple[Any, Callable[[Fingerprint], Any], dict[Any, int], dict[Any, int]], ...] = tuple(
            (c, field_key(c.name), {}, self.machine_tables[c.name])
            for c in MACHINE_CONDITIONS if c.name in self.machine_tables)
        self.package_field_probes: tuple[tuple[str, dict[Any, int], dict[Any, int]], ...] = tuple(
            (f[1], {}, t) for f, t in self.machine_tables.items() if isinstance(f, tuple))
        self.gpu_sizes: dict[Any, float | None] = {}  # gpus_fields_key -> the smallest GPU's MiB (needs)
        self.conditions = {name: tuple(entries) for name, entries in by_name.items()}
        self.tables: dict[str, dict[Any, int]] = {name: {} for name in self.conditions}
        self.absent = {name: self._mask(name, False, None) for name in self.conditions}
        self.plans: dict[tuple[Any, ...], _Plan] = {}
        self.halves = Halves(self.rules)  # result mask -> its rules
        self.pairs: dict[int, tuple[int, int]] = {}  # kept mask -> its halves (kept_mask)
        # id(fingerprint) -> (the fingerprint, kept alive so the id stays its own; its index): an identity lookup,
        # where hashing a fingerprint hashes each of its GPUs
        self.fingerprints: dict[int, tuple[Fingerprint, _FingerprintIndex]] = {}
        # kb.evaluate's per-rule-set verdicts: (run_known_bad, rule ids) -> (findings, decision)
        self.verdicts: dict[tuple[Any, ...], Any] = {}

    # ---------------------------------------------------------------- machine

    def fingerprint_mask(self, fp: Fingerprint) -> tuple[int, Facts | None]:
        """The rules whose machine conditions all hold for ``facts_of(fp)``, and the facts where they had to be
        made: each fact is looked up by its fingerprint fields' key (``match.RAW_FACT_KEYS``) and decided from the
        facts only the first time that key is seen (or where there is none), so a fingerprint of values seen before
        is never parsed."""
        mask = self.all_mask
        facts = None
        for cond, key_of, table, by_fact in self.field_probes:
            key = key_of(fp)
            bits = table.get(key)
            if bits is None:
                if facts is None:
                    facts = facts_of(fp)
                value = cond.fact(facts)
                fact_key = cond.key(value)
                bits = by_fact.get(fact_key)
                if bits is None:
                    bits = self._machine_bits(by_fact, cond.name, fact_key, value)
                if key is not NO_KEY and len(table) < _MAX_CACHED:
                    table[key] = bits
            mask &= bits
        if self.package_field_probes:
            keys, absent = package_keys(fp)
            for name, table, by_fact in self.package_field_probes:
                key = keys.get(name, absent)
                bits = table.get(key)
                if bits is None:
                    if facts is None:
                        facts = facts_of(fp)
                    bits = self._package_bits(name, by_fact, facts)
                    if key is not NO_KEY and len(table) < _MAX_CACHED:
                        table[key] = bits
                mask &= bits
        return mask, facts

    def _package_bits(self, name: str, table: dict[Any, int], facts: Facts) -> int:
        version = facts.packages.get(name)
        if version is None:  # a package this machine lacks: known absent, or not known either way
            value, key = (None, None) if facts.packages_listed else (UNKNOWN, "?")
        else:
            value, key = version, vkey(version)
        bits = table.get(key)
        return bits if bits is not None else self._machine_bits(table, ("package", name), key, value)

    def smallest_gpu_mib(self, fp: Fingerprint, facts: Facts | None) -> float | None:
        """``needs_machine``'s smallest GPU, remembered per ``gpus_fields_key``."""
        key = gpus_fields_key(fp)
        size = self.gpu_sizes.get(key, NO_KEY)
        if size is NO_KEY:
            if key is NO_KEY:
                return needs_machine(facts if facts is not None else facts_of(fp))[1]
            size = smallest_gpu_mib_of(key)
            if len(self.gpu_sizes) < _MAX_CACHED:
                self.gpu_sizes[key] = size
        return size  # type: ignore[no-any-return]

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
            if not param_holds(w, name, one):
                mask &= ~bit
        return mask

    def plan(self, keys: tuple[Any, ...]) -> _Plan:
        """For cells whose parameters have these names (in this order): see ``_Plan``."""
        present = [name for name in keys if name in self.tables]
        absent = self.all_mask
        for name, bits in self.absent.items():
            if name not in present:
                absent &= bits
        plan = _Plan(absent, tuple((name, self.tables[name]) for name in present),
                     tuple(name for name in self.needs_names if name in keys))
        if plan.getter is None:  # no parameter of these cells matters: one verdict for them all
            plan.fixed = self._verdict(plan, {})
        if len(self.plans) < _MAX_CACHED:
            self.plans[keys] = plan
        return plan

    def kept_mask(self, fpi: _FingerprintIndex, params: Mapping[str, Any], key: bytes | None) -> tuple[int, int]:
        """A cell's parameters not seen yet on a machine with this GPU count (and smallest GPU, for a cell with its
        model's weights): all rules but those whose parameter conditions fail for them or whose needs fail on such a
        machine; remembered by ``key``.

        ``key`` is the parameters' exact key (``kb.paramkey``; None where its writer cannot write them): equal bytes
        are equal names, values and exact types, and a verdict is remembered only for parameters whose names are
        str and whose values are str, int, bool, float or None (``paramkey.written_exactly``). One key and one
        lookup replace, per cell, the names tuple, the plan, the values and their types (``verdict_of``), which take
        over where nothing is remembered. The mask is returned as its halves (see ``matching_rules``)."""
        verdict = self.by_content.get(key) if key is not None else None
        exact = verdict is not None
        if verdict is None:
            verdict = self.verdict_of(params)
            exact = key is not None and written_exactly(params)
            if exact and key is not None and len(self.by_content) < _MAX_CACHED:
                self.by_content[key] = verdict
        mask, needs_id = verdict
        if mask & self.needs_mask:
            failing = fpi.needs_failing.get(needs_id)
            if failing is None:
                failing = self.needs_failing(fpi, needs_id, params)
            mask &= ~failing
        pair = self.pairs.get(mask)  # the mask as its (low, high) halves, one tuple per distinct mask (a few hundred)
        if pair is None:
            pair = (mask & self.halves.low_mask, mask >> self.halves.bits)
            if len(self.pairs) < _MAX_CACHED:
                self.pairs[mask] = pair
        if exact:  # needs read the smallest GPU's size only for a cell with its model's weights (memory_needed):
            # the others' kept mask is the same on every machine with as many GPUs
            kept = fpi.kept if params.get(WEIGHTS_PARAM) is None else fpi.kept_sized
            if len(kept) < _MAX_KEPT:
                kept[key] = pair
        return pair

    def verdict_of(self, params: Mapping[str, Any]) -> tuple[int, int | None]:
        """The verdict of a cell's parameters (``_verdict``), remembered per parameter names by the values of those
        that matter (``remember``)."""
        keys = tuple(params)
        plan = self.plans.get(keys)
        if plan is None:
            plan = self.plan(keys)
        getter = plan.getter
        if getter is None:
            return plan.fixed
        values = getter(params)
        cache = plan.by_types.get(tuple(map(type, values)))
        cached = cache.get(values) if cache is not None else None
        return cached if cached is not None else self.remember(plan, params, values)

    def _verdict(self, plan: _Plan, params: Mapping[str, Any]) -> tuple[int, int | None]:
        """What a cell's parameters decide: the rules whose parameter conditions hold for them (an AND of one
        remembered mask per parameter value), and the id of its needs key (None: a value that cannot be a key)."""
        mask = plan.absent
        for name, table in plan.tables:
            value = params[name]
            key = _value_key(value)
            bits = table.get(key)
            if bits is None:
                bits = self._mask(name, True, value)
                if key is not _UNCACHEABLE and len(table) < _MAX_CACHED:
                    table[key] = bits
            mask &= bits
        needs_key = (plan.needs_present, *(_value_key(params[name]) for name in plan.needs_present))
        needs_id = None
        if _UNCACHEABLE not in needs_key:
            needs_id = self.needs_ids.get(needs_key)
            if needs_id is None and len(self.needs_ids) < _MAX_CACHED:
                needs_id = self.needs_ids[needs_key] = len(self.needs_ids)
        return mask, needs_id

    def remember(self, plan: _Plan, params: Mapping[str, Any], values: tuple[Any, ...]) -> tuple[int, int | None]:
        """A cell whose values of the parameters that matter were not seen together yet: their verdict,
        remembered by those values when all are of a type whose equal values every condition treats alike.

        Remembered per (parameter names, values of those that matter, their types): the types make ``True``, ``1``
        and ``1.0`` three keys, and only str, int, bool and None values are keys (``-0.0 == 0.0``; other types may
        compare equal while conditions tell them apart), so one lookup replaces one per parameter; other values
        take the per-parameter path (``_verdict``) every time."""
        verdict = self._verdict(plan, params)
        types = tuple(map(type, values))
        if all(t in _EXACT_TYPES for t in types):
            cache = plan.by_types.get(types)
            if cache is None:
                cache = plan.by_types[types] = {}
            if len(cache) < _MAX_CACHED:
                cache[values] = verdict
        return verdict

    def needs_failing(self, fpi: _FingerprintIndex, needs_id: int | None, params: Mapping[str, Any]) -> int:
        """The rules whose ``needs`` fail for a cell on this machine, remembered by the cell's needs id (None: not
        remembered)."""
        failing = 0
        for bit, w in self.needs_rules:
            if not needs_hold_on(w, fpi.needs_machine, params):
                failing |= bit
        if needs_id is not None:
            fpi.needs_failing[needs_id] = failing
        return failing


class _Plan:
    """For cells whose parameters have the same names in the same order: ``absent``, the rules whose conditions hold
    for the tested names they lack; ``tables``, the remembered masks of the tested names they have; ``needs_present``,
    the needs parameters among them; ``getter``, the values of all those (None when no parameter matters, and
    ``fixed`` is the verdict); ``by_types``, remembered verdicts: value types -> values -> (mask, needs id)."""

    __slots__ = ("absent", "tables", "needs_present", "getter", "by_types", "fixed")

    def __init__(self, absent: int, tables: tuple[tuple[str, dict[Any, int]], ...],
                 needs_present: tuple[str, ...]) -> None:
        self.absent = absent
        self.tables = tables
        self.needs_present = needs_present
        names = (*(name for name, _ in tables), *(n for n in needs_present if n not in dict(tables)))
        # itemgetter of one name returns the bare value: name it twice for a tuple
        self.getter: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None = (
            operator.itemgetter(*names, names[0]) if len(names) == 1 else operator.itemgetter(*names)
        ) if names else None
        self.by_types: dict[tuple[type, ...], dict[tuple[Any, ...], tuple[int, int | None]]] = {}
        self.fixed: tuple[int, int | None] = (absent, None)


class _FingerprintIndex:
    """The rules whose machine conditions hold on one fingerprint, and of those the ones each engine can match."""

    __slots__ = ("kb_index", "fp", "facts", "machine", "installed", "by_engine", "by_engine_param",
                 "needs_machine", "needs_failing", "kept", "kept_sized", "low", "high", "low_rules", "high_rules",
                 "low_mask", "half_bits")

    # by_engine, by_engine_param, kept and kept_sized hold masks as their (low, high) halves: see matching_rules

    def __init__(self, kb_index: _KbIndex, fp: Fingerprint) -> None:
        self.kb_index = kb_index
        self.fp = fp
        self.machine, self.facts = kb_index.fingerprint_mask(fp)  # the facts only where some field was new
        self.installed: int | None = None  # rules of the engines installed here (cells without an engine)
        halves = kb_index.halves  # the knowledge base's, here to be one attribute nearer to the per-cell path
        self.low, self.high, self.low_mask, self.half_bits = halves.low, halves.high, halves.low_mask, halves.bits
        self.low_rules, self.high_rules = halves.low_rules, halves.high_rules
        # the engines of the knowledge base's rules, now; any other when a cell names it
        self.by_engine = {engine: self._pair(self.machine & (kb_index.engine_free | bits))
                          for engine, bits in kb_index.engine_masks.items()}
        self.by_engine_param: dict[Any, tuple[int, int]] = {}
        # needs verdicts, shared by the fingerprints whose needs_machine is the same
        self.needs_machine = ((len(fp.gpus), kb_index.smallest_gpu_mib(fp, self.facts)) if kb_index.needs_rules
                              else (0, None))
        self.needs_failing = kb_index.needs_by_machine.setdefault(self.needs_machine, {})
        self.kept = kb_index.kept_by_count.setdefault(self.needs_machine[0], {})
        self.kept_sized = kb_index.kept_by_machine.setdefault(self.needs_machine, {})

    def installed_engines(self) -> int:
        """The rules of the engines installed on this machine, for cells that name no engine (made on first use)."""
        if self.installed is None:
            packages = self.facts.packages if self.facts is not None else package_versions(self.fp)
            self.installed = 0
            for name, bits in self.kb_index.engine_masks.items():
                if engine_installed(name, packages):  # engine_holds(name, facts, None, {}), without the facts
                    self.installed |= bits
        return self.installed

    def _pair(self, mask: int) -> tuple[int, int]:
        return mask & self.low_mask, mask >> self.half_bits

    def candidates(self, engine: str | None, engine_param: Any) -> tuple[int, int]:
        """Rules whose machine and engine conditions hold: for ``engine``, or (no engine) the ``engine`` parameter,
        remembered by its raw value when that is None or a str (``norm_value`` of it costs more than the lookup;
        equal values of those types normalise alike, while ``True`` and ``1`` are equal keys that do not)."""
        kbi = self.kb_index
        if engine is not None:
            mask = self._pair(self.machine & (kbi.engine_free | kbi.engine_masks.get(engine, 0)))
            self.by_engine[engine] = mask
        else:
            engine_key = norm_value(engine_param)
            named = kbi.engine_masks.get(engine_key, 0) if isinstance(engine_key, str) else 0
            mask = self._pair(self.machine & (kbi.engine_free | self.installed_engines() | named))
            if engine_param.__class__ in _RAW_ENGINE_TYPES and len(self.by_engine_param) < _MAX_CACHED:
                self.by_engine_param[engine_param] = mask
        return mask


_KB_INDEXES: dict[int, _KbIndex] = {}
_LAST: tuple[KnowledgeBase | None, Fingerprint | None, _FingerprintIndex | None] = (None, None, None)


def index_for(kb: KnowledgeBase) -> _KbIndex:
    """The knowledge base's index, built on first use; kept while the ``KnowledgeBase`` object lives."""
    kb_index = _KB_INDEXES.get(id(kb))
    if kb_index is None or kb_index.kb() is not kb:
        if len(_KB_INDEXES) >= _MAX_KBS:
            _KB_INDEXES.clear()
        kb_index = _KB_INDEXES[id(kb)] = _KbIndex(kb)
    return kb_index


def _fingerprint_index(kb: KnowledgeBase, fp: Fingerprint) -> _FingerprintIndex:
    global _LAST
    kb_index = index_for(kb)
    known = kb_index.fingerprints.get(id(fp))
    if known is not None and known[0] is fp:
        index = known[1]
    else:
        if len(kb_index.fingerprints) >= _MAX_FINGERPRINTS:
            kb_index.fingerprints.clear()
        index = _FingerprintIndex(kb_index, fp)
        kb_index.fingerprints[id(fp)] = (fp, index)
    _LAST = (kb, fp, index)
    return index


def clear_match_cache() -> None:
    """Forget the matching indexes and verdicts (rebuilt on the next call): for benchmarks, and to free memory."""
    global _LAST
    _LAST = (None, None, None)
    for kb_index in _KB_INDEXES.values():  # each fingerprint's index refers to its knowledge base's: freed now,
        kb_index.fingerprints.clear()  # not at the next full garbage collection
    _KB_INDEXES.clear()
    clear_facts_cache()
