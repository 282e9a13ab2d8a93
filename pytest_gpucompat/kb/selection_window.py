"""A rule window that follows the selection data: the releases where kb.predict, for every setting the rule's
``when`` names, predicts the outcome a ``{selection: ...}`` fact of its ``bounds`` says. A rule that only restates
what the release's selector does (a forced backend refused below its capability, an fp8 KV cache asserting at the
first forward pass) thereby gets its bound from the same data the predictions come from, never typed.

The settings: each compute capability of the selection grid that ``when.compute_capability`` admits (all of them
when the rule names none), each KV-cache dtype of ``when.params.kv_cache_dtype`` (auto when none), each forced
backend of ``when.params.attention_backend`` (not forced when none), each dtype of ``when.params.dtype``, each head
size of ``when.params.head_size``, and FlashInfer absent, installed, or both, as ``when.packages`` says.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..common.versions import normalize_package
from .bounds import Fact
from .history import History
from .predict import PredictError, Prediction, Selection, Setting, load_selection, parse_capability, predict
from .schema import Rule


def selection_holds(rule: Rule, history: History, fact: Fact,
                    read: frozenset[int]) -> tuple[frozenset[int] | None, str]:
    """The read releases where the fact holds; (None, why) when it cannot be judged."""
    selection = load_selection(history.engine, Path(history.source).parent)
    if selection is None:
        return None, f"no selection data for {history.engine} beside {Path(history.source).name}"
    settings = list(_settings(rule, selection))
    if not settings:
        return None, "the rule's when.compute_capability admits no capability of the selection grid"
    holds = set()
    for i in read:
        release = history.releases[i].text
        try:
            selection.facts(release)
            answers = [predict(selection, Setting(release=release, **s)) for s in settings]
        except PredictError:
            continue
        if all(_agrees(p, fact) for answer in answers for p in _leaves(answer)):
            holds.add(i)
    return frozenset(holds), ""


def _agrees(p: Prediction, fact: Fact) -> bool:
    return p.outcome in fact.outcomes and (not fact.picks or p.backend in fact.picks)


def _leaves(p: Prediction) -> Iterator[Prediction]:
    """The prediction, or each answer it depends on (the model's dtype, FlashInfer installed or not)."""
    if not p.alternatives:
        yield p
    for _, alt in p.alternatives:
        yield from _leaves(alt)


def _settings(rule: Rule, selection: Selection) -> Iterator[dict[str, Any]]:
    w = rule.when
    caps = [parse_capability(c) for c in selection.grid.get("capabilities", ())
            if w.compute_capability is None or w.compute_capability.contains(str(c), prereleases=True)]
    fi: tuple[bool | None, ...] = (None,)
    for package, spec in w.packages:
        if normalize_package(package) == "flashinfer-python":
            fi = (False,) if spec is None else (True,)
    kvs = [v if v is not None else "auto" for v in _param(rule, "kv_cache_dtype")]
    forced = [None if v is None or str(v).lower() == "auto" else str(v).upper()
              for v in _param(rule, "attention_backend")]
    dtypes = [None if v is None or str(v).lower() == "auto" else str(v) for v in _param(rule, "dtype")]
    heads = [None if v is None else int(v) for v in _param(rule, "head_size")]
    for cap, kv, f, dtype, head, flashinfer in itertools.product(caps, kvs, forced, dtypes, heads, fi):
        yield {"capability": cap, "kv_cache_dtype": str(kv), "forced": f, "dtype": dtype, "head_size": head,
               "flashinfer": flashinfer}


def _param(rule: Rule, name: str) -> tuple[Any, ...]:
    for param, cond in rule.when.params:
        if param == name and cond.values is not None:
            return cond.values
    return (None,)
