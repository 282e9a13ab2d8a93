"""Hostile input: every file the product reads, malformed, binary, deep, huge, a bomb or wrong-typed.

Each case must end in exit status 2 and exactly one line on stderr naming the file (and the field where there is
one), quickly: never a traceback, never a hang. Small cases are files in tests/hostile/; big, deep and bomb files are
generated into tmp_path. Most run the CLI in-process for speed, a few through a real subprocess.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from _cost import HANG_S, cpu, within

from pytest_gpucompat.checks.compare import load_thresholds
from pytest_gpucompat.cli import main
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.report import markdown as md_module
from pytest_gpucompat.report.io import load_report, write_failure_message
from pytest_gpucompat.report.model import Report, ReportError
from pytest_gpucompat.workload.matrix import load_named_matrices

HOSTILE = Path(__file__).parent / "hostile"
TIME_LIMIT_S = 10.0
"""CPU seconds a hostile input may cost a command (its own Python start included): each is refused in well under
one, and a blow-up (a YAML alias bomb expanded, a nesting recursed into) takes far more. Wall-clock time is only a
hang guard (HANG_S): a loaded machine stretches it, not the CPU time."""
RULE = "{id: r1, summary: s, severity: broken, failure: crash, confidence: upstream, sources: [{kind: doc, ref: x}]}"

# corpus file -> the field its error must name (None: the file as a whole is bad)
EXPECTED: dict[str, str | None] = {
    "fingerprints/invalid-utf8.yaml": None,
    "fingerprints/binary.json": None,
    "fingerprints/gpu-name-number.yaml": "gpus[0].name",
    "fingerprints/gpu-name-list.yaml": "gpus[0].name",
    "fingerprints/gpu-index-text.yaml": "gpus[0].index",
    "fingerprints/gpu-memory-bool.yaml": "gpus[0].memory_mib",
    "fingerprints/gpu-ecc-text.yaml": "gpus[0].ecc",
    "fingerprints/link-missing-fields.yaml": "links[0].b",
    "fingerprints/link-kind-number.yaml": "links[0].kind",
    "fingerprints/os-list.yaml": "os",
    "fingerprints/name-mapping.yaml": "name",
    "fingerprints/reasons-mapping.yaml": "reasons[0]",
    "fingerprints/gpu-count-text.yaml": "gpu_count",
    "fingerprints/gpu-count-huge.yaml": "gpu_count",
    "fingerprints/params-nan.yaml": "params.temperature",
    "fingerprints/params-date.yaml": "params.revision",
    "fingerprints/params-alias.yaml": None,
    "fingerprints/fleet-entry-list.yaml": "fleet.a100-ci",
    "fingerprints/fleet-entry-gpu-name.yaml": "fleet.a100-ci.gpus[0].name",
    "fingerprints/bad-json.json": None,
    "fingerprints/nan-json.json": "params.t",
    "fingerprints/top-level-list.yaml": None,
    "fingerprints/multi-document.yaml": None,
    "fingerprints/env-list.yaml": "env",
    "fingerprints/env-value-number.yaml": "env.VLLM_USE_V1",
    "fingerprints/env-value-mapping.yaml": "env.NCCL_DEBUG",
    "fingerprints/env-value-null.json": "env.VLLM_USE_V1",
    "fingerprints/fleet-duplicate-runner.yaml": "duplicate key '1'",
    "fingerprints/duplicate-key.json": "duplicate key 'os'",
    "fingerprints/surrogate.json": "gpus[0].name",
    "fingerprints/surrogate-key.json": "env.VLLM_\\udfff",
    "rules/invalid-utf8.yaml": None,
    "rules/binary.yaml": None,
    "rules/summary-list.yaml": "summary",
    "rules/note-mapping.yaml": "note",
    "rules/ref-list.yaml": "sources[0].ref",
    "rules/gpu-mapping.yaml": "when.gpu[0]",
    "rules/driver-list.yaml": "when.driver",
    "rules/param-value-mapping.yaml": "when.params.dtype[0]",
    "rules/severity-list.yaml": "severity",
    "rules/mixed-unknown-keys.yaml": "1",
    "rules/id-date.yaml": "rules[0].id",
    "rules/alias.yaml": None,
    "rules/merge-key.yaml": None,
    "rules/top-level-list.yaml": None,
    "rules/duplicate-key.yaml": "duplicate key 'summary'",
    # signatures of the shapes that take seconds to minutes on one long line
    "rules/signature-bounded-triple.yaml": "rule 'r1': field 'signature[0]'",
    "rules/signature-lookahead.yaml": "rule 'r1': field 'signature[0]'",
    "rules/signature-optional-group.yaml": "rule 'r1': field 'signature[0]'",
    "rules/signature-optional-separator.yaml": "rule 'r1': field 'signature[0]'",
    "rules/signature-huge-bounds.yaml": "rule 'r1': field 'signature[0]'",
    "reports/invalid-utf8.json": None,
    "reports/binary.json": None,
    "reports/bench.json": "not a gpucompat report",
    "reports/fingerprint.json": "not a gpucompat report",
    "reports/nan-metric.json": "$.cells[0].metrics.tokens_per_s",
    "reports/huge-metric.json": "$.cells[0].metrics.tokens_per_s",
    "reports/infinite-param.json": "$.cells[0].params.t",
    "reports/gpu-name-list.json": "$.runners.r.gpus[0].name",
    "reports/env-value-number.json": "$.runners.r.env.VLLM_USE_V1",
    "reports/what-if-list.json": "$.runners.r.what_if",
    "reports/links-number.json": "$.runners.r.links",
    "reports/links-item-text.json": "$.runners.r.links[0]",
    "reports/outputs-list.json": "$.cells[0].outputs",
    "reports/surrogate-reason.json": "$.cells[0].reason",
    "reports/duplicate-key.json": "duplicate key 'cells'",
    "matrices/invalid-utf8.yaml": None,
    "matrices/engine-mapping.yaml": "matrices.smoke[0].engine[0]",
    "matrices/axis-name-number.yaml": "matrices.smoke[0].axes.1",
    "matrices/product-bomb.yaml": "matrices.smoke[0]",
    "matrices/alias.yaml": None,
    "matrices/not-mapping.yaml": "matrices",
    "thresholds/invalid-utf8.yaml": None,
    "thresholds/value-text.yaml": "float32.min_cosine",
    "thresholds/flag-number.yaml": "float32.require_logprobs_close",
    "thresholds/alias.yaml": None,
    "thresholds/dtype-list.yaml": None,
    "thresholds/duplicate-key.yaml": "duplicate key 'float32'",
}

# how the product reads each kind of file: argv for the CLI
COMMANDS: dict[str, Callable[[str], list[str]]] = {
    "fingerprints": lambda p: ["check", "--env", p, "--json"],
    "rules": lambda p: ["rules", "--json", "--kb", p],
    "reports": lambda p: ["report", p],
}


def assert_one_line(err: str, path: Path | str, field: str | None) -> str:
    """Exactly one line on stderr, naming the file and the field; returns the line."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert lines[0].startswith("gpucompat"), lines[0]
    assert str(path) in lines[0], lines[0]
    if field is not None:
        assert field in lines[0], lines[0]
    return lines[0]


