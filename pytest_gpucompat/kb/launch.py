"""A command line as users paste it, taken apart: which engine it starts, the engine's own arguments, the variables
set before it, the container image it runs in, and the settings of a Python call (``LLM(model=..., ...)``).

Users do not start servers the one way our docs show. Reports on the engines' trackers start them as
``vllm serve M``, ``python -m vllm.entrypoints.openai.api_server --model M``, ``python3 -m sglang.launch_server``,
``CUDA_VISIBLE_DEVICES=0,1 VLLM_ATTENTION_BACKEND=XFORMERS vllm serve``, ``docker run ... vllm/vllm-openai:v0.6.3
--model M``, ``trtllm-serve``, ``trtllm-build``, or as a Python call ``LLM(model=..., tensor_parallel_size=2)``. The
words before the engine's own command (``python``, ``-m``, ``nohup``, docker's options) are the launcher's, never the
engine's flags: ``kb.cmdline`` checks only ``Launch.args``.

Everything here reads text a user pasted: the command is at most ``MAX_COMMAND_CHARS`` long, and a Python call is
read with ``ast`` on at most that much text, with every failure of the parser (syntax, recursion, memory) answered
as "no settings read".

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..catalog.registry import descriptors

MAX_COMMAND_CHARS = 64 * 1024
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
_PREFIX_WORDS = {"env", "nohup", "sudo", "time", "exec", "nice", "stdbuf", "numactl", "srun", "$", "#", ">"}
_PYTHON = re.compile(r"(?:.*/)?python(?:\d+(?:\.\d+)?)?")
_DOCKER_ENV = ("-e", "--env")
_IMAGE_TAG = re.compile(r"v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+|rc\d+|\.dev\d+)?)(?:[-_].*)?")


@dataclass(frozen=True)
class Launch:
    """A pasted command line taken apart."""

    engine: str | None  # the engine whose server or tool it starts, else None
    command: str | None  # the engine's command as matched ("vllm serve", "sglang.launch_server", "trtllm-build")
    args: tuple[str, ...]  # the words after the engine's command: its flags and positionals
    env: Mapping[str, str] = field(default_factory=dict, hash=False)  # NAME=VALUE set before it (shell or docker -e)
    image: str | None = None  # the container image it runs in (docker/podman run IMAGE)
    image_version: str | None = None  # the engine release the image's tag names (vllm/vllm-openai:v0.6.3 -> 0.6.3)
    settings: Mapping[str, Any] = field(default_factory=dict, hash=False)  # a Python call's keyword settings


def words_of(text: str) -> list[str]:
    """The words of a pasted command: shell quoting, line continuations and prompt markers (``$``) undone.
    Raises ValueError for quoting the shell would refuse too (an unclosed quote)."""
    import shlex

    lines = [line.strip() for line in text.replace("\r\n", "\n").split("\n")]
    lines = [line[2:] if line.startswith(("$ ", "# ", "> ")) else line for line in lines]
    joined = "\n".join(line[:-1] if line.endswith("\\") else line for line in lines)  # continuations
    words = shlex.split(joined, comments=False, posix=True)
    return [w for w in words if w.strip()]


def launch_of(argv: Sequence[str], text: str | None = None) -> Launch:
    """``argv`` (the words of a command line) taken apart; ``text``, the whole paste, for a Python call."""
    words = list(argv)
    env: dict[str, str] = {}
    image = image_version = None
    i = 0
    while i < len(words) and (words[i] in _PREFIX_WORDS or _ASSIGNMENT.fullmatch(words[i])):
        if "=" in words[i]:
            name, _, value = words[i].partition("=")
            env[name] = value
        i += 1
    if i < len(words) and words[i] in ("docker", "podman", "nerdctl") and words[i + 1:i + 2] == ["run"]:
        found = _container(words, i + 2)
        if found is not None:
            image_at, docker_env = found
            env.update(docker_env)
            image = words[image_at]
            image_version = _image_version(image)
            engine = _image_engine(image)
            rest = words[image_at + 1:]
            inner = launch_of(rest) if rest else None
            if inner is not None and inner.engine is not None:
                return Launch(inner.engine, inner.command, inner.args, {**env, **inner.env}, image, image_version)
            # the image's own entrypoint is the engine's server (vllm/vllm-openai runs the OpenAI API server)
            return Launch(engine, image if engine else None, tuple(rest), env, image, image_version)
    found_command = _engine_command(words, i)
    if found_command is not None:
        engine, command, after = found_command
        return Launch(engine, command, tuple(words[after:]), env, image, image_version)
    settings, engine = python_call(text if text is not None else " ".join(words))
    return Launch(engine, None, (), env, image, image_version, settings)


def _engine_command(words: Sequence[str], start: int) -> tuple[str, str, int] | None:
    """(engine, its command, the index after it) for the first engine command in ``words[start:]``."""
    for j in range(start, len(words)):
        word = words[j]
        if word == "-m" and j + 1 < len(words):
            module = words[j + 1]
            for d in descriptors():
                if any(marker in module for marker in d.command_markers if " " not in marker):
                    return d.name, module, j + 2
            continue
        base = word.rsplit("/", 1)[-1]
        for d in descriptors():
            for marker in d.command_markers:
                first, _, second = marker.partition(" ")
                if second and base == first and j + 1 < len(words) and words[j + 1] == second:
                    return d.name, marker, j + 2
                if not second and (base == marker or (marker.endswith(".py") and base.endswith(marker))):
                    return d.name, marker, j + 1
        if not (_PYTHON.fullmatch(word) or word.startswith("-")):
            return None  # another program: not an engine's command line
    return None


def _container(words: Sequence[str], start: int) -> tuple[int, dict[str, str]] | None:
    """The index of the image in ``docker run`` options from ``start``, and the variables its ``-e`` set."""
    env: dict[str, str] = {}
    j = start
    while j < len(words):
        word = words[j]
        if _image_engine(word) is not None:
            return j, env
        if word in _DOCKER_ENV and j + 1 < len(words):
            name, _, value = words[j + 1].partition("=")
            env[name] = value
            j += 2
            continue
        if word.startswith("--env=") or (word.startswith("-e") and "=" in word and not word.startswith("--")):
            name, _, value = word.split("=", 1)[1].partition("=") if word.startswith("--env=") else \
                word[2:].partition("=")
            env[name] = value
        j += 1
    return None


def _image_engine(word: str) -> str | None:
    repository = word.split("@", 1)[0].rsplit(":", 1)[0] if "/" in word or ":" in word else word
    for d in descriptors():
        if any(repository.endswith(image) for image in d.images):
            return d.name
    return None


def _image_version(image: str) -> str | None:
    if ":" not in image.rsplit("/", 1)[-1]:
        return None
    tag = image.rsplit(":", 1)[1]
    match = _IMAGE_TAG.fullmatch(tag)
    return match.group(1) if match else None


def python_call(text: str) -> tuple[dict[str, Any], str | None]:
    """The literal keyword arguments of the first engine call in ``text`` (``LLM(model=..., dtype="half")``) and
    the engine it names (the registry's ``python_calls``; a call two engines share, ``LLM``, by the package the
    text imports; None when nothing tells), or ({}, None)."""
    start = _call_start(text)
    if start is None:
        return {}, None
    name, at = start
    inner = _balanced(text, at)
    if inner is None:
        return {}, None
    try:
        tree = ast.parse(f"f({inner})", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return {}, None
    call = tree.body
    if not isinstance(call, ast.Call):
        return {}, None
    settings: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            continue
        value = _literal(keyword.value)
        if value is not _NOT_LITERAL:
            settings[keyword.arg] = value
    engine = _call_engine(name, text)
    return settings, engine


_NOT_LITERAL: Any = object()


def _call_engine(name: str, text: str) -> str | None:
    owners = [d for d in descriptors() if name in d.python_calls]
    if len(owners) == 1:
        return owners[0].name
    imported = [d for d in owners if any(p.replace("-", "_") in text for p in d.packages)]
    return imported[0].name if len(imported) == 1 else None


def _call_start(text: str) -> tuple[str, int] | None:
    names = sorted({n for d in descriptors() for n in d.python_calls}, key=len, reverse=True)
    if not names:
        return None
    match = re.search(r"\b(" + "|".join(map(re.escape, names)) + r")\s*\(", text[:MAX_COMMAND_CHARS])
    return (match.group(1), match.end()) if match else None


def _balanced(text: str, at: int) -> str | None:
    """The text from ``at`` to the parenthesis that closes the one before it (quotes respected), or None."""
    depth, quote, j = 1, "", at
    end = min(len(text), at + MAX_COMMAND_CHARS)
    while j < end:
        c = text[j]
        if quote:
            if c == "\\":
                j += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return text[at:j]
        j += 1
    return None


def _literal(node: ast.expr) -> Any:
    """A keyword's value when it is a constant (a number, text, bool, None) or a negated number; else not read."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and isinstance(node.operand.value, (int, float)) and not isinstance(node.operand.value, bool):
        return -node.operand.value
    return _NOT_LITERAL
