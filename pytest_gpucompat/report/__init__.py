"""Reports of gpucompat runs: the data model, its JSON form, renderers, merge and diff.

The public pieces are named in `__all__` and importable from here; the submodules are the implementation:

* `record`: `CellRecord`, `FindingRecord`, the one definition of what a cell and a finding say (frozen data and
  the JSON form) (what a worker attaches to a test's report and how the controller merges it is
  `session/payload.py`: this package knows nothing of pytest);
* `model`: `Report` (and the records re-exported), `ReportError`;
* `validate`: the checks `load_report` applies to what it reads; `io`: `load_report` and the atomic writes;
* `html`, `markdown`, `junit`: renderers, each a function of a `Report` (`html_assets`: the page's CSS/JS;
  `html_runners`, `figures`, `charts`: its runner headers, cell states and figures, SVG charts);
* `merge`: several runners' reports into one matrix; `diff`: a report against a baseline (the CI gate);
* `cli`: `gpucompat report | merge | diff`. The collector that builds a run's report inside pytest is on the
  pytest side (`session/collector.py`).

Everything is loaded on first use (PEP 562): `gpucompat env` imports the `report.cli` parser but no report code.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

#: Public name -> the submodule that defines it.
_WHERE: dict[str, str] = {
    "Report": "model",
    "CellRecord": "model",
    "FindingRecord": "model",
    "ReportError": "model",
    "load_report": "io",
    "write_report_atomic": "io",
    "render_html": "html",
    "render_markdown": "markdown",
    "render_junit": "junit",
    "merge_reports": "merge",
    "diff_reports": "diff",
    "format_diff": "diff_text",
    "parse_threshold": "diff",
    "DiffResult": "diff",
}

__all__ = [
    "CellRecord",
    "DiffResult",
    "FindingRecord",
    "Report",
    "ReportError",
    "diff_reports",
    "format_diff",
    "load_report",
    "merge_reports",
    "parse_threshold",
    "render_html",
    "render_junit",
    "render_markdown",
    "write_report_atomic",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs; at run time __getattr__ loads them
    from .diff import DiffResult, diff_reports, parse_threshold
    from .diff_text import format_diff
    from .html import render_html
    from .io import load_report, write_report_atomic
    from .junit import render_junit
    from .markdown import render_markdown
    from .merge import merge_reports
    from .model import CellRecord, FindingRecord, Report, ReportError


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
