"""The per-user cache of parsed shipped YAML files gives the same data as parsing, and any entry it cannot trust
is a miss (parsed anew), never an error or other data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_gpucompat.common import parsed_cache
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.common.inputs import load_file
from pytest_gpucompat.common.paths import matrices_dir
from pytest_gpucompat.kb import load_kb
from pytest_gpucompat.kb.load import _load_cached

SHIPPED = sorted(matrices_dir().rglob("*.y*ml"))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCOMPAT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "parsed"


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.json")) if cache.is_dir() else []


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_cached_data_is_the_parsed_data(cache: Path, path: Path) -> None:
    parsed = load_file(path, "yaml")
    first = parsed_cache.load_yaml_cached(path)
    second = parsed_cache.load_yaml_cached(path)
    assert first == parsed and second == parsed
    assert json.dumps(second, sort_keys=False) == json.dumps(parsed, sort_keys=False, default=str)


def test_entry_is_private_and_used(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n- id: a\n  n: 1\n")
    assert parsed_cache.load_yaml_cached(path) == {"rules": [{"id": "a", "n": 1}]}
    (entry,) = _entries(cache)
    assert entry.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o077 == 0
    wrapper = json.loads(entry.read_text())
    wrapper["data"] = {"rules": [{"id": "a", "n": 2}]}  # an entry of the same key is what is read
    entry.write_text(json.dumps(wrapper))
    assert parsed_cache.load_yaml_cached(path) == {"rules": [{"id": "a", "n": 2}]}


@pytest.mark.parametrize("damage", ["garbage", "other key", "not json data", "fifo", "open dir", "deep"])
def test_untrusted_entry_is_a_miss(cache: Path, tmp_path: Path, damage: str) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n- id: a\n  when: {gpu: [h100]}\n")
    expected = load_file(path, "yaml")
    parsed_cache.load_yaml_cached(path)
    (entry,) = _entries(cache)
    key = entry.stem
    planted = {"key": key, "data": {"rules": []}}
    if damage == "garbage":
        entry.write_bytes(b"\xff{not json")
    elif damage == "other key":
        entry.write_text(json.dumps({**planted, "key": "0" * 64}))
    elif damage == "not json data":
        entry.write_text(f'{{"key": "{key}", "data": {{"rules": 1e999}}}}')
    elif damage == "fifo":
        entry.unlink()
        os.mkfifo(entry)
    elif damage == "open dir":
        entry.write_text(json.dumps(planted))
        cache.chmod(0o777)
    else:
        entry.write_text(json.dumps({"key": key, "data": [[[[[[]]]]]] * 1}).replace("[[", "[" * 200 + "[[")
                         .replace("]]", "]" * 200 + "]]"))
    assert parsed_cache.load_yaml_cached(path) == expected


def test_edited_file_is_parsed_again(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules: []\n")
    assert parsed_cache.load_yaml_cached(path) == {"rules": []}
    path.write_text("rules: [1]\n")
    assert parsed_cache.load_yaml_cached(path) == {"rules": [1]}
    assert len(_entries(cache)) == 2


def test_data_json_cannot_hold_is_not_cached(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules:\n- 1: one\n- {true: x}\n")
    assert parsed_cache.load_yaml_cached(path) == load_file(path, "yaml")
    assert _entries(cache) == []


def test_bad_yaml_is_the_same_error(cache: Path, tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("rules: [\n")
    with pytest.raises(InputError) as parsed:
        load_file(path, "yaml")
    with pytest.raises(InputError) as cached:
        parsed_cache.load_yaml_cached(path)
    assert str(cached.value) == str(parsed.value)


def test_knowledge_base_is_the_same_from_the_cache(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _load_cached.cache_clear()
    from_yaml = load_kb()
    assert _entries(cache)
    _load_cached.cache_clear()
    from_cache = load_kb()
    assert from_cache is not from_yaml
    assert repr(from_cache.rules) == repr(from_yaml.rules) and from_cache.not_encoded == from_yaml.not_encoded
    _load_cached.cache_clear()


def test_unwritable_cache_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GPUCOMPAT_CACHE_DIR", str(blocker))
    path = tmp_path / "rules.yaml"
    path.write_text("rules: []\n")
    assert parsed_cache.load_yaml_cached(path) == {"rules": []}
