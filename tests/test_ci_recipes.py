"""The CI recipes the project ships (examples/ci/, shown in docs/ci.md): valid for their CI system, free of the
security findings zizmor knows, and calling only options the current command-line parsers accept."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pytest_gpucompat import cli

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "examples" / "ci"
WORKFLOW = RECIPES / ".github" / "workflows" / "gpucompat.yml"
GITLAB = RECIPES / ".gitlab-ci.yml"
FLEET = RECIPES / "ci" / "fleet.yaml"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """A command of the `test` extra, installed beside this interpreter (the README's tests command installs it)."""
    path = BIN / name
    assert path.exists(), f"{name} is not installed beside {sys.executable}: pip install -e '.[test]'"
    return str(path)


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


# --- the files and the documentation --------------------------------------------------------------------------------

def test_docs_show_the_recipe_files_verbatim() -> None:
    docs = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    for path in (WORKFLOW, GITLAB, FLEET):
        text = path.read_text(encoding="utf-8")
        assert text.startswith(f"# {path.relative_to(RECIPES)}\n"), f"{path}: its first line names where it goes"
        assert f"```yaml\n{text}```\n" in docs, (
            f"docs/ci.md no longer shows {path.relative_to(ROOT)} as it is: paste the file into its ```yaml block")


# --- schemas and security -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("path", "schema"), [
    (WORKFLOW, ["--builtin-schema", "vendor.github-workflows"]),
    (GITLAB, ["--builtin-schema", "vendor.gitlab-ci", "--data-transform", "gitlab-ci"]),
], ids=["github", "gitlab"])
def test_recipe_is_valid_for_its_ci_system(path: Path, schema: list[str]) -> None:
    result = run(tool("check-jsonschema"), "--no-cache", *schema, str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_refuses_a_broken_workflow(tmp_path: Path) -> None:
    """The schema check above can fail: a job without `runs-on` is refused."""
    broken = tmp_path / "gpucompat.yml"
    broken.write_text(WORKFLOW.read_text(encoding="utf-8").replace("    runs-on: ubuntu-latest\n", "", 1))
    result = run(tool("check-jsonschema"), "--no-cache", "--builtin-schema", "vendor.github-workflows", str(broken))
    assert result.returncode == 1, result.stdout + result.stderr


@pytest.mark.parametrize("persona", ["regular", "auditor"])
def test_zizmor_finds_nothing(persona: str) -> None:
    """`zizmor --offline examples/ci/` as the docs run it, and its strictest persona; the only ignore in the
    workflow is justified beside it."""
    result = run(tool("zizmor"), "--offline", "--persona", persona, "examples/ci/")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr
    assert "completed examples/ci/.github/workflows/gpucompat.yml" in result.stderr


def test_zizmor_sees_an_unhardened_step(tmp_path: Path) -> None:
    """The audit above can fail: a tag instead of a commit, and a step output pasted into a script, are found."""
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    text = WORKFLOW.read_text(encoding="utf-8")
    text = re.sub(r"actions/checkout@[0-9a-f]{40}  # v[\d.]+", "actions/checkout@v7", text, count=1)
    text = text.replace('echo "::error::no report from: $MISSING;',
                        'echo "::error::no report from: ${{ steps.reports.outputs.missing }};')
    (workflows / "gpucompat.yml").write_text(text)
    result = run(tool("zizmor"), "--offline", str(tmp_path))
    assert result.returncode != 0
    assert "unpinned-uses" in result.stdout and "template-injection" in result.stdout, result.stdout


def test_every_action_is_pinned_to_a_commit_with_its_release() -> None:
    uses = re.findall(r"^\s*-?\s*uses:\s*(\S+)(.*)$", WORKFLOW.read_text(encoding="utf-8"), re.MULTILINE)
    assert uses
    for ref, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), ref
        assert re.fullmatch(r"\s+# v\d+(\.\d+)*", comment), f"{ref}: the release belongs in a comment: {comment!r}"


def test_every_checkout_drops_its_credentials_and_every_job_says_its_permissions() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert workflow["permissions"] == {}
    for name, job in workflow["jobs"].items():
        assert job.get("permissions") == {"contents": "read"}, name
        checkouts = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/checkout@")]
        for step in checkouts:
            assert step.get("with", {}).get("persist-credentials") is False, name
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), f"{name}: pass templated values through env:, {step}"


# --- the command lines ----------------------------------------------------------------------------------------------

_CONTROL = {"||", "&&", ";", "|", "&", "(", ")", ";;"}
_KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "time", "exec"}


def commands(script: str) -> Iterator[list[str]]:
    """The simple commands of a shell script, words as the shell would split them (variables left unexpanded),
    without redirections."""
    for line in script.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words: list[str] = []
        tokens = iter(list(lexer))
        for token in tokens:
            if token in _CONTROL:
                if words:
                    yield words
                words = []
            elif set(token) <= set("<>&"):
                if words and words[-1].isdigit():  # 2>&1: the descriptor number is not an argument
                    words.pop()
                next(tokens, None)
            elif token.startswith("#") and not words:
                break
            elif words or token not in _KEYWORDS:
                words.append(token)
        if words:
            yield words


