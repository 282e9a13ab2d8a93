"""Hostile input and hostile neighbours, by class: what another user can steer, what can hang, what is claimed.

- Outputs: every file written gets a mode of the writer's choosing (0644 or 0600, less the umask), never one kept
  from the file it replaces; another user's file in a shared directory is refused, not replaced.
- Inputs: every file read, installed distributions' metadata included, is a regular file read to a bound.
- Parsers of user text never recurse on it; every JSON printed or written is strict JSON.
- Signatures match in time linear in the line, whatever their shape.
- Nothing is claimed that did not happen: the summary names a report only when it was written, every error names
  its path, and a run killed after collection leaves a valid report.

Each case ends in a clear line (exit status 2 for a CLI command, a reason in the output) quickly: never a
traceback, a hang or a file another user chose the mode of.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _cost import HANG_S, cpu, within

from pytest_gpucompat.cli import main
from pytest_gpucompat.common.files import DEFAULT_MODE, PRIVATE_MODE, UnsafeTarget, write_atomic
from pytest_gpucompat.report.model import Report

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX modes, FIFOs and /dev/zero")

TIME_LIMIT_S = 30.0
"""CPU seconds a command may spend on a hostile input, its Python start included (wall-clock time, which a loaded
machine stretches, only guards against a hang: HANG_S)."""
NOBODY = 65534
SPECIAL = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's file needs root (chown)")


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def report_file(tmp_path: Path, name: str = "in.json") -> Path:
    cell = {"nodeid": "t.py::test_x[hf]", "engine": "hf", "params": {}, "outcome": "passed", "metrics": {}}
    path = tmp_path / name
    path.write_text(Report.from_run({"name": "a"}, [cell]).to_json())
    return path


def strict_json(text: str) -> object:
    """Parse as RFC 8259 JSON: NaN, Infinity and -Infinity are refused."""
    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    with cpu() as used:
        result = subprocess.run([sys.executable, "-m", "pytest_gpucompat.cli", *argv], capture_output=True, text=True,
                                timeout=HANG_S, env=env)
    assert used.seconds < TIME_LIMIT_S, f"{argv}: {used.seconds:.1f} CPU s"
    assert "Traceback" not in result.stderr, result.stderr
    return result


def one_line(err: str, *words: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].removeprefix("ERROR: ").startswith("gpucompat"), lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# --------------------------------------------------------------------------- outputs: modes of our choosing


@pytest.mark.parametrize("planted", [0o4777, 0o2777, 0o1666, 0o666, 0o600])
def test_the_atomic_writer_never_keeps_the_replaced_files_mode(tmp_path: Path, planted: int) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    os.chmod(target, planted)
    write_atomic(target, "new")
    assert stat.S_IMODE(target.stat().st_mode) == DEFAULT_MODE & ~umask()
    write_atomic(target, "private", mode=PRIVATE_MODE | stat.S_ISUID)
    assert stat.S_IMODE(target.stat().st_mode) == PRIVATE_MODE & ~umask()  # never setuid, even when asked


def test_the_umask_is_taken_off(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_atomic(tmp_path / "r.json", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o600


@pytest.mark.parametrize("option", ["--html", "--markdown", "--junit"])
def test_report_outputs_get_their_own_mode(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.write_text("planted")
    os.chmod(out, 0o4777)
    assert main(["report", str(report_file(tmp_path)), option, str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == DEFAULT_MODE & ~umask()


def test_the_pytest_report_gets_its_own_mode(pytester: pytest.Pytester) -> None:
    """The setuid report a root run left behind: the planted r.json was 4777, r.html 0666."""
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    for name, mode in (("r.json", 0o4777), ("r.html", 0o666)):
        (pytester.path / name).write_text("planted")
        os.chmod(pytester.path / name, mode)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gpucompat", "--gpucompat-report", "r.json",
                                           timeout=HANG_S)
    result.assert_outcomes(passed=1)
    assert main(["report", str(pytester.path / "r.json"), "--html", str(pytester.path / "r.html")]) == 0
    for name in ("r.json", "r.html"):
        mode = stat.S_IMODE((pytester.path / name).stat().st_mode)
        assert mode == DEFAULT_MODE & ~umask(), (name, oct(mode))
        assert not mode & SPECIAL


def shared_dir(tmp_path: Path, mode: int = 0o1777) -> Path:
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chmod(directory, mode)
    return directory


def foreign(directory: Path, name: str, mode: int = 0o666) -> Path:
    path = directory / name
    path.write_text("theirs")
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, mode)  # after the chown, which clears setuid
    return path


@as_root
@pytest.mark.parametrize("dir_mode", [0o1777, 0o777])
def test_another_users_file_in_a_shared_directory_is_not_replaced(tmp_path: Path, dir_mode: int) -> None:
    theirs = foreign(shared_dir(tmp_path, dir_mode), "r.json", 0o4777)
    with pytest.raises(UnsafeTarget, match="another user"):
        write_atomic(theirs, "ours")
    assert theirs.read_text() == "theirs" and theirs.stat().st_uid == NOBODY
    assert [p.name for p in theirs.parent.iterdir()] == ["r.json"]  # no temporary file left behind


@as_root
def test_another_users_file_in_a_private_directory_is_ours_to_replace(tmp_path: Path) -> None:
    """Only a directory others can write to makes a file's owner matter: in the run's own directory it is ours."""
    theirs = foreign(shared_dir(tmp_path, 0o755), "r.json")
    write_atomic(theirs, "ours")
    assert theirs.read_text() == "ours" and theirs.stat().st_uid == os.geteuid()


@as_root
@pytest.mark.parametrize("option", ["--html", "--markdown", "--junit"])
def test_report_outputs_refuse_another_users_file(option: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    theirs = foreign(shared_dir(tmp_path), "out")
    assert main(["report", str(report_file(tmp_path)), option, str(theirs)]) == 2
    one_line(capsys.readouterr().err, str(theirs), option, "another user")
    assert theirs.read_text() == "theirs"


@as_root
def test_merge_output_refuses_another_users_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    theirs = foreign(shared_dir(tmp_path), "m.json")
    assert main(["merge", str(report_file(tmp_path)), "-o", str(theirs)]) == 2
    one_line(capsys.readouterr().err, str(theirs), "another user")
    assert theirs.read_text() == "theirs"


@as_root
def test_the_pytest_report_refuses_another_users_file_before_any_test(pytester: pytest.Pytester) -> None:
    directory = shared_dir(pytester.path)
    theirs = foreign(directory, "r.json", 0o4777)
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gpucompat", "--gpucompat-report",
                                           str(theirs), timeout=HANG_S)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    one_line(result.stderr.str(), str(theirs), "another user")
    assert "passed" not in result.stdout.str()
    assert theirs.read_text() == "theirs" and stat.S_IMODE(theirs.stat().st_mode) == 0o4777


# --------------------------------------------------------------------------- inputs: installed metadata


def planted_site(tmp_path: Path) -> Path:
    """A sys.path entry whose engines' METADATA are a FIFO, a link to /dev/zero and a 20 MiB file of one line."""
    site = tmp_path / "site"
    for name, kind in (("vllm", "fifo"), ("sglang", "zero"), ("tensorrt_llm", "huge"), ("xformers", "no-version")):
        folder = site / f"{name}-0.1.0.dist-info"
        folder.mkdir(parents=True)
        metadata = folder / "METADATA"
        if kind == "fifo":
            os.mkfifo(metadata)
        elif kind == "zero":
            metadata.symlink_to("/dev/zero")
        elif kind == "no-version":  # importlib.metadata, asked what the headers do not say, would read it whole
            metadata.write_bytes(b"Metadata-Version: 2.1\nName: xformers\nX-Note: " + b"y" * (20 * 1024 * 1024))
        else:
            metadata.write_bytes(b"Metadata-Version: 2.1\nName: tensorrt_llm\nVersion: 0.1.0\nRequires-Dist: x"
                                 + b"y" * (20 * 1024 * 1024))
    return site


