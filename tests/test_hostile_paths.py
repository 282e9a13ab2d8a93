"""Hostile paths: what another user of a shared directory can plant where a run writes or what it trusts.

A symlink, a FIFO or another user's file at the name of the report's lock, of an output, of an engine log or of a
cache entry; a process of another user that claims the run's GPU-sharing token. Each is refused in one line naming
the file (exit status 2 for a CLI command, a usage error for pytest), quickly, and the planted link's target is
never written. Symlinks here point at files the test owns; cases that need another user (a chown) run as root only.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_checkpoint import checkpoint_dir

from pytest_gpucompat.catalog.base import EngineFailed, EngineSpec
from pytest_gpucompat.checks import ownership
from pytest_gpucompat.cli import main
from pytest_gpucompat.engines.isolation import IsolatedEngine
from pytest_gpucompat.engines.processes import append_log, open_log
from pytest_gpucompat.report.io import UnsafeTarget, write_text_atomic
from pytest_gpucompat.report.model import Report
from pytest_gpucompat.session import sharing
from pytest_gpucompat.workload import checkpoint, models

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX files and /proc")

TIME_LIMIT_S = 30.0
PRECIOUS = "precious data\n"
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's file needs root (chown)")


def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(PRECIOUS)
    return path


def untouched(path: Path) -> bool:
    return path.read_text() == PRECIOUS


# --------------------------------------------------------------------------- REPORT.lock (item 1)

ONE_TEST = """
import pytest

@pytest.mark.gpucompat(engine="hf", params={"n": [1]})
def test_cell(gpucompat_cell):
    pass
"""


def run_pytest(pytester: pytest.Pytester) -> pytest.RunResult:
    pytester.makepyfile(test_x=ONE_TEST)
    start = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gpucompat", "--gpucompat-no-builtin-rules",
                                           "--gpucompat-report", "r.json", timeout=TIME_LIMIT_S)
    assert time.monotonic() - start < TIME_LIMIT_S
    return result


def refused(result: pytest.RunResult, *words: str) -> str:
    """A usage error, one line on stderr naming the lock file (and each of ``words``), no traceback, no test run."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "INTERNALERROR" not in text, text
    lines = [line for line in result.stderr.lines if line.strip()]
    assert len(lines) == 1, lines
    for word in ("r.json", *words):
        assert word in lines[0], lines[0]
    assert "passed" not in result.stdout.str()
    return lines[0]


def test_a_symlink_at_the_lock_name_is_refused_and_its_target_untouched(pytester: pytest.Pytester) -> None:
    target = victim(pytester.path)
    (pytester.path / "r.json.lock").symlink_to(target)
    refused(run_pytest(pytester), "r.json.lock", "symlink")
    assert untouched(target)
    assert (pytester.path / "r.json.lock").is_symlink()


def test_a_fifo_at_the_lock_name_is_refused(pytester: pytest.Pytester) -> None:
    os.mkfifo(pytester.path / "r.json.lock")
    refused(run_pytest(pytester), "r.json.lock", "not a regular file")


def test_a_hard_link_at_the_lock_name_is_not_written(pytester: pytest.Pytester) -> None:
    """A file found at the lock's name is not ours to write: it is replaced by a new one, the old inode unchanged."""
    target = victim(pytester.path)
    os.link(target, pytester.path / "r.json.lock")
    run_pytest(pytester).assert_outcomes(passed=1)
    assert untouched(target)
    assert not (pytester.path / "r.json.lock").exists()


def test_a_held_lock_never_prints_its_content(pytester: pytest.Pytester) -> None:
    hostile = "\x1b[2J\x1b]0;owned\x07" + "A" * 5000
    with open(pytester.path / "r.json.lock", "w") as held:
        held.write(hostile)
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        line = refused(run_pytest(pytester), "another run")
    assert "\x1b" not in line and "\x07" not in line
    assert len(line) < 300, line


