"""A model's config.json as the facts rules test (``check --model``), and conditions that relate two of a cell's
values (``when.needs.divisible``): plain pytest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_gpucompat.cli import main
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.kb import evaluate_machine
from pytest_gpucompat.kb.load import parse_rule
from pytest_gpucompat.kb.match import Facts, contradiction, rule_matches
from pytest_gpucompat.kb.schema import KnowledgeBase, Rule
from pytest_gpucompat.machine.fingerprint import Fingerprint, from_dict
from pytest_gpucompat.workload.checkpoint import as_params, model_facts, model_shape

QWEN2_7B_AWQ = {  # the shape of Qwen/Qwen2-7B-Instruct-AWQ's config.json
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "num_attention_heads": 28,
    "num_key_value_heads": 4, "max_position_embeddings": 32768, "sliding_window": 131072,
    "use_sliding_window": False, "torch_dtype": "float16",
    "quantization_config": {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm", "zero_point": True},
}


def test_a_config_gives_shape_dtype_and_quantization() -> None:
    facts = model_shape(QWEN2_7B_AWQ)
    assert facts == {"architecture": "Qwen2ForCausalLM", "head_size": 128, "num_attention_heads": 28,
                     "num_key_value_heads": 4, "torch_dtype": "float16", "mla": False, "quant_method": "awq",
                     "quant_bits": 4}
    assert as_params(facts)["quantization"] == "awq"  # what the engines take when no --quantization is given


@pytest.mark.parametrize(("config", "expected"), [
    ({"dtype": "bfloat16", "num_attention_heads": 32}, {"torch_dtype": "bfloat16", "quant_method": "none"}),
    ({"text_config": {"torch_dtype": "torch.bfloat16"}}, {"torch_dtype": "bfloat16"}),
    ({"quantization_config": {"load_in_4bit": True, "quant_method": "bitsandbytes"}},
     {"quant_method": "bitsandbytes", "quant_bits": 4}),
    ({"quantization_config": {"quant_method": "compressed-tensors",
                              "config_groups": {"g0": {"weights": {"num_bits": 8, "type": "float"}}}}},
     {"quant_method": "compressed-tensors", "quant_bits": 8}),
    ({"num_attention_heads": 128, "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
      "hidden_size": 7168}, {"mla": True, "head_size": 192}),
    ({"quantization_config": "fp8"}, {}),  # not a mapping: nothing said of the quantization
])
def test_each_spelling_of_a_fact(config: dict[str, Any], expected: dict[str, Any]) -> None:
    facts = model_shape(config)
    assert {k: facts.get(k) for k in expected} == expected
    if config.get("quantization_config") == "fp8":
        assert "quant_method" not in facts and "quantization" not in as_params(facts)


def test_an_unquantized_config_is_no_quantization_and_never_a_quantized_rules_match() -> None:
    facts = as_params(model_shape({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32}))
    assert facts["quant_method"] == "none" and "quantization" not in facts


RULES = """
rules:
  - id: heads-by-tp
    summary: heads must divide
    severity: broken
    failure: error-at-start
    engine: vllm
    when:
      needs: {divisible: {num_attention_heads: tensor_parallel_size}}
    confidence: upstream
    sources: [{kind: doc, ref: x}]
"""


def _rule(text: str = RULES) -> Rule:
    return parse_rule(yaml.safe_load(text)["rules"][0], "t.yaml")


def _fp(**params: Any) -> Fingerprint:
    return from_dict({"gpus": [{"name": "NVIDIA A100-SXM4-80GB"}], "packages": {"vllm": "0.6.3"}, "params": params},
                     "t", None)


@pytest.mark.parametrize(("params", "holds"), [
    ({"num_attention_heads": 28, "tensor_parallel_size": 8}, True),
    ({"num_attention_heads": 28, "tensor_parallel_size": "4"}, False),
    ({"num_attention_heads": 28}, False),  # no tensor parallel size stated: unknown, not judged
    ({"tensor_parallel_size": 3}, False),  # heads not known: never a match
    ({"num_attention_heads": 28, "tensor_parallel_size": 0}, False),
    ({"num_attention_heads": True, "tensor_parallel_size": 3}, False),
])
def test_divisibility_is_judged_only_on_two_known_counts(params: dict[str, Any], holds: bool) -> None:
    rule = _rule()
    fp = _fp(**params)
    assert rule_matches(rule, Facts.of(fp), "vllm", fp.params) is holds
    found = [f.id for f in evaluate_machine(KnowledgeBase(rules=(rule,)), fp)]
    assert found == (["heads-by-tp"] if holds else [])
    if params.get("num_attention_heads") == 28 and params.get("tensor_parallel_size") == "4":
        assert contradiction(rule, Facts.of(fp), "vllm", fp.params) == "when.needs.divisible"


def test_a_bad_divisible_need_is_one_error() -> None:
    with pytest.raises(InputError, match="when.needs.divisible"):
        _rule(RULES.replace("{num_attention_heads: tensor_parallel_size}", "[1, 2]"))


def test_check_model_reads_a_directory_or_its_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(QWEN2_7B_AWQ), encoding="utf-8")
    env = tmp_path / "v100.yaml"
    env.write_text("name: v100\ngpus: [{name: Tesla V100-SXM2-32GB}]\npackages: {vllm: '0.6.3'}\n", encoding="utf-8")
    assert main(["check", "--env", str(env), "--model", str(tmp_path), "--json"]) == 0
    assert model_facts(tmp_path) == model_facts(tmp_path / "config.json")
    code = main(["check", "--env", str(env), "--args", f"vllm serve {tmp_path} --tensor-parallel-size 8",
                 "--severity", "broken"])
    out = capsys.readouterr()
    assert code == 0 and "[vllm-attention-heads-not-divisible-by-tp]" in out.out
    assert "num_attention_heads=28 is not divisible by tensor_parallel_size=8" in out.out
    assert "num_attention_heads=28" in out.err  # what was read from the served model's config, said


@pytest.mark.parametrize(("content", "said"), [
    ("{", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"num_attention_heads": 28, "hidden_size": "x"}', None),  # a field of another type: read what can be
])
def test_a_bad_config_is_one_line(tmp_path: Path, content: str, said: str | None,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(content, encoding="utf-8")
    code = main(["check", "--model", str(path), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    if said is None:
        assert code in (0, 1) and not err
    else:
        assert code == 2 and len(err) == 1 and said in err[0] and str(path) in err[0]


def test_a_missing_or_special_model_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--model", "/nonexistent/model"]) == 2
    assert main(["check", "--model", "/dev/null"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "no such file" in err[0] and "not a regular file" in err[1]
