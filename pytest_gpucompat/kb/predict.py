"""What an engine release will do with attention on a machine it has not run on: the backend vLLM picks (or the
error it refuses with) and what happens to the KV cache, for a release, a compute capability, a model dtype, a head
size, a KV-cache dtype, FlashInfer installed or not, and a forced backend.

The answer is read from ``matrices/history/<engine>-selection.json``, which ``tools/engine_history.py`` computes by
running each release's own selector code (its backend priority order, each backend's ``validate_configuration``,
the attention layer's KV-cache assertion) for every compute capability in its grid. This module only walks that
data the way the release's ``get_attn_backend_cls`` walks its candidates; it holds no knowledge of a backend.

An input the data does not cover (a release not read, a capability outside the grid, a backend name the release
does not know) is a ``PredictError`` with one line ("no selection data for vllm 0.99.0"), never a guess.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ..common.errors import InputError
from ..common.inputs import load_file
from .history import history_dir

FORMAT = 1
_CAP = re.compile(r"^\s*(?:sm_?)?(\d{1,3})(?:\.(\d))?\s*$")
_DTYPE_ALIASES = {"half": "float16", "fp16": "float16", "float16": "float16", "bf16": "bfloat16",
                  "bfloat16": "bfloat16", "float": "float32", "fp32": "float32", "float32": "float32"}
_BACKEND = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


class PredictError(ValueError):
    """The data cannot answer (release not read, capability outside the grid, unknown backend): one line."""


class SettingError(PredictError):
    """The setting asked about is malformed (a compute capability that is not a number, a dtype or backend name the
    engine does not have): bad input to refuse, not a gap of the data. ``field``: the setting's name."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Setting:
    """One question. ``dtype`` None: the model's own dtype (float16 and bfloat16 are both asked; they are the
    models' dtypes); ``head_size`` None: not known (head-size limits are not applied, and the answer says so);
    ``flashinfer`` None: not known (both asked)."""

    release: str
    capability: tuple[int, int]
    dtype: str | None = None
    head_size: int | None = None
    kv_cache_dtype: str = "auto"
    flashinfer: bool | None = None
    forced: str | None = None


@dataclass(frozen=True)
class Prediction:
    """The answer. ``backend``: the backend chosen, None when vLLM refuses (``error`` then holds its exception and
    message) or when the data cannot decide (``unknown`` says why). ``kv_cache``: what happens to the KV cache
    beyond the choice ("fails at the first forward pass: AssertionError: ..."), ``skipped``: the higher-priority
    backends passed over, each with the release's reasons. ``notes``: the assumptions the answer rests on."""

    setting: Setting
    backend: str | None
    error: str | None = None
    kv_cache: str | None = None
    skipped: tuple[tuple[str, tuple[str, ...]], ...] = ()
    unknown: str | None = None
    notes: tuple[str, ...] = ()
    alternatives: tuple[tuple[str, Prediction], ...] = ()

    @property
    def outcome(self) -> str:
        """``chosen``; ``refused`` (the selector refuses); ``refused-at-init`` (chosen, then its implementation refuses
        the KV-cache dtype when the attention layers are built); ``asserts`` (chosen, then fails at its first forward
        pass); ``unknown``; ``depends`` (the setting leaves it open: see ``alternatives``)."""
        if self.alternatives:
            return "depends"
        if self.unknown is not None:
            return "unknown"
        if self.backend is None:
            return "refused"
        if self.kv_cache and self.kv_cache.startswith("refused"):
            return "refused-at-init"
        return "asserts" if self.kv_cache and self.kv_cache.startswith("fails") else "chosen"

    def to_json(self) -> dict[str, Any]:
        s = self.setting
        out: dict[str, Any] = {
            "release": s.release, "compute_capability": f"{s.capability[0]}.{s.capability[1]}",
            "dtype": s.dtype or "auto", "head_size": s.head_size, "kv_cache_dtype": s.kv_cache_dtype,
            "flashinfer": s.flashinfer, "forced_backend": s.forced, "outcome": self.outcome,
            "attention_backend": self.backend, "error": self.error, "kv_cache": self.kv_cache,
            "unknown": self.unknown, "notes": list(self.notes),
            "skipped": [{"backend": b, "reasons": list(r)} for b, r in self.skipped]}
        if self.alternatives:
            out["alternatives"] = [{"when": label, **p.to_json()} for label, p in self.alternatives]
        return out


