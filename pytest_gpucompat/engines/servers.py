"""Command lines of OpenAI-compatible servers, built from each engine's `ServerCommand` (catalog/registry.py), and
the small network helpers the `openai` engine needs. Nothing is started here.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..catalog.base import EngineFailed, EngineUnavailable
from ..catalog.loglines import exception_line
from ..catalog.registry import canonical_name, descriptor, server_names
from ..common import jsontext

COMMAND = "command"
"""The `server` value for any other OpenAI-compatible server, started from `server_command`."""


def servers() -> tuple[str, ...]:
    """What `server:` may name: every engine with a ServerCommand, then `command`."""
    return (*server_names(), COMMAND)


def server_name(value: Any) -> str | None:
    """The registry name of a server (aliases such as `trtllm` accepted), `command`, or None when unknown."""
    text = str(value)
    if text == COMMAND:
        return text
    try:
        name = canonical_name(text) if ":" not in text else text
    except ValueError:
        return None
    return name if name in server_names() else None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def cli_flags(params: Mapping[str, Any], style: str) -> list[str]:
    """`{"max_model_len": 512, "enforce_eager": True}` -> `--max-model-len 512 --enforce-eager` (style "dash"),
    or `--max_model_len 512` (style "underscore"). False booleans are left out, dicts become JSON."""
    out: list[str] = []
    for key, value in params.items():
        flag = "--" + (key.replace("_", "-") if style == "dash" else key)
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, Mapping):
            out += [flag, jsontext.dumps(dict(value))]
        elif isinstance(value, (list, tuple)):
            out += [flag, *[str(v) for v in value]]
        else:
            out += [flag, str(value)]
    return out


def require_module(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise EngineUnavailable(f"openai: cannot start a {module} server: No module named {module!r}")


def engine_server_command(server: str, model: str, host: str, port: int, settings: Mapping[str, Any],
                          options_file: Any = None) -> list[str]:
    """The command line that serves `model` with `server`'s ServerCommand. The head is its executable when on PATH,
    else its fallback once its module is known to be importable; settings it does not take on the command line
    (`cli_options`) are written as YAML to `options_file()` (a callable returning a Path) and passed by name."""
    found = descriptor(server)
    if found is None or found.server is None:
        raise EngineFailed(f"openai: {server} has no OpenAI-compatible server")
    spec = found.server
    values = {"python": sys.executable, "model": model, "host": host, "port": str(port)}
    exe = shutil.which(spec.executable) if spec.executable else None
    if exe is None and found.module is not None:
        require_module(found.module)
    if exe is not None:
        head = [exe]
    elif spec.fallback:
        head = [part.format(**values) for part in spec.fallback]
    else:
        raise EngineUnavailable(f"openai/{server}: {spec.executable} is not on PATH")
    cmd = [*head, *(part.format(**values) for part in spec.argv)]
    settings = {spec.cli_aliases.get(k, k): v for k, v in settings.items()}
    if spec.cli_options is None:
        return cmd + cli_flags(settings, spec.flag_style)
    cli = {k: v for k, v in settings.items() if k in spec.cli_options}
    rest = {k: v for k, v in settings.items() if k not in spec.cli_options}
    cmd += cli_flags(cli, spec.flag_style)
    if rest and spec.options_file_flag and options_file is not None:
        import yaml

        path: Path = options_file()
        path.write_text(yaml.safe_dump(rest))
        cmd += [spec.options_file_flag, str(path)]
    return cmd


def custom_server_command(template: Any, model: str, host: str, port: int) -> list[str]:
    """Any OpenAI-compatible server: `server_command` with {host}, {port}, {model}, {python} placeholders."""
    if isinstance(template, str):
        parts = shlex.split(template)
    elif isinstance(template, (list, tuple)) and template:
        parts = [str(p) for p in template]
    else:
        raise EngineFailed("openai: server_command must be a command line (string or list)")
    values = {"host": host, "port": str(port), "model": model, "python": sys.executable}
    try:
        return [p.format(**values) for p in parts]
    except (KeyError, IndexError, ValueError) as exc:
        raise EngineFailed(f"openai: bad placeholder in server_command: {exception_line(exc)}") from None
