"""What the project knows about each engine, in one place: one `EngineDescriptor` per engine, registered here.

Every other module asks this registry (names, aliases, the distribution that carries an engine's version, the
module to probe before spawning a child, how to start its OpenAI-compatible server, which `--help` lists its flags,
which environment variables concern it) instead of keeping its own list. A new engine is its adapter module plus
one `register(EngineDescriptor(...))` call below (docs/extending.md, "Add an engine").

Nothing here imports an engine, torch or an adapter module: adapters are imported only when `create()` asks.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DTYPE_ALIASES: Mapping[str, str] = {
    "fp32": "float32",
    "float": "float32",
    "float32": "float32",
    "torch.float32": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float16": "float16",
    "torch.float16": "float16",
    "auto": "auto",
    "fp8": "fp8",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "float8_e4m3fn": "fp8",
}
"""Spellings of a dtype -> the one name reports and thresholds use (every engine's dtype goes through it)."""


@dataclass(frozen=True)
class HarnessDefault:
    """A setting the harness gives an engine when the cell does not, and why: every one differs from how the engine
    ships, so every cell started with it records it among its `deviations` (engines/deviations.py)."""

    value: Any
    why: str


@dataclass(frozen=True)
class ServerCommand:
    """How the `openai` engine starts this engine's OpenAI-compatible server on {host}:{port} for {model}.

    The command is `executable` when it is on PATH, else `fallback` (placeholders {python}, {model}, {host},
    {port}); with neither, the server cannot start here. `argv` follows the head. Settings (the cell's params over
    `defaults`) become `--flags` in `flag_style` ("dash": --max-model-len, "underscore": --max_model_len); when
    `cli_options` is given only those go on the command line and the rest into a YAML file passed with
    `options_file_flag`; `cli_aliases` first renames settings that have another spelling. `embed_settings` are set
    for `task: embed` (None: this server cannot embed); `request_extras` go into every completion request;
    `pooling` names what its embeddings pool. `defaults` and `env_defaults` are declared with their reasons, like
    an engine's `harness_defaults`, and recorded as deviations of every cell that runs the server.
    """

    argv: tuple[str, ...]
    executable: str | None = None
    fallback: tuple[str, ...] = ()
    flag_style: str = "dash"
    defaults: Mapping[str, HarnessDefault] = field(default_factory=dict)
    env_defaults: Mapping[str, HarnessDefault] = field(default_factory=dict)
    cli_options: frozenset[str] | None = None
    cli_aliases: Mapping[str, str] = field(default_factory=dict)
    options_file_flag: str | None = None
    embed_settings: Mapping[str, Any] | None = None
    request_extras: Mapping[str, Any] = field(default_factory=dict)
    pooling: str | None = None


@dataclass(frozen=True)
class GpuMemory:
    """How much of one GPU an engine holds once started, so cells can share a GPU without running it out of memory
    (packing.py). The engine's own memory setting decides: the first of `params` the cell sets, else `default`, as a
    fraction of the GPU's total memory; plus the checkpoint's weights when `weights` (transformers holds nothing
    else; TensorRT-LLM's fraction is of the memory left after them); plus `overhead_mib` (CUDA context, activations).

    `measures_free_memory`: its start sizes its cache from what it measures on the GPU (vLLM profiles a forward pass,
    SGLang and TensorRT-LLM take fractions of the free memory), so on a shared GPU nobody else may start or stop an
    engine meanwhile (ledger.StartGate's quiet hold). `cache_bytes`: the setting that gives it its cache size in
    bytes instead (vLLM's `kv_cache_memory_bytes`, from `cache_bytes_since`), with which its start measures
    nothing and may overlap others'; None: it has none.
    """

    params: tuple[str, ...] = ()
    default: float = 0.0
    weights: bool = False
    overhead_mib: float = 0.0
    measures_free_memory: bool = False
    cache_bytes: str | None = None
    cache_bytes_since: str | None = None


@dataclass(frozen=True)
class CompileCache:
    """What keys the kernels an engine compiles at its first start into caches on disk (torch.compile, CUDA graphs'
    Triton kernels, JIT kernels), so that workers sharing a GPU compile a configuration once and the others start
    from the filled caches (gpushare/first_start.py) instead of compiling the same thing at once.

    The key is the engine, its installed release, the model and every setting of the cell except `ignores` (settings
    the caches are not keyed by: memory sizes, seeds, the harness's own bookkeeping): a setting not listed keys it,
    so an unknown one costs a needless wait at worst, never a start from a cache filled for something else.
    `uncompiled`: settings with which the start compiles nothing worth waiting for (no key, no wait).
    """

    ignores: tuple[str, ...] = ()
    uncompiled: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineDescriptor:
    """Everything the harness needs to know about one engine; the adapter itself knows how to drive it.

    name:            the registry name used in matrices, ids, reports and KB rules ("tensorrt-llm").
    adapter:         "package.module:Class", imported only when the engine is created.
    distribution:    the distribution whose installed version is the engine's version (importlib.metadata).
    aliases:         other spellings accepted for `name` (compared lower-cased).
    module:          top-level module the adapter imports first; probed (find_spec) before spawning a child, so a
                     missing engine skips at once. None: nothing to probe.
    in_process:      run in the pytest process by default (the reference) rather than in an isolated child.
    kb:              KB rules may name this engine (`engine:` of a rule).
    dtype_aliases:   extra dtype spellings this engine accepts, over DTYPE_ALIASES.
    help_commands:   commands whose output lists the engine's CLI flags (`gpucompat rules --lint`).
    env_prefixes:    prefixes of the environment variables that configure it (VLLM_, SGLANG_, ...): the fingerprint
                     records them (`env`, environment.py) and an isolated child logs them.
    packages:        distributions recorded in the fingerprint for it (first name found wins).
    acceleration:    kernel distributions that change which backends it picks (FlashInfer, FlashAttention, ...): the
                     fingerprint's `installs` records those installed, with their versions.
    parallel_params: the parameters whose product is the number of GPUs a cell needs.
    server:          how the `openai` engine starts its OpenAI-compatible server; None: it has none.
    gpu_memory:      the GPU memory it holds once started (GpuMemory); None: unknown, so it gets a GPU to itself
                     when cells share GPUs (the `openai` engine counts as the server it starts).
    harness_defaults: the engine settings the harness gives it when the cell does not (HarnessDefault: value and
                     why); everything else runs with the engine's own defaults. Each is a recorded deviation.
    harness_env:     environment variables the harness sets for it when neither the environment nor the cell does;
                     recorded the same way. Empty for every engine shipped here: an engine runs as installed.
    command_markers: the engine's own commands, as a command line starts them (`gpucompat check --args`,
                     kb.launch): two words ("vllm serve"), a module run with `python -m` ("sglang.launch_server"),
                     or a program ("trtllm-build"); the words after it are the engine's arguments.
    setting_aliases: a flag's name read without a release's flags -> the setting the knowledge base names (the
                     engine's Python keyword): the short forms users type (`-tp`), a build tool's flags.
    python_calls:    the Python calls that take its settings as keyword arguments (`LLM(model=..., dtype=...)`).
    images:          the container images whose entrypoint is the engine's server (`docker run IMAGE ARGS`), by
                     repository; a tag that is a release (`:v0.6.3`) names the engine's version.
    cli_underscores: its command line takes `--max_model_len` for `--max-model-len` (vLLM's parser does; plain
                     argparse does not).
    default_server:  set for an engine that drives an OpenAI-compatible server instead of a GPU of its own: the
                     registered engine whose server it starts when the cell's `server` parameter names none. Its GPU
                     need is the need of the server it starts (nothing for a cell's `endpoint`, a server running
                     elsewhere, which `--gpucompat-endpoint` gives its cells), and reports name that server.
    reference:       it computes the float32 references the precision checks compare every engine with (one engine
                     does; `reference_name()`).
    default_dtype:   the dtype it loads the weights in when the cell sets none, so their size can be told before it
                     starts; None: the checkpoint's own.
    stack_packages:  distributions the fingerprint records because of this engine besides its `packages`, by key
                     (the names that may carry each, the first installed wins): the library it is when that is not
                     keyed by the engine's name, the runtime or kernels only it uses.
    compile_cache:   what keys what its first start compiles into caches on disk (CompileCache); None: it compiles
                     nothing at start that another start of the same configuration could reuse.
    """

    name: str
    adapter: str
    distribution: str
    aliases: tuple[str, ...] = ()
    module: str | None = None
    in_process: bool = False
    kb: bool = False
    dtype_aliases: Mapping[str, str] = field(default_factory=dict)
    help_commands: tuple[tuple[str, ...], ...] = ()
    env_prefixes: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()
    acceleration: tuple[str, ...] = ()
    parallel_params: tuple[str, ...] = ()
    server: ServerCommand | None = None
    gpu_memory: GpuMemory | None = None
    harness_defaults: Mapping[str, HarnessDefault] = field(default_factory=dict)
    harness_env: Mapping[str, HarnessDefault] = field(default_factory=dict)
    command_markers: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    setting_aliases: Mapping[str, str] = field(default_factory=dict)
    python_calls: tuple[str, ...] = ()
    cli_underscores: bool = False
    default_server: str | None = None
    reference: bool = False
    default_dtype: str | None = None
    stack_packages: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    compile_cache: CompileCache | None = None


_REGISTRY: dict[str, EngineDescriptor] = {}
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|CREDENTIAL|AUTH", re.IGNORECASE)
"""Environment variable names whose values are credentials: never logged, redacted in fingerprints."""
_ALIASES: dict[str, str] = {}


def register(descriptor: EngineDescriptor) -> EngineDescriptor:
    """Add an engine; its name and aliases must be new."""
    for key in (descriptor.name, *descriptor.aliases):
        key = key.strip().lower()
        if key in _REGISTRY or key in _ALIASES:
            raise ValueError(f"engine name {key!r} is already registered")
    _REGISTRY[descriptor.name] = descriptor
    _ALIASES.update({alias.strip().lower(): descriptor.name for alias in descriptor.aliases})
    return descriptor


def engine_names() -> tuple[str, ...]:
    """Every registered engine, in registration order."""
    return tuple(_REGISTRY)


def descriptors() -> tuple[EngineDescriptor, ...]:
    return tuple(_REGISTRY.values())


def canonical_name(name: str) -> str:
    """The registry name for `name` (aliases such as `trtllm` accepted); import paths are returned unchanged."""
    if ":" in name:
        return name
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _REGISTRY:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(_REGISTRY)}")
    return key