def run_cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    with cpu() as used:
        code = within(lambda: main(argv))
    out, err = capsys.readouterr()
    assert used.seconds < TIME_LIMIT_S, f"{argv} took {used.seconds:.1f} CPU s"
    return code, out, err


def cli_case(capsys: pytest.CaptureFixture[str], kind: str, path: Path, field: str | None) -> str:
    code, _, err = run_cli(capsys, COMMANDS[kind](str(path)))
    assert code == 2, err
    return assert_one_line(err, path, field)


def test_corpus_lists_every_file() -> None:
    on_disk = {p.relative_to(HOSTILE).as_posix() for p in HOSTILE.rglob("*") if p.is_file()}
    assert on_disk - {"README.md"} == set(EXPECTED)


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.split("/")[0] in COMMANDS])
def test_corpus_through_the_cli(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli_case(capsys, name.split("/")[0], HOSTILE / name, EXPECTED[name])


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith("rules/")][:4])
def test_corpus_rules_through_check(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, env = HOSTILE / name, tmp_path / "a.yaml"
    env.write_text("gpus: [{name: H100}]\n")
    code, _, err = run_cli(capsys, ["check", "--env", str(env), "--kb", str(path)])
    assert code == 2
    assert_one_line(err, path, EXPECTED[name])


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith("reports/")])
def test_corpus_reports_through_merge_diff_and_golden(name: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = HOSTILE / name
    golden = str(Path(__file__).resolve().parent.parent / "docs" / "reports" / "golden")
    for argv in (["merge", str(path), "-o", str(tmp_path / "m.json")], ["diff", str(path), str(path)],
                 ["golden", str(path), "--golden", golden, "-o", str(tmp_path / "m.json")]):
        code, _, err = run_cli(capsys, argv)
        assert code == 2
        assert_one_line(err, path, EXPECTED[name])
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith("matrices/")])
def test_corpus_matrices(name: str) -> None:
    with pytest.raises(InputError) as info:
        load_named_matrices(str(HOSTILE / name))
    assert_one_line(f"gpucompat: {info.value}\n", HOSTILE / name, EXPECTED[name])


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith("thresholds/")])
def test_corpus_thresholds(name: str) -> None:
    with pytest.raises(ValueError) as info:
        load_thresholds(HOSTILE / name)
    assert_one_line(f"gpucompat: {info.value}\n", HOSTILE / name, EXPECTED[name])


