"""Golden outputs: greedy token ids and top-N logprobs recorded on one runner, to check every other runner against.

One JSON file per model and prompt set (``<model>__<prompt set>.json``), small and diff-friendly, meant to be
committed: keys sorted, logprobs rounded to LOGPROB_DECIMALS, one generated position per line, a ``format``
version. It names the model by content (checkpoint.ModelIdentity: weights, computation config, tokenizer) and
the prompts by the digest of their ids, and holds the reference's generations (with the reference's kind, e.g.
``float32-cpu``) and each recorded cell's, each with the engine version, the attention backend and KV-cache dtype
that ran (optional: files recorded before they were kept lack them) and the recording runner's fingerprint.

A golden file is only ever compared on the model and the prompt ids it was recorded for: ``match_golden`` refuses
another model, tokenizer, prompt set or generation length with a one-line reason. Files are read through the
project's one input loader (inputs.load_file), so a malformed file is one line naming the file and the field.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..catalog.base import Generation
from ..common import jsontext
from ..common.errors import InputError
from ..common.files import DEFAULT_MODE, target_problem, write_atomic
from ..common.inputs import load_file
from ..workload.checkpoint import ModelIdentity, short

FORMAT = 1
LOGPROB_DECIMALS = 5
"""Rounding error 5e-6 nats: 1000 times below the float32 threshold, and a re-recording on the same runner diffs
clean."""
MAX_GOLDEN_BYTES = 64 * 1024 * 1024

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; recording from parallel workers is then unguarded
    fcntl = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Recorded:
    """One engine's generations for the prompt set, with what ran them and where."""

    engine: str
    generations: tuple[Generation, ...]
    params: Mapping[str, Any] = field(default_factory=dict)
    dtype: str | None = None
    device: str | None = None
    version: str | None = None
    runner: str | None = None
    fingerprint: str | None = None
    """The recording runner's fingerprint summary: `NVIDIA H200, driver 580.159.04, ..., vllm 0.26.0`."""
    kind: str | None = None
    """The reference's kind (reference.KINDS: `float32-cpu`, ...); None for a cell."""
    attention_backend: str | None = None
    """The attention backend the engine said it ran (RunInfo.attention_backend: `FLASH_ATTN`, `sdpa`, ...)."""
    kv_cache_dtype: str | None = None
    """The KV-cache dtype the engine said it ran (RunInfo.kv_cache_dtype)."""


@dataclass(frozen=True)
class GoldenFile:
    """The golden outputs of one model and prompt set."""

    model: ModelIdentity
    prompts_name: str
    prompts_digest: str
    max_tokens: int
    top_n: int
    reference: Recorded | None = None
    cells: Mapping[str, Recorded] = field(default_factory=dict)
    prompts: tuple[Mapping[str, Any], ...] = ()
    """Each prompt's id, text and ids, for people reading the file (matching goes by the digest)."""
    source: str = ""


@dataclass(frozen=True)
class Match:
    """What a run found for its model and prompts: `found` (with the file), `refused` or `missing` (with why)."""

    status: str
    reason: str
    golden: GoldenFile | None = None


# --------------------------------------------------------------------------- writing


def file_name(model: str, prompts: str) -> str:
    """`qwen2-300m-1a2b__builtin.json`: the model directory's and the prompt set's names, made safe."""
    def safe(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "x"

    return f"{safe(model)}__{safe(prompts)}.json"


def _logprob(value: float) -> float | None:
    return round(float(value), LOGPROB_DECIMALS) if math.isfinite(value) else None


def generation_dict(gen: Generation) -> dict[str, Any]:
    out: dict[str, Any] = {
        "token_ids": [int(t) for t in gen.token_ids],
        "logprobs": [{str(int(k)): _logprob(v) for k, v in step.items()} for step in gen.logprobs],
    }
    if gen.text is not None:
        out["text"] = gen.text
    return out


def _recorded_dict(rec: Recorded) -> dict[str, Any]:
    out = {"engine": rec.engine, "params": dict(rec.params), "dtype": rec.dtype, "device": rec.device,
           "version": rec.version, "runner": rec.runner, "fingerprint": rec.fingerprint,
           "generations": [generation_dict(g) for g in rec.generations]}
    for key in ("kind", "attention_backend", "kv_cache_dtype"):  # written only when known: older files stay as made
        if getattr(rec, key) is not None:
            out[key] = getattr(rec, key)
    return out


def to_dict(golden: GoldenFile) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "model": golden.model.to_dict(),
        "prompts": {"name": golden.prompts_name, "digest": golden.prompts_digest,
                    "prompts": [dict(p) for p in golden.prompts]},
        "generation": {"max_tokens": golden.max_tokens, "top_n": golden.top_n, "logprob_decimals": LOGPROB_DECIMALS},
        "reference": None if golden.reference is None else _recorded_dict(golden.reference),
        "cells": {k: _recorded_dict(v) for k, v in golden.cells.items()},
    }