@as_root
def test_a_lock_held_by_another_user_is_refused_in_one_line(pytester: pytest.Pytester) -> None:
    lock = pytester.path / "r.json.lock"
    with open(lock, "w") as held:
        held.write("4242\n")
        held.flush()
        os.chown(lock, NOBODY, NOBODY)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused(run_pytest(pytester), "another user", f"uid {NOBODY}", "4242")


# --------------------------------------------------------------------------- outputs (item 2)


def report(tmp_path: Path) -> Path:
    cell = {"nodeid": "t.py::test_x[hf]", "engine": "hf", "params": {}, "outcome": "passed", "metrics": {}}
    path = tmp_path / "r.json"
    path.write_text(Report.from_run({"name": "a"}, [cell]).to_json())
    return path


def cli(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run a command that must refuse an output: exit 2, one line on stderr, quickly; returns the line."""
    start = time.monotonic()
    code = main(argv)
    assert time.monotonic() - start < TIME_LIMIT_S
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpucompat"), err
    return lines[0]


@pytest.mark.parametrize("option", ["--html", "--markdown", "--junit"])
def test_report_outputs_refuse_a_symlink(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = victim(tmp_path)
    link = tmp_path / "out"
    link.symlink_to(target)
    line = cli(capsys, ["report", str(report(tmp_path)), option, str(link)])
    assert str(link) in line and option in line and "symlink" in line
    assert untouched(target) and link.is_symlink()


@pytest.mark.parametrize("option", ["--html", "--markdown", "--junit"])
def test_report_outputs_refuse_a_fifo(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "device"
    os.mkfifo(fifo)
    line = cli(capsys, ["report", str(report(tmp_path)), option, str(fifo)])
    assert str(fifo) in line and option in line and "not a regular file" in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("option", ["-o", "--html"])
def test_merge_outputs_refuse_a_symlink(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = victim(tmp_path)
    link = tmp_path / "out"
    link.symlink_to(target)
    argv = ["merge", str(report(tmp_path)), "-o", str(tmp_path / "m.json")]
    argv = [*argv[:-2], "-o", str(link)] if option == "-o" else [*argv, "--html", str(link)]
    line = cli(capsys, argv)
    assert str(link) in line and ("--output" if option == "-o" else "--html") in line
    assert untouched(target) and link.is_symlink()


@pytest.mark.parametrize("option", ["-o", "--html"])
def test_golden_outputs_refuse_a_fifo(option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "device"
    os.mkfifo(fifo)
    (tmp_path / "golden").mkdir()
    line = cli(capsys, ["golden", str(report(tmp_path)), "--golden", str(tmp_path / "golden"), option, str(fifo)])
    assert str(fifo) in line and ("--output" if option == "-o" else "--html") in line
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_report_to_stdout_still_works(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(report(tmp_path))]) == 0
    assert capsys.readouterr().out.startswith("## ")


def test_the_atomic_write_refuses_links_and_special_files(tmp_path: Path) -> None:
    target = victim(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(target)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (link, fifo, tmp_path):
        with pytest.raises(UnsafeTarget) as info:
            write_text_atomic(path, "x")
        assert info.value.filename == str(path)
    assert untouched(target)
    write_text_atomic(tmp_path / "plain.txt", "ok")  # a new file, and a regular one replaced
    write_text_atomic(tmp_path / "plain.txt", "again")
    assert (tmp_path / "plain.txt").read_text() == "again"


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_the_pytest_report_path_is_checked_before_any_test(kind: str, pytester: pytest.Pytester) -> None:
    target = victim(pytester.path)
    if kind == "symlink":
        (pytester.path / "r.json").symlink_to(target)
    else:
        os.mkfifo(pytester.path / "r.json")
    line = refused(run_pytest(pytester), "--gpucompat-report")
    assert ("symlink" if kind == "symlink" else "not a regular file") in line
    assert untouched(target)


# --------------------------------------------------------------------------- GPU-sharing owner token (item 3)


def test_the_sharing_token_is_a_secret_not_the_ledger_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sharing, "packing", lambda config: True)
    monkeypatch.setattr(sharing, "workers_per_gpu", lambda config: 2)
    config = SimpleNamespace(stash=pytest.Stash())
    nodes = [SimpleNamespace(workerinput={}) for _ in range(2)]
    for node in nodes:
        sharing.configure_node(config, node)
    try:
        directory = nodes[0].workerinput[sharing.SHARE_DIR]
        token = nodes[0].workerinput[sharing.SHARE_TOKEN]
        assert nodes[1].workerinput[sharing.SHARE_TOKEN] == token  # one run, one token
        assert len(token) >= 32 and token not in directory and directory not in token
        assert stat.S_IMODE(os.lstat(directory).st_mode) == 0o700
    finally:
        sharing.unconfigure(config)


def test_a_share_directory_not_private_is_refused(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert sharing._share_dir_problem(str(private)) is None
    link = tmp_path / "link"
    link.symlink_to(private)
    assert "not a private directory" in (sharing._share_dir_problem(str(link)) or "")
    opened = tmp_path / "open"
    opened.mkdir()
    opened.chmod(0o777)
    assert "not a private directory" in (sharing._share_dir_problem(str(opened)) or "")


def _sleeper(env: dict[str, str], user: int | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([shutil.which("sleep") or "/bin/sleep", "60"], env=env, user=user,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def _until_exec(pid: int, token: str, limit_s: float = 60.0) -> None:
    """Until the forked child runs `sleep` with the environment given, polled (read from /proc, not through the
    code under test). Its name changes before its new environment is readable: the environment is waited for."""
    deadline = time.monotonic() + limit_s
    while f"{sharing.RUN_ENV}={token}".encode() not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        assert time.monotonic() < deadline, "the sleeper never started"
        time.sleep(0.01)


def test_a_process_of_another_user_with_the_token_is_not_the_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The token is only believed in a process of this user: another user's memory stays in the budget."""
    token = "0123456789abcdef0123456789abcdef"
    monkeypatch.setenv(sharing.RUN_ENV, token)
    env = {"PATH": os.environ.get("PATH", ""), sharing.RUN_ENV: token}
    proc = _sleeper(env)
    try:
        _until_exec(proc.pid, token)
        assert sharing._foreign(1000.0, {proc.pid: 400.0}, True, [], 0.0) == 600.0  # ours: token, same user
        monkeypatch.setattr(ownership, "process_uid", lambda pid: os.getuid() + 1, raising=False)
        assert not ownership.carries_token(proc.pid, token, sharing.RUN_ENV)
        assert sharing._foreign(1000.0, {proc.pid: 400.0}, True, [], 0.0) == 1000.0
    finally:
        proc.kill()
        proc.wait()


@as_root
def test_a_real_process_of_another_user_with_the_token_is_foreign(monkeypatch: pytest.MonkeyPatch) -> None:
    token = "fedcba9876543210fedcba9876543210"
    monkeypatch.setenv(sharing.RUN_ENV, token)
    proc = _sleeper({"PATH": os.environ.get("PATH", ""), sharing.RUN_ENV: token}, user=NOBODY)
    try:
        _until_exec(proc.pid, token)
        assert ownership.process_uid(proc.pid) == NOBODY
        assert sharing._foreign(1000.0, {proc.pid: 400.0}, True, [], 0.0) == 1000.0
    finally:
        proc.kill()
        proc.wait()


# --------------------------------------------------------------------------- logs and caches (item 4)


def test_a_new_engine_log_is_private(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "vllm-abc-main.log"
    open_log(log)
    assert stat.S_IMODE(os.lstat(log).st_mode) == 0o600
    assert stat.S_IMODE(os.lstat(log.parent).st_mode) & 0o077 == 0
    log.write_text("old run\n")
    log.chmod(0o644)
    open_log(log)  # a log of ours from an earlier run: truncated and made private
    assert log.read_text() == "" and stat.S_IMODE(os.lstat(log).st_mode) == 0o600
    os.close(append_log(log))


def test_an_engine_log_name_taken_by_a_symlink_is_refused(tmp_path: Path) -> None:
    target = victim(tmp_path)
    log = tmp_path / "hf-abc-main.log"
    log.symlink_to(target)
    for opener in (open_log, append_log):
        with pytest.raises(PermissionError) as info:
            opener(log)
        assert "symlink" in str(info.value) and str(log) in str(info.value)
    assert untouched(target)
    engine = IsolatedEngine("hf", log_path=log)
    with pytest.raises(EngineFailed) as failed:
        engine.start(EngineSpec(engine="hf", model="m"))
    assert str(log) in failed.value.message and "\n" not in failed.value.message
    assert untouched(target)


def test_an_engine_log_name_taken_by_a_fifo_is_refused_quickly(tmp_path: Path) -> None:
    fifo = tmp_path / "hf-abc-main.log"
    os.mkfifo(fifo)
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            open_log(fifo)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(TIME_LIMIT_S)
    if thread.is_alive():  # unblock the opener so the thread ends, then fail
        with open(fifo, "rb"):
            pass
        pytest.fail("opening the log blocked on a FIFO")
    assert isinstance(outcome[0], PermissionError) and "not a regular file" in str(outcome[0])


@as_root
def test_an_engine_log_of_another_user_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "hf-abc-main.log"
    log.write_text(PRECIOUS)
    os.chown(log, NOBODY, NOBODY)
    with pytest.raises(PermissionError, match="another user"):
        open_log(log)
    assert untouched(log)


def test_the_identity_cache_never_follows_a_planted_temporary_name(tmp_path: Path) -> None:
    """The old temporary name was ``<stamp>.<pid>.tmp``: predictable, and written through a symlink."""
    model = checkpoint_dir(tmp_path / "m")
    cache = tmp_path / "cache"
    (cache / "identity").mkdir(parents=True)
    target = victim(tmp_path)
    stamp = checkpoint._stamp(model)
    (cache / "identity" / f"{stamp}.{os.getpid()}.tmp").symlink_to(target)
    identity = checkpoint.model_identity(model, cache)
    assert untouched(target)
    assert json.loads((cache / "identity" / f"{stamp}.json").read_text())["weights"] == identity.weights


@as_root
def test_an_identity_entry_of_another_user_is_not_believed(tmp_path: Path) -> None:
    model = checkpoint_dir(tmp_path / "m")
    cache = tmp_path / "cache"
    real = checkpoint.model_identity(model, cache)
    entry = cache / "identity" / f"{checkpoint._stamp(model)}.json"
    entry.write_text(json.dumps({**real.to_dict(), "weights": "f" * 64}))
    os.chown(entry, NOBODY, NOBODY)
    assert checkpoint.model_identity(model, cache).weights == real.weights


def _planted_model(root: Path) -> Path:
    final = root / "tiny-qwen2-abc"
    final.mkdir(parents=True)
    (final / "config.json").write_text("{}")
    return final


def _never_built(target: Path) -> None:
    raise AssertionError("built, though the cached directory was refused")


def test_a_cached_model_others_can_write_is_refused(tmp_path: Path) -> None:
    final = _planted_model(tmp_path / "cache")
    final.chmod(0o777)
    with pytest.raises(ValueError, match="can be written by other users") as info:
        models._build_once(final, _never_built)
    assert str(final) in str(info.value) and "\n" not in str(info.value)


def test_a_cached_model_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    elsewhere = _planted_model(tmp_path / "elsewhere")
    final = tmp_path / "cache" / elsewhere.name
    final.parent.mkdir()
    final.symlink_to(elsewhere)
    with pytest.raises(ValueError, match="is a symlink"):
        models._build_once(final, _never_built)


@as_root
def test_a_cached_model_of_another_user_is_refused(tmp_path: Path) -> None:
    final = _planted_model(tmp_path / "cache")
    os.chown(final, NOBODY, NOBODY)
    with pytest.raises(ValueError, match="another user"):
        models._build_once(final, _never_built)


def test_a_private_cached_model_is_reused(tmp_path: Path) -> None:
    final = _planted_model(tmp_path / "cache")
    final.chmod(0o755)
    assert models._build_once(final, _never_built) == final
