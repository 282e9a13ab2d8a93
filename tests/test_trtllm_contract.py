"""The TensorRT-LLM adapter and the trtllm-serve command line against the API contracts extracted from TensorRT-LLM
release sources (pytest_gpucompat/catalog/contracts/): every name the adapter declares is there with the right kind,
the adapter runs start/generate/shutdown against a stand-in built from each contract, and the extraction tool reads
sources with ast."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from _trtllm_fake import ContractViolation, build

import pytest_gpucompat.catalog
from pytest_gpucompat.catalog.base import EngineFailed, EngineSpec
from pytest_gpucompat.catalog.registry import descriptor
from pytest_gpucompat.engines.trtllm import (
    KWARGS,
    LLM_ARGS_USED,
    READS,
    SAMPLING_KEYS,
    TRTLLMEngine,
    llm_kwargs,
    sampling_kwargs,
)

ROOT = Path(__file__).resolve().parent.parent
CONTRACTS = sorted((Path(pytest_gpucompat.catalog.__file__).parent / "contracts").glob("tensorrt_llm-*.json"))


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location("trtllm_contract", ROOT / "tools" / "trtllm_contract.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules.get(spec.name) or importlib.util.module_from_spec(spec)
    if spec.name not in sys.modules:
        sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
        spec.loader.exec_module(module)
    return module


def accepts(contract: dict[str, Any], item: str, name: str) -> bool:
    """Whether `item` (a callable or a class) takes `name` as a parameter or keyword."""
    entry = contract["items"][item]
    if "params" in entry:
        named = name in entry["params"] or name in entry["keyword_only"]
        return named or (entry["var_keyword"] and name in contract["items"]["TorchLlmArgs"]["fields"])
    return name in entry["fields"]


def readable(contract: dict[str, Any], item: str, name: str) -> bool:
    entry = contract["items"][item]
    return name in entry["fields"] or name in entry.get("attributes", ())


@pytest.fixture(params=CONTRACTS, ids=lambda p: p.stem.rpartition("-")[2])
def contract(request: pytest.FixtureRequest) -> dict[str, Any]:
    return _load(request.param)


def test_contracts_for_two_releases_say_where_they_come_from() -> None:
    assert len(CONTRACTS) >= 2
    for path in CONTRACTS:
        doc = _load(path)
        assert path.name == f"tensorrt_llm-{doc['tag']}.json"
        assert doc["repository"] == "https://github.com/NVIDIA/TensorRT-LLM" and doc["commit"] and doc["read_from"]
        assert doc["generated_by"].startswith("python tools/trtllm_contract.py")
        for key, entry in doc["items"].items():
            assert entry["path"].startswith("tensorrt_llm/"), key
            assert entry.get("missing") in (None, []), f"{doc['tag']}: {key} lacks {entry.get('missing')}"


def test_every_name_the_adapter_passes_or_reads_is_in_the_contract(contract: dict[str, Any]) -> None:
    for item, names in KWARGS.items():
        for name in names:
            assert accepts(contract, item, name), f"{contract['tag']}: {item} takes no {name!r}"
    for item, names in READS.items():
        for name in names:
            assert readable(contract, item, name), f"{contract['tag']}: {item} has no {name!r}"
    assert set(LLM_ARGS_USED) <= set(contract["items"]["TorchLlmArgs"]["fields"])


def test_the_calls_are_built_from_the_declared_names() -> None:
    kwargs, kv = llm_kwargs("/m", {"kv_cache_dtype": "fp8", "free_gpu_memory_fraction": 0.5, "dtype": "bf16"})
    assert kwargs == {"model": "/m", "dtype": "bfloat16"} and set(kwargs) <= set(KWARGS["LLM.__init__"]) | {"dtype"}
    assert kv == {"free_gpu_memory_fraction": 0.5, "dtype": "fp8"} and set(kv) <= set(KWARGS["KvCacheConfig"])
    assert set(sampling_kwargs(4, 5, 2, 0)) == set(SAMPLING_KEYS) == set(KWARGS["SamplingParams"])
    assert "end_id" not in sampling_kwargs(4, 5, None, None)
    given = object()
    assert llm_kwargs("/m", {"kv_cache_config": given})[1] is given  # a KvCacheConfig of the cell's own


def _model_dir(tmp_path: Path) -> str:
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": [2, 3], "pad_token_id": 0,
                                                      "torch_dtype": "bfloat16"}))
    return str(tmp_path)


def test_the_adapter_runs_against_a_stand_in_built_from_the_contract(
        contract: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, module in build(contract).items():
        monkeypatch.setitem(sys.modules, name, module)
    engine = TRTLLMEngine()
    params = {"dtype": "bf16", "tensor_parallel_size": 1, "max_seq_len": 64, "kv_cache_dtype": "auto"}
    info = engine.start(EngineSpec("tensorrt-llm", _model_dir(tmp_path), params))
    llm = engine._llm
    assert set(llm.given) == {"model", "dtype", "tensor_parallel_size", "max_seq_len", "kv_cache_config"}
    assert llm.given["kv_cache_config"].free_gpu_memory_fraction == 0.2
    assert (info.dtype, info.kv_cache_dtype, info.attention_backend) == ("bfloat16", "bfloat16", "TRTLLM")
    assert info.version == contract["tag"].lstrip("v") and info.extra["backend"] == "pytorch"
    gens = engine.generate([[1, 2, 3], [4, 5]], max_tokens=3, top_n=2)
    assert [len(g.token_ids) for g in gens] == [3, 3]
    assert all(len(step) == 2 and step[t] == -0.25 for g in gens for t, step in zip(g.token_ids, g.logprobs))
    sampling = llm.sampling[0]
    assert (sampling.end_id, sampling.pad_id, sampling.temperature, sampling.detokenize) == (2, 0, 0.0, False)
    engine.shutdown()
    assert llm.shut_down and engine._llm is None


def test_the_stand_in_rejects_what_the_contract_lacks(contract: dict[str, Any], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """So a keyword or attribute the adapter invented fails the test above, as it would fail on TensorRT-LLM."""
    modules = build(contract)
    root = modules["tensorrt_llm"]
    with pytest.raises(ValueError, match="invalid argument: made_up"):
        root.LLM("/m", made_up=1)
    with pytest.raises(ValueError, match="invalid argument: made_up"):
        root.SamplingParams(max_tokens=1, made_up=1)
    with pytest.raises(ContractViolation):
        getattr(root.LLM("/m").args, "made_up", None)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    with pytest.raises(EngineFailed, match="LLM.. failed: ValueError: LLM got invalid argument: enforce_eager"):
        TRTLLMEngine().start(EngineSpec("tensorrt-llm", _model_dir(tmp_path), {"enforce_eager": True}))


def test_the_trtllm_serve_command_line_uses_only_options_of_the_contract(contract: dict[str, Any]) -> None:
    spec = descriptor("tensorrt-llm").server
    serve = contract["items"]["trtllm-serve serve"]
    options = set(serve["options"])
    assert spec.argv[0] == "serve" and serve["arguments"] == ["model"]  # the command the contract describes
    assert {a for a in spec.argv if a.startswith("--")} <= options
    assert {f"--{name}" for name in spec.cli_options} <= options, sorted({f"--{n}" for n in spec.cli_options} - options)
    assert set(spec.cli_aliases.values()) <= spec.cli_options and set(spec.defaults) <= spec.cli_options
    assert spec.options_file_flag in options and "--trust_remote_code" in serve["flags"]


def test_the_parallel_parameters_are_llm_api_fields(contract: dict[str, Any]) -> None:
    parallel = descriptor("tensorrt-llm").parallel_params
    assert set(parallel) <= set(LLM_ARGS_USED) <= set(contract["items"]["TorchLlmArgs"]["fields"])


SOURCES = {
    "tensorrt_llm/llmapi/llm.py": """
