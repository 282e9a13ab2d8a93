"""Matching and loading of rules: pure functions, no pytest plugin involved."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pytest_gpucompat.catalog.registry import engine_names
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.common.versions import matches, parse_specifier, parse_version
from pytest_gpucompat.kb import load_kb, load_rule_file, matching_rules, parse_rule
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint
from pytest_gpucompat.machine.installs import EngineInstall

A100 = GPU(index=0, name="NVIDIA A100-SXM4-40GB", architecture="ampere", compute_capability="8.0", memory_mib=40960)
H200 = GPU(index=1, name="NVIDIA H200", architecture="hopper", compute_capability="9.0", memory_mib=143771)


def rule(**overrides):
    raw = {"id": "r1", "summary": "s", "severity": "broken", "failure": "crash", "confidence": "upstream",
           "sources": [{"kind": "doc", "ref": "x"}]}
    raw.update(overrides)
    return parse_rule(raw, "test.yaml")


def kb_of(*rules):
    from pytest_gpucompat.kb import KnowledgeBase

    return KnowledgeBase(rules=tuple(rules))


def ids(kb, fp, engine=None, params=None):
    return [r.id for r in matching_rules(kb, fp, engine, params)]


@pytest.mark.parametrize(
    ("spec", "version", "expected"),
    [
        ("<580", "575.51.03", True),
        ("<580", "580.159.04", False),
        (">=580", "580.159.04", True),
        ("535", "535.104.05", True),  # a bare version is a release line
        ("535", "5350.1", False),
        ("12.1", "12.1", True),
        ("12.1", "12.10", False),
        (">=2.4", "2.11.0+cu130", True),  # local builds compare by their public version
        ("==2.11.0", "2.11.0+cu130", True),
        (">=1.0", "1.4.0rc1", True),  # pre-releases count
        ("<0.6.4", "0.6.3.post1", True),
        (">=0.4,<0.6", "0.6.0", False),
    ],
)
def test_version_specifiers(spec, version, expected):
    assert matches(parse_specifier(spec), parse_version(version)) is expected


def test_bad_specifier_and_version_raise_value_error():
    with pytest.raises(ValueError, match="not a version"):
        parse_specifier("abc")
    with pytest.raises(ValueError, match="not a version"):
        parse_version("N/A")


def test_missing_fields_do_not_match():
    r = rule(when={"driver": "<535", "compute_capability": "<8.0"})
    assert ids(kb_of(r), Fingerprint()) == []
    assert ids(kb_of(r), Fingerprint(driver="530.30.02")) == []  # no GPU: the cc condition cannot hold
    v100 = GPU(index=0, name="Tesla V100-SXM2-32GB", compute_capability="7.0")
    assert ids(kb_of(r), Fingerprint(driver="530.30.02", gpus=(v100,))) == ["r1"]


def test_gpu_conditions_hold_for_one_and_the_same_gpu():
    r = rule(when={"gpu": ["*a100*"], "compute_capability": ">=9.0"})
    assert ids(kb_of(r), Fingerprint(gpus=(A100, H200))) == []
    r2 = rule(when={"gpu": ["*H200*"], "arch": ["hopper"], "gpu_memory_mib": ">100000"})
    assert ids(kb_of(r2), Fingerprint(gpus=(A100, H200))) == ["r1"]


def test_gpu_count_and_interconnect():
    r = rule(when={"gpu_count": ">=2", "interconnect": "pcie"})
    assert ids(kb_of(r), Fingerprint(gpus=(A100,), interconnect="pcie")) == []
    assert ids(kb_of(r), Fingerprint(gpus=(A100, A100), interconnect="pcie")) == ["r1"]
    assert ids(kb_of(r), Fingerprint(gpus=(A100, A100), interconnect="nvlink")) == []


def test_packages_normalized_and_versions():
    r = rule(when={"packages": {"TensorRT_LLM": ">=0.9,<0.10"}}, engine="tensorrt_llm")
    assert r.engine == "tensorrt-llm"
    fp = Fingerprint(packages={"tensorrt-llm": "0.9.0"})
    assert ids(kb_of(r), fp) == ["r1"]
    assert ids(kb_of(r), Fingerprint(packages={"tensorrt-llm": "0.10.0"})) == []


def test_engine_rules_apply_to_their_engine_only():
    r = rule(engine="vllm")
    fp = Fingerprint()
    assert ids(kb_of(r), fp, engine="vllm") == ["r1"]
    assert ids(kb_of(r), fp, engine="hf") == []
    # without a cell engine (gpucompat check): installed package or params.engine decides
    assert ids(kb_of(r), fp) == []
    assert ids(kb_of(r), Fingerprint(packages={"vllm": "0.26.0"})) == ["r1"]
    assert ids(kb_of(r), Fingerprint(params={"engine": "vllm"})) == ["r1"]


@pytest.mark.parametrize(
    ("cond", "params", "expected"),
    [
        ({"kv_cache_dtype": ["fp8", "fp8_e4m3"]}, {"kv_cache_dtype": "FP8_E4M3"}, True),
        ({"kv_cache_dtype": ["fp8", "fp8_e4m3"]}, {"kv_cache_dtype": "auto"}, False),
        ({"kv_cache_dtype": ["fp8"]}, {}, False),
        ({"enforce_eager": [False, None]}, {}, True),  # null: not set
        ({"enforce_eager": [False, None]}, {"enforce_eager": True}, False),
        ({"tensor_parallel_size": ">=2"}, {"tensor_parallel_size": 2}, True),
        ({"tensor_parallel_size": ">=2"}, {"tensor_parallel_size": 1}, False),
        ({"tensor_parallel_size": ">=2"}, {"tensor_parallel_size": "auto"}, False),
        ({"block_size": 32}, {"block_size": 32.0}, True),
        ({"block_size": 32}, {"block_size": "16"}, False),
    ],
)
def test_param_conditions(cond, params, expected):
    r = rule(when={"params": cond})
    assert (ids(kb_of(r), Fingerprint(), params=params) == ["r1"]) is expected


def test_model_globs():
    r = rule(when={"model": ["*qwen2-7b*"]})
    assert ids(kb_of(r), Fingerprint(), params={"model": "Qwen/Qwen2-7B-Instruct"}) == ["r1"]
    assert ids(kb_of(r), Fingerprint(), params={"model": "meta-llama/Llama-3-8B"}) == []
    assert ids(kb_of(r), Fingerprint()) == []


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        ({"severity": "fatal"}, "severity", "not one of"),
        ({"failure": "explodes"}, "failure", "not one of"),
        ({"confidence": "sure"}, "confidence", "not one of"),
        ({"colour": "red"}, "colour", "unknown key"),
        ({"when": {"driver": "<<5"}}, "when.driver", "not a version"),
        ({"when": {"packages": {"vllm": "latest"}}}, "when.packages.vllm", "not a version"),
        ({"when": {"gpu_ram": 5}}, "when.gpu_ram", "unknown condition"),
        ({"when": {"interconnect": "infiniband"}}, "when.interconnect", "not one of"),
        ({"confidence": "verified"}, "confidence", "report"),
        ({"engine": "ollama"}, "engine", "not one of"),
        ({"sources": []}, "sources", "required"),
        ({"claims": ["claim6"]}, "claims", "not a claim id"),
        ({"when": {"packages": {"flashinfer": "missing"}}}, "when.packages.flashinfer", "absent / present"),
        ({"when": {"install": "partial"}}, "when.install", "not one of"),
        ({"engine": None, "when": {"install": "incomplete"}}, "when.install", "needs the rule's engine"),
        ({"when": {"model_shape": {"head_dim": [128]}}}, "when.model_shape.head_dim", "unknown fact of a model"),
        ({"when": {"model_shape": [128]}}, "when.model_shape", "must map"),
        ({"when": {"model_shape": {"head_size": {"a": 1}}}}, "when.model_shape.head_size", "must be a value"),
        ({"when": {"params": {"head_size": [128]}}}, "when.params.head_size", "model_shape"),
    ],
)
def test_bad_rules_name_file_rule_and_field(raw, field, message):
    with pytest.raises(InputError) as info:
        rule(**raw)
    text = str(info.value)
    assert text.startswith("test.yaml: rule 'r1': field")
    assert f"'{field}'" in text
    assert message in text
    assert "\n" not in text


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad.yaml", "rules:\n  - id: a\n    summary: [unclosed\n")
    with pytest.raises(InputError, match=r"bad.yaml: invalid YAML at line \d+"):
        load_rule_file(path)


def test_duplicate_id_across_files_is_an_error(tmp_path):
    body = """
    rules:
      - id: same
        summary: s
        severity: advice
        failure: none
        confidence: upstream
        sources: [{kind: doc, ref: x}]
    """
    a = write(tmp_path, "a.yaml", body)
    b = write(tmp_path, "b.yaml", body)
    with pytest.raises(InputError, match="rule 'same': field 'id': duplicate id, first defined in .*a.yaml"):
        load_kb([a, b], builtin=False)


def test_user_rules_extend_builtin(tmp_path):
    builtin = load_kb()
    extra = write(tmp_path, "mine.yaml", """
    rules:
      - id: team-no-a10
        summary: our A10s overheat
        severity: degraded
        failure: slow
        confidence: verified
        when: {gpu: ["*A10*"]}
        sources: [{kind: report, ref: reports/a10.json}]
    """)
    kb = load_kb([tmp_path])
    assert len(kb.rules) == len(builtin.rules) + 1
    assert kb.by_id()["team-no-a10"].file == str(extra)


def test_a_claim_that_matches_flags_a_v100_but_not_an_h200():
    kb = kb_of(rule(id="bf16", when={"compute_capability": "<8.0", "params": {"dtype": ["bfloat16"]}}))
    v100 = GPU(index=0, name="Tesla V100", compute_capability="7.0")
    assert ids(kb, Fingerprint(gpus=(v100,)), params={"dtype": "bfloat16"}) == ["bf16"]
    assert ids(kb, Fingerprint(gpus=(H200,)), params={"dtype": "bfloat16"}) == []


def test_indexed_matching_agrees_with_the_rule_by_rule_reference():
    """matching_rules uses a precomputed index; it must give exactly what checking each rule gives."""
    import random

    from pytest_gpucompat.kb import Facts, rule_matches

    kb = load_kb()
    rng = random.Random(7)
    gpus = [A100, H200, GPU(index=0, name="Tesla V100-SXM2-32GB", compute_capability="7.0", memory_mib=32768),
            GPU(index=0, name="NVIDIA L4", compute_capability="8.9", memory_mib=23034)]
    params_pool = {"kv_cache_dtype": ["auto", "fp8", "fp8_e4m3", None], "dtype": ["bfloat16", "float16", "auto"],
                   "tensor_parallel_size": [1, 2, 4, "2"], "block_size": [16, 32, 16.0], "enforce_eager": [True, False]}
    for _ in range(400):
        fp = Fingerprint(
            gpus=tuple(rng.sample(gpus, rng.randint(0, 2))),
            driver=rng.choice([None, "470.82.01", "535.104.05", "550.54.15", "580.159.04"]),
            cuda_driver=rng.choice([None, "11.8", "12.2", "13.0"]),
            cuda_runtime=rng.choice([None, "11.8", "12.1", "12.4", "13.0"]),
            interconnect=rng.choice([None, "pcie", "nvlink"]),
            packages={k: v for k, v in [
                ("vllm", rng.choice(["0.3.2", "0.6.6", "0.26.0", "0.27.1"])),
                ("sglang", rng.choice(["0.4.0", "0.5.16"])),
                ("tensorrt-llm", rng.choice(["0.9.0", "0.13.0", "1.2.1"])),
            ] if rng.random() < 0.6},
        )
        params = {k: rng.choice(v) for k, v in params_pool.items() if rng.random() < 0.5}
        params = {k: v for k, v in params.items() if v is not None}
        engine = rng.choice([None, *engine_names()])  # a check without an engine, or a cell of any engine
        expected = [r.id for r in kb.rules if rule_matches(r, Facts.of(fp), engine, {**fp.params, **params})]
        assert ids(kb, fp, engine, params) == expected


RULE_TEMPLATE = """
rules:
  - id: {rid}
    summary: s
    severity: advice
    failure: none
    confidence: upstream
    sources: [{{kind: doc, ref: x}}]
