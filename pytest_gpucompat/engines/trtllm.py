"""TensorRT-LLM through its LLM API (PyTorch backend, the default `tensorrt_llm.LLM` of TRT-LLM 1.x).

Read from the TensorRT-LLM sources (tensorrt_llm/llmapi/llm.py, llmapi/llm_args.py, sampling_params.py,
executor/result.py) and docs; the wheels are not installable here, so this adapter stays minimal:
- `LLM(model, tokenizer=None, skip_tokenizer_init, tensor_parallel_size, dtype, **kwargs)`; other kwargs are
  TorchLlmArgs fields (strict: unknown keys are rejected by TRT-LLM itself): kv_cache_config (KvCacheConfig with
  free_gpu_memory_fraction and, for the PyTorch backend, dtype), max_seq_len, max_batch_size, attn_backend
  (default "TRTLLM"), cuda_graph_config, ...
- `LLM.generate(inputs, sampling_params, use_tqdm=...)`: a list of token-id lists is a batch of prompts
  (`prompt_inputs` turns each into {"prompt_token_ids": ...}).
- `SamplingParams(max_tokens, temperature=0.0 (greedy, as in TRT-LLM's own sampling example), logprobs=N,
  ignore_eos=True, detokenize=False, end_id, pad_id)`.
- `RequestOutput.outputs[0].token_ids` and `.logprobs`: `list[dict[int, Logprob(logprob, rank)]]` (TokenLogprobs)
  or, from the older TensorRT-engine path, `list[float]` for the sampled token only (both handled).
- `LLM.shutdown()`.
Not known from the sources read: whether the PyTorch sampler's logprobs are taken before or after its own logits
processing; with greedy decoding and no penalties both are log_softmax of the logits.
"""

from __future__ import annotations

import contextlib
import gc
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import Unsupported, engine_params, import_failure, normalize_dtype, one_line, wants_embeddings
from .base import EngineFailed, EngineSpec, Generation, RunInfo

DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.2
_KV_KEYS = {"kv_cache_dtype": "dtype", "free_gpu_memory_fraction": "free_gpu_memory_fraction",
            "kv_cache_free_gpu_memory_fraction": "free_gpu_memory_fraction"}


class TRTLLMEngine:
    name = "tensorrt-llm"

    def __init__(self) -> None:
        self._llm: Any = None
        self._end_id: int | None = None
        self._pad_id: int | None = None

    def start(self, spec: EngineSpec) -> RunInfo:
        began = time.monotonic()
        if wants_embeddings(spec.params):
            raise Unsupported("tensorrt-llm: embeddings are not supported by this adapter")
        try:
            import tensorrt_llm
            from tensorrt_llm import LLM
        except Exception as exc:  # ImportError; the placeholder sdist on PyPI raises at import, as do CUDA mismatches
            raise import_failure("tensorrt_llm", exc) from None

        params = engine_params(spec.params)
        kv_overrides: dict[str, Any] = {}
        for key, target in _KV_KEYS.items():
            if key in params:
                kv_overrides[target] = params.pop(key)
        kv_config = params.pop("kv_cache_config", None)
        try:
            from tensorrt_llm.llmapi import KvCacheConfig

            if isinstance(kv_config, Mapping) or kv_config is None:
                merged = {"free_gpu_memory_fraction": DEFAULT_FREE_GPU_MEMORY_FRACTION}
                merged.update(dict(kv_config or {}))
                merged.update(kv_overrides)
                kv_config = KvCacheConfig(**merged)
        except Exception as exc:
            raise EngineFailed(f"tensorrt-llm: bad kv cache config: {one_line(exc)}") from None
        if "dtype" in params:
            params["dtype"] = normalize_dtype(params["dtype"])
        self._end_id, self._pad_id = _special_ids(spec.model)
        try:
            llm = LLM(model=spec.model, kv_cache_config=kv_config, **params)
        except Exception as exc:
            raise EngineFailed(f"tensorrt-llm: LLM() failed: {one_line(exc)}") from None
        self._llm = llm
        return _run_info(tensorrt_llm, llm, spec.model, time.monotonic() - began)

    def _require(self) -> Any:
        if self._llm is None:
            raise EngineFailed("tensorrt-llm: engine not started")
        return self._llm

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        llm = self._require()
        from tensorrt_llm import SamplingParams

        kwargs: dict[str, Any] = {
            "max_tokens": int(max_tokens),
            "temperature": 0.0,
            "logprobs": int(top_n),
            "ignore_eos": True,
            "detokenize": False,
        }
        if self._end_id is not None:
            kwargs["end_id"] = self._end_id
        if self._pad_id is not None:
            kwargs["pad_id"] = self._pad_id
        try:
            params = SamplingParams(**kwargs)
            outputs = llm.generate([[int(t) for t in p] for p in prompts], params, use_tqdm=False)
        except Exception as exc:
            raise EngineFailed(f"tensorrt-llm: generate failed: {one_line(exc)}") from None
        if not isinstance(outputs, list):
            outputs = [outputs]
        results: list[Generation] = []
        for out in outputs:
            completion = out.outputs[0]
            token_ids = [int(t) for t in completion.token_ids]
            steps: list[dict[int, float]] = []
            for position, entry in enumerate(completion.logprobs or []):
                if isinstance(entry, Mapping):
                    steps.append({int(t): float(getattr(lp, "logprob", lp)) for t, lp in entry.items()})
                elif position < len(token_ids):  # list[float]: only the sampled token's logprob
                    steps.append({token_ids[position]: float(entry)})
            results.append(Generation(token_ids=tuple(token_ids), logprobs=tuple(steps)))
        return results

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        raise Unsupported("tensorrt-llm: embeddings are not supported by this adapter")

    def shutdown(self) -> None:
        llm, self._llm = self._llm, None
        if llm is None:
            return
        with contextlib.suppress(Exception):
            llm.shutdown()
        del llm
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass


def _special_ids(model_dir: str) -> tuple[int | None, int | None]:
    """eos/pad ids from config.json, so sampling works even with skip_tokenizer_init."""
    try:
        data = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None, None
    eos = data.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    pad = data.get("pad_token_id")
    return (int(eos) if isinstance(eos, int) else None, int(pad) if isinstance(pad, int) else None)


def _config_dtype(model_dir: str) -> str | None:
    try:
        data = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = data.get("torch_dtype") or data.get("dtype")
    return normalize_dtype(value) if value else None


def _run_info(tensorrt_llm: Any, llm: Any, model_dir: str, start_s: float) -> RunInfo:
    args = getattr(llm, "args", None)
    dtype = normalize_dtype(getattr(args, "dtype", "auto") or "auto")
    if dtype == "auto":
        dtype = _config_dtype(model_dir) or "auto"
    kv = getattr(getattr(args, "kv_cache_config", None), "dtype", None)
    kv_dtype = dtype if kv in (None, "auto") else str(kv)
    backend = getattr(args, "attn_backend", None)
    extra: dict[str, Any] = {
        "kv_cache_dtype_setting": kv,
        "backend": getattr(args, "backend", None),
        "tensor_parallel_size": getattr(args, "tensor_parallel_size", None),
        "max_seq_len": getattr(args, "max_seq_len", None),
    }
    return RunInfo(
        engine="tensorrt-llm",
        version=getattr(tensorrt_llm, "__version__", None),
        device="cuda",
        dtype=dtype,
        kv_cache_dtype=kv_dtype,
        attention_backend=str(backend) if backend else None,
        start_s=start_s,
        extra=extra,
    )
