"""vLLM through its offline `vllm.LLM` API (checked against the vLLM 0.26.0 sources).

What 0.26.0 provides and this adapter relies on:
- `LLM(model, *, runner, dtype, skip_tokenizer_init, enforce_eager, gpu_memory_utilization, **EngineArgs)`
  (vllm/entrypoints/llm.py); every user param is passed through as a keyword, so any EngineArgs field works
  (kv_cache_dtype, tensor_parallel_size, block_size, quantization, max_model_len, attention_config, ...).
- prompts as `vllm.inputs.TokensPrompt(prompt_token_ids=[...])`; `SamplingParams(max_tokens, temperature=0,
  logprobs=N, ignore_eos=True, detokenize=False)` (vllm/sampling_params.py). Logprobs are "raw_logprobs" by default
  (ModelConfig.logprobs_mode): log_softmax of the raw logits, the same quantity the hf reference reports.
- `RequestOutput.outputs[0].token_ids` and `.logprobs`: one `{token_id: Logprob(logprob, rank, decoded_token)}`
  per position, top-N plus the sampled token (vllm/outputs.py, vllm/logprobs.py; FlatLogprobs behaves the same).
- embeddings: `LLM(..., runner="pooling")` turns a *ForCausalLM into an embedding model (ModelConfig
  `_get_default_convert_type` -> "embed"); `LLM.embed(prompts)` -> `EmbeddingRequestOutput.outputs.embedding`
  (vllm/entrypoints/pooling/offline.py). Pooling is forced to MEAN so it matches the hf reference's default.
  vLLM before 0.10 has no `runner`: `task="embed"` is used instead.
- what ran: `llm.llm_engine.model_config.dtype`, `llm.llm_engine.vllm_config.cache_config.cache_dtype`, and the
  attention backend from the worker's `model_runner.attn_groups[*][*].backend.get_name()` (both the V1 and the V2
  model runner keep `attn_groups`), read through `LLM.collective_rpc`; else from the "Using X attention backend"
  log line (vllm/platforms/cuda.py).
- teardown as seen working on an H200: `llm.llm_engine.engine_core.shutdown()`, drop the LLM, `gc.collect()`,
  `vllm.distributed.parallel_state.cleanup_dist_env_and_memory()`, `torch.cuda.empty_cache()`.
The engine runs as it ships: its own process model (the engine core in a process of its own), CUDA graphs, backends,
sampler and tokenizer. The only settings the harness adds are its declared defaults (the descriptor's
`harness_defaults`: a memory fraction and a seed), which every cell records as deviations; the engine's own default
for each setting a cell changes is read from `EngineArgs` and recorded beside it.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..catalog.base import EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo
from ..catalog.loglines import exception_line
from ..catalog.params import Unsupported, engine_params, import_failure, unit_vector, wants_embeddings
from ..catalog.registry import normalize_dtype
from .child import OwnLog
from .deviations import dataclass_defaults, harness_environment, harness_settings

_BACKEND_LINE = re.compile(r"Using (\S+) attention backend")


class _BackendLogCatcher(logging.Handler):
    """Keeps the attention backend named in vLLM's own log while the engine starts."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.backends: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            match = _BACKEND_LINE.search(record.getMessage())
        except Exception:  # a malformed record must not break start-up
            return
        if match and match.group(1) not in self.backends:
            self.backends.append(match.group(1))


def _worker_attention_backends(worker: Any) -> list[str]:
    """Runs inside a vLLM worker (via collective_rpc): the attention backends its model runner set up."""
    runner = getattr(worker, "model_runner", None)
    groups = getattr(runner, "attn_groups", None) or []
    names: list[str] = []
    for group_list in groups:
        for group in group_list:
            backend = getattr(group, "backend", None)
            if backend is None:
                continue
            try:
                name = backend.get_name()
            except Exception:
                name = getattr(backend, "__name__", str(backend))
            if name not in names:
                names.append(str(name))
    return names


