"""The committed HTML and Markdown renders of docs/reports/ are what the current renderers make of their JSON
(tools/render_reports.py re-renders them): the evidence a reader opens is never a stale rendering."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("render_reports", ROOT / "tools" / "render_reports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("render_reports", module)
    spec.loader.exec_module(module)
    return module


def test_committed_renders_match_the_current_renderers() -> None:
    stale = _tool().stale()
    assert not stale, f"re-render with python tools/render_reports.py: {', '.join(stale)}"


def test_the_tool_finds_a_stale_render_and_rewrites_it(tmp_path: Path) -> None:
    tool = _tool()
    source = ROOT / "docs" / "reports" / "h200-580.159.04-vllm-0.26.0-serial.json"
    (tmp_path / source.name).write_bytes(source.read_bytes())
    (tmp_path / source.with_suffix(".md").name).write_text("old\n")
    assert tool.stale(tmp_path) == [source.with_suffix(".md").name]
    assert tool.main(["--check", str(tmp_path)]) == 1
    assert tool.main([str(tmp_path)]) == 0 and tool.stale(tmp_path) == []
    assert not (tmp_path / source.with_suffix(".html").name).exists()  # only committed renders are rewritten
