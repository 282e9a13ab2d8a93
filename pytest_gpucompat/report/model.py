"""The report of a run (or of several merged runs): plain frozen data, its JSON form, and safe reading/writing.

Readers must not need `jsonschema` at run time, so `load_report` checks the fields that matter by hand (required
keys, types, enums) and says what is wrong in one line that names the file and the JSON path of the bad field.
`schema.json` next to this module is the documented contract; the tests check that both agree.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_gpucompat import __version__

SCHEMA_VERSION = 1
MAX_REPORT_BYTES = 1024 * 1024 * 1024  # a merged report of a large fleet is hundreds of MiB; a bigger file is not one

OUTCOMES: tuple[str, ...] = ("passed", "failed", "xfailed", "xpassed", "skipped", "error", "not-covered")
SEVERITIES: tuple[str, ...] = ("broken", "degraded", "advice")
CONFIDENCES: tuple[str, ...] = ("documents", "upstream", "verified")
ACTIONS: tuple[str, ...] = ("skip", "xfail-strict", "xfail", "annotate")

#: Outcomes that mean "the runner ran this cell" (not-covered and skipped did not run it).
RAN_OUTCOMES: frozenset[str] = frozenset({"passed", "failed", "xfailed", "xpassed", "error"})


_CELLS_MARK = "\x00gpucompat-cells\x00"  # stands for the cells while the rest is indented; no string has it


class ReportError(Exception):
    """A report file that cannot be used; the message is one line meant for the user, never a traceback."""


def utc_now() -> str:
    """ISO-8601 UTC timestamp with a `Z`, to the second: reports are compared by humans, not by nanoseconds."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _finite(value: Any) -> float | None:
    """JSON has no NaN/Infinity; a metric that is not a finite number is written as null ("not measured")."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _split_known(data: Mapping[str, Any], known: Iterable[str]) -> dict[str, Any]:
    names = set(known)
    return {k: v for k, v in data.items() if k not in names}


@dataclass(frozen=True, kw_only=True)
class Finding:
    """A knowledge-base rule that matched a cell; unknown keys are kept in `extra` so nothing is lost on rewrite."""

    id: str
    severity: str
    confidence: str | None = None
    summary: str = ""
    action: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    _KEYS = ("id", "severity", "confidence", "summary", "action", "unconfirmed")

    @property
    def unconfirmed(self) -> bool:
        """Only the seed documents say so: shown apart, never colours a cell or counts as a problem."""
        return self.confidence == "documents"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.id,
            "severity": self.severity,
            "confidence": self.confidence,
            "summary": self.summary,
            "action": self.action,
            "unconfirmed": self.unconfirmed,
        }
        data.update({k: v for k, v in self.extra.items() if k not in data})
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        return cls(
            id=str(data["id"]),
            severity=str(data["severity"]),
            confidence=data.get("confidence"),
            summary=data.get("summary") or "",
            action=data.get("action"),
            extra=_split_known(data, cls._KEYS),
        )


def _test_of(nodeid: str) -> str:
    """`path::test[params]` -> `path::test`: the test function a parametrized item belongs to."""
    return nodeid.split("[", 1)[0]


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One test item of a gpucompat matrix as one runner saw it."""

    nodeid: str
    test: str = ""
    engine: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    axes: Mapping[str, Any] = field(default_factory=dict)
    outcome: str
    reason: str | None = None
    rules: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    duration_s: float | None = None
    log_tail: str | None = None
    worker: str | None = None
    runner: str
    when: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    _KEYS = (
        "nodeid",
        "test",
        "engine",
        "params",
        "axes",
        "outcome",
        "reason",
        "rules",
        "findings",
        "metrics",
        "duration_s",
        "log_tail",
        "worker",
        "runner",
        "when",
    )

    def __post_init__(self) -> None:
        # Accept what the plugin naturally has (lists, finding dicts) but store immutable, checked values.
        if self.outcome not in OUTCOMES:
            raise ValueError(f"cell {self.nodeid!r}: unknown outcome {self.outcome!r} (one of {', '.join(OUTCOMES)})")
        if not self.test:
            object.__setattr__(self, "test", _test_of(self.nodeid))
        object.__setattr__(self, "rules", tuple(str(r) for r in self.rules))
        object.__setattr__(
            self,
            "findings",
            tuple(f if isinstance(f, Finding) else Finding.from_dict(f) for f in self.findings),
        )
        object.__setattr__(self, "params", dict(self.params))
        object.__setattr__(self, "axes", dict(self.axes))
        object.__setattr__(self, "metrics", {str(k): _finite(v) for k, v in self.metrics.items()})
        object.__setattr__(self, "duration_s", _finite(self.duration_s))
        object.__setattr__(self, "extra", dict(self.extra))

    @property
    def ran(self) -> bool:
        """Whether this runner actually executed the cell (as opposed to skipping it or not covering it)."""
        return self.outcome in RAN_OUTCOMES

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "nodeid": self.nodeid,
            "test": self.test,
            "engine": self.engine,
            "params": dict(self.params),
            "axes": dict(self.axes),
            "outcome": self.outcome,
            "reason": self.reason,
            "rules": list(self.rules),
            "findings": [f.to_dict() for f in self.findings],
            "metrics": dict(self.metrics),
            "duration_s": self.duration_s,
            "log_tail": self.log_tail,
            "worker": self.worker,
            "runner": self.runner,
            "when": self.when,
        }
        data.update({k: v for k, v in self.extra.items() if k not in data})
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, runner: str | None = None) -> Cell:
        """Build from the JSON form; `runner` fills in a missing `runner` key (the plugin knows its own name).

        Unknown keys are kept in `extra`; a mapping under the key `extra` is merged into them (so a caller can
        pass the dataclass field by name), and they are written back as plain keys of the cell.
        """
        extra = _split_known(data, cls._KEYS)
        nested = extra.pop("extra", None)
        if isinstance(nested, Mapping):
            extra = {**nested, **extra}
        elif nested is not None:
            extra["extra"] = nested
        return cls(
            nodeid=str(data["nodeid"]),
            test=data.get("test") or "",
            engine=data.get("engine"),
            params=data.get("params") or {},
            axes=data.get("axes") or {},
            outcome=str(data["outcome"]),
            reason=data.get("reason"),
            rules=tuple(data.get("rules") or ()),
            findings=tuple(Finding.from_dict(f) for f in data.get("findings") or ()),
            metrics=data.get("metrics") or {},
            duration_s=data.get("duration_s"),
            log_tail=data.get("log_tail"),
            worker=data.get("worker"),
            runner=str(data.get("runner") or runner or ""),
            when=data.get("when"),
            extra=extra,
        )


