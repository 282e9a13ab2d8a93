"""A fingerprint's facts as ``kb.match`` reads them, and the conditions built on them: a version condition on its
own field, an engine asked for without a cell, installs written as records or mappings, the runner's variables,
GPUs told apart by every fact a condition reads, and the two memos (package names, version keys) up to their bound.

Plain pytest through the public functions; each case names the side it pins.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import attrgetter

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pytest_gpucompat.kb import KnowledgeBase, match, matching_rules, parse_rule
from pytest_gpucompat.kb.match import (
    clear_facts_cache,
    engine_holds,
    facts_of,
    gpus_needed,
    version_condition,
    vkey,
)
from pytest_gpucompat.kb.schema import Conditions, Rule
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint
from pytest_gpucompat.machine.installs import EngineInstall


@pytest.fixture(autouse=True)
def _fresh_memos() -> Iterator[None]:
    clear_facts_cache()
    yield
    clear_facts_cache()


def rule_of(when: dict[str, object]) -> Rule:
    return parse_rule({"id": "r1", "summary": "s", "severity": "broken", "failure": "crash",
                       "confidence": "upstream", "sources": [{"kind": "doc", "ref": "x"}], "when": when}, "t.yaml")


# --- a version condition ----------------------------------------------------------------------------------------

def test_a_version_condition_judges_its_own_field_on_both_sides() -> None:
    cond = version_condition("driver")
    assert (cond.name, cond.fields) == ("driver", ("driver",))
    at_least, below = Conditions(driver=SpecifierSet(">=550")), Conditions(driver=SpecifierSet("<550"))
    assert cond.tested(at_least) and not cond.tested(Conditions())
    facts = facts_of(Fingerprint(driver="550.54.15"))
    value = cond.fact(facts)
    assert value == Version("550.54.15")
    assert cond.holds(at_least, value) and not cond.holds(below, value)
    assert not cond.holds(at_least, None)           # a driver the fingerprint lacks does not hold
    assert not cond.holds(Conditions(), value)      # nor does a condition the rule does not have
    assert cond.key(value) == "550.54.15" and cond.key(None) is None
    assert cond.known(facts) and cond.known(facts_of(Fingerprint()))


def test_a_version_condition_reads_where_it_is_told() -> None:
    cond = version_condition("gpu_count", attrgetter("gpu_count"), known=lambda f: bool(f.gpus))
    two = facts_of(Fingerprint(gpus=(A100, A100)))
    assert cond.fact(two) == Version("2")
    assert cond.holds(Conditions(gpu_count=SpecifierSet(">=2")), cond.fact(two))
    assert not cond.holds(Conditions(gpu_count=SpecifierSet(">=3")), cond.fact(two))
    assert cond.known(two) and not cond.known(facts_of(Fingerprint()))


# --- an engine asked for without a cell (``gpucompat check``) ---------------------------------------------------

@pytest.mark.parametrize(("packages", "params", "holds"), [
    ({}, {"engine": "vllm"}, True),       # params.engine names it
    ({}, {"engine": "VLLM"}, True),       # loosely
    ({}, {"engine": "sglang"}, False),    # names another
    ({}, {}, False),                      # nothing says so
    ({"vllm": "0.26.0"}, {}, True),       # installed
])
def test_an_engine_without_a_cell_is_installed_or_named(packages: dict[str, str], params: dict[str, object],
                                                        holds: bool) -> None:
    assert engine_holds("vllm", facts_of(Fingerprint(packages=packages)), None, params) is holds


def test_a_cell_engine_decides_alone() -> None:
    installed = facts_of(Fingerprint(packages={"vllm": "0.26.0"}))
    assert not engine_holds("vllm", installed, "sglang", {"engine": "vllm"})
    assert engine_holds("vllm", facts_of(Fingerprint()), "vllm", {})


@pytest.mark.parametrize(("params", "needed"), [
    ({"pipeline_parallel_size": 2}, 2),                               # the first absent: the rest still count
    ({"tensor_parallel_size": None, "pipeline_parallel_size": 3}, 3),  # null as absent
    ({"tensor_parallel_size": 2, "pipeline_parallel_size": 3}, 6),
    ({}, 1),
])
def test_gpus_needed_skips_an_absent_factor(params: dict[str, object], needed: int) -> None:
    assert gpus_needed(("tensor_parallel_size", "pipeline_parallel_size"), params) == needed


# --- installs, variables, GPUs as facts ---------------------------------------------------------------------------

@pytest.mark.parametrize(("state", "complete"), [
    ({"complete": True}, True),                       # a hand-written fingerprint's mapping
    ({"complete": False, "missing": ["x"]}, False),
    ({"complete": "yes"}, None),                      # not a yes or no: not known
    ({}, None),
    (EngineInstall("0.26.0", True), True),            # a fingerprint read from the machine
    (EngineInstall("0.26.0", None), None),
    (None, None),                                     # neither: not known, no error
])
def test_an_install_is_complete_incomplete_or_not_known(state: object, complete: bool | None) -> None:
    fp = Fingerprint(installs={"vllm": state})  # type: ignore[dict-item]  # what a hand-written file may hold
    assert facts_of(fp).installs == {"vllm": complete}


def test_the_runners_variables_are_facts() -> None:
    assert facts_of(Fingerprint(env={"VLLM_USE_V1": "0"})).env == {"VLLM_USE_V1": "0"}
    assert facts_of(Fingerprint()).env == {}


A100 = GPU(index=0, name="NVIDIA A100-SXM4-40GB", architecture="Ampere", compute_capability="8.0", memory_mib=40960)


def test_a_gpu_as_facts() -> None:
    unknown = GPU(index=0, name="NVIDIA A100-SXM4-40GB", compute_capability="8.0")
    assert facts_of(Fingerprint(gpus=(A100,))).gpus == (
        ("nvidia a100-sxm4-40gb", "ampere", Version("8.0"), Version("40960")),)
    # an architecture or a size the fingerprint does not know is None, never a name of its own
    assert facts_of(Fingerprint(gpus=(unknown,))).gpus == (("nvidia a100-sxm4-40gb", None, Version("8.0"), None),)


@pytest.mark.parametrize(("when", "short", "enough"), [
    ({"compute_capability": ">=9.0"},
     GPU(index=0, name="NVIDIA X", architecture="hopper", compute_capability="8.9", memory_mib=81920),
     GPU(index=0, name="NVIDIA X", architecture="hopper", compute_capability="9.0", memory_mib=81920)),
    ({"gpu_memory_mib": ">=81920"},
     GPU(index=0, name="NVIDIA X", architecture="hopper", compute_capability="9.0", memory_mib=81919),
     GPU(index=0, name="NVIDIA X", architecture="hopper", compute_capability="9.0", memory_mib=81920)),
])
def test_gpus_that_differ_in_one_fact_are_judged_apart(when: dict[str, object], short: GPU, enough: GPU) -> None:
    """The index decides the GPU conditions once per distinct GPU: two GPUs alike but for the compute capability
    (or the memory) must not share that decision, in either order."""
    kb = KnowledgeBase(rules=(rule_of(when),))
    assert matching_rules(kb, Fingerprint(gpus=(short,))) == []
    assert [r.id for r in matching_rules(kb, Fingerprint(gpus=(enough,)))] == ["r1"]
    assert matching_rules(kb, Fingerprint(gpus=(short,))) == []


# --- the memos ----------------------------------------------------------------------------------------------------

def test_package_names_are_normalized_once_each_up_to_4096(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    normalize = match.normalize_package

    def counted(name: str) -> str:
        seen.append(name)
        return normalize(name)

    monkeypatch.setattr(match, "normalize_package", counted)
    fp = Fingerprint(packages={f"Pkg_{i}": "1.0" for i in range(4097)})
    facts = facts_of(fp)
    assert len(seen) == 4097 and facts.packages["pkg-0"] == facts.packages["pkg-4096"] == Version("1.0")
    assert facts_of(fp) == facts
    assert seen[4097:] == ["Pkg_4096"]  # the first 4096 remembered; the one past the bound normalized again


def test_version_keys_are_said_once_per_version_up_to_4096() -> None:
    said: list[str] = []

    class Counted(Version):
        def __str__(self) -> str:
            said.append("")
            return super().__str__()

    first = [Counted(f"1.{i}") for i in range(4096)]
    keys = [vkey(v) for v in first]
    assert keys[:2] == ["1.0", "1.1"] and len(said) == 4096
    assert [vkey(v) for v in first] == keys and len(said) == 4096  # remembered: not said again
    late = Counted("2.0")
    assert vkey(late) == vkey(late) == "2.0" and len(said) == 4098  # past the bound: said each time
    assert vkey(None) is None



def _gpu(**fields: object) -> GPU:
    return GPU(index=0, name="x", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(("first", "second"), [
    (Fingerprint(gpus=(_gpu(memory_mib=1),)), Fingerprint(gpus=(_gpu(memory_mib=True),))),
    (Fingerprint(gpus=(_gpu(memory_mib=1),)), Fingerprint(gpus=(_gpu(memory_mib=1.0),))),
    (Fingerprint(gpus=(_gpu(compute_capability=8),)), Fingerprint(gpus=(_gpu(compute_capability=8.0),))),
    (Fingerprint(driver=535), Fingerprint(driver=535.0)),  # type: ignore[arg-type]
    (Fingerprint(cuda_runtime=0.0), Fingerprint(cuda_runtime=-0.0)),  # type: ignore[arg-type]
    (Fingerprint(packages={"vllm": 1}), Fingerprint(packages={"vllm": True})),  # type: ignore[dict-item]
    (Fingerprint(env={"V": 1}), Fingerprint(env={"V": True})),  # type: ignore[dict-item]
    (Fingerprint(installs={"vllm": {"complete": True}}),  # type: ignore[dict-item]
     Fingerprint(installs={"vllm": {"complete": 1}})),  # type: ignore[dict-item]
])
def test_equal_fingerprints_of_other_types_get_their_own_facts(first: Fingerprint, second: Fingerprint) -> None:
    """``Facts.of`` remembers facts per fingerprint, found by equality: fingerprints equal in Python whose fields
    are of other types (1 MiB and True, 535 and 535.0, 0.0 and -0.0) each get the facts made from them, either
    order."""
    clear_facts_cache()
    for a, b in ((first, second), (second, first)):
        assert a == b
        assert match.Facts.of(a) == facts_of(a)
        assert match.Facts.of(b) == facts_of(b)


def test_versions_of_equal_values_of_other_types_are_parsed_from_their_own_text() -> None:
    """``parse_version`` remembers versions by text: ``1`` then ``True`` (equal keys), ``0.0`` then ``-0.0``."""
    from pytest_gpucompat.common.versions import parse_version

    assert parse_version(1) == Version("1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'True' is not a version"):
        parse_version(True)  # type: ignore[arg-type]
    assert parse_version(0.0) == Version("0.0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'-0.0' is not a version"):
        parse_version(-0.0)  # type: ignore[arg-type]
    assert facts_of(Fingerprint(driver=1)).versions["driver"] == Version("1")  # type: ignore[arg-type]
    assert facts_of(Fingerprint(driver=True)).versions["driver"] is None  # type: ignore[arg-type]
