"""Every option, declared once for pytest and the ``gpucompat`` command (pytest-benchmark's add_global_options).

pytest spells an option ``--gpucompat-NAME``, the command ``--NAME``; both parsers get the same help, type, action
and default from here, so the two can never drift apart. ``PYTEST`` and ``CLI`` say which options each one offers.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def env_int(name: str, default: int, minimum: int = 1) -> int:
    """A whole-number setting of a suite from the environment variable ``name`` (``default`` when unset or empty).
    Anything else stops the collection of the module that reads it with one line naming the variable."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value: int | None = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        import pytest

        raise pytest.Collector.CollectError(f"gpucompat: {name}={text!r}: must be a whole number >= {minimum}")
    return value


def positive_seconds(text: str) -> float:
    """A timeout: a positive, finite number of seconds (``nan``, ``inf``, ``0`` and ``-5`` would disable timeouts or
    fail every cell at once)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"must be a positive number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive number of seconds, got {text!r}")
    return value


def worker_count_or_auto(text: str) -> int | str:
    """``auto`` or a whole number of pytest-xdist workers per GPU, at least 1."""
    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"must be 'auto' or a whole number of workers, at least 1, got {text!r}") from None
    if value < 1:
        raise ValueError(f"must be 'auto' or a whole number of workers, at least 1, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A share of a whole: a number above 0 and at most 1."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"must be a number above 0 and at most 1, got {text!r}") from None
    if not 0 < value <= 1:
        raise ValueError(f"must be a number above 0 and at most 1, got {text!r}")
    return value


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    metavar: str | None = None
    action: str | None = None
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: tuple[str, ...] | None = None
    cli_aliases: tuple[str, ...] = ()  # older spellings the command still accepts
    extra: dict[str, Any] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"help": self.help, "default": self.default}
        for key in ("metavar", "action", "type", "choices"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


_OPTIONS = (
    Option("env", metavar="FILE",
           help="evaluate against a fingerprint file (what-if) instead of this machine; a fleet file (runner name -> "
                "fingerprint) shows each runner's known-bad cells"),
    Option("kb", metavar="PATH", action="append", default=[], help="extra rule file or directory (repeatable)"),
    Option("no-builtin-rules", action="store_true", default=False,
           help="use only the rule files given with the kb option, not the shipped knowledge base"),
    Option("topology", action="store_true", default=False,
           help="check the fingerprint's GPU links against `nvidia-smi topo -m`; exit 1 when they disagree"),
    Option("runner", metavar="NAME", cli_aliases=("--name",),
           help="runner name in fingerprints and reports (default: $GPUCOMPAT_RUNNER or the host name)"),
    Option("run-known-bad", action="store_true", default=False,
           help="run known crash/hang cells as strict xfail under the timeout"),
    Option("timeout", metavar="S", type=positive_seconds, default=600.0,
           help="seconds an engine may take to start or answer before its cell fails (default 600)"),
    Option("log-dir", metavar="DIR",
           help="keep every engine log in DIR (CI artifacts); default: only failed engines' logs are kept"),
    Option("model", metavar="PATH", action="append", default=[],
           help="local model checkpoint to test (repeatable); default: a tiny model built locally"),
    Option("endpoint", metavar="URL",
           help="OpenAI-compatible endpoint for the openai engine instead of a server started here"),
    Option("report", metavar="PATH", help="write the JSON report here"),
    Option("baseline", metavar="FILE",
           help="compare with this report at the end; a regression fails the run; a missing FILE is a first run: "
                "a note says how this run's report becomes it"),
    Option("allow-missing", action="store_true", default=False,
           help="with a baseline: cells that passed there and did not run or were not measured here are listed, "
                "not a regression (by default lost coverage fails the gate)"),
    Option("golden", metavar="PATH",
           help="check every precision cell against the golden outputs in PATH (a directory of golden files, or one "
                "file) recorded for the same model and prompts on any runner; another model, tokenizer or prompt "
                "set is refused with the reason"),
    Option("record-golden", metavar="DIR",
           help="record each precision cell's greedy tokens and top-N logprobs (and the reference's) into DIR, one "
                "file per model and prompt set, to commit and check other runners against"),
    Option("prompts", metavar="FILE",
           help="the precision prompts as JSON lines ({\"text\": ...} or {\"messages\": [...]}), tokenized with each "
                "model's own tokenizer; default: matrices/prompts.yaml for checkpoints, fixed token ids for tiny "
                "built models"),
    Option("workers-per-gpu", metavar="K|auto", type=worker_count_or_auto, default=1,
           help="pytest-xdist workers that share each GPU (-n auto starts K per GPU; auto: up to 4, 4 CPU cores "
                "each); an engine starts only once its GPU memory fits beside the others', a cell declared "
                "exclusive runs alone; default 1: one worker per GPU, nothing shared"),
    Option("gpu-wait", metavar="S", type=positive_seconds, default=1800.0,
           help="seconds a cell may wait for room on a shared GPU before it fails, naming what held it "
                "(default 1800)"),
    Option("gpu-budget", metavar="FRACTION", type=fraction, default=0.9,
           help="share of each GPU's memory that the engines of cells sharing it may reserve, less what other "
                "processes hold (default 0.9)"),
    Option("compare-fail", metavar="EXPR", action="append", default=[], cli_aliases=("--fail-on",),
           help="metric threshold, repeatable: tokens_per_s:-10%% (a drop of more than 10%%), leak_mib_per_cycle:+1 "
                "(a rise of more than 1); a metric the suites record (docs/ci.md) or one a report has, an unknown "
                "one is a usage error; a change within the runs' measured spread is not a regression; a threshold "
                "replaces the metric's default tolerance (docs/ci.md: tokens/s 25%% lower, drift, TTFT and leak "
                "higher), no-defaults drops those; changed: fail on any figure changed beyond the runs' noise "
                "(5%% where no spread was recorded)"),
)
OPTIONS = {o.name: o for o in _OPTIONS}

PYTEST = ("env", "kb", "no-builtin-rules", "run-known-bad", "timeout", "log-dir", "model", "endpoint", "report",
          "baseline", "compare-fail", "allow-missing", "runner", "golden", "record-golden", "prompts",
          "workers-per-gpu", "gpu-wait", "gpu-budget")
"""The options of ``pytest --gpucompat``, as ``--gpucompat-NAME``."""

CLI = {"env": ("runner", "topology"), "check": ("env", "kb", "no-builtin-rules"), "rules": ("kb", "no-builtin-rules"),
       "diff": ("compare-fail", "allow-missing"), "explain": ("kb", "no-builtin-rules"), "golden": ("golden",)}
"""The options of each ``gpucompat`` command, as ``--NAME``."""


def add_options(addoption: Callable[..., Any], prefix: str, names: Iterable[str], cli: bool = False,
                type_error: Callable[[str, ValueError], Exception] | None = None) -> None:
    """Declare ``names`` through ``addoption`` (pytest's ``group.addoption`` or argparse's ``add_argument``) as
    ``--{prefix}{name}``; ``type_error`` turns a bad value into the parser's own one-line error."""
    for name in names:
        option = OPTIONS[name]
        kwargs = option.kwargs()
        if option.type is not None and type_error is not None:
            kwargs["type"] = _checked(option, prefix, type_error)
        flags = [f"--{prefix}{name}", *(option.cli_aliases if cli else ())]
        addoption(*flags, **kwargs)


