"""Write an engine's per-release build facts (CUDA, TensorRT, base container, the driver floor that follows) as a
release history read from its published release notes, for an engine whose wheels cannot be read like vLLM's:

    python tools/release_notes_history.py --release-notes release-notes.md [--output FILE]

The release notes are TensorRT-LLM's ``docs/source/release-notes.md``: one ``## TensorRT-LLM Release X`` section per
release, whose "Infrastructure Changes" say what changed (``The dependent CUDA version is updated to 12.8.1``,
``The dependent TensorRT version is updated to 10.9``, ``The base Docker image for TensorRT-LLM is updated to
nvcr.io/nvidia/pytorch:25.03-py3``). A release that says nothing of a fact keeps the previous release's ("0.19 keeps
CUDA 12.8.1"), except a base container across a new CUDA version: each value records the release whose notes stated
it (``from``). Where a release names only its base
container, its CUDA is the container's (NGC PyTorch container release notes); where both are stated they must agree.
The driver floor is the CUDA major's minor-version-compatibility floor, the GA driver the CUDA minor's (CUDA Toolkit
release notes, table "CUDA Toolkit and Corresponding Driver Versions").

The output has the format of ``matrices/history/<engine>.json`` (pytest_gpucompat/kb/history.py) with one kind,
``stack``: item -> runs of ``{"value", "from"}``. Rules about the engine state their windows over it
(``bounds.facts: [{release: cuda, matches: ...}]``) and ``gpucompat rules --lint`` holds them there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

FORMAT = 1
TOOL = "tools/release_notes_history.py"
DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "matrices" / "history" / "tensorrt-llm-stack.json"
MAX_BYTES = 4 * 1024 * 1024

CONTAINER_CUDA = {
    "24.02": "12.3.2", "24.03": "12.4.0", "24.05": "12.4.1", "24.07": "12.5.1", "24.10": "12.6.2",
    "24.11": "12.6.3", "25.01": "12.8.0", "25.03": "12.8.1", "25.05": "12.9.0", "25.06": "12.9.1",
    "25.10": "13.0.2", "25.12": "13.1.0",
}
"""NGC PyTorch container -> its CUDA (NGC PyTorch container release notes, "Container Version" table)."""
DRIVER_FLOOR = {11: "450.80.02", 12: "525.60.13", 13: "580"}
"""CUDA major -> the oldest driver its minor-version compatibility runs on."""
DRIVER_GA = {"12.3": "545.23.06", "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26",
             "12.9": "575.51.03", "13.0": "580.65.06"}
"""CUDA minor -> its GA driver (CUDA Toolkit release notes)."""

_RELEASE = re.compile(r"^##\s+TensorRT-LLM Release\s+(\S+)\s*$")
_CUDA = re.compile(r"\bCUDA (?:version is (?:updated|maintained) (?:to|at) |v)(\d+\.\d+(?:\.\d+)?)")
_TRT = re.compile(r"\b(?:TensorRT (?:version is (?:updated|maintained) (?:to|at) |v)|(?:requires|supports) "
                  r"TensorRT )(\d+\.\d+(?:\.\d+)?)")
_CONTAINER = re.compile(r"base Docker image for TensorRT-LLM (?:is updated )?to "
                        r"`?nvcr\.io/nvidia/pytorch:(\d\d\.\d\d)-py3", re.IGNORECASE)


class NotesError(ValueError):
    """The release notes cannot be read as such (a one-line reason)."""


def parse_notes(text: str) -> list[tuple[str, dict[str, str]]]:
    """(version, stated facts) per release section, newest first as the notes list them."""
    out: list[tuple[str, dict[str, str]]] = []
    for line in text.splitlines():
        found = _RELEASE.match(line.strip())
        if found:
            try:
                version = Version(found.group(1))
            except InvalidVersion:
                raise NotesError(f"release heading {line.strip()!r}: not a version") from None
            text_version = ".".join(map(str, (version.release + (0, 0))[:3])) if len(version.release) < 3 \
                else str(version)
            out.append((text_version, {}))
            continue
        if not out:
            continue
        stated = out[-1][1]
        for key, pattern in (("cuda", _CUDA), ("trt", _TRT), ("container", _CONTAINER)):
            match = pattern.search(line)
            if match and key not in stated:
                stated[key] = match.group(1)
    if not out:
        raise NotesError("no '## TensorRT-LLM Release X' section")
    return out


def release_facts(sections: list[tuple[str, dict[str, str]]]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Oldest-first versions and, per version, its facts ({item: {value, from}}), carried forward."""
    ordered = sorted(sections, key=lambda s: Version(s[0]))
    if len({Version(v) for v, _ in ordered}) != len(ordered):
        raise NotesError("a release is listed twice")
    current: dict[str, dict[str, str]] = {}
    facts: dict[str, dict[str, Any]] = {}
    for version, stated in ordered:
        container = stated.get("container")
        if container is not None and container in CONTAINER_CUDA:
            derived = CONTAINER_CUDA[container]
            if "cuda" in stated and stated["cuda"] != derived:
                raise NotesError(f"{version}: CUDA {stated['cuda']} stated, container {container} has {derived}")
            stated = {"cuda": derived, **stated}
        if "cuda" in stated and "container" not in stated:
            current.pop("container", None)  # a new CUDA without a container: the old container is not it
        for key, value in stated.items():
            current[key] = {"value": value, "from": version}
        release: dict[str, Any] = {k: dict(v) for k, v in current.items()}
        cuda = current.get("cuda")
        if cuda is not None:
            v = Version(cuda["value"])
            if v.major in DRIVER_FLOOR:
                release["driver_floor"] = {"value": DRIVER_FLOOR[v.major], "from": cuda["from"]}
            ga = DRIVER_GA.get(f"{v.major}.{v.minor}")
            if ga is not None:
                release["driver_ga"] = {"value": ga, "from": cuda["from"]}
        facts[version] = release
    return [v for v, _ in ordered], facts


