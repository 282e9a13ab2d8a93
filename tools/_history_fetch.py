"""Find an engine's releases on the package index (PEP 691 JSON simple API), pick one artifact per release, and bring
its Python sources and metadata into a per-artifact cache: wheels through HTTP Range requests (only the central
directory and the wanted members), sdists whole. Nothing is installed or imported.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import requests
from _history_zip import read_members
from packaging.tags import Tag
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

JSON_SIMPLE = "application/vnd.pypi.simple.v1+json"
TIMEOUT = 120
RETRIES = 3
SDIST_SUFFIXES = (".tar.gz", ".zip")
_REQUIREMENT_FILE = re.compile(r"^(requirements[^/]*\.txt|requirements/[^/]+\.txt|pyproject\.toml|PKG-INFO)$")


def default_index_url(explicit: str | None = None) -> str:
    """--index-url, else PIP_INDEX_URL, else pip's own default (read at run time so that no host is written here)."""
    if explicit:
        return explicit
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    from pip._internal.models.index import PyPI

    return PyPI.simple_url


@dataclass(frozen=True)
class Artifact:
    """The one file read for a release, as the index describes it (`uploaded`: the upload date, YYYY-MM-DD)."""

    filename: str
    url: str
    sha256: str
    size: int
    uploaded: str
    yanked: bool


@dataclass
class Release:
    """A version on the index; `error` (one line) when it could not be read, which the output keeps."""

    version: Version
    text: str
    artifact: Artifact | None
    error: str | None = None


