"""Pasted environments (machine/pasted.py) read from real GitHub pastes, and the GPU catalog (catalog/gpus.py)."""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_gpucompat.catalog import gpus as catalog
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.machine import fingerprint
from pytest_gpucompat.machine.pasted import MAX_GPUS, Pasted, read_pasted

DATA = Path(__file__).parent / "data" / "pasted_env"
SOURCES: dict[str, Any] = yaml.safe_load((DATA / "sources.yaml").read_text(encoding="utf-8"))


def _read(name: str) -> Pasted:
    return read_pasted((DATA / name).read_text(encoding="utf-8"), name)


def _names(pasted: Pasted) -> dict[str, int]:
    return dict(Counter(gpu["name"] for gpu in pasted.data.get("gpus", [])))


def test_every_paste_has_a_source_and_every_source_a_paste() -> None:
    files = {p.name for p in DATA.glob("*.txt")}
    assert files == set(SOURCES)
    kinds = Counter(SOURCES[name]["expect"]["formats"][0] for name in files)
    assert kinds["vllm collect_env"] >= 6 and kinds["sglang check_env"] >= 4 and kinds["nvidia-smi"] >= 2
    assert all(SOURCES[name]["url"].startswith("https://github.com/") for name in files)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_real_paste_reads_exactly_its_facts(name: str) -> None:
    expect = SOURCES[name]["expect"]
    pasted = _read(name)
    data = pasted.data
    assert list(pasted.formats) == expect["formats"]
    assert _names(pasted) == expect["gpus"]
    assert data.get("gpu_count") == expect.get("gpu_count")
    for key in ("driver", "cuda_driver", "cuda_runtime"):
        assert data.get(key) == expect[key], key
    assert data.get("interconnect") == expect.get("interconnect")
    packages = data.get("packages", {})
    assert {k: packages.get(k) for k in expect["packages"]} == expect["packages"]
    for absent in expect.get("absent", []):
        assert absent not in packages
    for gpu in data.get("gpus", []):
        if "compute_capability" in expect:
            assert gpu["compute_capability"] == expect["compute_capability"]
        assert gpu.get("memory_mib") == expect.get("memory_mib")
    assert any("truncated" in line for line in pasted.unread) == bool(expect.get("truncated"))
    if "driver" not in data:
        assert "no driver version" in pasted.unread
    # the data is the hand-written fingerprint form, and nothing in it is refused
    fp = fingerprint.from_dict(data, name)
    assert len(fp.gpus) == sum(expect["gpus"].values()) + (expect.get("gpu_count") or 0)
    assert fp.driver == expect["driver"] and fp.cuda_runtime == expect["cuda_runtime"]
    assert all(isinstance(line, str) and "\n" not in line for line in pasted.read + pasted.unread)


def test_what_is_read_is_said_and_what_is_not_too() -> None:
    pasted = _read("vllm_10319_v100.txt")
    assert "driver 515.105.01 (Nvidia driver version)" in pasted.read
    assert "CUDA runtime 11.8 (CUDA used to build PyTorch)" in pasted.read
    assert "CUDA runtime version 11.8.89 is the toolkit's, not torch's build: not used" in pasted.unread
    sglang = _read("sglang_14327_gb300.txt")
    assert "not installed per check_env: flashinfer_jit_cache, vllm, litellm" in sglang.unread
    assert any(line.startswith("NVCC release 13.0") for line in sglang.unread)
    assert _read("vllm_27321_new_format.txt").unread[-1] == "no GPU"


def test_the_catalog_fills_in_compute_capability_and_architecture() -> None:
    data = _read("vllm_7890_l40s.txt").data
    assert data["gpus"][0] == {"name": "NVIDIA L40S-48C", "compute_capability": "8.9", "architecture": "ada"}
    smi = _read("smi_nvgpu15_titanxp.txt").data
    assert smi["gpus"] == [{"name": "TITAN Xp", "compute_capability": "6.1", "architecture": "pascal",
                            "memory_mib": 12196}]


