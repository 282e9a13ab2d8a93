"""Prompt sets: what the precision checks ask a model, as text and as the token ids engines are given.

A real checkpoint is asked real text: the built-in set in matrices/prompts.yaml (code, math, English, Chinese,
multi-turn chat) or a JSON-lines file, tokenized with the model's own tokenizer, chats through its chat template.
A tiny built model (random weights, word-level vocabulary) keeps fixed token ids, the same on every machine. A set
is named by the digest of its ids: golden outputs are only comparable for the same ids, and the digest changes
whenever a prompt, the tokenizer or the chat template does.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.errors import InputError
from ..common.inputs import check_tree, dotted, load_file, parse_json, read_json, read_text
from ..common.paths import matrices_dir
from .checkpoint import digest_of
from .models import BUILD_MARKER, fixed_prompts, model_vocab_size

MAX_PROMPTS = 256
MAX_PROMPT_TOKENS = 448
"""A prompt plus the generated tokens must fit the shipped matrices' max_model_len of 512."""
ROLES = ("system", "user", "assistant", "tool")
FIXED = {"count": 8, "length": 16, "seed": 3}
"""The fixed-id set of tiny models: what the precision suite always asked them (thresholds are calibrated on it)."""


@dataclass(frozen=True)
class PromptText:
    """One prompt before tokenization: plain ``text`` or chat ``messages`` ({role, content} each)."""

    id: str
    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class Prompt:
    """One tokenized prompt: its ids and the text they came from (a chat as the template rendered it)."""

    id: str
    ids: tuple[int, ...]
    text: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class PromptSet:
    """The prompts one model is asked, named for reports and golden files; `digest` names the ids."""

    name: str
    prompts: tuple[Prompt, ...]
    chat_template: bool | None = None
    """True: chats went through the model's chat template; False: through the plain fallback; None: no chats."""

    @property
    def ids(self) -> list[list[int]]:
        return [list(p.ids) for p in self.prompts]

    @property
    def digest(self) -> str:
        return digest_of(self.ids)

    @property
    def max_length(self) -> int:
        return max((len(p.ids) for p in self.prompts), default=0)

    def to_dict(self, with_ids: bool = True) -> dict[str, Any]:
        """JSON-ready: name, digest and each prompt's id, text (and messages, ids)."""
        items = []
        for p in self.prompts:
            item: dict[str, Any] = {"id": p.id, "text": p.text}
            if p.messages is not None:
                item["messages"] = [{"role": r, "content": c} for r, c in p.messages]
            if with_ids:
                item["ids"] = list(p.ids)
            items.append(item)
        return {"name": self.name, "digest": self.digest, "chat_template": self.chat_template, "prompts": items}


# --------------------------------------------------------------------------- reading prompt texts


def _entry(item: Any, source: str, where: str, index: int) -> PromptText:
    if not isinstance(item, Mapping):
        raise InputError(source, where, "must be a mapping with `text` or `messages`")
    unknown = sorted(set(map(str, item)) - {"id", "text", "messages"})
    if unknown:
        raise InputError(source, f"{where}.{unknown[0]}", "unknown key (id, text, messages)")
    pid = item.get("id", f"p{index}")
    if not isinstance(pid, (str, int)) or isinstance(pid, bool) or not str(pid):
        raise InputError(source, f"{where}.id", "must be a non-empty string")
    text, messages = item.get("text"), item.get("messages")
    if (text is None) == (messages is None):
        raise InputError(source, where, "needs exactly one of `text` or `messages`")
    if text is not None:
        if not isinstance(text, str) or not text:
            raise InputError(source, f"{where}.text", "must be a non-empty string")
        return PromptText(id=str(pid), text=text)
    if not isinstance(messages, list) or not messages:
        raise InputError(source, f"{where}.messages", "must be a non-empty list of {role, content}")
    turns = []
    for j, message in enumerate(messages):
        field = f"{where}.messages[{j}]"
        if not isinstance(message, Mapping) or set(message) != {"role", "content"}:
            raise InputError(source, field, "must be a mapping with exactly `role` and `content`")
        role, content = message["role"], message["content"]
        if role not in ROLES:
            raise InputError(source, f"{field}.role", f"must be one of {', '.join(ROLES)}, not {role!r:.40}")
        if not isinstance(content, str):
            raise InputError(source, f"{field}.content", "must be a string")
        turns.append((str(role), content))
    return PromptText(id=str(pid), messages=tuple(turns))


def _checked(entries: list[PromptText], source: str) -> tuple[PromptText, ...]:
    if not entries:
        raise InputError(source, None, "no prompts")
    if len(entries) > MAX_PROMPTS:
        raise InputError(source, None, f"{len(entries)} prompts, at most {MAX_PROMPTS}")
    seen: set[str] = set()
    for entry in entries:
        if entry.id in seen:
            raise InputError(source, None, f"prompt id {entry.id!r} appears twice")
        seen.add(entry.id)
    return tuple(entries)