@dataclass(frozen=True, kw_only=True)
class Report:
    """Cells of one or several runners, with each runner's fingerprint; `summary` is derived, never stored."""

    runners: Mapping[str, Mapping[str, Any]]
    cells: tuple[Cell, ...]
    interrupted: bool = False
    exitstatus: int | None = None
    created: str = field(default_factory=utc_now)
    tool_version: str = __version__
    schema_version: int = SCHEMA_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)

    _KEYS = (
        "schema_version",
        "tool_version",
        "created",
        "interrupted",
        "exitstatus",
        "summary",
        "runners",
        "cells",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "runners", {str(k): dict(v) for k, v in self.runners.items()})
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "extra", dict(self.extra))
        unknown = sorted({c.runner for c in self.cells} - set(self.runners))
        if unknown:
            raise ValueError(f"cells name runners without a fingerprint: {', '.join(map(repr, unknown))}")

    @classmethod
    def from_run(
        cls,
        fingerprint: Mapping[str, Any],
        cells: Iterable[Cell | Mapping[str, Any]],
        *,
        interrupted: bool = False,
        exitstatus: int | None = None,
        created: str | None = None,
    ) -> Report:
        """The report of one pytest run: one runner, named by its fingerprint (`local` when it has no name)."""
        name = str(fingerprint.get("name") or "local")
        # One run, one runner: every cell is this runner's, whatever its dict said.
        built = tuple(
            replace(c, runner=name) if isinstance(c, Cell) else Cell.from_dict({**c, "runner": name}) for c in cells
        )
        return cls(
            runners={name: dict(fingerprint)},
            cells=built,
            interrupted=interrupted,
            exitstatus=exitstatus,
            created=created or utc_now(),
        )

    @property
    def summary(self) -> dict[str, Any]:
        """Counts for humans and dashboards: derived from the cells so it can never disagree with them."""
        outcomes = dict.fromkeys(OUTCOMES, 0)
        per_runner: dict[str, dict[str, int]] = {name: dict.fromkeys(OUTCOMES, 0) for name in self.runners}
        severities = dict.fromkeys(SEVERITIES, 0)
        unconfirmed = 0
        by_nodeid: dict[str, bool] = {}
        for cell in self.cells:
            outcomes[cell.outcome] += 1
            per_runner.setdefault(cell.runner, dict.fromkeys(OUTCOMES, 0))[cell.outcome] += 1
            for finding in cell.findings:
                if finding.unconfirmed:
                    unconfirmed += 1
                else:
                    severities[finding.severity] = severities.get(finding.severity, 0) + 1
            by_nodeid[cell.nodeid] = by_nodeid.get(cell.nodeid, False) or cell.outcome != "not-covered"
        return {
            "cells": len(self.cells),
            "nodeids": len(by_nodeid),
            "runners": len(self.runners),
            "outcomes": outcomes,
            "per_runner": per_runner,
            "findings": severities,
            "unconfirmed_claims": unconfirmed,
            "uncovered": sum(1 for covered in by_nodeid.values() if not covered),
        }

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "created": self.created,
            "interrupted": self.interrupted,
            "exitstatus": self.exitstatus,
            "summary": self.summary,
            "runners": {name: dict(fp) for name, fp in self.runners.items()},
            "cells": [c.to_dict() for c in self.cells],
        }
        data.update({k: v for k, v in self.extra.items() if k not in data})
        return data

    def to_json(self) -> str:
        """Strict JSON (no NaN), UTF-8 friendly, stable key order, trailing newline; indented, one cell per line.

        One line per cell reads and diffs cell by cell, and lets Python's C encoder do the bulk: with ``indent``
        json.dumps falls back to its pure-Python encoder, five to seven times slower on a large report.
        """
        data = self.to_dict()
        cells = [json.dumps(c, ensure_ascii=False, allow_nan=False) for c in data["cells"]]
        data["cells"] = _CELLS_MARK
        text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
        body = "[\n    " + ",\n    ".join(cells) + "\n  ]" if cells else "[]"
        return text.replace(json.dumps(_CELLS_MARK), body, 1) + "\n"

    @classmethod
    def from_dict(cls, data: Any) -> Report:
        """Check `data` like `load_report` does (ReportError naming the JSON path), then build the Report."""
        try:
            check_report_dict(data)
        except _Invalid as bad:
            raise ReportError(f"report: {bad.path}: {bad.problem}") from None
        return cls._build(data)

    @classmethod
    def _build(cls, data: Mapping[str, Any]) -> Report:
        return cls(
            runners={str(k): dict(v) for k, v in data["runners"].items()},
            cells=tuple(Cell.from_dict(c) for c in data["cells"]),
            interrupted=bool(data.get("interrupted", False)),
            exitstatus=data.get("exitstatus"),
            created=str(data["created"]),
            tool_version=str(data["tool_version"]),
            schema_version=int(data["schema_version"]),
            extra=_split_known(data, cls._KEYS),
        )


