"""bench/corpus: the users' reports corpus is well-formed data (plain pytest): every entry has what the bench reads,
its stated fingerprint is one the product accepts, its source is the engine's own tracker, and the split is the
id's hash."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
REPOS = {"vllm": "vllm-project/vllm", "sglang": "sgl-project/sglang", "tensorrt-llm": "NVIDIA/TensorRT-LLM"}


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("corpus_bench", ROOT / "bench" / "corpus.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()
ENTRIES = BENCH.load_corpus()


def test_the_corpus_has_every_engine_and_unique_ids() -> None:
    assert {e["engine"] for e in ENTRIES} == set(REPOS)
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_an_entry_is_what_the_bench_reads(entry: dict[str, object]) -> None:
    engine = str(entry["engine"])
    url = str(entry["url"])
    assert re.fullmatch(rf"https://github\.com/{re.escape(REPOS[engine])}/(issues|pull)/\d+", url), url
    assert str(entry["id"]).rsplit("-", 1)[1] == url.rsplit("/", 1)[1]
    expected = entry["expected"]
    assert isinstance(expected, dict)
    assert expected["severity"] == ("none" if entry["control"] else expected["severity"])
    assert expected["severity"] in (("none",) if entry["control"] else ("broken", "degraded"))
    assert str(entry["cause"]).strip() and str(entry["cause_class"]).strip()
    fp, unread = BENCH.stated_fingerprint(entry)  # the product accepts what the report states
    assert fp.params["engine"] == engine and (unread is None or "\n" not in unread)  # a garbled command: one line


def test_the_split_is_the_ids_hash_and_holds_out_most() -> None:
    assert BENCH.split_of("vllm-946") == BENCH.split_of("vllm-946")
    held = sum(BENCH.split_of(f"x-{i}") == "held-out" for i in range(8000))
    assert 4800 < held < 5200  # 5 of 8
