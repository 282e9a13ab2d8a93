"""The GPU links of a fingerprint checked against `nvidia-smi topo -m`, the view users already trust.

The fingerprint reads links from NVML (P2P status for NVLink, the common PCIe ancestor otherwise); nvidia-smi
prints the same matrix from the driver's side. Two readings of one machine that disagree mean a fingerprint, and
every interconnect rule evaluated on it, cannot be trusted.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .fingerprint import Link

_GPU = re.compile(r"^GPU(\d+)$")
PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class Mismatch:
    a: int
    b: int
    fingerprint: str
    nvidia_smi: str

    def __str__(self) -> str:
        pair = f"GPU{self.a}-GPU{self.b}"
        return f"{pair}: fingerprint says {self.fingerprint}, nvidia-smi topo -m says {self.nvidia_smi}"


def parse_topo_matrix(text: str) -> dict[tuple[int, int], str]:
    """The GPU-to-GPU cells of `nvidia-smi topo -m` (`NV18`, `PIX`, ... keyed by GPU index pair, a < b); NIC
    columns, affinity columns and the legend are ignored."""
    lines = [line.rstrip() for line in text.splitlines()]
    header = next((line.split() for line in lines if line.split() and _GPU.match(line.split()[0])
                   and all(_GPU.match(t) or t.startswith("NIC") for t in line.split()[:2])), None)
    if header is None:
        return {}
    columns = [int(m.group(1)) if (m := _GPU.match(t)) else None for t in header]
    cells: dict[tuple[int, int], str] = {}
    for line in lines:
        tokens = line.split()
        if not tokens or line.startswith((" ", "\t")) or not (m := _GPU.match(tokens[0])):
            continue
        row = int(m.group(1))
        for col, value in zip(columns, tokens[1:]):
            if col is not None and col != row:
                cells[(min(row, col), max(row, col))] = value
    return cells


def link_name(code: str) -> str:
    """`NV18` -> 'nvlink', `PIX` -> 'pcie PIX': the words the fingerprint's links use."""
    if code.startswith("NV"):
        return "nvlink"
    return f"pcie {code}" if code in PCIE_PATHS else code


def _link_words(link: Link) -> str:
    return "nvlink" if link.kind == "nvlink" else f"pcie {link.path}" if link.path else "pcie"


def compare(links: Iterable[Link], topo: Mapping[tuple[int, int], str]) -> list[Mismatch]:
    """Every GPU pair on which the two disagree; a pcie link whose path the fingerprint could not read agrees with
    any PCIe path."""
    ours = {(min(lk.a, lk.b), max(lk.a, lk.b)): lk for lk in links}
    out = []
    for pair in sorted(set(ours) | set(topo)):
        link, code = ours.get(pair), topo.get(pair)
        mine = _link_words(link) if link else "no link"
        theirs = link_name(code) if code else "no link"
        same = mine == theirs or (link is not None and link.kind == "pcie" and not link.path
                                  and theirs.startswith("pcie"))
        if not same:
            out.append(Mismatch(pair[0], pair[1], mine, theirs))
    return out


def nvidia_smi_topology(timeout_s: float = 20.0) -> tuple[dict[tuple[int, int], str] | None, str | None]:
    """`nvidia-smi topo -m` parsed, or None and the reason it could not be read."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi is not installed"
    try:
        proc = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi topo -m did not answer: {exc}"
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        return None, f"nvidia-smi topo -m exited {proc.returncode}: {tail[-1] if tail else 'no output'}"
    return parse_topo_matrix(proc.stdout), None