@pytest.mark.parametrize("wrap", ["crlf", "indented", "quoted", "fenced"])
def test_markdown_and_line_ends_around_a_paste_change_nothing(wrap: str) -> None:
    text = (DATA / "sglang_661_a100x2.txt").read_text(encoding="utf-8")
    wrapped = {
        "crlf": text.replace("\n", "\r\n"),
        "indented": "\n".join("    " + line for line in text.splitlines()),
        "quoted": "\n".join("> " + line for line in text.splitlines()),
        "fenced": "Here is my env:\n\n<details><summary>env</summary>\n\n```text\n" + text + "\n```\n</details>\n",
    }[wrap]
    assert read_pasted(wrapped, "x").data == _read("sglang_661_a100x2.txt").data


_SMI_V100 = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 515.105.01   Driver Version: 515.105.01   CUDA Version: 11.7     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
|===============================+======================+======================|
|   0  Tesla V100-PCIE...  Off  | 00000000:3B:00.0 Off |                    0 |
| N/A   31C    P0    25W / 250W |      0MiB / 32768MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
|   1  Tesla V100-PCIE...  Off  | 00000000:AF:00.0 Off |                    0 |
| N/A   30C    P0    24W / 250W |      0MiB / 32768MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""


def test_collect_env_and_nvidia_smi_in_one_paste_count_the_gpus_once() -> None:
    text = (DATA / "vllm_10319_v100.txt").read_text(encoding="utf-8") + "\n```\n\nnvidia-smi:\n```\n" + _SMI_V100
    pasted = read_pasted(text, "issue")
    assert pasted.formats == ("vllm collect_env", "nvidia-smi")
    # two GPUs, not four: collect_env's full names, nvidia-smi's memory
    assert pasted.data["gpus"] == [{"name": "Tesla V100-PCIE-32GB", "compute_capability": "7.0",
                                    "architecture": "volta", "memory_mib": 32768}] * 2
    assert pasted.data["cuda_driver"] == "11.7" and pasted.data["cuda_runtime"] == "11.8"
    assert any("counted once" in line for line in pasted.unread)
    assert len(fingerprint.from_dict(pasted.data).gpus) == 2


def test_lists_of_different_gpus_are_not_merged_and_it_says_so() -> None:
    text = (DATA / "vllm_12378_a100.txt").read_text(encoding="utf-8") + "\n" + _SMI_V100
    pasted = read_pasted(text, "issue")
    assert _names(pasted) == {"Tesla V100-PCIE...": 2}  # the longer list wins
    assert any("are not those of" in line for line in pasted.unread)
    assert pasted.data["driver"] == "515.105.01"  # nvidia-smi's, the other said
    assert any(line.startswith("driver 535.154.05") and "differs" in line for line in pasted.unread)


def test_pip_list_freeze_and_show() -> None:
    text = ("Package            Version\n------------------ -----------\nvllm               0.6.3.post1\n"
            "torch              2.4.0\nflashinfer         0.1.6+cu121torch2.4\n\n"
            "tensorrt_llm==0.15.0\nsome-pkg @ file:///tmp/x\nName: xformers\nVersion: 0.0.27.post2\n")
    pasted = read_pasted(text, "pip")
    assert pasted.formats == ("pip list",)
    assert pasted.data["packages"] == {"flashinfer-python": "0.1.6+cu121torch2.4", "tensorrt-llm": "0.15.0",
                                       "torch": "2.4.0", "vllm": "0.6.3.post1", "xformers": "0.0.27.post2"}
    assert "no driver version" in pasted.unread and "no GPU" in pasted.unread


def test_values_that_are_no_versions_are_dropped_and_said() -> None:
    text = ("PyTorch version: N/A\nIs debug build: N/A\nCUDA used to build PyTorch: N/A\n"
            "GPU models and configuration: Could not collect\nNvidia driver version: Could not collect\n"
            "[pip3] torch==2.4.0\n[conda] Could not collect\n")
    pasted = read_pasted(text, "t")
    assert pasted.data == {"packages": {"torch": "2.4.0"}}
    assert "PyTorch version 'N/A' is not a version" in pasted.unread
    assert "Nvidia driver version: 'Could not collect'" in pasted.unread
    assert "GPU models and configuration: Could not collect" in pasted.unread


