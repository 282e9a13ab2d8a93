"""The reference: HF transformers + torch, greedy decoding step by step with float32 log-softmax logprobs.

Like vLLM's `HfRunner.generate_greedy_logprobs_limit`, logprobs are taken as `log_softmax(logits.float())` at every
step, so an engine's numbers are compared with a float32 view of the same model, whatever dtype the model runs in.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from typing import Any

from ..catalog.base import EngineFailed, EngineSpec, EngineUnavailable, Generation, RunInfo
from ..catalog.loglines import exception_line
from ..catalog.params import engine_params
from ..catalog.registry import normalize_dtype
from ..common.progress import quiet_progress_bars

_DTYPES = ("float32", "bfloat16", "float16", "auto", "fp8")
_OWN_PARAMS = {"dtype", "device", "attn_implementation", "pooling", "trust_remote_code", "seed"}


class HFEngine:
    """transformers `AutoModelForCausalLM` on one device; params: dtype, device, attn_implementation, pooling."""

    name = "hf"

    def __init__(self) -> None:
        self._model: Any = None
        self._device: str = "cpu"
        self._pooling = "mean"
        self._spec: EngineSpec | None = None

    def start(self, spec: EngineSpec) -> RunInfo:
        began = time.monotonic()
        try:
            import torch
            import transformers
            from transformers import AutoModelForCausalLM
        except ImportError as exc:
            raise EngineUnavailable(f"hf reference needs torch and transformers: {exception_line(exc)}") from None

        params = engine_params(spec.params)
        unknown = sorted(set(params) - _OWN_PARAMS)
        if unknown:
            raise EngineFailed(f"hf: unknown params {', '.join(unknown)} (known: {', '.join(sorted(_OWN_PARAMS))})")
        dtype_name = normalize_dtype(params.get("dtype", "float32"))
        if dtype_name not in _DTYPES:
            raise EngineUnavailable(f"hf reference does not run dtype {params.get('dtype')!r}")
        device = str(params.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise EngineUnavailable("hf: device cuda requested but torch sees no CUDA device")
        pooling = str(params.get("pooling", "mean")).lower()
        if pooling not in ("mean", "last"):
            raise EngineFailed(f"hf: pooling must be 'mean' or 'last', not {pooling!r}")

        if dtype_name == "fp8":
            from .fp8 import require_fp8

            require_fp8(torch, device)
        kwargs: dict[str, Any] = {"trust_remote_code": bool(params.get("trust_remote_code", False))}
        if dtype_name == "fp8":
            kwargs[_dtype_kwarg(transformers.__version__)] = torch.bfloat16
        elif dtype_name != "auto":
            torch_dtype = getattr(torch, dtype_name)
            kwargs[_dtype_kwarg(transformers.__version__)] = torch_dtype
        else:
            kwargs[_dtype_kwarg(transformers.__version__)] = "auto"
        if params.get("attn_implementation"):
            kwargs["attn_implementation"] = str(params["attn_implementation"])
        torch.manual_seed(int(params.get("seed", 0)))
        try:
            with quiet_progress_bars():
                # Any, as everywhere in this adapter: transformers' @wraps(Module.to) hides `to`'s binding
                model: Any = AutoModelForCausalLM.from_pretrained(spec.model, **kwargs)
            model.to(device)
            model.eval()
            fp8_linears = 0
            if dtype_name == "fp8":
                from .fp8 import quantize_linears

                fp8_linears = quantize_linears(model)
        except (OSError, ValueError, RuntimeError, ImportError, TypeError) as exc:
            raise EngineFailed(f"hf: loading {spec.model} failed: {exception_line(exc)}") from None

        self._model = model
        self._device = device
        self._pooling = pooling
        self._spec = spec
        param_dtype = next(model.parameters()).dtype
        extra: dict[str, Any] = {"torch": torch.__version__, "pooling": pooling}
        if dtype_name == "fp8":
            extra["fp8"] = f"w8a8 e4m3 per-tensor via torch._scaled_mm in {fp8_linears} linear layers"
        if device.startswith("cuda"):
            index = torch.device(device).index or 0
            extra["cuda_device_name"] = torch.cuda.get_device_name(index)
            extra["cuda_runtime"] = torch.version.cuda
            extra["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        return RunInfo(
            engine=self.name,
            version=transformers.__version__,
            device=device,
            dtype="fp8" if dtype_name == "fp8" else str(param_dtype).removeprefix("torch."),
            kv_cache_dtype=str(param_dtype).removeprefix("torch."),
            attention_backend=getattr(model.config, "_attn_implementation", None),
            start_s=time.monotonic() - began,
            extra=extra,
        )

    def _require(self) -> Any:
        if self._model is None:
            raise EngineFailed("hf: engine not started")
        return self._model

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int, top_n: int) -> list[Generation]:
        model = self._require()
        import torch

        if max_tokens < 1 or top_n < 1:
            raise EngineFailed("hf: max_tokens and top_n must be >= 1")
        results: dict[int, Generation] = {}
        # Prompts of equal length share a batch: no padding, so batching changes nothing but speed.
        by_length: dict[int, list[int]] = {}
        for i, prompt in enumerate(prompts):
            by_length.setdefault(len(prompt), []).append(i)
        try:
            with torch.inference_mode():
                for length, indices in by_length.items():
                    if length == 0:
                        raise EngineFailed("hf: empty prompt")
                    ids = torch.tensor([list(prompts[i]) for i in indices], dtype=torch.long, device=self._device)
                    for i, gen in zip(indices, _greedy(model, ids, max_tokens, top_n)):
                        results[i] = gen
        except EngineFailed:
            raise
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:
            raise EngineFailed(f"hf: generate failed: {exception_line(exc)}") from None
        return [results[i] for i in range(len(prompts))]

    def embed(self, prompts: Sequence[Sequence[int]]) -> list[list[float]]:
        model = self._require()
        import torch

        out: list[list[float]] = []
        try:
            with torch.inference_mode():
                for prompt in prompts:
                    ids = torch.tensor([list(prompt)], dtype=torch.long, device=self._device)
                    hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1][0].float()
                    pooled = hidden.mean(dim=0) if self._pooling == "mean" else hidden[-1]
                    pooled = torch.nn.functional.normalize(pooled, p=2.0, dim=0)
                    out.append([float(x) for x in pooled.cpu().tolist()])
        except (RuntimeError, ValueError, IndexError, TypeError) as exc:
            raise EngineFailed(f"hf: embed failed: {exception_line(exc)}") from None
        return out

    def shutdown(self) -> None:
        if self._model is None:
            return
        self._model = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover - torch was importable at start
            pass


def _dtype_kwarg(transformers_version: str) -> str:
    """transformers >= 4.56 calls it `dtype`; older versions only know `torch_dtype`."""
    from packaging.version import Version

    return "dtype" if Version(transformers_version) >= Version("4.56") else "torch_dtype"


def _cache_kwarg(model: Any) -> str:
    """transformers 5.x renamed the KV-cache argument and output field `past_key_values` to `cache`."""
    import inspect

    try:
        names = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in names else "past_key_values"


def _greedy(model: Any, ids: Any, max_tokens: int, top_n: int) -> list[Generation]:
    """Greedy decode a batch of equal-length prompts with the KV cache, keeping float32 top-N logprobs per step."""
    import torch

    batch = ids.shape[0]
    tokens: list[list[int]] = [[] for _ in range(batch)]
    tops: list[list[dict[int, float]]] = [[] for _ in range(batch)]
    past = None
    step_input = ids
    attention = torch.ones_like(ids)
    k = min(top_n, int(model.config.vocab_size) if hasattr(model.config, "vocab_size") else top_n)
    cache_kw = _cache_kwarg(model)
    for _ in range(max_tokens):
        out = model(input_ids=step_input, attention_mask=attention, use_cache=True, **{cache_kw: past})
        past = getattr(out, cache_kw)
        logprobs = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1)
        values, indices = torch.topk(logprobs, k=k, dim=-1)
        chosen = indices[:, 0]
        values_l = values.cpu().tolist()
        indices_l = indices.cpu().tolist()
        for b in range(batch):
            tokens[b].append(int(indices_l[b][0]))
            tops[b].append({int(t): float(v) for t, v in zip(indices_l[b], values_l[b])})
        step_input = chosen.unsqueeze(-1)
        attention = torch.cat([attention, torch.ones_like(step_input)], dim=-1)
    return [Generation(token_ids=tuple(tokens[b]), logprobs=tuple(tops[b])) for b in range(batch)]
