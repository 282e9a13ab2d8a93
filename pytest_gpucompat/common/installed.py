"""Installed distributions' versions and locations, read from their metadata directories on sys.path.

`gpucompat env` asks for about twenty distributions. importlib.metadata gives the same answers, but importing it
(and the e-mail parser it reads METADATA with) took a quarter of the command's time. A distribution installed from a
wheel has a ``<name>-<version>.dist-info`` directory whose METADATA holds ``Version:`` among its first lines; an
.egg-info (a directory or a file) holds the same in PKG-INFO. As with importlib.metadata, the first sys.path entry
that has the distribution wins. Anything this reading cannot settle (a zip file on sys.path, metadata without a
version) is asked of importlib.metadata, so the answer never differs from it. `requirements` reads the
``Requires-Dist`` headers of the same METADATA (the fingerprint's `installs` checks an engine's against what is
installed).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .inputs import TooLargeError, read_bytes

_SEPARATORS = re.compile(r"[-_.]+")
_HEADER_LINES = 64  # Version comes right after Metadata-Version and Name; stop reading long before the description
_VERSION_BYTES = 64 * 1024  # where the Version header is: the first lines
MAX_HEADER_BYTES = 4 * 1024 * 1024  # a wheel's headers (its README follows them) are a few KiB


@dataclass(frozen=True)
class Installed:
    version: str
    location: Path
    """The directory the distribution is installed into: its files' paths are relative to it."""
    metadata: str | None = field(default=None, compare=False)
    """The metadata directory (or .egg-info file) this was read from; None when importlib.metadata found it."""


def normalize(name: str) -> str:
    """PEP 503: `Flashinfer_Python` and `flashinfer-python` are one distribution."""
    return _SEPARATORS.sub("-", name).lower()


def _version_in(path: str, reasons: list[str] | None = None) -> str | None:
    """The Version header of a metadata file, or of METADATA / PKG-INFO inside a metadata directory.

    Read like every input (``inputs.read_bytes``): a regular file only, its first bytes only. A metadata file that
    is a FIFO, a device or a link to /dev/zero is a line in ``reasons`` and None."""
    if os.path.isdir(path):
        path = os.path.join(path, "METADATA" if path.endswith(".dist-info") else "PKG-INFO")
    try:
        raw = read_bytes(path, _VERSION_BYTES, part="head")
    except FileNotFoundError:
        return None
    except OSError as exc:
        _refused(path, exc, reasons)
        return None
    for _, line in zip(range(_HEADER_LINES), raw.decode("utf-8", "replace").splitlines()):
        if line.startswith("Version:"):
            return line[8:].strip() or None
        if not line.strip():  # the headers end at the first blank line
            return None
    if len(raw) == _VERSION_BYTES:  # no Version where it always is, in a file importlib.metadata would read whole
        _refused(path, TooLargeError(f"no Version header in its first {_VERSION_BYTES} bytes"), reasons)
    return None


class _Unreadable(Exception):
    """Metadata this reading refused (not a regular file): importlib.metadata must not read it either."""


def _refused(path: str, exc: OSError, reasons: list[str] | None) -> None:
    if reasons is not None:
        reasons.append(f"{path}: not read: {exc.strerror or exc}")
    raise _Unreadable(path)


def find(names: Iterable[str], reasons: list[str] | None = None) -> dict[str, Installed]:
    """Each of ``names`` that is installed, keyed by the name as asked. A distribution whose metadata is not a
    regular file (a FIFO, a device, /dev/zero behind a link) is left out with a line in ``reasons``: neither this
    reading nor importlib.metadata reads it."""
    asked = {normalize(name): name for name in names}
    found: dict[str, Installed] = {}
    slow: set[str] = set()  # importlib.metadata decides these
    refused: set[str] = set()  # metadata that is not a regular file: never read, by anyone
    for entry in sys.path:
        missing = asked.keys() - found.keys() - slow - refused
        if not missing:
            break
        where = entry or os.getcwd()
        try:
            items = os.listdir(where)
        except OSError:
            if os.path.isfile(where):  # a zip: its distributions come before any later entry's
                slow |= missing
            continue
        for item in items:
            if item.endswith(".dist-info"):
                stem = item[: -len(".dist-info")]
            elif item.endswith(".egg-info"):
                stem = item[: -len(".egg-info")]
            else:
                continue
            key = normalize(stem.partition("-")[0])
            if key not in missing or key in found:
                continue
            try:
                version = _version_in(os.path.join(where, item), reasons)
            except _Unreadable:
                refused.add(key)
                continue
            if version is None:
                slow.add(key)
                continue
            found[key] = Installed(version, Path(where), os.path.join(where, item))
    if slow - found.keys() - refused:
        found.update(_from_importlib(asked[key] for key in slow - found.keys() - refused))
    return {asked[key]: value for key, value in found.items() if key in asked}


def _from_importlib(names: Iterable[str]) -> dict[str, Installed]:
    from importlib import metadata

    out: dict[str, Installed] = {}
    for name in names:
        try:
            dist = metadata.distribution(name)
            version = dist.version
            location = Path(str(dist.locate_file("")))
        except Exception:  # not installed, or broken metadata: never breaks a fingerprint
            continue
        if version:
            out[normalize(name)] = Installed(version, location)
    return out


def requirements(name: str, found: Installed) -> list[str]:
    """The ``Requires-Dist`` values of a distribution `find` found, as its metadata writes them (markers included).

    A wheel's METADATA is read directly; anything else (an .egg-info keeps them in requires.txt, a zip) is asked of
    importlib.metadata. Metadata that cannot be read raises OSError.
    """
    path = found.metadata
    if path is not None and path.endswith(".dist-info"):
        return _headers(os.path.join(path, "METADATA"), "Requires-Dist")
    from importlib import metadata

    try:
        return list(metadata.distribution(name).requires or ())
    except Exception as exc:  # not there any more, or metadata importlib cannot parse
        raise OSError(f"cannot read the metadata of {name}: {exc}") from None


def _headers(path: str, header: str) -> list[str]:
    """Every value of one header of a metadata file (continuation lines joined), up to the blank line that ends
    the headers. Read through ``inputs.read_bytes``: a regular file, headers of at most MAX_HEADER_BYTES, else
    OSError."""
    prefix = header.lower() + ":"
    values: list[str] = []
    current: list[str] | None = None
    raw = read_bytes(path, MAX_HEADER_BYTES, part="head")
    lines = raw.decode("utf-8", "replace").splitlines()
    if len(raw) == MAX_HEADER_BYTES and not any(not line.strip() for line in lines):
        raise TooLargeError(f"{path}: headers longer than {MAX_HEADER_BYTES} bytes")
    for line in lines:
        if not line.strip():
            break
        if line[0] in " \t":  # a folded header goes on
            if current is not None:
                current.append(line.strip())
            continue
        if current is not None:
            values.append(" ".join(current))
        current = [line[len(prefix):].strip()] if line.lower().startswith(prefix) else None
    if current is not None:
        values.append(" ".join(current))
    return [value for value in values if value]


def version(name: str) -> str | None:
    """The installed version of one distribution, or None."""
    found = find([name]).get(name)
    return found.version if found is not None else None


__all__ = ["Installed", "find", "normalize", "requirements", "version"]
