"""Quantization methods' compute-capability floors (matrices/rules/quantization.yaml) as a user meets them: the
method named by --quantization or by the checkpoint's config.json, judged per release; the floor moves between
releases as the released code says (plain pytest through `gpucompat check` and `explain --log`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpucompat.cli import main

AWQ_CONFIG = {"architectures": ["Qwen2ForCausalLM"], "num_attention_heads": 28, "num_key_value_heads": 4,
              "hidden_size": 3584, "torch_dtype": "float16",
              "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}


def _env(tmp_path: Path, gpu: str, vllm: str) -> Path:
    env = tmp_path / f"{gpu.replace(' ', '_')}-{vllm}.yaml"
    env.write_text(f"name: m\ngpus: [{{name: '{gpu}'}}]\npackages: {{vllm: '{vllm}'}}\n", encoding="utf-8")
    return env


def _broken(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["check", *argv, "--severity", "broken"]) in (0, 1)
    return capsys.readouterr().out


@pytest.mark.parametrize(("gpu", "fires"), [("Tesla V100-SXM2-32GB", True), ("Tesla T4", False)])
def test_an_awq_checkpoint_is_refused_below_its_floor(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       gpu: str, fires: bool) -> None:
    (tmp_path / "config.json").write_text(json.dumps(AWQ_CONFIG), encoding="utf-8")
    out = _broken(capsys, ["--env", str(_env(tmp_path, gpu, "0.6.3")), "--model", str(tmp_path)])
    assert ("[vllm-awq-quantization-needs-sm75]" in out) is fires


@pytest.mark.parametrize(("vllm", "fires"), [("0.6.3", True), ("0.13.0", True), ("0.14.0", False)])
def test_a_floor_follows_the_release(tmp_path: Path, capsys: pytest.CaptureFixture[str], vllm: str,
                                     fires: bool) -> None:
    # GPTQMarlinConfig.get_min_capability() is 80 in 0.4.2-0.13.0 and 75 from 0.14.0: a T4 is refused, then not
    out = _broken(capsys, ["--env", str(_env(tmp_path, "Tesla T4", vllm)),
                           "--args", "vllm serve /models/q --quantization gptq_marlin"])
    assert ("[vllm-gptq-marlin-quantization-needs-sm80-0.4.2-0.13.0]" in out) is fires


def test_the_engines_refusal_is_explained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text("ValueError: The quantization method mxfp4 is not supported for the current GPU. Minimum "
                   "capability: 80. Current capability: 75.\n", encoding="utf-8")
    assert main(["explain", "--log", str(log), "--engine", "vllm"]) == 0
    assert "[vllm-mxfp4-quantization-needs-sm80]" in capsys.readouterr().out
