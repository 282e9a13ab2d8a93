"""What a cell runs with that differs from how its engine ships.

A verdict is evidence about production only when the engine ran as users serve it. Every setting a cell's engine is
started with comes from one of three places, and each is recorded, per cell, as a deviation from the engine's own
defaults:

- ``cell``: an engine parameter of the cell (its matrix block, visible in its id): eager mode, a backend, a dtype;
- ``harness``: a declared default of the harness (the engine descriptor's ``harness_defaults``, with its reason):
  a memory fraction so cells can share a GPU, a fixed seed;
- ``environment``: a variable the cell's ``env`` parameter sets, or one the harness declares (``harness_env``).

Settings the harness needs to drive an engine but that change nothing it computes (how prompts are passed, where
its log goes) are not engine settings and never appear. Where the adapter can read the engine's own default for a
setting (vLLM's EngineArgs, SGLang's ServerArgs), it is kept as ``engine_default`` and a setting equal to it is no
deviation (``apply_engine_defaults``).

Pure functions over the engine registry: the cell's record is made before its engine starts, so a cell that fails
at start still says what it was started with.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..catalog.params import HARNESS_PARAMS
from ..catalog.registry import HarnessDefault, descriptor
from ..common.versions import norm_value

__all__ = ["Deviation", "apply_engine_defaults", "dataclass_defaults", "deviations", "harness_environment",
           "harness_settings"]

_NOT_SETTINGS = HARNESS_PARAMS | frozenset({"server", "endpoint", "flavor", "model_name", "host", "server_command",
                                            "log_path", "api_key", "extra_body", "startup_timeout_s",
                                            "request_timeout_s"})
"""Spec params that choose or reach an engine rather than configure it (the harness keys among them)."""

_UNKNOWN = object()


@dataclass(frozen=True)
class Deviation:
    """One setting a cell's engine ran with that is not (or not known to be) the engine's own default."""

    name: str
    value: Any
    by: str  # "cell" | "harness" | "environment"
    why: str | None = None
    engine_default: Any = _UNKNOWN

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "value": self.value, "by": self.by}
        if self.why:
            data["why"] = self.why
        if self.engine_default is not _UNKNOWN:
            data["engine_default"] = self.engine_default
        return data


def _declared(engine: str, params: Mapping[str, Any]) -> tuple[Mapping[str, HarnessDefault],
                                                                 Mapping[str, HarnessDefault]]:
    """(settings, environment) the harness gives a cell of `engine`: the engine's own declarations, or for an
    `openai` cell the declarations of the server it starts."""
    if ":" in engine:
        return {}, {}
    try:
        found = descriptor(engine)
    except ValueError:
        return {}, {}
    if found is None:
        return {}, {}
    # the server the adapter starts: the cell's, else the default (none for a command of the cell's own)
    server_name = params.get("server", None if params.get("server_command") else found.default_server)
    if found.default_server is not None and isinstance(server_name, str):
        try:
            server = descriptor(server_name)
        except ValueError:
            server = None
        if server is not None and server.server is not None and not params.get("endpoint"):
            return server.server.defaults, {**server.harness_env, **server.server.env_defaults}
        return {}, {}
    return found.harness_defaults, found.harness_env


def harness_settings(engine: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The declared harness defaults a cell of `engine` with `params` gets (values only), for an adapter to start
    its engine with; the cell's own params override them."""
    settings, _ = _declared(engine, params)
    return {name: d.value for name, d in settings.items() if name not in params}


def harness_environment(engine: str, params: Mapping[str, Any],
                        environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The declared harness variables to set for a cell: those neither the environment nor the cell sets."""
    env = os.environ if environ is None else environ
    given = params.get("env")
    cell_env: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    _, declared = _declared(engine, params)
    return {name: str(d.value) for name, d in declared.items() if name not in env and name not in cell_env}


def deviations(engine: str, params: Mapping[str, Any],
               environ: Mapping[str, str] | None = None) -> tuple[Deviation, ...]:
    """Every setting a cell of `engine` with `params` is started with beyond the engine's defaults, in the order:
    the cell's parameters, the harness's declared defaults, environment variables (cell, then harness)."""
    settings, env_declared = _declared(engine, params)
    given = params.get("harness_set")
    added: Mapping[str, Any] = given if isinstance(given, Mapping) else {}  # settings the harness put in the spec
    out = [Deviation(str(name), value, "harness", str(added[name])) if name in added
           else Deviation(str(name), value, "cell") for name, value in params.items() if name not in _NOT_SETTINGS]
    out += [Deviation(name, d.value, "harness", d.why) for name, d in settings.items() if name not in params]
    cell_env = params.get("env")
    if isinstance(cell_env, Mapping):
        out += [Deviation(str(name), str(value), "environment", "set by the cell's env parameter")
                for name, value in cell_env.items()]
    for name, value in harness_environment(engine, params, environ).items():
        out.append(Deviation(name, value, "environment", env_declared[name].why))
    return tuple(out)


def apply_engine_defaults(found: tuple[Deviation, ...], engine_defaults: Mapping[str, Any]) -> tuple[Deviation, ...]:
    """The deviations with the engine's own defaults filled in where the adapter read them; a setting equal to the
    engine's default is not a deviation and is dropped."""
    out = []
    for d in found:
        if d.name not in engine_defaults:
            out.append(d)
            continue
        default = engine_defaults[d.name]
        if _same(d.value, default):
            continue
        out.append(Deviation(d.name, d.value, d.by, d.why, default))
    return tuple(out)


def _same(value: Any, default: Any) -> bool:
    """`0.9 == 0.9`, `"auto" == "auto"`, `True == "true"`, `16 == 16.0`: loosely, as rules compare values."""
    return bool(norm_value(value) == norm_value(default))


def dataclass_defaults(cls: Any, names: Iterable[str]) -> dict[str, Any]:
    """An engine's own default for each of ``names`` that is a field of its arguments dataclass (vLLM's EngineArgs,
    SGLang's ServerArgs) with a plain default; a field whose default a factory makes is left out."""
    try:
        fields = {f.name: f for f in dataclasses.fields(cls)}
    except TypeError:
        return {}
    out: dict[str, Any] = {}
    for name in names:
        found = fields.get(name)
        if found is not None and found.default is not dataclasses.MISSING:
            default = found.default
            out[name] = default if isinstance(default, (bool, int, float, str, type(None))) else str(default)
    return out
