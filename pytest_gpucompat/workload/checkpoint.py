"""What a checkpoint directory is, read from its files without loading it: its identity and its size.

Golden outputs are only comparable on the same model, so a golden file names the model by content: one digest of
the weights (every tensor's name, dtype, shape and bytes, whatever the sharding), one of the config keys that
change the computation but not the weights' shapes (rope, norms, heads, activation, sliding window), one of the
tokenizer (vocabulary, merges, added tokens). Files a transformers version rewrites differently (the whole
config.json, tokenizer.json's layout) are not hashed as bytes, so a model built from the same seed on a runner
with another transformers version keeps its identity. Hashing a large checkpoint takes a while: the result is
cached on disk, keyed by the files' sizes and modification times. No torch here.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import stat
import struct
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..common import jsontext
from ..common.files import PRIVATE_MODE, write_atomic
from ..common.inputs import MAX_MODEL_FILE_BYTES, open_regular, read_json
from ..common.paths import cache_dir

IDENTITY_VERSION = 1
"""Bumped whenever a digest below is computed differently (old cache entries and golden files then differ)."""

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model")
_CHUNK = 8 * 1024 * 1024
_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on its JSON header


@dataclass(frozen=True)
class ModelIdentity:
    """A checkpoint named by content: sha256 hex digests of its weights, computation config and tokenizer."""

    name: str
    weights: str
    config: str
    tokenizer: str | None

    @property
    def digest(self) -> str:
        """One digest of the three parts (the name is not part of it: a renamed directory is the same model)."""
        return _sha256(f"{self.weights}|{self.config}|{self.tokenizer}".encode())

    def differences(self, other: ModelIdentity) -> list[str]:
        """What differs from ``other``, in the words a refusal uses: `tokenizer`, `weights`, `config`."""
        return [part for part in ("tokenizer", "weights", "config") if getattr(self, part) != getattr(other, part)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def short(digest: str | None) -> str:
    """`sha256:1a2b3c4d5e6f` for messages."""
    return "none" if digest is None else f"sha256:{digest[:12]}"


# --------------------------------------------------------------------------- safetensors headers


def safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """(tensor name -> {dtype, shape, data_offsets}, offset where the data starts) of one .safetensors file.

    ValueError for a file that is not one (too short, a header length beyond the file or the format's limit).
    """
    with open_regular(path) as handle:  # a FIFO named *.safetensors is refused, not waited on
        raw = handle.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path.name}: not a safetensors file (shorter than 8 bytes)")
        (length,) = struct.unpack("<Q", raw)
        if length > _MAX_HEADER or length > path.stat().st_size - 8:
            raise ValueError(f"{path.name}: not a safetensors file (header of {length} bytes)")
        try:
            header = json.loads(handle.read(length))
        except RecursionError:  # a header nested thousands deep: not one a writer makes
            raise ValueError(f"{path.name}: safetensors header nested too deep") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path.name}: safetensors header is not a mapping")
    tensors = {k: v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)}
    return tensors, 8 + length


def weight_files(model_dir: Path) -> list[Path]:
    """The checkpoint's weight files, by name (optimizer and training states left out)."""
    return sorted(f for f in Path(model_dir).iterdir()
                  if f.suffix in _WEIGHT_SUFFIXES and f.is_file() and not f.name.startswith(("optimizer", "training")))


def parameter_count(model_dir: str | os.PathLike[str]) -> int | None:
    """Parameters of the checkpoint from its safetensors headers (nothing loaded); None without safetensors files or
    with one that cannot be read."""
    files = [f for f in weight_files(Path(model_dir)) if f.suffix == ".safetensors"]
    if not files:
        return None
    total = 0
    try:
        for path in files:
            tensors, _ = safetensors_header(path)
            total += sum(math.prod(int(d) for d in t.get("shape", ())) for t in tensors.values())
    except (OSError, ValueError, TypeError):
        return None
    return total


MIB = 1024 * 1024
DTYPE_BYTES: Mapping[str, int] = {
    "float32": 4, "float": 4, "fp32": 4, "float16": 2, "half": 2, "fp16": 2, "bfloat16": 2, "bf16": 2,
    "fp8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}
"""Bytes of one weight in each spelling of a dtype that config.json or a cell may give."""


def weights_mib(model: str | os.PathLike[str], dtype: Any = None) -> float | None:
    """The memory a checkpoint's weights take in ``dtype`` (its own dtype when None or "auto"), from the weight
    files' sizes and config.json: no import of torch, nothing loaded. None when it cannot be told (no local
    directory, no weight files, an unknown dtype). The one measure of a checkpoint's size: the GPU a cell needs,
    the reference a runner can afford and the knowledge base's `model_weights_mib` all come from it."""
    path = Path(model)
    if not path.is_dir():
        return None
    try:
        size: float = sum(f.stat().st_size for f in weight_files(path))
        config = read_json(path / "config.json")
    except (OSError, ValueError):
        return None
    if not size:
        return None
    stored = config.get("torch_dtype") or config.get("dtype") if isinstance(config, dict) else None
    wanted = None if dtype is None or str(dtype).lower() == "auto" else str(dtype).lower()
    if wanted is not None and wanted != stored:
        if not isinstance(stored, str) or stored not in DTYPE_BYTES or wanted not in DTYPE_BYTES:
            return None
        size = size * DTYPE_BYTES[wanted] / DTYPE_BYTES[stored]
    return size / MIB


def parameter_estimate(model_dir: str | os.PathLike[str]) -> tuple[int | None, str]:
    """The parameters of a checkpoint and how they were counted: from its safetensors headers, else (.bin/.pt
    weights) from its weight files' size in float32, 4 bytes a parameter; None when neither can tell."""
    params = parameter_count(model_dir)
    if params is not None:
        return params, "safetensors headers"
    mib = weights_mib(model_dir, "float32")
    return (None if mib is None else int(mib * MIB / DTYPE_BYTES["float32"])), "weight file sizes"


# --------------------------------------------------------------------------- the three digests


def weights_digest(model_dir: Path) -> str:
    """Every tensor's name, dtype, shape and bytes, in name order across all shards; files of other formats by
    name and bytes. ValueError for a directory without weight files."""
    files = weight_files(model_dir)
    if not files:
        raise ValueError(f"{model_dir}: no weight files ({', '.join(_WEIGHT_SUFFIXES)})")
    entries: list[tuple[str, str]] = []
    for path in files:
        if path.suffix == ".safetensors":
            entries += _safetensors_entries(path)
        else:
            entries.append((f"file:{path.name}", _file_digest(path)))
    return _sha256("\n".join(f"{name}\t{digest}" for name, digest in sorted(entries)).encode())


def _safetensors_entries(path: Path) -> list[tuple[str, str]]:
    tensors, start = safetensors_header(path)
    out = []
    with open_regular(path) as handle:
        for name, info in sorted(tensors.items(), key=lambda kv: kv[1].get("data_offsets", [0])[0]):
            begin, end = (int(x) for x in info["data_offsets"])
            handle.seek(start + begin)
            h = hashlib.sha256()
            left = end - begin
            while left > 0:
                chunk = handle.read(min(_CHUNK, left))
                if not chunk:
                    raise ValueError(f"{path.name}: tensor {name} runs past the end of the file")
                h.update(chunk)
                left -= len(chunk)
            out.append((name, f"{info.get('dtype')}|{list(info.get('shape', ()))}|{h.hexdigest()}"))
    return out


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open_regular(path) as handle:
        while chunk := handle.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _text_part(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config: a multimodal checkpoint nests it under ``text_config``."""
    nested = config.get("text_config")
    return nested if isinstance(nested, Mapping) else config


def computation_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config keys that change what the model computes but not its weights' shapes, normalized across the
    spellings of transformers versions (`rope_theta` or `rope_parameters`, an implicit `head_dim`, a sliding window
    that is off or wider than the model's context)."""
    text = _text_part(config)
    rope = dict(text.get("rope_parameters") or {}) if isinstance(text.get("rope_parameters"), Mapping) else {}
    theta = rope.pop("rope_theta", None)
    theta = text.get("rope_theta", theta)
    scaling = text.get("rope_scaling") or rope or None
    if isinstance(scaling, Mapping) and len(scaling) == 1 and "default" in (scaling.get("rope_type"),
                                                                              scaling.get("type")):
        scaling = None
    heads = text.get("num_attention_heads")
    hidden = text.get("hidden_size")
    head_dim = text.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and
                                        heads else None)
    window = text.get("sliding_window")
    context = text.get("max_position_embeddings")
    if text.get("use_sliding_window") is False or (isinstance(window, int) and isinstance(context, int)
                                                   and window >= context):
        window = None
    eps = text.get("rms_norm_eps", text.get("layer_norm_eps"))
    return {
        "model_type": text.get("model_type", config.get("model_type")),
        "architectures": config.get("architectures"),
        "num_attention_heads": heads,
        "num_key_value_heads": text.get("num_key_value_heads") or heads,
        "head_dim": head_dim,
        "hidden_act": text.get("hidden_act"),
        "norm_eps": None if eps is None else float(eps),
        "rope_theta": None if theta is None else float(theta),
        "rope_scaling": scaling,
        "sliding_window": window,
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
    }


def model_shape(config: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of a model that rules may test (`when.model_shape`, kb.schema.MODEL_SHAPE): its architecture, head
    size, attention / KV head counts, sliding window, MLA, checkpoint dtype and quantization; those the config does
    not give are left out (unknown, never a match). Attention kernels and quantization kernels are chosen by exactly
    these, so a verdict seen on one shape is evidence for that shape."""
    computed = computation_config(config)
    arches = computed.get("architectures")
    text = _text_part(config)
    facts: dict[str, Any] = {
        "architecture": arches[0] if isinstance(arches, list) and arches and isinstance(arches[0], str) else None,
        "head_size": computed.get("head_dim"),
        "num_attention_heads": computed.get("num_attention_heads"),
        "num_key_value_heads": computed.get("num_key_value_heads"),
        "sliding_window": computed.get("sliding_window"),
    }
    facts = {k: v for k, v in facts.items() if isinstance(v, (str, int)) and not isinstance(v, bool)}
    dtype = config.get("torch_dtype", config.get("dtype", text.get("torch_dtype", text.get("dtype"))))
    if isinstance(dtype, str) and dtype:
        facts["torch_dtype"] = dtype.removeprefix("torch.")
    if "kv_lora_rank" in text or "num_attention_heads" in text:  # a config that states its attention says MLA or not
        facts["mla"] = isinstance(text.get("kv_lora_rank"), int) and text.get("kv_lora_rank", 0) > 0
        nope, rope = text.get("qk_nope_head_dim"), text.get("qk_rope_head_dim")
        if facts["mla"] and isinstance(nope, int) and isinstance(rope, int):
            facts["head_size"] = nope + rope  # an MLA query/key head, not hidden_size / heads
    return {**facts, **quantization_facts(config)}


def quantization_facts(config: Mapping[str, Any]) -> dict[str, Any]:
    """``quant_method`` and ``quant_bits`` of a checkpoint's ``quantization_config`` (the engines pick their
    quantization from ``quant_method`` when none is asked for); ``quant_method: none`` for a checkpoint that states
    none (an unquantized one), {} for a ``quantization_config`` that is not a mapping. The bits are the weights':
    ``bits`` or ``w_bit`` (GPTQ, AWQ), ``load_in_4bit``/``load_in_8bit`` (bitsandbytes), the weights' ``num_bits``
    of compressed-tensors' first group."""
    quant = config.get("quantization_config", _text_part(config).get("quantization_config"))
    if quant is None:
        return {"quant_method": "none"}
    if not isinstance(quant, Mapping):
        return {}
    facts: dict[str, Any] = {}
    method = quant.get("quant_method")
    if isinstance(method, str) and method:
        facts["quant_method"] = method.lower()
    bits = quant.get("bits", quant.get("w_bit"))
    if bits is None and (quant.get("load_in_4bit") or quant.get("load_in_8bit")):
        bits = 4 if quant.get("load_in_4bit") else 8
    groups = quant.get("config_groups")
    if bits is None and isinstance(groups, Mapping) and groups:
        first = next(iter(groups.values()))
        weights = first.get("weights") if isinstance(first, Mapping) else None
        bits = weights.get("num_bits") if isinstance(weights, Mapping) else None
    if isinstance(bits, int) and not isinstance(bits, bool):
        facts["quant_bits"] = bits
    return facts


def read_config(model_dir: Path) -> dict[str, Any]:
    """config.json as a mapping; ValueError when it is missing or not a JSON mapping."""
    try:
        data = read_json(Path(model_dir) / "config.json")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{model_dir}: cannot read config.json: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{model_dir}: config.json is not a mapping")
    return data


def config_digest(model_dir: Path) -> str:
    return _sha256(json.dumps(computation_config(read_config(model_dir)), sort_keys=True).encode())


def tokenizer_digest(model_dir: Path) -> str | None:
    """tokenizer.json's vocabulary, merges (either spelling) and added tokens; a sentencepiece or vocab file by its
    bytes; None for a checkpoint without a tokenizer. The normalizer, pre-tokenizer and chat template are left out:
    what they change shows in the prompt ids, which a golden file names by their own digest."""
    path = Path(model_dir)
    fast = path / "tokenizer.json"
    if fast.is_file():
        data = read_json(fast, MAX_MODEL_FILE_BYTES)
        model = data.get("model") or {}
        vocab = model.get("vocab")
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or ()]
        canonical = {
            "type": model.get("type"),
            "vocab": sorted(vocab.items()) if isinstance(vocab, dict) else vocab,
            "merges": merges,
            "added": sorted((t.get("id"), t.get("content"), bool(t.get("special")))
                            for t in data.get("added_tokens") or ()),
        }
        return _sha256(json.dumps(canonical, sort_keys=True, ensure_ascii=False).encode())
    found = [f for f in _TOKENIZER_FILES[1:] if (path / f).is_file()]
    if not found:
        return None
    return _sha256("\n".join(f"{f}\t{_file_digest(path / f)}" for f in found).encode())


# --------------------------------------------------------------------------- identity, cached


def _stamp(model_dir: Path) -> str:
    """What the cached identity depends on: the directory and its relevant files' names, sizes and times."""
    names = [f for f in (*weight_files(model_dir), model_dir / "config.json",
                         *(model_dir / t for t in _TOKENIZER_FILES)) if f.is_file()]
    parts = [str(model_dir.resolve()), str(IDENTITY_VERSION)]
    for f in names:
        st = f.stat()
        parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    return _sha256("\n".join(parts).encode())


def model_identity(model_dir: str | os.PathLike[str], cache: Path | None = None) -> ModelIdentity:
    """The checkpoint's identity (ValueError for a directory that is no checkpoint). Cached on disk under the
    cache directory's ``identity/``, keyed by the files' sizes and times: hashing 15 GB of weights takes a minute."""
    path = Path(model_dir)
    root = (cache if cache is not None else cache_dir()) / "identity"
    entry = root / f"{_stamp(path)}.json"
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        st = os.lstat(entry)  # the cache may be shared: only a regular file of this user is believed
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise ValueError(entry)
        data = read_json(entry)
        return ModelIdentity(name=path.name, weights=data["weights"], config=data["config"],
                             tokenizer=data["tokenizer"])
    identity = ModelIdentity(name=path.name, weights=weights_digest(path), config=config_digest(path),
                             tokenizer=tokenizer_digest(path))
    with contextlib.suppress(OSError):
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        # mkstemp (O_EXCL) inside: a link planted in a shared cache receives nothing; 0600: only this user believes it
        write_atomic(entry, jsontext.dumps(identity.to_dict(), sort_keys=True), mode=PRIVATE_MODE)
    return identity


def digest_of(values: Iterable[Any]) -> str:
    """sha256 of a value's canonical JSON (prompt ids, a prompt set)."""
    return _sha256(json.dumps(list(values), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())


# --------------------------------------------------------------------------- a user's model, by its config.json

MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""A config.json is a few KiB (a multimodal one tens); a larger file is no model's config."""


def model_facts(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``gpucompat check --model DIR_OR_CONFIG_JSON``: the facts rules may test (``model_shape``) of a model
    directory's config.json, or of that file given itself: no weights needed. A missing, oversized, non-JSON or
    non-mapping file is an ``InputError`` naming it."""
    from ..common.errors import InputError

    given = Path(path)
    target = given / "config.json" if given.is_dir() else given
    source = os.fspath(target)
    try:
        data = read_json(target, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise InputError(source, None, "no such file (a model directory with config.json, or the file)") from None
    except OSError as exc:
        raise InputError(source, None, f"cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(source, None, str(exc).removeprefix(f"{source}: ")) from None
    if not isinstance(data, dict):
        raise InputError(source, None, "must be a JSON object (a model's config.json)")
    try:
        return model_shape(data)
    except (TypeError, ValueError, ArithmeticError) as exc:  # a config whose fields have other types than a model's
        raise InputError(source, None, f"not a model's config: {exc}") from None


def as_params(facts: Mapping[str, Any]) -> dict[str, Any]:
    """A model's facts as a fingerprint's parameters: the facts themselves, and a checkpoint's ``quant_method`` as
    the ``quantization`` setting too (the engines take their quantization from it when none is asked for; a
    command line's own ``--quantization`` is applied after and wins)."""
    method = facts.get("quant_method")
    return {**facts, "quantization": method} if isinstance(method, str) and method != "none" else dict(facts)
