"""A typo in a command's flag prints that command's usage and the flag it most likely meant, exit 2."""

from __future__ import annotations

import pytest

from pytest_gpucompat.cli import main


@pytest.mark.parametrize(("argv", "meant"), [
    (["diff", "a.json", "b.json", "--fial-on", "changed"], "--fail-on"),
    (["check", "--sevrity", "broken"], "--severity"),
    # `rules` takes rule ids as positionals: the misspelt flag's value is read as one, only the flag is left over
    (["rules", "vllm-v1-flash-attn-backend-needs-sm80", "--engien"], "--engine"),
    (["report", "r.json", "--hmtl", "x.html"], "--html"),
])
def test_a_misspelt_flag_names_the_command_and_the_flag_meant(argv: list[str], meant: str,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    usage, error = err.split(f"gpucompat {argv[0]}: error: ")
    assert usage.startswith(f"usage: gpucompat {argv[0]} ")
    misspelt = next(a for a in argv if a.startswith("--"))
    left_over = " ".join(argv[argv.index(misspelt):])
    assert error.strip() == f"unrecognized arguments: {left_over} ({misspelt}: did you mean {meant}?)"


def test_an_extra_word_is_named_without_a_guess(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "extra"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: gpucompat check ") and err.endswith("error: unrecognized arguments: extra\n")


@pytest.mark.parametrize("columns", [80, 100, 200])
def test_rules_has_a_header_row_and_fits_the_terminal(columns: int, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["rules", "--engine", "vllm"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert " ".join(lines[:2]).replace(":", "").split()[:4] == ["rule", "severity", "confidence", "engine"]
    assert max(map(len, lines)) <= columns
    assert ("summary" in lines[0]) == (columns >= 200)  # beside the columns only where 30 are left for it
    assert "vllm-parallel-needs-visible-gpus" in {line.split(" ", 1)[0] for line in lines}  # ids whole
