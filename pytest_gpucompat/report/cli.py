"""`gpucompat report | merge | diff | explain | golden`: thin commands over the report modules.

Each returns an exit status and reports bad input in one line on stderr (no traceback): 0 ok, 1 regression (diff),
a failure no rule explains (explain) or a cell the golden outputs fail (golden), 2 bad input or an output that
cannot be written.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import import_module

from ..options import CLI, add_options

# The renderers are imported by the commands that use them: every `gpucompat` command builds this parser, and
# `gpucompat env` should not pay for the report code.

EXIT_OK = 0
EXIT_REGRESSED = 1
EXIT_UNEXPLAINED = 1
EXIT_GOLDEN_FAILED = 1
EXIT_BAD_INPUT = 2

#: The output formats of `gpucompat report`, in the order they are written: `--NAME FILE` -> (module of this
#: package, its renderer: a function of a `Report` that returns the file's text, the option's help). A new format
#: is a renderer module and one line here (docs/extending.md, "Add a report format").
FORMATS: dict[str, tuple[str, str, str]] = {
    "html": ("html", "render_html", "write the self-contained HTML matrix here"),
    "markdown": ("markdown", "render_markdown", "write the Markdown summary here"),
    "junit": ("junit", "render_junit", "write JUnit XML here"),
}


REPORT_HELP = "report JSON written by a pytest --gpucompat-report run or by `merge`"


def _error(command: str, message: str) -> int:
    print(f"gpucompat {command}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _os_message(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


def _cannot_write(command: str, option: str | None, exc: OSError, target: str | os.PathLike[str] | None = None) \
        -> int:
    """The one line for an output that could not be written (or was refused: a symlink, a device), naming it:
    ``target`` where the error itself names no file (a full disk)."""
    if target is not None and not exc.filename:
        exc.filename = os.fspath(target)
    return _error(command, f"cannot write {_os_message(exc)}" + (f" ({option})" if option else ""))


def cmd_report(path: str | os.PathLike[str], **outputs: str | os.PathLike[str] | None) -> int:
    """Render a report into the files named by format (`html=`, `markdown=`, `junit=`, ...: a key of `FORMATS`);
    with none the Markdown goes to stdout. Also fills $GITHUB_STEP_SUMMARY."""
    from .io import load_report, write_text_atomic
    from .markdown import render_markdown, write_step_summary
    from .model import ReportError

    unknown = sorted(set(outputs) - set(FORMATS))
    if unknown:
        raise TypeError(f"cmd_report: unknown format(s) {', '.join(unknown)}; known: {', '.join(FORMATS)}")
    try:
        report = load_report(path)
    except ReportError as exc:
        return _error("report", str(exc))
    md = render_markdown(report)
    option: str | None = None
    target: str | os.PathLike[str] | None = None
    written: list[str] = []
    try:
        for name, (module, renderer, _help) in FORMATS.items():
            target = outputs.get(name)
            if not target:
                continue
            option = f"--{name}"
            render = getattr(import_module(f".{module}", __package__), renderer)
            write_text_atomic(target, md if render is render_markdown else render(report))
            written.append(f"{name} {os.fspath(target)}")
        option, target = "$GITHUB_STEP_SUMMARY", os.environ.get("GITHUB_STEP_SUMMARY")
        if write_step_summary(md):
            written.append(f"markdown $GITHUB_STEP_SUMMARY ({os.environ.get('GITHUB_STEP_SUMMARY')})")
    except OSError as exc:
        return _cannot_write("report", option, exc, target)
    if not any(outputs.values()):
        sys.stdout.write(md)
    else:  # what was written where, so a CI log shows where to look
        summary = report.summary
        sys.stdout.write(f"gpucompat report: {summary['cells']} cells from {os.fspath(path)}; wrote "
                         + ", ".join(written) + "\n")
    return EXIT_OK


def cmd_merge(
    paths: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    html: str | os.PathLike[str] | None = None,
) -> int:
    """Merge runner reports into one; runner names that repeat get `#2`, `#3`, ..."""
    from .html import render_html
    from .io import load_report, write_report_atomic, write_text_atomic
    from .merge import merge_reports
    from .model import ReportError

    if not paths:
        return _error("merge", "no reports given")
    try:
        reports = [load_report(p) for p in paths]
    except ReportError as exc:
        return _error("merge", str(exc))
    merged = merge_reports(reports)
    option, target = "--output", output
    try:
        write_report_atomic(merged, output)
        if html:
            option, target = "--html", html
            write_text_atomic(html, render_html(merged))
    except OSError as exc:
        return _cannot_write("merge", option, exc, target)
    print(f"gpucompat merge: {len(merged.cells)} cells of {len(merged.runners)} runners -> {os.fspath(output)}")
    return EXIT_OK


def cmd_diff(
    baseline: str | os.PathLike[str],
    current: str | os.PathLike[str],
    fail_on: Sequence[str] | None = None,
    allow_missing: bool = False,
    markdown: str | os.PathLike[str] | None = None,
    as_json: bool = False,
) -> int:
    """Compare current with baseline: exit 1 on a regression (lost coverage included unless `allow_missing`; a key
    figure worse beyond its default tolerance unless `fail_on` relaxes it or says `no-defaults`; a figure changed
    beyond the runs' noise when `fail_on` has `changed`), 0 when none, 2 on bad input.

    The text goes to stdout (`as_json`: only JSON), the Markdown to `markdown` and appended to $GITHUB_STEP_SUMMARY
    when set; under GitHub Actions each regression is also an `::error` annotation (on stderr with `as_json`).
    A missing baseline is bad input too (a gate with nothing to compare must not pass), with the first run's way
    out in the message; so is a threshold on a metric neither report nor the registry knows.
    """
    import json

    from .diff import missing_baseline_note
    from .diff_markdown import diff_json, github_annotations, render_diff_markdown
    from .diff_text import format_diff
    from .gate import check_fail_on, gate
    from .io import load_report, write_text_atomic
    from .markdown import write_step_summary
    from .model import ReportError

    try:
        check_fail_on(fail_on or ())  # a bad --fail-on is named before a missing baseline
    except ValueError as exc:
        return _error("diff", str(exc))
    if not os.path.lexists(baseline):
        return _error("diff", missing_baseline_note(os.fspath(baseline), os.fspath(current)))
    try:
        result = gate(load_report(baseline), load_report(current), fail_on or (), allow_missing=allow_missing,
                      sources=(os.fspath(baseline), os.fspath(current)))
    except (ReportError, ValueError) as exc:
        return _error("diff", str(exc))
    md = render_diff_markdown(result) if markdown or os.environ.get("GITHUB_STEP_SUMMARY") else ""
    option = "--markdown"
    try:
        if markdown:
            write_text_atomic(markdown, md)
        option = "$GITHUB_STEP_SUMMARY"
        write_step_summary(md)
    except OSError as exc:
        return _cannot_write("diff", option, exc)
    sys.stdout.write(json.dumps(diff_json(result), indent=2, ensure_ascii=False, allow_nan=False) + "\n" if as_json
                     else format_diff(result))
    if os.environ.get("GITHUB_ACTIONS") == "true" and result.regressed:
        stream = sys.stderr if as_json else sys.stdout
        stream.write("".join(line + "\n" for line in github_annotations(result)))
    return EXIT_REGRESSED if result.regressed else EXIT_OK


def cmd_explain(
    path: str | os.PathLike[str],
    kb: Sequence[str | os.PathLike[str]] = (),
    builtin: bool = True,
    as_json: bool = False,
    write: bool = False,
) -> int:
    """Which known issue each failed or errored cell is; a proposed rule for the others. Exit 0 when every failure
    is explained (or there is none), 1 when some are not, 2 on bad input. ``write``: the report itself gets each
    cell's `explained_by` as the knowledge base judges it now (a rule written after the run explains the run's
    failures in every rendering made from it)."""
    from ..common import jsontext
    from ..common.errors import InputError
    from ..kb import load_kb
    from ..kb.failure_modes import load_failure_modes
    from .explain import explain_report, explanation_json, format_explanation
    from .io import load_report
    from .model import ReportError

    source = os.fspath(path)
    try:
        report = load_report(source)
        knowledge = load_kb(kb, builtin=builtin)
        result = explain_report(report, knowledge, source, load_failure_modes())
    except (ReportError, InputError) as exc:
        return _error("explain", str(exc))
    if write:
        from .explain import with_explanations
        from .io import write_report_atomic

        try:
            write_report_atomic(with_explanations(report, result, knowledge), source)
        except OSError as exc:
            return _cannot_write("explain", None, exc, source)
    sys.stdout.write(jsontext.dumps(explanation_json(result), indent=2, ensure_ascii=False) + "\n" if as_json
                     else format_explanation(result))
    return EXIT_UNEXPLAINED if result.unexplained or result.stopped else EXIT_OK


def cmd_golden(
    path: str | os.PathLike[str],
    golden: str | os.PathLike[str] | None,
    output: str | os.PathLike[str] | None = None,
    html: str | os.PathLike[str] | None = None,
    as_json: bool = False,
) -> int:
    """Judge each precision cell's kept outputs against the golden files in ``golden``; with ``output``, write the
    report with those verdicts in place of the run's. Exit 0 when no checked cell failed, 1 when one failed or its
    golden file was refused, 2 on bad input."""
    from ..checks.golden_files import load_golden_source
    from ..common import jsontext
    from ..common.errors import InputError
    from .golden import check_report, checks_json, format_checks, with_checks
    from .html import render_html
    from .io import load_report, write_report_atomic, write_text_atomic
    from .model import ReportError

    if not golden:
        return _error("golden", "--golden PATH is required: a directory of golden files, or one file")
    source, where = os.fspath(path), os.fspath(golden)
    try:
        report = load_report(source)
        files = load_golden_source(where)
        checks = check_report(report, files, where, source)
    except (ReportError, InputError) as exc:
        return _error("golden", str(exc))
    option, target = "--output", output
    try:
        if output or html:
            updated = with_checks(report, checks, where)
            if output:
                write_report_atomic(updated, output)
            if html:
                option, target = "--html", html
                write_text_atomic(html, render_html(updated))
    except OSError as exc:
        return _cannot_write("golden", option, exc, target)
    text = jsontext.dumps(checks_json(checks), indent=2) + "\n" if as_json else format_checks(checks, source, where)
    sys.stdout.write(text)
    return EXIT_GOLDEN_FAILED if any(check.bad for check in checks) else EXIT_OK


def _run_report(args: argparse.Namespace) -> int:
    return cmd_report(args.report, **{name: getattr(args, name) for name in FORMATS})


def _run_merge(args: argparse.Namespace) -> int:
    return cmd_merge(args.reports, args.output, html=args.html)


def _run_diff(args: argparse.Namespace) -> int:
    return cmd_diff(args.baseline, args.current, args.compare_fail or [], allow_missing=args.allow_missing,
                    markdown=args.markdown, as_json=args.json)


def _run_explain(args: argparse.Namespace) -> int:
    if args.log is not None:
        if args.report is not None or args.write:
            return _error("explain", "--log explains a log, not a report: give one of them")
        return cmd_explain_log(args.log, args.kb or [], builtin=not args.no_builtin_rules, as_json=args.json,
                               env=args.env, engine=args.engine)
    if args.report is None:
        return _error("explain", "give a report, or --log FILE (- for stdin) for a raw engine log")
    return cmd_explain(args.report, args.kb or [], builtin=not args.no_builtin_rules, as_json=args.json,
                       write=args.write)


def cmd_explain_log(path: str, kb: Sequence[str | os.PathLike[str]] = (), builtin: bool = True,
                    as_json: bool = False, env: str | None = None, engine: str | None = None) -> int:
    """``explain --log FILE``: the known issue a raw engine log is (kb.diagnose). Exit 0 when a rule names it, 1
    when none does, 2 on bad input."""
    from ..common import jsontext
    from ..common.errors import InputError
    from ..kb import load_kb
    from ..kb.diagnose import diagnose, format_diagnosis, read_log_tail
    from ..machine import fingerprint

    try:
        log, size = read_log_tail(path, sys.stdin.buffer if path == "-" else None)
        knowledge = load_kb(kb, builtin=builtin)
        fp = None
        if env:
            fleet = fingerprint.load(env)
            if len(fleet) != 1:
                raise InputError(env, None, "--log is one machine's: give a fingerprint file of one runner")
            fp = next(iter(fleet.values()))
    except InputError as exc:
        return _error("explain", str(exc))
    found = diagnose(knowledge.rules, log, fp, engine)
    source = "<stdin>" if path == "-" else path
    if as_json:
        sys.stdout.write(jsontext.dumps({"log": source, "bytes": size, "known": bool(found),
                                         "rules": [{"id": r.id, "severity": r.severity, "confidence": r.confidence,
                                                    "engine": r.engine, "summary": r.summary,
                                                    "workaround": r.workaround} for r in found]}, indent=2) + "\n")
    else:
        sys.stdout.write(format_diagnosis(source, size, found) + "\n")
    return EXIT_OK if found else EXIT_UNEXPLAINED


def _run_golden(args: argparse.Namespace) -> int:
    return cmd_golden(args.report, args.golden, args.output, html=args.html, as_json=args.json)


def add_report_subparsers(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `report`, `merge`, `diff`, `explain` and `golden`; each sets `func(args) -> int` as its default."""
    p = subparsers.add_parser(
        "report",
        help="render a report as HTML, Markdown or JUnit XML",
        description="Render a gpucompat report. Without an output option the Markdown summary is printed. "
        "When $GITHUB_STEP_SUMMARY is set the summary is appended to it.",
    )
    p.add_argument("report", help=REPORT_HELP)
    for name, (_module, _renderer, help_text) in FORMATS.items():
        p.add_argument(f"--{name}", metavar="FILE", help=help_text)
    p.set_defaults(func=_run_report)

    p = subparsers.add_parser(
        "merge",
        help="merge the reports of several runners into one matrix",
        description="Merge runner reports. Duplicate runner names are suffixed #2, #3, ... in argument order.",
    )
    p.add_argument("reports", nargs="+", metavar="REPORT", help="report JSON files")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="merged report JSON to write")
    p.add_argument("--html", metavar="FILE", help="also write the HTML matrix of the merged report")
    p.set_defaults(func=_run_merge)

    p = subparsers.add_parser(
        "diff",
        help="compare a report with a baseline (CI gate)",
        description="Compare CURRENT with BASELINE. Exit 1 on a regression (a cell that passed and now fails or "
        "is xfailed, a new broken finding, a failing cell of a runner the baseline has not, a key figure worse "
        "beyond the runs' noise and its default tolerance (docs/ci.md) or a --compare-fail threshold, also spelled "
        "--fail-on, or with --fail-on changed any figure changed beyond the runs' noise), 0 otherwise, 2 on bad "
        "input (a missing baseline, an unknown metric). Prints what differed between the runs and the compare "
        "table; appends its Markdown to $GITHUB_STEP_SUMMARY when set, and under GitHub Actions annotates each "
        "regression.",
    )
    p.add_argument("baseline", help="baseline report JSON")
    p.add_argument("current", help="current report JSON")
    add_options(p.add_argument, "", CLI["diff"], cli=True)
    p.add_argument("--markdown", metavar="FILE", help="also write the diff as Markdown (headline, regressions first) "
                   "here, for a CI system's job summary")
    p.add_argument("--json", action="store_true", help="print JSON only, with full node ids")
    p.set_defaults(func=_run_diff)

    p = subparsers.add_parser(
        "explain",
        help="say which known issue each failed cell of a report is; propose a rule for the others",
        description="Group the failed and errored cells of REPORT by the knowledge-base rule whose signature their "
        "reason or log tail matches (with its workaround); for the others print a proposed rule (YAML, "
        "confidence verified, citing REPORT) to check and commit. Exit 0 when every failure is explained, 1 when "
        "some are not, 2 on bad input.",
    )
    p.add_argument("report", nargs="?", help=REPORT_HELP)
    add_options(p.add_argument, "", CLI["explain"], cli=True)
    p.add_argument("--log", metavar="FILE", help="explain a raw engine log or traceback instead of a report (- for "
                   "stdin): the known issue, its rule and workaround, or 'not known'; only its end is read")
    p.add_argument("--env", metavar="FINGERPRINT", help="with --log: the machine the log came from (a fingerprint "
                   "file), so rules its facts contradict are left out")
    p.add_argument("--engine", help="with --log: the engine that wrote it")
    p.add_argument("--json", action="store_true", help="print JSON only")
    p.add_argument("--write", action="store_true",
                   help="record in REPORT each failed cell's explained_by as the knowledge base judges it now, so "
                        "every rendering made from it says which known issue the failure is")
    p.set_defaults(func=_run_explain)

    p = subparsers.add_parser(
        "golden",
        help="judge a report's precision cells against golden outputs, after the run (no GPU needed)",
        description="Check each precision cell of REPORT against the golden files in --golden PATH, from the outputs "
        "the cell kept: the same matching (model content and prompt ids), verdict and thresholds as a run with "
        "--gpucompat-golden. Exit 0 when no checked cell failed, 1 when one failed or its golden file was refused, "
        "2 on bad input.",
    )
    p.add_argument("report", help=REPORT_HELP)
    add_options(p.add_argument, "", CLI["golden"], cli=True)
    p.add_argument("-o", "--output", metavar="FILE", help="write the report with these verdicts in the cells' golden "
                   "entries and golden_* figures")
    p.add_argument("--html", metavar="FILE", help="also write that report's HTML matrix")
    p.add_argument("--json", action="store_true", help="print JSON only")
    p.set_defaults(func=_run_golden)