# --------------------------------------------------------------------------- generated: deep, huge, bombs


def bomb(levels: int = 9, width: int = 10) -> str:
    """Billion laughs as one flow mapping: each anchor is a list of `width` aliases of the previous one, so the
    last holds width**levels leaves; anything that walks it (str, json.dumps, a copy) never finishes."""
    items = ["a0: &a0 [lol]"]
    for i in range(1, levels + 1):
        items.append(f"a{i}: &a{i} [" + ", ".join(f"*a{i - 1}" for _ in range(width)) + "]")
    return "{" + ", ".join(items) + "}"


def nested_flow(depth: int) -> str:
    return "[" * depth + "]" * depth


def nested_block(depth: int) -> str:
    return "\n".join("  " * i + f"k{i}:" for i in range(depth)) + " x\n"


def rule_with(extra: str) -> str:
    return f"rules:\n  - {RULE[:-1]}, {extra}}}\n"


GENERATED: dict[str, tuple[str, Callable[[], str | bytes], str | None]] = {
    # name: (kind, content, field)
    "fp-bomb-params.yaml": ("fingerprints", lambda: f"params: {bomb()}\n", None),
    "fp-deep-flow.yaml": ("fingerprints", lambda: f"params: {{x: {nested_flow(100_000)}}}\n", None),
    "fp-deep-block.yaml": ("fingerprints", lambda: "params:\n" + textwrap.indent(nested_block(500), "  "), None),
    "fp-deep.json": ("fingerprints", lambda: '{"params": {"x": ' + nested_flow(100_000) + "}}", None),
    "fp-deep-100.json": ("fingerprints", lambda: '{"params": {"x": ' + nested_flow(100) + "}}", "params.x"),
    "fp-huge.yaml": ("fingerprints", lambda: "# " + "x" * (17 * 1024 * 1024) + "\n", None),
    "fp-int-5000-digits.yaml": ("fingerprints", lambda: f"gpus: [{{name: H100, memory_mib: {'9' * 5000}}}]\n",
                                "gpus[0].memory_mib"),
    "fp-int-400-digits.yaml": ("fingerprints", lambda: f"gpus: [{{name: H100, memory_mib: 1{'0' * 399}}}]\n",
                               "gpus[0].memory_mib"),
    "fp-int-5000-digits.json": ("fingerprints", lambda: '{"gpus": [{"name": "H", "memory_mib": ' + "9" * 5000 + "}]}",
                                "gpus[0].memory_mib"),
    "rules-bomb-note.yaml": ("rules", lambda: rule_with(f"note: {bomb()}"), None),
    "rules-bomb-params.yaml": ("rules", lambda: rule_with(f"when: {{params: {bomb()}}}"), None),
    "rules-deep.yaml": ("rules", lambda: rule_with(f"note: {nested_flow(100_000)}"), None),
    "rules-huge.yaml": ("rules", lambda: "rules: []\n#" + "x" * (17 * 1024 * 1024), None),
    "rules-int-5000-digits.yaml": ("rules", lambda: rule_with(f"when: {{gpu_count: {'9' * 5000}}}"),
                                   "rules[0].when.gpu_count"),
    "report-deep.json": ("reports", lambda: nested_flow(100_000), None),
    "report-int-5000-digits.json": ("reports", lambda: (HOSTILE / "reports/huge-metric.json").read_text()
                                    .replace("1" + "0" * 400, "9" * 5000), "$.cells[0].metrics.tokens_per_s"),
}


