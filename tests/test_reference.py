"""The reference that fits: chosen from the checkpoint's size and the free memory, before anything is loaded."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from pytest_gpucompat.workload import reference
from pytest_gpucompat.workload.reference import (
    GPU_OVERHEAD_MIB,
    HOST_OVERHEAD_MIB,
    Choice,
    ReferenceNeed,
    choose_for,
    choose_reference,
    estimate_need,
    free_host_mib,
    reference_need,
)

GIB = 1024.0
CONFIG_7B = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
             "intermediate_size": 18944, "vocab_size": 152064}


def need(weights_f32_gib: float) -> ReferenceNeed:
    """A need of that many GiB of float32 weights (half in bfloat16), with 1 GiB of activations."""
    w = weights_f32_gib * GIB
    return ReferenceNeed(weights_mib={"float32": w, "bfloat16": w / 2},
                         activations_mib={"float32": GIB, "bfloat16": GIB / 2}, basis="test")


@pytest.mark.parametrize(("weights", "gpu", "host", "kind"), [
    (28, 139 * GIB, 120 * GIB, "float32-gpu"),      # a 7B model on an H200
    (28, None, 120 * GIB, "float32-cpu"),           # no GPU torch can use
    (28, 20 * GIB, 120 * GIB, "float32-cpu"),       # the engine took the GPU; the host has room
    (240, 139 * GIB, 200 * GIB, "bfloat16-gpu"),    # 60B: neither float32 fits, bf16 does on the GPU
    (240, 40 * GIB, 200 * GIB, "bfloat16-cpu"),
    (240, 40 * GIB, 60 * GIB, "golden-only"),
    (28, 139 * GIB, 20 * GIB, "bfloat16-gpu"),      # float32 on the GPU would pass through a too small host first
    (0.01, None, None, "float32-cpu"),              # host memory unknown: taken as enough
])
def test_the_first_reference_that_fits(weights: float, gpu: float | None, host: float | None, kind: str) -> None:
    choice = choose_reference(need(weights), gpu, host)
    assert choice.kind == kind
    assert "\n" not in choice.reason
    assert choice.runs == (kind != "golden-only")


def test_golden_only_says_what_was_tried() -> None:
    choice = choose_reference(need(280), 40 * GIB, 60 * GIB)
    assert choice.dtype is None and choice.device is None and choice.engine_params == {}
    assert "no reference fits" in choice.reason
    assert "float32 needs" in choice.reason and "bfloat16 needs" in choice.reason
    assert "40.0 GiB free on the GPU" in choice.reason and "60.0 GiB host memory available" in choice.reason


def test_the_choice_is_what_the_hf_engine_is_given() -> None:
    """The device only where the hf engine would not take it by itself: an hf float32 cell and the reference are
    then one loaded model."""
    assert Choice("bfloat16-gpu", "x", gpu=True).engine_params == {"dtype": "bfloat16"}
    assert Choice("float32-cpu", "x", gpu=True).engine_params == {"dtype": "float32", "device": "cpu"}
    assert Choice("float32-cpu", "x").engine_params == {"dtype": "float32"}
    assert choose_reference(need(28), 20 * GIB, 120 * GIB).engine_params == {"dtype": "float32", "device": "cpu"}
    assert Choice("float32-gpu", "x").device == "cuda"
    with pytest.raises(ValueError, match="unknown reference kind"):
        Choice("float64-tpu", "x")


def test_an_unknown_size_runs_float32_where_it_always_did() -> None:
    unknown = ReferenceNeed(weights_mib=None, activations_mib={"float32": 1.0, "bfloat16": 1.0},
                            basis="unknown parameters")
    assert choose_reference(unknown, 1000.0, 1000.0).kind == "float32-gpu"
    assert choose_reference(unknown, None, 1000.0).kind == "float32-cpu"
    assert "cannot be told" in choose_reference(unknown, None, None).reason


def test_the_estimate_is_weights_plus_activations() -> None:
    estimate = estimate_need(7_615_616_512, CONFIG_7B, [100] * 10, 16)
    assert estimate.weights_mib is not None
    assert estimate.weights_mib["float32"] == pytest.approx(7_615_616_512 * 4 / 2**20)
    assert estimate.weights_mib["bfloat16"] == pytest.approx(estimate.weights_mib["float32"] / 2)
    # the prefill's logits dominate the activations: 10 prompts x 100 positions x 152064 x 4 bytes = 580 MiB
    assert 580 < estimate.activations_mib["float32"] < 1500
    gpu, host = estimate.on_gpu("float32")  # type: ignore[misc]
    assert gpu == pytest.approx(estimate.weights_mib["float32"] + estimate.activations_mib["float32"] +
                                GPU_OVERHEAD_MIB)
    assert host == pytest.approx(estimate.weights_mib["float32"] + HOST_OVERHEAD_MIB)
    assert "7,615,616,512 parameters" in estimate.basis and "10 prompts of at most 100 tokens" in estimate.basis


def test_a_checkpoint_that_does_not_fit_is_never_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake checkpoint whose safetensors header claims 10**11 parameters (400 GB in float32): golden-only."""
    root = tmp_path / "huge"
    root.mkdir()
    header = json.dumps({"w": {"dtype": "BF16", "shape": [100_000, 1_000_000], "data_offsets": [0, 0]}}).encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    (root / "config.json").write_text(json.dumps(CONFIG_7B))
    estimate = reference_need(root, [50] * 8, 16)
    assert estimate.weights_mib is not None and estimate.weights_mib["float32"] > 350_000
    monkeypatch.setattr(reference, "free_gpu_mib", lambda: 139 * GIB)
    monkeypatch.setattr(reference, "free_host_mib", lambda: 120 * GIB)
    choice, _ = choose_for(root, [50] * 8)
    assert choice.kind == "golden-only"


def test_free_host_memory_is_read_here() -> None:
    """MiB, from MemAvailable, never more than the machine has; where no cgroup caps memory, MemAvailable itself
    (within what other processes moved between the two reads)."""
    free = free_host_mib()
    if not Path("/proc/meminfo").is_file():
        pytest.skip("no /proc/meminfo")
    meminfo = {line.split(":")[0]: float(line.split()[1]) / 1024
               for line in Path("/proc/meminfo").read_text().splitlines() if line.endswith(" kB")}
    assert free is not None and 0 < free <= meminfo["MemTotal"]
    capped = [f for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
              if Path(f).is_file() and Path(f).read_text().strip() != "max"
              and int(Path(f).read_text().strip()) < 1 << 60]
    if not capped:
        assert free == pytest.approx(meminfo["MemAvailable"], rel=0.1, abs=512)
