"""Isolation mechanics with real child processes: hangs, crashes, skips and reuse.

The engines here are tiny fakes (this module's FakeEngine, loaded in the child by import path) because what is
tested is the isolation, not an engine: a real hang, a real SIGSEGV, real fd-level output, a real process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from _procs import dead

from pytest_gpucompat.engines import Unsupported
from pytest_gpucompat.engines import isolation as iso
from pytest_gpucompat.engines.base import EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo
from pytest_gpucompat.engines.isolation import EnginePool, IsolatedEngine, log_tail, run_in_child

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
    sample = engine.memory_sample(None)
    assert sample.pid == engine.pid and sample.host_rss_mib > 0
    text = engine.log_path.read_text()
    assert "fake engine starting" in text
    assert "C-level log line from the fake engine" in text
    pid = engine.pid
    engine.shutdown()
    assert "fake engine shutting down" in engine.log_path.read_text()
    assert _group_gone(pid)
    with pytest.raises(EngineFailed, match="not running"):
        engine.generate([[1]], 1, 1)


def test_start_stop_cycles_in_one_child(engine: IsolatedEngine) -> None:
    engine.start(spec())
    pid = engine.pid
    engine.stop_engine()
    assert engine.memory_sample(None).pid == pid
    with pytest.raises(EngineFailed, match="not started"):
        engine.generate([[1]], 1, 1)
    engine.start(spec())
    assert engine.pid == pid
    assert engine.generate([[2]], 1, 1)[0].token_ids == (2,)
    with pytest.raises(EngineFailed, match="already started"):
        engine.start(spec())
    assert engine.log_path.read_text().count("fake engine shutting down") == 1


def test_hang_in_start_is_killed_with_its_process_group(tmp_path: Path) -> None:
    engine = IsolatedEngine(FAKE, log_path=tmp_path / "hang.log", start_timeout_s=2.5)
    began = time.monotonic()
    with pytest.raises(EngineFailed) as failure:
        engine.start(spec("hang_start"))
    assert time.monotonic() - began < 15
    assert failure.value.message == "engine hung in start() after 2.5 s"
    assert "fake engine starting in mode 'hang_start'" in failure.value.log_tail
    grandchild = int(failure.value.log_tail.split("grandchild pid ")[1].split()[0])
    deadline = time.monotonic() + 5
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

    monkeypatch.setattr(iso, "IsolatedEngine", Counting)
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
    with pytest.raises(EngineFailed, match=r"^engine hung in measure\(\) after 1 s$") as hang:
        run_in_child(measure, "hang", timeout_s=1, log_path=log)
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
