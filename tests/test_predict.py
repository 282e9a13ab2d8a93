"""The attention backend predicted per vLLM release, GPU and setting (kb.predict over
matrices/history/vllm-selection.json), checked against what each release's code says.

Every expected value below is traced to the release's own code, named in the test's docstring: the non-MLA
priority list of ``_get_backend_priorities`` (vllm/platforms/cuda.py), each backend's
``supports_compute_capability`` / ``supports_kv_cache_dtype`` / ``get_supported_head_sizes``
(vllm/v1/attention/backends/*.py), ``flash_attn_supports_fp8`` / ``flash_attn_supports_kv_cache_dtype``
(vllm/v1/attention/backends/fa_utils.py or vllm/attention/utils/fa_utils.py), and the attention layer's
``assert self.kv_cache_dtype in {...}`` after query quantization (vllm/attention/layer.py,
vllm/model_executor/layers/attention/attention.py). The data file itself is computed by running that code
(tools/_history_selection.py); these tests hold it to the reading by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.kb.predict import PredictError, Setting, load_selection, parse_capability, predict

SEL = load_selection("vllm")
V100, T4, A100, L40S, H100 = (7, 0), (7, 5), (8, 0), (8, 9), (9, 0)
WINDOW = [v for v in (SEL.versions() if SEL else []) if Version("0.11") <= Version(v) <= Version("0.34.0")]
SAMPLES = ["0.11.1", "0.12.0", "0.14.0", "0.17.0", "0.18.0", "0.19.1", "0.20.0", "0.22.0", "0.23.0", "0.24.0",
           "0.25.0", "0.26.0", "0.27.0", "0.28.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"]


def ask(release: str, cap: tuple[int, int], kv: str = "auto", fi: bool = True, forced: str | None = None,
        head: int | None = 128, dtype: str = "bfloat16") -> tuple[str, str | None, str | None]:
    assert SEL is not None
    p = predict(SEL, Setting(release, cap, dtype, head, kv, fi, forced))
    return p.outcome, p.backend, p.error


def before(release: str, bound: str) -> bool:
    return Version(release) < Version(bound)


def test_the_data_covers_every_priority_design_release() -> None:
    """0.11.1 introduced `_get_backend_priorities` (vllm/platforms/cuda.py); every release from there to 0.34.0 has
    selection data, and the two V1 releases before it (0.10.2, 0.11.0: an inline if-chain in
    `get_attn_backend_cls`) say why they have none rather than a guess."""
    assert SEL is not None
    assert {"0.11.1", "0.26.0", "0.34.0"} <= set(SEL.versions())
    assert len(WINDOW) >= 30
    for old in ("0.10.2", "0.11.0"):
        with pytest.raises(PredictError, match=f"no selection data for vllm {old}: no _get_backend_priorities"):
            SEL.facts(old)


@pytest.mark.parametrize("release", SAMPLES)
@pytest.mark.parametrize("fi", [True, False])
def test_v100_runs_triton(release: str, fi: bool) -> None:
    """V100 (7.0): FLASH_ATTN needs `capability >= DeviceCapability(8, 0)` (flash_attn.py, every release),
    FLASHINFER `>= DeviceCapability(7, 5)` (flashinfer.py 0.11.1-0.23.x; `(8, 0)` from 0.24.0), TRITON_ATTN's
    `supports_compute_capability` is True: TRITON_ATTN, for any KV-cache dtype Triton lists (auto, fp8)."""
    assert ask(release, V100, "auto", fi)[1] == "TRITON_ATTN"
    if before(release, "0.27.0"):  # from 0.27.0 FLASH_ATTN's fp8 check is not decided below 8.0 (known gap)
        assert ask(release, V100, "fp8", fi)[1] == "TRITON_ATTN"


@pytest.mark.parametrize("release", SAMPLES)
def test_t4_picks_flashinfer_only_while_it_allowed_sm75(release: str) -> None:
    """T4 (7.5): FLASH_ATTN is out (`>= DeviceCapability(8, 0)`); FLASHINFER is second in the priority list and
    takes 7.5 up to 0.23.x (`capability >= DeviceCapability(7, 5)`), not from 0.24.0 (`>= DeviceCapability(8, 0)`,
    "FlashInfer ... is currently broken on SM75"); without FlashInfer its module's `from flashinfer import ...`
    fails (ImportError) and TRITON_ATTN is next."""
    expected = "FLASHINFER" if before(release, "0.24.0") else "TRITON_ATTN"
    assert ask(release, T4, fi=True)[1] == expected
    assert ask(release, T4, fi=False)[1] == "TRITON_ATTN"


@pytest.mark.parametrize("release", ["0.14.0", "0.22.0"])
def test_t4_head_size_80_skips_flashinfer(release: str) -> None:
    """FlashInfer's `get_supported_head_sizes` is [64, 128, 256] (0.11.1-0.21.x; 512 added in 0.22.0): a head size
    80 model on a T4 goes to TRITON_ATTN (`head_size >= 32`), a head size 64 one to FLASHINFER."""
    assert ask(release, T4, head=80)[1] == "TRITON_ATTN"
    assert ask(release, T4, head=64)[1] == "FLASHINFER"
    # below Triton's `head_size >= 32` and FlashInfer's list: FLEX_ATTENTION, fourth, takes any head size
    # (`get_supported_head_sizes` returns [])
    assert ask(release, T4, head=16)[1] == "FLEX_ATTENTION"


@pytest.mark.parametrize("release", SAMPLES)
@pytest.mark.parametrize("gpu", [A100, L40S])
def test_ampere_and_ada_use_flash_attention_but_not_for_fp8(release: str, gpu: tuple[int, int]) -> None:
    """A100 (8.0) and L40S (8.9): FLASH_ATTN first for auto. An fp8 KV cache needs FlashAttention 3 on a 9.x GPU
    (`flash_attn_supports_fp8`: `get_flash_attn_version() == 3 and ... major == 9` up to 0.23.x;
    `get_flash_attn_version() == 3 and current_platform.is_device_capability_family(90)` 0.24.0-0.27.x;
    `flash_attn_supports_kv_cache_dtype` FA3 on family 90 or FA4 on family 100 from 0.28.0): FLASHINFER with it
    installed (it lists fp8 and fp8_e5m2), else TRITON_ATTN."""
    assert ask(release, gpu)[1] == "FLASH_ATTN"
    assert ask(release, gpu, "fp8", fi=True)[1] == "FLASHINFER"
    assert ask(release, gpu, "fp8", fi=False)[1] == "TRITON_ATTN"
    assert ask(release, gpu, "fp8_e5m2", fi=True)[1] == "FLASHINFER"


@pytest.mark.parametrize("release", SAMPLES)
@pytest.mark.parametrize("fi", [True, False])
def test_h100_fp8_stays_on_flash_attention(release: str, fi: bool) -> None:
    """H100 (9.0): FlashAttention 3 (`device_capability.major == 9 and is_fa_version_supported(3)` in
    `get_flash_attn_version`) takes auto, fp8 and fp8_e4m3 in every release, FlashInfer or not."""
    for kv in ("auto", "fp8", "fp8_e4m3"):
        assert ask(release, H100, kv, fi)[:2] == ("chosen", "FLASH_ATTN")


@pytest.mark.parametrize("release", SAMPLES)
def test_h100_fp8_e5m2(release: str) -> None:
    """fp8_e5m2 on H100. Up to 0.21.x FlashAttention takes every fp8 variant (`kv_cache_dtype.startswith("fp8")`,
    from 0.20.0 `is_quantized_kv_cache(kv_cache_dtype)`, then `flash_attn_supports_fp8()`: FA3 on a 9.x GPU), so
    FLASH_ATTN is chosen, FlashInfer or not. From 0.22.0 FlashAttention lists only `("fp8", "fp8_e4m3")` (0.28.0:
    `if kv_cache_dtype == "fp8_e5m2": return False` in `flash_attn_supports_kv_cache_dtype`): FLASHINFER when
    installed, else TRITON_ATTN, whose implementation quantizes queries on CUDA (`supports_quant_query_input =
    current_platform.is_cuda()`), so the layer's `assert self.kv_cache_dtype in {"fp8", "fp8_e4m3", ...}` fails at
    the first forward pass (the committed H200 cell of 0.25.0 without FlashInfer shows exactly that)."""
    if before(release, "0.22.0"):
        assert ask(release, H100, "fp8_e5m2", fi=True)[1] == "FLASH_ATTN"
        assert ask(release, H100, "fp8_e5m2", fi=False)[1] == "FLASH_ATTN"
    else:
        assert ask(release, H100, "fp8_e5m2", fi=True)[:2] == ("chosen", "FLASHINFER")
        # 0.34.0: Triton's `supports_quant_query_input` is not decided by the reading; the answer says "may fail"
        outcome = "chosen" if release == "0.34.0" else "asserts"
        assert ask(release, H100, "fp8_e5m2", fi=False)[:2] == (outcome, "TRITON_ATTN")


@pytest.mark.parametrize("release", ["0.14.0", "0.18.0", "0.21.0"])
def test_h100_fp8_e5m2_on_flash_attention_asserts(release: str) -> None:
    """With FLASH_ATTN chosen for fp8_e5m2 (to 0.21.x), the FA implementation quantizes queries (its `__init__`
    sets `self.supports_quant_query_input = True`, from 0.21.0 `= flash_attn_supports_quant_query_input()`: not
    XPU) and the layer then asserts `self.kv_cache_dtype in {"fp8", "fp8_e4m3"}` (0.20.0: `..., "nvfp4"}`)."""
    outcome, backend, _ = ask(release, H100, "fp8_e5m2", fi=False)
    assert (outcome, backend) == ("asserts", "FLASH_ATTN")


@pytest.mark.parametrize("release", ["0.11.1", "0.12.0"])
def test_what_the_reading_cannot_decide_is_said(release: str) -> None:
    """0.11.1-0.12.0's FA implementation declares `def supports_quant_query_input(self) -> bool:`, a method the
    reading does not run: FLASH_ATTN is chosen, and the answer says the first forward pass may fail rather than
    guessing."""
    assert SEL is not None
    p = predict(SEL, Setting(release, H100, "bfloat16", 128, "fp8_e5m2", False))
    assert (p.outcome, p.backend) == ("chosen", "FLASH_ATTN")
    assert p.kv_cache is not None and p.kv_cache.startswith("may fail at the first forward pass")


@pytest.mark.parametrize("release", SAMPLES)
def test_forced_backends(release: str) -> None:
    """A forced backend is validated alone and refused with the release's own message when invalid
    (`raise ValueError(f"Selected backend {selected_backend} is not valid for this configuration. Reason:
    {invalid_reasons}")` in `get_attn_backend_cls`, every release from 0.11.1): FLASH_ATTN on a T4 ("compute
    capability not supported"), FLASHINFER without FlashInfer (`except ImportError: invalid_reasons =
    ["ImportError"]`), FLASHINFER on a V100; TRITON_ATTN is accepted anywhere, FLASH_ATTN on an A100."""
    outcome, _, error = ask(release, T4, forced="FLASH_ATTN")
    assert outcome == "refused"
    assert error == ("ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this "
                     "configuration. Reason: ['compute capability not supported']")
    assert ask(release, H100, forced="FLASHINFER", fi=False)[2] == (
        "ValueError: Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration. "
        "Reason: ['ImportError']")
    assert ask(release, V100, forced="FLASHINFER")[0] == "refused"
    assert ask(release, V100, forced="TRITON_ATTN")[1] == "TRITON_ATTN"
    assert ask(release, A100, forced="FLASH_ATTN")[1] == "FLASH_ATTN"
    assert ask(release, H100, "fp8", forced="FLASHINFER", fi=True)[1] == "FLASHINFER"


def test_blackwell_prefers_flashinfer() -> None:
    """`if device_capability.major == 10` puts FLASHINFER first (every release from 0.11.1; from 0.28.0 `and not
    use_non_causal`): a B200 with FlashInfer picks it, without it FLASH_ATTN."""
    for release in ("0.14.0", "0.26.0", "0.34.0"):
        assert ask(release, (10, 0), fi=True)[1] == "FLASHINFER"
        assert ask(release, (10, 0), fi=False)[1] == "FLASH_ATTN"


def test_an_open_setting_gives_each_answer() -> None:
    """FlashInfer not known: both answers when they differ, one when they agree."""
    assert SEL is not None
    p = predict(SEL, Setting("0.26.0", H100, "bfloat16", None, "fp8_e5m2", None))
    assert p.outcome == "depends"
    assert {label: q.backend for label, q in p.alternatives} == {"FlashInfer installed": "FLASHINFER",
                                                                 "without FlashInfer": "TRITON_ATTN"}
    same = predict(SEL, Setting("0.26.0", H100, None, None, "auto", None))
    assert same.outcome == "chosen" and same.backend == "FLASH_ATTN"
    assert "head size not given: head-size limits not applied" in same.notes


def test_float32_models_skip_flash_attention() -> None:
    """FlashAttention's `supported_dtypes` is [float16, bfloat16]; Triton's adds float32."""
    assert ask("0.26.0", A100, dtype="float32")[1] == "TRITON_ATTN"


@pytest.mark.parametrize(("release", "cap", "kv", "forced", "message"), [
    ("0.99.0", H100, "auto", None, "no selection data for vllm 0.99.0"),
    ("0.26.0", (5, 2), "auto", None, "no selection data for compute capability 5.2"),
    ("0.26.0", H100, "auto", "NOT_A_BACKEND", "no selection data for forced backend NOT_A_BACKEND in vllm 0.26.0"),
    ("0.26.0", H100, "auto", "../etc", "is not a backend name"),
])
def test_bad_input_is_one_line(release: str, cap: tuple[int, int], kv: str, forced: str | None,
                               message: str) -> None:
    assert SEL is not None
    with pytest.raises(PredictError, match=message.replace(".", r"\.")) as info:
        predict(SEL, Setting(release, cap, "bfloat16", 128, kv, True, forced))
    assert "\n" not in str(info.value)


def test_a_kv_cache_dtype_the_release_does_not_know_is_its_refusal() -> None:
    """`CacheDType` (vllm/config/cache.py) lists the values `--kv-cache-dtype` takes: nvfp4 is not one in 0.14.0."""
    outcome, _, error = ask("0.14.0", H100, "nvfp4")
    assert outcome == "refused" and error is not None and "not one of the release's choices" in error


@pytest.mark.parametrize(("text", "cap"), [("9.0", (9, 0)), ("sm_90", (9, 0)), ("90", (9, 0)), ("7.5", (7, 5)),
                                           ("100", (10, 0)), ("12.1", (12, 1)), ("sm_120", (12, 0)), ("8", (8, 0))])
def test_capabilities_are_read_as_written(text: str, cap: tuple[int, int]) -> None:
    assert parse_capability(text) == cap


@pytest.mark.parametrize("text", ["abc", "9.0.1", "", "nine", "9,0", "1e3"])
def test_a_capability_that_is_not_a_number_is_refused(text: str) -> None:
    with pytest.raises(PredictError, match="is not a number like 9.0"):
        parse_capability(text)


@pytest.mark.parametrize(("text", "field"), [
    ("[]", "format"), ('{"format": 1, "engine": "vllm", "releases": {}, "runs": []}', "releases"),
    ('{"format": 1, "engine": "vllm", "releases": [{"version": "1.0"}], "runs": [{"first": "2.0", "last": "1.0"}]}',
     "runs[0]"),
    ('{"format": 1, "engine": "vllm", "releases": [{"version": "1.0"}], "runs": [{"first": "1.0", "last": "1.0"}]}',
     "runs[0]"),
    ('{"format": 1, "engine": "vllm", "releases": [{"nope": 1}], "runs": []}', "releases[0].version"),
])
def test_a_malformed_selection_file_is_one_line_naming_the_field(tmp_path: Path, text: str, field: str) -> None:
    (tmp_path / "vllm-selection.json").write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_selection("vllm", tmp_path)
    assert info.value.field == field and "vllm-selection.json" in str(info.value)


def test_known_reading_gaps_answer_unknown() -> None:
    """Where the interpreter stops (a module-level name it could not compute: 0.27.0+'s `logger` on FLASH_ATTN's fp8
    path below 8.0), the answer is "unknown" with the reason, never a guess. Pinned so that a better reading shows
    up here."""
    assert SEL is not None
    q = predict(SEL, Setting("0.34.0", V100, "bfloat16", 128, "fp8", True))
    assert q.outcome == "unknown"


def test_0_32_0_is_read_through_its_lazy_module_attribute() -> None:
    """0.32.0 made `PIN_MEMORY` a lazy module attribute (vllm/utils/torch_utils.py:80-84, `def __getattr__`), and
    flash_attn.py:16-20 imports it in one statement with `is_quantized_kv_cache`: only that name is unknown to the
    reading, so FLASH_ATTN's `supports_kv_cache_dtype` (flash_attn.py:433-440) is decided. Expected, from 0.32.0's
    code: the non-MLA order FLASH_ATTN, FLASHINFER, TRITON_ATTN (vllm/platforms/cuda.py:174-176); FLASH_ATTN needs
    cc >= 8.0 (flash_attn.py:453-454); FlashInfer's floor is raised to 8.0 up to 12.1 (flashinfer.py:577);
    fp8_e5m2 is refused by FA (v1/attention/backends/fa_utils.py:293-294), fp8/fp8_e4m3 only with FA3 on sm90
    (fa_utils.py:309-314); the Triton backend refuses an fp8 KV cache below SM89 when its layers are built
    (triton_attn.py:490-499), and on CUDA quantizes the query (triton_attn.py:529) so the layer asserts the KV
    cache is fp8/fp8_e4m3 at the first forward pass (model_executor/layers/attention/attention.py:515)."""
    r = "0.32.0"
    assert ask(r, H100)[:2] == ("chosen", "FLASH_ATTN")
    assert ask(r, A100, fi=False)[:2] == ("chosen", "FLASH_ATTN")
    assert ask(r, T4)[:2] == ("chosen", "TRITON_ATTN")  # FlashInfer's floor is 8.0 in this release
    assert ask(r, V100, fi=False)[:2] == ("chosen", "TRITON_ATTN")
    assert ask(r, A100, "fp8")[:2] == ("chosen", "FLASHINFER")
    assert ask(r, A100, "fp8", fi=False)[:2] == ("refused-at-init", "TRITON_ATTN")
    assert ask(r, L40S, "fp8", fi=False)[:2] == ("chosen", "TRITON_ATTN")
    assert ask(r, H100, "fp8_e5m2", fi=False)[:2] == ("asserts", "TRITON_ATTN")
    assert ask(r, H100, "fp8_e5m2", fi=True)[:2] == ("chosen", "FLASHINFER")
    outcome, backend, error = ask(r, T4, forced="FLASH_ATTN")
    assert (outcome, backend) == ("refused", None) and error is not None and "compute capability" in error
    assert ask(r, T4, forced="TRITON_ATTN")[:2] == ("chosen", "TRITON_ATTN")
