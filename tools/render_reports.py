"""Re-render the committed HTML and Markdown of docs/reports/ from their JSON, with the current renderers.

    python tools/render_reports.py [--check] [DIR]

A report's JSON is the source of truth; `X.html` and `X.md` beside `X.json` are what `gpucompat report X.json --html
X.html --markdown X.md` writes today. Only renders already committed are rewritten (a JSON without one stays so).
`--check` writes nothing and exits 1 naming every render that differs from what the renderers produce now
(tests/test_committed_renders.py runs it), so a renderer change is committed with its re-rendered evidence.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.io import load_report, write_text_atomic
from pytest_gpucompat.report.markdown import render_markdown
from pytest_gpucompat.report.model import Report

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"
RENDERERS: dict[str, Callable[[Report], str]] = {".html": render_html, ".md": render_markdown}


def renders(folder: Path) -> Iterator[tuple[Path, str]]:
    """(a committed render, the text the current renderer makes of its JSON), for every render beside a JSON."""
    for source in sorted(folder.glob("*.json")):
        targets = [source.with_suffix(ext) for ext in RENDERERS if source.with_suffix(ext).is_file()]
        if not targets:
            continue
        report = load_report(source)
        for target in targets:
            yield target, RENDERERS[target.suffix](report)


def stale(folder: Path = REPORTS) -> list[str]:
    """The renders of `folder` that differ from what the current renderers make of their JSON."""
    return [target.name for target, text in renders(folder) if target.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=REPORTS)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale renders")
    args = parser.parse_args(argv)
    if args.check:
        names = stale(args.folder)
        for name in names:
            print(f"stale: {name} (python tools/render_reports.py re-renders it)")
        return 1 if names else 0
    written = 0
    for target, text in renders(args.folder):
        if target.read_text(encoding="utf-8") != text:
            write_text_atomic(target, text)
            written += 1
    print(f"render_reports: {written} render(s) rewritten in {args.folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