@dataclass(frozen=True, eq=False)
class Selection:
    """One engine's selection data: per release, its facts (None: the release could not be read, with why)."""

    engine: str
    source: str
    releases: Mapping[str, Mapping[str, Any] | str]
    grid: Mapping[str, Any]

    def facts(self, release: str) -> Mapping[str, Any]:
        key = _release_key(release, self.releases)
        if key is None:
            raise PredictError(f"no selection data for {self.engine} {release}")
        facts = self.releases[key]
        if isinstance(facts, str):
            raise PredictError(f"no selection data for {self.engine} {key}: {facts}")
        return facts

    def versions(self) -> list[str]:
        return [v for v, f in self.releases.items() if not isinstance(f, str)]


def _release_key(release: str, releases: Mapping[str, Any]) -> str | None:
    if release in releases:
        return release
    try:
        v = Version(release)
    except InvalidVersion:
        return None
    for candidate in (str(v), v.base_version, v.public):
        if candidate in releases:
            return candidate
    by_version = {}
    for text in releases:
        try:
            by_version[Version(text)] = text
        except InvalidVersion:
            continue
    return by_version.get(v) or by_version.get(Version(v.base_version))


# -- parsing what a user types


def parse_capability(text: str | float | tuple[int, int]) -> tuple[int, int]:
    """``"9.0"``, ``"sm_90"``, ``"90"``, ``9.0`` -> (9, 0); anything else is a PredictError."""
    if isinstance(text, tuple):
        return text
    raw = str(text)
    m = _CAP.match(raw)
    if m is None:
        raise SettingError("compute_capability", f"compute capability {raw!r} is not a number like 9.0")
    major, minor = m.group(1), m.group(2)
    if minor is None and len(major) == 2 and not raw.strip().startswith("1"):  # "90", "sm_90"
        return int(major[0]), int(major[1])
    if minor is None and len(major) == 3:
        return int(major[:2]), int(major[2])
    return int(major), int(minor or 0)


def normalize_dtype(dtype: str | None) -> str | None:
    if dtype is None or str(dtype).lower() == "auto":
        return None
    norm = _DTYPE_ALIASES.get(str(dtype).lower().removeprefix("torch."))
    if norm is None:
        raise SettingError("dtype", f"model dtype {dtype!r} is not one of auto, float16, bfloat16, float32")
    return norm


def check_backend_name(name: str) -> str:
    if not _BACKEND.match(name):
        raise SettingError("attention_backend", f"attention backend {name[:40]!r} is not a backend name")
    return name.upper()


# -- the walk


def predict(selection: Selection, setting: Setting) -> Prediction:
    """What ``setting.release`` does on ``setting.capability``: see the module docstring."""
    facts = selection.facts(setting.release)
    if setting.forced is not None:
        check_backend_name(setting.forced)
        setting = Setting(**{**setting.__dict__, "forced": setting.forced.upper()})
    options: list[tuple[str, Setting]] = []
    fis = [setting.flashinfer] if setting.flashinfer is not None else [True, False]
    dtypes = [setting.dtype] if setting.dtype is not None else ["bfloat16", "float16"]
    for fi in fis:
        for dtype in dtypes:
            label = ", ".join(x for x in (
                ("" if setting.flashinfer is not None else ("FlashInfer installed" if fi else "without FlashInfer")),
                ("" if setting.dtype is not None else dtype)) if x)
            options.append((label, Setting(**{**setting.__dict__, "flashinfer": fi, "dtype": dtype})))
    answers = [(label, _walk(selection, facts, s)) for label, s in options]
    if len(fis) > 1 and len(dtypes) > 1:  # name only the open choice the answer depends on
        by_fi = [answers[i * len(dtypes):(i + 1) * len(dtypes)] for i in range(len(fis))]
        if all(all(_same(p, group[0][1]) for _, p in group) for group in by_fi):
            answers = [(label.split(", ")[0], p) for label, p in (group[0] for group in by_fi)]
        elif all(_same(answers[i][1], answers[i + len(dtypes)][1]) for i in range(len(dtypes))):
            answers = [(label.split(", ")[-1], p) for label, p in answers[:len(dtypes)]]
    first = answers[0][1]
    if all(_same(p, first) for _, p in answers[1:]):
        notes = list(first.notes)
        if setting.flashinfer is None and len(fis) > 1:
            notes.append("the same with or without FlashInfer")
        return Prediction(setting, first.backend, first.error, first.kv_cache, first.skipped, first.unknown,
                          tuple(notes))
    return Prediction(setting, None, unknown=None, alternatives=tuple(answers),
                      notes=("the answer depends on what the setting leaves open",))


