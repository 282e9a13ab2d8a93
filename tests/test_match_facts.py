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
    MACHINE_VERSIONS,
    NO_KEY,
    Facts,
    clear_facts_cache,
    engine_holds,
    facts_of,
    field_key,
    gpus_fields_key,
    gpus_needed,
    package_fact,
    package_keys,
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



class _Ada(str):
    """An architecture equal to its text whose lower case is another architecture's."""

    def lower(self) -> str:
        return "ada"


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
    (Fingerprint(installs={"vllm": EngineInstall("0.26.0", True)}),
     Fingerprint(installs={"vllm": EngineInstall("0.26.0", 1)})),  # type: ignore[arg-type]  # a record's
    (Fingerprint(gpus=(_gpu(compute_capability=1),)), Fingerprint(gpus=(_gpu(compute_capability=True),))),
    (Fingerprint(gpus=(_gpu(architecture="ampere"),)), Fingerprint(gpus=(_gpu(architecture=_Ada("ampere")),))),
    (Fingerprint(driver="1", cuda_driver="1", cuda_runtime=0.0, interconnect="nvlink"),  # type: ignore[arg-type]
     Fingerprint(driver="1", cuda_driver="1", cuda_runtime=-0.0, interconnect="nvlink")),  # type: ignore[arg-type]
])
def test_equal_fingerprints_of_other_types_get_their_own_facts(first: Fingerprint, second: Fingerprint) -> None:
    """``Facts.of`` remembers facts per fingerprint, found by equality: fingerprints equal in Python whose fields
    are of other types (1 MiB and True, 535 and 535.0, 0.0 and -0.0) each get the facts made from them, either
    order: exactly (``Version("8") == Version("8.0")`` and ``1 == True``, so the facts are compared by their repr,
    which tells those apart)."""
    for a, b in ((first, second), (second, first)):
        clear_facts_cache()
        assert a == b
        assert repr(match.Facts.of(a)) == repr(facts_of(a))
        assert repr(match.Facts.of(b)) == repr(facts_of(b))


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


# --- what Facts.of remembers --------------------------------------------------------------------------------------

H100 = GPU(index=1, name="NVIDIA H100 80GB HBM3", architecture="hopper", compute_capability="9.0", memory_mib=81559)
_PLAIN = [
    Fingerprint(),
    Fingerprint(gpus=(A100, H100), driver="550.54.15", cuda_driver="12.4", cuda_runtime="12.1", interconnect="nvlink",
                packages={"vllm": "0.26.0"}, env={"VLLM_USE_V1": "1"}),
    Fingerprint(gpus=(GPU(index=0, name="x"),)),  # no architecture, compute capability or size
    Fingerprint(installs={"vllm": EngineInstall("0.26.0", True), "sglang": EngineInstall("0.4.3", False)}),
    Fingerprint(installs={"vllm": EngineInstall("0.26.0", None)}),
    Fingerprint(installs={"vllm": {"complete": True}, "sglang": None, "trtllm": "yes"}),  # type: ignore[dict-item]
]


@pytest.mark.parametrize("fp", _PLAIN)
def test_a_fingerprint_of_plain_fields_is_made_into_facts_once(fp: Fingerprint) -> None:
    """Fields of the types a fingerprint file gives them (texts, a GPU's MiB as an int, installs complete or not,
    records or hand-written mappings, nothing at all): an equal fingerprint made again gets the same facts object,
    the facts ``facts_of`` makes."""
    again = Fingerprint(**{f: getattr(fp, f) for f in fp.__dataclass_fields__})
    assert again == fp and again is not fp
    facts = Facts.of(fp)
    assert Facts.of(again) is facts and Facts.of(fp) is facts
    assert repr(facts) == repr(facts_of(again))


# --- the keys the index finds a fingerprint's facts by --------------------------------------------------------------

class _Text(str):
    pass


_POOL = [
    *_PLAIN,
    *(Fingerprint(**{name: value}) for name in (*MACHINE_VERSIONS, "interconnect")  # type: ignore[arg-type]
      for value in ("535", "535.0", 535, 535.0, 1, True, 0.0, -0.0, _Text("535"))),
    *(Fingerprint(gpus=(_gpu(**{name: value}),)) for name, values in (
        ("architecture", ("ada", _Ada("ampere"), "ampere", "")),
        ("compute_capability", ("8", "8.0", 8, 8.0, 1, True, _Text("8.0"))),
        ("memory_mib", (1, True, 1.0, 40960, -5))) for value in values),
    Fingerprint(gpus=(GPU(index=0, name=_Text("x")),)),
    Fingerprint(gpus=(A100, A100)), Fingerprint(gpus=(A100,)), Fingerprint(gpus=(H100, A100)),
    *(Fingerprint(packages=packages, installs=installs)  # type: ignore[arg-type]
      for packages in ({"vllm": "0.6.3"}, {"VLLM": "0.6.3"}, {"vllm": "0.6.3", "VLLM": "bad"},
                       {"vllm": "0.9.0", "VLLM": "bad"}, {"vllm": "bad"}, {"vllm": 1}, {"vllm": True}, {"vllm": 0.6},
                       {"vllm": _Text("0.6.3")}, {_Text("vllm"): "0.6.3"}, {})
      for installs in ({}, {"vllm": EngineInstall("0.6.3", True)})),
]


def _gpus_fact(fp: Fingerprint) -> tuple[str, ...]:
    return tuple(dict.fromkeys(map(repr, facts_of(fp).gpus)))  # any GPU qualifies, and the smallest: each once


