"""Isolation mechanics with real child processes: hangs, crashes, skips and reuse.

The engines here are tiny fakes (this module's FakeEngine, loaded in the child by import path) because what is
tested is the isolation, not an engine: a real hang, a real SIGSEGV, real fd-level output, a real process group.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from _procs import dead

from pytest_gpucompat.catalog.base import EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo
from pytest_gpucompat.catalog.loglines import last_error
from pytest_gpucompat.catalog.params import Unsupported
from pytest_gpucompat.engines import pool as pool_module
from pytest_gpucompat.engines.failures import exit_status, failure_reason, log_tail
from pytest_gpucompat.engines.isolation import IsolatedEngine, run_in_child
from pytest_gpucompat.engines.pool import EnginePool
from pytest_gpucompat.engines.processes import ProcessGroup, is_ours, process_group, state_dir
from pytest_gpucompat.options import positive_seconds

FAKE = f"{__name__}:FakeEngine"


class FakeEngine:
    """Behaves as spec.params["mode"] says; prints to stdout and writes to fd 2 directly like C code would."""

    name = "fake"

    def __init__(self) -> None:
        self.mode = ""

    def start(self, spec: EngineSpec) -> RunInfo:
        self.mode = str(spec.params.get("mode", ""))
        print(f"fake engine starting in mode {self.mode!r}", flush=True)
        os.write(2, b"C-level log line from the fake engine\n")
        if self.mode == "hang_start":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            print(f"grandchild pid {child.pid}", flush=True)
            time.sleep(3600)
        if self.mode == "unavailable":
            raise EngineUnavailable("fake engine needs a GPU it does not have")
        if self.mode == "fail_start":
            raise EngineFailed("fake engine refused to start", log_tail="fake tail")
        if self.mode == "raise_start":
            raise RuntimeError("boom in start\nsecond line")
        if self.mode == "segv_start":
            os.kill(os.getpid(), signal.SIGSEGV)
        return RunInfo(engine="fake", version="0.0", device="cpu", extra={"pid": os.getpid(),
                                                                           "env": os.environ.get("FAKE_ENV")})

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        if self.mode == "hang_generate":
            print("about to hang in generate", flush=True)
            time.sleep(3600)
        if self.mode == "segv_generate":
            print("about to segfault", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.mode == "exit_generate":
            os._exit(3)
        return [
            Generation(token_ids=tuple(p[:max_tokens]), logprobs=tuple({t: -1.0} for t in p[:max_tokens]))
            for p in prompts
        ]

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        if self.mode == "no_embed":
            raise Unsupported("fake engine does not embed")
        return [[float(len(p)), 0.0] for p in prompts]

    def shutdown(self) -> None:
        print("fake engine shutting down", flush=True)


def measure(kind: str, value: int = 0) -> int:
    """A function run by run_in_child: returns, hangs, crashes or skips as told."""
    print(f"measuring {kind} in pid {os.getpid()}", flush=True)
    if kind == "hang":
        time.sleep(3600)
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if kind == "skip":
        raise EngineUnavailable("no GPU for this measurement")
    if kind == "error":
        raise ValueError("bad measurement")
    if kind == "assert":
        assert value == 1
    if kind == "sleep":
        time.sleep(value)
    return value * 2 if kind == "double" else os.getpid()


def spec(mode: str = "", **params: Any) -> EngineSpec:
    return EngineSpec(engine=FAKE, model="unused", params={"mode": mode, **params})


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return all(dead(int(p)) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[IsolatedEngine]:
    e = IsolatedEngine(FAKE, log_path=tmp_path / "fake.log", start_timeout_s=30, call_timeout_s=30)
    yield e
    e.kill()


def test_round_trip_and_fd_level_log(engine: IsolatedEngine) -> None:
    info = engine.start(spec())
    assert info.engine == "fake" and info.extra["pid"] == engine.pid != os.getpid()
    out = engine.generate([[5, 6, 7], [8, 9]], 2, 1)
    assert [g.token_ids for g in out] == [(5, 6), (8, 9)]
    assert out[0].logprobs == ({5: -1.0}, {6: -1.0})
    assert engine.embed([[1, 2, 3]]) == [[3.0, 0.0]]
    text = engine.log_path.read_text()
    assert "fake engine starting" in text
    assert "C-level log line from the fake engine" in text
    pid = engine.pid
    engine.shutdown()
    assert "fake engine shutting down" in engine.log_path.read_text()
    assert _group_gone(pid)
    with pytest.raises(EngineFailed, match="not running"):
        engine.generate([[1]], 1, 1)


def test_hang_in_start_is_killed_with_its_process_group(tmp_path: Path) -> None:
    # the timeout covers the child's start too: 10 s leave a loaded machine room to reach the engine's hang
    engine = IsolatedEngine(FAKE, log_path=tmp_path / "hang.log", start_timeout_s=10)
    began = time.monotonic()
    with pytest.raises(EngineFailed) as failure:
        engine.start(spec("hang_start"))
    assert time.monotonic() - began < 60, "the hung start was not stopped at its timeout"
    assert failure.value.message == "engine hung in start() after 10 s"
    assert "fake engine starting in mode 'hang_start'" in failure.value.log_tail
    grandchild = int(failure.value.log_tail.split("grandchild pid ")[1].split()[0])
    deadline = time.monotonic() + 60  # polled: ends as soon as it is dead
    while not dead(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dead(grandchild), "the engine's own subprocess outlived the kill"
    assert _group_gone(engine.pid)


def test_hang_in_a_call(engine: IsolatedEngine) -> None:
    engine.call_timeout_s = 1.0
    engine.start(spec("hang_generate"))
    with pytest.raises(EngineFailed, match=r"^engine hung in generate\(\) after 1 s$") as failure:
        engine.generate([[1, 2]], 1, 1)
    assert "about to hang in generate" in failure.value.log_tail
    assert len(failure.value.log_tail.splitlines()) <= 40
    with pytest.raises(EngineFailed, match="not running"):
        engine.generate([[1, 2]], 1, 1)


def test_segfault_names_the_signal(engine: IsolatedEngine) -> None:
    engine.start(spec("segv_generate"))
    with pytest.raises(EngineFailed) as failure:
        engine.generate([[1, 2]], 1, 1)
    assert failure.value.message.startswith("engine process died: SIGSEGV")
    assert "generate()" in failure.value.message
    assert "about to segfault" in failure.value.log_tail
    assert "Segmentation fault" in failure.value.log_tail  # faulthandler wrote the Python stack to the log


def test_segfault_at_start(engine: IsolatedEngine) -> None:
    with pytest.raises(EngineFailed, match=r"engine process died: SIGSEGV during start\(\)"):
        engine.start(spec("segv_start"))


def test_exit_status_is_reported(engine: IsolatedEngine) -> None:
    engine.start(spec("exit_generate"))
    with pytest.raises(EngineFailed, match=r"engine process exited with status 3 during generate\(\)"):
        engine.generate([[1]], 1, 1)


def test_unavailable_and_unsupported_cross_the_process_boundary(engine: IsolatedEngine, tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable, match="needs a GPU it does not have") as skip:
        engine.start(spec("unavailable"))
    assert not isinstance(skip.value, EngineFailed)
    other = IsolatedEngine(FAKE, log_path=tmp_path / "u.log")
    try:
        other.start(spec("no_embed"))
        with pytest.raises(Unsupported) as unsupported:
            other.embed([[1]])
        assert isinstance(unsupported.value, NotImplementedError)
        assert isinstance(unsupported.value, EngineUnavailable)
        assert other.generate([[4]], 1, 1)[0].token_ids == (4,)  # still alive
    finally:
        other.shutdown()


def test_errors_in_the_child_become_one_line(engine: IsolatedEngine, tmp_path: Path) -> None:
    with pytest.raises(EngineFailed) as failure:
        engine.start(spec("raise_start"))
    assert failure.value.message == "start() raised RuntimeError: boom in start"
    assert "Traceback" in failure.value.log_tail  # the traceback went to the log, not to the user
    failed = IsolatedEngine(FAKE, log_path=tmp_path / "f.log")
    with pytest.raises(EngineFailed, match="^fake engine refused to start$") as refused:
        failed.start(spec("fail_start"))
    assert "fake tail" in refused.value.log_tail


def test_env_reaches_the_child_only(engine: IsolatedEngine) -> None:
    info = engine.start(spec(env={"FAKE_ENV": "42"}))
    assert info.extra["env"] == "42"
    assert "FAKE_ENV" not in os.environ


def test_bad_factory_path_fails_cleanly(tmp_path: Path) -> None:
    engine = IsolatedEngine(f"{__name__}:NoSuchEngine", log_path=tmp_path / "x.log")
    with pytest.raises(EngineFailed, match="cannot import engine factory"):
        engine.start(spec())


def test_pool_reuses_one_engine_per_spec(tmp_path: Path) -> None:
    with EnginePool(tmp_path, start_timeout_s=30, call_timeout_s=30) as pool:
        first, info = pool.get(spec("a"))
        again, info_again = pool.get(spec("a"))
        assert again is first and info_again == info
        assert isinstance(first, IsolatedEngine)
        other, _ = pool.get(spec("b"))
        assert other is not first
        assert pool.log_path(spec("a")) != pool.log_path(spec("b"))
        pids = [first.pid, other.pid]
    assert all(_group_gone(p) for p in pids if p is not None)


def test_pool_remembers_a_failed_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[IsolatedEngine] = []

    class Counting(IsolatedEngine):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            created.append(self)

    monkeypatch.setattr(pool_module, "IsolatedEngine", Counting)
    pool = EnginePool(tmp_path)
    for _ in range(3):
        with pytest.raises(EngineFailed, match="refused to start") as failure:
            pool.get(spec("fail_start"))
        assert "fake tail" in failure.value.log_tail
    for _ in range(2):
        with pytest.raises(EngineUnavailable, match="GPU it does not have"):
            pool.get(spec("unavailable"))
    assert len(created) == 2
    assert pool.failure(spec("fail_start")) == "fake engine refused to start"
    pool.close_all()


def test_pool_in_process_and_start_timeout_param(tmp_path: Path) -> None:
    pool = EnginePool(tmp_path, start_timeout_s=30, call_timeout_s=30)
    engine, info = pool.get(spec(), isolated=False)
    assert not isinstance(engine, IsolatedEngine)
    assert info.extra["pid"] == os.getpid()
    with pytest.raises(EngineFailed, match="^start\\(\\) raised RuntimeError: boom in start$"):
        pool.get(spec("raise_start"), isolated=False)
    with pytest.raises(EngineFailed, match="hung in start\\(\\) after 1 s"):
        pool.get(spec("hang_start", start_timeout_s=1))
    pool.close_all()


def test_pool_max_live_stops_the_oldest(tmp_path: Path) -> None:
    pool = EnginePool(tmp_path, max_live=1)
    first, _ = pool.get(spec("a"))
    pid = first.pid
    second, _ = pool.get(spec("b"))
    assert pid is not None and _group_gone(pid)
    assert second.generate([[3]], 1, 1)[0].token_ids == (3,)
    pool.close_all()


class Admission:
    """What a shared GPU asks of the pool: a reservation before each start, given back after each shutdown, and
    every start and shutdown inside `quiet`."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.quiet_depth = 0

    def admit(self, spec: EngineSpec, make_room: Any) -> Any:
        mode = spec.params["mode"]
        while mode == "big" and make_room():  # "big" needs every idle engine gone
            self.events.append("made room")
        self.events.append(f"reserved {mode}")
        return lambda: self.events.append(f"released {mode}")

    def first_start(self, spec: EngineSpec) -> Any:
        return contextlib.nullcontext()  # compiles nothing: waits for no other worker's first start

    @contextlib.contextmanager
    def quiet(self, what: str, alone: bool = True) -> Iterator[None]:
        self.events.append(f"{what} alone" if alone else what)
        self.quiet_depth += 1
        try:
            yield
        finally:
            self.quiet_depth -= 1


