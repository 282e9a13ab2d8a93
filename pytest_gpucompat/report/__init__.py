"""Reports of gpucompat runs: the data model and its JSON form; renderers, merge and diff live in submodules.

The model is loaded on first use (PEP 562): `gpucompat env` imports the `report.cli` parser but no report code.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Cell", "Finding", "Report", "ReportError", "load_report", "write_report_atomic"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