def test_check_env_index_lists_and_ranges() -> None:
    text = ("Python: 3.10.12\nCUDA available: True\nGPU 0,1,2,3: NVIDIA H100 80GB HBM3\nGPU 4-5: NVIDIA H100 PCIe\n"
            "GPU 0,1,2,3 Compute Capability: 9.0\nCUDA Driver Version: 550.54.15\nPyTorch: 2.5.1+cu124\n"
            "sgl_kernel: 0.0.3\n")
    pasted = read_pasted(text, "t")
    assert _names(pasted) == {"NVIDIA H100 80GB HBM3": 4, "NVIDIA H100 PCIe": 2}
    assert "memory_mib" not in pasted.data["gpus"][0]  # check_env says no memory (the catalog's is not a fact read)
    assert pasted.data["gpus"][0]["compute_capability"] == "9.0" and pasted.data["gpus"][5]["architecture"] == "hopper"
    assert pasted.data["packages"] == {"sgl-kernel": "0.0.3", "torch": "2.5.1+cu124"}
    assert pasted.data["cuda_runtime"] == "12.4" and pasted.data["python"] == "3.10.12"


def test_topology_with_nvlink_between_some_gpus_only_is_pcie() -> None:
    text = ("Nvidia driver version: 550.54.15\nGPU Topology:\n\tGPU0\tGPU1\tGPU2\tCPU Affinity\n"
            "GPU0\t X \tNV4\tSYS\t0-7\nGPU1\tNV4\t X \tSYS\t0-7\nGPU2\tSYS\tSYS\t X \t0-7\n")
    pasted = read_pasted(text, "t")
    assert pasted.data["interconnect"] == "pcie" and pasted.data["gpu_count"] == 3
    assert any("between some GPUs only" in line for line in pasted.read)


# --------------------------------------------------------------------------- hostile input


def _never_raises_but_input_error(text: str) -> None:
    try:
        pasted = read_pasted(text, "fuzz")
    except InputError as exc:
        assert "internal error" not in str(exc), str(exc)
        assert "\n" not in str(exc)
        return
    fingerprint.from_dict(pasted.data, "fuzz")


def test_text_that_is_no_paste_is_one_input_error_line() -> None:
    with pytest.raises(InputError) as info:
        read_pasted("It crashes when I start the server, please help!\nThanks", "issue #1")
    message = str(info.value)
    assert message.startswith("issue #1: not a pasted environment: expected the output of")
    assert "\n" not in message
    with pytest.raises(InputError, match="must be text"):
        read_pasted(b"PyTorch version: 2.4.0", "b")  # type: ignore[arg-type]


def test_more_than_8_mib_is_refused() -> None:
    with pytest.raises(InputError, match="too large"):
        read_pasted("PyTorch version: 2.4.0\n" + "x" * (9 * 1024 * 1024), "big")
    with pytest.raises(InputError, match="too large"):
        read_pasted("\u00e9" * (5 * 1024 * 1024), "wide")  # 5 Mi characters, 10 MiB of UTF-8


def test_random_text_never_raises_anything_else() -> None:
    rng = random.Random(20250101)
    real = [(DATA / name).read_text(encoding="utf-8") for name in sorted(SOURCES)]
    for _ in range(300):
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
        _never_raises_but_input_error(raw.decode("utf-8", "surrogateescape"))
        _never_raises_but_input_error(raw.decode("latin-1"))
        paste = rng.choice(real)
        cut = rng.randrange(len(paste))
        mangled = paste[:cut] + raw.decode("utf-8", "replace") + paste[cut + rng.randrange(50):]
        _never_raises_but_input_error(mangled)


@pytest.mark.parametrize("text", [
    "\x00" * 100_000 + "PyTorch version: 2.4.0\x00",
    "GPU models and configuration:\n" + "GPU 0: " + "A" * 5000 + "\n",
    "PyTorch version: " + "9" * 4000 + "\nNvidia driver version: 1." + "0" * 4000,
    "> " * 2000 + "PyTorch version: 2.4.0\n",
    "(" * 1_000_000,
    "[" * 100_000 + "pip3] torch==2.4.0",
    "Python: 3\nPyTorch: 2.4.0\n" + "GPU 0-999999999,0-4095: NVIDIA B200\n" * 20_000,
    "Python: 3\nPyTorch: 2.4.0\nGPU " + "1," * 1500 + ": X\nGPU 00000000000000000000000001: Y\n",
    "GPU models and configuration:\n" * 50_000 + "GPU 0: NVIDIA A100\n" * 5000,
    ("\tGPU0\tGPU1\tGPU2\n" + "GPU0\t X \tNV1\n") * 30_000,
    "| NVIDIA-SMI 1 Driver Version: 1 CUDA Version: 99999999999999999999\n" + (
        "|   0  NVIDIA A100 On | 00000000:07:00.0 Off | 0 |\n"
        "| x | 99999999999999MiB / 99999999999MiB | x |\n") * 10_000,
    "\ud800\udfff\ufffe\u2028\x85PyTorch version: 2.4.0\r\rCUDA used to build PyTorch: 12.1\x1b[31m\n",
    "a==1\n" * 200_000,
    "x" * (8 * 1024 * 1024 - 10),
])
def test_hostile_text_is_read_or_refused_in_bounded_time(text: str) -> None:
    start = time.monotonic()
    _never_raises_but_input_error(text)
    assert time.monotonic() - start < 10