def test_pool_reserves_before_each_start_and_gives_back_after_each_shutdown(tmp_path: Path) -> None:
    admission = Admission()
    pool = EnginePool(tmp_path, start_timeout_s=30, call_timeout_s=30, admission=admission)
    pool.get(spec("a"), isolated=False)
    pool.get(spec("b"), isolated=False)
    with pytest.raises(EngineFailed):
        pool.get(spec("raise_start"), isolated=False)
    pool.begin_cell()
    pool.get(spec("b"), isolated=False)  # the new cell uses b: a is idle, b is not
    pool.get(spec("big"), isolated=False)
    started = f"starting {FAKE} alone"  # an engine of unknown memory starts on a quiet GPU; stops need none
    assert admission.events == [
        "reserved a", started, "reserved b", started,
        "reserved raise_start", started, "released raise_start",  # a failed start gives it back
        "stopping fake", "released a", "made room", "reserved big", started,
    ]
    assert not pool.make_room()  # b and big are the cell's
    pool.close_all()
    assert admission.events[-4:] == ["stopping fake", "released big", "stopping fake", "released b"]
    assert admission.quiet_depth == 0


def test_pool_decides_isolation_by_engine_name(tmp_path: Path) -> None:
    pool = EnginePool(tmp_path)
    assert pool._isolated(EngineSpec("hf", "m"), None) is False
    assert pool._isolated(EngineSpec("vllm", "m"), None) is True
    assert pool._isolated(EngineSpec("trtllm", "m"), None) is True
    assert pool._isolated(EngineSpec("vllm", "m", {"isolated": False}), None) is False
    assert pool._isolated(EngineSpec("hf", "m"), True) is True


