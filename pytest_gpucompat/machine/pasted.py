"""A pasted environment read into the hand-written fingerprint form (``fingerprint.from_dict`` takes ``data``).

Users paste into issues what their tools print: vLLM's ``collect_env.py`` / ``vllm collect-env`` (PyTorch's
collect_env plus vLLM's section), SGLang's ``python3 -m sglang.check_env``, the ``nvidia-smi`` table, ``pip list`` /
``pip freeze`` / ``pip show``; often several in one text, inside Markdown fences or quotes, with Windows line ends.
``read_pasted`` reads what it recognises, says what it read (``read``) and what it could not (``unread``).

Bounded: a text over 8 MiB is refused, a line over 4,096 characters is skipped, at most 4,096 GPUs are read, and every
pattern is RE2's (linear time). Whatever the text, the only exception is ``InputError``.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import re2

from ..catalog.gpus import lookup
from ..catalog.registry import descriptor, kb_engine_names
from ..common.errors import InputError, visible
from ..common.versions import is_version, normalize_package
from .environment import recorded_prefixes, redact

MAX_TEXT_BYTES = 8 * 1024 * 1024
MAX_LINE = 4096
MAX_GPUS = 4096
MAX_NOTES = 200  # lines of ``read`` and of ``unread``
MAX_BLOCKS = 16  # GPU lists and topology matrices read from one paste: a real one has one or two of each

COLLECT_ENV = "vllm collect_env"
CHECK_ENV = "sglang check_env"
NVIDIA_SMI = "nvidia-smi"
PIP_LIST = "pip list"
EXPECTED = ("not a pasted environment: expected the output of `python collect_env.py` (or `vllm collect-env`), "
            "`python3 -m sglang.check_env`, `nvidia-smi`, or `pip list` / `pip freeze`")

_RENAMES = {"flashinfer": "flashinfer-python", "pytorch": "torch"}  # module or display names -> distributions
_ANSI = re2.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re2.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_ENV_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_GPU_KEY = re2.compile(r"gpu ([0-9][0-9,\- ]*)( compute capability)?")
_SMI_HEADER = re2.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)")
_SMI_CUDA = re2.compile(r"CUDA Version:\s*(\S+)")
_SMI_GPU = re2.compile(r"\s*([0-9]{1,4})\s+(.*\S)\s+(On|Off|WDDM|TCC|N/A)\s*")
_BUS_ID = re2.compile(r"\s*[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]\b.*")
_SMI_MEMORY = re2.compile(r"\s*([0-9]{1,9})MiB\s*/\s*([0-9]{1,9})MiB\s*")
_NVLINK = re2.compile(r"NV[0-9]+")
_PCIE_PATHS = {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"}
_CHECK_ENV_KEYS = {"python", "cuda available", "cuda driver version", "pytorch", "nvcc", "cuda_home",
                   "rocm driver version", "hipcc"}
_COLLECT_ENV_KEYS = {"pytorch version", "is debug build", "cuda used to build pytorch", "rocm used to build pytorch",
                     "gpu models and configuration", "nvidia driver version", "is cuda available",
                     "cuda runtime version", "vllm version", "vllm build flags"}
_NOT_COLLECTED = ("could not collect", "n/a", "no cuda", "none", "")


@dataclass(frozen=True)
class Pasted:
    data: dict[str, Any] = field(hash=False)
    formats: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Line:
    text: str
    key: str | None  # the text before the first colon, lower case, single-spaced
    value: str  # the text after it, stripped


@dataclass
class _Gpu:
    name: str
    compute_capability: str | None = None
    memory_mib: int | None = None

    def score(self) -> int:
        return (self.compute_capability is not None) + (self.memory_mib is not None) - self.name.endswith("...")


@dataclass
class _Facts:
    """What the readers found, each fact with where it came from, before the choices between them."""

    formats: list[str] = field(default_factory=list)
    driver: list[tuple[str, str]] = field(default_factory=list)  # (value, where)
    cuda_driver: list[tuple[str, str]] = field(default_factory=list)
    cuda_runtime: list[tuple[str, str]] = field(default_factory=list)
    python: list[tuple[str, str]] = field(default_factory=list)
    packages: list[tuple[str, str, str]] = field(default_factory=list)  # (name, version, where)
    gpu_lists: list[tuple[str, list[_Gpu]]] = field(default_factory=list)  # (format, GPUs)
    topology: list[tuple[int, str | None, str]] = field(default_factory=list)  # (GPUs, interconnect, what it shows)
    env: dict[str, str] = field(default_factory=dict)
    index_budget: int = 4 * MAX_GPUS  # GPU indices check_env lines may name in all: "GPU 0-4095" a line is no bomb
    read: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)

    def recognise(self, fmt: str) -> None:
        if fmt not in self.formats:
            self.formats.append(fmt)


def read_pasted(text: str, source: str) -> Pasted:
    """Read a pasted environment; InputError (one line) for a text that is none of the formats or too large."""
    if not isinstance(text, str):
        raise InputError(source, None, f"a pasted environment must be text, not {type(text).__name__}")
    if len(text) > MAX_TEXT_BYTES or len(text.encode("utf-8", "replace")) > MAX_TEXT_BYTES:
        raise InputError(source, None, f"too large (more than {MAX_TEXT_BYTES} bytes): paste the tools' output only")
    try:
        return _read(text, source)
    except InputError:
        raise
    except Exception as exc:  # a reader's bug must not become a traceback for the user
        raise InputError(source, None, f"internal error reading the paste: {type(exc).__name__}") from None


def _read(text: str, source: str) -> Pasted:
    facts = _Facts()
    lines, skipped = _lines(text)
    if skipped:
        facts.unread.append(f"{skipped} line(s) longer than {MAX_LINE} characters skipped")
    _collect_env(lines, facts)
    _check_env(lines, facts)
    _nvidia_smi(lines, facts)
    _pip(lines, facts)
    _topology(lines, facts)
    if not facts.formats:
        raise InputError(source, None, EXPECTED)
    data = _choose(facts)
    return Pasted(data=data, formats=tuple(facts.formats), read=_clean(facts.read), unread=_clean(facts.unread))


def _clean(lines: Iterable[str]) -> tuple[str, ...]:
    """One line each, terminal-safe, each once; at most MAX_NOTES of them."""
    out = tuple(dict.fromkeys(visible(" ".join(line.split()))[:300] for line in lines))
    if len(out) > MAX_NOTES:
        return (*out[:MAX_NOTES], f"... and {len(out) - MAX_NOTES} more")
    return out


def _lines(text: str) -> tuple[list[_Line], int]:
    """The text as lines: no surrogates, ANSI escapes or control characters, Markdown quotes and fences stripped."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    text = _CONTROL.sub(" ", _ANSI.sub("", text))
    out: list[_Line] = []
    skipped = 0
    for raw in text.splitlines():
        if len(raw) > MAX_LINE:
            skipped += 1
            out.append(_Line("", None, ""))
            continue
        line = raw.lstrip("> \t").rstrip()  # Markdown quotes, nested ones ("> > text") too
        if line.startswith("```") or line.startswith("~~~"):
            line = ""
        key: str | None = None
        value = ""
        head, colon, tail = line.partition(":")
        if colon and 0 < len(head.strip()) <= 64:
            key = " ".join(head.split()).lower()
            value = tail.strip()
        out.append(_Line(line, key, value))
    return out, skipped