def descriptor(name: str) -> EngineDescriptor | None:
    """The descriptor of a registry name or alias; None for an import-path engine ("pkg.mod:Factory")."""
    return None if ":" in name else _REGISTRY[canonical_name(name)]


def quiet_start(name: str, params: Mapping[str, Any]) -> bool:
    """Whether starting `name` with `params` needs a quiet GPU (ledger.StartGate): it sizes its cache from what it
    measures there and is not given the size (`GpuMemory.cache_bytes`). An engine whose memory is unknown (by
    import path, a server it starts) counts as one that measures, unless its cell reaches a server elsewhere."""
    try:
        found = descriptor(name)
    except ValueError:
        return True
    memory = found.gpu_memory if found is not None else None
    if memory is None:
        return not params.get("endpoint")
    given = memory.cache_bytes is not None and params.get(memory.cache_bytes) is not None
    return memory.measures_free_memory and not given


def runs_in_process(name: str) -> bool:
    """Whether `name` runs in the pytest process unless its spec says otherwise (import paths: isolated)."""
    found = descriptor(name)
    return found is not None and found.in_process


def _known(name: str) -> EngineDescriptor | None:
    """The descriptor of a registered name or alias; None for an import path or a name nobody registered (a cell
    of a report from elsewhere), which then has none of the properties asked below."""
    try:
        return descriptor(name)
    except ValueError:
        return None


