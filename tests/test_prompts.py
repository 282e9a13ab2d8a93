"""Prompt sets: real text for checkpoints (built-in or JSON lines, chats through the chat template), fixed ids for
tiny built models, and one-line errors for a bad prompts file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.workload.models import build_sized_model, build_tiny_model
from pytest_gpucompat.workload.prompts import (
    MAX_PROMPT_TOKENS,
    builtin_texts,
    load_prompts_file,
    prompt_set_for,
    uses_fixed_ids,
)

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prompt-models")


@pytest.fixture(scope="module")
def chat_model(cache: Path) -> Path:
    """The small sized model: a byte-level BPE tokenizer with a ChatML chat template."""
    return build_sized_model("qwen2", "1m", cache)


def test_the_builtin_set_covers_code_math_english_chinese_and_chat() -> None:
    texts = builtin_texts()
    ids = [t.id for t in texts]
    for kind in ("code", "math", "english", "chinese", "chat"):
        assert any(i.startswith(kind) for i in ids), kind
    chats = [t for t in texts if t.messages]
    assert chats and all(len(t.messages or ()) >= 3 for t in chats)  # multi-turn
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in (t.text or "")) for t in texts)


def test_a_checkpoint_is_asked_text_through_its_own_tokenizer(chat_model: Path) -> None:
    assert not uses_fixed_ids(chat_model)
    prompts = prompt_set_for(chat_model)
    assert prompts.name == "builtin" and prompts.chat_template is True
    chat = next(p for p in prompts.prompts if p.messages)
    assert chat.text is not None and chat.text.startswith("<|im_start|>")
    assert chat.text.endswith("<|im_start|>assistant\n")  # the generation prompt
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(chat_model))
    code = prompts.prompts[0]
    assert tokenizer.decode(list(code.ids)) == code.text
    data = prompts.to_dict()
    assert data["digest"] == prompts.digest and data["prompts"][0]["ids"] == list(code.ids)
    assert prompt_set_for(chat_model).digest == prompts.digest  # deterministic


def test_a_tiny_model_keeps_fixed_ids(cache: Path) -> None:
    tiny = build_tiny_model("qwen2", cache)
    assert uses_fixed_ids(tiny)
    prompts = prompt_set_for(tiny)
    assert prompts.name == "token-ids-8x16-seed3"
    assert [len(i) for i in prompts.ids] == [16] * 8 and prompts.prompts[0].text is None


def test_a_prompts_file_replaces_the_set(tmp_path: Path, chat_model: Path, cache: Path) -> None:
    lines = [{"text": "def add(a, b):"}, {"id": "turns", "messages": [{"role": "user", "content": "hi"}]}]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n", encoding="utf-8")
    prompts = prompt_set_for(chat_model, str(path))
    assert prompts.name == "mine" and [p.id for p in prompts.prompts] == ["p0", "turns"]
    assert prompts.digest != prompt_set_for(chat_model).digest
    # a model without a chat template renders a chat as plain lines
    tiny = prompt_set_for(build_tiny_model("qwen2", cache), str(path))
    assert tiny.chat_template is False and tiny.prompts[1].text == "user: hi\nassistant:"


@pytest.mark.parametrize(("content", "where"), [
    ('{"text": "a"}\n{"text": 1}\n', "field 'line 2.text': must be a non-empty string"),
    ('{"text": "a"}\nnot json\n', "line 2: not valid JSON"),
    ('{"prompt": "a"}\n', "field 'line 1.prompt': unknown key (id, text, messages)"),
    ('{"text": "a", "messages": []}\n', "field 'line 1': needs exactly one of `text` or `messages`"),
    ('{"messages": [{"role": "robot", "content": "x"}]}\n', "field 'line 1.messages[0].role': must be one of"),
    ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', "prompt id 'a' appears twice"),
    ("\n\n", "no prompts"),
])
def test_a_bad_prompts_file_is_one_line_naming_the_line(tmp_path: Path, content: str, where: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as exc:
        load_prompts_file(path)
    assert where in str(exc.value) and str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_a_prompt_too_long_for_the_matrices_is_refused(tmp_path: Path, chat_model: Path) -> None:
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"id": "long", "text": "word " * (2 * MAX_PROMPT_TOKENS)}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="prompt 'long' has .* tokens, at most"):
        prompt_set_for(chat_model, str(path))