def _is_name(text: str) -> bool:
    """A distribution's name as pip prints it (a str test: RE2's call costs more than the test)."""
    return 0 < len(text) <= 128 and text[0].isascii() and text[0].isalnum() and _NAME_CHARS.issuperset(text)


def _is_env_name(text: str) -> bool:
    return 0 < len(text) <= 128 and "A" <= text[0] <= "Z" and _ENV_CHARS.issuperset(text)


def _first(value: str) -> str:
    return value.split()[0] if value.split() else ""


def _version(value: str) -> str | None:
    token = _first(value)
    return token if token and is_version(token) else None


def _engine_distributions() -> set[str]:
    """The distributions of the engines the knowledge base knows: whose "<engine> Version" line collect_env has."""
    found = (descriptor(name) for name in kb_engine_names())
    return {normalize_package(d.distribution) for d in found if d is not None}


def _package_name(name: str) -> str:
    norm = normalize_package(name)
    return _RENAMES.get(norm, norm)


def _cuda_of_torch(version: str) -> str | None:
    """The CUDA release in torch's local tag: 2.4.0+cu121 -> 12.1."""
    local = version.partition("+")[2]
    digits = local[2:]
    if local.startswith("cu") and digits.isdigit() and 2 <= len(digits) <= 4:
        return f"{int(digits[:-1])}.{digits[-1]}"
    return None