def test_run_in_child(tmp_path: Path) -> None:
    log = tmp_path / "fn.log"
    assert run_in_child(measure, "double", value=21, log_path=log) == 42
    assert run_in_child(measure, "pid", log_path=log) != os.getpid()
    assert "measuring pid" in log.read_text()
    # the timeout covers the child's start too (a new interpreter, the imports): 10 s leave a loaded machine room
    with pytest.raises(EngineFailed, match=r"^engine hung in measure\(\) after 10 s$") as hang:
        run_in_child(measure, "hang", timeout_s=10, log_path=log)
    assert "measuring hang" in hang.value.log_tail
    with pytest.raises(EngineFailed, match=r"^engine process died: SIGSEGV during measure\(\)$"):
        run_in_child(measure, "segv", log_path=log)
    with pytest.raises(EngineUnavailable, match="no GPU for this measurement"):
        run_in_child(measure, "skip", log_path=log)
    with pytest.raises(EngineFailed, match=r"^measure\(\) raised ValueError: bad measurement$"):
        run_in_child(measure, "error", log_path=log)


def test_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "l.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert log_tail(log, 3) == "line 97\nline 98\nline 99"
    assert log_tail(log).splitlines()[0] == "line 60"
    assert log_tail(tmp_path / "missing.log") == ""
    assert log_tail(None) == ""


