"""What ``kb.index`` remembers between cells: every answer must stay the rule-by-rule reference's.

A cell's parameters are remembered by their exact content (``kb.paramkey``: msgpack's compiled packer, or marshal;
every test here runs with each), result masks become rules through their halves and quarters (``kb.rulesets``),
and fingerprints are recognised by identity. These tests ask in the orders that would expose a cache answering for
the wrong cell.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import random
import types
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_gpucompat.kb import (
    KnowledgeBase,
    Rule,
    clear_match_cache,
    index,
    load_kb,
    matching_rules,
    paramkey,
    parse_rule,
    rule_matches,
)
from pytest_gpucompat.kb.match import facts_of
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint

_msgpack = importlib.import_module("msgpack")  # a declared requirement: its absence fails here, not skips
WRITERS = {"msgpack": paramkey.choose(_msgpack, True)[0], "marshal": paramkey.choose(None, True)[0]}


@pytest.fixture(autouse=True, params=sorted(WRITERS))
def key_writer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each test with each key writer, from empty caches (what one writer remembered is no key for the other)."""
    clear_match_cache()
    monkeypatch.setattr(index, "_key", WRITERS[request.param])
    yield request.param
    clear_match_cache()

A100 = GPU(index=0, name="NVIDIA A100-SXM4-40GB", architecture="ampere", compute_capability="8.0", memory_mib=40960)
H200 = GPU(index=1, name="NVIDIA H200", architecture="hopper", compute_capability="9.0", memory_mib=143771)


def _rule(**overrides: Any) -> Rule:
    raw = {"id": "r1", "summary": "s", "severity": "broken", "failure": "crash", "confidence": "upstream",
           "sources": [{"kind": "doc", "ref": "x"}]}
    raw.update(overrides)
    return parse_rule(raw, "test.yaml")


def _ids(kb: KnowledgeBase, fp: Fingerprint, engine: str | None, params: Any) -> list[str]:
    return [r.id for r in matching_rules(kb, fp, engine, params)]


def _reference(kb: KnowledgeBase, fp: Fingerprint, engine: str | None, params: Any) -> list[str]:
    # facts_of, not Facts.of: its cache is keyed by fingerprint equality, and fingerprints equal in Python (a GPU of
    # 1 MiB and one of True) have different facts
    return [r.id for r in kb.rules if rule_matches(r, facts_of(fp), engine, {**fp.params, **dict(params)})]


class _Level(enum.IntEnum):
    TWO = 2


class _Shouty(str):
    def __str__(self) -> str:
        return "FP8-SHOUTY"


class _Lowered(str):
    def lower(self) -> str:
        return "nvidia h200"


KB = KnowledgeBase(rules=(
    _rule(id="kv-fp8", when={"params": {"kv_cache_dtype": ["fp8"]}}),
    _rule(id="kv-unset", when={"params": {"kv_cache_dtype": [None]}}),
    _rule(id="kv-bytes", when={"params": {"kv_cache_dtype": ["b'fp8'"]}}),  # str(b"fp8"), not a bytearray's
    _rule(id="tp-two", when={"params": {"tensor_parallel_size": ["2"]}}),
    _rule(id="tp-true", when={"params": {"tensor_parallel_size": [True]}}),
    _rule(id="tp-ge-2", when={"params": {"tensor_parallel_size": ">=2"}}),
    _rule(id="needs-2", when={"needs": {"gpus": ["tensor_parallel_size"]}}),
))


def test_values_marshal_writes_alike_or_refuses_still_get_their_own_answers() -> None:
    """Values that marshal writes as bytes (bytes, bytearray, memoryview) or refuses (subclasses, enums), and
    values equal in Python but not to the conditions, each in turn after the others were remembered."""
    values: list[Any] = ["fp8", b"fp8", bytearray(b"fp8"), memoryview(b"fp8"), _Shouty("fp8"), 2, 2.0, "2", True, 1,
                         _Level.TWO, (2,), [2], {"n": 2}, frozenset({2}), None, float("nan"), -0.0, 0.0, 10**30]
    cells = [{name: v} for v in values for name in ("kv_cache_dtype", "tensor_parallel_size")]
    cells += [{"kv_cache_dtype": v, "tensor_parallel_size": w} for v in values[:6] for w in values[5:12]]
    fps = [Fingerprint(), Fingerprint(gpus=(A100,)), Fingerprint(gpus=(A100, H200))]
    for _ in range(2):
        for fp in fps:
            for params in cells + cells[::-1]:
                assert _ids(KB, fp, "vllm", params) == _reference(KB, fp, "vllm", params), (fp, params)