@pytest.mark.parametrize("name", list(GENERATED))
def test_generated_through_the_cli(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kind, content, field = GENERATED[name]
    path = tmp_path / name
    data = content()
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    cli_case(capsys, kind, path, field)


def test_directory_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for kind in COMMANDS:
        if kind != "rules":  # --kb DIR is a directory of rule files
            assert "is a directory" in cli_case(capsys, kind, tmp_path, None)
        assert "no such file" in cli_case(capsys, kind, tmp_path / "missing.yaml", None)


def test_matrices_dir_with_hostile_rules_and_not_encoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """GPUCOMPAT_MATRICES_DIR replaces the shipped knowledge base: its files are user input too."""
    (tmp_path / "rules").mkdir()
    bad_rules = tmp_path / "rules" / "team.yaml"
    bad_rules.write_text(rule_with(f"note: {bomb()}"))
    monkeypatch.setenv("GPUCOMPAT_MATRICES_DIR", str(tmp_path))
    code, _, err = run_cli(capsys, ["rules"])
    assert code == 2
    assert_one_line(err, bad_rules, None)
    bad_rules.write_text("rules: []\n")
    not_encoded = tmp_path / "not_encoded.yaml"
    for text, field in (("not_encoded: [{claim: S01}]\n", "not_encoded[0].reason"),
                        ("not_encoded: [{claim: [S01], reason: r}]\n", "not_encoded[0].claim"),
                        ("not_encoded: 3\n", "not_encoded")):
        not_encoded.write_text(text)
        code, _, err = run_cli(capsys, ["rules"])
        assert code == 2
        assert_one_line(err, not_encoded, field)


def test_matrix_deep_and_bomb(tmp_path: Path) -> None:
    for text in (f"matrices: {{m: [{{engine: hf, params: {{x: {nested_flow(100_000)}}}}}]}}\n",
                 f"matrices: {{m: [{{engine: hf, params: {bomb()}}}]}}\n"):
        path = tmp_path / "matrices.yaml"
        path.write_text(text)
        with cpu() as used, pytest.raises(InputError) as info:
            within(lambda: load_named_matrices(str(path)))  # noqa: B023 - called at once
        assert used.seconds < TIME_LIMIT_S
        assert_one_line(f"gpucompat: {info.value}\n", path, None)


def test_thresholds_bomb(tmp_path: Path) -> None:
    path = tmp_path / "thresholds.yaml"
    path.write_text(f"float32: {{min_cosine: {bomb()}}}\n")
    with pytest.raises(ValueError) as info:
        load_thresholds(path)
    assert_one_line(f"gpucompat: {info.value}\n", path, None)


def test_report_size_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pytest_gpucompat.report.io.MAX_REPORT_BYTES", 100)
    path = tmp_path / "r.json"
    path.write_text(" " * 200)
    with pytest.raises(ReportError, match="too large"):
        load_report(path)


# --------------------------------------------------------------------------- the rules command


def test_rules_unknown_engine_lists_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, ["rules", "--engine", "nosuch"])
    assert code == 2 and out == ""
    line = assert_one_line(err, "--engine", None)
    assert "nosuch" in line and "vllm, sglang, tensorrt-llm, none" in line
    code, out, _ = run_cli(capsys, ["rules", "--engine", "none"])
    assert code == 0 and "rules" in out