def render(versions: list[str], facts: dict[str, dict[str, Any]]) -> str:
    """The history file: one release per line, one run per line (diff-friendly, deterministic)."""
    def dumps(value: Any) -> str:
        return json.dumps(value, separators=(", ", ": "), ensure_ascii=False)

    items = sorted({name for f in facts.values() for name in f})
    blocks = []
    for name in items:
        runs: list[dict[str, Any]] = []
        for version in versions:
            attrs = facts[version].get(name)
            if attrs is None:
                continue
            if runs and runs[-1]["last"] == _previous(versions, version) and \
                    {k: runs[-1][k] for k in attrs} == attrs:
                runs[-1]["last"] = version
            else:
                runs.append({"first": version, "last": version, **attrs})
        blocks.append(f"  {dumps(name)}: [\n" + ",\n".join("   " + dumps(r) for r in runs) + "\n  ]")
    releases = ",\n".join("  " + dumps({"version": v, "file": "release-notes.md", "sha256": "", "uploaded": "",
                                        "yanked": False}) for v in versions)
    return ("{\n" + f' "format": {FORMAT},\n "engine": "tensorrt-llm",\n "package": "tensorrt-llm",\n'
            f' "tool": {dumps(TOOL)},\n "tool_version": "1",\n "releases": [\n{releases}\n ],\n'
            ' "stack": {\n' + ",\n".join(blocks) + "\n }\n}\n")


def _previous(versions: list[str], version: str) -> str | None:
    i = versions.index(version)
    return versions[i - 1] if i else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release-notes", type=Path, required=True, help="the engine's release-notes.md")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help="default: matrices/history/tensorrt-llm-stack.json")
    args = parser.parse_args(argv)
    path: Path = args.release_notes
    try:
        if not path.is_file() or path.stat().st_size > MAX_BYTES:
            raise NotesError("not a regular file of at most 4 MiB")
        versions, facts = release_facts(parse_notes(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, NotesError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 2
    text = render(versions, facts)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o644)
    os.replace(tmp, args.output)
    stated = sum(1 for f in facts.values() if "cuda" in f)
    print(f"{len(versions)} releases ({versions[0]}-{versions[-1]}), {stated} with a CUDA version; wrote "
          f"{args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
