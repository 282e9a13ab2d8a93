"""Short one-line texts shared by the renderers and the collector: reasons, fingerprints, parameters.

Two ways to make a line of a multi-line text, not to be confused: `first_line` keeps the first line (a pytest
message or an exception's repr says what matters there), `one_line` folds every line into one (a reason shown in a
table cell or a title, where nothing may be lost but the line breaks).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any


def first_line(text: str | None) -> str:
    """The first non-blank line of `text`, without its leading whitespace; `""` for None or blank text."""
    stripped = (text or "").strip()
    return stripped.splitlines()[0] if stripped else ""


def one_line(text: object, limit: int | None = None) -> str:
    """All of `text` on one line (runs of whitespace, newlines included, become one space); `""` for None.

    With `limit`, a longer line is cut to `limit` characters, the last one an ellipsis.
    """
    line = " ".join(("" if text is None else str(text)).split())
    if limit is not None and len(line) > limit:
        line = line[: limit - 1] + "…"
    return line


def plain(value: Any) -> str:
    """A parameter's value as written by hand: a string as is, anything else as compact, key-sorted JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def gpu_summary(fingerprint: Mapping[str, Any]) -> str:
    """`8× NVIDIA H200`, `NVIDIA A100 + NVIDIA L4`, or `no GPU` - what a reader looks for first."""
    gpus = fingerprint.get("gpus") or []
    if not gpus:
        return "no GPU"
    counts: dict[str, int] = {}
    for gpu in gpus:
        name = str((gpu or {}).get("name") or "unknown GPU")
        counts[name] = counts.get(name, 0) + 1
    return " + ".join(f"{n}× {name}" if n > 1 else name for name, n in counts.items())


def stack_summary(fingerprint: Mapping[str, Any]) -> str:
    """`driver 580.159.04 · CUDA 13.0 (runtime 12.8)`; unknown parts say so rather than vanish."""
    driver = fingerprint.get("driver") or "unknown"
    cuda = fingerprint.get("cuda_driver") or "unknown"
    runtime = fingerprint.get("cuda_runtime")
    text = f"driver {driver} · CUDA {cuda}"
    if runtime and runtime != cuda:
        text += f" (runtime {runtime})"
    return text


def engine_versions(fingerprint: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Installed engine and torch versions: every registered engine's key that the fingerprint tracks (asked live;
    `openai`'s distribution, requests, is no engine version and is not tracked), in registration order, then torch."""
    from ..catalog.registry import descriptors
    from ..machine.stack import tracked_distributions

    packages = fingerprint.get("packages") or {}
    tracked = tracked_distributions()
    names = dict.fromkeys([key for d in descriptors() for key in (d.name, d.distribution) if key in tracked]
                          + ["torch"])
    return [(name, str(packages[name])) for name in names if packages.get(name)]


def incomplete_installs(runners: Mapping[str, Mapping[str, Any]], max_missing: int = 8) -> list[str]:
    """One plain sentence per runner and engine its fingerprint's `installs` says is installed without its declared
    requirements (`complete: false`); none for a complete or unchecked install, or a report written before
    `installs` existed."""
    out = []
    for runner, fingerprint in runners.items():
        installs = fingerprint.get("installs")
        if not isinstance(installs, Mapping):
            continue
        for engine, install in installs.items():
            if not isinstance(install, Mapping) or install.get("complete") is not False:
                continue
            missing = [one_line(m, 200) for m in install.get("missing") or () if isinstance(m, str)]
            shown = ", ".join(missing[:max_missing]) or "requirements not listed"
            if len(missing) > max_missing:
                shown += f" and {len(missing) - max_missing} more"
            version = install.get("version")
            who = one_line(f"{engine} {version}" if isinstance(version, str) and version else engine, 120)
            out.append(f"{who} on {one_line(runner, 120)} is installed without its declared requirements: {shown}: "
                       "it picks other backends than a default install")
    return out


def format_params(params: Mapping[str, Any]) -> str:
    """`dtype=bfloat16 tensor_parallel_size=2`: stable, short, one line."""
    return " ".join(f"{k}={plain(v)}" for k, v in params.items())



def model_of(nodeid: str, engine: str | None) -> str | None:
    """The model a matrix cell ran, from its test id (``test[tiny-mistral-vllm-dtype=...]`` -> ``tiny-mistral``):
    what comes before the engine's name where that name is followed by the first ``key=`` or ends the id; None
    when the id names no model (an older report, or no engine)."""
    _, sep, ident = nodeid.partition("[")
    if not sep or not engine:
        return None
    ident = ident[:-1] if ident.endswith("]") else ident
    found = re.match(rf"(?P<model>.+?)-{re.escape(engine)}(?:-[A-Za-z_][A-Za-z0-9_]*=|$)", ident)
    return found.group("model") if found else None


def models_in(cells: Iterable[Any]) -> set[str]:
    """The models a report's cells ran (``model_of`` each): more than one, and a matrix row must say which."""
    return {m for c in cells if (m := model_of(c.nodeid, c.engine)) is not None}
