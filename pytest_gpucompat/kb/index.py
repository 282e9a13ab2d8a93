"""``matching_rules``: every rule of a knowledge base against a cell at once, through bit masks.

The hot path (every cell of every matrix against every rule). The answer is by definition that of
``kb.match.rule_matches`` rule by rule; the masks are computed with the same per-condition functions and remembered,
so each machine fact is judged once per fingerprint and each parameter value once per knowledge base. The indexes
are process-wide, keyed by the ``KnowledgeBase`` object (``kb.load.load_kb`` returns the same object for unchanged
files); ``clear_match_cache`` forgets them.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

from ..fingerprint import Fingerprint
from .match import (
    MACHINE_CONDITIONS,
    WEIGHTS_PARAM,
    Facts,
    clear_facts_cache,
    engine_holds,
    has_needs,
    needs_hold,
    package_holds,
    param_holds,
    param_names,
)
from .schema import Conditions, KnowledgeBase, Rule, norm_value

_MAX_CACHED = 16384  # values per parameter name, and distinct result sets, remembered per knowledge base
_MAX_FINGERPRINTS = 256  # fingerprints remembered per knowledge base
_MAX_KBS = 32
_UNCACHEABLE = object()
_CONDITIONS_BY_NAME = {c.name: c for c in MACHINE_CONDITIONS}


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
        key = norm_value(merged.get("engine"))
        candidates = fpi.by_engine_param.get(key)
        if candidates is None:
            candidates = fpi.candidates(None, key)
    return fpi.kb_index.match(candidates, merged, fpi)


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
    rules once per knowledge base, not once per cell; each distinct result becomes its list of rules once.
    ``needs`` compare the cell with the machine: judged per cell, only for the rules with needs that the masks leave.
    """

    __slots__ = ("kb", "rules", "all_mask", "machine_conditions", "machine_tables", "engine_free",
                 "engine_masks", "param_mask", "conditions", "tables", "absent", "plans", "results",
                 "chunks", "fingerprints", "needs_mask", "needs_rules", "needs_names", "needs_plans", "verdicts")

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = weakref.ref(kb)
        self.rules = tuple(kb.rules)
        self.all_mask = (1 << len(self.rules)) - 1
        self.engine_free = 0  # rules without an engine condition
        self.engine_masks: dict[str, int] = {}
        self.param_mask = 0  # rules with parameter or model conditions
        # needs compare the cell with the machine: judged per cell, only for the rules that have them
        self.needs_rules = tuple((1 << i, r.when) for i, r in enumerate(self.rules) if has_needs(r.when))
        self.needs_mask = 0
        needs_names: dict[str, None] = {}
        for bit, w in self.needs_rules:
            self.needs_mask |= bit
            needs_names.update(dict.fromkeys((*w.needs_gpus, *w.needs_memory, *((WEIGHTS_PARAM,) if w.needs_memory
                                                                                  else ()))))
        self.needs_names = tuple(needs_names)  # the parameters every needs verdict depends on
        self.needs_plans: dict[tuple[Any, ...], tuple[str, ...]] = {}  # a cell's parameter names -> needs names
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
        # kb.evaluate's per-rule-set verdicts: (run_known_bad, rule ids) -> (findings, decision)
        self.verdicts: dict[tuple[Any, ...], Any] = {}

    # ---------------------------------------------------------------- machine

    def machine_mask(self, facts: Facts) -> int:
        """The rules whose machine conditions all hold for these facts."""
        mask = self.all_mask
        fields: list[tuple[Any, Any, Any]] = []
        for cond in MACHINE_CONDITIONS:
            value = cond.fact(facts)
            fields.append((cond.name, cond.key(value), value))
        fields.extend((("package", name), str(version), version) for name, version in facts.packages.items())
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
            if not param_holds(w, name, one):
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

    def match(self, candidates: int, params: Mapping[str, Any], fpi: _FingerprintIndex) -> list[Rule]:
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
        if mask & self.needs_mask:
            mask &= ~self._needs_failing(params, fpi)
        found = self.results.get(mask)
        if found is None:
            found = self._rules_of(mask)
            if len(self.results) < _MAX_CACHED:
                self.results[mask] = found
        return list(found)

    def _needs_failing(self, params: Mapping[str, Any], fpi: _FingerprintIndex) -> int:
        """The rules whose ``needs`` do not hold for this cell on this machine; remembered per fingerprint by the
        values of the few parameters needs look at that the cell has (a cell without them all is one key)."""
        keys = tuple(params)
        present = self.needs_plans.get(keys)
        if present is None:
            present = tuple(name for name in self.needs_names if name in params)
            if len(self.needs_plans) < _MAX_CACHED:
                self.needs_plans[keys] = present
        key = (present, *(_value_key(params[name]) for name in present)) if present else ()
        cacheable = _UNCACHEABLE not in key
        failing = fpi.needs_failing.get(key) if cacheable else None
        if failing is None:
            failing = 0
            for bit, w in self.needs_rules:
                if not needs_hold(w, fpi.facts, params):
                    failing |= bit
            if cacheable and len(fpi.needs_failing) < _MAX_CACHED:
                fpi.needs_failing[key] = failing
        return failing

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

    __slots__ = ("kb_index", "facts", "machine", "installed_engines", "by_engine", "by_engine_param", "needs_failing")

    def __init__(self, kb_index: _KbIndex, facts: Facts) -> None:
        self.kb_index = kb_index
        self.facts = facts
        self.machine = kb_index.machine_mask(facts)
        self.installed_engines = 0
        for name, bits in kb_index.engine_masks.items():
            if engine_holds(name, facts, None, {}):  # no engine given: the rule's engine is installed here
                self.installed_engines |= bits
        self.by_engine: dict[str, int] = {}
        self.by_engine_param: dict[Any, int] = {}
        self.needs_failing: dict[tuple[Any, ...], int] = {}  # needs values -> rules whose needs fail here

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
    index = kb_index.fingerprints.get(fp)
    if index is None:
        if len(kb_index.fingerprints) >= _MAX_FINGERPRINTS:
            kb_index.fingerprints.clear()
        index = kb_index.fingerprints[fp] = _FingerprintIndex(kb_index, Facts.of(fp))
    _LAST = (kb, fp, index)
    return index


def clear_match_cache() -> None:
    """Forget the matching indexes and verdicts (rebuilt on the next call): for benchmarks, and to free memory."""
    global _LAST
    _LAST = None
    _KB_INDEXES.clear()
    clear_facts_cache()
