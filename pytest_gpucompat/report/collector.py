"""Builds the run's report from test reports on the controller (the only process that writes it).

Cell data travels in ``report.user_properties`` because pytest-xdist serializes those: the
controller never sees the items. The file is checkpointed during the run and written at session
end, also on Ctrl-C, so nothing that ran is lost.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

import pytest

from ..state import NOT_COVERED, RunState

_CHECKPOINT_S = 5.0
# A checkpoint waits long enough that writing it takes at most this share of the run: a report of thousands of
# quick cells takes a noticeable fraction of a second to write, and rewriting it every 5 s would slow such a run.
_CHECKPOINT_SHARE = 0.05
_WRITE_S_PER_CELL = 50e-6  # what a checkpoint costs per cell until one has been timed
_PHASE_WEIGHT = {"setup": 0, "call": 1, "teardown": 2}


class ReportCollector:
    def __init__(self, config: pytest.Config, state: RunState) -> None:
        self.config = config
        self.state = state
        self.path: str | None = config.getoption("gpucompat_report", None)
        self.cells: dict[str, dict[str, Any]] = {}
        self.worker_fingerprints: dict[str, dict[str, Any]] = {}
        self.interrupted = False
        self._last_write = time.monotonic()
        self._write_s_per_cell = _WRITE_S_PER_CELL  # measured by each write
        self.diff_text: str | None = None

    # ------------------------------------------------------------------ collecting

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload = next((v for k, v in report.user_properties if k == "gpucompat"), None)
        crashed = report.failed and "crashed" in (report.longreprtext or "") and payload is None
        if payload is None and not crashed:
            return
        cell = self.cells.get(report.nodeid)
        if cell is None:
            cell = self._new_cell(report, payload or {})
            self.cells[report.nodeid] = cell
        elif payload is not None:
            cell["metrics"].update(payload.get("metrics") or {})
            if payload.get("log_tail"):
                cell["log_tail"] = payload["log_tail"]
            cell["info"] = payload.get("info") or cell.get("info", {})
        cell["duration_s"] = (cell.get("duration_s") or 0.0) + float(report.duration or 0.0)
        outcome, reason = _outcome(report, payload or {})
        if outcome is not None and _should_replace(cell, report.when, outcome):
            cell["outcome"], cell["reason"], cell["when"] = outcome, reason, report.when
        if crashed:
            cell["outcome"], cell["reason"] = "failed", _first_line(report.longreprtext)
        if self.path and self._checkpoint_due():
            self.write(partial=True)

    def _checkpoint_due(self) -> bool:
        """Every _CHECKPOINT_S, or less often when writing the report would take more than _CHECKPOINT_SHARE of the
        time since the last write."""
        waited = time.monotonic() - self._last_write
        if waited <= _CHECKPOINT_S:
            return False
        return waited * _CHECKPOINT_SHARE > self._write_s_per_cell * len(self.cells)

    def _new_cell(self, report: pytest.TestReport, payload: dict[str, Any]) -> dict[str, Any]:
        return {
            "nodeid": report.nodeid,
            "engine": payload.get("engine"),
            "params": payload.get("params") or {},
            "axes": payload.get("axes") or {},
            "outcome": "error",
            "reason": None,
            "rules": payload.get("rules") or [],
            "findings": payload.get("findings") or [],
            "metrics": dict(payload.get("metrics") or {}),
            "duration_s": 0.0,
            "log_tail": payload.get("log_tail"),
            "worker": getattr(report, "node", None)
            and getattr(report.node, "gateway", None)
            and report.node.gateway.id,
            "info": payload.get("info") or {},
            "gpu": payload.get("gpu"),
        }

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        fp = output.get("gpucompat_fingerprint")
        if fp:
            self.worker_fingerprints[str(output.get("workerid", node.gateway.id))] = fp

    @pytest.hookimpl
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        self.interrupted = True

    # ------------------------------------------------------------------ writing

    def build(self, exitstatus: int | None = None, partial: bool = False) -> Any:
        from .model import Report

        runner = self.state.fingerprint.name or "local"
        cells = []
        for cell in self.cells.values():
            data = dict(cell)
            data["runner"] = runner
            if data["outcome"] == "error" and not data.get("reason"):
                data["reason"] = "did not finish: the run was interrupted or its worker died"
            extra_info = data.pop("info", {}) or {}
            gpu = data.pop("gpu", None)
            data["extra"] = {k: v for k, v in (("engine_info", extra_info), ("gpu", gpu)) if v}
            cells.append(data)
        fp = self.state.fingerprint.to_dict()
        if self.worker_fingerprints:
            fp["workers"] = self.worker_fingerprints
        return Report.from_run(fp, cells, interrupted=self.interrupted or partial, exitstatus=exitstatus)

    def write(self, exitstatus: int | None = None, partial: bool = False) -> None:
        """Write the report; a checkpoint (``partial``) is the same JSON without indentation, which is several times
        faster to encode, and the final write replaces it with the indented file."""
        from .model import write_report_atomic, write_text_atomic

        if not self.path:
            return
        start = time.monotonic()
        # Building and encoding allocate a few objects per cell and free none of them until the end; the garbage
        # collector would otherwise walk the whole session's heap (every test report pytest keeps) many times.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            report = self.build(exitstatus, partial)
            if partial:
                write_text_atomic(self.path, json.dumps(report.to_dict(), ensure_ascii=False, allow_nan=False) + "\n")
            else:
                write_report_atomic(report, self.path)
        finally:
            if gc_was_enabled:
                gc.enable()
        self._last_write = time.monotonic()
        if partial:
            self._write_s_per_cell = (self._last_write - start) / max(1, len(self.cells))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if int(exitstatus) == int(pytest.ExitCode.INTERRUPTED):
            self.interrupted = True
        self.write(int(exitstatus))
        baseline = self.config.getoption("gpucompat_baseline", None)
        if baseline:
            status = self._compare(baseline)
            if status and session.exitstatus == 0:
                session.exitstatus = status

    def _compare(self, baseline: str) -> int:
        from .diff import diff_reports, format_diff, parse_threshold
        from .model import ReportError, load_report

        try:
            base = load_report(baseline)
            thresholds = [parse_threshold(e) for e in self.config.getoption("gpucompat_compare_fail") or []]
        except (ReportError, ValueError) as exc:
            self.diff_text = f"gpucompat baseline: {exc}"
            return int(pytest.ExitCode.USAGE_ERROR)
        result = diff_reports(base, self.build(), thresholds)
        self.diff_text = format_diff(result)
        return 1 if result.regressed else 0

    # ------------------------------------------------------------------ terminal

    def terminal_summary(self, tr: Any) -> None:
        cells = list(self.cells.values())
        if not cells and not self.diff_text:
            return
        tr.section("gpucompat")
        counts: dict[str, int] = {}
        for c in cells:
            counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
        tr.write_line(
            f"{len(cells)} cells on {self.state.fingerprint.summary()}: "
            + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        )
        for c in cells:
            if c["outcome"] == "xpassed" and c["rules"]:
                tr.write_line(f"evidence against rule(s) {', '.join(c['rules'])}: {c['nodeid']} passed")
        degraded = sorted({f["id"] for c in cells for f in c["findings"] if f["severity"] == "degraded"})
        if degraded:
            tr.write_line(f"degraded findings attached: {', '.join(degraded)}")
        for c in cells:
            if c["outcome"] in ("failed", "error") and c.get("log_tail"):
                tr.write_line(f"{c['nodeid']}: engine log tail:")
                for line in str(c["log_tail"]).splitlines()[-10:]:
                    tr.write_line(f"    {line}")
        if self.path:
            tr.write_line(f"report: {self.path}")
        if self.diff_text:
            tr.write_line(self.diff_text)


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return _first_line(str(longrepr))


def _outcome(report: pytest.TestReport, payload: dict[str, Any]) -> tuple[str | None, str | None]:
    wasxfail = getattr(report, "wasxfail", None)
    if report.skipped:
        if wasxfail is not None:
            return "xfailed", wasxfail or None
        reason = _skip_reason(report)
        return ("not-covered" if reason.startswith(NOT_COVERED) else "skipped"), reason
    if report.passed:
        if wasxfail is not None:
            return "xpassed", wasxfail or None
        return ("passed", None) if report.when == "call" else (None, None)
    text = report.longreprtext or ""
    if text.startswith("[XPASS(strict)]"):
        return "xpassed", text
    if report.when == "call" or payload.get("engine_failed"):
        return "failed", _first_line(text)
    return "error", _first_line(text)


def _should_replace(cell: dict[str, Any], when: str, outcome: str) -> bool:
    previous = cell.get("when")
    if previous is None:
        return True
    if when == "teardown":
        return outcome in ("failed", "error") and cell["outcome"] == "passed"
    return _PHASE_WEIGHT[when] >= _PHASE_WEIGHT[previous]
