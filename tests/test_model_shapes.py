"""The built models have the shapes of served ones: head size 128 (64 for the h64 variant and the sized models),
grouped-query attention, each architecture's rope and norm settings; and the committed CPU golden files are for
exactly the models this version builds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.checks.golden_files import load_golden_source
from pytest_gpucompat.common.progress import quiet_progress_bars
from pytest_gpucompat.workload import models
from pytest_gpucompat.workload.checkpoint import computation_config, model_identity, safetensors_header
from pytest_gpucompat.workload.models import build_tiny_model, resolve_models

pytest.importorskip("torch")
pytest.importorskip("transformers")

GOLDEN = Path(__file__).resolve().parent.parent / "docs" / "reports" / "golden"
ARCH_SETTINGS = {  # the released checkpoints' values (Qwen2.5, Llama 3, Mistral 7B v0.3)
    "qwen2": {"rope_theta": 1000000.0, "rms_norm_eps": 1e-6},
    "llama": {"rope_theta": 500000.0, "rms_norm_eps": 1e-5},
    "mistral": {"rope_theta": 1000000.0, "rms_norm_eps": 1e-5},
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


def config_of(path: Path) -> dict[str, Any]:
    return json.loads((path / "config.json").read_text())


def head_size(config: dict[str, Any]) -> int:
    """What an engine reads: head_dim where the config says it, else hidden_size / num_attention_heads; both must
    agree, for readers that only derive it."""
    derived = config["hidden_size"] // config["num_attention_heads"]
    assert config["hidden_size"] % config["num_attention_heads"] == 0
    assert config.get("head_dim") in (None, derived), "head_dim and hidden_size / num_attention_heads disagree"
    return int(config.get("head_dim") or derived)


def projection_shapes(path: Path) -> dict[str, list[int]]:
    header, _ = safetensors_header(path / "model.safetensors")
    return {name.rsplit(".", 2)[-2]: entry["shape"] for name, entry in header.items()
            if name.startswith("model.layers.0.self_attn.") and name.endswith(".weight")}


@pytest.mark.parametrize("arch", ["qwen2", "llama", "mistral"])
def test_the_default_tiny_models_have_head_size_128_and_grouped_query_attention(arch: str, cache: Path) -> None:
    path = build_tiny_model(arch, cache)
    config = config_of(path)
    assert head_size(config) == 128 and config["head_dim"] == 128
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    assert 1 <= kv < heads and heads % kv == 0
    # the weights have those shapes: q_proj heads x 128 rows, k_proj and v_proj kv x 128
    shapes = projection_shapes(path)
    assert shapes["q_proj"] == [heads * 128, config["hidden_size"]]
    assert shapes["k_proj"] == shapes["v_proj"] == [kv * 128, config["hidden_size"]]
    assert shapes["o_proj"] == [config["hidden_size"], heads * 128]
    for key, value in ARCH_SETTINGS[arch].items():
        assert config[key] == value, key
    assert computation_config(config)["sliding_window"] is None  # Mistral v0.3 has none; nor do the others here
    assert config["num_hidden_layers"] == 2 and config["intermediate_size"] <= config["hidden_size"]


def test_transformers_runs_the_attention_at_that_head_size(cache: Path) -> None:
    from transformers import AutoModelForCausalLM

    with quiet_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(str(build_tiny_model("qwen2", cache)))
    attention = model.model.layers[0].self_attn
    assert attention.head_dim == 128
    assert attention.q_proj.out_features == 4 * 128 and attention.k_proj.out_features == 2 * 128


def test_the_h64_variant_has_head_size_64(cache: Path) -> None:
    (path,) = resolve_models(["tiny-qwen2-h64"], cache)
    assert path.name.startswith("qwen2-h64-") and path != build_tiny_model("qwen2", cache)
    config = config_of(path)
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert head_size(config) == 64 and config["head_dim"] == 64
    assert 1 <= config["num_key_value_heads"] < config["num_attention_heads"]
    assert projection_shapes(path)["q_proj"] == [config["num_attention_heads"] * 64, config["hidden_size"]]
    assert config["rope_theta"] == 1000000.0 and config["rms_norm_eps"] == 1e-6
    assert json.loads((path / models.BUILD_MARKER).read_text())["name"] == "tiny-qwen2-h64"
    assert "tiny-qwen2-h64" in str(_unknown_tiny_error())  # listed where an unknown name is refused


def _unknown_tiny_error() -> ValueError:
    with pytest.raises(ValueError) as info:
        resolve_models(["tiny-nonsense"])
    return info.value


@pytest.mark.parametrize("size", ["1m", "300m"])
def test_the_sized_models_have_head_size_64(size: str) -> None:
    shape = models.SIZES[size]
    assert head_size(dict(shape)) == 64
    assert 1 <= shape["num_key_value_heads"] < shape["num_attention_heads"]


def test_the_committed_cpu_golden_files_are_for_the_models_built_now(cache: Path) -> None:
    """Golden files name the model by content: each model of docs/golden.md's recording command has its file in
    docs/reports/golden, and no file there is for a model this version no longer builds (qwen2-300m, too large to
    build here, is checked by name)."""
    built = resolve_models(["tiny-qwen2", "tiny-llama", "tiny-mistral", "tiny-qwen2-h64", "qwen2-1m"], cache)
    identities = {path.name: model_identity(path) for path in built}
    files = load_golden_source(GOLDEN)
    recorded = [g.model for g in files if not g.model.name.startswith("qwen2-300m-")]
    for name, identity in identities.items():
        assert any(m.differences(identity) == [] for m in recorded), f"no golden file for {name}"
    for model in recorded:
        assert any(model.differences(i) == [] for i in identities.values()), f"{model.name}: not a model built now"
    assert len(files) == len(recorded) + 1