def test_installed_metadata_that_is_not_a_regular_file_is_a_reason_not_a_hang(tmp_path: Path) -> None:
    """`gpucompat env` read a METADATA linked to /dev/zero until 4.4 GB RSS, and waited on a FIFO forever."""
    site = planted_site(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site)}
    result = run(["env", "--json"], env=env)
    assert result.returncode == 0, result.stderr
    data = strict_json(result.stdout)
    assert isinstance(data, dict)
    reasons = "\n".join(data["reasons"])
    for name in ("vllm", "sglang"):
        assert f"{name}-0.1.0.dist-info" in reasons and "not a regular file" in reasons, reasons
    assert "vllm" not in data["packages"] and "sglang" not in data["packages"]
    assert "tensorrt_llm-0.1.0.dist-info" in reasons and "longer than" in reasons  # headers without an end
    assert "xformers-0.1.0.dist-info" in reasons and "no Version header" in reasons


def test_the_installs_reader_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_gpucompat.common.installed import find
    from pytest_gpucompat.machine.installs import engine_installs

    site = planted_site(tmp_path)
    monkeypatch.setattr(sys, "path", [str(site)])
    reasons: list[str] = []
    with cpu() as used:  # a FIFO waited on is a hang, /dev/zero read whole is minutes of CPU
        found = within(lambda: find(["vllm", "sglang", "tensorrt-llm"], reasons))
        installs = within(lambda: engine_installs(reasons))
    assert used.seconds < 5.0
    assert set(found) == {"tensorrt-llm"} and installs["tensorrt-llm"].complete is None
    assert len({r for r in reasons if "not a regular file" in r}) == 2