def test_a_parameter_dict_changed_between_cells_is_judged_by_what_it_holds_now() -> None:
    """The same dict object, changed in place to equal values of other types and to other names."""
    fp = Fingerprint(gpus=(A100,))
    params: dict[str, Any] = {"tensor_parallel_size": 2}
    for change in ({"tensor_parallel_size": True}, {"tensor_parallel_size": 1}, {"tensor_parallel_size": 2.0},
                   {"tensor_parallel_size": "2"}, {"kv_cache_dtype": "fp8"}, {"tensor_parallel_size": None}):
        assert _ids(KB, fp, "vllm", params) == _reference(KB, fp, "vllm", params), params
        params.update(change)
        assert _ids(KB, fp, "vllm", params) == _reference(KB, fp, "vllm", params), params


def test_mappings_that_are_not_dicts_and_fingerprint_parameters() -> None:
    """A read-only mapping, a dict subclass and a fingerprint's own ``params`` (merged under the cell's)."""
    class Params(dict[str, Any]):
        pass

    for fp in (Fingerprint(gpus=(A100,)), Fingerprint(gpus=(A100,), params={"tensor_parallel_size": 2})):
        for params in (types.MappingProxyType({"kv_cache_dtype": "fp8"}), Params(tensor_parallel_size=True), {},
                       {"tensor_parallel_size": 1}):
            assert _ids(KB, fp, "vllm", params) == _reference(KB, fp, "vllm", params), (fp, params)


def test_knowledge_bases_of_every_size_give_the_rules_in_order() -> None:
    """Result masks become rules through halves and quarters of the mask: sizes around their boundaries, and more
    than 256 rules (quarters wider than 64 bits), against the reference."""
    base = load_kb().rules
    rng = random.Random(11)
    fps = [Fingerprint(gpus=(A100,), driver="535.104.05", packages={"vllm": "0.6.3"}),
           Fingerprint(gpus=(H200, H200), driver="580.159.04", cuda_driver="13.0", packages={"vllm": "0.26.0"})]
    cells = [{}, {"kv_cache_dtype": "fp8", "tensor_parallel_size": 2}, {"dtype": "bfloat16", "enforce_eager": True}]
    for size in (0, 1, 2, 3, 63, 64, 65, 129, 256, 257, 700):
        rules = tuple(dataclasses.replace(base[rng.randrange(len(base))], id=f"r{i}") for i in range(size))
        kb = KnowledgeBase(rules=rules)
        for fp in fps:
            for params in cells:
                for engine in (None, "vllm", "sglang"):
                    assert _ids(kb, fp, engine, params) == _reference(kb, fp, engine, params), (size, engine)


def test_an_equal_fingerprint_made_again_gets_the_same_answer() -> None:
    """Fingerprints are recognised by identity: an equal one made again gets the same answer as the first."""
    kb = load_kb()
    params = {"kv_cache_dtype": "fp8"}
    first = Fingerprint(gpus=(A100,), driver="535.104.05", packages={"vllm": "0.6.3"})
    again = Fingerprint(gpus=(A100,), driver="535.104.05", packages={"vllm": "0.6.3"})
    assert first == again and first is not again
    assert _ids(kb, first, "vllm", params) == _ids(kb, again, "vllm", params) == _reference(kb, again, "vllm", params)