def reference_name() -> str:
    """The engine that computes the float32 references (the descriptor with `reference`), so that the harness
    starts the reference without naming an engine."""
    return next(d.name for d in _REGISTRY.values() if d.reference)


def drives_server(name: str) -> bool:
    """Whether `name` drives an OpenAI-compatible server rather than a GPU of its own (its descriptor's
    `default_server`): the run's `--gpucompat-endpoint` is for its cells, and its need is its server's."""
    found = _known(name)
    return found is not None and found.default_server is not None


def default_dtype(name: str) -> str | None:
    """The dtype `name` loads weights in when a cell sets none (its descriptor's `default_dtype`); None: the
    checkpoint's own, or an engine the registry does not know."""
    found = _known(name)
    return found.default_dtype if found is not None else None


def stack_packages() -> dict[str, tuple[str, ...]]:
    """Every registered engine's `stack_packages`, in registration order: the distributions the fingerprint
    records because of an engine, under their own keys."""
    return {key: names for d in _REGISTRY.values() for key, names in d.stack_packages.items()}


def kb_engine_names() -> tuple[str, ...]:
    """The engines KB rules may name (`engine:` in matrices/rules/*.yaml): vllm, sglang, tensorrt-llm."""
    return tuple(d.name for d in _REGISTRY.values() if d.kb)


