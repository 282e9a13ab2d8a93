"""Tiny local models with real architectures and random weights, so engine checks never download anything.

A model is built once from its transformers config and a fixed seed, written to a temporary directory and renamed
into the cache: parallel pytest-xdist workers either win the rename or reuse the winner's directory.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..common.inputs import read_json
from ..common.paths import cache_dir as _default_cache_root
from ..common.paths import check_cache_entry
from ..common.progress import quiet_progress_bars

FORMAT_VERSION = 3
"""Bumped whenever the on-disk layout or the built models change, so old cache entries are not reused (3: the tiny
models got head size 128, their architectures' rope and norm settings, and `qwen2-1m` head size 64)."""

TINY_PREFIX = "tiny-"
"""`--gpucompat-model tiny-qwen2` names a built tiny model rather than a directory."""
BUILD_MARKER = "gpucompat-model.json"
"""Written into every built model: what built it and how it is prompted (tiny: fixed token ids, sized: text)."""

SIZES: dict[str, dict[str, Any]] = {
    # `--gpucompat-model qwen2-300m`: a model of about that many parameters with a trained byte-level BPE tokenizer
    # and a chat template (pytest_gpucompat.workload.bpe), weights stored in bfloat16 like a served checkpoint's.
    # Head size 64 like the 300m one (hidden 256 / 4 heads), 2 KV heads; the 300m size is left as first built, so
    # the golden files recorded for it stay valid.
    "1m": {"hidden_size": 256, "head_dim": 64, "intermediate_size": 192, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 2048},
    "300m": {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 26, "num_attention_heads": 16,
             "num_key_value_heads": 4, "max_position_embeddings": 4096},
}

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
UNK_ID, BOS_ID, EOS_ID, PAD_ID = 0, 1, 2, 3
FIRST_REGULAR_ID = len(SPECIAL_TOKENS)

_SENTENCES = (
    "the quick brown fox jumps over the lazy dog",
    "a graphics processing unit runs many small programs at once",
    "inference engines batch requests and cache keys and values",
    "every kernel must agree with the reference within a tolerance",
    "memory that is not returned after shutdown is a leak",
    "drivers toolkits and wheels must match or nothing starts",
    "greedy decoding picks the most likely next token each step",
    "precision drift shows first in the log probabilities",
)

_COMMON_CONFIG: dict[str, Any] = {
    "vocab_size": 512,
    "max_position_embeddings": 512,
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "pad_token_id": PAD_ID,
    "use_cache": True,
}

_BASE_CONFIG: dict[str, Any] = {
    **_COMMON_CONFIG,
    # The head size of served models (attention kernels such as FlashAttention 3 and FlashInfer are chosen by it),
    # given explicitly and as hidden_size / num_attention_heads, for readers that derive it; grouped-query attention
    # 2:1; two layers and an MLP no wider than the hidden size keep it fast on a CPU (3.7 M parameters).
    "hidden_size": 4 * 128,
    "head_dim": 128,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}

_ARCHES: dict[str, tuple[str, str]] = {
    # arch -> (transformers config class, architecture name written to config.json)
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
}

_ARCH_CONFIG: dict[str, dict[str, Any]] = {
    # The settings of each architecture's released checkpoints (their config.json; transformers' config classes
    # default to rope_theta 10000, rms_norm_eps 1e-6 and, for Mistral, the v0.1 sliding window of 4096):
    # Qwen2 / Qwen2.5 (Qwen2.5-7B-Instruct): rope_theta 1e6, rms_norm_eps 1e-6, no sliding window in use;
    "qwen2": {"rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "use_sliding_window": False},
    # Llama 3 (Meta-Llama-3-8B): rope_theta 500000, rms_norm_eps 1e-5, no rope scaling (3.1 added it);
    "llama": {"rope_theta": 500000.0, "rms_norm_eps": 1e-5},
    # Mistral 7B v0.2 / v0.3: rope_theta 1e6, rms_norm_eps 1e-5, sliding window removed (null).
    "mistral": {"rope_theta": 1000000.0, "rms_norm_eps": 1e-5, "sliding_window": None},
}

TINY_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # `--gpucompat-model tiny-NAME` -> (architecture, config overrides): the other head size kernels specialize on
    "qwen2-h64": ("qwen2", {"hidden_size": 4 * 64, "head_dim": 64, "intermediate_size": 256}),
}

_SIZED_CONFIG: dict[str, Any] = {**_COMMON_CONFIG, "rms_norm_eps": 1e-6, "rope_theta": 10000.0}
"""The base of the sized models (SIZES overrides the shape): rope and norm settings as they were first built."""

DEFAULT_SEED = 1234
INIT: dict[str, float] = {"embed_std": 1.0, "linear_gain": 0.5, "head_gain": 4.0}
"""Random-weight scales. Embeddings N(0, 1); hidden linears N(0, (0.5 / sqrt(fan_in))^2), so each block adds a
moderate update to the residual stream; lm_head N(0, (4 / sqrt(hidden))^2), so next-token distributions are
peaked (top-1 logprob about -1) rather than flat: with flat distributions every greedy step is a near-tie and
precision checks measure noise. Calibrated on CPU, see matrices/thresholds.yaml."""


def tiny_names() -> list[str]:
    """What `--gpucompat-model tiny-NAME` builds: one per architecture, then the variants."""
    return [*_ARCHES, *TINY_VARIANTS]


def _tiny_arch(name: str) -> tuple[str, dict[str, Any]]:
    """(architecture, config overrides) of a tiny model's name: an architecture, or a variant of TINY_VARIANTS."""
    if name in TINY_VARIANTS:
        arch, overrides = TINY_VARIANTS[name]
        return arch, dict(overrides)
    if name not in _ARCHES:
        raise ValueError(f"unknown tiny model architecture {name!r}; known: {', '.join(tiny_names())}")
    return name, {}


def tiny_config(arch: str = "qwen2", **overrides: Any) -> dict[str, Any]:
    """The plain config dict of a tiny model (what the cache key is computed from); ``arch`` may name a variant."""
    arch, variant = _tiny_arch(arch)
    config = {**_BASE_CONFIG, **_ARCH_CONFIG[arch], **variant, **overrides}
    return _checked(config)


def _sized_config(arch: str, **overrides: Any) -> dict[str, Any]:
    if arch not in _ARCHES:
        raise ValueError(f"unknown tiny model architecture {arch!r}; known: {', '.join(_ARCHES)}")
    return _checked({**_SIZED_CONFIG, **overrides})


def _checked(config: dict[str, Any]) -> dict[str, Any]:
    if config["vocab_size"] < FIRST_REGULAR_ID + len(_words()):
        raise ValueError(f"vocab_size {config['vocab_size']} is too small for the tiny tokenizer")
    return config


def _words() -> list[str]:
    seen: dict[str, None] = {}
    for sentence in _SENTENCES:
        for word in sentence.split():
            seen.setdefault(word, None)
    return list(seen)


def tiny_vocab(vocab_size: int) -> dict[str, int]:
    """Special tokens, the words of the built-in sentences, then filler words up to exactly vocab_size.

    Every id decodes to a distinct string, so text-keyed logprobs (some OpenAI servers) map back to ids.
    """
    vocab: dict[str, int] = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for word in _words():
        vocab.setdefault(word, len(vocab))
    filler = 0
    while len(vocab) < vocab_size:
        vocab.setdefault(f"w{filler:04d}", len(vocab))
        filler += 1
    return vocab


def _cache_key(arch: str, config: Mapping[str, Any], seed: int) -> str:
    payload = json.dumps(
        {"format": FORMAT_VERSION, "arch": arch, "config": dict(config), "seed": seed, "init": INIT,
         "sentences": _SENTENCES},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def _cache_root(cache_dir: Path | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else _default_cache_root() / "models"


def build_tiny_model(
    arch: str = "qwen2",
    cache_dir: Path | None = None,
    *,
    seed: int = DEFAULT_SEED,
    **config_overrides: Any,
) -> Path:
    """Directory of a tiny `arch` model (float32 safetensors + tokenizer), built once and cached on disk; `arch` is
    an architecture (`qwen2`) or a variant (`qwen2-h64`, TINY_VARIANTS)."""
    name = arch
    arch = _tiny_arch(name)[0]
    config = tiny_config(name, **config_overrides)

    def write(target: Path) -> None:
        _write_model(target, arch, config, seed)
        _write_tokenizer(target, config)
        _write_marker(target, f"{TINY_PREFIX}{name}", "token-ids")

    return _build_once(_cache_root(cache_dir) / f"{name}-{_cache_key(arch, config, seed)}", write)


def build_sized_model(arch: str, size: str, cache_dir: Path | None = None, *, seed: int = DEFAULT_SEED) -> Path:
    """Directory of an `arch` model of `size` (a key of SIZES): random weights from `seed` in bfloat16, a byte-level
    BPE tokenizer trained on the built-in text, a ChatML chat template; built once and cached like a tiny model.
    The 300m size takes a minute and 2 GB of memory to build: meant for GPU runners."""
    from . import bpe

    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; known: {', '.join(SIZES)}")
    base = _sized_config(arch, **SIZES[size])  # the architecture check and its message
    key = _cache_key(arch, {**base, "tokenizer": bpe.corpus_digest(), "dtype": "bfloat16"}, seed)

    def write(target: Path) -> None:
        built = bpe.write_tokenizer(target, SIZES[size]["max_position_embeddings"])
        config = _sized_config(arch, **SIZES[size], vocab_size=built.vocab_size, bos_token_id=built.bos_id,
                               eos_token_id=built.eos_id, pad_token_id=built.pad_id)
        _write_model(target, arch, config, seed, dtype="bfloat16")
        _write_marker(target, f"{arch}-{size}", "text")

    return _build_once(_cache_root(cache_dir) / f"{arch}-{size}-{key}", write)


def _write_marker(target: Path, name: str, prompts: str) -> None:
    marker = {"builder": "pytest-gpucompat", "format": FORMAT_VERSION, "name": name, "prompts": prompts}
    (target / BUILD_MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")


def build_perturbed_model(
    base: Path,
    rel_noise: float,
    *,
    seed: int = 1,
    cache_dir: Path | None = None,
) -> Path:
    """A copy of `base` whose every weight w became w * (1 + rel_noise * N(0, 1)): a known, small corruption that
    the precision checks must detect (the detection benchmark and the self-tests use it)."""
    import torch
    from safetensors.torch import load_file, save_file

    base = Path(base)
    digest = hashlib.sha256(f"{base.resolve()}|{rel_noise!r}|{seed}|{FORMAT_VERSION}".encode()).hexdigest()[:12]

    def write(target: Path) -> None:
        generator = torch.Generator().manual_seed(seed)
        for item in base.iterdir():
            if item.suffix == ".safetensors":
                tensors = load_file(str(item))
                noisy = {}
                for name in sorted(tensors):
                    t = tensors[name]
                    if t.is_floating_point():
                        noise = torch.randn(t.shape, generator=generator, dtype=torch.float32)
                        t = (t.float() * (1.0 + rel_noise * noise)).to(t.dtype)
                    noisy[name] = t.contiguous()
                save_file(noisy, str(target / item.name), metadata={"format": "pt"})
            elif item.is_file():
                shutil.copy2(item, target / item.name)

    return _build_once(_cache_root(cache_dir) / f"{base.name}-perturbed-{digest}", write)


def _build_once(final: Path, write: Callable[[Path], None]) -> Path:
    """``final`` if it is already built; else ``write`` into a temporary directory next to it, then publish it.

    The cache may be shared: a built directory is only reused when it is this user's and no one else may write to
    it (a model planted there would be loaded, and its code or weights trusted); else ValueError, one line."""
    check_cache_entry(final, "cached model")
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        write(tmp)
        _publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _publish(tmp: Path, final: Path) -> None:
    """Atomic rename; losing the race to another worker is fine, its directory is identical (and checked)."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not (final / "config.json").is_file():
            raise
        check_cache_entry(final, "cached model")


def _write_model(target: Path, arch: str, config: Mapping[str, Any], seed: int, dtype: str = "float32") -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    config_cls_name, architecture = _ARCHES[arch]
    config_cls = getattr(transformers, config_cls_name)
    hf_config = config_cls(**config)
    hf_config.architectures = [architecture]
    torch.manual_seed(seed)
    with quiet_progress_bars():
        model = AutoModelForCausalLM.from_config(hf_config).float()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name:
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.copy_(noise * 0.02)
            elif "embed_tokens" in name:
                param.copy_(noise * INIT["embed_std"])
            elif "lm_head" in name:
                param.copy_(noise * INIT["head_gain"] / param.shape[1] ** 0.5)
            else:
                param.copy_(noise * INIT["linear_gain"] / param.shape[1] ** 0.5)
    model = model.to(getattr(torch, dtype))
    with quiet_progress_bars():
        model.save_pretrained(str(target), safe_serialization=True)
    config_path = target / "config.json"
    data = json.loads(config_path.read_text())
    # Older engines read `torch_dtype`, newer transformers writes `dtype`: give both.
    data["torch_dtype"] = dtype
    data["dtype"] = dtype
    data["architectures"] = [architecture]
    if "rope_theta" not in data:  # transformers 5 writes rope_parameters only; older readers want rope_theta
        data["rope_theta"] = float(config["rope_theta"])
    config_path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
                  "pad_token_id": config["pad_token_id"], "do_sample": False}
    (target / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")


def _write_tokenizer(target: Path, config: Mapping[str, Any]) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = tiny_vocab(int(config["vocab_size"]))
    tokenizer = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer.save(str(target / "tokenizer.json"))
    # Written by hand (not save_pretrained) so that every transformers version, old or new, can load it.
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": int(config["max_position_embeddings"]),
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    (target / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def fixed_prompts(
    n: int, length: int, vocab_size: int, seed: int = 0, *, low: int = FIRST_REGULAR_ID
) -> list[list[int]]:
    """`n` prompts of `length` token ids in [low, vocab_size), the same on every machine and Python version.

    Ids come from SHA-256, not `random`, so a report from one runner is comparable with another's. `low` skips the
    first ids, where most vocabularies keep their special tokens.
    """
    if n < 0 or length < 0:
        raise ValueError("n and length must be non-negative")
    if vocab_size <= low:
        raise ValueError(f"vocab_size {vocab_size} must be larger than low {low}")
    span = vocab_size - low
    prompts: list[list[int]] = []
    for i in range(n):
        row: list[int] = []
        for j in range(length):
            digest = hashlib.sha256(f"gpucompat-prompt|{seed}|{i}|{j}".encode()).digest()
            row.append(low + int.from_bytes(digest[:8], "big") % span)
        prompts.append(row)
    return prompts


def model_vocab_size(model_dir: Path) -> int:
    """vocab_size from a checkpoint's config.json (text config of multimodal models included)."""
    data = read_json(Path(model_dir) / "config.json")
    if not isinstance(data, dict):
        raise ValueError(f"{model_dir}: config.json is not a mapping")
    for candidate in (data, data.get("text_config") or {}, data.get("llm_config") or {}):
        if isinstance(candidate, dict) and isinstance(candidate.get("vocab_size"), int):
            return int(candidate["vocab_size"])
    raise ValueError(f"{model_dir}: config.json has no vocab_size")


def resolve_models(paths: Sequence[str], cache_dir: Path | None = None) -> list[Path]:
    """Validate `--gpucompat-model` values: local checkpoint directories, `tiny-<arch>` to build a tiny model, or
    `<arch>-<size>` (`qwen2-300m`) to build a sized one."""
    resolved: list[Path] = []
    for raw in paths:
        arch, _, size = raw.rpartition("-")
        if arch in _ARCHES and size in SIZES and not Path(raw).exists():
            resolved.append(build_sized_model(arch, size, cache_dir))
            continue
        if raw.startswith(TINY_PREFIX) and not Path(raw).exists():
            name = raw[len(TINY_PREFIX):]
            if name not in tiny_names():
                raise ValueError(f"--gpucompat-model {raw}: unknown tiny architecture (known: "
                                 f"{', '.join(TINY_PREFIX + a for a in tiny_names())})")
            resolved.append(build_tiny_model(name, cache_dir))
            continue
        path = Path(raw).expanduser()
        if not path.is_dir():
            raise ValueError(f"--gpucompat-model {raw}: not a directory (models are never downloaded; give a local "
                             f"checkpoint directory, or build one: tiny-ARCH or ARCH-SIZE, ARCH one of "
                             f"{', '.join(_ARCHES)}, SIZE one of {', '.join(SIZES)})")
        if not (path / "config.json").is_file():
            raise ValueError(f"--gpucompat-model {raw}: no config.json in that directory")
        resolved.append(path.resolve())
    return resolved


def planned_shape(model: str) -> dict[str, Any]:
    """The shape facts (checkpoint.model_shape: architecture, head size, head counts) of a checkpoint directory,
    or of the model a `--gpucompat-model` name would build (`tiny-qwen2`, `qwen2-300m`), without building it: the
    knowledge base judges `when.model_shape` at collection, before any model exists. {} when neither."""
    from .checkpoint import model_shape, read_config

    path = Path(model)
    if path.is_dir():
        try:
            return model_shape(read_config(path))
        except ValueError:
            return {}
    arch, _, size = model.rpartition("-")
    if arch in _ARCHES and size in SIZES:
        config = _sized_config(arch, **SIZES[size])
    elif model.startswith(TINY_PREFIX) and model[len(TINY_PREFIX):] in tiny_names():
        arch = _tiny_arch(model[len(TINY_PREFIX):])[0]
        config = tiny_config(model[len(TINY_PREFIX):])
    else:
        return {}
    return model_shape({**config, "architectures": [_ARCHES[arch][1]]})