def _same(a: Prediction, b: Prediction) -> bool:
    return (a.backend, a.error is None, a.kv_cache, a.unknown) == (b.backend, b.error is None, b.kv_cache, b.unknown)


def _walk(selection: Selection, facts: Mapping[str, Any], s: Setting) -> Prediction:
    cap = f"{s.capability[0]}.{s.capability[1]}"
    key = f"{cap}{'+' if s.flashinfer else '-'}flashinfer"
    index = facts["machines"].get(key)
    if index is None:
        caps = ", ".join(selection.grid.get("capabilities", []))
        raise PredictError(f"no selection data for compute capability {cap} (the data covers {caps})")
    profile = facts["profiles"][index]
    if "error" in profile:
        return Prediction(s, None, unknown=f"the selector could not be read for {cap}: {profile['error']}")
    notes = [] if s.head_size is not None else ["head size not given: head-size limits not applied"]
    accepted = facts.get("kv_cache_dtypes") or []
    if accepted and s.kv_cache_dtype not in accepted:
        return Prediction(s, None, error=f"kv_cache_dtype {s.kv_cache_dtype!r} is not one of the release's choices "
                          f"({', '.join(accepted)})", notes=tuple(notes))
    order = profile["priority_by_kv"].get(s.kv_cache_dtype, profile["priority"])
    if not isinstance(order, list):
        return Prediction(s, None, unknown=f"the priority order could not be computed: {order}")
    backends = profile["backends"]
    if s.forced is not None:
        if s.forced not in backends:
            raise SettingError("attention_backend", f"no selection data for forced backend {s.forced} in "
                               f"{selection.engine} {s.release} (the data has {', '.join(sorted(backends))})")
        why = reasons(backends[s.forced], s)
        if any(r.startswith("unknown") for r in why):
            return Prediction(s, None, unknown=f"{s.forced}: {'; '.join(why)}", notes=tuple(notes))
        if why:
            return Prediction(s, None, error=_message(facts.get("forced_invalid"), s.forced, why, {}),
                              notes=tuple(notes))
        return Prediction(s, s.forced, kv_cache=_kv(backends[s.forced], s), notes=tuple(notes))
    skipped: list[tuple[str, tuple[str, ...]]] = []
    for name in order:
        info = backends.get(name)
        why = reasons(info, s) if info is not None else ["no selection data for this backend"]
        if any(r.startswith("unknown") or r.startswith("no selection data") for r in why):
            return Prediction(s, None, unknown=f"whether {name} is valid: {'; '.join(why)}",
                              skipped=tuple(skipped), notes=tuple(notes))
        if not why:
            return Prediction(s, name, kv_cache=_kv(info, s), skipped=tuple(skipped), notes=tuple(notes))
        skipped.append((name, tuple(why)))
    return Prediction(s, None, error=_message(facts.get("none_valid"), None, [], dict(skipped)),
                      skipped=tuple(skipped), notes=tuple(notes))


def reasons(info: Mapping[str, Any], s: Setting) -> list[str]:
    """Why a backend is invalid for the setting, in the release's words and order (empty: valid)."""
    if "import_error" in info:
        return ["ImportError"]
    if "reasons" not in info:
        return [f"unknown: {info.get('unknown') or info.get('error') or 'not read'}"]
    r = info["reasons"]
    exact = r["exact"].get(f"{s.dtype}/{s.kv_cache_dtype}")
    if exact is not None:
        out = list(exact)
    else:
        union = set(r["base"]) | set(r["dtype"].get(s.dtype or "", [])) | set(r["kv"].get(s.kv_cache_dtype, []))
        out = [x for x in r["order"] if x in union]
    if s.head_size is not None and not _head_ok(info.get("head_sizes"), s.head_size):
        out.insert(0, "head_size not supported")
    return out


def _head_ok(ranges: Any, head: int) -> bool:
    if not isinstance(ranges, list):
        return True
    return any(lo <= head <= hi and (step == 0 or (head - lo) % step == 0) for lo, hi, step in ranges)


