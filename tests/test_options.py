"""Options are declared once (options.py) for pytest and the command, and parsed once into the run state."""

from __future__ import annotations

import pytest

from pytest_gpucompat import cli
from pytest_gpucompat.options import CLI, OPTIONS, PYTEST


def _help_of(parser_actions, flag: str) -> str | None:
    return next((a.help for a in parser_actions if flag in a.option_strings), None)


def test_pytest_and_the_command_share_each_declaration(pytester: pytest.Pytester) -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for command, names in CLI.items():
        actions = sub.choices[command]._actions
        for name in names:
            assert _help_of(actions, f"--{name}") == OPTIONS[name].help, (command, name)
    result = pytester.runpytest("--help")
    text = " ".join(result.stdout.str().split())
    assert [name for name in PYTEST if f"--gpucompat-{name}" not in text] == []


def test_older_spellings_still_parse() -> None:
    parser = cli.build_parser()
    assert parser.parse_args(["env", "--name", "a100"]).runner == "a100"
    assert parser.parse_args(["diff", "a.json", "b.json", "--fail-on", "ttft_s:+5%"]).compare_fail == ["ttft_s:+5%"]


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5", "soon"])
def test_a_bad_timeout_is_one_line(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest("--gpucompat", f"--gpucompat-timeout={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: gpucompat: --gpucompat-timeout: must be a positive number of seconds, "
                                 f"got '{value}'"])


def test_settings_are_parsed_once_into_the_run_state(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ngpucompat_log_dir = kept\ngpucompat_kb = extra.yaml\n")
    pytester.makefile(".yaml", extra="rules: []\n")
    pytester.makeconftest("""
        from pytest_gpucompat.session.state import run_state

        def pytest_collection_finish(session):
            s = run_state(session.config).settings
            print("SETTINGS", s.timeout, s.log_dir.name, [p.rsplit("/", 1)[-1] for p in s.kb], s.compare_fail)
    """)
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest("--gpucompat", "--gpucompat-timeout", "42", "--gpucompat-kb", "extra.yaml", "-s")
    result.stdout.fnmatch_lines(["SETTINGS 42.0 kept ['extra.yaml', 'extra.yaml'] ()"])


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("workers-per-gpu", "0", "must be 'auto' or a whole number of workers, at least 1, got '0'"),
    ("workers-per-gpu", "many", "must be 'auto' or a whole number of workers, at least 1, got 'many'"),
    ("gpu-budget", "1.5", "must be a number above 0 and at most 1, got '1.5'"),
    ("gpu-wait", "0", "must be a positive number of seconds, got '0'"),
])
def test_bad_sharing_options_are_one_line(pytester: pytest.Pytester, flag: str, value: str, message: str) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest("--gpucompat", f"--gpucompat-{flag}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: gpucompat: --gpucompat-{flag}: {message}"])


def test_sharing_options_reach_the_settings(pytester: pytest.Pytester) -> None:
    from pytest_gpucompat.options import Settings

    config = pytester.parseconfig("--gpucompat-workers-per-gpu", "auto", "--gpucompat-gpu-wait", "60",
                                  "--gpucompat-gpu-budget", "0.5")
    settings = Settings.from_pytest(config)
    assert (settings.workers_per_gpu, settings.gpu_wait, settings.gpu_budget) == ("auto", 60.0, 0.5)
    assert Settings.from_pytest(pytester.parseconfig()).workers_per_gpu == 1