def _is_leaf(value: Any) -> bool:
    if isinstance(value, Mapping):
        return all(not isinstance(v, (Mapping, list)) for v in value.values())
    if isinstance(value, list):
        return all(not isinstance(v, (Mapping, list)) for v in value)
    return True


def _format(value: Any, indent: int = 0) -> str:
    """JSON with sorted keys, one line per innermost list or mapping (a generated position, a prompt's ids)."""
    if _is_leaf(value):
        return jsontext.dumps(value, sort_keys=True, ensure_ascii=False)
    pad, end = " " * (indent + 1), " " * indent
    if isinstance(value, Mapping):
        items = [f"{pad}{json.dumps(str(k), ensure_ascii=False)}: {_format(v, indent + 1)}"
                 for k, v in sorted(value.items())]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    return "[\n" + ",\n".join(pad + _format(v, indent + 1) for v in value) + "\n" + end + "]"


def dumps(golden: GoldenFile) -> str:
    return _format(to_dict(golden)) + "\n"


@contextlib.contextmanager
def _locked(directory: Path) -> Any:
    """One writer at a time in a golden directory (pytest-xdist workers record in parallel): a lock on the
    directory itself, so no lock file is left among the files a team commits."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def record(directory: str | os.PathLike[str], golden: GoldenFile) -> Path:
    """Merge ``golden`` (its reference and cells) into the directory's file for its model and prompt set and write
    it atomically. An existing file for the same model, prompts and generation length keeps its other cells; one for
    anything else is replaced. Returns the file's path; InputError when the existing file is malformed."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    path = root / file_name(golden.model.name, golden.prompts_name)
    with _locked(root):
        problem = target_problem(path)
        if problem is not None:  # a symlink or a device planted at the name: never replaced
            raise InputError(str(path), None, problem)
        merged = golden
        if path.is_file():
            old = load_golden(path)
            same = (old.model == golden.model and old.prompts_digest == golden.prompts_digest
                    and (old.max_tokens, old.top_n) == (golden.max_tokens, golden.top_n))
            if same:
                merged = GoldenFile(
                    model=golden.model, prompts_name=golden.prompts_name, prompts_digest=golden.prompts_digest,
                    max_tokens=golden.max_tokens, top_n=golden.top_n, prompts=golden.prompts or old.prompts,
                    reference=golden.reference or old.reference, cells={**old.cells, **golden.cells})
        write_atomic(path, dumps(merged), mode=DEFAULT_MODE)  # a file to commit and share, not a private one
    return path


# --------------------------------------------------------------------------- reading