def _kv(info: Mapping[str, Any] | None, s: Setting) -> str | None:
    refused = (info or {}).get("refuses_at_init", {}).get(s.kv_cache_dtype)
    if refused is not None:
        return f"refused when the attention layers are built: {refused}"
    text = (info or {}).get("asserts_at_forward", {}).get(s.kv_cache_dtype)
    if text is None:
        return None
    if text == "unknown":
        return f"may fail at the first forward pass with kv_cache_dtype={s.kv_cache_dtype} (not decided by the data)"
    return f"fails at the first forward pass: {text}"


def _message(template: Any, forced: str | None, why: Sequence[str], skipped: Mapping[str, Sequence[str]]) -> str:
    if not isinstance(template, Mapping) or "message" not in template:
        return "refused (its message could not be read)"
    values = {"selected_backend": f"AttentionBackendEnum.{forced}", "invalid_reasons": repr(list(why)),
              "cls.device_name": "cuda", "config_str": "<the model's attention configuration>",
              "reasons_str": "{" + ", ".join(f"{b}: [{', '.join(r)}]" for b, r in skipped.items()) + "}"}
    text = re.sub(r"\{([^{}]+)\}", lambda m: values.get(m.group(1), m.group(0)), template["message"])
    return f"{template.get('error', 'Error')}: {text}"


# -- loading


def selection_path(engine: str, directory: str | Path | None = None) -> Path:
    base = Path(directory) if directory is not None else history_dir()
    return base / f"{engine}-selection.json"


def load_selection(engine: str, directory: str | Path | None = None) -> Selection | None:
    """The selection data of ``engine``, or None when there is none. Malformed: an ``InputError``."""
    path = selection_path(engine, directory)
    try:
        st = path.stat()
    except OSError:
        return None
    return _load(str(path), (st.st_ino, st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=4)
def _load(source: str, stamp: Any) -> Selection:
    del stamp
    data = load_file(source, "json")
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        raise InputError(source, "format", f"must be {FORMAT} (re-make it with tools/engine_history.py)")
    rows = data.get("releases")
    runs = data.get("runs")
    if not isinstance(rows, list) or not isinstance(runs, list):
        raise InputError(source, "releases", "releases and runs must be lists")
    order: list[str] = []
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping) or not isinstance(r.get("version"), str):
            raise InputError(source, f"releases[{i}].version", "required")
        order.append(r["version"])
    position = {v: i for i, v in enumerate(order)}
    releases: dict[str, Mapping[str, Any] | str] = {}
    for row in rows:
        if "error" in row:
            releases[row["version"]] = str(row["error"])
    for j, run in enumerate(runs):
        if not isinstance(run, Mapping):
            raise InputError(source, f"runs[{j}]", "must be an object")
        first, last = (position.get(e) if isinstance(e := run.get(k), str) else None for k in ("first", "last"))
        if first is None or last is None or first > last:
            raise InputError(source, f"runs[{j}]", "first and last must be releases listed, in order")
        if not isinstance(run.get("machines"), Mapping) or not isinstance(run.get("profiles"), list):
            raise InputError(source, f"runs[{j}]", "needs machines and profiles")
        facts = {k: v for k, v in run.items() if k not in ("first", "last")}
        for v in order[first:last + 1]:
            if v not in releases:
                releases[v] = facts
    for v in order:
        releases.setdefault(v, "not read")
    engine = data.get("engine")
    if not isinstance(engine, str):
        raise InputError(source, "engine", "required")
    grid = data.get("grid")
    return Selection(engine, source, releases, grid if isinstance(grid, Mapping) else {})


# -- a machine's questions


def engines_with_selection(directory: str | Path | None = None) -> list[str]:
    """The registered engines that have selection data."""
    from ..catalog.registry import kb_engine_names

    return [e for e in kb_engine_names() if selection_path(e, directory).is_file()]