# --------------------------------------------------------------------------- parsers of user text, strict JSON


@pytest.mark.parametrize("dashes", [5_000, 20_000])
def test_a_value_of_many_dashes_is_text_not_a_recursion(dashes: int) -> None:
    result = run(["check", "--args", f"vllm serve m --max-model-len={'-' * dashes}1", "--to", "vllm==0.10.0",
                  "--json"])
    assert result.returncode in (0, 1), result.stderr
    data = strict_json(result.stdout)
    assert isinstance(data, dict) and data["command"]["settings"]["max_model_len"] == "-" * dashes + "1"


@pytest.mark.parametrize("value", ["1e999", "-1e999", "nan", "inf", "9" * 500])
def test_check_json_is_strict_json_for_any_number(value: str) -> None:
    result = run(["check", "--args", f"vllm serve m --max-model-len={value}", "--to", "vllm==0.10.0", "--json"])
    assert result.returncode in (0, 1), result.stderr
    data = strict_json(result.stdout)
    assert isinstance(data, dict) and data["command"]["settings"]["max_model_len"] == value


def test_numbers_of_a_command_line_are_still_numbers() -> None:
    from pytest_gpucompat.kb.cmdline import _value

    assert [_value(t, {}) for t in ("8192", "-1", "0.9", "1e5", "True", "auto")] == [8192, -1, 0.9, 1e5, True, "auto"]
    assert _value(None, {"action": "store_false"}) is False


def test_strict_json_dumps_writes_a_reason_for_a_non_finite_number() -> None:
    from pytest_gpucompat.common import jsontext

    text = jsontext.dumps({"a": [1.0, float("inf"), {"b": float("nan")}], "c": (float("-inf"),)})
    assert strict_json(text) == {"a": [1.0, "not a finite number (inf)", {"b": "not a finite number (nan)"}],
                                 "c": ["not a finite number (-inf)"]}


# --------------------------------------------------------------------------- history fields, type-checked on load


def _first_run(data: dict, kind: str, with_key: str | None = None) -> dict:
    for runs in data[kind].values():
        for run in runs:
            if with_key is None or with_key in run:
                return run
    raise AssertionError(kind)


HISTORY_DAMAGE = {
    "flag action a list": (lambda d: _first_run(d, "flags", "action").update(action=["store_true"]), "action"),
    "flag action a mapping": (lambda d: _first_run(d, "flags", "action").update(action={"a": 1}), "action"),
    "flag dest a list": (lambda d: _first_run(d, "flags").update(dest=["x"]), "dest"),
    "flag choices a mapping": (lambda d: _first_run(d, "flags").update(choices={"a": 1}), "choices"),
    "flag choices nested": (lambda d: _first_run(d, "flags").update(choices=[["a"]]), "choices"),
    "flag deprecated text": (lambda d: _first_run(d, "flags").update(deprecated="yes"), "deprecated"),
    "env default a mapping": (lambda d: _first_run(d, "env").update(default={"a": 1}), "default"),
    "requires specifier a list": (lambda d: _first_run(d, "requires").update(specifier=[">=1"]), "specifier"),
    "release file a number": (lambda d: d["releases"][0].update(file=3), "releases[0].file"),
    "release yanked text": (lambda d: d["releases"][0].update(yanked="no"), "releases[0].yanked"),
    "engine a list": (lambda d: d.update(engine=["vllm"]), "engine"),
}


