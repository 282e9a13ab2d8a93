"""Tiny local models: built once, atomically, from a fixed seed; prompts that are the same everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_gpucompat.common.progress import quiet_progress_bars
from pytest_gpucompat.workload import models
from pytest_gpucompat.workload.models import (
    build_perturbed_model,
    build_tiny_model,
    fixed_prompts,
    model_vocab_size,
    resolve_models,
    tiny_vocab,
)

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def qwen2(cache: Path) -> Path:
    return build_tiny_model("qwen2", cache)


def test_tiny_qwen2_layout_and_config(qwen2: Path, cache: Path) -> None:
    assert qwen2.parent == cache
    assert qwen2.name.startswith("qwen2-")
    names = {p.name for p in qwen2.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    config = json.loads((qwen2 / "config.json").read_text())
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["model_type"] == "qwen2"
    assert (config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]) == (512, 512, 2)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 128)
    assert config["max_position_embeddings"] == 512
    assert config["torch_dtype"] == "float32" and config["dtype"] == "float32"
    assert config["rope_theta"] == 1000000.0 and config["rms_norm_eps"] == 1e-6
    assert model_vocab_size(qwen2) == 512
    # nothing half-written is left next to it
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]


def test_weights_are_float32_safetensors_from_the_seed(qwen2: Path, cache: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(qwen2 / "model.safetensors"))
    assert all(str(t.dtype) == "torch.float32" for t in tensors.values())
    again = build_tiny_model("qwen2", tmp_path)  # another cache, same seed: same bytes
    assert again.name == qwen2.name
    other = load_file(str(again / "model.safetensors"))
    assert sorted(other) == sorted(tensors)
    assert all(bool((other[k] == tensors[k]).all()) for k in tensors)


def test_tokenizer_loads_with_autotokenizer_and_matches_vocab(qwen2: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(qwen2))
    assert len(tok) == 512
    vocab = tiny_vocab(512)
    assert len(vocab) == 512 and sorted(vocab.values()) == list(range(512))
    # every id decodes to its own, distinct string (text-keyed logprobs map back to ids)
    decoded = [tok.decode([i]) for i in range(512)]
    assert len(set(decoded)) == 512
    assert decoded[vocab["quick"]] == "quick"


def test_cached_build_is_reused_and_overrides_change_the_key(qwen2: Path, cache: Path) -> None:
    stamp = (qwen2 / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model("qwen2", cache) == qwen2
    assert (qwen2 / "model.safetensors").stat().st_mtime_ns == stamp
    narrower = build_tiny_model("qwen2", cache, hidden_size=256, head_dim=64, intermediate_size=128)
    assert narrower != qwen2
    assert json.loads((narrower / "config.json").read_text())["hidden_size"] == 256


def test_llama_architecture(cache: Path) -> None:
    path = build_tiny_model("llama", cache)
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["num_key_value_heads"] == 2
    assert config["rope_theta"] == 500000.0 and config["rms_norm_eps"] == 1e-5


def test_unknown_architecture_is_a_one_line_error(cache: Path) -> None:
    with pytest.raises(ValueError, match="unknown tiny model architecture 'gpt5'"):
        build_tiny_model("gpt5", cache)


def test_parallel_builders_agree_on_one_directory(tmp_path: Path) -> None:
    results: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(build_tiny_model("qwen2", tmp_path))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(results)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [results[0].name]


def test_losing_the_rename_race_is_fine(tmp_path: Path) -> None:
    final = tmp_path / "m"
    final.mkdir()
    (final / "config.json").write_text("{}")
    loser = tmp_path / ".m.tmp"
    loser.mkdir()
    models._publish(loser, final)  # no error: the winner's directory is identical
    incomplete = tmp_path / "n"
    incomplete.mkdir()
    (incomplete / "junk").write_text("x")
    other = tmp_path / ".n.tmp"
    other.mkdir()
    (other / "config.json").write_text("{}")
    with pytest.raises(OSError):
        models._publish(other, incomplete)


def test_default_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCOMPAT_CACHE_DIR", str(tmp_path / "c"))
    path = build_tiny_model("qwen2")
    assert path.parent == tmp_path / "c" / "models"


def test_fixed_prompts_are_deterministic_and_in_range() -> None:
    a = fixed_prompts(4, 16, 512, seed=3)
    assert a == fixed_prompts(4, 16, 512, seed=3)
    assert a != fixed_prompts(4, 16, 512, seed=4)
    assert len(a) == 4 and all(len(p) == 16 for p in a)
    assert all(models.FIRST_REGULAR_ID <= t < 512 for p in a for t in p)
    # pinned: reports from different machines and Python versions must use the same prompts
    assert fixed_prompts(1, 6, 512, seed=0) == [[38, 98, 171, 475, 74, 269]]
    assert fixed_prompts(2, 4, 100, seed=1, low=0) == [[24, 96, 85, 59], [27, 11, 90, 17]]
    with pytest.raises(ValueError):
        fixed_prompts(1, 4, 3)


def test_perturbed_copy_differs_by_the_relative_noise(qwen2: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file

    noisy = build_perturbed_model(qwen2, 1e-3, cache_dir=tmp_path)
    assert build_perturbed_model(qwen2, 1e-3, cache_dir=tmp_path) == noisy
    assert (noisy / "tokenizer.json").is_file() and (noisy / "config.json").is_file()
    base = load_file(str(qwen2 / "model.safetensors"))
    pert = load_file(str(noisy / "model.safetensors"))
    weight = "model.layers.0.mlp.up_proj.weight"
    rel = ((pert[weight] - base[weight]) / base[weight]).abs().mean().item()
    assert 4e-4 < rel < 2e-3  # E|N(0,1)| * 1e-3 ~ 8e-4


def test_resolve_models(qwen2: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_models([str(qwen2)]) == [qwen2.resolve()]
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match=f"{missing}: not a directory"):
        resolve_models([str(missing)])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        resolve_models([str(empty)])
    monkeypatch.setenv("GPUCOMPAT_CACHE_DIR", str(tmp_path / "c"))
    (built,) = resolve_models(["tiny-qwen2"])
    assert built.parent == tmp_path / "c" / "models"
    with pytest.raises(ValueError, match="unknown tiny architecture"):
        resolve_models(["tiny-nonsense"])
    for message in (str(e) for e in _errors(tmp_path)):
        assert "\n" not in message


def _errors(tmp_path: Path) -> list[ValueError]:
    out = []
    for raw in (str(tmp_path / "x"), "tiny-zzz"):
        try:
            resolve_models([raw])
        except ValueError as exc:
            out.append(exc)
    return out


def test_light_modules_do_not_import_torch() -> None:
    code = (
        "import sys\n"
        "import pytest_gpucompat.workload.models, pytest_gpucompat.checks.compare, pytest_gpucompat.checks.memory\n"
        "import pytest_gpucompat.engines, pytest_gpucompat.engines.isolation\n"
        "from pytest_gpucompat.engines import create\nfrom pytest_gpucompat.catalog.registry import descriptors\n"
        "for d in descriptors():  # every registered engine's adapter (its module imported on the way)\n"
        "    create(d.name)\n"
        "engines = [d.module for d in descriptors() if d.module]\n"
        "heavy = [m for m in ('torch', 'transformers', *engines) if m in sys.modules]\n"
        "assert engines and not heavy, heavy\n"
    )
    env = dict(os.environ)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_built_models_say_how_they_are_prompted(qwen2: Path) -> None:
    marker = json.loads((qwen2 / models.BUILD_MARKER).read_text())
    assert marker["prompts"] == "token-ids" and marker["name"] == "tiny-qwen2"


def test_a_sized_model_has_a_real_tokenizer_and_a_chat_template(cache: Path) -> None:
    """The small size only: the 300m one is for GPU runners (its arithmetic is checked below, not built)."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from pytest_gpucompat.workload.checkpoint import parameter_count

    (path,) = resolve_models(["qwen2-1m"], cache)
    assert path.name.startswith("qwen2-1m-") and resolve_models(["qwen2-1m"], cache) == [path]
    config = json.loads((path / "config.json").read_text())
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    assert config["vocab_size"] == len(tokenizer) and config["vocab_size"] % 64 == 0
    assert config["torch_dtype"] == "bfloat16" and config["eos_token_id"] == tokenizer.convert_tokens_to_ids(
        "<|im_end|>")
    text = "def f(x):\n    return x * 2  # 两倍"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # byte-level: no unknown token, round trip
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert json.loads((path / models.BUILD_MARKER).read_text())["prompts"] == "text"
    assert 0.8e6 < (parameter_count(path) or 0) < 1.2e6
    with quiet_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(str(path))
    assert str(model.dtype) == "torch.bfloat16"


def test_the_300m_size_is_hundreds_of_millions_of_parameters() -> None:
    size = models.SIZES["300m"]
    hidden, inter, layers = size["hidden_size"], size["intermediate_size"], size["num_hidden_layers"]
    head_dim = hidden // size["num_attention_heads"]
    kv = size["num_key_value_heads"] * head_dim
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * inter
    assert 2.8e8 < layers * per_layer < 3.2e8  # plus the embeddings of a vocabulary under 1k tokens
    with pytest.raises(ValueError, match="unknown model size"):
        models.build_sized_model("qwen2", "7b")
