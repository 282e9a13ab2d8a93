"""Reading and writing report files: `load_report` checks what it reads, every write is atomic.

A report may come from another machine's CI artifact, so it is read like any user file; a problem is one
`ReportError` line naming the file and the JSON path of the bad field, never a traceback. Writes go through a
temporary file, fsync and a rename, so a reader (or a crash) never sees half a report.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from ..common.files import UnsafeTarget as UnsafeTarget  # re-exported: files.py owns it, older imports name this module
from ..common.files import refuse_unsafe, target_problem, write_atomic
from .model import Report, ReportError
from .text import one_line
from .validate import InvalidField, check_report_dict, json_path

MAX_REPORT_BYTES = 1024 * 1024 * 1024  # a merged report of a large fleet is hundreds of MiB; a bigger file is not one


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read and check a report file; any problem is a one-line ReportError naming the file (and field).

    A report may come from another machine's CI artifact, so it is read like any user file (bounded size, UTF-8,
    bounded nesting, only finite numbers a float can hold: a metric of 10**400 would overflow in merge and diff).
    """
    from pytest_gpucompat.common.errors import InputError
    from pytest_gpucompat.common.inputs import check_tree, parse_json, read_text

    name = os.fspath(path)
    try:
        data = parse_json(read_text(path, MAX_REPORT_BYTES), name)
    except InputError as exc:
        raise ReportError(one_line(str(exc))) from None
    if not isinstance(data, dict) or "schema_version" not in data:  # a bench result, a fingerprint, any JSON
        raise ReportError(f"{name}: not a gpucompat report")
    bad = check_tree(data)
    if bad is not None:
        raise ReportError(f"{name}: {json_path(bad[0])}: {bad[1]}")
    try:
        check_report_dict(data)
    except InvalidField as bad_field:
        raise ReportError(f"{name}: {bad_field.path}: {one_line(bad_field.problem)}") from None
    try:
        return Report.from_valid_dict(data)
    except (ValueError, TypeError, KeyError) as exc:  # pragma: no cover - the check above should catch it first
        raise ReportError(f"{name}: {one_line(str(exc))}") from None


def write_text_atomic(path: str | os.PathLike[str], text: str | Iterable[str]) -> Path:
    """Write via a temp file in the same directory + fsync + os.replace (files.write_atomic): readers never see half
    a file. The file is 0644 less the umask (a CI artifact is read by others), whatever mode a file it replaces
    had; the target must be a regular file, not a symlink nor another user's file in a shared directory
    (``UnsafeTarget``, an OSError naming the path)."""
    refuse_unsafe(path)
    return write_atomic(path, text)


def report_path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a report cannot be written at ``path``, or None: checked before the first test, not after the last."""
    target = Path(path)
    problem = target_problem(target)
    if problem is not None:
        return problem
    if target.is_dir():
        return "is a directory"
    parent = target.parent
    if not parent.exists():
        return f"directory {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    return None


def write_failure_message(path: str | os.PathLike[str], exc: OSError, checkpoint: tuple[int, float] | None) -> str:
    """The one line for a final report write that failed (a full disk): what was lost and what is kept.

    ``checkpoint`` is (cells, time.time()) of the last checkpoint written, or None; writes are atomic, so a failed
    write leaves that checkpoint (or whatever file was there before) untouched.
    """
    name = os.fspath(path)
    if checkpoint is None:
        kept = f"no checkpoint was written, {name} is unchanged"
    else:
        at = datetime.fromtimestamp(checkpoint[1]).strftime("%H:%M:%S")
        kept = f"the last checkpoint ({checkpoint[0]} cells, at {at}) is kept at {name}"
    return f"gpucompat: could not write {name}: {one_line(exc.strerror or str(exc))}; {kept}"


def write_report_atomic(report: Report | Iterable[str], path: str | os.PathLike[str]) -> Path:
    """Write the report as JSON atomically (see `write_text_atomic`), a cell at a time (`Report.json_chunks`, or
    the chunks given: ``model.run_json_chunks``): the whole text is never held in memory."""
    return write_text_atomic(path, report.json_chunks() if isinstance(report, Report) else report)