def kb_engine_of(engine: str | None, params: Mapping[str, Any]) -> str | None:
    """The engine a knowledge-base rule would name for a cell: the cell's own, or the engine whose server an
    `openai` cell starts (its `server` parameter); unchanged when neither is one rules may name."""
    names = kb_engine_names()
    if engine in names:
        return engine
    server = params.get("server")
    if isinstance(server, str) and server.strip().lower() in names:
        return server.strip().lower()
    return engine


def server_names() -> tuple[str, ...]:
    """Engines whose OpenAI-compatible server the `openai` engine can start."""
    return tuple(d.name for d in _REGISTRY.values() if d.server is not None)


def tracked_packages() -> dict[str, tuple[str, ...]]:
    """Fingerprint key (the engine's name) -> the distribution names that may carry it, for engines whose version
    the fingerprint records."""
    return {d.name: d.packages for d in _REGISTRY.values() if d.packages}


def help_commands(name: str) -> tuple[tuple[str, ...], ...]:
    """The commands whose `--help` lists the engine's flags; () for an unknown engine."""
    try:
        found = descriptor(name)
    except ValueError:
        return ()
    return found.help_commands if found is not None else ()


def env_prefixes() -> tuple[str, ...]:
    """Every registered engine's `env_prefixes`, in registration order, each once."""
    return tuple(dict.fromkeys(p for d in _REGISTRY.values() for p in d.env_prefixes))


