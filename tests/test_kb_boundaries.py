"""The version boundaries of the shipped knowledge base, pinned through `gpucompat check` on what-if fingerprints.

Each case sits on one side of a boundary that was checked against the released artifacts (wheel metadata, the
libraries a wheel links, the source at the tag, NVIDIA's driver tables; docs/knowledge-base.md, "Audit of the
upstream rules"): the rule must fire on one side and stay silent on the other.
"""

from __future__ import annotations

import json

import pytest

from pytest_gpucompat.cli import main

A100 = '{name: "NVIDIA A100-SXM4-80GB", compute_capability: "8.0"}'
V100 = '{name: "Tesla V100-SXM2-32GB", compute_capability: "7.0"}'
T4 = '{name: "Tesla T4", compute_capability: "7.5"}'
H100 = '{name: "NVIDIA H100 80GB HBM3", compute_capability: "9.0"}'


def findings(capsys, tmp_path, text: str) -> dict[str, dict]:
    """`gpucompat check --json` on a fingerprint file; the upstream and verified findings by rule id."""
    path = tmp_path / "env.yaml"
    path.write_text(text)
    code = main(["check", "--env", str(path), "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    return {f["id"]: f for f in json.loads(out)["findings"] if not f["unconfirmed"]}


def broken(capsys, tmp_path, text: str) -> set[str]:
    return {i for i, f in findings(capsys, tmp_path, text).items() if f["severity"] == "broken"}


def env(gpu: str = A100, driver: str | None = None, runtime: str | None = None, params: str | None = None,
        **packages: str) -> str:
    lines = [f"gpus: [{gpu}]"]
    if driver:
        lines.append(f'driver: "{driver}"')
    if runtime:
        lines.append(f'cuda_runtime: "{runtime}"')
    pkgs = ", ".join(f'{name.replace("_", "-")}: "{version}"' for name, version in packages.items())
    lines.append(f"packages: {{{pkgs}}}")
    if params:
        lines.append(f"params: {params}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- TensorRT-LLM <-> TensorRT pairing


def test_tensorrt_llm_0_9_with_its_tensorrt_9_3_is_not_broken(capsys, tmp_path):
    text = env(driver="550.54.15", runtime="12.3", tensorrt_llm="0.9.0", tensorrt="9.3.0.post12.dev1")
    assert broken(capsys, tmp_path, text) == set()


def test_tensorrt_llm_0_9_with_tensorrt_10_is_broken(capsys, tmp_path):
    text = env(driver="550.54.15", runtime="12.3", tensorrt_llm="0.9.0", tensorrt="10.0.1")
    assert "tensorrt-llm-0.9-pins-tensorrt-9.3" in broken(capsys, tmp_path, text)


@pytest.mark.parametrize(("trtllm", "trt", "expected"), [
    ("0.10.0", "10.0.1", False), ("0.10.0", "9.3.0", True),
    ("0.11.0", "10.1.0", False), ("0.11.0", "10.2.0", False), ("0.11.0", "10.3.0", True),
    ("0.15.0", "10.6.0", False), ("0.15.0", "10.7.0", True),
])
def test_tensorrt_llm_pins(capsys, tmp_path, trtllm, trt, expected):
    text = env(driver="570.124.06", runtime="12.8", tensorrt_llm=trtllm, tensorrt=trt)
    found = {i for i in broken(capsys, tmp_path, text) if "pin" in i}
    assert bool(found) is expected, found


def test_tensorrt_llm_0_9_on_a_cuda_11_8_stack_is_broken(capsys, tmp_path):
    text = env(driver="550.54.15", runtime="11.8", tensorrt_llm="0.9.0", tensorrt="9.3.0.post12.dev1")
    assert "tensorrt-llm-cuda12-build-on-cuda11-stack" in broken(capsys, tmp_path, text)


@pytest.mark.parametrize(("driver", "degraded"), [("565.57.01", True), ("570.26", False), ("570.86.10", False)])
def test_tensorrt_llm_0_17_below_the_cuda_12_8_ga_driver(capsys, tmp_path, driver, degraded):
    found = findings(capsys, tmp_path, env(driver=driver, tensorrt_llm="0.17.0", tensorrt="10.8.0"))
    assert ("tensorrt-llm-0.17-0.18-below-cuda-12.8-driver" in found) is degraded


# ---------------------------------------------------------------------------- engines that imply a CUDA major


@pytest.mark.parametrize(("vllm", "expected"), [("0.19.1", False), ("0.20.0", True), ("0.27.1", True)])
def test_vllm_cuda13_wheels_start_at_0_20(capsys, tmp_path, vllm, expected):
    found = broken(capsys, tmp_path, env(driver="550.54.15", vllm=vllm))
    assert ("vllm-cuda13-wheels-need-driver-580" in found) is expected


def test_vllm_0_19_on_driver_550_has_no_broken_finding(capsys, tmp_path):
    assert broken(capsys, tmp_path, env(driver="550.54.15", runtime="12.8", vllm="0.19.1")) == set()


@pytest.mark.parametrize(("gpu", "vllm", "expected"), [
    (V100, "0.19.1", False), (V100, "0.20.0", True), (T4, "0.20.0", False),
])
def test_vllm_cuda13_wheels_have_no_volta_kernels(capsys, tmp_path, gpu, vllm, expected):
    found = broken(capsys, tmp_path, env(gpu=gpu, driver="580.65.06", vllm=vllm))
    assert ("vllm-cuda13-wheels-drop-pre-turing" in found) is expected


@pytest.mark.parametrize(("sglang", "cuda13"), [("0.5.10", False), ("0.5.11", True), ("0.5.16", True)])
def test_sglang_default_dependencies_turn_cuda13_at_0_5_11(capsys, tmp_path, sglang, cuda13):
    found = broken(capsys, tmp_path, env(driver="550.54.15", sglang=sglang))
    assert ("sglang-cuda13-needs-driver-580" in found) is cuda13
    assert "sglang-0.4-needs-cuda12-driver" not in found


# ---------------------------------------------------------------------------- CUDA runtime <-> driver


@pytest.mark.parametrize(("runtime", "driver", "rule"), [
    ("11.0", "450.36.06", None), ("11.0", "450.51.05", None), ("11.0", "440.33.01", "cuda-11.0-runtime-needs-r450"),
    ("11.1", "450.51.06", "cuda-11.1-runtime-needs-450.80.02"), ("11.8", "450.80.02", None),
])
def test_cuda_11_driver_floors(capsys, tmp_path, runtime, driver, rule):
    found = broken(capsys, tmp_path, env(driver=driver, runtime=runtime))
    assert found == ({rule} if rule else set())


# ---------------------------------------------------------------------------- engine options


@pytest.mark.parametrize(("vllm", "dtype", "expected"), [
    ("0.4.0", "fp8", True), ("0.4.0", "fp8_e5m2", False), ("0.4.1", "fp8", False), ("0.4.2", "fp8_e4m3", True),
    ("0.4.2", "fp8_e5m2", True), ("0.4.3", "fp8_e4m3", False), ("0.4.3", "fp8_e5m2", False),
])
def test_vllm_kv_cache_dtype_choices(capsys, tmp_path, vllm, dtype, expected):
    text = env(gpu=H100, vllm=vllm, params=f"{{engine: vllm, kv_cache_dtype: {dtype}}}")
    found = {i for i in broken(capsys, tmp_path, text) if i.startswith("vllm-kv-cache-dtype")}
    assert bool(found) is expected, found


@pytest.mark.parametrize(("sglang", "expected"), [("0.1.14", False), ("0.1.18", True), ("0.5.16", True)])
def test_sglang_enable_flashinfer_existed_in_0_1_13_to_0_1_17(capsys, tmp_path, sglang, expected):
    text = env(sglang=sglang, params="{engine: sglang, enable_flashinfer: true}")
    assert ("sglang-enable-flashinfer-not-an-option" in broken(capsys, tmp_path, text)) is expected


@pytest.mark.parametrize(("vllm", "expected"), [("0.12.0", True), ("0.13.0", False)])
def test_vllm_attention_backend_flag_arrives_in_0_13(capsys, tmp_path, vllm, expected):
    text = env(vllm=vllm, params="{engine: vllm, attention_backend: FLASHINFER}")
    assert ("vllm-attention-backend-flag-not-before-0.13" in broken(capsys, tmp_path, text)) is expected


# ---------------------------------------------------------------------------- vLLM --block-size choices


@pytest.mark.parametrize(("vllm", "block_size", "rule"), [
    ("0.7.3", 4, "vllm-block-size-below-8-rejected-v0"),  # [8, 16, 32, 64, 128] through 0.8.4
    ("0.8.4", 1, "vllm-block-size-below-8-rejected-v0"),
    ("0.8.4", 8, None),
    ("0.8.5", 1, None),  # Literal[1, 8, 16, ...] from 0.8.5
    ("0.8.5", 4, "vllm-block-size-2-to-7-rejected"),
    ("0.17.1", 7, "vllm-block-size-2-to-7-rejected"),
    ("0.17.1", 8, None),
    ("0.18.0", 4, None),  # any positive integer parses from 0.18.0
])
def test_vllm_block_size_choices_per_release(capsys, tmp_path, vllm, block_size, rule):
    rules = {"vllm-block-size-below-8-rejected-v0", "vllm-block-size-2-to-7-rejected"}
    found = broken(capsys, tmp_path, env(vllm=vllm, params=f"{{engine: vllm, block_size: {block_size}}}")) & rules
    assert found == ({rule} if rule else set())


# ---------------------------------------------------------------------------- SGLang's offline Engine and atexit


@pytest.mark.parametrize(("sglang", "fires"), [
    ("0.3.2", False),  # no offline Engine yet
    ("0.3.3", True),  # the first Engine registers atexit(self.shutdown)
    ("0.5.16", True),  # measured on the H200
    ("0.5.23", True),  # the newest release read: still never unregistered
])
def test_sglang_engine_kept_alive_by_atexit_per_release(capsys, tmp_path, sglang, fires):
    found = findings(capsys, tmp_path, env(gpu=H100, sglang=sglang, params="{engine: sglang}"))
    assert ("sglang-engine-atexit-keeps-every-engine-alive" in found) is fires


# ---------------------------------------------------------------------------- vLLM fp8_e5m2 KV cache on Hopper


@pytest.mark.parametrize(("gpu", "vllm", "fires"), [
    (H100, "0.21.0", False),  # FlashAttention 3 still takes the cell (not run: not claimed)
    (H100, "0.22.0", True),  # FA3 refuses e5m2 from here: TRITON_ATTN quantizes queries and asserts
    (H100, "0.25.0", True),  # run on the H200
    (H100, "0.34.0", True),  # the newest release read: the assert unchanged
    (H100, "0.35.0", False),  # not read
    (A100, "0.26.0", False),  # Hopper only
])
def test_vllm_fp8_e5m2_kv_cache_on_hopper_per_release(capsys, tmp_path, gpu, vllm, fires):
    """On an install without FlashInfer, which a fingerprint with `installs` states by not listing it."""
    text = env(gpu=gpu, vllm=vllm, params="{engine: vllm, kv_cache_dtype: fp8_e5m2}")
    without = text + 'installs: {vllm: {complete: false, missing: ["flashinfer-python (not installed)"]}}\n'
    assert ("vllm-0.26-fp8-e5m2-kv-fails-at-start-on-hopper" in broken(capsys, tmp_path, without)) is fires
    # the same fingerprint with FlashInfer listed, or with nothing said of the install: not this rule
    with_fi = without.replace(f'vllm: "{vllm}"', f'vllm: "{vllm}", flashinfer-python: "0.6.14"')
    assert "vllm-0.26-fp8-e5m2-kv-fails-at-start-on-hopper" not in broken(capsys, tmp_path, with_fi)
    assert "vllm-0.26-fp8-e5m2-kv-fails-at-start-on-hopper" not in broken(capsys, tmp_path, text)
