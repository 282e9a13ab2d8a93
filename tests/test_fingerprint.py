"""The fingerprint: NVML answers turned into data, fallbacks when NVML is missing, and what-if files."""

from __future__ import annotations

import json
import sys
import types

import pytest

from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.machine import fingerprint as fpmod


class NVMLError(Exception):
    pass


def fake_nvml(gpus, nvlink=False, fail_init=None):
    """An NVML stand-in answering like the real library (bytes or str, NotSupported errors)."""
    mod = types.ModuleType("pynvml")
    mod.NVML_P2P_CAPS_INDEX_NVLINK = 2
    mod.NVML_P2P_STATUS_OK = 0

    def init():
        if fail_init:
            raise NVMLError(fail_init)

    def unsupported(*_):
        raise NVMLError("Not Supported")

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: None
    mod.nvmlSystemGetDriverVersion = lambda: "580.159.04"
    mod.nvmlSystemGetCudaDriverVersion_v2 = lambda: 13000
    mod.nvmlDeviceGetCount = lambda: len(gpus)
    mod.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    mod.nvmlDeviceGetUUID = lambda h: h["uuid"]
    mod.nvmlDeviceGetName = lambda h: h["name"].encode()
    mod.nvmlDeviceGetArchitecture = lambda h: 9
    mod.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=143771 * 1024 * 1024)
    mod.nvmlDeviceGetCurrPcieLinkGeneration = lambda h: 5
    mod.nvmlDeviceGetCurrPcieLinkWidth = lambda h: 16
    mod.nvmlDeviceGetEccMode = lambda h: (1, 1)
    mod.nvmlDeviceGetMigMode = unsupported
    mod.nvmlDeviceGetPersistenceMode = lambda h: 1
    mod.nvmlDeviceGetVbiosVersion = lambda h: "96.00.AF.00.01"
    mod.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 30
    mod.nvmlDeviceGetP2PStatus = lambda a, b, i: 0 if nvlink else 4
    return mod


GPUS = [{"uuid": f"GPU-{i}aaa-bbbb", "name": "NVIDIA H200"} for i in range(4)]


@pytest.fixture
def nvml(monkeypatch):
    def install(gpus=GPUS, **kw):
        monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(gpus, **kw))

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return install


def test_reads_gpus_driver_cuda_and_links(nvml):
    nvml(GPUS[:2])
    fp = fpmod.collect("r1")
    assert fp.name == "r1"
    assert fp.driver == "580.159.04" and fp.cuda_driver == "13.0"
    assert [g.name for g in fp.gpus] == ["NVIDIA H200", "NVIDIA H200"]
    gpu = fp.gpus[0]
    assert (gpu.architecture, gpu.compute_capability, gpu.memory_mib) == ("hopper", "9.0", 143771)
    assert (gpu.pcie_generation, gpu.pcie_width, gpu.ecc, gpu.mig, gpu.persistence) == (5, 16, True, None, True)
    assert fp.links == (fpmod.Link(a=0, b=1, kind="pcie", path="PHB"),)
    assert fp.interconnect == "pcie"


def test_nvlink_between_all_pairs(nvml):
    nvml(GPUS[:3], nvlink=True)
    fp = fpmod.collect()
    assert len(fp.links) == 3 and fp.interconnect == "nvlink"


def test_no_nvml_is_a_reason_not_a_crash(nvml):
    nvml(fail_init="NVML Shared Library Not Found")
    fp = fpmod.collect()
    assert fp.gpus == () and fp.driver is None
    assert any("NVML not available: NVML Shared Library Not Found" in r for r in fp.reasons)
    assert json.loads(json.dumps(fp.to_dict()))["gpus"] == []


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        ("1,3", [1, 3]),
        ("GPU-2aaa", [2]),  # UUID prefix
        ("0,7,1", [0]),  # an invalid index hides itself and all later ones
        ("", []),
        ("2,2", [2]),
    ],
)
def test_cuda_visible_devices_like_the_runtime(visible, expected):
    devices = [(i, g["uuid"]) for i, g in enumerate(GPUS)]
    assert fpmod.select_visible(devices, visible) == expected