def test_an_engine_parameter_of_any_type_gets_its_own_candidates() -> None:
    """Without an engine, the ``engine`` parameter picks the candidate rules; None and str values are remembered as
    written, so values equal in Python but normalised apart (True and 1), spellings of one engine, values that
    cannot be keys and str subclasses each get the reference's answer, in either order."""
    kb = load_kb()
    fp = Fingerprint(gpus=(A100,), driver="535.104.05", packages={"vllm": "0.6.3", "sglang": "0.4.3"})
    values: list[Any] = ["vllm", "VLLM", " vllm ", "sglang", None, True, 1, 1.0, ["vllm"], _Shouty("vllm"), "hf"]
    for order in (values, values[::-1]):
        for value in order:
            params = {"engine": value, "kv_cache_dtype": "fp8"}
            assert _ids(kb, fp, None, params) == _reference(kb, fp, None, params), value


def test_machines_with_as_many_gpus_of_other_sizes_share_only_what_the_gpu_size_cannot_change() -> None:
    """A cell's kept rules are shared by machines with the same GPU count unless the cell gives its model's weights,
    which the GPU-size needs compare with the smallest GPU: each machine, either order, gets the reference's rules."""
    kb = KnowledgeBase(rules=(*KB.rules, _rule(id="fits", when={"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}),
                              _rule(id="fits-fp8", when={"params": {"kv_cache_dtype": ["fp8"]},
                                                         "needs": {"gpu_memory_mib": ["tensor_parallel_size"]}})))
    small = dataclasses.replace(A100, memory_mib=16384)
    fps = [Fingerprint(gpus=(A100,)), Fingerprint(gpus=(H200,)), Fingerprint(gpus=(small,)),
           Fingerprint(gpus=(A100, small)), Fingerprint(gpus=(H200, H200)), Fingerprint()]
    cells: list[dict[str, Any]] = [{}, {"kv_cache_dtype": "fp8"}, {"model_weights_mib": 30000},
                                   {"kv_cache_dtype": "fp8", "model_weights_mib": 30000, "tensor_parallel_size": 2},
                                   {"model_weights_mib": 100000.0}, {"model_weights_mib": None},
                                   {"model_weights_mib": "30000"},
                                   {"tensor_parallel_size": 2, "model_weights_mib": 50000}]
    for order in (fps, fps[::-1]):
        for fp in order:
            for params in cells:
                assert _ids(kb, fp, "vllm", params) == _reference(kb, fp, "vllm", params), (fp, params)


def test_fingerprint_fields_of_every_type_decide_the_machine_as_their_facts_do() -> None:
    """A fingerprint's machine facts are remembered by its fields as written (``match.RAW_FACT_KEYS``,
    ``package_keys``): fields equal in Python but parsed apart (``1`` and ``True`` MiB, ``8.0`` and ``"8.0"``),
    versions that do not parse (absent where the machine lists its packages, unknown where not), a package named
    twice in two spellings, empty and missing architectures, installs and engine variables, each after the others
    were remembered, in both orders, against the reference."""
    from pytest_gpucompat.machine.installs import EngineInstall

    kb = KnowledgeBase(rules=(
        *load_kb().rules,
        _rule(id="no-flashinfer", when={"packages": {"flashinfer-python": "absent"}}),
        _rule(id="no-vllm", when={"packages": {"vllm": "absent"}}),
        _rule(id="tiny-cc", when={"compute_capability": "<2"}),
        _rule(id="old-vllm", when={"packages": {"vllm": "<0.7"}}),
        _rule(id="small-gpu", when={"gpu_memory_mib": "<=1"}),
        _rule(id="ampere", when={"arch": ["ampere"]}),
        _rule(id="h200", when={"gpu": ["*h200*"]}),
        _rule(id="old-driver", when={"driver": "<535"}),
        _rule(id="nvlink", when={"interconnect": "nvlink"}),
        _rule(id="fits", when={"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}),
    ))
    odd = dataclasses.replace(A100, memory_mib=True)
    one = dataclasses.replace(A100, memory_mib=1)
    no_arch = dataclasses.replace(A100, architecture=None)
    empty_arch = dataclasses.replace(A100, architecture="")
    float_cc = dataclasses.replace(A100, compute_capability=8.0)  # type: ignore[arg-type]
    negative = dataclasses.replace(H200, memory_mib=-5)
    cc_one = dataclasses.replace(A100, compute_capability=1)  # type: ignore[arg-type]
    cc_true = dataclasses.replace(A100, compute_capability=True)  # type: ignore[arg-type]
    disguised = dataclasses.replace(A100, name=_Lowered(A100.name))  # an A100 by its text, an H200 to the facts
    complete = {"vllm": EngineInstall(complete=True), "sglang": EngineInstall(complete=False)}
    fps = [
        Fingerprint(gpus=(A100,), driver="535.104.05", packages={"vllm": "0.6.3"}),
        Fingerprint(gpus=(odd,), driver="535.104.05", packages={"vllm": "0.6.3"}),
        Fingerprint(gpus=(one,), driver="535.104.05", packages={"vllm": "0.6.3"}),
        Fingerprint(gpus=(no_arch, empty_arch), driver="470.256.02"),
        Fingerprint(gpus=(float_cc, A100, A100), driver=535),  # type: ignore[arg-type]
        Fingerprint(gpus=(negative, H200), driver="535.104.05", interconnect="nvlink"),
        Fingerprint(gpus=(H200,), packages={"vllm": "not a version"}),
        Fingerprint(gpus=(H200,), packages={"vllm": "not a version"}, installs=complete),
        Fingerprint(gpus=(H200,), packages={"vllm": "0.6.3", "VLLM": "not a version"}),
        Fingerprint(gpus=(H200,), packages={"VLLM": "not a version", "vllm": "0.6.3"}, installs=complete),
        Fingerprint(gpus=(H200,), packages={"vllm": 0.6}),  # type: ignore[dict-item]
        Fingerprint(gpus=(H200,), packages={_Shouty("vllm"): "0.6.3"}),
        Fingerprint(gpus=(cc_one,)),
        Fingerprint(gpus=(cc_true,)),
        Fingerprint(gpus=(disguised,), driver="535.104.05", packages={"vllm": "0.6.3"}),
        Fingerprint(gpus=(A100,), driver=1),  # type: ignore[arg-type]
        Fingerprint(gpus=(A100,), driver=True),  # type: ignore[arg-type]
        Fingerprint(gpus=(H200,), packages={"flashinfer_python": "0.2.0", "vllm": "0.26.0"}, installs=complete),
        Fingerprint(gpus=(H200,), packages={"vllm": "0.26.0"}, installs=complete,
                    env={"VLLM_ATTENTION_BACKEND": "FLASHINFER"}),
        Fingerprint(gpus=(A100, A100), interconnect="pcie", cuda_driver="12.2", cuda_runtime="12.1"),
        Fingerprint(),
    ]
    cells: list[dict[str, Any]] = [{}, {"kv_cache_dtype": "fp8", "model_weights_mib": 30000,
                                        "tensor_parallel_size": 1}]
    for order in (fps, fps[::-1], fps):
        for fp in order:
            for params in cells:
                for engine in (None, "vllm", "sglang"):
                    assert _ids(kb, fp, engine, params) == _reference(kb, fp, engine, params), (fp, engine)


def test_a_machine_condition_without_a_field_key_is_decided_from_the_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine condition added without its entry in ``RAW_FACT_KEYS`` is read from the facts every time: the same
    answers as the reference."""
    from pytest_gpucompat.kb import clear_match_cache, match

    monkeypatch.delitem(match.RAW_FACT_KEYS, "driver")
    monkeypatch.delitem(match.RAW_FACT_KEYS, "gpus")
    clear_match_cache()
    kb = KnowledgeBase(rules=(_rule(id="old-driver", when={"driver": "<535"}),
                              _rule(id="a100", when={"gpu": ["*A100*"]})))
    for fp in (Fingerprint(gpus=(A100,), driver="470.256.02"), Fingerprint(gpus=(H200,), driver="580.65.06"),
               Fingerprint(gpus=(A100,), driver="580.65.06"), Fingerprint(gpus=(H200,), driver="470.256.02")) * 2:
        assert _ids(kb, fp, "vllm", {}) == _reference(kb, fp, "vllm", {}), fp
    clear_match_cache()