class BaseLLM:
    def __init__(self, model, **kwargs):
        self.args = kwargs
    def generate(self, inputs, sampling_params=None, use_tqdm=True):
        pass
    def shutdown(self):
        pass
class LLM(BaseLLM):
    def __init__(self, model, dtype="auto", *, seed=None, **kwargs):
        super().__init__(model, **kwargs)
""",
    "tensorrt_llm/llmapi/llm_args.py": """
class StrictBaseModel(BaseModel):
    pass
class KvCacheConfig(StrictBaseModel):
    free_gpu_memory_fraction: Optional[float] = Field(default=None)
    dtype: str = "auto"
    _private: int = 0
    kind: ClassVar[str] = "kv"
class BaseLlmArgs(StrictBaseModel):
    model: str = Field()
    dtype: str = "auto"
    kv_cache_config: KvCacheConfig = Field(default_factory=KvCacheConfig)
class TorchLlmArgs(BaseLlmArgs):
    attn_backend: str = "TRTLLM"
    _quant: int = PrivateAttr(default=None)
""",
    "tensorrt_llm/sampling_params.py": """
@dataclass(slots=True, kw_only=True)
class SamplingParams:
    max_tokens: int = 32
    _words: list = field(default=None, init=False)
    _flag: bool = False
""",
    "tensorrt_llm/executor/result.py": """