def machine_settings(fp: Any, engine: str) -> list[Setting]:
    """The questions a fingerprint asks: its release of ``engine`` on each of its GPUs' compute capabilities, with
    its parameters (``dtype``, ``kv_cache_dtype``, ``attention_backend``, else the engine's
    ``<PREFIX>ATTENTION_BACKEND`` variable, and ``head_size``). FlashInfer: installed when the fingerprint lists
    flashinfer-python; not installed when the engine's install was read and it is absent; else unknown (both are
    answered)."""
    version = fp.packages.get(engine)
    if not version:
        return []
    params = fp.params
    from ..catalog.registry import descriptor

    found = descriptor(engine)
    prefixes = found.env_prefixes if found is not None else ()
    forced = params.get("attention_backend") or next(
        (fp.env[f"{p}ATTENTION_BACKEND"] for p in prefixes if fp.env.get(f"{p}ATTENTION_BACKEND")), None)
    head = params.get("head_size")
    install = fp.installs.get(engine)
    flashinfer: bool | None = True if "flashinfer-python" in fp.packages else (
        False if install is not None and getattr(install, "complete", None) is not None else None)
    caps: list[tuple[int, int]] = []
    for gpu in fp.gpus:
        if gpu.compute_capability:
            cap = parse_capability(gpu.compute_capability)
            if cap not in caps:
                caps.append(cap)
    kv = params.get("kv_cache_dtype")
    return [Setting(str(version), cap, normalize_dtype(_text(params.get("dtype"))),
                    int(head) if isinstance(head, int) and not isinstance(head, bool) else None,
                    _text(kv) or "auto", flashinfer, _text(forced)) for cap in caps]


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def machine_predictions(fp: Any, directory: str | Path | None = None) -> list[dict[str, Any]]:
    """Every prediction a fingerprint asks for, as ``check --json`` writes them (``predictions`` entries): the
    prediction's fields, or ``unavailable`` with the one-line reason the data cannot answer."""
    out: list[dict[str, Any]] = []
    for engine in engines_with_selection(directory):
        try:
            settings = machine_settings(fp, engine)
        except PredictError as exc:
            out.append({"engine": engine, "release": fp.packages.get(engine), "unavailable": str(exc),
                        **({"bad_setting": exc.field} if isinstance(exc, SettingError) else {})})
            continue
        if not settings:
            continue
        selection = load_selection(engine, directory)
        for s in settings:
            entry: dict[str, Any] = {"engine": engine}
            try:
                if selection is None:
                    raise PredictError(f"no selection data for {engine}")
                entry.update(predict(selection, s).to_json())
            except PredictError as exc:
                entry.update({"release": s.release, "compute_capability": f"{s.capability[0]}.{s.capability[1]}",
                              "unavailable": str(exc)})
                if isinstance(exc, SettingError):
                    entry["bad_setting"] = exc.field
            out.append(entry)
    return out


def refuse_bad_settings(entries: Sequence[Mapping[str, Any]], source: str) -> None:
    """A setting the engine does not have (a backend name, a dtype, a compute capability) is bad input: one line
    naming it, raised as an InputError (exit 2), never a prediction line to overlook."""
    for e in entries:
        if e.get("bad_setting"):
            raise InputError(source, f"params.{e['bad_setting']}", str(e["unavailable"]))


def format_predictions(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Lines for ``gpucompat check``: one per prediction."""
    if not entries:
        return []
    lines = ["PREDICTED attention backend (from each release's selector code; matrices/history/*-selection.json)"]
    for e in entries:
        head = f"  {e['engine']} {e.get('release')} on sm {e.get('compute_capability', '?')}"
        if "unavailable" in e:
            lines.append(f"{head}: {e['unavailable']}")
            continue
        asked = [f"dtype={e['dtype']}", f"kv_cache_dtype={e['kv_cache_dtype']}"]
        if e.get("forced_backend"):
            asked.append(f"attention_backend={e['forced_backend']}")
        if e.get("head_size") is not None:
            asked.append(f"head_size={e['head_size']}")
        if e.get("flashinfer") is not None:
            asked.append("FlashInfer installed" if e["flashinfer"] else "without FlashInfer")
        lines.append(f"{head} ({', '.join(asked)}): {_entry_line(e)}")
    return lines


def _entry_line(e: Mapping[str, Any]) -> str:
    if e.get("alternatives"):
        return "; ".join(f"{a['when']}: {_entry_line(a)}" for a in e["alternatives"])
    if e.get("unknown"):
        return f"unknown ({e['unknown']})"
    if e.get("attention_backend") is None:
        return f"refused: {e.get('error')}"
    return str(e["attention_backend"]) + (f", then {e['kv_cache']}" if e.get("kv_cache") else "")
