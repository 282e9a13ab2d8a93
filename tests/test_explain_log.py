"""``gpucompat explain --log``: a raw engine log answered with its known issue (plain pytest)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pytest_gpucompat.cli import main
from pytest_gpucompat.kb import load_kb
from pytest_gpucompat.kb.diagnose import TAIL_BYTES, diagnose, engines_named

BF16 = ("Traceback (most recent call last):\n  File \"/usr/lib/python3/site-packages/vllm/worker/worker.py\", "
        "line 482, in _check_if_gpu_supports_dtype\nValueError: Bfloat16 is only supported on GPUs with compute "
        "capability of at least 8.0. Your Tesla V100-SXM2-32GB GPU has compute capability 7.0.\n")


def test_a_real_log_names_its_rule_and_a_stated_fact_rules_one_out(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "server.log"
    log.write_text("INFO starting\n" * 1000 + BF16, encoding="utf-8")
    assert main(["explain", "--log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "[vllm-bf16-requires-sm80]" in out and "workaround:" in out
    assert engines_named(BF16) == ("vllm",)
    assert [r.id for r in diagnose(load_kb().rules, BF16, engine="sglang")] == []  # another engine: ruled out


def test_a_log_no_rule_knows_is_not_known(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"KeyError: 'llava_qwen'\n")))
    assert main(["explain", "--log", "-"]) == 1
    assert "not known" in capsys.readouterr().out


def test_a_huge_log_is_read_from_its_end_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "huge.log"
    with log.open("wb") as handle:  # 100 MB, sparse: only the end is written
        handle.truncate(100 * 1024 * 1024 - len(BF16))
        handle.seek(0, 2)
        handle.write(BF16.encode())
    assert main(["explain", "--log", str(log)]) == 0  # zeros before the text (a copytruncate hole): read past
    assert "[vllm-bf16-requires-sm80]" in capsys.readouterr().out
    binary = tmp_path / "libcuda.so"
    binary.write_bytes(bytes(range(256)) * 64)
    assert main(["explain", "--log", str(binary)]) == 2
    assert "binary, not text" in capsys.readouterr().err
    text = tmp_path / "text.log"
    text.write_bytes(b"x" * (3 * TAIL_BYTES) + b"\n" + BF16.encode())
    assert main(["explain", "--log", str(text)]) == 0
    assert f"the last {TAIL_BYTES:,} of" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "said"), [
    (["explain", "--log", "/nonexistent/log"], "no such file"),
    (["explain", "--log", "/dev/null"], "not a regular file"),
    (["explain"], "give a report"),
    (["explain", "r.json", "--log", "x"], "not a report"),
])
def test_bad_input_is_one_line(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]


def test_a_binary_log_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "core"
    log.write_bytes(b"\x7fELF\0\0\0" * 100)
    assert main(["explain", "--log", str(log)]) == 2
    assert "binary, not text" in capsys.readouterr().err
