"""A real tokenizer for built checkpoints: byte-level BPE trained by `tokenizers` on a small built-in text, with
ChatML special tokens and a chat template, so that a built model is asked real text the way a served model is.

Byte-level: every string (code, Chinese, emoji) has ids, no `<unk>`. The vocabulary is padded with reserved
special tokens to a multiple of 64 and the model's vocab_size is exactly the tokenizer's, so every id an engine
may generate decodes to something. Deterministic: the same text and settings give the same tokenizer.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..common.paths import matrices_dir

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TARGET_VOCAB = 4096
PAD_MULTIPLE = 64
MIN_FREQUENCY = 2
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML, as Qwen2 checkpoints spell it."""


@dataclass(frozen=True)
class BuiltTokenizer:
    """What a model config needs to know of the tokenizer written next to it."""

    vocab_size: int
    bos_id: int
    eos_id: int
    pad_id: int


def corpus_path() -> Path:
    return matrices_dir() / "tokenizer-corpus.txt"


def corpus_digest() -> str:
    """Part of a built model's cache key: another training text is another tokenizer."""
    text = corpus_path().read_bytes()
    settings = f"{SPECIALS}|{TARGET_VOCAB}|{PAD_MULTIPLE}|{MIN_FREQUENCY}|{CHAT_TEMPLATE}".encode()
    return hashlib.sha256(text + b"\0" + settings).hexdigest()[:12]


def train(lines: list[str], vocab_size: int = TARGET_VOCAB) -> object:
    """A byte-level BPE `tokenizers.Tokenizer` trained on ``lines``, its special tokens first (ids 0, 1, 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=MIN_FREQUENCY, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    size = tokenizer.get_vocab_size()
    padded = -(-size // PAD_MULTIPLE) * PAD_MULTIPLE
    tokenizer.add_special_tokens([f"<|reserved_{i}|>" for i in range(padded - size)])
    return tokenizer


def write_tokenizer(target: Path, max_length: int) -> BuiltTokenizer:
    """Train on the built-in text and write tokenizer.json, tokenizer_config.json (with the chat template) and
    special_tokens_map.json into ``target``."""
    lines = corpus_path().read_text(encoding="utf-8").splitlines(keepends=True)
    tokenizer = train(lines)
    tokenizer.save(str(target / "tokenizer.json"))  # type: ignore[attr-defined]
    ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIALS}  # type: ignore[attr-defined]
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": int(max_length),
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (target / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    special = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
               "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}
    (target / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")
    return BuiltTokenizer(vocab_size=int(tokenizer.get_vocab_size()),  # type: ignore[attr-defined]
                          bos_id=ids["<|endoftext|>"], eos_id=ids["<|im_end|>"], pad_id=ids["<|endoftext|>"])