# --- validation --------------------------------------------------------------------------------------------------

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Invalid(Exception):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def _child(path: str, key: str | int) -> str:
    """JSONPath-style location: `$.cells[3].findings[0].severity`, `$.runners["runner-a#2"]`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _IDENT.match(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _type(value: Any, path: str, *kinds: str) -> None:
    kind = _kind(value)
    if kind in kinds or (kind == "integer" and "number" in kinds):
        return
    raise _Invalid(path, f"expected {' or '.join(kinds)}, got {kind} {_show(value)}")


def _enum(value: Any, path: str, allowed: tuple[str, ...], nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if value not in allowed:
        raise _Invalid(path, f"{_show(value)} is not one of {', '.join(allowed)}")


def _required(obj: Mapping[str, Any], path: str, keys: Iterable[str]) -> None:
    for key in keys:
        if key not in obj:
            raise _Invalid(_child(path, key), "required field is missing")


def _optional(obj: Mapping[str, Any], path: str, key: str, *kinds: str) -> None:
    if key in obj:
        _type(obj[key], _child(path, key), *kinds)


def _check_fingerprint(fp: Any, path: str) -> None:
    _type(fp, path, "object")
    _optional(fp, path, "name", "string", "null")
    for key in ("driver", "cuda_driver", "cuda_runtime", "interconnect", "os", "libc", "python"):
        _optional(fp, path, key, "string", "null")
    _optional(fp, path, "packages", "object")
    for name, version in (fp.get("packages") or {}).items():
        _type(version, _child(_child(path, "packages"), name), "string", "null")
    _optional(fp, path, "reasons", "array")
    for i, reason in enumerate(fp.get("reasons") or ()):
        _type(reason, _child(_child(path, "reasons"), i), "string")
    _optional(fp, path, "gpus", "array")
    for i, gpu in enumerate(fp.get("gpus") or ()):
        gpath = _child(_child(path, "gpus"), i)
        _type(gpu, gpath, "object")
        _optional(gpu, gpath, "name", "string", "null")
        _optional(gpu, gpath, "index", "integer", "null")
        _optional(gpu, gpath, "memory_mib", "number", "null")


def _check_finding(finding: Any, path: str) -> None:
    _type(finding, path, "object")
    _required(finding, path, ("id", "severity"))
    _type(finding["id"], _child(path, "id"), "string")
    _enum(finding["severity"], _child(path, "severity"), SEVERITIES)
    _enum(finding.get("confidence"), _child(path, "confidence"), CONFIDENCES, nullable=True)
    _enum(finding.get("action"), _child(path, "action"), ACTIONS, nullable=True)
    _optional(finding, path, "summary", "string", "null")


def _check_cell(cell: Any, path: str, runners: Mapping[str, Any]) -> None:
    _type(cell, path, "object")
    _required(cell, path, ("nodeid", "outcome", "runner"))
    _type(cell["nodeid"], _child(path, "nodeid"), "string")
    if not cell["nodeid"]:
        raise _Invalid(_child(path, "nodeid"), "must not be empty")
    _enum(cell["outcome"], _child(path, "outcome"), OUTCOMES)
    _type(cell["runner"], _child(path, "runner"), "string")
    if cell["runner"] not in runners:
        raise _Invalid(_child(path, "runner"), f"{_show(cell['runner'])} is not a key of $.runners")
    _optional(cell, path, "test", "string")
    for key in ("engine", "reason", "log_tail", "worker", "when"):
        _optional(cell, path, key, "string", "null")
    _optional(cell, path, "params", "object")
    _optional(cell, path, "axes", "object")
    _optional(cell, path, "duration_s", "number", "null")
    _optional(cell, path, "rules", "array")
    for i, rule in enumerate(cell.get("rules") or ()):
        _type(rule, _child(_child(path, "rules"), i), "string")
    _optional(cell, path, "findings", "array")
    for i, finding in enumerate(cell.get("findings") or ()):
        _check_finding(finding, _child(_child(path, "findings"), i))
    _optional(cell, path, "metrics", "object")
    for name, value in (cell.get("metrics") or {}).items():
        _type(value, _child(_child(path, "metrics"), name), "number", "null")


def check_report_dict(data: Any) -> None:
    """Raise `_Invalid(path, problem)` at the first field that breaks the schema's rules that matter."""
    _type(data, "$", "object")
    _required(data, "$", ("schema_version", "tool_version", "created", "runners", "cells"))
    _type(data["schema_version"], "$.schema_version", "integer")
    if data["schema_version"] != SCHEMA_VERSION:
        raise _Invalid(
            "$.schema_version",
            f"unsupported schema version {data['schema_version']} (this version of pytest-gpucompat reads "
            f"{SCHEMA_VERSION})",
        )
    _type(data["tool_version"], "$.tool_version", "string")
    _type(data["created"], "$.created", "string")
    _optional(data, "$", "interrupted", "boolean")
    _optional(data, "$", "exitstatus", "integer", "null")
    _optional(data, "$", "summary", "object")
    _type(data["runners"], "$.runners", "object")
    for name, fp in data["runners"].items():
        _check_fingerprint(fp, _child("$.runners", name))
    _type(data["cells"], "$.cells", "array")
    for i, cell in enumerate(data["cells"]):
        _check_cell(cell, _child("$.cells", i), data["runners"])


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def load_report(path: str | os.PathLike[str]) -> Report:
    """Read and check a report file; any problem is a one-line ReportError naming the file (and field).

    A report may come from another machine's CI artifact, so it is read like any user file (bounded size, UTF-8,
    bounded nesting, only finite numbers a float can hold: a metric of 10**400 would overflow in merge and diff).
    """
    from pytest_gpucompat.errors import InputError
    from pytest_gpucompat.inputs import check_tree, parse_json, read_text

    name = os.fspath(path)
    try:
        data = parse_json(read_text(path, MAX_REPORT_BYTES), name)
    except InputError as exc:
        raise ReportError(_one_line(str(exc))) from None
    if not isinstance(data, dict) or "schema_version" not in data:  # a bench result, a fingerprint, any JSON
        raise ReportError(f"{name}: not a gpucompat report")
    bad = check_tree(data)
    if bad is not None:
        raise ReportError(f"{name}: {_json_path(bad[0])}: {bad[1]}")
    try:
        check_report_dict(data)
    except _Invalid as bad_field:
        raise ReportError(f"{name}: {bad_field.path}: {_one_line(bad_field.problem)}") from None
    try:
        return Report._build(data)
    except (ValueError, TypeError, KeyError) as exc:  # pragma: no cover - the check above should catch it first
        raise ReportError(f"{name}: {_one_line(str(exc))}") from None