def test_gpus_are_capped() -> None:
    text = "Python: 3\nPyTorch: 2.4.0\nGPU 0-99999: NVIDIA B200\n"
    pasted = read_pasted(text, "t")
    assert len(pasted.data["gpus"]) == MAX_GPUS
    assert f"more than {MAX_GPUS} GPUs listed: the rest not read" in pasted.unread


# --------------------------------------------------------------------------- the GPU catalog


@pytest.mark.parametrize(("name", "cc", "architecture"), [
    ("Tesla V100-SXM2-32GB", "7.0", "volta"), ("Tesla V100S-PCIE-32GB", "7.0", "volta"), ("V100", "7.0", "volta"),
    ("Tesla P100-PCIE-16GB", "6.0", "pascal"), ("Tesla P40", "6.1", "pascal"), ("Tesla P4", "6.1", "pascal"),
    ("NVIDIA GeForce GTX 1080 Ti", "6.1", "pascal"), ("TITAN V", "7.0", "volta"), ("TITAN RTX", "7.5", "turing"),
    ("Tesla T4", "7.5", "turing"), ("Quadro RTX 8000", "7.5", "turing"),
    ("NVIDIA GeForce RTX 2080 Ti", "7.5", "turing"),
    ("NVIDIA A100-SXM4-80GB", "8.0", "ampere"), ("NVIDIA A100-PCIE-40GB", "8.0", "ampere"),
    ("A100 80GB", "8.0", "ampere"), ("A100", "8.0", "ampere"), ("NVIDIA A800-SXM4-80GB", "8.0", "ampere"),
    ("NVIDIA A30", "8.0", "ampere"), ("NVIDIA A10", "8.6", "ampere"), ("NVIDIA A10G", "8.6", "ampere"),
    ("NVIDIA A40", "8.6", "ampere"), ("NVIDIA A16", "8.6", "ampere"), ("NVIDIA A2", "8.6", "ampere"),
    ("NVIDIA RTX A6000", "8.6", "ampere"), ("NVIDIA RTX A4000", "8.6", "ampere"),
    ("NVIDIA GeForce RTX 3090", "8.6", "ampere"), ("Jetson AGX Orin", "8.7", "ampere"),
    ("NVIDIA L4", "8.9", "ada"), ("NVIDIA L40", "8.9", "ada"), ("NVIDIA L40S", "8.9", "ada"),
    ("NVIDIA RTX 6000 Ada Generation", "8.9", "ada"), ("NVIDIA GeForce RTX 4090", "8.9", "ada"), ("4090", "8.9", "ada"),
    ("NVIDIA H100 80GB HBM3", "9.0", "hopper"), ("NVIDIA H100 PCIe", "9.0", "hopper"),
    ("NVIDIA H100 NVL", "9.0", "hopper"),
    ("H100", "9.0", "hopper"), ("NVIDIA H200", "9.0", "hopper"), ("NVIDIA H20", "9.0", "hopper"),
    ("NVIDIA H800", "9.0", "hopper"), ("NVIDIA GH200 480GB", "9.0", "hopper"),
    ("NVIDIA B200", "10.0", "blackwell"), ("NVIDIA B100", "10.0", "blackwell"), ("NVIDIA GB200", "10.0", "blackwell"),
    ("NVIDIA B300 SXM6 AC", "10.3", "blackwell"), ("NVIDIA GB300", "10.3", "blackwell"),
    ("NVIDIA GeForce RTX 5090", "12.0", "blackwell"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "blackwell"), ("NVIDIA GB10", "12.1", "blackwell"),
])
def test_catalog_lookup(name: str, cc: str, architecture: str) -> None:
    model = catalog.lookup(name)
    assert model is not None, name
    assert (model.compute_capability, model.architecture) == (cc, architecture)