def test_visible_devices_applied_to_fingerprint(nvml, monkeypatch):
    nvml()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-3aaa,GPU-1aaa")
    fp = fpmod.collect()
    assert [g.uuid for g in fp.gpus] == ["GPU-3aaa-bbbb", "GPU-1aaa-bbbb"]
    assert [g.index for g in fp.gpus] == [0, 1]
    assert any("shows 2 of 4 GPUs" in r for r in fp.reasons)


def test_cuda_runtime_from_local_version_without_importing_torch(monkeypatch):
    from pytest_gpucompat.machine import stack

    monkeypatch.setattr(stack, "_torch_version_file", lambda: None)
    assert fpmod.cuda_runtime_version({"torch": "2.11.0+cu130"}) == "13.0"
    assert fpmod.cuda_runtime_version({"torch": "2.4.0+cu121"}) == "12.1"
    assert fpmod.cuda_runtime_version({"torch": "2.13.0+cpu"}) is None
    assert fpmod.cuda_runtime_version({"cuda-runtime": "12.4.127"}) == "12.4"


def test_live_fingerprint_round_trips_through_a_file(tmp_path):
    fp = fpmod.collect("me")
    path = tmp_path / "env.json"
    path.write_text(json.dumps(fp.to_dict()))
    loaded = fpmod.load(path)
    assert loaded == {"me": fp}


def test_short_form(tmp_path):
    path = tmp_path / "v100.yaml"
    path.write_text(
        'gpus: [{name: "Tesla V100-SXM2-32GB", compute_capability: 7.0, memory_mib: 32768}]\n'
        'driver: "535.104.05"\ncuda_driver: 12.2\ncuda_runtime: "12.1"\n'
        'packages: {sglang: "0.4.3", tensorrt_llm: "0.9.0"}\ninterconnect: pcie\n'
        "params: {kv_cache_dtype: fp8_e4m3, tensor_parallel_size: 2}\n"
    )
    (name, fp), = fpmod.load(path).items()
    assert name == "v100"
    assert fp.gpus[0].compute_capability == "7.0"
    assert fp.cuda_driver == "12.2"
    assert fp.packages == {"sglang": "0.4.3", "tensorrt-llm": "0.9.0"}
    assert fp.params["tensor_parallel_size"] == 2