def _json_path(keys: Iterable[Any]) -> str:
    path = "$"
    for key in keys:
        path = _child(path, key if isinstance(key, int) and not isinstance(key, bool) else str(key))
    return path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write via a temp file in the same directory + fsync + os.replace: readers never see half a file."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            mode = target.stat().st_mode & 0o777
        except OSError:
            mode = 0o644  # mkstemp makes 0600; a report is meant to be read by others (CI artifacts)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if os.name == "posix":
        try:
            dir_fd = os.open(directory, os.O_RDONLY)
        except OSError:
            return target
        try:
            os.fsync(dir_fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)
    return target


def report_path_problem(path: str | os.PathLike[str]) -> str | None:
    """Why a report cannot be written at ``path``, or None: checked before the first test, not after the last."""
    target = Path(path)
    if target.is_dir():
        return "is a directory"
    parent = target.parent
    if not parent.exists():
        return f"directory {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    return None


def write_failure_message(path: str | os.PathLike[str], exc: OSError, checkpoint: tuple[int, float] | None) -> str:
    """The one line for a final report write that failed (a full disk): what was lost and what is kept.

    ``checkpoint`` is (cells, time.time()) of the last checkpoint written, or None; writes are atomic, so a failed
    write leaves that checkpoint (or whatever file was there before) untouched.
    """
    name = os.fspath(path)
    if checkpoint is None:
        kept = f"no checkpoint was written, {name} is unchanged"
    else:
        at = datetime.fromtimestamp(checkpoint[1]).strftime("%H:%M:%S")
        kept = f"the last checkpoint ({checkpoint[0]} cells, at {at}) is kept at {name}"
    return f"gpucompat: could not write {name}: {_one_line(exc.strerror or str(exc))}; {kept}"


def write_report_atomic(report: Report, path: str | os.PathLike[str]) -> Path:
    """Write the report as JSON atomically (see `write_text_atomic`)."""
    return write_text_atomic(path, report.to_json())


# --- small presentation helpers shared by the renderers ------------------------------------------------------------

#: Packages shown in matrix headers, in this order, when a fingerprint has them.
ENGINE_PACKAGES: tuple[str, ...] = ("vllm", "sglang", "tensorrt-llm", "tensorrt_llm", "transformers", "torch")


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
    """Installed engine and torch versions, in ENGINE_PACKAGES order."""
    packages = fingerprint.get("packages") or {}
    return [(name, str(packages[name])) for name in ENGINE_PACKAGES if packages.get(name)]


def format_params(params: Mapping[str, Any]) -> str:
    """`dtype=bfloat16 tensor_parallel_size=2`: stable, short, one line."""
    return " ".join(f"{k}={_scalar(v)}" for k, v in params.items())


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