def engine_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of `environ` (default os.environ) that configure a registered engine, sorted by name; names
    that look like credentials (SECRET_NAME: TOKEN, KEY, SECRET, PASSWORD, CREDENTIAL, AUTH) are left out."""
    env = os.environ if environ is None else environ
    prefixes = env_prefixes()
    return {k: env[k] for k in sorted(env)
            if prefixes and k.startswith(prefixes) and not SECRET_NAME.search(k)}


def normalize_dtype(value: Any, engine: str | None = None) -> str:
    """`bf16`, `torch.bfloat16`, `bfloat16` -> `bfloat16` (and so on); unknown strings pass through lower-cased.
    With `engine`, that engine's own spellings (its descriptor's dtype_aliases) are known too."""
    text = str(value).strip().lower()
    if engine is not None and ":" not in engine:
        found = _REGISTRY.get(_ALIASES.get(engine, engine))
        if found is not None and text in found.dtype_aliases:
            return found.dtype_aliases[text]
    return DTYPE_ALIASES.get(text, text)


# --------------------------------------------------------------------------------------------------------------
# The engines. Order is the order of ENGINE_NAMES (ids, reports).

_SEED = HarnessDefault(0, "a fixed seed: greedy outputs are compared across runs and runners")
_VLLM_MEMORY = HarnessDefault(0.2, "vLLM takes most of the GPU by default (0.92 in 0.26); 20% leaves room for the "
                                   "reference and for cells that share the GPU (the tiny models need far less)")
_SGLANG_MEMORY = HarnessDefault(0.2, "SGLang sizes its static pool from the GPU's free memory (about 80-90% by "
                                     "default); 20% leaves room for the reference and for cells that share the GPU")

register(EngineDescriptor(
    name="hf",
    adapter="pytest_gpucompat.engines.hf:HFEngine",
    distribution="transformers",
    aliases=("transformers", "huggingface"),
    in_process=True,
    reference=True,
    default_dtype="float32",  # engines/hf.py: the reference runs float32 unless the cell says otherwise
    stack_packages={"transformers": ("transformers",)},  # keyed by its library's name, as reports show it
    env_prefixes=("HF_", "TRANSFORMERS_"),
    gpu_memory=GpuMemory(weights=True, overhead_mib=1024.0),  # weights in the cell's dtype; context, activations
))

register(EngineDescriptor(
    name="vllm",
    adapter="pytest_gpucompat.engines.vllm:VLLMEngine",
    distribution="vllm",
    module="vllm",
    kb=True,
    help_commands=(("vllm", "--help"), ("vllm", "serve", "--help=all")),
    command_markers=("vllm serve", "vllm.entrypoints"),
    images=("vllm/vllm-openai",),
    setting_aliases={"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size", "dp": "data_parallel_size",
                     "q": "quantization"},
    python_calls=("LLM", "EngineArgs", "AsyncEngineArgs"),
    cli_underscores=True,  # vllm/utils FlexibleArgumentParser turns --max_model_len into --max-model-len
    env_prefixes=("VLLM_",),
    packages=("vllm",),
    # flash-attn: ViT attention; deep-gemm: FP8 block GEMMs; nvidia-cutlass-dsl: the CuTe-DSL (FA4) kernels
    acceleration=("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "flash-attn", "xformers",
                  "deep-gemm", "nvidia-cutlass-dsl", "triton"),
    parallel_params=("tensor_parallel_size", "pipeline_parallel_size"),
    # its cap on what it allocates (engines/vllm.py's default), and the CUDA context the cap may leave out
    gpu_memory=GpuMemory(("gpu_memory_utilization",), 0.2, overhead_mib=512.0, measures_free_memory=True,
                         cache_bytes="kv_cache_memory_bytes", cache_bytes_since="0.10.2"),
    harness_defaults={"gpu_memory_utilization": _VLLM_MEMORY, "seed": _SEED},
    # torch.compile's cache under VLLM_CACHE_ROOT, keyed by the config's hash, which leaves out the memory sizes
    # (config/cache.py compute_hash) and the seed (config/model.py); enforce_eager sets compilation mode and CUDA
    # graphs to none (config/vllm.py, 0.26.0)
    compile_cache=CompileCache(ignores=("gpu_memory_utilization", "kv_cache_memory_bytes", "seed"),
                               uncompiled={"enforce_eager": True}),
    server=ServerCommand(  # vllm/entrypoints/cli/serve.py: EngineArgs fields as --dashed-flags
        argv=("serve", "{model}", "--host", "{host}", "--port", "{port}"),
        executable="vllm",
        fallback=("{python}", "-m", "vllm.entrypoints.cli.main"),
        defaults={"gpu_memory_utilization": _VLLM_MEMORY, "seed": _SEED},
        embed_settings={"runner": "pooling", "pooler_config": {"pooling_type": "MEAN"}},
        request_extras={"ignore_eos": True, "return_tokens_as_token_ids": True, "return_token_ids": True},
        pooling="mean",
    ),
))

register(EngineDescriptor(
    name="sglang",
    adapter="pytest_gpucompat.engines.sglang:SGLangEngine",
    distribution="sglang",
    module="sglang",
    kb=True,
    help_commands=((sys.executable, "-m", "sglang.launch_server", "--help"),),
    command_markers=("sglang.launch_server", "sglang serve", "sglang.bench_one_batch", "sglang.bench_serving"),
    images=("lmsysorg/sglang",),
    setting_aliases={"tp": "tp_size", "tensor_parallel_size": "tp_size", "dp": "dp_size",
                     "data_parallel_size": "dp_size", "pp": "pp_size", "pipeline_parallel_size": "pp_size",
                     "model_path": "model"},
    python_calls=("Engine", "ServerArgs"),
    env_prefixes=("SGLANG_", "SGL_"),
    packages=("sglang",),
    stack_packages={"sglang-kernel": ("sglang-kernel", "sgl-kernel")},  # its kernels, sgl-kernel before 0.3.x
    acceleration=("sglang-kernel", "sgl-kernel", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache",
                  "deep-gemm", "nvidia-cutlass-dsl", "triton"),  # sgl-kernel: sglang-kernel's name before 0.3.x
    parallel_params=("tp_size", "pp_size", "dp_size"),
    # weights + KV pool; activations apart
    gpu_memory=GpuMemory(("mem_fraction_static",), 0.2, overhead_mib=1024.0, measures_free_memory=True),
    harness_defaults={
        "mem_fraction_static": _SGLANG_MEMORY,
        "random_seed": _SEED,
        "log_level": HarnessDefault("info", "the Engine logs only errors by default: a failed cell's log tail would "
                                            "say nothing"),
    },
    # its start captures CUDA graphs, running (so compiling) its Triton and JIT kernels; without graphs they compile
    # at the first request instead (rule sglang-0.5.16-first-request-compiles-kernels), after the start: nothing
    # for another start to wait for
    compile_cache=CompileCache(ignores=("mem_fraction_static", "random_seed", "log_level"),
                               uncompiled={"disable_cuda_graph": True}),
    server=ServerCommand(  # sglang/launch_server.py: ServerArgs fields as --dashed-flags
        argv=("--model-path", "{model}", "--host", "{host}", "--port", "{port}"),
        fallback=("{python}", "-m", "sglang.launch_server"),
        defaults={"mem_fraction_static": _SGLANG_MEMORY, "random_seed": _SEED},
        embed_settings={"is_embedding": True},
        request_extras={"ignore_eos": True},
        pooling="last",
    ),
))

_TRTLLM_MEMORY = HarnessDefault(0.2, "TensorRT-LLM gives its KV cache 90% of the memory free after the weights by "
                                     "default; 20% leaves room for the reference and for cells that share the GPU")

register(EngineDescriptor(
    name="tensorrt-llm",
    adapter="pytest_gpucompat.engines.trtllm:TRTLLMEngine",
    distribution="tensorrt-llm",
    aliases=("trtllm", "tensorrt_llm", "trt-llm"),
    module="tensorrt_llm",
    kb=True,
    help_commands=(("trtllm-build", "--help"), ("trtllm-serve", "serve", "--help")),
    command_markers=("trtllm-serve", "trtllm-build", "trtllm-bench", "trtllm-llmapi-launch",
                     "convert_checkpoint.py"),
    images=("nvidia/tensorrt-llm/release",),
    setting_aliases={"tp_size": "tensor_parallel_size", "pp_size": "pipeline_parallel_size",
                     "cp_size": "context_parallel_size", "qformat": "quantization"},
    python_calls=("LLM",),
    env_prefixes=("TRTLLM_", "TLLM_"),
    packages=("tensorrt-llm",),
    stack_packages={"tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu13")},  # the runtime under it
    acceleration=("flashinfer-python", "deep-gemm", "nvidia-cutlass-dsl", "triton"),
    parallel_params=("tensor_parallel_size", "pipeline_parallel_size"),
    # its KV cache takes this fraction of the memory free after the weights: at most this fraction of the total
    gpu_memory=GpuMemory(("free_gpu_memory_fraction", "kv_cache_free_gpu_memory_fraction"), 0.2, weights=True,
                         overhead_mib=1024.0, measures_free_memory=True),
    harness_defaults={"free_gpu_memory_fraction": _TRTLLM_MEMORY},
    server=ServerCommand(  # tensorrt_llm/commands/serve.py: click options with underscores (catalog/contracts/)
        argv=("serve", "{model}", "--host", "{host}", "--port", "{port}"),
        executable="trtllm-serve",
        flag_style="underscore",
        defaults={"backend": HarnessDefault("pytorch", "the LLM API's backend, the same as the offline cells"),
                  "kv_cache_free_gpu_memory_fraction": _TRTLLM_MEMORY},
        cli_options=frozenset({  # the options of `trtllm-serve serve` in every release of the contracts
            "tokenizer", "backend", "log_level", "max_beam_width", "max_batch_size", "max_num_tokens", "max_seq_len",
            "tp_size", "pp_size", "gpus_per_node", "kv_cache_free_gpu_memory_fraction", "trust_remote_code",
            "num_postprocess_workers", "reasoning_parser",
        }),
        cli_aliases={"free_gpu_memory_fraction": "kv_cache_free_gpu_memory_fraction"},
        options_file_flag="--extra_llm_api_options",
        request_extras={"ignore_eos": True, "detokenize": False},
    ),
))

register(EngineDescriptor(
    name="openai",
    adapter="pytest_gpucompat.engines.openai:OpenAIEngine",
    distribution="requests",
    aliases=("openai-compatible",),
    default_server="vllm",
))
