"""The OpenAI-compatible client against a small real HTTP server (http.server) run as a separate process.

The server imitates the completions answer shapes of vLLM (token_id:<id> keys, token_ids) and SGLang (decoded
text keys); what is tested is this package's client: requests, parsing, process-group handling, failure reports.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _procs import wait_dead

from pytest_gpucompat.catalog.base import EngineFailed, EngineSpec, EngineUnavailable
from pytest_gpucompat.engines.isolation import IsolatedEngine
from pytest_gpucompat.engines.openai import OpenAIEngine, cli_flags, free_port
from pytest_gpucompat.workload.models import tiny_vocab

pytest.importorskip("requests")

SERVER = r'''
import json, os, signal, subprocess, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = dict(a.split("=", 1) for a in sys.argv[1:])
PORT = int(args["port"])
MODE = args.get("mode", "vllm")
READY_AFTER = time.monotonic() + float(args.get("ready_after", "0"))
BODIES = args.get("bodies")
WORDS = {}
if args.get("vocab"):
    WORDS = {int(v): k for k, v in json.load(open(args["vocab"])).items()}
print(f"fake server pid {os.getpid()} port {PORT} mode {MODE}", flush=True)
if MODE == "exit_at_start":
    print("fake server: cannot load the model", flush=True)
    sys.exit(2)
if MODE == "import_error":
    import gpucompat_no_such_server_module  # noqa: F401
if args.get("grandchild"):
    g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    print(f"fake server grandchild {g.pid}", flush=True)


def key(t):
    return WORDS[t] if MODE == "text" else f"token_id:{t}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *a):
        print("fake server: " + fmt % a, flush=True)

    def send(self, code, payload):
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if MODE == "never_ready" or time.monotonic() < READY_AFTER:
            return self.send(503, {"error": "loading"})
        if self.path == "/v1/models":
            return self.send(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})
        if self.path == "/version":
            return self.send(200, {"version": "fake-1.0"})
        self.send(404, {"error": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if BODIES:
            with open(BODIES, "a") as fh:
                fh.write(json.dumps(body) + "\n")
        if MODE == "die":
            print("fake server got a request, dying", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if MODE == "error500":
            return self.send(500, {"error": "CUDA error: an illegal memory access was encountered"})
        if self.path == "/v1/embeddings":
            n = len(body["input"])
            return self.send(200, {"data": [{"index": 0, "embedding": [3.0 * n, 4.0 * n]}]})
        prompt, n, k = body["prompt"], body["max_tokens"], body["logprobs"]
        ids = [4 + (sum(prompt) + 7 * i) % 500 for i in range(n)]
        tops = [{key(t): -0.25, **{key(4 + (t + j) % 500): -1.0 - j for j in range(1, k)}} for t in ids]
        choice = {"index": 0, "text": "", "finish_reason": "length",
                  "logprobs": {"tokens": [key(t) for t in ids], "token_logprobs": [-0.25] * n,
                               "top_logprobs": tops, "text_offset": [0] * n}}
        if body.get("return_token_ids"):
            choice["token_ids"] = ids
        self.send(200, {"id": "cmpl-1", "object": "text_completion", "model": "tiny", "choices": [choice]})


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
'''


def expected_ids(prompt: list[int], n: int) -> tuple[int, ...]:
    return tuple(4 + (sum(prompt) + 7 * i) % 500 for i in range(n))


@pytest.fixture
def server_script(tmp_path: Path) -> Path:
    path = tmp_path / "fake_openai_server.py"
    path.write_text(SERVER)
    return path


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """A model directory with only the tiny tokenizer (the client maps text keys back to ids through it)."""
    from pytest_gpucompat.workload import models

    pytest.importorskip("tokenizers")
    d = tmp_path / "model"
    d.mkdir()
    models._write_tokenizer(d, models.tiny_config("qwen2"))
    return d


def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"fake server did not listen on {port}")


@pytest.fixture
def run_server(server_script: Path, tmp_path: Path) -> Iterator:
    procs: list[subprocess.Popen[bytes]] = []

    def start(**args: str) -> tuple[int, Path]:
        port = free_port()
        bodies = tmp_path / f"bodies-{port}.jsonl"
        argv = [sys.executable, str(server_script), f"port={port}", f"bodies={bodies}"]
        argv += [f"{k}={v}" for k, v in args.items()]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_port(port)
        return port, bodies

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _bodies(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_endpoint_with_vllm_token_ids(run_server, model_dir: Path) -> None:
    port, bodies = run_server(mode="vllm")
    engine = OpenAIEngine()
    info = engine.start(EngineSpec("openai", str(model_dir), {"endpoint": f"http://127.0.0.1:{port}/v1",
                                                             "flavor": "vllm"}))
    try:
        assert info.engine == "openai" and info.version == "fake-1.0" and info.device == "remote"
        assert info.extra["served_model"] == "tiny"
        prompts = [[5, 6, 7], [100, 200]]
        out = engine.generate(prompts, 4, 3)
        assert [g.token_ids for g in out] == [expected_ids(p, 4) for p in prompts]
        for g in out:
            assert len(g.logprobs) == 4
            for token, top in zip(g.token_ids, g.logprobs):
                assert top[token] == -0.25 and len(top) == 3
                assert all(isinstance(t, int) for t in top)
        body = _bodies(bodies)[0]
        assert body["prompt"] == [5, 6, 7] and body["model"] == "tiny"
        assert body["temperature"] == 0.0 and body["logprobs"] == 3 and body["max_tokens"] == 4
        assert body["return_tokens_as_token_ids"] is True and body["ignore_eos"] is True
        assert engine.embed([[1, 2]]) == [[0.6, 0.8]]  # normalized
    finally:
        engine.shutdown()


def test_text_keys_are_mapped_through_the_tokenizer(run_server, model_dir: Path, tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps(tiny_vocab(512)))
    port, bodies = run_server(mode="text", vocab=str(vocab))
    engine = OpenAIEngine()
    engine.start(EngineSpec("openai", str(model_dir), {"endpoint": f"http://127.0.0.1:{port}",
                                                      "flavor": "sglang"}))
    try:
        (gen,) = engine.generate([[9, 10, 11]], 5, 4)
        assert gen.token_ids == expected_ids([9, 10, 11], 5)
        assert all(len(top) == 4 and top[t] == -0.25 for t, top in zip(gen.token_ids, gen.logprobs))
        body = _bodies(bodies)[0]
        assert body["ignore_eos"] is True and "return_tokens_as_token_ids" not in body
    finally:
        engine.shutdown()


def test_text_keys_without_a_tokenizer_fail_clearly(run_server, tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps(tiny_vocab(512)))
    port, _ = run_server(mode="text", vocab=str(vocab))
    engine = OpenAIEngine()
    engine.start(EngineSpec("openai", str(tmp_path / "no-model"), {"endpoint": f"http://127.0.0.1:{port}"}))
    try:
        with pytest.raises(EngineFailed, match="cannot map returned token text"):
            engine.generate([[9, 10, 11]], 2, 2)
    finally:
        engine.shutdown()


def test_plain_flavor_sends_only_standard_fields(run_server, model_dir: Path) -> None:
    port, bodies = run_server(mode="vllm")
    engine = OpenAIEngine()
    engine.start(EngineSpec("openai", str(model_dir), {"endpoint": f"http://127.0.0.1:{port}",
                                                      "extra_body": {"seed": 7}}))
    try:
        engine.generate([[1, 2, 3]], 2, 2)
    finally:
        engine.shutdown()
    body = _bodies(bodies)[0]
    assert set(body) == {"model", "prompt", "max_tokens", "temperature", "logprobs", "stream", "seed"}


def test_http_error_is_a_failed_call(run_server, model_dir: Path) -> None:
    port, _ = run_server(mode="error500")
    engine = OpenAIEngine()
    engine.start(EngineSpec("openai", str(model_dir), {"endpoint": f"http://127.0.0.1:{port}"}))
    try:
        with pytest.raises(EngineFailed, match="answered HTTP 500: .*illegal memory access"):
            engine.generate([[1, 2]], 2, 2)
    finally:
        engine.shutdown()


def test_refused_endpoint_fails_within_seconds(model_dir: Path) -> None:
    """Nothing listens there: say so at once, not after the whole start-up timeout (which would end in "not ready
    after 600 s"; the wall-clock bound is only a guard, long enough for a loaded machine)."""
    began = time.monotonic()
    with pytest.raises(EngineFailed, match=r"^connection refused: http://127.0.0.1:9$"):
        OpenAIEngine().start(EngineSpec("openai", str(model_dir), {"endpoint": "http://127.0.0.1:9/v1"}))
    assert time.monotonic() - began < 120


def test_endpoint_that_never_gets_ready_times_out(run_server, model_dir: Path) -> None:
    port, _ = run_server(mode="never_ready")
    with pytest.raises(EngineFailed, match=rf"^endpoint http://127.0.0.1:{port} not ready after 1 s \(HTTP 503\)$"):
        OpenAIEngine().start(EngineSpec("openai", str(model_dir), {"endpoint": f"http://127.0.0.1:{port}",
                                                                  "startup_timeout_s": 1}))


def _launch_params(script: Path, **args: str) -> dict:
    extra = " ".join(f"{k}={v}" for k, v in args.items())
    return {"server_command": f"{{python}} {script} port={{port}} {extra}", "flavor": "vllm",
            "startup_timeout_s": 30}


def test_launched_server_lifecycle(server_script: Path, model_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    params = _launch_params(server_script, ready_after="1", grandchild="1")
    engine = OpenAIEngine()
    info = engine.start(EngineSpec("openai", str(model_dir), {**params, "log_path": str(log)}))
    try:
        assert info.device == "local" and info.extra["server"] == "command"
        port = int(info.extra["endpoint"].rsplit(":", 1)[1])
        (gen,) = engine.generate([[1, 2, 3]], 3, 2)
        assert gen.token_ids == expected_ids([1, 2, 3], 3)
        text = log.read_text()
        assert "fake server pid" in text and "POST /v1/completions" in text
        server_pid = int(text.split("fake server pid ")[1].split()[0])
        grandchild = int(text.split("fake server grandchild ")[1].split()[0])
    finally:
        engine.shutdown()
    assert wait_dead(server_pid) and wait_dead(grandchild)
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0  # port freed


def test_server_dying_mid_request_fails_with_its_log(server_script: Path, model_dir: Path) -> None:
    engine = OpenAIEngine()
    engine.start(EngineSpec("openai", str(model_dir), _launch_params(server_script, mode="die")))
    try:
        with pytest.raises(EngineFailed, match="^server died: SIGKILL$") as failure:
            engine.generate([[1, 2]], 2, 2)
        assert "fake server got a request, dying" in failure.value.log_tail
        with pytest.raises(EngineFailed, match="server died: SIGKILL"):
            engine.generate([[1, 2]], 2, 2)
    finally:
        engine.shutdown()


def test_server_exiting_at_start_up(server_script: Path, model_dir: Path) -> None:
    engine = OpenAIEngine()
    with pytest.raises(EngineFailed, match="^server exited with status 2 during start-up$") as failure:
        engine.start(EngineSpec("openai", str(model_dir), _launch_params(server_script, mode="exit_at_start")))
    assert "cannot load the model" in failure.value.log_tail
    engine.shutdown()


def test_server_failure_reason_is_its_own_last_error(server_script: Path, model_dir: Path) -> None:
    engine = OpenAIEngine()
    with pytest.raises(EngineFailed) as failure:
        engine.start(EngineSpec("openai", str(model_dir), _launch_params(server_script, mode="import_error")))
    assert failure.value.message == ("ModuleNotFoundError: No module named 'gpucompat_no_such_server_module' "
                                     "(server exited with status 1 during start-up)")
    assert failure.value.log_path and "Traceback" in Path(failure.value.log_path).read_text()
    engine.shutdown()


PARENT_OF_A_SERVER = """
import sys, time
from pytest_gpucompat.catalog.base import EngineSpec
from pytest_gpucompat.engines.isolation import IsolatedEngine
from pytest_gpucompat.engines.openai import OpenAIEngine

params = {params!r}
if {isolated!r}:
    engine = IsolatedEngine("openai", log_path={log!r}, start_timeout_s=60)
else:
    params["log_path"] = {log!r} + ".command-server.log"
    engine = OpenAIEngine()
engine.start(EngineSpec("openai", {model!r}, params))
print("started", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("isolated", [True, False], ids=["in-isolated-child", "in-this-process"])
def test_server_dies_with_whoever_started_it_even_on_sigkill(server_script: Path, model_dir: Path, tmp_path: Path,
                                                             isolated: bool) -> None:
    """SIGKILL of the process that started the server (pytest, an xdist worker or an isolated child): the server
    goes too (PR_SET_PDEATHSIG); from an isolated child, the child's watchdog also kills the server's group."""
    log = str(tmp_path / "parent.log")
    code = PARENT_OF_A_SERVER.format(params=_launch_params(server_script, grandchild="1"), isolated=isolated,
                                     log=log, model=str(model_dir))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline() == b"started\n"
        text = Path(log + ".command-server.log").read_text()
        server = int(text.split("fake server pid ")[1].split()[0])
        grandchild = int(text.split("fake server grandchild ")[1].split()[0])
    finally:
        parent.kill()
        parent.wait()
    assert wait_dead(server)
    if isolated:
        assert wait_dead(grandchild)  # the server's whole group
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(grandchild, 9)  # only the server itself has the parent-death signal


def test_server_never_ready_is_killed(server_script: Path, model_dir: Path) -> None:
    engine = OpenAIEngine()
    params = {**_launch_params(server_script, mode="never_ready"), "startup_timeout_s": 1.5}
    with pytest.raises(EngineFailed, match="^server not ready after 1.5 s") as failure:
        engine.start(EngineSpec("openai", str(model_dir), params))
    pid = int(failure.value.log_tail.split("fake server pid ")[1].split()[0])
    assert wait_dead(pid)


def test_isolated_child_kill_takes_the_server_group_along(server_script: Path, model_dir: Path,
                                                          tmp_path: Path) -> None:
    """The server runs in its own session; when the isolated child hangs and is killed, the server goes too."""
    log = tmp_path / "iso.log"
    # the timeout covers the child's and the server's start: 10 s leave a loaded machine room to reach the hang
    engine = IsolatedEngine("openai", log_path=log, start_timeout_s=10)
    params = {**_launch_params(server_script, mode="never_ready"), "startup_timeout_s": 120}
    with pytest.raises(EngineFailed, match=r"engine hung in start\(\) after 10 s"):
        engine.start(EngineSpec("openai", str(model_dir), params))
    server_log = Path(str(log) + ".command-server.log")
    pid = int(server_log.read_text().split("fake server pid ")[1].split()[0])
    assert wait_dead(pid)


def test_missing_server_package_is_unavailable(model_dir: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("sglang is installed here")
    with pytest.raises(EngineUnavailable, match="No module named 'sglang'"):
        OpenAIEngine().start(EngineSpec("openai", str(model_dir), {"server": "sglang"}))


def test_cli_flags() -> None:
    assert cli_flags({"max_model_len": 512, "enforce_eager": True, "trust_remote_code": False,
                      "pooler_config": {"pooling_type": "MEAN"}}, "dash") == [
        "--max-model-len", "512", "--enforce-eager", "--pooler-config", '{"pooling_type": "MEAN"}'
    ]
    assert cli_flags({"max_seq_len": 512, "tp_size": 1}, "underscore") == ["--max_seq_len", "512", "--tp_size", "1"]


def test_unknown_server_or_flavor(model_dir: Path) -> None:
    with pytest.raises(EngineFailed, match="unknown server 'tgi'"):
        OpenAIEngine().start(EngineSpec("openai", str(model_dir), {"server": "tgi"}))
    with pytest.raises(EngineFailed, match="unknown flavor 'tgi'"):
        OpenAIEngine().start(EngineSpec("openai", str(model_dir), {"endpoint": "http://x", "flavor": "tgi"}))
    assert os.environ.get("GPUCOMPAT_PGID_FILE") is None
