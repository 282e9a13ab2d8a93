"""A cell's attention backend predicted beside the one its engine reported: the record a vLLM cell keeps under
``attention_prediction`` and, when the two differ, a finding of its own. A difference says the selection data
(``matrices/history/<engine>-selection.json``) or its reading is stale for this release and machine, not that the
engine misbehaved; the finding says so.

Pure: the cell's engine, release, parameters, the runner's fingerprint and what the engine reported (its
``RunInfo.attention_backend``, else the line its log prints) in; a dict and a ``Finding`` out.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from .predict import PredictError, engines_with_selection, load_selection, machine_settings, predict
from .verdicts import Finding

PREDICTION_DIFFERS = "gpucompat-attention-prediction-differs"
_LOGGED = (re.compile(r"Using (\w+) attention backend"),  # "Using TRITON_ATTN attention backend out of ..."
           re.compile(r"Using (?:AttentionBackendEnum|_Backend)\.(\w+) backend"))  # a forced backend accepted


def reported_backend(info: Mapping[str, Any] | None, log_tail: str | None) -> str | None:
    """What the engine said it runs: its info's ``attention_backend``, else the last backend its log names."""
    if isinstance(info, Mapping) and isinstance(info.get("attention_backend"), str) and info["attention_backend"]:
        return str(info["attention_backend"])
    found = [m.group(1) for pattern in _LOGGED for m in pattern.finditer(log_tail or "")]
    return found[-1] if found else None


def cell_prediction(engine: str, params: Mapping[str, Any], fp: Any, reported: str | None,
                    version: str | None = None, directory: str | Path | None = None,
                    log_tail: str | None = None) -> dict[str, Any] | None:
    """The record of the prediction for a cell (None: the engine has no selection data at all). ``matches``:
    True or False when both a definite prediction and a reported backend exist; for an engine that failed before
    reporting one, True when the failure predicted (an assert at the first forward pass, a refusal) is in its log
    (``confirmed_by`` quotes it); else None."""
    if engine not in engines_with_selection(directory):
        return None
    packages = {**fp.packages, **({engine: version} if version else {})}
    try:
        settings = machine_settings(replace(fp, packages=packages, params=dict(params)), engine)
        if not settings:
            return None
        selection = load_selection(engine, directory)
        if selection is None:
            raise PredictError(f"no selection data for {engine}")
        entry = predict(selection, settings[0]).to_json()
    except PredictError as exc:
        return {"release": packages.get(engine), "unavailable": str(exc), "reported": reported, "matches": None}
    predicted = _backends(entry)
    entry["reported"] = reported
    entry["matches"] = None if reported is None or not predicted or None in predicted else (
        reported.upper() in predicted)
    if reported is None and log_tail:
        seen = predicted_failure_seen(entry, log_tail)
        try:
            traced = traced_backend(_backend_modules(selection.facts(str(entry["release"]))), log_tail)
        except PredictError:
            traced = None
        if seen is not None:
            entry["matches"], entry["confirmed_by"] = True, f"the engine's log: {seen}"
        elif traced is not None and predicted and None not in predicted:
            name, path = traced
            entry["matches"] = name in predicted
            entry["confirmed_by" if entry["matches"] else "traced"] = (
                f"the engine's log: its traceback runs through {path} ({name})")
    return entry


_BACKEND_FRAME = re.compile(r'vllm/v1/attention/backends/(\w+)\.py", line \d+, in forward\b')


def _backend_modules(facts: Mapping[str, Any]) -> dict[str, str]:
    """module (``flashinfer``) -> backend (``FLASHINFER``): the release's own class paths
    (``vllm.v1.attention.backends.flashinfer.FlashInferBackend``) in its selection data."""
    out: dict[str, str] = {}
    for profile in facts.get("profiles") or ():
        for name, info in (profile.get("backends") or {}).items():
            path = info.get("class") if isinstance(info, Mapping) else None
            if isinstance(path, str) and path.count(".") >= 2:
                out.setdefault(path.rsplit(".", 2)[-2], str(name))
    return out


def traced_backend(modules: Mapping[str, str], log_tail: str) -> tuple[str, str] | None:
    """(backend, file) of the last attention backend whose ``forward`` a traceback in the log runs through: the
    backend that was running when the engine failed, for an engine that failed before saying which it chose."""
    found = [(modules[m.group(1)], f"vllm/v1/attention/backends/{m.group(1)}.py")
             for m in _BACKEND_FRAME.finditer(log_tail) if m.group(1) in modules]
    return found[-1] if found else None


def _squash(text: str) -> str:
    """Quotes and spacing as neither the release's source (as read) nor its log keep them alike."""
    return " ".join(text.replace('"', "'").split())


def predicted_failure_seen(entry: Mapping[str, Any], log_tail: str) -> str | None:
    """The predicted failure's own words (an assert's expression, a refusal's message) when the engine's log holds
    them, else None. Only a definite prediction of a failure is looked for: an engine that failed otherwise, or a
    prediction of a backend that starts, is not confirmed by its log."""
    if entry.get("alternatives") or entry.get("unknown"):
        return None
    outcome = entry.get("outcome")
    if outcome == "asserts":  # "fails at the first forward pass: AssertionError: assert ..."
        text = str(entry.get("kv_cache") or "")
        words = text.rsplit("AssertionError: ", 1)[1] if "AssertionError: " in text else ""
    elif outcome == "refused-at-init":  # "refused when the attention layers are built: <message>"
        words = str(entry.get("kv_cache") or "").split(": ", 1)[-1]
    elif outcome == "refused":  # "<Exception>: <message>"
        words = str(entry.get("error") or "").split(": ", 1)[-1]
    else:
        return None
    words = _squash(words)
    if len(words) < 12:  # too short to tell one failure from another
        return None
    return words if words in _squash(log_tail) else None


def _backends(entry: Mapping[str, Any]) -> set[str | None]:
    """The backends a prediction allows: one, or one per alternative; None stands for "refused or unknown"."""
    if entry.get("alternatives"):
        return {b for a in entry["alternatives"] for b in _backends(a)}
    if entry.get("unknown") or entry.get("attention_backend") is None:
        return {None}
    return {str(entry["attention_backend"]).upper()}


def differs_finding(entry: Mapping[str, Any], engine: str) -> Finding | None:
    """The finding of a cell whose engine picked another backend than predicted (None when they agree or either is
    unknown)."""
    if entry.get("matches") is not False:
        return None
    predicted = entry.get("attention_backend") or "/".join(
        sorted(str(b) for b in _backends(entry) if b)) or "a refusal"
    seen = entry.get("reported") or entry.get("traced")
    summary = (f"prediction differs: {engine} {entry.get('release')} on sm {entry.get('compute_capability')} was "
               f"predicted to pick {predicted} and reported {seen}; the selection data or its "
               f"reading is stale (re-make matrices/history/{engine}-selection.json with tools/engine_history.py)")
    return Finding(id=PREDICTION_DIFFERS, severity="advice", confidence="verified", failure="none",
                   engine=engine, summary=summary, workaround=None, symptom=None, note="measured in this run",
                   claims=(), sources=(("report", "this run"),), action="annotate")