# ---------------------------------------------------------------------------------------------------------------
# What may be killed: only groups we started, known in memory, checked against their leader's start time


def _decoy_group() -> subprocess.Popen[bytes]:
    """A process group that is not the run's: what another local user would like a root CI run to kill."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


def test_only_groups_with_their_leaders_start_time_are_ours() -> None:
    decoy = _decoy_group()
    try:
        group = process_group(decoy.pid)
        assert group.start is not None and is_ours(group)
        assert not is_ours(ProcessGroup(decoy.pid, group.start + 1))  # the pid now names another process
        assert not is_ours(ProcessGroup(1, None)) and not is_ours(ProcessGroup(decoy.pid, None))
    finally:
        decoy.kill()
        decoy.wait()


def test_state_lives_in_a_private_directory(tmp_path: Path) -> None:
    from pytest_gpucompat.engines.processes import _check_private

    private = state_dir()
    info = os.lstat(private)
    assert info.st_uid == os.geteuid() and info.st_mode & 0o777 == 0o700
    assert IsolatedEngine(FAKE).log_path.parent == private  # no more logs (or state) loose in a shared /tmp
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(PermissionError, match="not a private directory"):
        _check_private(shared)
    (tmp_path / "link").symlink_to(private)
    with pytest.raises(PermissionError):
        _check_private(tmp_path / "link")


def test_logs_are_removed_at_exit_unless_their_engine_failed(tmp_path: Path) -> None:
    script = f"""
import sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_isolation import measure
from pytest_gpucompat.catalog.base import EngineFailed
from pytest_gpucompat.engines.isolation import IsolatedEngine, run_in_child
from pytest_gpucompat.engines.processes import state_dir
print(state_dir())
ok = IsolatedEngine("hf")
print(ok.log_path)
run_in_child(measure, "double", value=1)
try:
    run_in_child(measure, "error")
except EngineFailed as exc:
    print(exc.log_path)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    private, unused_log, failed_log = (Path(line) for line in out.stdout.split())
    assert failed_log.parent == private and "bad measurement" in failed_log.read_text()
    assert sorted(p.name for p in private.iterdir()) == [failed_log.name]
    assert not unused_log.exists()
    failed_log.unlink()
    private.rmdir()


# ---------------------------------------------------------------------------------------------------------------
# Saying what happens: start announcements and heartbeats