@pytest.mark.parametrize("case", list(HISTORY_DAMAGE))
def test_a_history_field_of_the_wrong_type_is_one_line(case: str, tmp_path: Path) -> None:
    """A run whose `action` is a list or a mapping was a TypeError (unhashable) in `check --args`."""
    from pytest_gpucompat.common.paths import matrices_dir

    damage, field = HISTORY_DAMAGE[case]
    shipped = matrices_dir()
    data = json.loads((shipped / "history" / "vllm.json").read_text())
    damage(data)
    (tmp_path / "history").mkdir()
    (tmp_path / "rules").symlink_to(shipped / "rules")
    path = tmp_path / "history" / "vllm.json"
    path.write_text(json.dumps(data))
    env = {**os.environ, "GPUCOMPAT_MATRICES_DIR": str(tmp_path)}
    flags = " ".join(f"{flag}" for flag in list(data["flags"])[:40])
    result = run(["check", "--args", f"vllm serve m {flags}", "--to", "vllm==0.10.0"], env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    one_line(result.stderr, str(path), field)


# --------------------------------------------------------------------------- signatures: linear whatever the shape


def signature_rules(tmp_path: Path, pattern: str) -> Path:
    path = tmp_path / "team.yaml"
    rule = {"id": "r1", "summary": "s", "severity": "broken", "failure": "crash", "confidence": "upstream",
            "sources": [{"kind": "doc", "ref": "x"}], "signature": [pattern]}
    path.write_text(json.dumps({"rules": [rule]}))
    return path


def failed_report(tmp_path: Path, line: str) -> Path:
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"schema_version": 1, "tool_version": "x", "created": "x", "runners": {"r": {}},
                                  "cells": [{"nodeid": "t.py::x", "outcome": "failed", "runner": "r", "reason": line,
                                             "log_tail": "\n".join([line] * 20)}]}))
    return report


BACKTRACKING = {
    "alternation chain": "(?:x|x)" * 40 + "Q",
    "overlapping alternation chain": "(?:x|xx)" * 30 + "Q",
    "three-way chain": "(?:a|ab|abc)" * 25 + "Z",
    "capturing chain": "(x|x)" * 40 + "Q",
    "case-folded chain": "(?i)(?:x|X)" * 40 + "Q",
    "optional chain": "x?" * 40 + "x" * 40,
    "class chain": "[xy]?" * 30 + "[xy]" * 30 + "Q",
    "automaton blow-up": "[ab]*a[ab]{999}Q",  # linear for RE2 too, but its automaton outgrew the default cache
    "large automaton": ".*a.{999}Q",
}


@pytest.mark.parametrize("case", list(BACKTRACKING))
def test_a_signature_that_backtracks_in_python_is_linear_or_refused(case: str, tmp_path: Path) -> None:
    """`(?:x|x)` forty times then Q passed the shape check (no repeat) and backtracked 2**40 in `explain` on a
    60-character line. Now a signature is either refused on load in one line naming its rule and field, or
    matched by RE2 in time linear in the line: `explain` ends either way, quickly."""
    rules = signature_rules(tmp_path, BACKTRACKING[case])
    for line in ("x" * 60, "ab" * 1000, "X" * 2000):
        result = run(["explain", str(failed_report(tmp_path, line)), "--kb", str(rules)])
        if result.returncode == 2:
            one_line(result.stderr, str(rules), "rule 'r1': field 'signature[0]'")
        else:
            assert result.returncode in (0, 1), result.stderr


@pytest.mark.parametrize(("pattern", "problem"), [
    (r"[ab ]*a[ab ]{998}b", "instructions"), ("(?:abc){999}d", "instructions"),
    (r"(?<=a)boom", "RE2"), (r"boom\Z", "RE2"), (r"(?P<x>a)(?P=x)", "backreference"), ("(?x) b o o m", "RE2"),
    (r"a{1001}", "repeat bound"),
])
def test_a_signature_the_linear_matcher_cannot_run_is_one_line(pattern: str, problem: str, tmp_path: Path) -> None:
    rules = signature_rules(tmp_path, pattern)
    result = run(["rules", "--kb", str(rules)])
    assert result.returncode == 2, result.stdout
    one_line(result.stderr, str(rules), "rule 'r1': field 'signature[0]'", problem)


