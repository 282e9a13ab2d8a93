"""The gpucompat section at the end of a pytest run names what failed: each failed cell with its engine and reason,
each broken finding, ten of each at most, and nothing from a cell reaches the terminal unescaped."""

from __future__ import annotations

import textwrap

import pytest

from pytest_gpucompat.kb.verdicts import SEVERITY_HEADINGS, severity_heading
from pytest_gpucompat.report.summary import failed_lines, short_nodeid, summary_lines

FAILING = textwrap.dedent("""
    import pytest

    @pytest.mark.gpucompat(engine="hf", params={"n": list(range({count}))})
    def test_cell(gpucompat_cell):
        assert gpucompat_cell.params["n"] < 0, {reason!r}

    @pytest.mark.gpucompat(engine="hf", params={"n": [1]})
    def test_fine(gpucompat_cell):
        pass
""")
RULES = textwrap.dedent("""
    rules:
      - id: t-hf-n1-crashes
        summary: hf crashes with n=1
        severity: broken
        failure: crash
        confidence: upstream
        when: {params: {n: [1]}}
        sources: [{kind: code, ref: x}]
""")


def section(result: pytest.RunResult) -> list[str]:
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "gpucompat" in line and line.startswith("="))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return lines[start + 1:end]


def run(pytester: pytest.Pytester, count: int, reason: str, *args: str) -> list[str]:
    pytester.makepyfile(**{"suite/test_fail": FAILING.replace("{count}", str(count)).replace("{reason!r}",
                                                                                            repr(reason))})
    result = pytester.runpytest("--gpucompat", "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    return section(result)


def test_the_summary_names_the_failed_cell_its_engine_and_reason(pytester: pytest.Pytester) -> None:
    lines = run(pytester, 1, "drift 0.3 above 0.2")
    assert lines[0].startswith("2 cells on ") and lines[0].endswith("1 failed, 1 passed")
    assert lines[1:3] == ["failed cells (1):",
                          "  FAILED test_fail.py::test_cell[hf-n=0] (hf): AssertionError: drift 0.3 above 0.2"]


def test_a_reason_with_escapes_is_shown_escaped(pytester: pytest.Pytester) -> None:
    lines = run(pytester, 1, "\x1b[31mred\x1b[0m")
    shown = next(line for line in lines if "FAILED" in line)
    assert "\x1b" not in "\n".join(lines)
    assert shown.endswith("AssertionError: \\u001b[31mred\\u001b[0m")


def test_twelve_failures_show_ten_and_the_count_of_the_rest(pytester: pytest.Pytester) -> None:
    lines = run(pytester, 12, "boom")
    assert lines[1] == "failed cells (12):"
    named = [line for line in lines if line.startswith("  FAILED ")]
    assert len(named) == 10 and named[0].startswith("  FAILED test_fail.py::test_cell[hf-n=0] (hf): ")
    assert lines[12] == "  ... and 2 more"


def test_broken_findings_are_named(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", rules=RULES)
    lines = run(pytester, 2, "boom", "--gpucompat-kb", "rules.yaml", "--gpucompat-no-builtin-rules")
    assert "known problems: 1 broken" in lines
    assert severity_heading("broken", 1) in lines
    # test_cell[hf-n=1] is skipped as known bad and so is test_fine: one finding, two cells
    assert "  [t-hf-n1-crashes] hf crashes with n=1 (2 cells)" in lines


def test_check_and_the_session_summary_use_the_same_words_for_the_same_findings(pytester, capsys):
    """The same rules judged on the same machine: `check` and the run's summary print the same heading over the
    same finding, and the same count of known problems."""
    from pytest_gpucompat import cli

    pytester.makefile(".yaml", rules=RULES + textwrap.indent(textwrap.dedent("""
        - id: t-torch-breaks
          summary: this torch breaks every engine
          severity: broken
          failure: crash
          confidence: upstream
          when: {packages: {torch: ">=1"}}
          sources: [{kind: code, ref: x}]
    """), "  "))
    pytester.makepyfile(**{"suite/test_fail": FAILING.replace("{count}", "2").replace("{reason!r}", "'boom'")})
    lines = section(pytester.runpytest("--gpucompat", "-p", "no:cacheprovider", "--gpucompat-kb", "rules.yaml",
                                       "--gpucompat-no-builtin-rules"))
    capsys.readouterr()
    cli.main(["check", "--kb", str(pytester.path / "rules.yaml"), "--no-builtin-rules"])
    check = capsys.readouterr().out.splitlines()
    heading = SEVERITY_HEADINGS["broken"]  # the same words over the same finding; the counts differ (below)
    assert any(line.startswith(heading) for line in lines) and any(line.startswith(heading) for line in check)
    assert any(line.startswith("- [t-torch-breaks] this torch breaks every engine") for line in check)
    assert "  [t-torch-breaks] this torch breaks every engine (3 cells)" in lines
    # check judges the machine (the rule on n=1 concerns cells only); the run, every cell it attached to
    assert check[-1].startswith("verdict: 1 broken (") and "known problems: 2 broken" in lines


# ---------------------------------------------------------------------------------------------- the pure part


def cell(n: int, outcome: str = "failed", reason: str | None = "boom", **extra: object) -> dict[str, object]:
    return {"nodeid": f"suites/deep/test_x.py::test_gen[hf-n={n}]", "engine": "hf", "outcome": outcome,
            "reason": reason, "findings": (), "rules": (), **extra}


def test_short_nodeid_drops_the_directories_only() -> None:
    assert short_nodeid("suites/deep/test_x.py::Class::test[a/b]") == "test_x.py::Class::test[a/b]"
    assert short_nodeid("test_x.py") == "test_x.py"


def test_each_line_fits_the_width_and_keeps_the_reason_start() -> None:
    long = cell(1, reason="RuntimeError: " + "x" * 300, nodeid="t.py::test[" + "p" * 200 + "]")
    lines = failed_lines([long, cell(2, outcome="error", reason=None)], 80)
    assert all(len(line) <= 80 for line in lines)
    assert "…" in lines[1] and ": RuntimeError: xxx" in lines[1] and lines[1].endswith("…")
    assert lines[2] == "  ERROR test_x.py::test_gen[hf-n=2] (hf): no reason recorded"


def test_summary_lines_put_failures_right_after_the_counts() -> None:
    lines = summary_lines([cell(1), cell(2, outcome="passed", reason=None)], "no GPU", 100)
    assert lines[:3] == ["2 cells on no GPU: 1 failed, 1 passed", "failed cells (1):",
                         "  FAILED test_x.py::test_gen[hf-n=1] (hf): boom"]
    assert summary_lines([cell(2, outcome="passed", reason=None)], "no GPU", 100) == [
        "1 cells on no GPU: 1 passed"]
