"""The machine's fingerprint: GPUs, driver, CUDA, links, engine versions and how completely each is installed.

Read through NVML and package metadata only (no nvidia-smi or nvcc subprocess, no torch import),
so it takes milliseconds. Anything that cannot be read becomes a reason in the fingerprint,
never an exception: a machine with no GPU still has a valid fingerprint.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..catalog.registry import kb_engine_names
from ..common.errors import InputError
from ..common.inputs import bool_field, int_field, load_file, text_field
from ..common.versions import is_version, normalize_package
from .environment import engine_env, env_field
from .installs import EngineInstall, engine_installs, installs_field
from .stack import cuda_runtime_version, installed_packages

SCHEMA = 1

_ARCHITECTURES = {
    2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing",
    7: "ampere", 8: "ada", 9: "hopper", 10: "blackwell",
}
# nvmlDeviceGetTopologyCommonAncestor levels, named as `nvidia-smi topo -m` does.
_TOPOLOGY = {0: "SELF", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    uuid: str | None = None
    architecture: str | None = None
    compute_capability: str | None = None
    memory_mib: int | None = None
    pcie_generation: int | None = None
    pcie_width: int | None = None
    ecc: bool | None = None
    mig: bool | None = None
    persistence: bool | None = None
    vbios: str | None = None


@dataclass(frozen=True)
class Link:
    a: int
    b: int
    kind: str  # "nvlink" or "pcie"
    path: str | None = None  # nvidia-smi topo -m style: PIX, PXB, PHB, NODE, SYS


@dataclass(frozen=True)
class Fingerprint:
    name: str | None = None
    gpus: tuple[GPU, ...] = ()
    driver: str | None = None
    cuda_driver: str | None = None
    cuda_runtime: str | None = None
    links: tuple[Link, ...] = ()
    interconnect: str | None = None
    packages: Mapping[str, str] = field(default_factory=dict, hash=False)
    installs: Mapping[str, EngineInstall] = field(default_factory=dict, hash=False)  # engine -> its requirements met
    os: str | None = None
    libc: str | None = None
    python: str | None = None
    container: str | None = None
    cuda_visible_devices: str | None = None
    env: Mapping[str, str] = field(default_factory=dict, hash=False)  # environment.py: what configures the engines
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["packages"] = dict(self.packages)
        data["installs"] = {name: install.to_dict() for name, install in self.installs.items()}
        data["env"] = dict(self.env)
        data["params"] = dict(self.params)
        return {"schema": SCHEMA, **data}

    def describe_gpus(self) -> str:
        if not self.gpus:
            return "no GPU"
        names: dict[str, int] = {}
        for gpu in self.gpus:
            names[gpu.name] = names.get(gpu.name, 0) + 1
        return ", ".join(f"{n} x {name}" if n > 1 else name for name, n in names.items())

    def summary(self) -> str:
        parts = [self.describe_gpus()]
        if self.driver:
            parts.append(f"driver {self.driver}")
        if self.cuda_driver:
            parts.append(f"CUDA driver {self.cuda_driver}")
        if self.cuda_runtime:
            parts.append(f"CUDA runtime {self.cuda_runtime}")
        if self.interconnect:
            parts.append(self.interconnect)
        shown = (*kb_engine_names(), "torch")
        engines = [f"{k} {v}" for k, v in self.packages.items() if k in shown]
        return ", ".join(parts + engines)


# --------------------------------------------------------------------------- live collection


def collect(name: str | None = None) -> Fingerprint:
    """Fingerprint this machine. Never raises: what cannot be read is explained in ``reasons``."""
    reasons: list[str] = []
    gpus: tuple[GPU, ...] = ()
    links: tuple[Link, ...] = ()
    driver = cuda_driver = None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    with nvml(reasons) as pynvml:
        if pynvml is not None:
            driver, cuda_driver, gpus, links = _collect_nvml(pynvml, visible, reasons)
    packages, installs = installed_packages(reasons), engine_installs(reasons)  # installs.py: declared requirements met
    cuda_runtime = cuda_runtime_version(packages)
    if cuda_runtime is None and "torch" in packages:
        reasons.append(f"torch {packages['torch']} is a CPU build (no CUDA runtime)")
    libc_name, libc_version = platform.libc_ver()
    return Fingerprint(
        name=name or os.environ.get("GPUCOMPAT_RUNNER") or socket.gethostname(),
        gpus=gpus,
        driver=driver,
        cuda_driver=cuda_driver,
        cuda_runtime=cuda_runtime,
        links=links,
        interconnect=_interconnect(gpus, links),
        packages=packages,
        installs=installs,
        os=platform.platform(),
        libc=f"{libc_name} {libc_version}".strip() or None,
        python=platform.python_version(),
        container=detect_container(),
        cuda_visible_devices=visible,
        env=engine_env(),
        reasons=tuple(dict.fromkeys(reasons)),  # one unreadable METADATA is found by two readers
    )


@contextlib.contextmanager
def nvml(reasons: list[str] | None = None) -> Iterator[Any]:
    """``pynvml`` initialised for the block and shut down after it (a failing shutdown ignored); None when NVML
    cannot start here (no nvidia-ml-py, no driver), with why added to ``reasons``. Every NVML reader of the package
    opens it this one way, so none leaves it initialised or fails on a machine without it."""
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError as exc:  # pragma: no cover - a core dependency
        if reasons is not None:
            reasons.append(f"NVML not available: {exc}")
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        if reasons is not None:
            reasons.append(f"NVML not available: {_nvml_error(exc)}")
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def nvml_handle(pynvml: Any, gpu: str) -> Any:
    """NVML's handle of a GPU named as ``CUDA_VISIBLE_DEVICES`` names it: an index, or a UUID (str or bytes, as
    the binding wants). NVML errors propagate: the caller knows what a GPU it cannot find means."""
    if gpu.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(gpu))
    try:
        return pynvml.nvmlDeviceGetHandleByUUID(gpu)
    except Exception:
        return pynvml.nvmlDeviceGetHandleByUUID(gpu.encode())


def _nvml_error(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.replace("\n", " ")


def _quiet(fn: Any, *args: Any) -> Any:
    """Call an NVML query that a GPU, driver or VM may not support; None instead of an error."""
    try:
        return fn(*args)
    except Exception:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _collect_nvml(
    nvml: Any, visible: str | None, reasons: list[str]
) -> tuple[str | None, str | None, tuple[GPU, ...], tuple[Link, ...]]:
    driver = _text(_quiet(nvml.nvmlSystemGetDriverVersion))
    raw_cuda = _quiet(nvml.nvmlSystemGetCudaDriverVersion_v2) or _quiet(nvml.nvmlSystemGetCudaDriverVersion)
    cuda_driver = f"{raw_cuda // 1000}.{(raw_cuda % 1000) // 10}" if raw_cuda else None
    count = _quiet(nvml.nvmlDeviceGetCount) or 0
    handles = []
    for i in range(count):
        handle = _quiet(nvml.nvmlDeviceGetHandleByIndex, i)
        if handle is not None:
            handles.append((i, handle, _text(_quiet(nvml.nvmlDeviceGetUUID, handle))))
    chosen = select_visible([(i, uuid) for i, _, uuid in handles], visible)
    if visible is not None and len(chosen) < len(handles):
        reasons.append(f"CUDA_VISIBLE_DEVICES={visible!r} shows {len(chosen)} of {len(handles)} GPUs")
    by_index = {i: (h, uuid) for i, h, uuid in handles}
    gpus = []
    for new_index, physical in enumerate(chosen):
        handle, uuid = by_index[physical]
        gpus.append(_describe_gpu(nvml, new_index, handle, uuid))
    links = []
    for a in range(len(chosen)):
        for b in range(a + 1, len(chosen)):
            links.append(_describe_link(nvml, a, b, by_index[chosen[a]][0], by_index[chosen[b]][0]))
    if count == 0:
        reasons.append("NVML found no GPU")
    return driver, cuda_driver, tuple(gpus), tuple(links)


def _describe_gpu(nvml: Any, index: int, handle: Any, uuid: str | None) -> GPU:
    cc = _quiet(nvml.nvmlDeviceGetCudaComputeCapability, handle)
    memory = _quiet(nvml.nvmlDeviceGetMemoryInfo, handle)
    ecc = _quiet(nvml.nvmlDeviceGetEccMode, handle)
    mig = _quiet(nvml.nvmlDeviceGetMigMode, handle)
    persistence = _quiet(nvml.nvmlDeviceGetPersistenceMode, handle)
    return GPU(
        index=index,
        name=_text(_quiet(nvml.nvmlDeviceGetName, handle)) or "unknown GPU",
        uuid=uuid,
        architecture=_ARCHITECTURES.get(_quiet(nvml.nvmlDeviceGetArchitecture, handle)),
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
        memory_mib=int(memory.total // (1024 * 1024)) if memory else None,
        pcie_generation=_quiet(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_width=_quiet(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        ecc=bool(ecc[0]) if ecc else None,
        mig=bool(mig[0]) if mig else None,
        persistence=bool(persistence) if persistence is not None else None,
        vbios=_text(_quiet(nvml.nvmlDeviceGetVbiosVersion, handle)),
    )


def _describe_link(nvml: Any, a: int, b: int, ha: Any, hb: Any) -> Link:
    level = _quiet(nvml.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
    nvlink_index = getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
    status = _quiet(nvml.nvmlDeviceGetP2PStatus, ha, hb, nvlink_index)
    is_nvlink = status == getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    return Link(a=a, b=b, kind="nvlink" if is_nvlink else "pcie", path="NV" if is_nvlink else _TOPOLOGY.get(level))


def select_visible(devices: list[tuple[int, str | None]], visible: str | None) -> list[int]:
    """Apply CUDA_VISIBLE_DEVICES to NVML's (index, uuid) list the way the CUDA runtime does.

    Entries are indices or (prefixes of) UUIDs; an invalid entry hides itself and every later one.
    """
    if visible is None:
        return [i for i, _ in devices]
    chosen: list[int] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry:
            break
        found = None
        if entry.lstrip("-").isdigit():
            idx = int(entry)
            found = idx if any(i == idx for i, _ in devices) else None
        else:
            hits = [i for i, uuid in devices if uuid and uuid.lower().startswith(entry.lower())]
            found = hits[0] if len(hits) == 1 else None
        if found is None or found in chosen:
            break
        chosen.append(found)
    return chosen


def _interconnect(gpus: tuple[GPU, ...], links: tuple[Link, ...]) -> str | None:
    if len(gpus) < 2 or not links:
        return None
    return "nvlink" if all(link.kind == "nvlink" for link in links) else "pcie"


def detect_container() -> str | None:
    if Path("/.dockerenv").exists():
        return "docker"
    if Path("/run/.containerenv").exists():
        return "podman"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    try:
        cgroup = Path("/proc/1/cgroup").read_text()
    except OSError:
        return None
    for marker in ("kubepods", "docker", "containerd", "lxc"):
        if marker in cgroup:
            return marker
    return None


# --------------------------------------------------------------------------- files (what-if input)

_TOP_KEYS = {f for f in Fingerprint.__dataclass_fields__} | {"schema", "gpu_count"}
_GPU_KEYS = set(GPU.__dataclass_fields__)
_LINK_KEYS = set(Link.__dataclass_fields__)
_VERSION_FIELDS = ("driver", "cuda_driver", "cuda_runtime")
_TEXT_FIELDS = ("os", "libc", "python", "container", "cuda_visible_devices")
_NUMBER_TEXT = ("python", "cuda_visible_devices")  # `python: 3.11`, `cuda_visible_devices: 0` mean their text
_GPU_TEXT = ("name", "uuid", "architecture", "vbios")  # strings only: a GPU named 123 is a mistake
_GPU_INTS = ("index", "memory_mib", "pcie_generation", "pcie_width")
_GPU_BOOLS = ("ecc", "mig", "persistence")
_MAX_GPUS = 4096  # `gpu_count` builds that many GPU records: a what-if count, not a memory bomb


def load(path: str | os.PathLike[str]) -> dict[str, Fingerprint]:
    """Load a fingerprint or a fleet file (``{fleet: {name: fingerprint}}``); returns name -> fingerprint."""
    source = str(path)
    data = load_file(path)
    if isinstance(data, Mapping) and "fleet" in data:
        fleet = data["fleet"]
        if not isinstance(fleet, Mapping) or not fleet:
            raise InputError(source, "fleet", "must map runner names to fingerprints")
        extra = set(data) - {"fleet"}
        if extra:
            raise InputError(source, str(sorted(map(str, extra))[0]), "unknown key next to 'fleet'")
        return {str(k): from_dict(v, source, f"fleet.{k}", default_name=str(k)) for k, v in fleet.items()}
    fp = from_dict(data, source, None, default_name=Path(source).stem)
    return {fp.name or Path(source).stem: fp}


def from_report(data: Mapping[str, Any], source: str, runner: str) -> Fingerprint:
    """A runner's fingerprint as a report records it: what the run added (``what_if``, ``host``, ``workers``) and
    packages recorded as not installed (null) are not facts of the machine; the rest is validated as usual."""
    known = {k: v for k, v in data.items() if k in _TOP_KEYS}
    if isinstance(known.get("packages"), Mapping):
        known["packages"] = {k: v for k, v in known["packages"].items() if v is not None}
    return from_dict(known, source, f"runners.{runner}", default_name=runner)


def _field(prefix: str | None, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def from_dict(data: Any, source: str = "<fingerprint>", prefix: str | None = None,
              default_name: str | None = None) -> Fingerprint:
    """Validate and build a fingerprint from the full (``env --json``) or the short hand-written form.

    Every field is type-checked here, because the matcher and the renderers trust a Fingerprint's types: a GPU
    name that is a number or a list would otherwise fail deep inside them with an AttributeError.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise InputError(source, prefix, "a fingerprint must be a mapping")
    unknown = set(map(str, data)) - _TOP_KEYS
    if unknown:
        raise InputError(source, _field(prefix, sorted(unknown)[0]), "unknown key")
    values: dict[str, Any] = {}
    for key in _VERSION_FIELDS:
        value = text_field(data.get(key), source, _field(prefix, key))
        if value is not None:
            if not is_version(value):
                raise InputError(source, _field(prefix, key), f"'{value}' is not a version")
            values[key] = value
    for key in _TEXT_FIELDS:
        values[key] = text_field(data.get(key), source, _field(prefix, key), numbers=key in _NUMBER_TEXT)
    gpus_raw = data.get("gpus") or []
    if not isinstance(gpus_raw, list):
        raise InputError(source, _field(prefix, "gpus"), "must be a list of GPUs")
    gpus = tuple(_gpu(g, i, source, _field(prefix, f"gpus[{i}]")) for i, g in enumerate(gpus_raw))
    count = int_field(data.get("gpu_count"), source, _field(prefix, "gpu_count"))
    if count is not None and count > _MAX_GPUS:
        raise InputError(source, _field(prefix, "gpu_count"), f"more than {_MAX_GPUS} GPUs")
    links_raw = data.get("links") or []
    if not isinstance(links_raw, list):
        raise InputError(source, _field(prefix, "links"), "must be a list")
    links = tuple(_link(link, source, _field(prefix, f"links[{i}]")) for i, link in enumerate(links_raw))
    interconnect = data.get("interconnect")
    if interconnect is not None and interconnect not in ("pcie", "nvlink"):
        raise InputError(source, _field(prefix, "interconnect"), f"'{interconnect}' is not pcie or nvlink")
    packages = data.get("packages") or {}
    if not isinstance(packages, Mapping):
        raise InputError(source, _field(prefix, "packages"), "must map package names to versions")
    norm_packages = {}
    for name, version in packages.items():
        where = _field(prefix, f"packages.{name}")
        text = text_field(version, source, where)
        if text is None or not is_version(text):
            raise InputError(source, where, f"'{version}' is not a version")
        norm_packages[normalize_package(str(name))] = text
    params = data.get("params") or {}
    if not isinstance(params, Mapping):
        raise InputError(source, _field(prefix, "params"), "must be a mapping of engine parameters")
    for name in params:
        if not isinstance(name, str):
            raise InputError(source, _field(prefix, f"params.{name}"), "a parameter name must be a string")
    reasons = data.get("reasons") or []
    if not isinstance(reasons, list):
        raise InputError(source, _field(prefix, "reasons"), "must be a list of strings")
    fp = Fingerprint(
        name=text_field(data.get("name"), source, _field(prefix, "name")) or default_name,
        gpus=gpus,
        links=links,
        interconnect=interconnect,
        packages=dict(sorted(norm_packages.items())),
        installs=installs_field(data.get("installs"), source, _field(prefix, "installs")),
        env=env_field(data.get("env"), source, _field(prefix, "env")),
        params=dict(params),
        reasons=tuple(str(text_field(r, source, _field(prefix, f"reasons[{i}]"))) for i, r in enumerate(reasons)),
        **values,
    )
    if count is not None and not gpus_raw:
        fp = replace(fp, gpus=tuple(GPU(index=i, name="unknown GPU") for i in range(count)))
    return fp


