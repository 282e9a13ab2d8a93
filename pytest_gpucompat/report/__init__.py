"""Reports of gpucompat runs: the data model and its JSON form; renderers, merge and diff live in submodules."""

from __future__ import annotations

from .model import Cell, Finding, Report, ReportError, load_report, write_report_atomic

__all__ = ["Cell", "Finding", "Report", "ReportError", "load_report", "write_report_atomic"]
