"""A `tensorrt_llm` stand-in built from a contract file (pytest_gpucompat/catalog/contracts/), for driving the
adapter without TensorRT-LLM: each class takes exactly the parameters the contract lists and rejects any other, as
TensorRT-LLM's strict pydantic arguments do; each result exposes only the attributes the contract lists."""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterable, Mapping
from typing import Any


class ContractViolation(BaseException):
    """A name read that the contract lacks. Not an Exception, so the adapter's `except Exception` cannot hide it."""


class Record:
    """A result or argument object: the contract's names readable, any other name a ContractViolation."""

    def __init__(self, kind: str, allowed: Iterable[str], values: Mapping[str, Any]) -> None:
        self.__dict__["_kind"], self.__dict__["_allowed"] = kind, frozenset(allowed)
        self.__dict__["_values"] = dict(values)

    def __getattr__(self, name: str) -> Any:
        if name in self.__dict__["_allowed"]:
            return self.__dict__["_values"].get(name)
        raise ContractViolation(f"{self.__dict__['_kind']}.{name} is not in the contract")


def _signature(params: Iterable[str], keyword_only: Iterable[str] = (), var_keyword: bool = False,
               required: int = 0) -> inspect.Signature:
    kinds = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                               **({} if i < required else {"default": None})) for i, n in enumerate(params)]
    kinds += [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None) for n in keyword_only]
    if var_keyword:
        kinds.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD))
    return inspect.Signature(kinds)


def _strict_kwargs(kind: str, allowed: Iterable[str], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ValueError(f"{kind} got invalid argument: {unknown[0]}")
    return dict(kwargs)


def build(contract: Mapping[str, Any]) -> dict[str, types.ModuleType]:
    """`tensorrt_llm` and `tensorrt_llm.llmapi` modules whose LLM, SamplingParams and KvCacheConfig follow
    `contract`; each LLM keeps what it was given (`given`, `sampling`) and whether it was shut down."""
    items = contract["items"]
    init, generate, shutdown = items["LLM.__init__"], items["LLM.generate"], items["LLM.shutdown"]
    args_fields = items["TorchLlmArgs"]["fields"]
    init_sig = _signature(init["params"], init["keyword_only"], init["var_keyword"], required=1)
    generate_sig = _signature(generate["params"], generate["keyword_only"], generate["var_keyword"], required=1)
    shutdown_sig = _signature(shutdown["params"], shutdown["keyword_only"], shutdown["var_keyword"])

    class SamplingParams(Record):
        def __init__(self, **kwargs: Any) -> None:
            values = _strict_kwargs("SamplingParams", items["SamplingParams"]["fields"], kwargs)
            super().__init__("SamplingParams", items["SamplingParams"]["fields"], values)

    class KvCacheConfig(Record):
        def __init__(self, **kwargs: Any) -> None:
            values = _strict_kwargs("KvCacheConfig", items["KvCacheConfig"]["fields"], kwargs)
            super().__init__("KvCacheConfig", items["KvCacheConfig"]["fields"], values)

    def completion(prompt: list[int], sampling: SamplingParams) -> Record:
        ids = [(sum(prompt) + i) % 11 for i in range(int(sampling.max_tokens))]
        steps = [{t: Record("Logprob", items["Logprob"]["fields"], {"logprob": -0.25, "rank": 1}),
                  **{(t + k) % 11: Record("Logprob", items["Logprob"]["fields"], {"logprob": -2.0 - k, "rank": k + 1})
                     for k in range(1, int(sampling.logprobs or 0))}} for t in ids]
        return Record("CompletionOutput", items["CompletionOutput"]["fields"],
                      {"index": 0, "token_ids": ids, "logprobs": steps})

    class LLM:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            bound = init_sig.bind(*args, **kwargs).arguments
            extra = _strict_kwargs("LLM", args_fields, bound.pop("kwargs", {}))
            self.given = {**bound, **extra}
            self.sampling: list[SamplingParams] = []
            self.shut_down = False
            self.args = Record("TorchLlmArgs", args_fields,
                               {"backend": "pytorch", "attn_backend": "TRTLLM", "dtype": "auto", **self.given})

        def generate(self, *args: Any, **kwargs: Any) -> list[Record]:
            bound = generate_sig.bind(*args, **kwargs).arguments
            inputs, sampling = bound["inputs"], bound.get("sampling_params")
            if not (isinstance(inputs, list) and all(isinstance(p, list) for p in inputs)):
                raise TypeError("the stand-in takes a batch: a list of token-id lists")
            if not isinstance(sampling, SamplingParams):
                raise TypeError("sampling_params must be a SamplingParams")
            self.sampling.append(sampling)
            return [Record("RequestOutput", items["RequestOutput"]["attributes"],
                           {"outputs": [completion(p, sampling)]}) for p in inputs]

        def shutdown(self, *args: Any, **kwargs: Any) -> None:
            shutdown_sig.bind(*args, **kwargs)
            self.shut_down = True

    root = types.ModuleType("tensorrt_llm")
    llmapi = types.ModuleType("tensorrt_llm.llmapi")
    root.LLM = llmapi.LLM = LLM  # type: ignore[attr-defined]
    root.SamplingParams = llmapi.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    llmapi.KvCacheConfig = KvCacheConfig  # type: ignore[attr-defined]
    root.llmapi = llmapi  # type: ignore[attr-defined]
    root.__version__ = str(contract["tag"]).lstrip("v")  # type: ignore[attr-defined]
    return {"tensorrt_llm": root, "tensorrt_llm.llmapi": llmapi}