def test_fleet_file(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text("fleet:\n  a100: {gpus: [{name: A100, compute_capability: '8.0'}]}\n  cpu: {}\n")
    fleet = fpmod.load(path)
    assert list(fleet) == ["a100", "cpu"]
    assert fleet["a100"].name == "a100"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("driver: banana\n", "field 'driver': 'banana' is not a version"),
        ("cuda_runtime: twelve\n", "field 'cuda_runtime'"),
        ("gpu: V100\n", "field 'gpu': unknown key"),
        ("gpus: V100\n", "field 'gpus': must be a list"),
        ("gpus: [{name: V100, cc: 7.0}]\n", "field 'gpus[0].cc': unknown key"),
        ("gpus: [{name: V100, compute_capability: seven}]\n", "field 'gpus[0].compute_capability'"),
        ("packages: {vllm: latest}\n", "field 'packages.vllm'"),
        ("interconnect: infiniband\n", "field 'interconnect'"),
        ("driver: [unclosed\n", "invalid YAML at line"),
        ("fleet: []\n", "field 'fleet'"),
        ("fleet: {a: {driver: x}}\n", "field 'fleet.a.driver'"),
    ],
)
def test_bad_fingerprints_name_the_field(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        fpmod.load(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        fpmod.load(tmp_path / "nope.yaml")


def test_text_form_mentions_reasons():
    fp = fpmod.Fingerprint(name="x", reasons=("NVML not available: no driver",))
    from pytest_gpucompat.cli import format_fingerprint

    text = format_fingerprint(fp)
    assert "gpus:          none" in text and "NVML not available" in text


# --------------------------------------------------------------------------- engine environment and kernel packages

def test_env_prefixes_come_from_the_registry_plus_the_libraries():
    from pytest_gpucompat.catalog.registry import descriptors
    from pytest_gpucompat.machine.environment import LIBRARY_ENV_PREFIXES, recorded_prefixes

    prefixes = recorded_prefixes()
    for descriptor in descriptors():
        assert set(descriptor.env_prefixes) <= set(prefixes), descriptor.name
    assert {"VLLM_", "SGLANG_", "NCCL_", "CUDA_", "TORCH_"} <= set(prefixes)
    assert prefixes[-len(LIBRARY_ENV_PREFIXES):] == LIBRARY_ENV_PREFIXES and len(set(prefixes)) == len(prefixes)


def test_engine_env_keeps_the_engine_variables_and_redacts_credentials():
    from pytest_gpucompat.machine.environment import REDACTED, engine_env

    environ = {
        "VLLM_ATTENTION_BACKEND": "FLASHINFER", "SGLANG_ENABLE_JIT": "1", "NCCL_P2P_DISABLE": "1",
        "CUDA_LAUNCH_BLOCKING": "1", "TORCH_CUDA_ARCH_LIST": "9.0", "TRTLLM_X": "y", "HF_HUB_OFFLINE": "1",
        "HF_TOKEN": "hf_secret", "VLLM_API_KEY": "k", "SGLANG_AUTH_HEADER": "Bearer x", "NCCL_PASSWORD": "p",
        "TORCH_SECRET": "s", "VLLM_CREDENTIALS_FILE": "/c", "PATH": "/bin", "HOME": "/root", "vllm_lower": "x",
        "AWS_SECRET_ACCESS_KEY": "aws",
    }
    env = engine_env(environ)
    assert env == {
        "CUDA_LAUNCH_BLOCKING": "1", "HF_HUB_OFFLINE": "1", "HF_TOKEN": REDACTED, "NCCL_P2P_DISABLE": "1",
        "NCCL_PASSWORD": REDACTED, "SGLANG_AUTH_HEADER": REDACTED, "SGLANG_ENABLE_JIT": "1",
        "TORCH_CUDA_ARCH_LIST": "9.0", "TORCH_SECRET": REDACTED, "TRTLLM_X": "y", "VLLM_API_KEY": REDACTED,
        "VLLM_ATTENTION_BACKEND": "FLASHINFER", "VLLM_CREDENTIALS_FILE": REDACTED,
    }
    assert list(env) == sorted(env)
    assert "hf_secret" not in json.dumps(env) and "Bearer" not in json.dumps(env)


def test_collect_records_the_engine_environment(nvml, monkeypatch):
    nvml(GPUS[:1])
    monkeypatch.setenv("VLLM_USE_V1", "1")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    fp = fpmod.collect("r1")
    assert fp.env["VLLM_USE_V1"] == "1" and fp.env["NCCL_DEBUG"] == "INFO" and fp.env["HF_TOKEN"] == "<redacted>"
    data = fp.to_dict()
    assert data["env"] == dict(fp.env) and "hf_secret" not in json.dumps(data)
    assert hash(fp) == hash(fpmod.Fingerprint(**{**vars(fp), "env": {}}))  # env is data, not identity


def test_kernel_packages_are_tracked(monkeypatch, tmp_path):
    versions = {"flashinfer_python": "0.2.5", "sgl_kernel": "0.1.9", "xformers": "0.0.29", "flash_attn": "2.7.4",
                "vllm": "0.26.0"}
    for name, version in versions.items():  # a site directory with these distributions only
        (tmp_path / f"{name}-{version}.dist-info").mkdir()
        (tmp_path / f"{name}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nthe description\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    packages = fpmod.installed_packages()
    assert packages == {"flash-attn": "2.7.4", "flashinfer-python": "0.2.5", "sglang-kernel": "0.1.9",
                        "vllm": "0.26.0", "xformers": "0.0.29"}
    from pytest_gpucompat.catalog.registry import descriptors
    from pytest_gpucompat.machine.stack import tracked_distributions

    for descriptor in descriptors():  # every descriptor's `packages` is tracked under the engine's name
        if descriptor.packages:
            assert tracked_distributions()[descriptor.name] == descriptor.packages


def test_env_round_trips_and_old_files_without_env_still_load(tmp_path):
    fp = fpmod.Fingerprint(name="me", env={"VLLM_USE_V1": "1", "NCCL_DEBUG": "INFO"})
    path = tmp_path / "fp.json"
    path.write_text(json.dumps(fp.to_dict()))
    assert fpmod.load(path)["me"].env == {"NCCL_DEBUG": "INFO", "VLLM_USE_V1": "1"}
    old = fp.to_dict()
    del old["env"]  # written before the field existed
    path.write_text(json.dumps(old))
    assert fpmod.load(path)["me"].env == {}
    (tmp_path / "fp.yaml").write_text("env: null\n")
    assert fpmod.load(tmp_path / "fp.yaml")["fp"].env == {}


def test_a_hand_written_secret_is_redacted_on_load(tmp_path):
    path = tmp_path / "what-if.yaml"
    path.write_text('env: {HF_TOKEN: "hf_secret", VLLM_ATTENTION_BACKEND: FLASHINFER}\n')
    assert fpmod.load(path)["what-if"].env == {"HF_TOKEN": "<redacted>", "VLLM_ATTENTION_BACKEND": "FLASHINFER"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("env: [VLLM_USE_V1]\n", "field 'env': must map environment variable names"),
        ("env: VLLM_USE_V1=1\n", "field 'env': must map environment variable names"),
        ("env: {VLLM_USE_V1: 1}\n", "field 'env.VLLM_USE_V1': must be a string, not the number 1"),
        ("env: {VLLM_USE_V1: true}\n", "field 'env.VLLM_USE_V1': must be a string, not a boolean"),
        ("env: {VLLM_USE_V1: [1]}\n", "field 'env.VLLM_USE_V1': must be a string, not a list"),
        ("env: {VLLM_USE_V1: {a: b}}\n", "field 'env.VLLM_USE_V1': must be a string, not a mapping"),
        ("env: {VLLM_USE_V1: null}\n", "field 'env.VLLM_USE_V1': must be a string, not null"),
        ("env: {1: x}\n", "field 'env.1': not an environment variable name"),
        ('env: {"A=B": x}\n', "field 'env.A=B': not an environment variable name"),
        ('env: {"": x}\n', "field 'env.': not an environment variable name"),
        ("fleet: {a: {env: {X: 2}}}\n", "field 'fleet.a.env.X'"),
    ],
)
def test_bad_env_names_the_field(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        fpmod.load(path)
    assert message in str(info.value)


def test_gpucompat_env_shows_the_environment_and_kernel_packages():
    from pytest_gpucompat.cli import format_fingerprint

    fp = fpmod.Fingerprint(name="x", cuda_visible_devices="0", packages={"flashinfer-python": "0.2.5"},
                           env={"CUDA_VISIBLE_DEVICES": "0", "HF_TOKEN": "<redacted>", "VLLM_USE_V1": "1"})
    text = format_fingerprint(fp)
    assert "flashinfer-python 0.2.5" in text
    assert "env:           2 engine variables" in text
    assert "\n  HF_TOKEN=<redacted>\n  VLLM_USE_V1=1" in text
    assert text.count("CUDA_VISIBLE_DEVICES=0") == 1
    assert "env:           -" in format_fingerprint(fpmod.Fingerprint(name="y"))