class Counter:
    """Bytes fetched over the network, across threads, for the summary."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytes = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes += n


def list_releases(session: requests.Session, index_url: str, project: str, since: Version) -> list[Release]:
    """Every version >= `since` the index lists with at least one file, each with its chosen artifact (None: no
    usable file), in version order."""
    resp = session.get(index_url.rstrip("/") + f"/{project}/", headers={"Accept": JSON_SIMPLE}, timeout=TIMEOUT)
    resp.raise_for_status()
    by_version: dict[Version, list[dict]] = {}
    for info in resp.json().get("files", []):
        version = file_version(info.get("filename", ""))
        if version is not None and version >= since:
            by_version.setdefault(version, []).append(info)
    out = []
    for version in sorted(by_version):
        files = by_version[version]
        chosen = pick_artifact(files)
        artifact = None if chosen is None else Artifact(
            filename=chosen["filename"], url=chosen["url"], sha256=chosen.get("hashes", {}).get("sha256", ""),
            size=int(chosen.get("size") or 0), uploaded=str(chosen.get("upload-time", ""))[:10],
            yanked=bool(chosen.get("yanked")))
        out.append(Release(version, str(version), artifact, None if artifact else "no wheel or sdist on the index"))
    return out


def file_version(filename: str) -> Version | None:
    """The version in a wheel or sdist file name; None for other files or names that do not parse."""
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        if filename.endswith(SDIST_SUFFIXES):
            return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, ValueError):
        return None
    return None


def _wheel_rank(tags: frozenset[Tag]) -> tuple[int, int] | None:
    """Rank of a wheel for reading its Python: pure or x86_64 Linux; abi3 first, then the highest CPython."""
    best: tuple[int, int] | None = None
    for tag in tags:
        if tag.platform != "any" and not (tag.platform.startswith("manylinux") and tag.platform.endswith("x86_64")) \
                and not (tag.platform.startswith("linux") and tag.platform.endswith("x86_64")):
            continue
        minor = int(tag.interpreter[3:]) if re.fullmatch(r"cp3\d+", tag.interpreter) else 0
        rank = (2 if tag.abi in ("abi3", "none") else 1, minor)
        best = rank if best is None or rank > best else best
    return best


def pick_artifact(files: list[dict]) -> dict | None:
    """One file per release: the best-ranked wheel (a higher build tag wins, as for pip), else the sdist; a yanked
    file only when the release has nothing else."""
    def key(info: dict) -> tuple:
        name = info["filename"]
        unyanked = not info.get("yanked")
        if name.endswith(".whl"):
            _, _, build, tags = parse_wheel_filename(name)
            rank = _wheel_rank(tags)
            if rank is not None:
                return (unyanked, 1, rank, build, name)
            return (unyanked, -1, (0, 0), build, name)
        return (unyanked, 0, (0, 0), (), name)

    usable = [f for f in files if file_version(f.get("filename", "")) is not None]
    usable = [f for f in usable if key(f)[1] >= 0]
    return max(usable, key=key) if usable else None


def wanted_member(package: str) -> Callable[[str], bool]:
    """Wheel members to read: the package's Python files and the wheel's METADATA."""
    def want(name: str) -> bool:
        return (name.startswith(package + "/") and name.endswith(".py")) or \
            (name.endswith(".dist-info/METADATA") and name.count("/") == 1)
    return want


class RangeReader:
    """read(start, end) over HTTP Range requests, refusing a server that answers with the whole file."""

    def __init__(self, session: requests.Session, url: str, counter: Counter) -> None:
        self.session, self.url, self.counter = session, url, counter

    def __call__(self, start: int, end: int) -> bytes:
        headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
        for attempt in range(RETRIES):
            try:
                with self.session.get(self.url, headers=headers, timeout=TIMEOUT, stream=True) as resp:
                    if resp.status_code >= 500 and attempt < RETRIES - 1:
                        continue
                    if resp.status_code != 206:
                        raise OSError(f"range request answered {resp.status_code}, not 206")
                    data = resp.raw.read(end - start + 1, decode_content=False)
                break
            except (requests.ConnectionError, requests.Timeout):
                if attempt == RETRIES - 1:
                    raise
                time.sleep(1 + attempt)
        self.counter.add(len(data))
        return data[:end - start]


def fetch_sources(session: requests.Session, artifact: Artifact, package: str, counter: Counter) -> dict[str, bytes]:
    """The artifact's package sources and metadata, as member name -> bytes (sdists renamed to wheel layout, their
    requirement files under `_sdist/`)."""
    if artifact.filename.endswith(".whl"):
        return read_members(RangeReader(session, artifact.url, counter), artifact.size, wanted_member(package))
    resp = session.get(artifact.url, timeout=TIMEOUT)
    resp.raise_for_status()
    data = resp.content
    counter.add(len(data))
    if artifact.sha256 and hashlib.sha256(data).hexdigest() != artifact.sha256:
        raise OSError("sha256 of the downloaded sdist does not match the index")
    return sdist_members(data, artifact.filename, package)


def sdist_members(data: bytes, filename: str, package: str) -> dict[str, bytes]:
    """The package's .py files of an sdist (found by the shallowest `<package>/__init__.py`, so a `python/` source
    root works too), and PKG-INFO / requirements files / pyproject.toml of its top directory."""
    raw: dict[str, bytes] = {}
    if filename.endswith(".zip"):
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for name in zf.namelist():
                if name.endswith((".py", ".txt", ".toml", "PKG-INFO")):
                    raw[name] = zf.read(name)
    else:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
            for member in tf.getmembers():
                if member.isfile() and member.name.endswith((".py", ".txt", ".toml", "PKG-INFO")):
                    handle = tf.extractfile(member)
                    if handle is not None:
                        raw[member.name] = handle.read()
    inits = sorted((n for n in raw if n.endswith(f"{package}/__init__.py")), key=lambda n: n.count("/"))
    if not inits:
        raise OSError(f"no {package}/__init__.py in the sdist")
    root = inits[0][: -len(f"{package}/__init__.py")]
    top = min((n.split("/", 1)[0] + "/" for n in raw), key=len) if raw else ""
    out = {n[len(root):]: b for n, b in raw.items() if n.startswith(root + package + "/") and n.endswith(".py")}
    for name, body in raw.items():
        rel = name[len(top):] if name.startswith(top) else name
        if _REQUIREMENT_FILE.match(rel):
            out["_sdist/" + rel] = body
    return out


def ensure_cached(session: requests.Session, artifact: Artifact, package: str, cache_dir: Path,
                  counter: Counter) -> Path:
    """The cache file of the artifact's members (a zip named by the artifact's sha256), fetched first if absent."""
    key = artifact.sha256 or hashlib.sha256(artifact.url.encode()).hexdigest()
    path = cache_dir / f"{key}.zip"
    if not (path.is_file() and zipfile.is_zipfile(path)):
        members = fetch_sources(session, artifact, package, counter)
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}.{threading.get_ident()}")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            for name in sorted(members):
                zf.writestr(name, members[name])
        os.replace(tmp, path)
    return path


def load_cached(path: Path) -> dict[str, str]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name).decode("utf-8", "replace") for name in zf.namelist()}