class _Reader:
    """Typed access to a parsed golden file; every problem is an InputError naming the file and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, problem: str) -> InputError:
        return InputError(self.source, where, problem)

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, "must be a mapping")
        return value

    def text(self, data: Mapping[str, Any], key: str, where: str, optional: bool = False) -> str | None:
        value = data.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(f"{where}{key}", "must be a non-empty string")
        return value

    def whole(self, data: Mapping[str, Any], key: str, where: str) -> int:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.fail(f"{where}{key}", f"must be a whole number >= 1, not {value!r:.40}")
        return value

    def ids(self, value: Any, where: str) -> tuple[int, ...]:
        if not isinstance(value, list) or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in value):
            raise self.fail(where, "must be a list of token ids (whole numbers >= 0)")
        return tuple(value)

    def generation(self, value: Any, where: str) -> Generation:
        data = self.mapping(value, where)
        tokens = self.ids(data.get("token_ids"), f"{where}.token_ids")
        steps = data.get("logprobs")
        if not isinstance(steps, list) or len(steps) != len(tokens):
            raise self.fail(f"{where}.logprobs", f"must be a list of {len(tokens)} mappings (one per token)")
        parsed = []
        for i, step in enumerate(steps):
            top = self.mapping(step, f"{where}.logprobs[{i}]")
            entry: dict[int, float] = {}
            for key, lp in top.items():
                if not str(key).isdigit():
                    raise self.fail(f"{where}.logprobs[{i}]", f"key {key!r:.20} is not a token id")
                if lp is not None and (isinstance(lp, bool) or not isinstance(lp, (int, float)) or lp > 1e-3):
                    raise self.fail(f"{where}.logprobs[{i}].{key}", f"must be a logprob (<= 0) or null, not {lp!r:.40}")
                entry[int(key)] = -math.inf if lp is None else float(lp)
            parsed.append(entry)
        text = data.get("text")
        if text is not None and not isinstance(text, str):
            raise self.fail(f"{where}.text", "must be a string")
        return Generation(token_ids=tokens, logprobs=tuple(parsed), text=text)

    def recorded(self, value: Any, where: str, count: int) -> Recorded:
        data = self.mapping(value, where)
        gens = data.get("generations")
        if not isinstance(gens, list) or len(gens) != count:
            raise self.fail(f"{where}.generations", f"must be a list of {count} generations (one per prompt)")
        params = data.get("params") or {}
        self.mapping(params, f"{where}.params")
        optional = {k: self.text(data, k, f"{where}.", optional=True)
                    for k in ("dtype", "device", "version", "runner", "fingerprint", "kind", "attention_backend",
                              "kv_cache_dtype")}
        return Recorded(engine=str(self.text(data, "engine", f"{where}.")), params=dict(params),
                        generations=tuple(self.generation(g, f"{where}.generations[{i}]") for i, g in enumerate(gens)),
                        **optional)


def parse(data: Any, source: str) -> GoldenFile:
    """A GoldenFile from its JSON form; InputError naming ``source`` and the first bad field."""
    r = _Reader(source)
    top = r.mapping(data, "")
    if top.get("format") != FORMAT:
        raise r.fail("format", f"unsupported golden format {top.get('format')!r:.20} (this version reads {FORMAT})")
    model = r.mapping(top.get("model"), "model")
    identity = ModelIdentity(name=str(r.text(model, "name", "model.")), weights=str(r.text(model, "weights", "model.")),
                             config=str(r.text(model, "config", "model.")),
                             tokenizer=r.text(model, "tokenizer", "model.", optional=True))
    prompts = r.mapping(top.get("prompts"), "prompts")
    listed = prompts.get("prompts") or []
    if not isinstance(listed, list) or not all(isinstance(p, Mapping) for p in listed):
        raise r.fail("prompts.prompts", "must be a list of mappings")
    generation = r.mapping(top.get("generation"), "generation")
    count = len(listed)
    if count == 0:
        raise r.fail("prompts.prompts", "must list the prompts the outputs answer")
    reference = top.get("reference")
    cells = r.mapping(top.get("cells") or {}, "cells")
    return GoldenFile(
        model=identity, prompts_name=str(r.text(prompts, "name", "prompts.")),
        prompts_digest=str(r.text(prompts, "digest", "prompts.")),
        max_tokens=r.whole(generation, "max_tokens", "generation."), top_n=r.whole(generation, "top_n", "generation."),
        reference=None if reference is None else r.recorded(reference, "reference", count),
        cells={str(k): r.recorded(v, f"cells.{k}", count) for k, v in cells.items()},
        prompts=tuple(dict(p) for p in listed), source=source)


def load_golden(path: str | os.PathLike[str]) -> GoldenFile:
    """Read and check one golden file (size, UTF-8, JSON, then every field): InputError on any problem."""
    source = os.fspath(path)
    return parse(load_file(source, "json", limit=MAX_GOLDEN_BYTES), source)


def load_golden_source(path: str | os.PathLike[str]) -> tuple[GoldenFile, ...]:
    """Every golden file of a directory (``*.json``, by name), or the one file given; InputError for a path that
    does not exist or a file that is malformed."""
    target = Path(path)
    if target.is_dir():
        return tuple(load_golden(f) for f in sorted(target.glob("*.json")) if not f.name.startswith("."))
    if not target.exists():
        raise InputError(os.fspath(path), None, "no such golden file or directory")
    return (load_golden(target),)


# --------------------------------------------------------------------------- matching


def _why_not(golden: GoldenFile, model: ModelIdentity, prompts_name: str, prompts_digest: str) -> str:
    """One line: how ``golden`` differs from this run's model and prompts (the first difference that matters)."""
    name = Path(golden.source).name or "golden file"
    theirs, ours = golden.model, model
    if theirs.tokenizer != ours.tokenizer:
        return (f"{name} was recorded with another tokenizer ({theirs.name}: {short(theirs.tokenizer)}; "
                f"{ours.name}: {short(ours.tokenizer)})")
    if theirs.weights != ours.weights:
        return (f"{name} was recorded for another model ({theirs.name}: weights {short(theirs.weights)}; "
                f"{ours.name}: weights {short(ours.weights)})")
    if theirs.config != ours.config:
        return (f"{name} was recorded for another model config ({theirs.name}: {short(theirs.config)}; "
                f"{ours.name}: {short(ours.config)}: rope, norms, heads or sliding window differ)")
    if golden.prompts_digest != prompts_digest:
        return (f"{name} was recorded for another prompt set ('{golden.prompts_name}' {short(golden.prompts_digest)}; "
                f"this run's '{prompts_name}' is {short(prompts_digest)}: a prompt, the tokenizer or the chat template "
                f"changed)")
    return f"{name} differs from this run"  # pragma: no cover - callers only ask about a file that differs