def _keyed_alike(key: object, fact: object, fps: list[Fingerprint]) -> None:
    """Two fingerprints that share a key have exactly the same fact."""
    by_key: dict[object, tuple[Fingerprint, object]] = {}
    for fp in fps:
        k, f = key(fp), fact(fp)  # type: ignore[operator]
        if k is NO_KEY:
            continue
        first = by_key.setdefault(k, (fp, f))
        assert first[1] == f, (k, first[0], fp)


@pytest.mark.parametrize("name", [*(n for n in MACHINE_VERSIONS if n != "driver"), "interconnect"])
def test_a_text_field_is_its_own_key_only_as_a_text(name: str) -> None:
    """A version field (or the interconnect) is the key of its fact as the text or None it is written as; a value
    of another type (``1`` and ``True``, ``0.0`` and ``-0.0``, a str subclass) has no key, and keys shared are
    facts shared."""
    key = field_key(name)
    assert key(Fingerprint(**{name: "12.4"})) == "12.4"
    assert key(Fingerprint()) is None
    for odd in (535, 1, True, 0.0, _Text("12.4")):
        assert key(Fingerprint(**{name: odd})) is NO_KEY, odd
    if name == "interconnect":
        _keyed_alike(key, lambda fp: repr(facts_of(fp).interconnect), _POOL)
    else:
        _keyed_alike(key, lambda fp: repr(facts_of(fp).versions[name]), _POOL)


def test_the_driver_is_keyed_by_itself_or_without_one_by_its_cuda_version() -> None:
    """The driver's fact is its version, or without one the drivers its stated CUDA version allows: the key is the
    driver as written, or the CUDA version as written when no driver is; texts only."""
    key = field_key("driver")
    assert key(Fingerprint(driver="550.54.15", cuda_driver="12.4")) == ("550.54.15", None)
    assert key(Fingerprint(cuda_driver="12.4")) == (None, "12.4")
    assert key(Fingerprint()) == (None, None)
    for odd in (535, 1, True, 0.0, _Text("12.4")):
        assert key(Fingerprint(driver=odd)) is NO_KEY and key(Fingerprint(cuda_driver=odd)) is NO_KEY, odd
    pool = [*_POOL, *(Fingerprint(driver=d, cuda_driver=c) for d in (None, "535.54.03", "535.54.3")
                      for c in (None, "11.8", "12.2", "12.2.0", "13.0"))]
    _keyed_alike(key, lambda fp: repr(facts_of(fp).versions["driver"] or facts_of(fp).driver_range), pool)


def test_a_machine_condition_without_a_field_key_has_none() -> None:
    assert field_key("not a condition")(Fingerprint(driver="550.54.15")) is NO_KEY
    assert field_key("driver")(Fingerprint(driver="550.54.15")) == ("550.54.15", None)


def test_gpus_are_their_own_key_as_written_each_once() -> None:
    """Each distinct GPU's name, architecture, compute capability and MiB once, in order, where each is of its
    written type (None, str, an int MiB); any other type leaves the GPUs without a key."""
    fields = ("NVIDIA A100-SXM4-40GB", "Ampere", "8.0", 40960)
    assert gpus_fields_key(Fingerprint(gpus=(A100, A100))) == (fields,)
    assert gpus_fields_key(Fingerprint(gpus=(H100, A100, H100))) == (
        ("NVIDIA H100 80GB HBM3", "hopper", "9.0", 81559), fields)
    assert gpus_fields_key(Fingerprint(gpus=(GPU(index=0, name="x"),))) == (("x", None, None, None),)
    assert gpus_fields_key(Fingerprint()) == ()
    for odd in (GPU(index=0, name=_Text("x")), _gpu(architecture=_Ada("ampere")), _gpu(compute_capability=8.0),
                _gpu(compute_capability=_Text("8.0")), _gpu(memory_mib=True), _gpu(memory_mib=1.0)):
        assert gpus_fields_key(Fingerprint(gpus=(A100, odd))) is NO_KEY, odd
    _keyed_alike(gpus_fields_key, _gpus_fact, _POOL)


def test_packages_are_their_own_keys_as_written() -> None:
    """Per package, by its normalized name, its version as written and whether the machine lists every package;
    a name written twice, or a version or a name that is not a str, has no key; then the key of a package not
    named. Keys shared are the same ``package_fact``."""
    listed = {"vllm": EngineInstall("0.6.3", True)}
    assert package_keys(Fingerprint(packages={"vllm": "0.6.3", "Flash_Infer": "x"})) == (
        {"vllm": ("0.6.3", False), "flash-infer": ("x", False)}, (None, False))
    assert package_keys(Fingerprint(packages={"vllm": "0.6.3"}, installs=listed)) == (
        {"vllm": ("0.6.3", True)}, (None, True))
    assert package_keys(Fingerprint(packages={"vllm": "0.6.3", "VLLM": "bad"})) == ({"vllm": NO_KEY}, (None, False))
    assert package_keys(Fingerprint(packages={"vllm": 0.6})) == ({"vllm": NO_KEY}, (None, False))  # type: ignore[dict-item]
    assert package_keys(Fingerprint(packages={"vllm": _Text("0.6.3")})) == ({"vllm": NO_KEY}, (None, False))
    assert package_keys(Fingerprint(packages={"a": "1", _Text("vllm"): "0.6.3"})) == ({}, NO_KEY)
    for name in ("vllm", "flash-infer"):
        def key(fp: Fingerprint, name: str = name) -> object:
            keys, absent = package_keys(fp)
            return keys.get(name, absent)

        _keyed_alike(key, lambda fp, name=name: repr(package_fact(facts_of(fp), name)), _POOL)
