"""The fingerprint's GPU links against `nvidia-smi topo -m`."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from pytest_gpucompat.machine.fingerprint import Link
from pytest_gpucompat.machine.topology import compare, parse_topo_matrix

H200X2 = """\
        GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV18    SYS     0-47    0               N/A
GPU1    NV18     X      SYS     0-47    0               N/A
NIC0    SYS     SYS      X

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NV#  = Connection traversing a bonded set of # NVLinks
"""

L4X4 = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPIX\tNODE\tSYS\t0-31\t0
GPU1\tPIX\t X \tNODE\tSYS\t0-31\t0
GPU2\tNODE\tNODE\t X \tSYS\t0-31\t0
GPU3\tSYS\tSYS\tSYS\t X \t32-63\t1
"""


def test_parse_nvlink_pair_and_ignore_nics_and_legend() -> None:
    assert parse_topo_matrix(H200X2) == {(0, 1): "NV18"}


def test_parse_pcie_paths_with_tabs() -> None:
    cells = parse_topo_matrix(L4X4)
    assert cells[(0, 1)] == "PIX" and cells[(0, 2)] == "NODE" and cells[(2, 3)] == "SYS" and len(cells) == 6


def test_one_gpu_or_garbage_has_no_pairs() -> None:
    assert parse_topo_matrix("\tGPU0\tCPU Affinity\nGPU0\t X \t0-15\n") == {}
    assert parse_topo_matrix("NVIDIA-SMI has failed because it couldn't communicate with the driver.") == {}


def test_compare_names_each_disagreeing_pair() -> None:
    assert compare([Link(0, 1, "nvlink", "NV")], parse_topo_matrix(H200X2)) == []
    wrong = compare([Link(0, 1, "pcie", "PHB")], parse_topo_matrix(H200X2))
    assert [str(m) for m in wrong] == ["GPU0-GPU1: fingerprint says pcie PHB, nvidia-smi topo -m says nvlink"]
    links = [Link(0, 1, "pcie", "PIX"), Link(0, 2, "pcie", None), Link(0, 3, "pcie", "SYS"), Link(1, 2, "pcie", "NODE"),
             Link(1, 3, "pcie", "SYS"), Link(2, 3, "pcie", "SYS")]
    assert compare(links, parse_topo_matrix(L4X4)) == []  # a path NVML could not read agrees with any PCIe path
    missing = compare(links[:-1], parse_topo_matrix(L4X4))
    assert [(m.a, m.b, m.fingerprint) for m in missing] == [(2, 3, "no link")]


def _run_env(tmp_path: Path, topo: str | None) -> subprocess.CompletedProcess[str]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    if topo is not None:
        fake = bindir / "nvidia-smi"
        fake.write_text(f"#!{sys.executable}\nprint({topo!r}, end='')\n")
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.path.dirname(sys.executable)}"}
    return subprocess.run([sys.executable, "-m", "pytest_gpucompat.cli", "env", "--topology"], capture_output=True,
                          text=True, env=env, timeout=120)


def test_env_topology_exits_1_when_nvidia_smi_disagrees(tmp_path: Path) -> None:
    # a fake nvidia-smi names GPUs 60 and 61 joined by NVLink: no fingerprint of this machine has that link
    topo = H200X2.replace("GPU0", "GPU60").replace("GPU1", "GPU61")
    proc = _run_env(tmp_path, topo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "topology: GPU60-GPU61: fingerprint says no link, nvidia-smi topo -m says nvlink" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_env_topology_without_nvidia_smi_is_a_note_not_a_failure(tmp_path: Path) -> None:
    proc = _run_env(tmp_path, None)
    assert proc.returncode == 0, proc.stderr
    assert "topology: not checked: nvidia-smi is not installed" in proc.stdout