"""


def test_a_rule_file_rewritten_in_the_same_process_is_read_again(tmp_path):
    path = write(tmp_path, "mine.yaml", RULE_TEMPLATE.format(rid="first"))
    kb = load_kb([path], builtin=False)
    assert [r.id for r in kb.rules] == ["first"]
    assert load_kb([path], builtin=False) is kb, "an unchanged file is not parsed again"
    path.write_text(RULE_TEMPLATE.format(rid="second-rule"))
    assert [r.id for r in load_kb([path], builtin=False).rules] == ["second-rule"]
    # the same size and a changed mtime (a rewrite in the same millisecond keeps the mtime: see file_stamp)
    path.write_text(RULE_TEMPLATE.format(rid="third-rule."))
    import os

    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert [r.id for r in load_kb([path], builtin=False).rules] == ["third-rule."]


def test_a_new_file_in_a_rule_directory_is_seen(tmp_path):
    write(tmp_path, "a.yaml", RULE_TEMPLATE.format(rid="a"))
    assert [r.id for r in load_kb([tmp_path], builtin=False).rules] == ["a"]
    write(tmp_path, "b.yaml", RULE_TEMPLATE.format(rid="b"))
    assert [r.id for r in load_kb([tmp_path], builtin=False).rules] == ["a", "b"]


def test_changing_the_matrices_dir_changes_the_builtin_rules_and_matrices(tmp_path, monkeypatch):
    from pytest_gpucompat.workload.matrix import load_named_matrices

    shipped_kb, shipped = load_kb(), load_named_matrices()
    (tmp_path / "rules").mkdir()
    write(tmp_path / "rules", "team.yaml", RULE_TEMPLATE.format(rid="team-only"))
    write(tmp_path, "matrices.yaml", "matrices: {team: [{engine: hf, params: {dtype: [float32]}}]}\n")
    monkeypatch.setenv("GPUCOMPAT_MATRICES_DIR", str(tmp_path))
    assert [r.id for r in load_kb().rules] == ["team-only"]
    assert list(load_named_matrices()) == ["team"]
    write(tmp_path, "matrices.yaml", "matrices: {team: [{engine: hf, params: {dtype: [float32, bfloat16]}}]}\n")
    assert [c.id for c in load_named_matrices()["team"]] == ["hf-dtype=float32", "hf-dtype=bfloat16"]
    monkeypatch.delenv("GPUCOMPAT_MATRICES_DIR")
    assert load_kb() is shipped_kb
    assert load_named_matrices() == shipped


def test_every_condition_field_is_judged_by_one_per_condition_function():
    """A new field of ``Conditions`` must be given to exactly one kind of per-condition function in ``kb.match``
    (which both the reference ``rule_matches`` and the index use): see docs/extending.md "Add a rule field"."""
    import dataclasses

    from pytest_gpucompat.kb import Conditions
    from pytest_gpucompat.kb.match import MACHINE_CONDITIONS, NEEDS_FIELDS, PACKAGE_FIELDS, PARAM_FIELDS

    judged = [f for c in MACHINE_CONDITIONS for f in c.fields] + [*PACKAGE_FIELDS, *PARAM_FIELDS, *NEEDS_FIELDS]
    assert sorted(judged) == sorted(f.name for f in dataclasses.fields(Conditions))


@pytest.mark.parametrize("when", [
    {"driver": "<535"}, {"cuda_driver": ">=12"}, {"cuda_runtime": "12.1"}, {"gpu_count": ">=2"},
    {"interconnect": "nvlink"}, {"gpu": ["*v100*"]}, {"arch": ["ampere"]}, {"compute_capability": "<8.0"},
    {"gpu_memory_mib": "<40000"}, {"packages": {"vllm": "<0.6"}}, {"params": {"dtype": ["bfloat16"]}},
    {"params": {"tensor_parallel_size": ">=2"}}, {"model": ["*qwen*"]},
    {"needs": {"gpus": ["tensor_parallel_size"]}},
    {"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}},
    {"packages": {"flashinfer-python": "absent"}}, {"packages": {"flashinfer-python": "present"}},
    {"packages": {"vllm": ">=0.20", "flashinfer_python": "absent"}}, {"install": "incomplete"},
    {"install": "complete"}, {"model_shape": {"head_size": [128]}}, {"model_shape": {"num_key_value_heads": "<4"}},
    {"model_shape": {"architecture": ["Qwen2ForCausalLM"], "head_size": ">=64"}},
])
def test_index_and_reference_agree_on_each_condition_kind(when):
    """Each condition kind alone, over machines and cells that make it hold and fail."""
    from pytest_gpucompat.kb import Facts, rule_matches

    r = rule(when=when, engine="vllm")
    kb = kb_of(r)
    v100 = GPU(index=0, name="Tesla V100-SXM2-32GB", architecture="volta", compute_capability="7.0",
               memory_mib=32768)
    machines = [
        Fingerprint(),
        Fingerprint(gpus=(v100,), driver="530.30.02", cuda_driver="12.1", cuda_runtime="12.1.105",
                    interconnect="pcie", packages={"vllm": "0.5.4"}),
        Fingerprint(gpus=(A100, H200), driver="580.159.04", cuda_driver="13.0", cuda_runtime="12.8",
                    interconnect="nvlink", packages={"vllm": "0.26.0"},
                    installs={"vllm": EngineInstall("0.26.0", False, ("flashinfer-python==0.6.14 (not installed)",))}),
        Fingerprint(gpus=(H200,), packages={"vllm": "0.26.0", "flashinfer-python": "0.6.14"},
                    installs={"vllm": EngineInstall("0.26.0", True)}),
        Fingerprint(gpus=(H200,), packages={"vllm": "0.26.0"}),  # hand-written: flashinfer's presence not known
    ]
    cells = [{}, {"dtype": "bfloat16", "tensor_parallel_size": 2, "model": "Qwen/Qwen2-7B",
                  "model_weights_mib": 100_000, "head_size": 128, "num_key_value_heads": 2,
                  "architecture": "Qwen2ForCausalLM"}, {"dtype": "float16", "tensor_parallel_size": 1, "head_size": 32,
                                                        "num_key_value_heads": 8, "architecture": "LlamaForCausalLM"},
             {"tensor_parallel_size": 4, "model_weights_mib": 200_000}]
    outcomes = set()
    for fp in machines:
        for params in cells:
            for engine in ("vllm", None):
                want = rule_matches(r, Facts.of(fp), engine, {**fp.params, **params})
                assert (ids(kb, fp, engine, params) == ["r1"]) is want, (fp, engine, params)
                outcomes.add(want)
    assert outcomes == {True, False}, "the condition both held and failed"


def _reference_ids(kb, fp, engine, params):
    from pytest_gpucompat.kb import Facts, rule_matches

    return [r.id for r in kb.rules if rule_matches(r, Facts.of(fp), engine, {**fp.params, **params})]


class _Shouty(str):
    """A str whose ``str()`` differs from its value: equal to "fp8" but judged as "FP8-SHOUTY"."""

    def __str__(self) -> str:
        return "FP8-SHOUTY"


def test_the_index_remembers_values_only_where_equal_values_are_alike():
    """The index remembers a cell's parameter verdict by the values' types and values: values that are equal in
    Python but not to the conditions (True, 1, 1.0, "1"; 0.0 and -0.0; a str subclass), unhashable values (lists,
    dicts) and None must each give the reference's answer, also when asked again and in either order."""
    kb = kb_of(
        rule(id="tp-ge-2", when={"params": {"tensor_parallel_size": ">=1"}}),
        rule(id="tp-one", when={"params": {"tensor_parallel_size": ["1"]}}),
        rule(id="tp-true", when={"params": {"tensor_parallel_size": [True]}}),
        rule(id="kv-fp8", when={"params": {"kv_cache_dtype": ["fp8"]}}),
        rule(id="kv-unset", when={"params": {"kv_cache_dtype": [None]}}),
        rule(id="zero", when={"params": {"swap_space": ">=0"}}),
        rule(id="needs-2", when={"needs": {"gpus": ["tensor_parallel_size"]}}),
        rule(id="needs-mem", when={"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}),
    )
    fps = [Fingerprint(), Fingerprint(gpus=(A100,)), Fingerprint(gpus=(A100, H200))]
    values = [1, True, 1.0, "1", 2, 2.0, "2", [2], {"n": 2}, None, False, 0, "fp8", _Shouty("fp8"), ["fp8"], 0.0,
              -0.0, float("nan"), "auto"]
    cells = [{}]
    for v in values:
        cells += [{"tensor_parallel_size": v}, {"kv_cache_dtype": v}, {"swap_space": v},
                  {"kv_cache_dtype": "fp8", "tensor_parallel_size": v, "model_weights_mib": 60_000},
                  {"tensor_parallel_size": v, "kv_cache_dtype": v}]
    for _ in range(2):  # the second round is answered from what the first remembered
        for fp in fps:
            for params in cells + cells[::-1]:
                assert ids(kb, fp, "vllm", params) == _reference_ids(kb, fp, "vllm", params), (fp, params)


def test_fingerprints_that_share_remembered_verdicts_still_get_their_own_answers():
    """Verdicts are shared between fingerprints: needs verdicts by GPU count and smallest GPU, GPU conditions by
    the distinct GPUs. Fingerprints that agree on those but not on the rest, and one GPU against eight alike, must
    each get the reference's answer; so must a fingerprint equal to another but for its packages (same hash)."""
    kb = kb_of(
        rule(id="h200", when={"gpu": ["*h200*"]}),
        rule(id="two-plus", when={"gpu_count": ">=2"}),
        rule(id="old-vllm", when={"packages": {"vllm": "<0.6"}}),
        rule(id="needs-4", when={"needs": {"gpus": ["tensor_parallel_size"]}}),
        rule(id="needs-mem", when={"needs": {"gpu_memory_mib": ["tensor_parallel_size"]}}),
    )
    one = Fingerprint(gpus=(H200,), packages={"vllm": "0.5.0"})
    same_but_packages = Fingerprint(gpus=(H200,), packages={"vllm": "0.26.0"})
    eight = Fingerprint(gpus=tuple(GPU(index=i, name=H200.name, architecture=H200.architecture,
                                       compute_capability=H200.compute_capability, memory_mib=H200.memory_mib)
                                   for i in range(8)))
    smaller = Fingerprint(gpus=(A100,), packages={"vllm": "0.5.0"})
    cells = [{}, {"tensor_parallel_size": 2}, {"tensor_parallel_size": 8, "model_weights_mib": 500_000},
             {"tensor_parallel_size": 1, "model_weights_mib": 100_000}]
    assert hash(one) == hash(same_but_packages) and one != same_but_packages
    for fp in (one, same_but_packages, eight, smaller, one, eight):
        for params in cells:
            assert ids(kb, fp, "vllm", params) == _reference_ids(kb, fp, "vllm", params), (fp, params)


def test_the_rules_returned_are_the_callers_to_change():
    """Each call returns a new list: changing one must not change what a later call returns."""
    kb = kb_of(rule(id="a"), rule(id="b"))
    first = matching_rules(kb, Fingerprint())
    first.clear()
    assert ids(kb, Fingerprint()) == ["a", "b"]


def test_clearing_the_match_cache_gives_the_same_answers():
    from pytest_gpucompat.kb import clear_match_cache

    kb = load_kb()
    fp = Fingerprint(gpus=(A100,), driver="535.104.05", packages={"vllm": "0.6.3"})
    params = {"kv_cache_dtype": "fp8", "tensor_parallel_size": 2}
    before = ids(kb, fp, "vllm", params)
    clear_match_cache()
    assert ids(kb, fp, "vllm", params) == before == _reference_ids(kb, fp, "vllm", params)