def _torch(version: str, where: str, facts: _Facts) -> None:
    facts.packages.append(("torch", version, where))
    cuda = _cuda_of_torch(version)
    if cuda is not None:
        facts.cuda_runtime.append((cuda, f"torch's +cu tag in {version}"))
    elif "+rocm" in version:
        facts.unread.append(f"torch {version} is a ROCm build: no CUDA runtime")


def _driver(value: str, label: str, facts: _Facts) -> None:
    """A driver-version line (collect_env's and check_env's label for it): its version, or said unread."""
    version = _version(value)
    if version:
        facts.driver.append((version, label))
    else:
        facts.unread.append(f"{label}: '{value}'")


# --------------------------------------------------------------------------- vLLM's (PyTorch's) collect_env


def _collect_env(lines: list[_Line], facts: _Facts) -> None:
    if not any(line.key in _COLLECT_ENV_KEYS or line.text.startswith(("[pip3] ", "[conda] "))
               or line.text.startswith("Collecting environment information") for line in lines):
        return
    facts.recognise(COLLECT_ENV)
    where = COLLECT_ENV
    engines = _engine_distributions()
    gpus: list[_Gpu] = []
    for i, line in enumerate(lines):
        key, value = line.key, line.value
        if line.text.startswith("[pip3] "):
            name, sep, pinned = line.text[7:].strip().partition("==")
            if sep and _is_name(name) and is_version(pinned.strip()):
                facts.packages.append((_package_name(name), pinned.strip(), "[pip3]"))
        elif line.text.startswith("[conda] "):
            parts = line.text[8:].split()
            if len(parts) >= 2 and _is_name(parts[0]) and is_version(parts[1]):
                facts.packages.append((_package_name(parts[0]), parts[1], "[conda]"))
        elif key == "pytorch version":
            version = _version(value)
            if version:
                _torch(version, "PyTorch version", facts)
            else:
                facts.unread.append(f"PyTorch version '{value}' is not a version")
        elif key == "cuda used to build pytorch":
            version = _version(value)
            if version:
                facts.cuda_runtime.append((version, "CUDA used to build PyTorch"))
            elif value.lower() in ("none", "n/a"):
                facts.unread.append(f"CUDA used to build PyTorch: {value} (a CPU or ROCm build of torch)")
        elif key == "rocm used to build pytorch" and _version(value):
            facts.unread.append(f"torch was built for ROCm {_first(value)}: no CUDA runtime")
        elif key == "cuda runtime version" and _version(value):
            facts.unread.append(f"CUDA runtime version {_first(value)} is the toolkit's, not torch's build: not used")
        elif key == "nvidia driver version":
            _driver(value, "Nvidia driver version", facts)
        elif key == "is cuda available" and value.lower() == "false":
            facts.unread.append("collect_env says CUDA is not available to torch")
        elif key == "python version" and _version(value):
            facts.python.append((_first(value), "Python version"))
        elif key is not None and key.endswith(" version") and _package_name(key[:-8]) in engines:
            label = line.text.partition(":")[0].strip()  # "vLLM Version": the engine's section of collect_env
            version = _version(value)
            if version:
                facts.packages.append((_package_name(key[:-8]), version, label))
            else:
                facts.unread.append(f"{label} '{value}' is not a version")
        elif key == "gpu models and configuration" and len(facts.gpu_lists) < MAX_BLOCKS:
            gpus = _collect_env_gpus(lines, i, value, facts)
            if gpus:
                facts.gpu_lists.append((where, gpus))
        elif not key and "=" in line.text and " " not in line.text:
            name, _, val = line.text.partition("=")
            if _is_env_name(name) and name.startswith(recorded_prefixes()):
                facts.env[name] = redact(name, val)


