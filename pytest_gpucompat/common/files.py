"""The one way the package replaces a file: atomically, and never through a name someone else chose.

Reports, golden files, the identity cache and the xdist ledger are all rewritten while others may read them, and
some live in directories other users can write to (a shared cache, a CI workspace). So every write goes to a fresh
temporary file that ``mkstemp`` creates with O_EXCL in the target's own directory (a symlink planted at a
predictable name cannot redirect it), is fsynced, given its final mode and renamed over the target; a reader or a
crash sees the old file or the new one, never half of one. At the bottom of the import graph: no package imports.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

DEFAULT_MODE = 0o644
"""A new file others may read (reports, golden files): mkstemp's 0600 would hide a CI artifact from its readers."""
PRIVATE_MODE = 0o600
"""A file only this user may read or change (the identity cache, the xdist ledger)."""


class UnsafeTarget(OSError):
    """An output path that names something other than a regular file (a symlink, a device, a FIFO, a directory):
    replacing it would destroy that thing (as root, ``/dev/full``) or write where the link points."""


def target_problem(path: str | os.PathLike[str]) -> str | None:
    """Why an output path must not be replaced, or None: it is a symlink (refused whatever it points to: a link
    planted in a shared directory must not choose where a report goes), or it exists and is not a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return None  # the write itself says why (a missing directory, no permission)
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink; refusing to write through it (name the file itself)"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory"
    if not stat.S_ISREG(st.st_mode):
        return "exists and is not a regular file (a device, FIFO or socket); refusing to replace it"
    return None


def refuse_unsafe(path: str | os.PathLike[str]) -> None:
    """Raise ``UnsafeTarget`` (an OSError naming the path) when ``target_problem`` finds one."""
    problem = target_problem(path)
    if problem is not None:
        raise UnsafeTarget(errno.EPERM, problem, os.fspath(path))


def _kept_mode(target: Path) -> int:
    """An existing regular target's permission bits (a user who made a report group-readable keeps that), else
    DEFAULT_MODE. lstat: a symlink's target is never consulted."""
    try:
        st = os.lstat(target)
    except OSError:
        return DEFAULT_MODE
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else DEFAULT_MODE


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable; best effort (some filesystems refuse to open or fsync a directory)."""
    if os.name != "posix":
        return
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def write_atomic(path: str | os.PathLike[str], text: str | Iterable[str], mode: int | None = None) -> Path:
    """Replace ``path`` with ``text`` (UTF-8, ``\\n`` line ends; or its pieces, written as they come) atomically;
    returns the path.

    ``mode``: the new file's permission bits; None keeps an existing regular file's mode (else DEFAULT_MODE).
    The temporary file is made by mkstemp (O_EXCL, 0600 until the chmod) beside the target, so a symlink planted
    at any name cannot receive the text, and it is removed if anything fails. The rename replaces a symlink at
    ``path`` itself rather than writing where it points; callers that must refuse such a target call
    ``refuse_unsafe`` first.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    final_mode = _kept_mode(target) if mode is None else mode
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            if isinstance(text, str):
                handle.write(text)
            else:
                handle.writelines(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, final_mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)
    return target