def test_the_linear_matcher_matches_what_the_shipped_signatures_document() -> None:
    """The shipped signatures mean under RE2 what they meant under Python's re, on their own symptoms."""
    import re

    from pytest_gpucompat.kb import load_kb
    from pytest_gpucompat.kb.failure_modes import load_failure_modes

    kb = load_kb([], builtin=True)
    texts = [" ".join((r.symptom or "").split()) for r in kb.rules] + [r.summary for r in kb.rules]
    patterns = [p for r in kb.rules for p in r.signature]
    patterns += [m.pattern for m in load_failure_modes() if m.pattern is not None]
    assert len(patterns) >= 20
    for pattern in patterns:
        python = re.compile(pattern.pattern)
        for text in texts:
            assert pattern.search(text) == bool(python.search(text)), (pattern.pattern, text)


@pytest.mark.parametrize("pattern", [r"a[^x]*b", r"a\s+b", r"a\W+b", r"(?s)a.*b", r"a\Db", r"a[\x00-\x7f]b",
                                     r"a[[:space:]]b", r"a\nb", r"a$\s^b"])
def test_a_signature_never_matches_across_lines(pattern: str) -> None:
    """Lines are searched at once (joined by newlines): no pattern may find text that spans two of them."""
    from pytest_gpucompat.kb.linear_regex import compile_linear, joined
    from pytest_gpucompat.kb.signatures import signature_matches

    compiled = compile_linear(pattern)
    assert not signature_matches((compiled,), ["x a", "b y"]) and not compiled.search(joined(["a", "b"]))
    assert signature_matches((compile_linear(r"^b y$"),), ["x a", "b y", "z"])  # ^ and $: each line's ends
    assert not signature_matches((compile_linear(r"^a"),), ["x a"])


def test_a_line_with_a_lone_surrogate_is_searched_not_a_crash() -> None:
    from pytest_gpucompat.kb.linear_regex import compile_linear

    assert compile_linear("boom").search("x\udcff boom") and not compile_linear("zz").search("\ud800")


# --------------------------------------------------------------------------- nothing claimed that did not happen


def test_the_summary_names_the_report_only_when_it_was_written(pytester: pytest.Pytester) -> None:
    """On a full disk the run said "could not write r.json", then its summary still ended `report: r.json`."""
    from test_hostile_inputs import FULL_DISK_CONFTEST, ONE_TEST, PLUGIN_ARGS

    pytester.makefile(".yaml", a="gpus: [{name: H100}]\n")
    pytester.makeconftest(FULL_DISK_CONFTEST)
    pytester.makepyfile(test_x=ONE_TEST)
    result = pytester.runpytest(*PLUGIN_ARGS, "--gpucompat-report", "r.json")
    out = result.stdout.str()
    assert "report: r.json" not in out and "report: not written to r.json" in out, out
    pytester.makeconftest("")
    result = pytester.runpytest(*PLUGIN_ARGS, "--gpucompat-report", "r.json")
    assert result.ret == 0 and "report: r.json" in result.stdout.str()


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fsync fails as on a full disk: an OSError that names no file."""
    import errno

    def fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize("option", ["--html", "--markdown", "--junit"])
def test_a_report_output_that_cannot_be_written_is_named(option: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    source = report_file(tmp_path)
    full_disk(monkeypatch)
    out = tmp_path / "out"
    assert main(["report", str(source), option, str(out)]) == 2
    one_line(capsys.readouterr().err, str(out), option, "No space left on device")
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["in.json"]  # no temporary file left


@pytest.mark.parametrize("option", ["-o", "--html"])
def test_a_merge_output_that_cannot_be_written_is_named(option: str, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    source = report_file(tmp_path)
    argv = ["merge", str(source), "-o", str(tmp_path / "m.json")]
    if option == "--html":
        argv += ["--html", str(tmp_path / "m.html")]
        import pytest_gpucompat.report.io as report_io

        real = report_io.write_text_atomic

        def html_fails(path: str | os.PathLike[str], text: str) -> Path:
            if str(path).endswith(".html"):
                full_disk(monkeypatch)
            return real(path, text)

        monkeypatch.setattr(report_io, "write_text_atomic", html_fails)
    else:
        full_disk(monkeypatch)
    assert main(argv) == 2
    named = str(tmp_path / ("m.html" if option == "--html" else "m.json"))
    one_line(capsys.readouterr().err, named, "No space left on device")


def test_a_write_error_names_the_target_not_the_temporary_file(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    full_disk(monkeypatch)
    with pytest.raises(OSError) as info:
        write_atomic(tmp_path / "r.json", "x")
    assert info.value.filename == str(tmp_path / "r.json") and "No space left" in str(info.value)
    readonly = tmp_path / "ro"
    readonly.mkdir()
    readonly.chmod(0o500)
    monkeypatch.undo()
    if os.geteuid() != 0:  # root writes anywhere
        with pytest.raises(PermissionError) as denied:
            write_atomic(readonly / "r.json", "x")
        assert denied.value.filename == str(readonly / "r.json")


KILLED = """
import os
import pytest

