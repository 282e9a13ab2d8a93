"""A checkpoint's identity is its content (weights, computation config, tokenizer), not its bytes on disk."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from pytest_gpucompat.workload import checkpoint
from pytest_gpucompat.workload.checkpoint import (
    computation_config,
    config_digest,
    model_identity,
    parameter_count,
    tokenizer_digest,
    weights_digest,
)

CONFIG = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8, "num_attention_heads": 2,
          "num_key_value_heads": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
          "vocab_size": 16, "num_hidden_layers": 1, "max_position_embeddings": 64, "transformers_version": "4.57.0"}


def safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]], metadata: dict | None = None) -> None:
    """A .safetensors file written by hand: header JSON, then the tensors' bytes."""
    header: dict = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(d for _, _, d in tensors.values()))


def checkpoint_dir(root: Path, shards: int = 1, config: dict | None = None, metadata: dict | None = None) -> Path:
    root.mkdir(parents=True)
    tensors = {"a.weight": ("F32", [2, 2], bytes(range(16))), "b.weight": ("F32", [4], bytes(range(16, 32)))}
    if shards == 1:
        safetensors(root / "model.safetensors", tensors, metadata)
    else:
        for i, (name, value) in enumerate(tensors.items()):
            safetensors(root / f"model-0000{i + 1}-of-00002.safetensors", {name: value}, metadata)
    (root / "config.json").write_text(json.dumps(config or CONFIG))
    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3}
    (root / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": ["a b"]},
                                                     "added_tokens": [{"id": 0, "content": "<unk>", "special": True}]}))
    return root


def test_sharding_and_metadata_do_not_change_the_weights(tmp_path: Path) -> None:
    one = checkpoint_dir(tmp_path / "one")
    two = checkpoint_dir(tmp_path / "two", shards=2, metadata={"format": "pt", "writer": "other"})
    assert weights_digest(one) == weights_digest(two)
    assert parameter_count(one) == parameter_count(two) == 8


def test_one_changed_byte_is_another_model(tmp_path: Path) -> None:
    base = checkpoint_dir(tmp_path / "base")
    other = checkpoint_dir(tmp_path / "other")
    data = bytearray((other / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (other / "model.safetensors").write_bytes(bytes(data))
    assert weights_digest(base) != weights_digest(other)
    assert model_identity(base, tmp_path / "c").differences(model_identity(other, tmp_path / "c")) == ["weights"]


def test_config_digest_ignores_what_transformers_versions_write_differently(tmp_path: Path) -> None:
    newer = {**CONFIG, "transformers_version": "5.24.0", "rope_parameters": {"rope_theta": 10000.0,
             "rope_type": "default"}, "head_dim": 4, "layer_types": ["full_attention"], "dtype": "float32"}
    del newer["rope_theta"]
    assert computation_config(newer) == computation_config(CONFIG)
    assert computation_config({**CONFIG, "use_sliding_window": False, "sliding_window": 32}) == \
        computation_config(CONFIG)
    assert computation_config({**CONFIG, "rope_theta": 1e6}) != computation_config(CONFIG)
    assert computation_config({**CONFIG, "rms_norm_eps": 1e-5}) != computation_config(CONFIG)
    a = checkpoint_dir(tmp_path / "a")
    b = checkpoint_dir(tmp_path / "b", config=newer)
    assert config_digest(a) == config_digest(b)


def test_tokenizer_digest_reads_either_spelling_of_merges(tmp_path: Path) -> None:
    a = checkpoint_dir(tmp_path / "a")
    b = checkpoint_dir(tmp_path / "b")
    data = json.loads((b / "tokenizer.json").read_text())
    data["model"]["merges"] = [["a", "b"]]  # tokenizers >= 0.20 writes pairs
    data["model"]["ignore_merges"] = False
    (b / "tokenizer.json").write_text(json.dumps(data, indent=2))
    assert tokenizer_digest(a) == tokenizer_digest(b)
    data["model"]["vocab"]["c"] = 4
    (b / "tokenizer.json").write_text(json.dumps(data))
    assert tokenizer_digest(a) != tokenizer_digest(b)
    (b / "tokenizer.json").unlink()
    assert tokenizer_digest(b) is None


def test_the_identity_is_cached_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = checkpoint_dir(tmp_path / "m")
    first = model_identity(model, tmp_path / "cache")
    monkeypatch.setattr(checkpoint, "weights_digest", lambda _: pytest.fail("hashed again"))
    assert model_identity(model, tmp_path / "cache") == first
    assert first.name == "m" and len(first.digest) == 64


def test_a_header_claiming_a_huge_tensor_is_counted_not_read(tmp_path: Path) -> None:
    """The fake checkpoint of the reference tests: its header says 10**11 parameters, its file holds none."""
    root = tmp_path / "huge"
    root.mkdir()
    header = json.dumps({"w": {"dtype": "BF16", "shape": [100_000, 1_000_000], "data_offsets": [0, 0]}}).encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    assert parameter_count(root) == 10**11
    (root / "model.safetensors").write_bytes(b"\xff" * 8 + b"{}")
    assert parameter_count(root) is None  # a header length beyond the file: not a safetensors file
