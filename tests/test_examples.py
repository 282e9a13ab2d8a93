"""The example files the README names exist under examples/ and do what the README says of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_gpucompat.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
NAMED = sorted(set(re.findall(r"--env (examples/[\w./-]+\.ya?ml)", README)))


def test_the_readme_names_the_shipped_examples() -> None:
    assert NAMED == ["examples/fleet.yaml", "examples/v100.yaml"]
    assert all((ROOT / path).is_file() for path in NAMED)


@pytest.mark.parametrize("line", sorted({m for m in re.findall(r"^(gpucompat check --env examples/\S+[^#\n]*)",
                                                                  README, re.M)}))
def test_each_readme_check_command_runs_on_its_example(line: str, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    code = main(line.split()[1:])
    out, err = capsys.readouterr()
    assert code in (0, 1) and err == "" and out.strip(), line  # 1: --fail-on broken found a broken runner
    if "fleet" in line:
        assert all(name in out for name in ("v100", "a100", "h100", "h200"))
    else:
        assert "V100" in out


def test_a_fleet_check_folds_advice_and_ends_with_a_line_per_runner(capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["check", "--env", "examples/fleet.yaml"]) == 0
    folded = capsys.readouterr().out
    assert "RECOMMENDATIONS" not in folded and "--severity advice lists all" in folded
    tail = folded.rstrip("\n").split("\n\n")[-1].splitlines()
    assert tail[0] == "fleet of 4 runners:" and [line.split(":")[0] for line in tail[1:]] == [
        "v100", "a100", "h100", "h200"]
    assert main(["check", "--env", "examples/fleet.yaml", "--severity", "advice"]) == 0
    full = capsys.readouterr().out
    assert "RECOMMENDATIONS for this hardware" in full and len(full) > 3 * len(folded)