@pytest.mark.gpucompat(engine="hf", params={"n": [1, 2, 3]})
def test_cell(gpucompat_cell, request):
    if "2" in request.node.name:
        os._exit(1)  # what pytest-timeout's thread method does: no sessionfinish, no unconfigure
"""


def test_a_process_killed_after_collection_leaves_a_valid_interrupted_report(pytester: pytest.Pytester) -> None:
    """pytest-timeout --timeout-method=thread ended the process before the first checkpoint: no report at all, and
    a lock left behind. The first checkpoint is written once collection ends; the next run takes the lock over."""
    from pytest_gpucompat.report.io import load_report

    pytester.makepyfile(test_x=KILLED)
    args = ("-p", "no:cacheprovider", "--gpucompat", "--gpucompat-no-builtin-rules", "--gpucompat-report", "r.json")
    result = pytester.runpytest_subprocess(*args, timeout=HANG_S)
    assert result.ret == 1
    report = load_report(pytester.path / "r.json")
    assert report.interrupted
    assert strict_json((pytester.path / "r.json").read_text())
    pytester.makepyfile(test_x="import pytest\n\n@pytest.mark.gpucompat(engine='hf', params={'n': [1]})\n"
                               "def test_cell(gpucompat_cell):\n    pass\n")
    again = pytester.runpytest_subprocess(*args, timeout=HANG_S)
    again.assert_outcomes(passed=1)
    assert not load_report(pytester.path / "r.json").interrupted
    assert not (pytester.path / "r.json.lock").exists()


# --------------------------------------------------------------------------- the package's own patterns over logs


@pytest.mark.parametrize("line", ["AError" * 40_000 + "!", "a" * 256 * 1024, "x." * 100_000 + "Error!",
                                  "torch." * 40_000 + "ValueError" * 1000 + " ?"])
def test_a_long_engine_log_line_is_read_in_linear_time(line: str) -> None:
    """The exception-line pattern backtracked quadratically on a long line of words repeating "Error" (21 s for
    32 KiB), and the rule proposal's path pattern on one long word (156 s for 64 KiB): an engine's log line has no
    length bound. Both take a fraction of a second on 256 KiB now, with the same answers. Read in a child process
    under the hang guard: a backtracking pattern holds the interpreter in one C call, where nothing in this process
    could stop it."""
    from pytest_gpucompat.catalog.loglines import last_error

    read = textwrap.dedent("""
        import sys, time
        from pytest_gpucompat.catalog.loglines import last_error
        from pytest_gpucompat.engines.failures import failure_reason
        from pytest_gpucompat.kb.propose import group_failures, propose_rule
        from pytest_gpucompat.kb.signatures import Failure
        from pytest_gpucompat.machine.fingerprint import Fingerprint
        line = sys.stdin.read()
        began = time.process_time()
        last_error(line + "\\n" + line)
        failure_reason("engine process died: SIGSEGV", line)
        failure = Failure(fingerprint=Fingerprint(name="r"), engine="vllm", reason=line, log_tail=line,
                          phase="setup")
        group_failures([failure])
        propose_rule([failure], "r.json", set(), ())
        print(time.process_time() - began)
    """)
    result = subprocess.run([sys.executable, "-c", read], input=line, capture_output=True, text=True,
                            timeout=HANG_S)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) < 5.0  # CPU seconds of the reading alone
    assert last_error("x\nINFO 01-02 03:04:05 [core.py:1] torch.OutOfMemoryError: CUDA out of memory") == \
        "torch.OutOfMemoryError: CUDA out of memory"
    assert last_error("Error: not an exception name") is None
