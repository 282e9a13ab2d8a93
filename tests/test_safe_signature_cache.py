"""The signatures' safety verdicts kept in the per-user cache: a pattern text found safe is not judged again by a
later start, an unsafe one is always judged (and refused), and an entry that cannot be trusted is an empty set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_gpucompat.common import parsed_cache
from pytest_gpucompat.kb import load_kb, signatures
from pytest_gpucompat.kb.load import _load_cached

SALT = b"salt"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUCOMPAT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(parsed_cache, "_TEXT_SETS", {})  # what this process read: read again from the new place
    monkeypatch.setattr(signatures, "_JUDGED_SAFE", set())
    return tmp_path / "cache" / "parsed"


def _fail(fld: str, problem: str) -> ValueError:
    return ValueError(f"{fld}: {problem}")


def _entry(cache: Path, name: str) -> Path:
    (entry,) = cache.glob(f"{name}-*.json")
    return entry


def test_texts_are_remembered_privately(cache: Path) -> None:
    assert parsed_cache.remembered_texts("t", SALT) == frozenset()
    parsed_cache.remember_texts("t", SALT, ["a", "b", "x" * (parsed_cache.MAX_TEXT_CHARS + 1)])
    entry = _entry(cache, "t")
    assert entry.stat().st_mode & 0o777 == 0o600 and cache.stat().st_mode & 0o077 == 0
    assert json.loads(entry.read_text())["data"] == ["a", "b"]  # too long a text is left out
    parsed_cache._TEXT_SETS.clear()
    assert parsed_cache.remembered_texts("t", SALT) == {"a", "b"}
    assert parsed_cache.remembered_texts("t", b"other salt") == frozenset()
    assert parsed_cache.remembered_texts("u", SALT) == frozenset()
    parsed_cache.remember_texts("t", SALT, ["c"])
    parsed_cache._TEXT_SETS.clear()
    assert parsed_cache.remembered_texts("t", SALT) == {"a", "b", "c"}


def test_a_set_past_its_bound_starts_anew(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parsed_cache, "MAX_TEXTS", 3)
    parsed_cache.remember_texts("t", SALT, ["a", "b"])
    parsed_cache.remember_texts("t", SALT, ["c", "d"])
    parsed_cache._TEXT_SETS.clear()
    assert parsed_cache.remembered_texts("t", SALT) == {"c", "d"}


@pytest.mark.parametrize("damage", ["garbage", "other key", "not a list", "not text", "too long", "too many",
                                    "fifo", "open dir", "symlink", "dict"])
def test_untrusted_entry_is_an_empty_set(cache: Path, tmp_path: Path, damage: str) -> None:
    parsed_cache.remember_texts("t", SALT, ["a"])
    entry = _entry(cache, "t")
    key = json.loads(entry.read_text())["key"]
    parsed_cache._TEXT_SETS.clear()

    def plant(data: object) -> None:
        entry.write_text(json.dumps({"key": key, "data": data}))

    if damage == "garbage":
        entry.write_bytes(b"\xff[not json")
    elif damage == "other key":
        entry.write_text(json.dumps({"key": "0" * 64, "data": ["a"]}))
    elif damage == "not a list":
        plant("a")
    elif damage == "not text":
        plant(["a", 1])
    elif damage == "too long":
        plant(["a", "x" * (parsed_cache.MAX_TEXT_CHARS + 1)])
    elif damage == "too many":
        plant([str(i) for i in range(parsed_cache.MAX_TEXTS + 1)])
    elif damage == "fifo":
        entry.unlink()
        os.mkfifo(entry)
    elif damage == "open dir":
        cache.chmod(0o777)
    elif damage == "symlink":
        other = tmp_path / "elsewhere.json"
        other.write_text(json.dumps({"key": key, "data": ["a"]}))
        entry.unlink()
        entry.symlink_to(other)
    else:
        plant({"a": "b"})
    assert parsed_cache.remembered_texts("t", SALT) == frozenset()


def test_unwritable_cache_remembers_nothing_and_still_judges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("GPUCOMPAT_CACHE_DIR", str(blocker))
    monkeypatch.setattr(parsed_cache, "_TEXT_SETS", {})
    parsed_cache.remember_texts("t", SALT, ["a"])  # no error
    monkeypatch.setattr(parsed_cache, "_TEXT_SETS", {})
    assert parsed_cache.remembered_texts("t", SALT) == frozenset()


def test_safe_pattern_is_judged_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    judged: list[str] = []
    real = signatures.risk
    monkeypatch.setattr(signatures, "risk", lambda parsed: judged.append("x") or real(parsed))
    first = signatures.compile_pattern(r"CUDA error: out of memory \(\d+\)", _fail, "signature[0]")
    signatures.remember_safe_patterns()
    monkeypatch.setattr(parsed_cache, "_TEXT_SETS", {})  # a later start
    again = signatures.compile_pattern(r"CUDA error: out of memory \(\d+\)", _fail, "signature[0]")
    assert judged == ["x"] and again.search("CUDA error: out of memory (2)") and first.pattern == again.pattern
    with pytest.raises(ValueError, match="matches an empty text"):  # what RE2 says is still checked each time
        signatures.compile_pattern("x*", _fail, "signature[0]")
    signatures.remember_safe_patterns()
    monkeypatch.setattr(parsed_cache, "_TEXT_SETS", {})
    with pytest.raises(ValueError, match="matches an empty text"):
        signatures.compile_pattern("x*", _fail, "signature[0]")


@pytest.mark.parametrize("pattern", [r"(a+)+b", r"a.*b.*c.*d", r"(ab|cd)*e", r"(a)\1"])
def test_unsafe_pattern_is_never_remembered(cache: Path, pattern: str) -> None:
    for _ in range(2):
        with pytest.raises(ValueError):
            signatures.compile_pattern(pattern, _fail, "signature[0]")
        signatures.remember_safe_patterns()
        parsed_cache._TEXT_SETS.clear()
    assert not list(cache.glob("safe-signatures-*.json"))


def test_knowledge_base_is_the_same_with_remembered_verdicts(cache: Path) -> None:
    _load_cached.cache_clear()
    judged = load_kb()
    entry = _entry(cache, "safe-signatures")
    texts = set(json.loads(entry.read_text())["data"])
    assert texts == {p.pattern for r in judged.rules for p in r.signature}
    parsed_cache._TEXT_SETS.clear()
    _load_cached.cache_clear()
    remembered = load_kb()
    assert remembered is not judged and repr(remembered.rules) == repr(judged.rules)
    _load_cached.cache_clear()


def test_no_remembered_verdict_decides_a_lint(cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 'safe' verdict in the cache (here written by this user, as a poisoned one would be) lets a start load a
    catastrophic pattern, RE2 still matching it in linear time; `rules --lint` judges every pattern itself, so CI
    gives the same answer whatever the cache holds."""
    from pytest_gpucompat.cli import main

    bad = r"(a+)+b"
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - {id: x, summary: s, severity: broken, failure: crash, confidence: upstream,\n"
                     f"     sources: [{{kind: doc, ref: r}}], signature: ['{bad}']}}\n")
    signatures.compile_pattern("foo", _fail, "signature[0]")
    signatures.remember_safe_patterns()  # a real entry of this user's cache ...
    entry = _entry(cache, "safe-signatures")
    wrapper = json.loads(entry.read_text())
    wrapper["data"] = sorted({*wrapper["data"], bad})  # ... that now says the catastrophic pattern is safe
    entry.write_text(json.dumps(wrapper))
    parsed_cache._TEXT_SETS.clear()
    _load_cached.cache_clear()
    assert main(["rules", "--lint", "--no-builtin-rules", "--kb", str(rules)]) == 2
    err = capsys.readouterr().err
    assert "signature" in err and len(err.strip().splitlines()) == 1
    _load_cached.cache_clear()