def match_golden(files: Sequence[GoldenFile], model: ModelIdentity, prompts_name: str, prompts_digest: str,
                 max_tokens: int, top_n: int, where: str, explicit: bool = False) -> Match:
    """The golden file for this model and these prompt ids. Refused, with the reason: a file for the same model name
    (or the same weights) that differs in tokenizer, weights, config or prompt set, a file recorded with another
    generation length or top-N, or (``explicit``: one file was named) any file that is not this model's. Missing:
    nothing in ``where`` concerns this model. Pure."""
    for golden in files:
        if golden.model.differences(model) == [] and golden.prompts_digest == prompts_digest:
            return _fitting(golden, max_tokens, top_n, "this run asks")
    related = [g for g in files if g.model.name == model.name or g.model.weights == model.weights]
    related.sort(key=lambda g: g.prompts_name != prompts_name)
    if explicit and not related:
        related = list(files)
    if related:
        return Match("refused", _why_not(related[0], model, prompts_name, prompts_digest))
    return Match("missing", f"no golden output for {model.name} ({short(model.digest)}) and prompt set "
                            f"'{prompts_name}' ({short(prompts_digest)}) in {where}")


def _fitting(golden: GoldenFile, max_tokens: int, top_n: int, asker: str) -> Match:
    """The file of this model and these prompts: found, or refused when recorded with another length or top-N."""
    name = Path(golden.source).name or "golden file"
    if (golden.max_tokens, golden.top_n) != (max_tokens, top_n):
        return Match("refused", f"{name} was recorded with {golden.max_tokens} tokens and top-{golden.top_n}; "
                                f"{asker} {max_tokens} tokens and top-{top_n}")
    return Match("found", name, golden)


def match_kept(files: Sequence[GoldenFile], model_digest: str, prompts_digest: str, max_tokens: int, top_n: int,
               where: str) -> Match:
    """``match_golden`` for outputs a report kept, which name their model by its one content digest: the file of
    that model and those prompt ids; refused for that model's file of another prompt set or length. Pure."""
    same_model = [g for g in files if g.model.digest == model_digest]
    for golden in same_model:
        if golden.prompts_digest == prompts_digest:
            return _fitting(golden, max_tokens, top_n, "the cell kept")
    if same_model:
        golden = same_model[0]
        return Match("refused", f"{Path(golden.source).name} was recorded for another prompt set "
                                f"('{golden.prompts_name}' {short(golden.prompts_digest)}; the cell asked "
                                f"{short(prompts_digest)})")
    return Match("missing", f"no golden output for model {short(model_digest)} in {where}")