def _gpu(data: Any, index: int, source: str, where: str) -> GPU:
    if not isinstance(data, Mapping):
        raise InputError(source, where, "a GPU must be a mapping")
    unknown = set(map(str, data)) - _GPU_KEYS
    if unknown:
        raise InputError(source, f"{where}.{sorted(unknown)[0]}", "unknown key")
    values: dict[str, Any] = {key: text_field(data.get(key), source, f"{where}.{key}", numbers=False)
                              for key in _GPU_TEXT}
    values["compute_capability"] = text_field(data.get("compute_capability"), source, f"{where}.compute_capability")
    values.update({key: int_field(data.get(key), source, f"{where}.{key}") for key in _GPU_INTS})
    values.update({key: bool_field(data.get(key), source, f"{where}.{key}") for key in _GPU_BOOLS})
    if values["index"] is None:
        values["index"] = index
    values["name"] = values["name"] or "unknown GPU"
    cc = values["compute_capability"]
    if cc is not None and not is_version(cc):
        raise InputError(source, f"{where}.compute_capability", f"'{cc}' is not a compute capability")
    if values["architecture"]:
        values["architecture"] = values["architecture"].lower()
    return GPU(**values)


def _link(data: Any, source: str, where: str) -> Link:
    if not isinstance(data, Mapping) or set(map(str, data)) - _LINK_KEYS:
        raise InputError(source, where, "must be {a, b, kind, path}")
    for key in ("a", "b", "kind"):
        if data.get(key) is None:
            raise InputError(source, f"{where}.{key}", "required")
    kind = data["kind"]
    if kind not in ("pcie", "nvlink"):
        raise InputError(source, f"{where}.kind", f"'{kind}' is not pcie or nvlink")
    ends = [int_field(data[key], source, f"{where}.{key}") for key in ("a", "b")]
    return Link(a=int(ends[0] or 0), b=int(ends[1] or 0), kind=kind,
                path=text_field(data.get("path"), source, f"{where}.path"))