def _checked(option: Option, prefix: str, type_error: Callable[[str, ValueError], Exception]) -> Callable[[str], Any]:
    convert = option.type
    assert convert is not None

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:
            raise type_error(f"--{prefix}{option.name}", exc) from None

    parse.__name__ = option.name  # argparse names the type in its own messages
    return parse


@dataclass(frozen=True)
class Settings:
    """The options of one pytest run, parsed once at configure (ini values merged) and kept in the run state: the
    fixtures, the report collector and the hooks read them here."""

    env: str | None = None
    kb: tuple[str, ...] = ()
    no_builtin_rules: bool = False
    runner: str | None = None
    run_known_bad: bool = False
    timeout: float = 600.0
    log_dir: Path | None = None
    model: tuple[str, ...] = ()
    endpoint: str | None = None
    report: str | None = None
    baseline: str | None = None
    compare_fail: tuple[str, ...] = ()
    allow_missing: bool = False
    golden: str | None = None
    record_golden: str | None = None
    prompts: str | None = None
    workers_per_gpu: int | str = 1
    gpu_wait: float = 1800.0
    gpu_budget: float = 0.9

    @classmethod
    def from_pytest(cls, config: Any) -> Settings:
        """From a ``pytest.Config``: ``--gpucompat-NAME`` options, plus the ini ``gpucompat_kb`` (before the
        command line's) and ``gpucompat_log_dir`` (relative to the rootdir; the command line's wins)."""
        def opt(name: str) -> Any:
            return config.getoption("gpucompat_" + name.replace("-", "_"), OPTIONS[name].default)

        log_dir = opt("log-dir")
        ini_log_dir = config.getini("gpucompat_log_dir")
        if log_dir:
            log_path: Path | None = Path(log_dir).absolute()
        else:
            log_path = (config.rootpath / str(ini_log_dir)).absolute() if ini_log_dir else None
        return cls(
            env=opt("env"), kb=(*map(str, config.getini("gpucompat_kb")), *(opt("kb") or ())),
            no_builtin_rules=bool(opt("no-builtin-rules")), runner=opt("runner"),
            run_known_bad=bool(opt("run-known-bad")), timeout=float(opt("timeout")), log_dir=log_path,
            model=tuple(opt("model") or ()), endpoint=opt("endpoint"), report=opt("report"), baseline=opt("baseline"),
            compare_fail=tuple(opt("compare-fail") or ()), allow_missing=bool(opt("allow-missing")),
            golden=opt("golden"), record_golden=opt("record-golden"),
            prompts=opt("prompts"), workers_per_gpu=opt("workers-per-gpu"),
            gpu_wait=float(opt("gpu-wait")), gpu_budget=float(opt("gpu-budget")),
        )
