"""The one way the package replaces a file: atomically, and never through a name someone else chose.

Reports, golden files, the identity cache and the xdist ledger are all rewritten while others may read them, and
some live in directories other users can write to (a shared cache, a CI workspace). So every write goes to a fresh
temporary file created with O_EXCL in the target's own directory (a symlink planted at a
predictable name cannot redirect it), is fsynced, given its final mode and renamed over the target; a reader or a
crash sees the old file or the new one, never half of one. The new file's mode is always the writer's own choice
less the umask (never one inherited from the file it replaces: another user's setuid or world-writable file must
not make the report so), and another user's file in a shared (sticky or world-writable) directory is not replaced
at all. At the bottom of the import graph: no package imports.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

DEFAULT_MODE = 0o644
"""A file others may read (reports, golden files), less the umask: 0600 would hide a CI artifact from its readers."""
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
    return foreign_problem(path, st)


def foreign_problem(path: str | os.PathLike[str], st: os.stat_result | None = None) -> str | None:
    """Why a file must not be replaced because of who owns it, or None: it belongs to another user and sits in a
    directory others can write to (sticky like /tmp, or world-writable). That user chose its name and may read
    what replaces it, or plant it again; as the report lock does, such a file is refused rather than taken over."""
    try:
        st = os.lstat(path) if st is None else st
    except OSError:
        return None
    if st.st_uid == os.geteuid():
        return None
    directory = os.path.dirname(os.fspath(path)) or "."
    try:
        dir_mode = os.stat(directory).st_mode
    except OSError:
        return None
    if dir_mode & (stat.S_ISVTX | stat.S_IWOTH):
        return (f"is owned by another user (uid {st.st_uid}) in a directory others can write to; "
                "refusing to replace it (remove it or write elsewhere)")
    return None


def refuse_unsafe(path: str | os.PathLike[str]) -> None:
    """Raise ``UnsafeTarget`` (an OSError naming the path) when ``target_problem`` finds one."""
    problem = target_problem(path)
    if problem is not None:
        raise UnsafeTarget(errno.EPERM, problem, os.fspath(path))


def _create_temporary(directory: Path, name: str, mode: int) -> tuple[int, str]:
    """A new file beside the target, created with O_EXCL (a name planted there, a symlink included, is never
    opened) and ``mode``: the kernel takes the umask off, as for any file a program creates."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", os.fspath(directory))


def _naming(exc: OSError, path: str | os.PathLike[str], tmp: str | None) -> OSError:
    """``exc`` naming the file the caller asked for: a write, an fsync or a full disk has no file name of its own,
    and the temporary file's name means nothing to a user ("No space left on device" alone names nothing)."""
    if exc.filename is None or exc.filename == tmp or (tmp is None and exc.filename != os.fspath(path)):
        exc.filename = os.fspath(path)
        exc.filename2 = None
    return exc


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

    ``mode``: the new file's permission bits (DEFAULT_MODE when None), less the umask and never setuid, setgid or
    sticky; nothing of a file already there is kept. The temporary file is created with O_EXCL beside the target,
    so a symlink planted at any name cannot receive the text, and it is removed if anything fails. Another user's
    file in a shared directory is refused (``foreign_problem``, UnsafeTarget). The rename replaces a symlink at
    ``path`` itself rather than writing where it points; callers that must refuse such a target call
    ``refuse_unsafe`` first.
    """
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    problem = foreign_problem(target)
    if problem is not None:
        raise UnsafeTarget(errno.EPERM, problem, os.fspath(path))
    try:
        fd, tmp = _create_temporary(directory, target.name, (DEFAULT_MODE if mode is None else mode) & 0o777)
    except OSError as exc:
        raise _naming(exc, path, None) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            if isinstance(text, str):
                handle.write(text)
            else:
                handle.writelines(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _naming(exc, path, tmp) from None
        raise
    _fsync_directory(directory)
    return target