# --------------------------------------------------------------------------- real processes


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["check", "--env", "{path}", "--json"], "fp-bomb-params.yaml"),
        (["rules", "--json", "--kb", "{path}"], "rules-bomb-note.yaml"),
        (["report", "{path}"], "report-deep.json"),
    ],
)
def test_subprocess(argv: list[str], name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    data = GENERATED[name][1]()
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    with cpu() as used:
        result = subprocess.run(
            [sys.executable, "-m", "pytest_gpucompat.cli", *(a.format(path=path) for a in argv)],
            capture_output=True, text=True, timeout=HANG_S,
        )
    assert used.seconds < TIME_LIMIT_S
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert_one_line(result.stderr, path, None)


# --------------------------------------------------------------------------- pytest side


ONE_TEST = """
import time
import pytest

@pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32", "bfloat16"]})
def test_cell(gpucompat_cell):
    time.sleep(0.01)
"""
PLUGIN_ARGS = ("-p", "no:cacheprovider", "--gpucompat", "--gpucompat-no-builtin-rules", "--gpucompat-env", "a.yaml")


@pytest.mark.parametrize(
    ("option", "name"),
    [
        ("--gpucompat-env", "fingerprints/invalid-utf8.yaml"),
        ("--gpucompat-env", "fingerprints/gpu-name-list.yaml"),
        ("--gpucompat-kb", "rules/invalid-utf8.yaml"),
        ("--gpucompat-kb", "rules/alias.yaml"),
    ],
)
def test_pytest_options_are_usage_errors(pytester: pytest.Pytester, option: str, name: str) -> None:
    pytester.makefile(".yaml", a="gpus: [{name: H100}]\n")
    pytester.makepyfile(test_x=ONE_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--gpucompat", option, str(HOSTILE / name))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and str(HOSTILE / name) in errors[0], errors
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("where", ["missing-dir/r.json", ".", "file.txt/r.json"])
def test_report_path_is_checked_before_any_test(pytester: pytest.Pytester, where: str) -> None:
    pytester.makefile(".yaml", a="gpus: [{name: H100}]\n")
    pytester.makefile(".txt", file="not a directory")
    pytester.makepyfile(test_x="def test_x():\n    raise SystemExit('a test ran')\n")
    result = pytester.runpytest(*PLUGIN_ARGS, "--gpucompat-report", where)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and "--gpucompat-report" in errors[0] and where in errors[0], errors
    assert "a test ran" not in result.stdout.str()


FULL_DISK_CONFTEST = """
import errno
import pytest_gpucompat.session.collector as collector
import pytest_gpucompat.report.io as report_io

saved = {}

def pytest_configure(config):
    saved.update(checkpoint=collector._CHECKPOINT_S, write=report_io.write_report_atomic)
    collector._CHECKPOINT_S = 0.0

    def full(report, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    report_io.write_report_atomic = full

def pytest_unconfigure(config):
    collector._CHECKPOINT_S = saved["checkpoint"]
    report_io.write_report_atomic = saved["write"]
"""


def test_full_disk_at_the_final_write_keeps_the_checkpoint(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", a="gpus: [{name: H100}]\n")
    pytester.makeconftest(FULL_DISK_CONFTEST)
    pytester.makepyfile(test_x=ONE_TEST)
    result = pytester.runpytest(*PLUGIN_ARGS, "--gpucompat-report", "r.json")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR  # the tests passed, but a lost report must not pass CI
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1, errors
    assert errors[0].startswith("gpucompat: could not write r.json: No space left on device; the last checkpoint (")
    assert errors[0].endswith(") is kept at r.json")
    kept = load_report(pytester.path / "r.json")
    assert kept.interrupted and len(kept.cells) >= 1
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_write_failure_message_without_checkpoint() -> None:
    message = write_failure_message("r.json", OSError(errno.ENOSPC, "No space left on device"), None)
    assert message == "gpucompat: could not write r.json: No space left on device; no checkpoint was written, " \
                      "r.json is unchanged"


# --------------------------------------------------------------------------- markdown


EVIL = [
    "x``<img src=x onerror=alert(1)>``y",
    "`<script>alert(1)</script>`",
    "a|b|c",
    "line1\n| --- |\n<b>line2</b>",
    "````",
]


def evil_report() -> Report:
    cells = [
        {"nodeid": f"t.py::test_f[hf-{i}]", "test": f"t.py::{value}", "engine": "hf", "params": {"p": value},
         "outcome": "failed", "reason": value, "rules": [value], "runner": "r"}
        for i, value in enumerate(EVIL)
    ]
    return Report.from_run({"name": "r"}, cells)


def test_markdown_values_cannot_break_out() -> None:
    markdown_it = pytest.importorskip("markdown_it")
    text = md_module.render_markdown(evil_report())
    html = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    assert "<img" not in html and "<script" not in html and "<b>" not in html, html
    for line in text.splitlines():
        if line.startswith("| t.py"):  # every matrix row keeps the header's column count
            assert len(line.replace("\\|", "").split("|")) == 6  # "", Test, Engine, Params, r, ""


@pytest.mark.parametrize("value", EVIL + ["`", "a`b", "``"])
def test_code_span_round_trips(value: str) -> None:
    markdown_it = pytest.importorskip("markdown_it")
    html = markdown_it.MarkdownIt("commonmark", {"html": True}).render(md_module._code(value))
    expected = " ".join(value.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert html == f"<p><code>{expected.replace(chr(34), '&quot;')}</code></p>\n"


def test_report_json_round_trip_of_hostile_strings(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(evil_report().to_json(), encoding="utf-8")
    assert json.loads(path.read_text())["cells"][0]["reason"] == EVIL[0]
    assert load_report(path).cells[0].reason == EVIL[0]


# --------------------------------------------------------------------------- slow signatures, FIFOs, pipes, text


SLOW_SIGNATURES = [n for n in EXPECTED if n.startswith("rules/signature-")]


@pytest.mark.parametrize("name", SLOW_SIGNATURES)
def test_slow_signatures_are_refused_quickly_by_rules_and_explain(name: str, tmp_path: Path) -> None:
    """Each took seconds to minutes per 2 KiB line, and `explain` or a pytest run with it did not end in 300 s."""
    path = HOSTILE / name
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"schema_version": 1, "tool_version": "x", "created": "x", "runners": {"r": {}},
                                  "cells": [{"nodeid": "t.py::x", "outcome": "failed", "runner": "r",
                                             "reason": "a" * 4000}]}))
    for argv in (["rules", "--kb", str(path)], ["explain", str(report), "--kb", str(path)]):
        with cpu() as used:
            result = subprocess.run([sys.executable, "-m", "pytest_gpucompat.cli", *argv],
                                    capture_output=True, text=True, timeout=HANG_S)
        assert used.seconds < TIME_LIMIT_S
        assert result.returncode == 2, result.stderr
        assert_one_line(result.stderr, path, "rule 'r1': field 'signature[0]'")


@pytest.mark.parametrize("pattern", [r".{0,2000}.{0,2000}.{0,2000}Z", r"(?=(.*)(.*)(.*)(.*)Z)", r"(?:.*.*.*.*Z)?Q",
                                     r"\S+\s*\S+Z", r"a{0,65535}a{0,65535}Z"])
def test_the_matcher_alone_is_linear_or_refuses(pattern: str) -> None:
    """Without the shape check: RE2 refuses the pattern (a bound above 1000, a lookaround) or matches it in linear
    time on the longest line searched. The search runs in a child process: a backtracking matcher holds the
    interpreter inside one C call, where no thread of this process could stop it; the hang guard stops the child."""
    from pytest_gpucompat.kb.linear_regex import PatternError, compile_linear

    try:
        compile_linear(pattern)
    except PatternError:
        return
    search = textwrap.dedent("""
        import sys, time
        from pytest_gpucompat.kb.linear_regex import compile_linear
        from pytest_gpucompat.kb.signatures import MAX_LINE_CHARS
        compiled = compile_linear(sys.argv[1])
        began = time.process_time()
        found = [compiled.search(c * MAX_LINE_CHARS) for c in "a .-x"]
        print(time.process_time() - began, any(found))
    """)
    result = subprocess.run([sys.executable, "-c", search, pattern], capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0, result.stderr
    seconds, found = result.stdout.split()
    assert found == "False"
    assert float(seconds) < 1.0  # RE2: milliseconds; a backtracking matcher: minutes or more


def test_shipped_signatures_load() -> None:
    from pytest_gpucompat.kb import load_kb
    from pytest_gpucompat.kb.failure_modes import load_failure_modes

    kb = load_kb([], builtin=True)
    assert any(r.signature for r in kb.rules)
    load_failure_modes()


def make_fifo(path: Path) -> Path:
    os = pytest.importorskip("os")
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    os.mkfifo(path)
    return path


FIFO_COMMANDS = {
    "fingerprint": ["check", "--env", "{fifo}", "--json"],
    "rules": ["rules", "--kb", "{fifo}"],
    "report": ["report", "{fifo}"],
    "merge": ["merge", "{fifo}", "-o", "{tmp}/m.json"],
    "diff": ["diff", "{fifo}", "{fifo}"],
    "explain": ["explain", "{fifo}"],
    "golden-report": ["golden", "{fifo}", "--golden", "{golden}", "-o", "{tmp}/m.json"],
}


@pytest.mark.parametrize("kind", list(FIFO_COMMANDS))
def test_a_fifo_is_refused_not_waited_on(kind: str, tmp_path: Path) -> None:
    suffix = ".yaml" if kind in ("fingerprint", "rules") else ".json"
    fifo = make_fifo(tmp_path / f"pipe{suffix}")
    golden = str(Path(__file__).resolve().parent.parent / "docs" / "reports" / "golden")
    argv = [a.format(fifo=fifo, tmp=tmp_path, golden=golden) for a in FIFO_COMMANDS[kind]]
    result = subprocess.run([sys.executable, "-m", "pytest_gpucompat.cli", *argv],
                            capture_output=True, text=True, timeout=HANG_S)  # a FIFO waited on: a hang
    assert result.returncode == 2, result.stderr
    assert "FIFO" in assert_one_line(result.stderr, fifo, None)


def test_fifo_and_directory_inputs_of_the_loaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """thresholds.yaml, a prompts file and golden files: the readers the CLI does not reach above."""
    from pytest_gpucompat.checks.golden_files import load_golden
    from pytest_gpucompat.workload.prompts import load_prompts_file

    fifo = make_fifo(tmp_path / "thresholds.yaml")
    for load in (load_thresholds, load_prompts_file, load_golden):
        with cpu() as used, pytest.raises((ValueError, InputError)) as info:
            within(lambda: load(fifo))  # noqa: B023 - called at once
        assert used.seconds < TIME_LIMIT_S
        assert "FIFO" in assert_one_line(f"gpucompat: {info.value}\n", fifo, None)
    # the matrices directory's thresholds.yaml: a FIFO or a directory there is not "no file, use the defaults"
    monkeypatch.setenv("GPUCOMPAT_MATRICES_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="FIFO"):
        load_thresholds()
    fifo.unlink()
    fifo.mkdir()
    with pytest.raises(ValueError, match="is a directory"):
        load_thresholds()
    with pytest.raises(ValueError, match="is a directory"):
        load_thresholds(fifo)


def test_a_prompts_file_with_a_lone_surrogate_names_the_line(tmp_path: Path) -> None:
    from pytest_gpucompat.workload.prompts import load_prompts_file

    path = tmp_path / "prompts.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "bad \\ud800"}\n')
    with pytest.raises(InputError) as info:
        load_prompts_file(path)
    line = assert_one_line(f"gpucompat: {info.value}\n", path, "line 2.text")
    assert "surrogate" in line


def test_a_surrogate_in_a_fingerprint_prints_as_an_escape(capsys: pytest.CaptureFixture[str]) -> None:
    line = cli_case(capsys, "fingerprints", HOSTILE / "fingerprints/surrogate-key.json", "env.VLLM_\\udfff")
    line.encode("utf-8")  # printable: no lone surrogate left in the message


def test_suite_settings_from_the_environment_are_one_line(pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_x="from pytest_gpucompat import env_int\n"
                               "ROUNDS = env_int('GPUCOMPAT_ROUNDS', 5)\n"
                               "RUNS = env_int('GPUCOMPAT_PROCESS_RUNS', 3, minimum=0)\n"
                               "def test_x():\n    assert (ROUNDS, RUNS) == (7, 0)\n")
    for env, value in (("GPUCOMPAT_ROUNDS", "abc"), ("GPUCOMPAT_PROCESS_RUNS", "abc"), ("GPUCOMPAT_ROUNDS", "-1")):
        monkeypatch.setenv(env, value)
        result = pytester.runpytest("-p", "no:cacheprovider")
        assert result.ret == pytest.ExitCode.INTERRUPTED
        result.stdout.fnmatch_lines([f"gpucompat: {env}='{value}': must be a whole number >= *"])
        assert "Traceback" not in result.stdout.str() and "ValueError" not in result.stdout.str()
        monkeypatch.delenv(env)
    monkeypatch.setenv("GPUCOMPAT_ROUNDS", "7")
    monkeypatch.setenv("GPUCOMPAT_PROCESS_RUNS", "0")
    assert pytester.runpytest("-p", "no:cacheprovider").ret == 0


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    """`gpucompat rules | head -1`."""
    proc = subprocess.Popen([sys.executable, "-m", "pytest_gpucompat.cli", "rules"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command writes anything: its first write finds the pipe closed
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=HANG_S) == 141
    assert err == "", err


def test_control_characters_from_files_are_shown_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "team.yaml"
    rules.write_text(rule_with("note: n").replace("summary: s", 'summary: "red \\e[31m bell \\a cr \\r end"'))
    code, out, _ = run_cli(capsys, ["rules", "--kb", str(rules), "--no-builtin-rules"])
    assert code == 0
    assert "\x1b" not in out and "\a" not in out and "\r" not in out
    assert "red \\u001b[31m bell \\u0007 cr \\u000d end" in out
    env = tmp_path / "a.yaml"
    env.write_text('name: "evil\\e]0;title\\a"\ngpus: [{name: H100}]\n')
    code, _, err = run_cli(capsys, ["check", "--env", str(env), "--kb", str(tmp_path / "missing.yaml")])
    assert code == 2 and "\x1b" not in err
    report = Report.from_run({"name": "r\x1b[2J"}, [{"nodeid": "t.py::x", "outcome": "failed", "runner": "r\x1b[2J",
                                                     "reason": "boom \x1b[31m\x00 red"}])
    text = md_module.render_markdown(report)
    assert "\x1b" not in text and "\x00" not in text and "u001b" in text


def test_renderers_do_not_crash_on_wrong_types() -> None:
    """A report built in memory is not checked; the renderers show what they cannot read instead of failing."""
    from pytest_gpucompat.report import render_html

    for runner, extra in (({"name": "r", "links": 5}, {}), ({"name": "r", "links": "nvlink"}, {}),
                          ({"name": "r"}, {"outputs": [1, 2]}), ({"name": "r"}, {"outputs": {"generations": 3}})):
        report = Report.from_run(runner, [{"nodeid": "t.py::x", "outcome": "passed", "runner": "r", **extra}])
        assert "<html" in render_html(report).lower()