def scripts(path: Path) -> list[str]:
    """Every shell script of a recipe: GitHub steps' `run:`, GitLab jobs' script lines."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    found: list[str] = []
    if "jobs" in data:
        for job in data["jobs"].values():
            found += [step["run"] for step in job.get("steps", []) if "run" in step]
    else:
        for job in data.values():
            if isinstance(job, dict):
                for key in ("before_script", "script", "after_script"):
                    found += list(job.get(key, []))
    return found


def command_lines(path: Path) -> list[list[str]]:
    return [words for script in scripts(path) for words in commands(script)
            if Path(words[0]).name in ("gpucompat", "pytest")]


def _gpucompat(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.build_parser().parse_args(args)
        except SystemExit as exc:
            code = exc.code
    return int(code or 0), out.getvalue(), err.getvalue()


def refusal(words: list[str], pytester: pytest.Pytester) -> str | None:
    """Why the current parsers refuse a command line, or None when they accept it. The `gpucompat` command also
    accepts a prefix of an option (argparse's abbreviations): a recipe must spell each option as its `--help` does,
    so an option renamed to a longer name breaks here, not later when another option shares the prefix."""
    if Path(words[0]).name == "gpucompat":
        code, _, err = _gpucompat(words[1:])
        if code:
            return " ".join(err.split())
        help_text = _gpucompat([words[1], "--help"])[1]
        for word in words[2:]:
            flag = word.split("=", 1)[0]
            if flag.startswith("--") and not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text):
                return f"gpucompat {words[1]}: {flag} is not an option of its --help"
        return None
    try:
        pytester.parseconfig(*words[1:])
    except pytest.UsageError as exc:
        return " ".join(str(exc).split())
    return None


@pytest.mark.parametrize("path", [WORKFLOW, GITLAB], ids=["github", "gitlab"])
def test_every_command_line_parses_with_the_current_cli(path: Path, pytester: pytest.Pytester) -> None:
    lines = command_lines(path)
    used = {words[1] for words in lines if words[0] == "gpucompat"}
    assert used >= {"check", "env", "merge", "report", "diff"} or path == GITLAB and used >= {"check", "merge"}, used
    assert any(words[0] == "pytest" and "--gpucompat" in words for words in lines), lines
    refused = {shlex.join(words): refusal(words, pytester) for words in lines}
    assert not {line: why for line, why in refused.items() if why}, refused


@pytest.mark.parametrize(("old", "new", "why"), [
    ("--fail-on broken", "--fail-on-broken", "unrecognized arguments: --fail-on-broken"),
    ("--fail-on broken", "--fail-on fatal", "invalid choice: 'fatal'"),
    ("--gpucompat-report ", "--gpucompat-reports ", "unrecognized arguments: --gpucompat-reports"),
    ("-o fleet.json", "--out fleet.json", "--out is not an option of its --help"),
])
def test_a_renamed_option_fails_the_check(old: str, new: str, why: str, pytester: pytest.Pytester,
                                          tmp_path: Path) -> None:
    """What the test above guards against: the workflow with one option the CLI does not have is refused."""
    edited = tmp_path / "gpucompat.yml"
    text = WORKFLOW.read_text(encoding="utf-8")
    assert old in text
    edited.write_text(text.replace(old, new, 1))
    reasons = [refusal(words, pytester) for words in command_lines(edited)]
    assert any(reason and why in reason for reason in reasons), reasons


def test_command_splitting() -> None:
    script = ('set +e\nif [ "$status" -gt 1 ]; then exit "$status"; fi\n'
              'gpucompat diff a.json b.json \\\n  --compare-fail x:+1 > diff.txt 2>&1\n'
              'pytest --gpucompat suites/ -n auto || status=$?  # note\n')
    assert [w for w in commands(script) if w[0] in ("gpucompat", "pytest")] == [
        ["gpucompat", "diff", "a.json", "b.json", "--compare-fail", "x:+1"],
        ["pytest", "--gpucompat", "suites/", "-n", "auto"]]


# --- the fleet file -------------------------------------------------------------------------------------------------

def test_the_fleet_passes_its_own_preflight_and_matches_the_matrices(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--env", str(FLEET), "--fail-on", "broken", "-q"]) == 0, capsys.readouterr()
    fleet = yaml.safe_load(FLEET.read_text(encoding="utf-8"))["fleet"]
    github = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["gpu"]["strategy"]["matrix"]["include"]
    gitlab = yaml.safe_load(GITLAB.read_text(encoding="utf-8"))["gpu-suites"]["parallel"]["matrix"]
    for matrix in ([(e["runner"], e["engine"]) for e in github], [(e["RUNNER"], e["ENGINE"]) for e in gitlab]):
        assert sorted(runner for runner, _ in matrix) == sorted(fleet)
        for runner, engine in matrix:  # "vllm~=0.24.0" installs the version the fleet file says the runner has
            name, _, version = engine.partition("~=")
            assert fleet[runner]["packages"].get(name) == version, (runner, engine)


def test_the_documented_driver_downgrade_fails_the_preflight(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """docs/ci.md: moving h100 (vLLM 0.26) to driver 570 (CUDA 12.8) fails the job with that finding."""
    data = yaml.safe_load(FLEET.read_text(encoding="utf-8"))
    data["fleet"]["h100"].update(driver="570.172.08", cuda_driver="12.8", cuda_runtime="12.8")
    edited = tmp_path / "fleet.yaml"
    edited.write_text(yaml.safe_dump(data))
    assert cli.main(["check", "--env", str(edited), "--fail-on", "broken"]) == 1
    assert "vllm-cuda13-wheels-need-driver-580" in capsys.readouterr().out