def _collect_env_gpus(lines: list[_Line], i: int, value: str, facts: _Facts) -> list[_Gpu]:
    """``GPU models and configuration:`` then ``GPU n: name`` lines (nvidia-smi -L), or one name on its line."""
    gpus: list[_Gpu] = []
    first: list[_Line] = []
    if value.lower() in _NOT_COLLECTED:
        if value:
            facts.unread.append(f"GPU models and configuration: {value}")
    elif value.lower().startswith("gpu ") and ":" in value:
        head, _, tail = value.partition(":")
        first = [_Line(value, " ".join(head.split()).lower(), tail.strip())]
    else:
        return [_Gpu(value)]
    for line in _following(first, lines, i + 1):
        if line.text.startswith("MIG "):
            continue
        key = line.key or ""
        if not key.startswith("gpu ") or not key[4:].isdigit() or not line.value:
            break
        if len(gpus) >= MAX_GPUS:
            facts.unread.append(f"more than {MAX_GPUS} GPUs listed: the rest not read")
            break
        gpus.append(_Gpu(line.value.partition(" (UUID:")[0].strip()))
    return gpus


def _following(first: list[_Line], lines: list[_Line], start: int) -> Iterator[_Line]:
    yield from first
    for j in range(start, len(lines)):
        yield lines[j]


# --------------------------------------------------------------------------- SGLang's check_env


def _check_env(lines: list[_Line], facts: _Facts) -> None:
    i = 0
    while i < len(lines):
        if lines[i].key not in _CHECK_ENV_KEYS:
            i += 1
            continue
        end = i
        while end < len(lines) and (lines[end].key is not None or _version(lines[end].text)) \
                and not lines[end].text.lower().startswith("nvidia topology"):
            end += 1
        region = lines[i:end]
        if sum(line.key in _CHECK_ENV_KEYS for line in region) >= 2:
            facts.recognise(CHECK_ENV)
            _check_env_region(region, facts)
        i = max(end, i + 1)


def _check_env_region(region: list[_Line], facts: _Facts) -> None:
    names: dict[int, _Gpu] = {}
    absent: list[str] = []
    for line in region:
        key, value = line.key, line.value
        if key is None:
            continue  # the driver version printed a second time on its own line (check_env of mid-2024)
        gpu_key = _GPU_KEY.fullmatch(key) if key.startswith("gpu ") else None
        if gpu_key:
            indices = _indices(gpu_key.group(1)) if facts.index_budget > 0 else []
            facts.index_budget -= len(indices) + 1
            for index in indices:
                if len(names) >= MAX_GPUS and index not in names:
                    facts.unread.append(f"more than {MAX_GPUS} GPUs listed: the rest not read")
                    break
                gpu = names.setdefault(index, _Gpu(""))
                if gpu_key.group(2):
                    gpu.compute_capability = value if is_version(value) else gpu.compute_capability
                else:
                    gpu.name = value
        elif key == "python" and _version(value):
            facts.python.append((_first(value), "Python"))
        elif key == "cuda driver version":
            _driver(value, "CUDA Driver Version", facts)
        elif key == "pytorch":
            version = _version(value)
            if version:
                _torch(version, "PyTorch", facts)
        elif key == "nvcc" and "release" in value:
            release = value.partition("release")[2].strip().split(",")[0]
            facts.unread.append(f"NVCC release {release} is the toolkit's, not torch's build: not used")
        elif key == "cuda available" and value.lower() == "false":
            facts.unread.append("check_env says CUDA is not available")
        elif " " not in key and _is_name(key) and key not in _CHECK_ENV_KEYS:
            if is_version(value):
                facts.packages.append((_package_name(key), value, CHECK_ENV))
            elif value.lower() == "module not found":
                absent.append(key)
    if absent:
        facts.unread.append(f"not installed per check_env: {', '.join(absent)}")
    gpus = [names[i] for i in sorted(names) if names[i].name]
    if gpus:
        facts.gpu_lists.append((CHECK_ENV, gpus))


