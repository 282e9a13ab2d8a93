"""Builds the run's report from test reports on the controller (the only process that writes it).

Each cell's payload (``payload.CellPayload``) travels in ``report.user_properties`` because pytest-xdist
serializes those: the controller never sees the items. The file is checkpointed during the run and written at session
end, also on Ctrl-C, so nothing that ran is lost.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pytest

from ..common import jsontext
from ..common.inputs import read_json
from ..report.record import NOT_COVERED, NOT_STARTED_REASON, STOPPED_IN_SETUP, STOPPED_REASON, WORKER_DIED_REASON
from ..report.text import first_line
from . import payload as cell_payload
from .interrupt import received, signals_held
from .payload import CellPayload, RecordDraft
from .state import live_cell_key

if TYPE_CHECKING:
    from .lock import ReportLock
    from .state import RunState

_CHECKPOINT_S = 5.0
# A checkpoint waits long enough that writing it takes at most this share of the run: a report of thousands of
# quick cells takes a noticeable fraction of a second to write, and rewriting it every 5 s would slow such a run
# (1 %: with the final write, the report costs such a run a few percent in all).
_CHECKPOINT_SHARE = 0.01
_WRITE_S_PER_CELL = 50e-6  # what a checkpoint costs per cell until one has been timed
_PHASE_WEIGHT = {"setup": 0, "call": 1, "teardown": 2}
# the phase a worker died in, from the cell's "when": None after a setup that passed, "setup" after one that did not
_NEXT_PHASE = {None: "call", "setup": "teardown", "call": "teardown", "teardown": "teardown"}
_CELLS_DIR = "gpucompat_cells_dir"  # workerinput key: where xdist workers leave their collected cells
_REAPED_S = 3.0  # how long a dead worker's exit status may take to be there
_NO_FAILURE: CellPayload = {}  # a payload that says no engine failed, as `_outcome` reads it (payload.taken_cell)


class ReportCollector:
    def __init__(self, config: pytest.Config, state: RunState) -> None:
        self.config = config
        self.state = state
        # the session's own process: a test that forks, and whose child returns through pytest's machinery, must
        # not have that child write the report (it would no longer match the run's exit status), release the
        # session's lock or remove its cells directory
        self._pid = os.getpid()
        self.path: str | None = state.settings.report
        if self.path:
            from ..report.io import report_path_problem

            problem = report_path_problem(self.path)
            if problem:
                raise pytest.UsageError(f"gpucompat: --gpucompat-report {self.path}: {problem}")
        self._check_baseline_options()
        self._lock: ReportLock | None = None
        if self.path:  # (the lock's module only for a run that writes a report)
            from .lock import ReportLock

            self._lock = ReportLock(self.path)
        self._in_setup: pytest.Item | None = None  # the item whose setup runs now
        self._checkpoint: tuple[int, float] | None = None  # (cells, time) of the last checkpoint written
        self._final_written: bool | None = None  # whether the final write succeeded; None before it
        self._first_checkpoint_tried = False  # the checkpoint written as the first test starts
        # nodeid -> the cell as the record's JSON form (payload.RecordDraft), what the report is built from; a
        # finished cell as its line of the report (_Settled)
        self.cells: dict[str, RecordDraft | _Settled] = {}
        # the settled cells counted as the summary counts them (report.model.CellCounts) as they settle: a write
        # counts only the others
        self._tally: dict[tuple[str, str, tuple[tuple[str, bool], ...]], int] = {}
        self._runner: str | None = None  # the report's runner name, as Report.from_run names it
        self._line_of: tuple[Callable[[Mapping[str, Any]], Any], Callable[[Any], str],
                             Callable[[Mapping[str, Any]], str | None]] | None = None
        self._explained: dict[str, tuple[Any, ...]] = {}  # nodeid -> what its explained_by was judged on
        self.worker_fingerprints: dict[str, dict[str, Any]] = {}
        self.interrupted = False
        self._last_write = time.monotonic()
        self._write_s_per_cell = _WRITE_S_PER_CELL  # measured by each write
        self.diff_text: str | None = None
        self.kept: str | None = None  # why the report file was left as it was (a run that executed no cell)
        self._cells_dir: str | None = None  # made for the first xdist worker
        self._worker_cells: dict[str, dict[str, CellPayload] | None] = {}  # worker id -> its collected cells' payloads
        self._crashes: dict[str, str] = {}  # nodeid -> why its worker crashed, until its report arrives

    # ------------------------------------------------------------------ collecting

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid  # a property that makes a new string each time
        crash = self._crashes.pop(nodeid, None) if self._crashes else None
        if crash is not None:
            self._crashed(report, crash)
        else:
            sent = None
            for key, value in report.user_properties:  # most reports carry none (state.LiveCell.payload_for)
                if key == "gpucompat":
                    sent = value
                    break
            cell = self._cell(nodeid)
            if sent is None and cell is not None:  # a phase that changed nothing since the cell's last payload
                if report.outcome == "passed" and getattr(report, "wasxfail", None) is None:
                    # `_again` the short way, for most reports of a large run: a passed setup or teardown has no
                    # outcome (`_outcome`), a passed call is the cell's outcome unless a teardown came first; a passed
                    # cell has nothing to explain
                    cell["duration_s"] = (cell.get("duration_s") or 0.0) + float(report.duration or 0.0)
                    if report.when == "call" and cell.get("when") != "teardown":
                        cell["outcome"], cell["reason"], cell["when"] = "passed", None, "call"
                        cell.pop("explained_by", None)
                else:
                    self._again(report, cell)
            else:
                # a cell's first payload, made by this process just now: the cell, without decoding it
                taken = cell_payload.taken_cell(sent, nodeid, _worker_id(report)) if cell is None else None
                if taken is not None:
                    cell = self.cells[nodeid] = taken
                    self._again(report, cell, _NO_FAILURE)
                else:
                    payload = json.loads(sent) if isinstance(sent, str) else sent  # JSON text (payload.join)
                    if not isinstance(payload, dict):  # a test that is no cell
                        return
                    if cell is None:
                        cell = self.cells[nodeid] = cell_payload.new_cell(nodeid, _worker_id(report), payload)
                    else:
                        cell_payload.merge(cell, payload)
                    self._again(report, cell, payload)
        if report.when == "teardown":
            self._settle(nodeid)
        # (the first test of _checkpoint_due here: most reports come less than _CHECKPOINT_S after the last write)
        if self.path and time.monotonic() - self._last_write > _CHECKPOINT_S and self._checkpoint_due():
            self.write(partial=True)

    def _again(self, report: pytest.TestReport, cell: RecordDraft, payload: CellPayload | None = None) -> None:
        """What every report of a cell adds, with a payload or not: its duration, its outcome, the rules that explain
        a failure. ``payload`` is read for a report that did not pass only."""
        cell["duration_s"] = (cell.get("duration_s") or 0.0) + float(report.duration or 0.0)
        outcome, reason = _outcome(report, payload)
        if str(report.outcome) == "rerun":  # pytest-rerunfailures runs it again
            _rerun(report, cell, outcome or "failed", reason)
        elif outcome is not None and _should_replace(cell, report.when, outcome):
            cell["outcome"], cell["reason"], cell["when"] = outcome, reason, report.when
        self._explain(cell)

    def _crashed(self, report: pytest.TestReport, reason: str) -> None:
        """xdist's report of an item whose worker died: it carries no payload, so a cell that sent no report yet
        takes its engine, params and findings from what its worker collected."""
        cell = self._cell(report.nodeid)
        when = "setup" if cell is None else _NEXT_PHASE[cell.get("when")]
        if cell is None:
            payload = self._collected_payload(_worker_id(report), report.nodeid)
            if payload is None:  # a test that is no cell of a matrix
                return
            cell = self.cells[report.nodeid] = cell_payload.new_cell(report.nodeid, _worker_id(report), payload)
        cell["outcome"], cell["reason"], cell["when"] = "failed", reason, when
        self._explain(cell)

    def _cell(self, nodeid: str) -> RecordDraft | None:
        """The cell's dict to fold a report into (a settled cell that hears again, a re-run, is a dict again)."""
        cell = self.cells.get(nodeid)
        if isinstance(cell, _Settled):
            self._count(cell, -1)
            cell = self.cells[nodeid] = json.loads(cell.line)
        return cell

    def _count(self, settled: _Settled, n: int) -> None:
        key = (str(self._runner), settled.outcome, settled.findings)
        left = self._tally.get(key, 0) + n
        if left:
            self._tally[key] = left
        else:
            del self._tally[key]

    def _settle(self, nodeid: str) -> None:
        """A cell whose teardown has reported is kept as its line of the report, which is all the report needs of it:
        one string (and a small object) rather than a dict of a dozen keys and their values for the rest of the run,
        and no record made for it at each write. Not a cell that never reported an outcome (`build` gives it the
        run's reason), nor one whose line cannot be written (the write says so, as it always did)."""
        cell = self.cells.get(nodeid)
        if not self.path or not isinstance(cell, dict) or (cell["outcome"] == "error" and not cell.get("reason")):
            return  # without a report, the run's summary is all that reads the cells
        if self._line_of is None:  # once: the report's modules are imported by a run that writes one
            from ..report.model import CellRecord, encode_cell, plain_cell_line

            self._runner = str(self._fingerprint().get("name") or "local")
            self._line_of = (CellRecord.from_dict, encode_cell, plain_cell_line)
        make, encode, plain = self._line_of
        cell["runner"] = self._runner  # the dict is done with (Report.from_run names every cell's runner so too)
        try:
            line = plain(cell)  # a cell that says only how it ended: its line without a record
            if line is not None:
                settled = _Settled.plain(line, cell["outcome"])
            else:
                record = make(cell)
                settled = _Settled(encode(record), record)
        except ValueError:
            return
        self.cells[nodeid] = settled
        self._count(settled, 1)

    def _fingerprint(self) -> dict[str, Any]:
        fp = {**self.state.fingerprint.to_dict(), **self.state.what_if_labels()}
        if self.worker_fingerprints:
            fp["workers"] = self.worker_fingerprints
        return fp

    def _explain(self, cell: RecordDraft) -> None:
        """A failed or errored cell whose reason or log tail matches a rule's signature says which known issue it
        is (``explained_by``); judged again only when what it says changed."""
        if cell["outcome"] not in ("failed", "error") or not (cell["reason"] or cell.get("log_tail")):
            cell.pop("explained_by", None)  # passed, or a cell still in its setup: nothing a signature could match
            return
        said = (cell["reason"], cell.get("log_tail"), cell.get("when"))
        if self._explained.get(cell["nodeid"]) == said:
            return
        from ..kb.signatures import Failure, explained_by_entry, explaining_rules

        failure = Failure(fingerprint=self.state.fingerprint, engine=cell.get("engine"),
                          params=cell.get("params") or {}, reason=cell["reason"], log_tail=cell.get("log_tail"),
                          phase=cell.get("when"))
        cell["explained_by"] = [explained_by_entry(r) for r in explaining_rules(self.state.kb.rules, failure)]
        self._explained[cell["nodeid"]] = said

    def _collected_payload(self, worker: str | None, nodeid: str) -> CellPayload | None:
        """The payload ``share_cells`` left for ``nodeid``: None when it is no cell, ``{}`` when nothing was left
        (a cell with nodeid and outcome only, rather than none)."""
        key = str(worker)
        if key not in self._worker_cells:
            from ..report.io import MAX_REPORT_BYTES

            try:
                cells = read_json(Path(self._cells_dir or "") / f"{key}.json", MAX_REPORT_BYTES)
            except (OSError, ValueError):
                cells = None
            self._worker_cells[key] = cells if isinstance(cells, dict) else None
        cells = self._worker_cells[key]
        return {} if cells is None else cells.get(nodeid)

    def _checkpoint_due(self) -> bool:
        """Every _CHECKPOINT_S, or less often when writing the report would take more than _CHECKPOINT_SHARE of the
        time since the last write."""
        waited = time.monotonic() - self._last_write
        if waited <= _CHECKPOINT_S:
            return False
        return waited * _CHECKPOINT_SHARE > self._write_s_per_cell * len(self.cells)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Give each xdist worker a place to leave its collected cells (see ``share_cells``)."""
        if self._cells_dir is None:
            self._cells_dir = tempfile.mkdtemp(prefix="gpucompat-cells-")
        node.workerinput[_CELLS_DIR] = self._cells_dir

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        output = getattr(node, "workeroutput", None) or {}
        fp = output.get("gpucompat_fingerprint")
        if fp:
            self.worker_fingerprints[str(output.get("workerid", node.gateway.id))] = fp

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """The item a worker died running: its report (failed, no payload) comes next to pytest_runtest_logreport.
        xdist only knows that the worker's channel closed: its exit status says how it died, here and on the
        terminal."""
        how = _how_it_died(getattr(report, "node", None))
        self._crashes[crashitem] = f"worker crashed: {_worker_id(report)} {how}"
        if isinstance(report.longrepr, str):
            report.longrepr = f"{report.longrepr} ({how})"

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if os.getpid() != self._pid:
            return
        if self._lock is not None:
            self._lock.release()
        if self._cells_dir is not None:
            shutil.rmtree(self._cells_dir, ignore_errors=True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        """The first checkpoint, as the first test starts (on the controller too: xdist's workers announce each
        start): a process ended later without pytest's own ending (``os._exit`` by pytest-timeout's thread method,
        a SIGKILL, the OOM killer) leaves a valid report marked interrupted, never none (the lock it leaves is
        taken over by the next run). Not before: a run that starts no test (``--co``, ``-k`` matching nothing,
        ``--lf`` with nothing to re-run) leaves an existing report as it was."""
        if self.path and self._checkpoint is None and not self._first_checkpoint_tried:
            self._first_checkpoint_tried = True
            self.write(partial=True)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._in_setup = item

    @pytest.hookimpl
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        self._in_setup = None

    @pytest.hookimpl
    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        """Ctrl-C or SIGTERM. A cell stopped in its setup (an engine start takes minutes) has sent no report yet:
        it is put in the report from what was collected, as interrupted, rather than left out."""
        self.interrupted = True
        item, self._in_setup = self._in_setup, None
        cs = item.stash.get(live_cell_key, None) if item is not None and item.nodeid not in self.cells else None
        if item is not None and cs is not None:
            self._collected_cell(item.nodeid, cs, STOPPED_IN_SETUP, "setup")

    # ------------------------------------------------------------------ writing

    def _unfinished(self, partial: bool) -> str:
        """Why a cell that never reported an outcome has none, in this write."""
        return STOPPED_REASON if self.interrupted or partial else WORKER_DIED_REASON

    def build(self, exitstatus: int | None = None, partial: bool = False) -> Any:
        """The report as a `Report` (the baseline comparison reads it); the file is written from `_json_chunks`."""
        from ..report.model import Report

        unfinished = self._unfinished(partial)
        cells = [json.loads(cell.line) if isinstance(cell, _Settled) else _said(cell, unfinished)
                 for cell in self.cells.values()]
        return Report.from_run(self._fingerprint(), cells, interrupted=self.interrupted or partial,
                               exitstatus=exitstatus)

    def _json_chunks(self, exitstatus: int | None, partial: bool) -> Iterator[str]:
        """`build(...).json_chunks()` without the records: a settled cell is its line already, and counted as it
        settled (``_tally``); the others (cells still running at a checkpoint, and the few that cannot settle) are
        made records of here. So a checkpoint of a long run costs little more than its bytes."""
        from ..report.model import CellRecord, encode_cell, run_json_chunks

        fp = self._fingerprint()
        name = str(fp.get("name") or "local")
        counts = dict(self._tally)  # (settled cells are this run's runner's: _settle named it as `name` is)
        unfinished = self._unfinished(partial)
        lines: list[str] = []
        for cell in self.cells.values():
            if isinstance(cell, _Settled):
                lines.append(cell.line)
                continue
            record = CellRecord.from_dict({**_said(cell, unfinished), "runner": name})
            key = (name, record.outcome, _severities(record))
            counts[key] = counts.get(key, 0) + 1
            lines.append(encode_cell(record))
        return run_json_chunks(fp, lines, counts, interrupted=self.interrupted or partial, exitstatus=exitstatus,
                               indent=not partial)

    def write(self, exitstatus: int | None = None, partial: bool = False) -> bool:
        """Write the report; a checkpoint (``partial``) is the same JSON without indentation, which is several times
        faster to encode, and the final write replaces it with the indented file."""
        if not self.path:  # (before the report's modules are imported: a run without a report never needs them)
            return True
        if os.getpid() != self._pid:  # a forked test's child: the session's process writes the report
            return True
        from ..report.io import write_report_atomic, write_text_atomic

        start = time.monotonic()
        # Building and encoding allocate a few objects per cell and free none of them until the end; the garbage
        # collector would otherwise walk the whole session's heap (every test report pytest keeps) many times.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        # the final write holds Ctrl-C and SIGTERM until the file is whole: a signal in the middle lost the report
        with contextlib.nullcontext() if partial else signals_held():
            try:
                chunks = self._json_chunks(exitstatus, partial)
                if partial:
                    write_text_atomic(self.path, chunks)
                    self._checkpoint = (len(self.cells), time.time())
                else:
                    write_report_atomic(chunks, self.path)
            except OSError as exc:  # a full disk: the atomic write left the last checkpoint in place
                self._last_write = time.monotonic()  # the next checkpoint waits as usual
                if not partial:
                    from ..report.io import write_failure_message

                    sys.stderr.write(write_failure_message(self.path, exc, self._checkpoint) + "\n")
                return False
            finally:
                if gc_was_enabled:
                    gc.enable()
        self._last_write = time.monotonic()
        if partial and self.cells:  # the first checkpoint has none: its fixed cost is no cost per cell
            self._write_s_per_cell = (self._last_write - start) / len(self.cells)
        return True

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if int(exitstatus) in (int(pytest.ExitCode.INTERRUPTED), int(pytest.ExitCode.INTERNAL_ERROR)) \
                or received() is not None:
            # an internal error ends the session where it is (a test that closed fds 1 and 2 under -s): the cells
            # after it never ran, and a report that does not say so would pass a diff as clean
            self.interrupted = True
            self._add_unreached(session)
        if not self.cells and self._checkpoint is None and self.path and os.path.isfile(self.path):
            # `--co`, `--lf` with nothing to re-run, `-k` matching nothing: a run that executed no cell tells nothing
            # about the stack, and must not replace the report of one that did
            self.kept = f"no cell ran: the report {self.path} was left as it was"
            self._judge_baseline(session)
            return
        self._final_written = self.write(int(exitstatus))
        if not self._final_written and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR  # a lost report must not pass a CI gate
        self._judge_baseline(session)

    def _add_unreached(self, session: pytest.Session) -> None:
        """The collected cells of this process that sent no report (the session ended first): in the report as
        stopped, rather than missing (under xdist the controller collects nothing: its workers' cells are in)."""
        for item in session.items:
            if item.nodeid in self.cells:
                continue
            cs = item.stash.get(live_cell_key, None)
            if cs is not None:
                self._collected_cell(item.nodeid, cs, NOT_STARTED_REASON, None)

    def _collected_cell(self, nodeid: str, cs: Any, reason: str, when: str | None) -> None:
        """A cell that sent no report, put in the report from what was collected for it, with why it has none."""
        payload = cell_payload.build(cs, self.state.fingerprint.name)
        cell = self.cells[nodeid] = cell_payload.new_cell(nodeid, None, payload)
        cell["reason"], cell["when"] = reason, when

    def _judge_baseline(self, session: pytest.Session) -> None:
        baseline = self.state.settings.baseline
        if baseline:
            status = self._compare(baseline)
            if status and session.exitstatus == 0:
                session.exitstatus = status

    def _check_baseline_options(self) -> None:
        """Before the first test: a threshold that names no metric of the registry or of the baseline, or a baseline
        that is not a report, is a usage error now rather than after the whole run."""
        baseline = self.state.settings.baseline
        exprs = self.state.settings.compare_fail
        if not baseline:
            return
        from ..report.io import load_report
        from ..report.model import ReportError
        from ..report.thresholds import check_thresholds, parse_fail_on

        try:
            thresholds, _ = parse_fail_on(exprs)
            if os.path.lexists(baseline):
                check_thresholds(thresholds, load_report(baseline))
        except (ReportError, ValueError) as exc:
            raise pytest.UsageError(f"gpucompat: --gpucompat-baseline: {exc}") from None

    def _compare(self, baseline: str) -> int:
        """Exit status of the comparison; a missing baseline is a first run: a note, and the run passes."""
        from ..report.diff import missing_baseline_note
        from ..report.diff_text import format_diff
        from ..report.gate import check_fail_on, gate
        from ..report.io import load_report
        from ..report.model import ReportError

        current = self.build()
        fail_on = self.state.settings.compare_fail
        try:
            base = load_report(baseline) if os.path.lexists(baseline) else None
            if base is None:
                check_fail_on(fail_on, current)
                self.diff_text = f"gpucompat baseline: {missing_baseline_note(baseline, self.path)}"
                return 0
            result = gate(base, current, fail_on, allow_missing=self.state.settings.allow_missing,
                          sources=(baseline, self.path))
        except (ReportError, ValueError) as exc:
            self.diff_text = f"gpucompat baseline: {exc}"
            return int(pytest.ExitCode.USAGE_ERROR)
        self.diff_text = format_diff(result)
        return 1 if result.regressed else 0

    # ------------------------------------------------------------------ terminal

    def terminal_summary(self, tr: Any) -> None:
        """The gpucompat section (report.summary): what failed first. Every line passes through errors.visible,
        since reasons, log tails and rule texts come from engines and files, not from us."""
        from ..common.errors import visible
        from ..common.textfit import terminal_width
        from ..report.summary import summary_lines

        cells = [_summary_cell(cell) for cell in self.cells.values()]
        if self.kept:
            tr.section("gpucompat")
            tr.write_line(visible(f"gpucompat: {self.kept}"))
        if not cells and not self.diff_text:
            return
        tr.section("gpucompat")
        where = self.state.fingerprint.summary()
        labels = self.state.what_if_labels()
        if labels:
            where = f"what-if {labels['what_if']} ({where}), ran on {labels['host']}"
        width = getattr(getattr(tr, "_tw", None), "fullwidth", None) or terminal_width()
        lines = summary_lines(cells, where, width)
        if self.path:  # named as written only when it was: a failed final write said what the file holds instead
            lines.append(f"report: {self.path}" if self._final_written is not False else
                         f"report: not written to {self.path} (see the error above)")
        if self.diff_text:
            lines.append(self.diff_text)
        for line in lines:
            tr.write_line(visible(line))


class _Settled:
    """A finished cell as its line of the report (``report.model.encode_cell``), with what the report's summary
    counts of it: its outcome and its findings' (severity, unconfirmed)."""

    __slots__ = ("findings", "line", "outcome", "quiet")

    def __init__(self, line: str, record: Any) -> None:
        self.line = line
        self.outcome: str = _OUTCOMES.get(record.outcome, record.outcome)
        self.findings: tuple[tuple[str, bool], ...] = _severities(record)
        # nothing the terminal summary lists: it only counts the cell
        self.quiet = not (record.findings or record.rules or record.explained_by or record.log_tail
                          or record.reruns or record.extra.get("harness_state")) and record.outcome in _QUIET

    @classmethod
    def plain(cls, line: str, outcome: str) -> _Settled:
        """A cell with no findings, rules, log or other keys (``report.model.plain_cell_line``)."""
        settled = cls.__new__(cls)
        settled.line, settled.outcome, settled.findings = line, _OUTCOMES.get(outcome, outcome), ()
        settled.quiet = outcome in _QUIET
        return settled


_QUIET = {o: MappingProxyType({"outcome": o, "findings": (), "rules": ()})
          for o in ("passed", "skipped", "xfailed", "xpassed", "not-covered")}
_OUTCOMES = {o: o for o in _QUIET}  # one string per outcome, not one per settled cell


def _said(cell: RecordDraft, unfinished: str) -> RecordDraft:
    """The cell as a write has it: one that never reported an outcome says why it has none (``unfinished``)."""
    return {**cell, "reason": unfinished} if cell["outcome"] == "error" and not cell.get("reason") else cell


def _severities(record: Any) -> tuple[tuple[str, bool], ...]:
    return tuple((f.severity, f.unconfirmed) for f in record.findings) if record.findings else ()


def _summary_cell(cell: RecordDraft | _Settled) -> Mapping[str, Any]:
    """A cell as the terminal summary reads it: a quiet settled cell as a mapping of what the summary counts (one
    per outcome), any other settled cell (a finding, a log, a rerun to list) decoded."""
    if not isinstance(cell, _Settled):
        return cell
    return _QUIET[cell.outcome] if cell.quiet else json.loads(cell.line)


def share_cells(config: pytest.Config, items: Sequence[pytest.Item], runner: str | None) -> None:
    """On an xdist worker: leave each collected cell's payload where the controller reads it when the worker dies
    before the cell's first report (a crash while its engine starts), so the cell keeps its engine and params."""
    directory = (getattr(config, "workerinput", None) or {}).get(_CELLS_DIR)
    if not directory:
        return
    from ..report.io import write_text_atomic

    cells = {item.nodeid: cell_payload.build(cs, runner)
             for item in items if (cs := item.stash.get(live_cell_key, None))}
    worker = config.workerinput["workerid"]  # type: ignore[attr-defined]
    write_text_atomic(os.path.join(directory, f"{worker}.json"), jsontext.dumps(cells, ensure_ascii=False))


def _worker_id(report: pytest.TestReport) -> str | None:
    """The xdist worker that sent the report (None without xdist)."""
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    return getattr(gateway, "id", None)


def _how_it_died(node: Any) -> str:
    """From the worker process's exit status (execnet's popen gateway runs it as our child)."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if popen is None:
        return "died"
    try:
        code = popen.wait(timeout=_REAPED_S)
    except subprocess.TimeoutExpired:
        return "stopped answering"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"


def _failure_reason(report: pytest.TestReport) -> str:
    """The failure's own message: the crash line pytest prints after ``E`` (``AssertionError: drift 0.3 above
    0.2``, ``assert 3 == 4``), not the traceback's first line, which is the first fixture's repr."""
    message = first_line(getattr(getattr(report.longrepr, "reprcrash", None), "message", None))
    if message:
        return message.removeprefix("Failed: ")  # pytest.fail's own prefix: the message is what was said
    # a plain message (pytest.fail(pytrace=False), an engine's failure), or a repr xdist could only send as text;
    # not longreprtext: under xdist that starts with the worker's banner
    text = str(report.longrepr or "")
    block: list[str] = []
    in_block = False
    for line in text.splitlines():
        is_error = line.startswith("E ")
        if is_error and not in_block:
            block = []
        if is_error and line[1:].strip():
            block.append(line[1:].strip())
        in_block = is_error
    return block[0] if block else first_line(text)


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return first_line(str(longrepr))


MAX_REASON_CHARS = 8 * 1024
"""The most of a reason (a failure's message, a skip's or xfail's reason) a cell keeps: a test may raise with a
10 MB message, and the report must not carry it for one cell. Twice what a signature reads of it."""


def _bounded(reason: str | None) -> str | None:
    if reason is None or len(reason) <= MAX_REASON_CHARS:
        return reason
    return f"{reason[:MAX_REASON_CHARS]}... [{len(reason) - MAX_REASON_CHARS} more characters]"


def _outcome(report: pytest.TestReport, payload: CellPayload | None) -> tuple[str | None, str | None]:
    """The cell's outcome this report says, and its reason (bounded: ``MAX_REASON_CHARS``)."""
    outcome, reason = _unbounded_outcome(report, payload)
    return outcome, _bounded(reason)


def _unbounded_outcome(report: pytest.TestReport, payload: CellPayload | None) -> tuple[str | None, str | None]:
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
    if str(report.longrepr).startswith("[XPASS(strict)]"):
        return "xpassed", str(report.longrepr)
    failed = report.when == "call" or (payload is not None and cell_payload.is_engine_failure(payload))
    return ("failed" if failed else "error"), _failure_reason(report)


def _rerun(report: pytest.TestReport, cell: RecordDraft, outcome: str, reason: str | None) -> None:
    """A failed attempt that pytest-rerunfailures runs again (its report's outcome "rerun", ``report.rerun`` the
    attempts before it): counted, the first failure's reason kept, and the cell's phase forgotten so that the next
    attempt's outcome replaces this one. Until it does, the cell reads as this attempt ended (an interrupted run)."""
    attempt = getattr(report, "rerun", None)
    done = attempt + 1 if type(attempt) is int and attempt >= 0 else (cell.get("reruns") or 0) + 1
    if done > (cell.get("reruns") or 0):
        cell["reruns"] = done
    if not cell.get("rerun_reason"):
        cell["rerun_reason"] = reason
    cell["outcome"], cell["reason"], cell["when"] = outcome, reason, None


def _should_replace(cell: RecordDraft, when: str, outcome: str) -> bool:
    previous = cell.get("when")
    if previous is None:
        return True
    if when == "teardown":
        return outcome in ("failed", "error") and cell["outcome"] == "passed"
    return _PHASE_WEIGHT[when] >= _PHASE_WEIGHT[previous]