@pytest.mark.parametrize("name", ["AMD Instinct MI300X", "NVIDIA GeForce RTX 40...", "GRID A100D-1-20C", "", "   ",
                                  "A1000000", "H1000", "NVIDIA", "x" * 10_000, "RTX 6000"])
def test_catalog_unknown_names(name: str) -> None:
    assert catalog.lookup(name) is None


def test_catalog_prefers_the_longest_pattern_and_words_end_at_spaces() -> None:
    assert catalog.lookup("NVIDIA A100-SXM4-80GB").memory_mib == 81920  # type: ignore[union-attr]
    assert catalog.lookup("NVIDIA A100-PCIE-40GB").memory_mib == 40960  # type: ignore[union-attr]
    assert catalog.lookup("NVIDIA A10").compute_capability == "8.6"  # type: ignore[union-attr]  # not A100's 8.0
    assert catalog.lookup("NVIDIA GB200").pattern == "* gb200 *"  # type: ignore[union-attr]  # not "* b200 *"
    assert catalog.lookup("Quadro RTX 6000").compute_capability == "7.5"  # type: ignore[union-attr]
    lengths = [len(m.pattern) for m in catalog.load_models()]
    assert lengths == sorted(lengths, reverse=True)


def test_catalog_architectures_are_the_fingerprints() -> None:
    assert set(catalog.ARCHITECTURES) == set(fingerprint._ARCHITECTURES.values())
    assert {m.architecture for m in catalog.load_models()} <= set(catalog.ARCHITECTURES)


@pytest.mark.parametrize(("entry", "field"), [
    ({"patterns": ["* x *"], "compute_capability": "8", "architecture": "ampere"}, "gpus[0].compute_capability"),
    ({"patterns": ["* x *"], "compute_capability": "8.0", "architecture": "Ampere"}, "gpus[0].architecture"),
    ({"patterns": ["x"], "compute_capability": "8.0", "architecture": "ampere"}, "gpus[0].patterns[0]"),
    ({"patterns": [], "compute_capability": "8.0", "architecture": "ampere"}, "gpus[0].patterns"),
    ({"patterns": ["* x *"], "compute_capability": "8.0", "architecture": "ampere", "memory_mib": "8G"},
     "gpus[0].memory_mib"),
    ({"patterns": ["* x *"], "compute_capability": "8.0", "architecture": "ampere", "cc": 1}, "gpus[0].cc"),
])
def test_catalog_bad_data_is_one_input_error_naming_file_and_field(tmp_path: Path, entry: dict[str, Any],
                                                                   field: str) -> None:
    path = tmp_path / "gpus.yaml"
    path.write_text(yaml.safe_dump({"gpus": [entry]}), encoding="utf-8")
    with pytest.raises(InputError) as info:
        catalog.lookup("x", path)
    assert info.value.source == str(path) and info.value.field == field
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- gpucompat check --collect-env


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.txt")))
def test_check_reads_every_real_paste(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`gpucompat check --collect-env FILE` judges the pasted machine: its GPUs in the findings' head line, what
    was read on stderr, exit 0 or 1 (never 2: every committed paste is one of the formats)."""
    from pytest_gpucompat.cli import main

    code = main(["check", "--collect-env", str(DATA / name)])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "read as " in err and out.startswith("pasted: ")
    assert "verdict:" in out.splitlines()[-1]


def test_check_reads_a_paste_from_stdin_and_refuses_what_is_not_one(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    import io

    from pytest_gpucompat.cli import main

    first = sorted(DATA.glob("*.txt"))[0]
    monkeypatch.setattr("sys.stdin", io.StringIO(first.read_text(encoding="utf-8")))
    assert main(["check", "--collect-env", "-", "--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["fingerprint"]["gpus"]
    other = tmp_path / "notes.txt"
    other.write_text("hello, this is not an environment\n", encoding="utf-8")
    assert main(["check", "--collect-env", str(other)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpucompat: error: {other}")
    assert main(["check", "--collect-env", str(other), "--env", "examples/v100.yaml"]) == 2
