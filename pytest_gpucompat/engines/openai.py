"""OpenAI-compatible HTTP servers, through `requests`: a given endpoint, or a server started here.

Servers it can start on 127.0.0.1 and a free port, each in its own process group (start_new_session=True) that dies
with whoever started it (PR_SET_PDEATHSIG; inside an isolated child the group is registered with the child), output
to a log file, readiness polled on GET /v1/models, killed with its group at shutdown (SIGTERM, then SIGKILL) by
isolation's one group killer. A given endpoint that refuses connections fails at once ("connection refused: URL"):
- vllm:         `vllm serve DIR --host H --port P ...` (vllm/entrypoints/cli/serve.py; EngineArgs fields as
                `--dashed-flags`, booleans as BooleanOptionalAction);
- sglang:       `python -m sglang.launch_server --model-path DIR --host H --port P ...` (ServerArgs fields as
                `--dashed-flags`; sglang/launch_server.py);
- tensorrt-llm: `trtllm-serve serve DIR --host H --port P --backend pytorch ...` (click options with underscores,
                tensorrt_llm/commands/serve.py); LLM-API fields without a CLI option go to a YAML file passed with
                `--extra_llm_api_options` (also spelled `--config` in newer releases).
- command:      any other OpenAI-compatible server: `server_command` with {host}, {port}, {model}, {python}.
Generation: POST /v1/completions with `prompt` as a token-id list, temperature 0, `logprobs: N`, one request per
prompt. How ids come back differs per server, so the request carries only what that server accepts:
- vLLM: `return_tokens_as_token_ids` makes every token key "token_id:<id>", `return_token_ids` adds the
  generated ids (vllm/entrypoints/openai/completion/protocol.py); top_logprobs holds up to N+1 entries.
- SGLang: tokens and top_logprobs keys are decoded text (sglang/srt/entrypoints/openai/utils.py
  to_openai_style_logprobs); extra request fields are ignored by its pydantic model.
- TensorRT-LLM: its request model forbids unknown fields (extra="forbid"); `detokenize: false` returns
  `token_ids`; top_logprobs keys are decoded text (serve/postprocess_handlers.py); some releases reject logprobs
  on /v1/completions altogether.
Text keys are mapped back to ids through the model directory's tokenizer.json when each id decodes to a distinct
string (true for the tiny models of pytest_gpucompat.workload.models).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..catalog.base import EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo
from ..catalog.loglines import exception_line
from ..catalog.params import Unsupported, engine_params, engine_version, unit_vector, wants_embeddings
from ..catalog.registry import descriptor, server_names
from ..common.inputs import read_bytes
from .child import register_process_group, side_file
from .deviations import harness_environment
from .failures import engine_failed, exit_status
from .processes import ProcessGroup, append_log, death_signal_preexec, kill_groups, process_group
from .servers import (
    COMMAND,
    cli_flags,
    custom_server_command,
    engine_server_command,
    free_port,
    port_open,
    server_name,
    servers,
)

__all__ = ["OpenAIEngine", "cli_flags", "free_port"]

_OWN_PARAMS = {
    "endpoint", "server", "flavor", "server_args", "startup_timeout_s", "request_timeout_s", "api_key",
    "model_name", "log_path", "extra_body", "host", "server_command",
}
_DEFAULT_SERVER = descriptor("openai").default_server  # type: ignore[union-attr]
"""The server started when the cell names neither one nor a command of its own (the registry's default)."""
ENDPOINT_REFUSED_GRACE_S = 3.0
"""How long a given endpoint may refuse connections before its start fails (a server still binding its port)."""
_TOKEN_ID_KEY = re.compile(r"^token_id:(-?\d+)$")
_LOG_GREP_BYTES = 16 * 1024 * 1024  # what the server says of its settings is at the start of its log
_VLLM_LOG = {
    "dtype": re.compile(r"\bdtype=torch\.(\w+)"),
    "kv_cache_dtype": re.compile(r"\bkv_cache_dtype=([\w.]+)"),
    "attention_backend": re.compile(r"Using (\S+) attention backend"),
}


class OpenAIEngine:
    name = "openai"

    def __init__(self) -> None:
        self._session: Any = None
        self._base = ""
        self._model_name = ""
        self._flavor = "openai"
        self._proc: subprocess.Popen[bytes] | None = None
        self._group: ProcessGroup | None = None
        self._log_path: Path | None = None
        self._host = "127.0.0.1"
        self._port: int | None = None
        self._model_dir: str = ""
        self._reverse_vocab: dict[str, int] | None = None
        self._request_timeout = 300.0
        self._extra_body: dict[str, Any] = {}
        self._embed_mode = False
        self._tmp_files: list[str] = []

    # -- start -------------------------------------------------------------------------------------------------

    def start(self, spec: EngineSpec) -> RunInfo:
        began = time.monotonic()
        try:
            import requests
        except ImportError as exc:
            raise EngineUnavailable(f"openai engine needs requests: {exception_line(exc)}") from None
        params = engine_params(spec.params)
        self._model_dir = spec.model
        self._embed_mode = wants_embeddings(spec.params)
        self._request_timeout = float(params.get("request_timeout_s", 300.0))
        self._extra_body = dict(params.get("extra_body") or {})
        self._session = requests.Session()
        if params.get("api_key"):
            self._session.headers["Authorization"] = f"Bearer {params['api_key']}"
        startup_timeout = float(params.get("startup_timeout_s", 600.0))
        server: str | None = None
        if params.get("endpoint"):
            base = str(params["endpoint"]).rstrip("/")
            self._base = base[: -len("/v1")] if base.endswith("/v1") else base
            self._flavor = _flavor(params.get("flavor", "openai"))
        else:
            default_server = COMMAND if params.get("server_command") else _DEFAULT_SERVER
            asked = str(params.get("server", default_server))
            server = server_name(asked)
            if server is None:
                raise EngineFailed(f"openai: unknown server {asked!r}; known: {', '.join(servers())}")
            self._flavor = _flavor(params.get("flavor", "openai" if server == COMMAND else server))
            self._launch(server, spec, params)
        self._model_name = str(params.get("model_name") or "")
        self._wait_ready(startup_timeout)
        return self._run_info(server, time.monotonic() - began)

    def _launch(self, server: str, spec: EngineSpec, params: Mapping[str, Any]) -> None:
        self._host = str(params.get("host", "127.0.0.1"))
        self._port = free_port(self._host)
        self._base = f"http://{self._host}:{self._port}"
        passthrough = {k: v for k, v in params.items() if k not in _OWN_PARAMS}
        found = descriptor(server) if server != COMMAND else None
        command = found.server if found is not None else None
        settings = {k: d.value for k, d in command.defaults.items()} if command is not None else {}
        settings.update(passthrough)
        if self._embed_mode and command is not None:
            if command.embed_settings is None:
                raise Unsupported(f"openai/{server}: embeddings are not supported by this adapter")
            for key, value in command.embed_settings.items():
                settings.setdefault(key, value)
        if command is None:
            cmd = custom_server_command(params.get("server_command"), spec.model, self._host, self._port)
        else:
            cmd = engine_server_command(server, spec.model, self._host, self._port, settings, self._options_file)
        extra = params.get("server_args")
        if isinstance(extra, Mapping):
            cmd += cli_flags(extra, command.flag_style if command is not None else "dash")
        elif isinstance(extra, (list, tuple)):
            cmd += [str(a) for a in extra]
        elif isinstance(extra, str) and extra.strip():
            cmd += extra.split()
        env = dict(os.environ)
        for key, value in harness_environment(self.name, spec.params, env).items():
            env[key] = value
        self._log_path = Path(params["log_path"]) if params.get("log_path") else side_file(f"{server}-server")
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(append_log(self._log_path), "ab") as log:  # no symlink, FIFO or stranger's file: 0600
            log.write(("[gpucompat] " + " ".join(cmd) + "\n").encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, env=env, preexec_fn=death_signal_preexec(),
                )
            except OSError as exc:
                raise EngineUnavailable(f"openai: cannot run {cmd[0]}: {exception_line(exc)}") from None
        self._group = process_group(self._proc.pid)
        register_process_group(self._proc.pid)
        _STARTED.append(self)

    def _options_file(self) -> Path:
        """A YAML file for the settings a server takes only from a file; removed at shutdown."""
        path = side_file("trtllm-options", ".yaml")
        self._tmp_files.append(str(path))
        return path

    def _wait_ready(self, timeout_s: float) -> None:
        """Poll GET /v1/models until the server answers; a server of ours that exits, or a given endpoint that
        keeps refusing connections for ENDPOINT_REFUSED_GRACE_S, fails the start at once."""
        began = time.monotonic()
        deadline = began + timeout_s
        last_error = "no answer"
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise self._failed(f"{self._exit_reason()} during start-up")
            refused = False
            try:
                resp = self._session.get(f"{self._base}/v1/models", timeout=5)
                if resp.status_code == 200:
                    data = resp.json().get("data") or []
                    if not self._model_name:
                        if not data:
                            raise self._failed("openai: /v1/models lists no model", with_error=False)
                        self._model_name = str(data[0].get("id"))
                    return
                last_error = f"HTTP {resp.status_code}"
            except EngineFailed:
                raise
            except Exception as exc:
                last_error, refused = exception_line(exc), _refused(exc)
            now = time.monotonic()
            if refused and self._proc is None and now - began >= min(ENDPOINT_REFUSED_GRACE_S, timeout_s):
                raise EngineFailed(f"connection refused: {self._base}")
            if now >= deadline:
                failure = self._failed(
                    f"{'server' if self._proc is not None else f'endpoint {self._base}'} not ready after "
                    f"{timeout_s:g} s ({last_error})", with_error=False)
                self._kill_server()
                raise failure
            time.sleep(0.5 if self._proc is not None else 0.2)

    def _run_info(self, server: str | None, start_s: float) -> RunInfo:
        version: str | None = None
        extra: dict[str, Any] = {"endpoint": self._base, "flavor": self._flavor, "served_model": self._model_name}
        if server is not None:
            extra["server"] = server
            extra["server_log"] = str(self._log_path) if self._log_path else None
            version = engine_version(server) if server != COMMAND else None
        info = self._get_json("/version")
        if isinstance(info, Mapping) and info.get("version"):
            version = str(info["version"])
        dtype = kv = backend = None
        if self._flavor == "sglang":
            sinfo = self._get_json("/server_info") or self._get_json("/get_server_info")
            if isinstance(sinfo, Mapping):
                states = sinfo.get("internal_states") or [{}]
                state = states[0] if isinstance(states[0], Mapping) else {}
                dtype = state.get("dtype") or sinfo.get("dtype")
                kv = state.get("kv_cache_dtype") or sinfo.get("kv_cache_dtype")
                backend = state.get("attention_backend") or sinfo.get("attention_backend")
                version = version or sinfo.get("version")
        if self._flavor == "vllm" and self._log_path is not None:
            found = _grep_log(self._log_path)
            dtype, kv, backend = found.get("dtype"), found.get("kv_cache_dtype"), found.get("attention_backend")
        if kv in (None, "auto"):
            extra["kv_cache_dtype_setting"] = kv
            kv = dtype
        if self._embed_mode:
            described = descriptor(server or self._flavor) if (server or self._flavor) in server_names() else None
            extra["pooling"] = (described.server.pooling if described is not None and described.server is not None
                                else None)
        return RunInfo(
            engine=self.name,
            version=version,
            device={None: "remote", "command": "local"}.get(server, "cuda"),
            dtype=str(dtype) if dtype else None,
            kv_cache_dtype=str(kv) if kv else None,
            attention_backend=str(backend) if backend else None,
            start_s=start_s,
            extra=extra,
        )

    # -- calls -------------------------------------------------------------------------------------------------

    def _get_json(self, path: str) -> Any:
        try:
            resp = self._session.get(f"{self._base}{path}", timeout=5)
            return resp.json() if resp.status_code == 200 else None
        except Exception:
            return None

    def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        if self._session is None:
            raise EngineFailed("openai: engine not started")
        if self._proc is not None and self._proc.poll() is not None:
            raise self._failed(self._exit_reason())
        try:
            resp = self._session.post(f"{self._base}{path}", json=dict(body), timeout=self._request_timeout)
        except Exception as exc:
            time.sleep(0.2)
            if self._proc is not None and self._proc.poll() is not None:
                raise self._failed(self._exit_reason()) from None
            raise self._failed(f"openai: {path} failed: {exception_line(exc)}", with_error=False) from None
        if resp.status_code != 200:
            text = resp.text.strip().replace("\n", " ")
            raise self._failed(f"openai: {path} answered HTTP {resp.status_code}: {text[:300]}", with_error=False)
        try:
            return resp.json()
        except ValueError:
            raise EngineFailed(f"openai: {path} answered non-JSON: {resp.text[:200]!r}") from None

    def _request_extras(self) -> dict[str, Any]:
        """What this flavor of server accepts beyond the standard fields (a plain `openai` flavor: nothing)."""
        found = descriptor(self._flavor) if self._flavor in server_names() else None
        return dict(found.server.request_extras) if found is not None and found.server is not None else {}

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        if self._embed_mode:
            raise Unsupported("openai engine was started for embeddings; it cannot generate")
        results: list[Generation] = []
        for prompt in prompts:
            body: dict[str, Any] = {
                "model": self._model_name,
                "prompt": [int(t) for t in prompt],
                "max_tokens": int(max_tokens),
                "temperature": 0.0,
                "logprobs": int(top_n),
                "stream": False,
            }
            body.update(self._request_extras())
            body.update(self._extra_body)
            data = self._post("/v1/completions", body)
            try:
                choice = data["choices"][0]
            except (KeyError, IndexError, TypeError):
                raise EngineFailed(f"openai: completion without choices: {str(data)[:200]}") from None
            results.append(self._parse_choice(choice))
        return results

    def _parse_choice(self, choice: Mapping[str, Any]) -> Generation:
        logprobs = choice.get("logprobs") or {}
        tokens = list(logprobs.get("tokens") or [])
        token_logprobs = list(logprobs.get("token_logprobs") or [])
        tops = list(logprobs.get("top_logprobs") or [])
        ids_raw = choice.get("token_ids")
        if ids_raw is not None:
            ids = [int(t) for t in ids_raw]
        else:
            mapped = [self._token_id(t) for t in tokens]
            missing = [tokens[i] for i, t in enumerate(mapped) if t is None]
            if missing:
                raise EngineFailed(
                    f"openai: cannot map returned token text {missing[0]!r} back to a token id (the server returns "
                    "text, and the model's tokenizer does not decode ids to distinct strings)"
                )
            ids = [int(t) for t in mapped if t is not None]
        if not tokens and not tops and ids:
            raise EngineFailed("openai: the server returned no logprobs (does it support `logprobs` on completions?)")
        steps: list[dict[int, float]] = []
        for i, tid in enumerate(ids):
            step: dict[int, float] = {}
            entry = tops[i] if i < len(tops) else None
            for key, value in (entry or {}).items():
                mapped_id = self._token_id(key)
                if mapped_id is not None and value is not None:
                    step[mapped_id] = float(value)
            if i < len(token_logprobs) and token_logprobs[i] is not None:
                step.setdefault(tid, float(token_logprobs[i]))
            steps.append(step)
        text = choice.get("text")
        return Generation(token_ids=tuple(ids), logprobs=tuple(steps), text=text if text else None)

    def _token_id(self, token: str) -> int | None:
        match = _TOKEN_ID_KEY.match(token)
        if match:
            return int(match.group(1))
        if self._reverse_vocab is None:
            self._reverse_vocab = _reverse_vocab(self._model_dir)
        return self._reverse_vocab.get(token)

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for prompt in prompts:
            data = self._post("/v1/embeddings", {"model": self._model_name, "input": [int(t) for t in prompt]})
            try:
                vectors.append(unit_vector(data["data"][0]["embedding"]))
            except (KeyError, IndexError, TypeError, ValueError):
                raise EngineFailed(f"openai: embeddings answer without data: {str(data)[:200]}") from None
        return vectors

    # -- shutdown ----------------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        self._kill_server()
        if self._session is not None:
            with contextlib.suppress(Exception):
                self._session.close()
            self._session = None
        for path in self._tmp_files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        self._tmp_files.clear()

    def _kill_server(self, grace_s: float = 15.0) -> None:
        proc, group = self._proc, self._group
        if proc is None or group is None:
            return
        kill_groups([group], grace_s, alive=lambda: proc.poll() is None)
        if self._port is not None:
            deadline = time.monotonic() + 5.0
            while time.monotonic() < deadline and port_open(self._host, self._port):
                time.sleep(0.1)
        with contextlib.suppress(ValueError):
            _STARTED.remove(self)

    def _exit_reason(self) -> str:
        return exit_status(self._proc.poll() if self._proc is not None else None, "server")

    def _failed(self, status: str, with_error: bool = True) -> EngineFailed:
        """A failure with the server's log (its last error line first in the reason, when `with_error`)."""
        return engine_failed(status, self._log_path, with_error=with_error)


_STARTED: list[OpenAIEngine] = []


def _kill_started() -> None:
    for engine in list(_STARTED):
        engine._kill_server(grace_s=5.0)


atexit.register(_kill_started)


def _flavor(value: Any) -> str:
    """How to talk to the server: a registered server's name (aliases accepted), or `openai` (standard fields)."""
    text = str(value).lower()
    name = "openai" if text == "openai" else server_name(text)
    if name is None or name == COMMAND:
        raise EngineFailed(f"openai: unknown flavor {value!r}; known: {', '.join((*server_names(), 'openai'))}")
    return name


def _refused(exc: BaseException) -> bool:
    """Whether a request failed because nothing listens there (ECONNREFUSED anywhere in the exception chain)."""
    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, ConnectionRefusedError):
            return True
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None), *item.args]
    return "connection refused" in str(exc).lower()


def _grep_log(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    try:
        text = read_bytes(path, _LOG_GREP_BYTES, part="head").decode("utf-8", "replace")
    except OSError:
        return found
    for key, pattern in _VLLM_LOG.items():
        match = pattern.search(text)
        if match:
            found[key] = match.group(1)
    return found


def _reverse_vocab(model_dir: str) -> dict[str, int]:
    """decoded text -> id for ids whose single-token decoding is unique; {} without a local tokenizer.json."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return {}
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return {}
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception:
        return {}
    seen: dict[str, int] = {}
    clashes: set[str] = set()
    for tid in range(tok.get_vocab_size(with_added_tokens=True)):
        try:
            text = tok.decode([tid], skip_special_tokens=False)
        except Exception:
            continue
        if text in seen:
            clashes.add(text)
        else:
            seen[text] = tid
    for text in clashes:
        seen.pop(text, None)
    return seen
