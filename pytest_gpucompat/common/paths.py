"""Where the data files live: the repository's matrices/ (editable install) or the copy packed into the wheel.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # pytest_gpucompat/, this module being in common/


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


def check_cache_entry(path: Path, what: str) -> None:
    """A cache may be shared: refuse (ValueError, one line) a directory there that is a symlink, another user's,
    or writable by others, since what it holds would be loaded and trusted. A missing one is fine (built anew)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    problem = ("is a symlink" if stat.S_ISLNK(st.st_mode)
               else "is not a directory" if not stat.S_ISDIR(st.st_mode)
               else f"belongs to another user (uid {st.st_uid})" if st.st_uid != os.geteuid()
               else "can be written by other users" if st.st_mode & 0o022 else None)
    if problem is not None:
        raise ValueError(f"{what} {path} {problem}; refusing to use it (remove it, or set GPUCOMPAT_CACHE_DIR to "
                         f"a directory of your own)")