class VLLMEngine:
    name = "vllm"

    def __init__(self) -> None:
        self._llm: Any = None
        self._embed_mode = False
        self._vllm: Any = None

    def start(self, spec: EngineSpec) -> RunInfo:
        began = time.monotonic()
        for key, value in harness_environment(self.name, spec.params).items():
            os.environ.setdefault(key, value)
        try:
            import vllm
            from vllm import LLM
        except Exception as exc:  # ImportError, or e.g. a CUDA library mismatch raised as OSError at import
            raise import_failure("vllm", exc) from None
        self._vllm = vllm

        kwargs: dict[str, Any] = harness_settings(self.name, spec.params)
        kwargs.update(engine_params(spec.params))
        if "dtype" in kwargs:
            kwargs["dtype"] = normalize_dtype(kwargs["dtype"])
        self._embed_mode = wants_embeddings(spec.params) or kwargs.get("runner") == "pooling"
        if self._embed_mode:
            kwargs.setdefault("runner", "pooling")
            if "pooler_config" not in kwargs:
                kwargs["pooler_config"] = _mean_pooler(vllm)

        catcher = _BackendLogCatcher()
        own_log = OwnLog()  # the engine core logs the backend it chose from its own process (vLLM's default)
        vllm_logger = logging.getLogger("vllm")
        vllm_logger.addHandler(catcher)
        try:
            try:
                llm = LLM(model=spec.model, **kwargs)
            except TypeError as exc:
                if "runner" in str(exc) and self._embed_mode:  # vLLM < 0.10 knows task="embed", not runner
                    kwargs.pop("runner", None)
                    kwargs["task"] = "embed"
                    llm = LLM(model=spec.model, **kwargs)
                else:
                    raise
        except EngineUnavailable:
            raise
        except Exception as exc:
            raise EngineFailed(f"vllm: LLM() failed: {exception_line(exc)}") from None
        finally:
            vllm_logger.removeHandler(catcher)
        self._llm = llm
        logged = catcher.backends or list(dict.fromkeys(_BACKEND_LINE.findall(own_log.text())))
        return self._run_info(vllm, llm, kwargs, logged, time.monotonic() - began)

    def _run_info(self, vllm: Any, llm: Any, kwargs: Mapping[str, Any], logged: list[str], start_s: float) -> RunInfo:
        engine = llm.llm_engine
        model_config = getattr(engine, "model_config", None) or getattr(llm, "model_config", None)
        vllm_config = getattr(engine, "vllm_config", None)
        dtype = _dtype_name(getattr(model_config, "dtype", None))
        cache_config = getattr(vllm_config, "cache_config", None)
        cache_dtype = getattr(cache_config, "cache_dtype", None)
        cache_dtype = str(cache_dtype) if cache_dtype is not None else None
        kv_cache_dtype = dtype if cache_dtype in (None, "auto") else cache_dtype
        backends: list[str] = []
        try:
            for names in llm.collective_rpc(_worker_attention_backends, timeout=30):
                for name in names or []:
                    if name not in backends:
                        backends.append(name)
        except Exception:
            backends = []
        if not backends:
            backends = list(logged)
        extra: dict[str, Any] = {
            "kv_cache_dtype_setting": cache_dtype,
            "runner": getattr(model_config, "runner_type", None),
            "enforce_eager": getattr(model_config, "enforce_eager", None),
            "max_model_len": getattr(model_config, "max_model_len", None),
            "quantization": getattr(model_config, "quantization", None),
            "engine_defaults": _engine_defaults(vllm, kwargs),
        }
        parallel = getattr(vllm_config, "parallel_config", None)
        if parallel is not None:
            extra["tensor_parallel_size"] = getattr(parallel, "tensor_parallel_size", None)
        if self._embed_mode:
            pooler = kwargs.get("pooler_config")
            extra["pooling"] = "mean" if pooler is None or _is_mean(pooler) else "custom"
        # Nothing here touches torch.cuda: with the engine core in its own process (vLLM's default), this is the
        # user's process, and a CUDA context made here makes vLLM's next forked engine core fail ("Cannot
        # re-initialize CUDA in forked subprocess"), as seen on an H200 when a second engine started in it.
        return RunInfo(
            engine=self.name,
            version=getattr(vllm, "__version__", None),
            device=str(getattr(getattr(vllm_config, "device_config", None), "device_type", None) or "cuda"),
            dtype=dtype,
            kv_cache_dtype=kv_cache_dtype,
            attention_backend=",".join(backends) if backends else None,
            start_s=start_s,
            extra=extra,
        )

    def _require(self) -> Any:
        if self._llm is None:
            raise EngineFailed("vllm: engine not started")
        return self._llm

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        llm = self._require()
        if self._embed_mode:
            raise Unsupported("vllm engine was started for embeddings (runner=pooling); it cannot generate")
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(
            max_tokens=int(max_tokens), temperature=0.0, logprobs=int(top_n), ignore_eos=True, detokenize=False
        )
        inputs = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts]
        try:
            outputs = llm.generate(inputs, params, use_tqdm=False)
        except Exception as exc:
            raise EngineFailed(f"vllm: generate failed: {exception_line(exc)}") from None
        results: list[Generation] = []
        for out in outputs:
            completion = out.outputs[0]
            token_ids = tuple(int(t) for t in completion.token_ids)
            steps: list[dict[int, float]] = []
            for position in completion.logprobs or []:
                steps.append({int(tid): float(getattr(lp, "logprob", lp)) for tid, lp in (position or {}).items()})
            results.append(Generation(token_ids=token_ids, logprobs=tuple(steps), text=None))
        return results

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        llm = self._require()
        if not self._embed_mode:
            raise Unsupported("vllm embeddings need the engine started with task: embed (runner=pooling)")
        from vllm.inputs import TokensPrompt

        inputs = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts]
        try:
            outputs = llm.embed(inputs, use_tqdm=False)
        except Exception as exc:
            raise EngineFailed(f"vllm: embed failed: {exception_line(exc)}") from None
        return [unit_vector(out.outputs.embedding) for out in outputs]

    def shutdown(self) -> None:
        llm, self._llm = self._llm, None
        if llm is None:
            return
        with contextlib.suppress(Exception):
            llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except Exception:
            pass
        try:
            import torch

            if torch.cuda.is_initialized():  # never create a CUDA context only to empty its cache
                torch.cuda.empty_cache()
        except Exception:
            pass


def _engine_defaults(vllm: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's own default for each setting the cell was started with (`EngineArgs`): what the report compares a
    deviation with."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except Exception:
        return {}
    return dataclass_defaults(EngineArgs, kwargs)


def _mean_pooler(vllm: Any) -> Any:
    """PoolerConfig(pooling_type="MEAN"): the same pooling as the hf reference's default."""
    try:
        from vllm.config import PoolerConfig
    except ImportError:
        return {"pooling_type": "MEAN"}
    return PoolerConfig(pooling_type="MEAN")


def _is_mean(pooler: Any) -> bool:
    value = pooler.get("pooling_type") if isinstance(pooler, Mapping) else getattr(pooler, "pooling_type", None)
    return str(value).upper() == "MEAN"


def _dtype_name(dtype: Any) -> str | None:
    if dtype is None:
        return None
    return normalize_dtype(str(dtype))
