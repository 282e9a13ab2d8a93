"""bench/corpus: the users' reports corpus is well-formed data (plain pytest): every entry has what the bench reads,
its stated fingerprint is one the product accepts, its source is the engine's own tracker, and the split is the
id's hash; and `gpucompat explain --log` names the right rule for real logs of distinct causes."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

import pytest

from pytest_gpucompat.cli import main

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


# Real logs of distinct causes, as the reports pasted them, and the rule that names each cause. `explain --log`
# must name it from the log alone (the engine said), and still with the report's stated machine beside it.
EXPLAINED = {
    "vllm-9990": "vllm-bf16-requires-sm80",
    "vllm-13202": "vllm-requires-cc70",
    "vllm-26431": "vllm-triton-attn-fp8-kv-fails-to-compile-below-sm89",
    "vllm-4327": "vllm-fp8-quant-needs-sm89-before-0.5.1",
    "vllm-414": "vllm-attention-heads-not-divisible-by-tp",
    "sglang-3436": "sglang-attention-heads-not-divisible-by-tp",
    "sglang-12887": "sglang-fp8-block-checkpoint-triton-needs-sm89",
    "tensorrt-llm-1069": "tensorrt-llm-bf16-needs-sm80",
    "tensorrt-llm-2400": "tensorrt-llm-tensorrt-10.5-refuses-volta-engine-build",
    "tensorrt-llm-1515": "tensorrt-llm-context-fmha-unsupported-on-turing",
    "tensorrt-llm-6892": "tensorrt-llm-gpt-oss-attention-sinks-sm90-only",
    "tensorrt-llm-222": "tensorrt-llm-engine-built-on-another-gpu-architecture",
}
BY_ID = {str(e["id"]): e for e in ENTRIES}


def test_the_explained_logs_are_of_distinct_causes() -> None:
    assert len({BY_ID[i]["cause_class"] for i in EXPLAINED}) >= 10
    assert {BY_ID[i]["engine"] for i in EXPLAINED} == set(REPOS)


@pytest.mark.parametrize(("entry_id", "rule"), sorted(EXPLAINED.items()))
def test_explain_log_names_the_rule_of_a_real_log(entry_id: str, rule: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    entry = BY_ID[entry_id]
    stated = entry["stated"]
    assert isinstance(stated, dict)
    log = tmp_path / "engine.log"
    log.write_text(str(stated["log"]), encoding="utf-8")
    assert main(["explain", "--log", str(log), "--engine", str(entry["engine"])]) == 0
    assert f"[{rule}]" in capsys.readouterr().out
    fingerprint = stated.get("fingerprint")
    if fingerprint:
        env = tmp_path / "machine.json"
        env.write_text(json.dumps(fingerprint), encoding="utf-8")
        assert main(["explain", "--log", str(log), "--engine", str(entry["engine"]), "--env", str(env)]) == 0
        assert f"[{rule}]" in capsys.readouterr().out