def builtin_texts(path: str | os.PathLike[str] | None = None) -> tuple[PromptText, ...]:
    """The built-in prompts (matrices/prompts.yaml unless ``path``); InputError naming file and field."""
    source = Path(path) if path is not None else matrices_dir() / "prompts.yaml"
    data = load_file(source, "yaml")
    if not isinstance(data, Mapping) or not isinstance(data.get("prompts"), list):
        raise InputError(str(source), "prompts", "must be a list of prompts")
    items = data["prompts"]
    return _checked([_entry(item, str(source), f"prompts[{i}]", i) for i, item in enumerate(items)], str(source))


def load_prompts_file(path: str | os.PathLike[str]) -> tuple[PromptText, ...]:
    """A JSON-lines prompts file: one ``{"text": ...}`` or ``{"messages": [...]}`` per line (blank lines skipped);
    InputError naming the file, the line and the field."""
    source = os.fspath(path)
    entries: list[PromptText] = []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        item = parse_json(line, f"{source}: {where}")
        bad = check_tree(item)
        if bad is not None:
            raise InputError(source, f"{where}.{dotted(bad[0])}".rstrip("."), bad[1])
        entries.append(_entry(item, source, where, len(entries)))
    return _checked(entries, source)


# --------------------------------------------------------------------------- tokenizing


def has_tokenizer(model_dir: Path) -> bool:
    return any((model_dir / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "vocab.json"))


def uses_fixed_ids(model_dir: Path) -> bool:
    """A tiny built model (its build marker says so) or a checkpoint without a tokenizer: fixed token ids."""
    marker = model_dir / BUILD_MARKER
    if marker.is_file():
        try:
            if read_json(marker).get("prompts") == "token-ids":
                return True
        except (OSError, ValueError, AttributeError):
            pass
    return not has_tokenizer(model_dir)


def fixed_set(model_dir: Path) -> PromptSet:
    """The fixed-id prompts of a model without usable text prompts (see FIXED)."""
    n, length, seed = FIXED["count"], FIXED["length"], FIXED["seed"]
    rows = fixed_prompts(n, length, model_vocab_size(model_dir), seed=seed)
    return PromptSet(name=f"token-ids-{n}x{length}-seed{seed}",
                     prompts=tuple(Prompt(id=f"p{i}", ids=tuple(r)) for i, r in enumerate(rows)))


def load_tokenizer(model_dir: Path) -> Any:
    """The model's own tokenizer: tokenizer.json as saved (through PreTrainedTokenizerFast, so every transformers
    version reads the same ids), else whatever AutoTokenizer makes of the directory."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    from ..common.progress import quiet_progress_bars

    with quiet_progress_bars():
        if (model_dir / "tokenizer.json").is_file():
            return PreTrainedTokenizerFast.from_pretrained(str(model_dir))
        return AutoTokenizer.from_pretrained(str(model_dir))


def render_chat(tokenizer: Any, messages: Sequence[tuple[str, str]]) -> tuple[str, bool]:
    """(text, through the template): the model's chat template with the generation prompt, or, for a model without
    one, ``role: content`` lines ending in ``assistant:``."""
    turns = [{"role": r, "content": c} for r, c in messages]
    if getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)), True
    return "".join(f"{r}: {c}\n" for r, c in messages) + "assistant:", False


def tokenize(texts: Sequence[PromptText], tokenizer: Any, name: str, source: str) -> PromptSet:
    """Token ids of each prompt (plain text with the tokenizer's special tokens, a rendered chat without more);
    ValueError naming the prompt when one is empty or longer than MAX_PROMPT_TOKENS."""
    prompts = []
    templated: bool | None = None
    for entry in texts:
        if entry.messages is not None:
            text, through = render_chat(tokenizer, entry.messages)
            templated = through if templated is None else templated and through
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            text = str(entry.text)
            ids = tokenizer(text)["input_ids"]
        if not ids:
            raise ValueError(f"{source}: prompt {entry.id!r} has no tokens with this tokenizer")
        if len(ids) > MAX_PROMPT_TOKENS:
            raise ValueError(f"{source}: prompt {entry.id!r} has {len(ids)} tokens, at most {MAX_PROMPT_TOKENS}")
        prompts.append(Prompt(id=entry.id, ids=tuple(int(i) for i in ids), text=text, messages=entry.messages))
    return PromptSet(name=name, prompts=tuple(prompts), chat_template=templated)


def prompt_set_for(model_dir: str | os.PathLike[str], prompts_file: str | None = None) -> PromptSet:
    """The prompt set for a model: ``prompts_file`` (JSON lines) for any model with a tokenizer; else fixed ids for
    a tiny built model or one without a tokenizer, the built-in texts for any other checkpoint."""
    path = Path(model_dir)
    if not has_tokenizer(path) or (prompts_file is None and uses_fixed_ids(path)):
        return fixed_set(path)
    if prompts_file is not None:
        texts, name, source = load_prompts_file(prompts_file), Path(prompts_file).stem, prompts_file
    else:
        source = str(matrices_dir() / "prompts.yaml")
        texts, name = builtin_texts(source), "builtin"
    return tokenize(texts, load_tokenizer(path), name, source)
