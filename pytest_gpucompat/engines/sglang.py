"""SGLang through its offline `sglang.Engine` API (checked against the SGLang 0.5.16 sources).

What 0.5.16 provides and this adapter relies on:
- `Engine(**kwargs)` with the fields of `ServerArgs` (sglang/srt/server_args.py): model_path, skip_tokenizer_init,
  dtype, kv_cache_dtype, mem_fraction_static, attention_backend, tp_size, context_length, random_seed,
  is_embedding, log_level (Engine defaults it to "error"; here "info" so the log tail says something).
- `Engine.generate(input_ids=[[...]], sampling_params={...}, return_logprob=True, top_logprobs_num=N)`
  (sglang/srt/entrypoints/engine.py) returns one dict per prompt with "output_ids" and meta_info
  "output_token_logprobs" [(logprob, token_id, None)] and "output_top_logprobs" [[(logprob, token_id, None), ...]]
  (TokenizerManager.add_logprob_to_meta_info / detokenize_top_logprobs_tokens; text is None when the tokenizer
  is skipped). Greedy is temperature 0 (SamplingParams turns it into top_k=1); with an all-greedy batch the
  sampler's logprobs are log_softmax of the logits (sglang/srt/layers/sampler.py), like the hf reference's.
- embeddings: `is_embedding=True`; `Engine.encode` takes text only, so token ids go through the same path it uses:
  `EmbeddingReqInput(input_ids=...)` into `tokenizer_manager.generate_request`, run on `engine.loop`. SGLang's
  CausalLM-as-embedding pools the LAST token (normalized): the hf reference must use pooling "last" to compare.
- what ran: `Engine.get_server_info()` (server args after resolution plus the schedulers' internal states, where
  the resolved attention backend lives), `sglang.__version__`.
- `Engine.shutdown()` kills the scheduler/detokenizer process tree.
The engine runs as it ships (its tokenizer, backends, CUDA graphs); the harness adds only its declared defaults (the
descriptor's `harness_defaults`: memory fraction, seed, log level), recorded by every cell as deviations beside
SGLang's own defaults, read from `ServerArgs`.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..catalog.base import EngineFailed, EngineSpec, Generation, RunInfo
from ..catalog.loglines import exception_line
from ..catalog.params import Unsupported, engine_params, import_failure, unit_vector, wants_embeddings
from ..catalog.registry import normalize_dtype
from .deviations import dataclass_defaults, harness_settings


class SGLangEngine:
    name = "sglang"

    def __init__(self) -> None:
        self._engine: Any = None
        self._embed_mode = False

    def start(self, spec: EngineSpec) -> RunInfo:
        began = time.monotonic()
        try:
            import sglang
            from sglang.srt.entrypoints.engine import Engine
        except Exception as exc:  # ImportError, or an error raised while importing
            raise import_failure("sglang", exc) from None

        kwargs: dict[str, Any] = harness_settings(self.name, spec.params)
        kwargs.update(engine_params(spec.params))
        if "dtype" in kwargs:
            kwargs["dtype"] = normalize_dtype(kwargs["dtype"])
        self._embed_mode = wants_embeddings(spec.params) or bool(kwargs.get("is_embedding"))
        if self._embed_mode:
            kwargs["is_embedding"] = True
        try:
            engine = Engine(model_path=spec.model, **kwargs)
        except Exception as exc:
            raise EngineFailed(f"sglang: Engine() failed: {exception_line(exc)}") from None
        self._engine = engine
        info: Mapping[str, Any] = {}
        try:
            info = engine.get_server_info() or {}
        except Exception:
            info = {}
        run_info = _run_info(sglang, info, self._embed_mode, time.monotonic() - began)
        return dataclasses.replace(run_info, extra={**run_info.extra, "engine_defaults": _engine_defaults(kwargs)})

    def _require(self) -> Any:
        if self._engine is None:
            raise EngineFailed("sglang: engine not started")
        return self._engine

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        engine = self._require()
        if self._embed_mode:
            raise Unsupported("sglang engine was started for embeddings (is_embedding); it cannot generate")
        sampling = {"max_new_tokens": int(max_tokens), "temperature": 0.0, "ignore_eos": True}
        try:
            out = engine.generate(
                input_ids=[[int(t) for t in p] for p in prompts],
                sampling_params=sampling,
                return_logprob=True,
                top_logprobs_num=int(top_n),
            )
        except Exception as exc:
            raise EngineFailed(f"sglang: generate failed: {exception_line(exc)}") from None
        items = out if isinstance(out, list) else [out]
        if len(items) != len(prompts):
            raise EngineFailed(f"sglang: {len(items)} results for {len(prompts)} prompts")
        return [_generation(item) for item in items]

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        engine = self._require()
        if not self._embed_mode:
            raise Unsupported("sglang embeddings need the engine started with task: embed (is_embedding)")
        try:
            from sglang.srt.managers.io_struct import EmbeddingReqInput

            obj = EmbeddingReqInput(input_ids=[[int(t) for t in p] for p in prompts])
            generator = engine.tokenizer_manager.generate_request(obj, None)
            out = engine.loop.run_until_complete(generator.__anext__())
        except Exception as exc:
            raise EngineFailed(f"sglang: embed failed: {exception_line(exc)}") from None
        items = out if isinstance(out, list) else [out]
        return [unit_vector(item["embedding"]) for item in items]

    def shutdown(self) -> None:
        engine, self._engine = self._engine, None
        if engine is None:
            return
        with contextlib.suppress(Exception):
            engine.shutdown()
        del engine
        gc.collect()


def _engine_defaults(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """SGLang's own default for each setting the cell was started with (`ServerArgs`)."""
    try:
        from sglang.srt.server_args import ServerArgs
    except Exception:
        return {}
    return dataclass_defaults(ServerArgs, kwargs)


