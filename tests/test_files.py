"""The one atomic writer (files.write_atomic) and its users: a link planted at a predictable temporary name receives
nothing, a failed write leaves no temporary file behind, and each kind of file gets the mode it is meant to have."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from test_checkpoint import checkpoint_dir
from test_golden import golden

from pytest_gpucompat.checks.golden_files import record
from pytest_gpucompat.common.files import UnsafeTarget, target_problem, write_atomic
from pytest_gpucompat.gpushare.ledger import LEDGER, Ledger
from pytest_gpucompat.report import io
from pytest_gpucompat.workload.checkpoint import model_identity


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_a_link_planted_at_the_ledgers_old_temporary_name_receives_nothing(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    planted = shared / f".{LEDGER}.{os.getpid()}"  # the name the ledger used to write by path
    planted.symlink_to(victim)
    ledger = Ledger(shared, "1:1", alive=lambda _: True)
    ledger.join()
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)
    written = shared / LEDGER
    assert not written.is_symlink() and "1:1" in written.read_text()
    assert _mode(written) == 0o600
    assert ledger.snapshot().members == ["1:1"]
    assert _leftovers(shared) == []


def test_a_failing_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "inside").write_text("x")
    with pytest.raises(OSError):
        write_atomic(tmp_path / "taken", "text")  # the rename onto a non-empty directory fails
    with pytest.raises(UnicodeEncodeError):
        write_atomic(tmp_path / "new.txt", "half \ud800")  # the write itself fails
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_an_interrupted_write_keeps_the_old_file_and_no_temporary(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.json"
    target.write_text("old")

    def no_rename(src: str, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old" and _leftovers(tmp_path) == []


def test_the_mode_asked_for_never_the_existing_files(tmp_path: Path) -> None:
    """An existing file's mode is not kept: another user's 0666 or 4777 file must not make the report so."""
    assert _mode(write_atomic(tmp_path / "new", "a")) == 0o644
    assert _mode(write_atomic(tmp_path / "private", "a", mode=0o600)) == 0o600
    replaced = tmp_path / "replaced"
    replaced.write_text("a")
    replaced.chmod(0o666)
    assert _mode(write_atomic(replaced, "b")) == 0o644
    assert _mode(write_atomic(replaced, "c", mode=0o600)) == 0o600 and replaced.read_text() == "c"


def test_a_symlink_target_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    victim.chmod(0o600)
    link = tmp_path / "out"
    link.symlink_to(victim)
    write_atomic(link, "new")  # the link's target's mode is not borrowed either
    assert victim.read_text() == "precious" and not link.is_symlink() and _mode(link) == 0o644


def test_reports_get_their_own_mode_and_refuse_links(tmp_path: Path) -> None:
    path = tmp_path / "report.md"
    assert _mode(io.write_text_atomic(path, "a")) == 0o644
    path.chmod(0o4777)
    io.write_text_atomic(path, "b")
    assert _mode(path) == 0o644 and path.read_text() == "b"
    link = tmp_path / "link.md"
    link.symlink_to(path)
    with pytest.raises(UnsafeTarget):
        io.write_text_atomic(link, "c")
    assert io.UnsafeTarget is UnsafeTarget and io.target_problem is target_problem  # the old imports still work
    assert path.read_text() == "b" and _leftovers(tmp_path) == []


def test_golden_files_are_0644_even_over_a_private_one(tmp_path: Path) -> None:
    path = record(tmp_path, golden(cells={}))
    path.chmod(0o600)
    assert _mode(record(tmp_path, golden(reference=None))) == 0o644
    assert _leftovers(tmp_path) == []


def test_the_identity_cache_is_private_and_a_failed_write_is_only_a_missed_cache(tmp_path: Path) -> None:
    model = checkpoint_dir(tmp_path / "m")
    first = model_identity(model, tmp_path / "cache")
    entries = list((tmp_path / "cache" / "identity").iterdir())
    assert len(entries) == 1 and _mode(entries[0]) == 0o600
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache directory should be")
    assert model_identity(model, blocked) == first  # OSError suppressed, as before