@dataclass(slots=True)
class Logprob:
    logprob: float
class GenerationResultBase:
    def __init__(self, id):
        self.id = id
    @property
    def outputs(self):
        return []
@dataclass
class CompletionOutput:
    token_ids: list = field(default_factory=list)
""",
    "tensorrt_llm/commands/serve.py": """
@main.command("serve")
@click.argument("model", type=str)
@click.option("--tensor_parallel_size", "--tp_size", type=int, default=1)
@click.option("--trust_remote_code", is_flag=True, default=False)
def serve(model, **kwargs):
    pass
""",
}


def test_the_tool_extracts_signatures_fields_and_options_with_ast(tmp_path: Path) -> None:
    tool = _tool()
    for rel, text in SOURCES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    out = tmp_path / "c.json"
    assert tool.main([str(tmp_path), "--tag", "v0.0.1", "--commit", "abc", "-o", str(out)]) == 0
    doc = _load(out)
    items = doc["items"]
    assert (doc["tag"], doc["commit"], "tensorrt_llm" in sys.modules) == ("v0.0.1", "abc", False)
    assert items["LLM.__init__"] == {"path": "tensorrt_llm/llmapi/llm.py", "class": "LLM", "params": ["model", "dtype"],
                                     "keyword_only": ["seed"], "var_keyword": True}
    assert items["LLM.generate"]["params"] == ["inputs", "sampling_params", "use_tqdm"]
    assert items["LLM.shutdown"]["params"] == []
    assert items["KvCacheConfig"]["fields"] == ["free_gpu_memory_fraction", "dtype"]
    args = items["TorchLlmArgs"]
    assert args["fields"] == ["kv_cache_config", "dtype", "attn_backend"] and args["subset"]
    assert args["missing"] == [n for n in LLM_ARGS_USED if n not in ("kv_cache_config", "dtype", "attn_backend")]
    assert items["SamplingParams"]["fields"] == ["max_tokens", "_flag"]  # a dataclass keeps `_x` unless init=False
    assert items["RequestOutput"]["attributes"] == ["outputs"] and items["RequestOutput"]["missing"] == []
    assert items["Logprob"]["fields"] == ["logprob"] and items["CompletionOutput"]["fields"] == ["token_ids"]
    assert items["trtllm-serve serve"] == {"path": "tensorrt_llm/commands/serve.py", "arguments": ["model"],
                                           "options": ["--tensor_parallel_size", "--tp_size", "--trust_remote_code"],
                                           "flags": ["--trust_remote_code"]}


def test_the_tool_marks_what_the_sources_lack(tmp_path: Path) -> None:
    items = _tool().extract(tmp_path)
    assert all(entry["missing"] for entry in items.values())
