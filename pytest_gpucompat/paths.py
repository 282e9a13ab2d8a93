"""Where the data files live: the repository's matrices/ (editable install) or the copy packed into the wheel."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def matrices_dir() -> Path:
    """The matrices directory; `GPUCOMPAT_MATRICES_DIR` overrides it (e.g. a team's own thresholds)."""
    override = os.environ.get("GPUCOMPAT_MATRICES_DIR")
    if override:
        return Path(override).expanduser()
    packaged = _PACKAGE_DIR / "_matrices"
    if packaged.is_dir():
        return packaged
    return _PACKAGE_DIR.parent / "matrices"


def cache_dir() -> Path:
    """Root of the on-disk cache (built tiny models); `GPUCOMPAT_CACHE_DIR` overrides it."""
    override = os.environ.get("GPUCOMPAT_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "pytest-gpucompat"
