"""The fingerprint: NVML answers turned into data, fallbacks when NVML is missing, and what-if files."""

from __future__ import annotations

import json
import sys
import types

import pytest

from pytest_gpucompat import fingerprint as fpmod
from pytest_gpucompat.errors import InputError


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
    monkeypatch.setattr(fpmod, "_torch_version_file", lambda: None)
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
