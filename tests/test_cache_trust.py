"""The per-user parsed-data cache as a trust boundary (common.parsed_cache): another user who controls a parent
directory of the cache cannot get a poisoned entry loaded, neither by leaving one there nor by swapping
directories while a load runs (plain pytest; the swapping user is a second uid, so that part needs root on Linux)."""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from pytest_gpucompat.common import parsed_cache

RULES = {"rules": [{"id": "keep-me", "severity": "broken"}, {"id": "verified-gate", "severity": "broken"}]}
POISON = {"rules": [{"id": "keep-me", "severity": "broken"}]}  # the verified rule removed
NOBODY = 65534
RENAME_EXCHANGE = 2


def _entry_of(cache: Path) -> Path:
    (entry,) = (cache / "parsed").glob("*.json")
    return entry


def _poisoned_copy(cache: Path, evil: Path, owner: int | None = None) -> None:
    """``evil``: the cache's layout with its entry's data swapped for POISON, under the same key."""
    entry = _entry_of(cache)
    (evil / "parsed").mkdir(parents=True)
    wrapper = parsed_cache.inputs.json.loads(entry.read_text())
    wrapper["data"] = POISON
    (evil / "parsed" / entry.name).write_text(parsed_cache.inputs.json.dumps(wrapper))
    for path in (evil, evil / "parsed", evil / "parsed" / entry.name):
        path.chmod(0o755 if path.is_dir() else 0o644)
        if owner is not None:
            os.chown(path, owner, owner)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(RULES))
    return path


def test_an_entry_of_ours_is_used_and_one_in_a_swapped_directory_is_not(tmp_path: Path, source: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("GPUCOMPAT_CACHE_DIR", str(cache))
    assert parsed_cache.load_yaml_cached(source) == RULES  # parsed, entry written
    assert parsed_cache.load_yaml_cached(source) == RULES  # read back
    evil = tmp_path / "evil"
    _poisoned_copy(cache, evil)
    (evil / "parsed").chmod(0o777)  # writable by others: not ours to trust
    os.rename(cache, tmp_path / "kept")
    os.rename(evil, cache)
    assert parsed_cache.load_yaml_cached(source) == RULES  # a miss: parsed from the file
    shutil.rmtree(cache)
    (tmp_path / "target").mkdir(mode=0o700)
    os.symlink(tmp_path / "target", cache)  # a link in place of the directory is no cache of ours
    assert parsed_cache.load_yaml_cached(source) == RULES


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="a second uid needs root on Linux")
def test_a_user_swapping_directories_under_a_root_run_never_gets_a_poisoned_load(
        source: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = Path(tempfile.mkdtemp(prefix="gpucompat-shared-"))  # a parent the other user controls
    try:
        shared.chmod(0o755)
        os.chown(shared, NOBODY, NOBODY)
        cache, evil = shared / "cache", shared / "evil"
        monkeypatch.setenv("GPUCOMPAT_CACHE_DIR", str(cache))
        assert parsed_cache.load_yaml_cached(source) == RULES  # root's own entry
        _poisoned_copy(cache, evil, owner=NOBODY)
        libc = ctypes.CDLL(None, use_errno=True)
        attacker = os.fork()
        if attacker == 0:  # the other user: exchange the two directories as fast as it can
            try:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                a, b = str(cache).encode(), str(evil).encode()
                while True:
                    libc.renameat2(-100, a, -100, b, RENAME_EXCHANGE)
            finally:
                os._exit(0)
        loads = poisoned = 0
        try:
            deadline = time.monotonic() + 4.0
            while time.monotonic() < deadline:
                data = parsed_cache.load_yaml_cached(source)
                loads += 1
                poisoned += data != RULES
        finally:
            os.kill(attacker, 9)
            os.waitpid(attacker, 0)
        assert loads > 200 and poisoned == 0, (loads, poisoned)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
