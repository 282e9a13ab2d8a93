"""`gpucompat explain REPORT --write`: a rule written after the run explains the run's failures in the report itself,
so every rendering made from it says which known issue each failure is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pytest_gpucompat import cli
from pytest_gpucompat.report.io import load_report
from pytest_gpucompat.report.markdown import render_markdown

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs/reports/h200-580.159.04-vllm-0.26.0-no-flashinfer.json"
RULE = "vllm-without-flashinfer-fails-at-start"


def test_write_records_explained_by_and_renderings_show_it(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    shutil.copy(REPORT, path)
    data = json.loads(path.read_text())
    for cell in data["cells"]:  # as a run before the rule existed wrote it
        cell.pop("explained_by", None)
    path.write_text(json.dumps(data))
    assert "Matches known issue" not in render_markdown(load_report(path))

    assert cli.main(["explain", str(path), "--write"]) == 0
    capsys.readouterr()
    report = load_report(path)
    failed = [c for c in report.cells if c.outcome in ("failed", "error")]
    assert len(failed) == 15 and all(c.known_issue and c.known_issue["id"] == RULE for c in failed)
    assert all(not c.explained_by for c in report.cells if c.outcome not in ("failed", "error"))
    assert f"Matches known issue `{RULE}`" in render_markdown(report)


def test_without_write_the_report_is_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    shutil.copy(REPORT, path)
    before = path.read_bytes()
    cli.main(["explain", str(path)])
    capsys.readouterr()
    assert path.read_bytes() == before


def test_report_says_what_it_wrote_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    assert cli.main(["report", str(REPORT), "--html", str(html), "--markdown", str(md)]) == 0
    out = capsys.readouterr().out.strip()
    assert out == (f"gpucompat report: 30 cells from {REPORT}; wrote html {html}, markdown {md}")
    assert html.stat().st_size and md.stat().st_size


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_the_job_summary_is_never_written_through_a_link_or_into_a_special_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    import os

    target, summary = tmp_path / "elsewhere.txt", tmp_path / "summary.md"
    target.write_text("keep\n")
    if kind == "symlink":
        summary.symlink_to(target)
    else:
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs here")
        os.mkfifo(summary)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert cli.main(["report", str(REPORT), "--markdown", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert "$GITHUB_STEP_SUMMARY" in err and str(summary) in err and "\n" not in err
    assert target.read_text() == "keep\n"
