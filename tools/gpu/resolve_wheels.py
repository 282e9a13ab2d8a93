"""Resolve the wheels an offline GPU machine needs for one engine install, as one ``NAME==VERSION`` list.

The GPU machine reaches no package index: whatever it lacks travels as wheels. This asks pip, here, what a
complete install of ``REQUIREMENT`` is for that machine's Python and platform (every declared requirement, no
extras, binary wheels only) with ``--pin`` holding what must stay as the machine has it (its torch build), and
writes the wheels that the machine's own package set (``--machine``: ``pip list --format=freeze`` output) does
not already hold at the same version. A package the machine has at another version is listed too: carried, it is
put first on the path and shadows the machine's (say so in the list's header; the run's package set shows it).

    python tools/gpu/resolve_wheels.py --machine docs/reports/h200-580.159.04-hf-shared-final-packages.txt \
        --pin torch==2.11.0 --pin transformers==5.17.0 vllm==0.26.0 -o tools/gpu/wheels/vllm-0.26.0.txt

Only the standard library and pip; nothing is installed here (``pip install --dry-run --report``).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

try:
    from packaging.requirements import Requirement
except ImportError:  # pip's own copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]

PLATFORMS = ("manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64",
             *(f"manylinux_2_{n}_x86_64" for n in range(5, 40)))


def canonical(name: str) -> str:
    """PEP 503 name: ``PyYAML`` and ``pyyaml``, ``pydantic_core`` and ``pydantic-core`` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def machine_set(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of a freeze file (comments and ``-e``/``@`` lines skipped)."""
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, _, version = line.partition("==")
            found[canonical(name)] = version.strip()
    return found


def resolve(requirements: list[str], pins: list[str], python: str) -> list[dict[str, Any]]:
    """pip's install report for ``requirements`` and ``pins`` on the target: name, version, url and declared
    requirements of each wheel."""
    with tempfile.TemporaryDirectory(prefix="resolve-wheels-") as tmp:
        report = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                "--report", str(report), "--only-binary=:all:", "--python-version", python,
                "--implementation", "cp", "--target", str(Path(tmp) / "target"),
                *(a for p in PLATFORMS for a in ("--platform", p)), *requirements, *pins]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"pip could not resolve {' '.join(requirements)}: {done.stderr.strip()[-2000:]}")
        data = json.loads(report.read_text(encoding="utf-8"))
    return [{"name": item["metadata"]["name"], "version": item["metadata"]["version"],
             "url": item.get("download_info", {}).get("url", ""),
             "requires": item["metadata"].get("requires_dist") or []} for item in data.get("install", [])]


def machine_would_do(wheels: list[dict[str, Any]], have: dict[str, str], python: str) -> list[str]:
    """``NAME==VERSION`` of the machine for each package resolved at another version where the machine's version
    meets every requirement the resolved set declares on it (pip picks the newest; the machine's is enough)."""
    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
    wanted: dict[str, list[Any]] = {}
    for wheel in wheels:
        for text in wheel["requires"]:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate(env):
                wanted.setdefault(canonical(req.name), []).append(req.specifier)
    pins = []
    for wheel in wheels:
        name = canonical(wheel["name"])
        there = have.get(name)
        if there is None or there == wheel["version"]:
            continue
        if all(spec.contains(there, prereleases=True) for spec in wanted.get(name, [])):
            pins.append(f"{wheel['name']}=={there}")
    return pins


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requirement", nargs="+", help="what to install completely, e.g. vllm==0.26.0")
    parser.add_argument("--machine", type=Path, required=True, help="the GPU machine's package set (freeze)")
    parser.add_argument("--pin", action="append", default=[], help="NAME==VERSION held as the machine has it")
    parser.add_argument("--python", default="3.12", help="the GPU machine's Python (default 3.12)")
    parser.add_argument("--note", action="append", default=[], help="a line for the list's header")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)
    have = machine_set(args.machine)
    wheels = resolve(args.requirement, args.pin, args.python)
    kept: list[str] = []
    for _ in range(3):  # the machine's own version wherever it is enough: fewer wheels, fewer shadowed packages
        more = [p for p in machine_would_do(wheels, have, args.python) if p not in kept]
        if not more:
            break
        kept += more
        wheels = resolve(args.requirement, [*args.pin, *kept], args.python)
    carried, shadowed = [], []
    for wheel in sorted(wheels, key=lambda w: canonical(w["name"])):
        there = have.get(canonical(wheel["name"]))
        if there == wheel["version"]:
            continue
        if not wheel["url"].endswith(".whl"):
            sys.exit(f"{wheel['name']}=={wheel['version']} has no wheel for the target: {wheel['url']}")
        carried.append(f"{wheel['name']}=={wheel['version']}")
        if there is not None:
            shadowed.append(f"{wheel['name']} {there} -> {wheel['version']}")
    header = [f"# {' '.join(args.requirement)}: complete install (every declared requirement, no extras) for the GPU",
              f"# machine's Python {args.python}, resolved by tools/gpu/resolve_wheels.py against its package set "
              f"{args.machine.name}",
              f"# with {', '.join(args.pin) or 'nothing'} held; {len(carried)} wheels it lacks "
              f"({len(wheels)} in the complete set).",
              *(f"# {n}" for n in args.note)]
    if shadowed:
        header.append("# Carried at another version than the machine's (first on the path, they shadow it): "
                      + "; ".join(shadowed))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join([*header, *carried]) + "\n", encoding="utf-8")
    print(f"{args.output}: {len(carried)} wheels ({len(shadowed)} shadowing the machine's)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