def _indices(text: str) -> list[int]:
    """``0,1,2,3`` or ``0-7``: the GPU indices check_env lists for one name, at most MAX_GPUS + 1 of them."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or len(low) > 6 or (dash and (not high.isdigit() or len(high) > 6)):
            continue
        start, stop = int(low), int(high) if dash else int(low)
        out.extend(range(start, min(stop, start + MAX_GPUS - len(out)) + 1))
        if len(out) > MAX_GPUS:
            break
    return out[:MAX_GPUS + 1]  # one more than the cap: the reader says the rest was not read


# --------------------------------------------------------------------------- nvidia-smi


def _nvidia_smi(lines: list[_Line], facts: _Facts) -> None:
    tables: list[list[_Gpu]] = []
    current: list[_Gpu] | None = None
    truncated: list[str] = []
    rows = 0  # GPU rows read in all tables: bounded, whatever the paste repeats
    for i, line in enumerate(lines):
        text = line.text
        if "NVIDIA-SMI" in text and "Driver Version:" in text:
            header = _SMI_HEADER.search(text)
            if header is None:
                continue
            facts.recognise(NVIDIA_SMI)
            if is_version(header.group(2)):
                facts.driver.append((header.group(2), "nvidia-smi Driver Version"))
            cuda = _SMI_CUDA.search(text)
            if cuda and is_version(cuda.group(1)):
                facts.cuda_driver.append((cuda.group(1), "nvidia-smi CUDA Version"))
            else:
                facts.unread.append("nvidia-smi header without a CUDA Version")
            current = []
            tables.append(current)
            continue
        if not text.startswith("|") or text.count("|") < 3 or rows >= 2 * MAX_GPUS:
            continue
        cells = text.split("|")
        if len(cells) < 4 or ":" not in cells[2] or not _BUS_ID.fullmatch(cells[2]):
            continue
        row = _SMI_GPU.fullmatch(cells[1])
        if row is None:
            continue
        rows += 1
        facts.recognise(NVIDIA_SMI)
        if current is None:  # a table pasted without its header
            current = []
            tables.append(current)
        if len(current) >= MAX_GPUS:
            continue
        name = row.group(2).strip()
        if name.endswith("..."):
            truncated.append(name)
        gpu = _Gpu(name)
        following = lines[i + 1].text if i + 1 < len(lines) else ""
        memory_cells = following.split("|")
        if len(memory_cells) >= 3:
            memory = _SMI_MEMORY.fullmatch(memory_cells[2])
            if memory:
                gpu.memory_mib = int(memory.group(2))
        current.append(gpu)
    if truncated:
        names = ", ".join(repr(n) for n in dict.fromkeys(truncated))
        facts.unread.append(f"GPU names truncated by nvidia-smi: {names}")
    tables = [t for t in tables if t]
    if len(tables) > 1:
        facts.unread.append(f"{len(tables)} nvidia-smi tables: only the first is read")
    if tables:
        facts.gpu_lists.append((NVIDIA_SMI, tables[0]))


# --------------------------------------------------------------------------- pip list / pip freeze / pip show


def _pip(lines: list[_Line], facts: _Facts) -> None:
    in_list = False
    for i, line in enumerate(lines):
        text = line.text
        words = text.split()
        if words[:2] == ["Package", "Version"] and i + 1 < len(lines) and lines[i + 1].text.startswith("---"):
            in_list = True
            facts.recognise(PIP_LIST)
            continue
        if in_list:
            if text.startswith("---"):
                continue
            if len(words) >= 2 and _is_name(words[0]) and is_version(words[1]):
                facts.packages.append((_package_name(words[0]), words[1], PIP_LIST))
                continue
            in_list = False
        if "==" in text and " " not in text and not text.startswith("["):
            name, _, version = text.partition("==")
            if _is_name(name) and is_version(version):
                facts.recognise(PIP_LIST)
                facts.packages.append((_package_name(name), version, "pip freeze"))
        elif line.key == "name" and i + 1 < len(lines) and lines[i + 1].key == "version":
            name, version = line.value, lines[i + 1].value
            if _is_name(name) and is_version(version):
                facts.recognise(PIP_LIST)
                facts.packages.append((_package_name(name), version, "pip show"))


# --------------------------------------------------------------------------- topology matrix (nvidia-smi topo -m)


def _topology(lines: list[_Line], facts: _Facts) -> None:
    for i, line in enumerate(lines):
        if not line.text.startswith("GPU0") or len(facts.topology) >= MAX_BLOCKS:
            continue
        words = line.text.split()
        if words[0] != "GPU0" or (len(words) > 1 and words[1] == "X"):
            continue
        count = 0
        while count < len(words) and count < MAX_GPUS and words[count] == f"GPU{count}":
            count += 1
        paths: list[str] = []
        for j in range(count):  # the rows GPU0, GPU1, ... in order; any other line ends the matrix
            if i + 1 + j >= len(lines) or not lines[i + 1 + j].text.startswith(f"GPU{j}"):
                break
            cells = lines[i + 1 + j].text.split()
            if cells[0] != f"GPU{j}":
                break
            paths.extend(cell for cell in cells[1:1 + count] if cell != "X")
        if count < 2:
            facts.topology.append((count, None, "one GPU"))
            continue
        nvlink = [p for p in paths if _NVLINK.fullmatch(p)]
        pcie = [p for p in paths if p in _PCIE_PATHS]
        if nvlink and not pcie:
            facts.topology.append((count, "nvlink", f"{nvlink[0]} between the GPUs"))
        elif nvlink:
            facts.topology.append((count, "pcie", f"NVLink ({nvlink[0]}) between some GPUs only, "
                                                  f"{pcie[0]} between others"))
        elif pcie:
            facts.topology.append((count, "pcie", f"only {'/'.join(dict.fromkeys(pcie))} between the GPUs"))
        else:
            facts.topology.append((count, None, "no links read"))


# --------------------------------------------------------------------------- choosing between the readers


def _single(values: list[tuple[str, str]], what: str, facts: _Facts) -> str | None:
    if not values:
        return None
    value, where = values[0]
    facts.read.append(f"{what} {value} ({where})")
    for other, other_where in values[1:]:
        if other != value:
            facts.unread.append(f"{what} {other} ({other_where}) differs from {value} ({where}): used {value}")
    return value


def _choose(facts: _Facts) -> dict[str, Any]:
    data: dict[str, Any] = {}
    gpus = _choose_gpus(facts)
    topology = facts.topology[0] if facts.topology else None
    if gpus:
        data["gpus"] = gpus
    elif topology is not None and topology[0] > 0:
        data["gpu_count"] = topology[0]
        facts.read.append(f"{topology[0]} GPU(s) in the topology matrix, names not pasted")
    driver_values = sorted(facts.driver, key=lambda v: not v[1].startswith(NVIDIA_SMI))
    for key, values, what in (("driver", driver_values, "driver"),
                              ("cuda_driver", facts.cuda_driver, "CUDA driver"),
                              ("cuda_runtime", sorted(facts.cuda_runtime, key=lambda v: v[1].startswith("torch's")),
                               "CUDA runtime"),
                              ("python", facts.python, "Python")):
        value = _single(values, what, facts)
        if value is not None:
            data[key] = value
    packages = _choose_packages(facts)
    if packages:
        data["packages"] = packages
    if topology is not None and topology[1] is not None:
        data["interconnect"] = topology[1]
        facts.read.append(f"interconnect {topology[1]} (topology matrix of {topology[0]} GPUs: {topology[2]})")
    if facts.env:
        data["env"] = dict(sorted(facts.env.items()))
        facts.read.append(f"environment: {', '.join(sorted(facts.env))}")
        if "CUDA_VISIBLE_DEVICES" in facts.env:
            data["cuda_visible_devices"] = facts.env["CUDA_VISIBLE_DEVICES"]
    if "driver" not in data:
        facts.unread.append("no driver version")
    if "cuda_runtime" not in data and "torch" in data.get("packages", {}):
        facts.unread.append(f"torch {data['packages']['torch']} names no CUDA build: no CUDA runtime")
    if "gpus" not in data and "gpu_count" not in data:
        facts.unread.append("no GPU")
    return data


def _choose_packages(facts: _Facts) -> dict[str, str]:
    """One version a package: the first reader's (the tools' own lines before pip's, pip before conda), or a later
    one with the same release and a local tag (``torch==2.4.0`` and ``PyTorch version: 2.4.0+cu121``)."""
    order = {"[conda]": 2, "[pip3]": 1}
    chosen: dict[str, tuple[str, str]] = {}
    for name, version, where in sorted(facts.packages, key=lambda p: order.get(p[2], 0)):
        if name not in chosen:
            chosen[name] = (version, where)
            continue
        kept, kept_where = chosen[name]
        if kept == version:
            continue
        if kept.partition("+")[0] == version.partition("+")[0] and "+" in version and "+" not in kept:
            chosen[name] = (version, where)
        elif kept.partition("+")[0] != version.partition("+")[0]:
            facts.unread.append(f"{name} {version} ({where}) differs from {kept} ({kept_where}): used {kept}")
    for name, (version, where) in chosen.items():
        facts.read.append(f"{name} {version} ({where})")
    return dict(sorted((name, version) for name, (version, _) in chosen.items()))


def _same_gpu(a: _Gpu, b: _Gpu) -> bool:
    if a.name == b.name:
        return True
    for short, full in ((a.name, b.name), (b.name, a.name)):
        if short.endswith("...") and full.startswith(short[:-3]):
            return True
    return False


def _choose_gpus(facts: _Facts) -> list[dict[str, Any]]:
    """One list of GPUs, however many formats listed them: the list with the most GPUs, then the most information;
    another list of the same GPUs fills in what it lacks (a truncated name, memory, compute capability)."""
    lists = facts.gpu_lists
    if not lists:
        return []
    ranked = sorted(lists, key=lambda fl: (-len(fl[1]), -sum(g.score() for g in fl[1])))
    fmt, base = ranked[0]
    for other_fmt, other in ranked[1:]:
        same = len(other) == len(base) and all(_same_gpu(a, b) for a, b in zip(base, other))
        if not same:
            facts.unread.append(f"the GPUs of {other_fmt} ({_describe(other)}) are not those of {fmt} "
                                f"({_describe(base)}): used {fmt}'s")
            continue
        facts.unread.append(f"the {len(base)} GPU(s) of {other_fmt} are those of {fmt}: counted once")
        for gpu, extra in zip(base, other):
            if gpu.name.endswith("...") and not extra.name.endswith("..."):
                gpu.name = extra.name
            gpu.memory_mib = gpu.memory_mib if gpu.memory_mib is not None else extra.memory_mib
            gpu.compute_capability = gpu.compute_capability or extra.compute_capability
    facts.read.append(f"{len(base)} GPU(s): {_describe(base)} ({fmt})")
    out: list[dict[str, Any]] = []
    unknown: list[str] = []
    for gpu in base:
        entry: dict[str, Any] = {"name": gpu.name}
        model = lookup(gpu.name)
        if gpu.compute_capability is not None:
            entry["compute_capability"] = gpu.compute_capability
            if model is not None and model.compute_capability != gpu.compute_capability:
                facts.unread.append(f"the GPU catalog gives {gpu.name!r} compute capability "
                                    f"{model.compute_capability}, the paste {gpu.compute_capability}: used the paste's")
        elif model is not None:
            entry["compute_capability"] = model.compute_capability
        if model is not None and model.compute_capability == entry.get("compute_capability"):
            entry["architecture"] = model.architecture
        if model is None:
            unknown.append(gpu.name)
        if gpu.memory_mib is not None:
            entry["memory_mib"] = gpu.memory_mib
        out.append(entry)
    if base and base[0].compute_capability is None and "compute_capability" in out[0]:
        facts.read.append(f"compute capability {out[0]['compute_capability']} of {base[0].name!r} from the GPU catalog")
    if unknown:
        facts.unread.append(f"not in the GPU catalog (no compute capability): "
                            f"{', '.join(repr(n) for n in dict.fromkeys(unknown))}")
    return out


def _describe(gpus: list[_Gpu]) -> str:
    names: dict[str, int] = {}
    for gpu in gpus:
        names[gpu.name] = names.get(gpu.name, 0) + 1
    return ", ".join(f"{n} x {name}" if n > 1 else name for name, n in names.items())
