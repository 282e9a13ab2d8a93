"""TensorRT-LLM through its LLM API (PyTorch backend, the default `tensorrt_llm.LLM` of TRT-LLM 1.x).

Every name of TensorRT-LLM's API this adapter passes or reads is declared below (KWARGS, READS, LLM_ARGS_USED) and
the code builds its calls from those declarations. The contracts in `contracts/tensorrt_llm-<tag>.json`, extracted
from TensorRT-LLM's sources by `tools/trtllm_contract.py`, hold the real signatures; tests check every declared
name against every contract and run start/generate/shutdown against a `tensorrt_llm` stand-in built from each one.
What the sources say about the calls made here:
- `LLM(model, ..., **kwargs)`: the extra keywords must be TorchLlmArgs fields (`BaseLLM.__init__` rejects others
  with "got invalid argument"); `kv_cache_config` is a `KvCacheConfig` (pydantic, extra fields forbidden) whose
  `dtype` is for the PyTorch backend. `llm.args` is the TorchLlmArgs instance.
- `LLM.generate(inputs, sampling_params, use_tqdm)`: a list of token-id lists is a batch (a list of ints would be
  one prompt); it returns one `RequestOutput` per prompt.
- `SamplingParams` is a dataclass; `pad_id` defaults to `end_id`; temperature 0 is greedy.
- `RequestOutput.outputs[0]` is a `CompletionOutput`: `.token_ids`, and `.logprobs` as `list[dict[int, Logprob]]`
  (`Logprob.logprob`, `.rank`); in 1.0 a result carrying the sampled tokens' log-probs replaces it with
  `list[float]` for the sampled token only. Both are handled.
Not known from the sources read: which of the two the PyTorch sampler returns, and whether its logprobs are taken
before or after its own logits processing; with greedy decoding and no penalties both are log_softmax of the logits.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..catalog.base import EngineFailed, EngineSpec, Generation, RunInfo
from ..catalog.loglines import exception_line
from ..catalog.params import Unsupported, engine_params, import_failure, wants_embeddings
from ..catalog.registry import normalize_dtype
from ..common.inputs import read_json
from .deviations import harness_settings

KV_CACHE_PARAMS: Mapping[str, str] = {
    "kv_cache_dtype": "dtype",
    "free_gpu_memory_fraction": "free_gpu_memory_fraction",
    "kv_cache_free_gpu_memory_fraction": "free_gpu_memory_fraction",
}
"""Cell parameters that are KvCacheConfig fields, by the field they set."""
SAMPLING_KEYS = ("max_tokens", "temperature", "logprobs", "ignore_eos", "detokenize", "end_id", "pad_id")
GENERATE_ARGS = ("inputs", "sampling_params", "use_tqdm")
ARGS_READ = ("dtype", "kv_cache_config", "attn_backend", "backend", "tensor_parallel_size", "max_seq_len")
"""What `_run_info` reads from `llm.args` (TorchLlmArgs)."""
LLM_ARGS_USED = tuple(dict.fromkeys(("kv_cache_config", *ARGS_READ, "pipeline_parallel_size")))
"""The TorchLlmArgs fields this project passes (itself, or as the registry's parallel_params) or reads."""

KWARGS: Mapping[str, tuple[str, ...]] = {
    "LLM.__init__": ("model", "kv_cache_config"),
    "KvCacheConfig": tuple(dict.fromkeys(KV_CACHE_PARAMS.values())),
    "SamplingParams": SAMPLING_KEYS,
    "LLM.generate": GENERATE_ARGS,
    "LLM.shutdown": (),
}
"""Contract item -> the keywords (or parameters) the adapter passes to it."""
READS: Mapping[str, tuple[str, ...]] = {
    "TorchLlmArgs": ARGS_READ,
    "KvCacheConfig": ("dtype",),
    "RequestOutput": ("outputs",),
    "CompletionOutput": ("token_ids", "logprobs"),
    "Logprob": ("logprob",),
}
"""Contract item -> the attributes the adapter reads from it."""


def llm_kwargs(model: str, params: Mapping[str, Any]) -> tuple[dict[str, Any], Any]:
    """(keywords for `LLM()` but kv_cache_config, KvCacheConfig keywords) for a cell's engine parameters. A cell's
    `kv_cache_config` mapping is merged under the KV_CACHE_PARAMS it also sets, over this project's default memory
    fraction; a KvCacheConfig object given in the cell is returned as it is."""
    declared = harness_settings("tensorrt-llm", params)  # the descriptor's: a memory fraction (a deviation)
    rest = dict(params)
    overrides = {field: rest.pop(key) for key, field in KV_CACHE_PARAMS.items() if key in rest}
    kv_config = rest.pop("kv_cache_config", None)
    if isinstance(kv_config, Mapping) or kv_config is None:
        kv_config = {**declared, **dict(kv_config or {}), **overrides}
    if "dtype" in rest:
        rest["dtype"] = normalize_dtype(rest["dtype"])
    return {"model": model, **rest}, kv_config


def sampling_kwargs(max_tokens: int, top_n: int, end_id: int | None, pad_id: int | None) -> dict[str, Any]:
    """SamplingParams keywords: greedy, `top_n` logprobs, past EOS, no detokenizing; end/pad ids when known."""
    values = (int(max_tokens), 0.0, int(top_n), True, False, end_id, pad_id)
    return {key: value for key, value in zip(SAMPLING_KEYS, values, strict=True) if value is not None}


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

        kwargs, kv_config = llm_kwargs(spec.model, engine_params(spec.params))
        try:
            from tensorrt_llm.llmapi import KvCacheConfig

            if isinstance(kv_config, Mapping):
                kv_config = KvCacheConfig(**kv_config)
        except Exception as exc:
            raise EngineFailed(f"tensorrt-llm: bad kv cache config: {exception_line(exc)}") from None
        self._end_id, self._pad_id = _special_ids(spec.model)
        try:
            llm = LLM(**kwargs, kv_cache_config=kv_config)
        except Exception as exc:
            raise EngineFailed(f"tensorrt-llm: LLM() failed: {exception_line(exc)}") from None
        self._llm = llm
        return _run_info(tensorrt_llm, llm, spec.model, time.monotonic() - began)

    def _require(self) -> Any:
        if self._llm is None:
            raise EngineFailed("tensorrt-llm: engine not started")
        return self._llm

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        llm = self._require()
        from tensorrt_llm import SamplingParams

        kwargs = sampling_kwargs(max_tokens, top_n, self._end_id, self._pad_id)
        try:
            params = SamplingParams(**kwargs)
            outputs = llm.generate([[int(t) for t in p] for p in prompts], params, use_tqdm=False)
        except Exception as exc:
            raise EngineFailed(f"tensorrt-llm: generate failed: {exception_line(exc)}") from None
        if not isinstance(outputs, list):
            outputs = [outputs]
        results: list[Generation] = []
        for out in outputs:
            completion = out.outputs[0]
            token_ids = [int(t) for t in completion.token_ids]
            steps: list[dict[int, float]] = []
            for position, entry in enumerate(completion.logprobs or []):
                if isinstance(entry, Mapping):
                    steps.append({int(t): float(lp.logprob if hasattr(lp, "logprob") else lp)
                                  for t, lp in entry.items()})
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

            if torch.cuda.is_initialized():  # never count devices or make a context only to empty a cache
                torch.cuda.empty_cache()
        except Exception:
            pass


def _special_ids(model_dir: str) -> tuple[int | None, int | None]:
    """eos/pad ids from config.json, so sampling works even with skip_tokenizer_init."""
    try:
        data = read_json(Path(model_dir) / "config.json")
    except (OSError, ValueError):
        return None, None
    eos = data.get("eos_token_id")
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    pad = data.get("pad_token_id")
    return (int(eos) if isinstance(eos, int) else None, int(pad) if isinstance(pad, int) else None)


def _config_dtype(model_dir: str) -> str | None:
    try:
        data = read_json(Path(model_dir) / "config.json")
    except (OSError, ValueError):
        return None
    value = data.get("torch_dtype") or data.get("dtype")
    return normalize_dtype(value) if value else None


def _run_info(tensorrt_llm: Any, llm: Any, model_dir: str, start_s: float) -> RunInfo:
    args = getattr(llm, "args", None)
    seen = {name: getattr(args, name, None) for name in ARGS_READ}
    dtype = normalize_dtype(seen["dtype"] or "auto")
    if dtype == "auto":
        dtype = _config_dtype(model_dir) or "auto"
    kv = getattr(seen["kv_cache_config"], "dtype", None)
    kv_dtype = dtype if kv in (None, "auto") else str(kv)
    backend = seen["attn_backend"]
    extra: dict[str, Any] = {"kv_cache_dtype_setting": kv, "backend": seen["backend"],
                             "tensor_parallel_size": seen["tensor_parallel_size"], "max_seq_len": seen["max_seq_len"]}
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