def _generation(item: Mapping[str, Any]) -> Generation:
    meta = item.get("meta_info") or {}
    token_ids = item.get("output_ids")
    chosen = meta.get("output_token_logprobs") or []
    if token_ids is None:
        token_ids = [entry[1] for entry in chosen]
    tops = meta.get("output_top_logprobs") or []
    steps: list[dict[int, float]] = []
    for position in range(len(token_ids)):
        step: dict[int, float] = {}
        entries = tops[position] if position < len(tops) and tops[position] else []
        for entry in entries:
            step[int(entry[1])] = float(entry[0])
        if position < len(chosen) and chosen[position] is not None:
            lp, tid = chosen[position][0], chosen[position][1]
            if lp is not None:
                step.setdefault(int(tid), float(lp))
        steps.append(step)
    return Generation(token_ids=tuple(int(t) for t in token_ids), logprobs=tuple(steps), text=item.get("text"))


def _run_info(sglang: Any, info: Mapping[str, Any], embed_mode: bool, start_s: float) -> RunInfo:
    states = info.get("internal_states") or []
    resolved: Mapping[str, Any] = states[0] if states and isinstance(states[0], Mapping) else {}

    def pick(key: str) -> Any:
        value = resolved.get(key)
        return value if value is not None else info.get(key)

    prefill, decode, attention = pick("prefill_attention_backend"), pick("decode_attention_backend"), pick(
        "attention_backend"
    )
    if prefill and decode and prefill != decode:
        backend: str | None = f"prefill={prefill},decode={decode}"
    else:
        backend = str(prefill or decode or attention) if (prefill or decode or attention) else None
    dtype = pick("dtype")
    kv = pick("kv_cache_dtype")
    extra: dict[str, Any] = {
        "kv_cache_dtype_setting": kv,
        "mem_fraction_static": pick("mem_fraction_static"),
        "tp_size": pick("tp_size"),
        "sampling_backend": pick("sampling_backend"),
        "disable_cuda_graph": pick("disable_cuda_graph"),
    }
    if embed_mode:
        extra["pooling"] = "last"
    memory = resolved.get("memory_usage")
    if isinstance(memory, Mapping):
        extra["memory_usage_gb"] = dict(memory)
    dtype_name = normalize_dtype(dtype) if dtype else None
    return RunInfo(
        engine="sglang",
        version=str(info.get("version") or getattr(sglang, "__version__", None) or "") or None,
        device=str(pick("device") or "cuda"),
        dtype=dtype_name,
        kv_cache_dtype=(dtype_name if kv in (None, "auto") else str(kv)),
        attention_backend=backend,
        start_s=start_s,
        extra=extra,
    )