def test_announcements_and_heartbeats(tmp_path: Path) -> None:
    said: list[str] = []
    log = tmp_path / "m.log"
    run_in_child(measure, "sleep", value=2, log_path=log, timeout_s=30, progress=said.append, heartbeat_s=0.3)
    assert said[0] == f"running measure() in a child process (timeout 30 s), log: {log}"
    assert len(said) >= 3 and all(s.startswith("still running measure() (") for s in said[1:])
    assert said[1].endswith(f"of 30 s), log: {log}")
    said.clear()
    with EnginePool(tmp_path, start_timeout_s=30, progress=said.append) as pool:
        pool.get(spec("a"))
    assert said == [f"starting {FAKE} on unused {{mode='a'}} (timeout 30 s), log: {pool.log_path(spec('a'))}"]


# ---------------------------------------------------------------------------------------------------------------
# The reason of a failure: the engine's own last error


UVICORN = """\
INFO 01-02 03:04:05 [__init__.py:239] Automatically detected platform cuda.
Traceback (most recent call last):
  File "/usr/bin/vllm", line 5, in <module>
    from vllm.entrypoints.cli.main import main
  File "/opt/venv/lib/python3.12/site-packages/vllm/entrypoints/openai/api_server.py", line 20, in <module>
    import uvicorn
ModuleNotFoundError: No module named 'uvicorn'"""

VLLM_ROOT_CAUSE_ABOVE = """\
(EngineCore_DP0 pid=4242) ERROR 01-02 03:04:05 [core.py:708] EngineCore failed to start.
(EngineCore_DP0 pid=4242) ERROR 01-02 03:04:05 [core.py:708] Traceback (most recent call last):
(EngineCore_DP0 pid=4242) ERROR 01-02 03:04:05 [core.py:708]   File "/x/vllm/v1/engine/core.py", line 699, in run
(EngineCore_DP0 pid=4242) ERROR 01-02 03:04:05 [core.py:708]     engine_core = EngineCoreProc(*args, **kwargs)
(EngineCore_DP0 pid=4242) ERROR 01-02 03:04:05 [core.py:708] torch.OutOfMemoryError: CUDA out of memory. \
Tried to allocate 2.00 GiB.
Traceback (most recent call last):
  File "/usr/bin/vllm", line 8, in <module>
    sys.exit(main())
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"""

BARE_ASSERT = """\
[2025-01-02 03:04:05 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/x/site-packages/sglang/srt/managers/scheduler.py", line 2150, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)
  File "/x/site-packages/sglang/srt/model_executor/model_runner.py", line 312, in init_torch_distributed
    assert self.total_gpu_memory > min_per_gpu_memory
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
AssertionError"""

SEGFAULT = """\
about to segfault
Fatal Python error: Segmentation fault

Current thread 0x00007f0000000000 (most recent call first):
  File "/tmp/t.py", line 12 in generate"""


@pytest.mark.parametrize(("tail", "expected"), [
    (UVICORN, "ModuleNotFoundError: No module named 'uvicorn'"),
    (VLLM_ROOT_CAUSE_ABOVE, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."),
    (BARE_ASSERT, "AssertionError at sglang/srt/model_executor/model_runner.py:312: "
                  "assert self.total_gpu_memory > min_per_gpu_memory"),
    (SEGFAULT, None),
    ("fake server: cannot load the model\nINFO:     Waiting for application startup.", None),
    ("", None),
])
def test_last_error(tail: str, expected: str | None) -> None:
    assert last_error(tail) == expected


def test_failure_reason_puts_the_engines_error_first() -> None:
    assert failure_reason("server exited with status 1 during start-up", UVICORN) == (
        "ModuleNotFoundError: No module named 'uvicorn' (server exited with status 1 during start-up)")
    assert failure_reason("server died: SIGKILL", "no error here") == "server died: SIGKILL"
    assert exit_status(-11) == "engine process died: SIGSEGV"
    assert exit_status(1, "server") == "server exited with status 1"
    assert exit_status(None, "server") == "server stopped answering"


def test_a_bare_assertion_in_the_child_names_its_line(tmp_path: Path) -> None:
    with pytest.raises(EngineFailed) as failure:
        run_in_child(measure, "assert", value=2, log_path=tmp_path / "a.log")
    assert re.fullmatch(r"measure\(\) raised AssertionError at .*test_isolation\.py:\d+: assert value == 1",
                        failure.value.message), failure.value.message
    assert failure.value.log_path == str(tmp_path / "a.log")


@pytest.mark.parametrize("text", ["nan", "inf", "0", "-5", "abc", ""])
def test_timeouts_must_be_positive_seconds(text: str) -> None:
    with pytest.raises(ValueError, match=f"^must be a positive number of seconds, got '{text}'$"):
        positive_seconds(text)
    assert positive_seconds("2.5") == 2.5
