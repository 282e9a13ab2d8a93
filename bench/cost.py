"""What the plugin costs a pytest run: off (installed, ``--gpucompat`` not given) against not installed, and on
against plain ``pytest.mark.parametrize``, as instruction ratios (valgrind's cachegrind, deterministic where
timings on a shared machine are not), CPU-time ratios and peak RSS of whole pytest processes.

Used by ``bench/run.py --only off --only on`` (docs/benchmarks.md has the figures). Every figure is a median of
its runs, with its spread ((max - min) / median); the variants of one figure are run interleaved, so drift in the
machine's load hits all of them alike. Instruction counts are taken with ``PYTHONHASHSEED=0`` (set and dict
orders, and so the work done, are the same in every run).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NOT_INSTALLED = ["-p", "no:gpucompat", "-p", "no:gpucompat_fixtures"]
"""pytest's own way to leave an installed plugin out: neither entry point is loaded (what remains is the
distribution's metadata, which pytest scans for every installed plugin anyway)."""

GOALS = {
    "off_instructions_ratio": ("<=", 1.03),
    "off_modules_imported": ("<=", 6),
    "off_start_cpu_ms": ("<=", 20.0),
    "on_instructions_ratio_no_report": ("<=", 1.05),
    "report_instructions_ratio": ("<=", 1.05),
    "rss_ratio_100k_report": ("<=", 1.3),
}

_PLAIN = """\
import pytest

@pytest.mark.parametrize("b", list(range({b})))
@pytest.mark.parametrize("a", list(range({a})))
def test_cell(a, b):
    pass
"""
_PLUGIN = """\
import pytest

@pytest.mark.gpucompat(engine="hf", params={{"a": list(range({a})), "b": list(range({b}))}})
def test_cell(gpucompat_cell):
    pass
"""
_PROBE = '''\
"""Says, at the end of a pytest run, which of pytest-gpucompat's modules were imported, which pytest's import hook
loaded (it compiles them from source where it cannot keep its own bytecode) and which it assertion-rewrote (those
hold the helpers the rewritten asserts call)."""
import json
import os
import sys


def pytest_unconfigure(config):
    mods = sorted(m for m in sys.modules if m == "pytest_gpucompat" or m.startswith("pytest_gpucompat."))
    hook = getattr(config.pluginmanager, "rewrite_hook", None)
    hooked = sorted(n for n in getattr(hook, "_rewritten_names", {}) if n.split(".")[0] == "pytest_gpucompat")
    rewritten = [m for m in mods if "@py_builtins" in vars(sys.modules[m])]
    with open(os.environ["GPUCOMPAT_PROBE_OUT"], "w") as f:
        json.dump({"modules": mods, "hooked": hooked, "rewritten": rewritten}, f)
'''

_IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def spread(values: Sequence[float]) -> float | None:
    median = statistics.median(values) if values else 0.0
    return (max(values) - min(values)) / median if median else None


def summary(values: Sequence[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "spread": spread(values), "runs": [round(v, 6) for v in values]}


def valgrind() -> str | None:
    return shutil.which("valgrind")


def measure(argv: Sequence[str], cwd: Path, env: dict[str, str], expect: int | None,
            instructions: bool = False) -> dict[str, float]:
    """One whole pytest process: its CPU seconds (user + system) and peak RSS (MiB) from its own rusage
    (``os.wait4``: not the maximum over every child this benchmark started); with ``instructions``, under
    cachegrind (no cache simulation: instruction counts only), and its instruction count."""
    argv = list(argv)
    if instructions:
        tool = valgrind()
        if tool is None:
            raise RuntimeError("valgrind is not installed (Debian: apt-get install valgrind)")
        argv = [tool, "--tool=cachegrind", "--cache-sim=no", "--branch-sim=no", "--cachegrind-out-file=/dev/null",
                *argv]
        env = {**env, "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    last = (stdout.strip().splitlines() or [""])[-1]
    if proc.returncode != 0 or (expect is not None and f"{expect} passed" not in last):
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {last}\n{stderr[-2000:]}")
    result = {"cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": usage.ru_maxrss / 1024}
    if instructions:
        found = _IREFS.findall(stderr)
        if not found:
            raise RuntimeError(f"no instruction count in cachegrind's output: {stderr[-500:]}")
        result["instructions"] = float(found[-1].replace(",", ""))
    return result


def suite(root: Path, name: str, body: str, a: int, b: int) -> Path:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "test_suite.py").write_text(body.format(a=a, b=b))
    (directory / "pytest.ini").write_text("[pytest]\n")  # no configuration from further up the tree
    return directory


def environment() -> dict[str, str]:
    """The measured processes' environment: bytecode caching on (as for any installed package), no pytest options
    or plugins from the caller's environment."""
    dropped = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONDONTWRITEBYTECODE", "PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["GPUCOMPAT_RUNNER"] = "bench"
    return env


INSTR_JOBS = 1
"""How many cachegrind processes run at once (``bench/run.py --instr-jobs``). An instruction count does not depend
on what else the machine runs, so counted runs may share the cores where timed ones never do: at 10,000 cells one
counted run takes minutes (cachegrind executes some 50 times slower), three variants one after the other many."""


def interleaved(variants: dict[str, tuple[Path, list[str]]], env: dict[str, str], expect: int, runs: int,
                instructions: bool) -> dict[str, list[dict[str, float]]]:
    """Each variant ``runs`` times, one round of all variants after another; counted runs (``instructions``) up to
    `INSTR_JOBS` at once."""
    out: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    order = [(name, cwd, argv) for _ in range(runs) for name, (cwd, argv) in variants.items()]
    if instructions and INSTR_JOBS > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(INSTR_JOBS) as pool:
            done = list(pool.map(lambda job: measure(job[2], job[1], env, expect, True), order))
        for (name, _, _), row in zip(order, done):
            out[name].append(row)
        return out
    for name, cwd, argv in order:
        out[name].append(measure(argv, cwd, env, expect, instructions))
    return out


def ratio(runs: dict[str, list[dict[str, float]]], top: str, bottom: str, key: str) -> dict[str, Any]:
    """Per-round ratios of one figure of two variants, summarised."""
    return summary([t[key] / b[key] for t, b in zip(runs[top], runs[bottom])])


def figures(runs: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    keys = sorted({k for rows in runs.values() for row in rows for k in row})
    return {name: {k: summary([row[k] for row in rows]) for k in keys} for name, rows in runs.items()}


def probe(cwd: Path, argv: Sequence[str], env: dict[str, str], tmp: Path) -> dict[str, Any]:
    """The package's modules a run imported and those pytest rewrote (a probe plugin, ``-p``, says at the end)."""
    (tmp / "gpucompat_bench_probe.py").write_text(_PROBE)
    out = tmp / "probe.json"
    penv = {**env, "GPUCOMPAT_PROBE_OUT": str(out),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp), env.get("PYTHONPATH")]))}
    measure([*argv, "-p", "gpucompat_bench_probe"], cwd, penv, None)
    import json

    data: dict[str, Any] = json.loads(out.read_text())
    return data


def bench_off(tests: int, runs: int, instr_runs: int, start_runs: int) -> dict[str, Any]:
    """Off against not installed: ``tests`` trivial tests (instructions, CPU), the package's modules imported and
    rewritten, and the CPU of one start (a suite of one trivial test), with and without bytecode caching."""
    tmp = Path(tempfile.mkdtemp(prefix="gpucompat-bench-off-"))
    try:
        env = environment()
        base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        many = suite(tmp, "many", _PLAIN, tests, 1)
        one = suite(tmp, "one", _PLAIN, 1, 1)
        variants = {"not_installed": (many, [*base, *NOT_INSTALLED]), "off": (many, base)}
        timed = interleaved(variants, env, tests, runs, False)
        out: dict[str, Any] = {"tests": tests, "cpu": figures(timed),
                               "off_cpu_ratio": ratio(timed, "off", "not_installed", "cpu_s")}
        if valgrind() and instr_runs:
            counted = interleaved(variants, env, tests, instr_runs, True)
            out["instructions"] = figures(counted)
            out["off_instructions_ratio"] = ratio(counted, "off", "not_installed", "instructions")
        else:
            out["off_instructions_ratio"] = None
            out["off_instructions_ratio_reason"] = "valgrind is not installed" if not valgrind() else "not asked"
        found = probe(one, base, env, tmp)
        found_nobc = probe(one, base, {**env, "PYTHONDONTWRITEBYTECODE": "1"}, tmp)
        out["off_modules_imported"] = len(found["modules"])
        out["off_modules"] = found["modules"]
        out["off_modules_rewritten"] = len(found["rewritten"])
        out["off_modules_rewritten_no_bytecode"] = len(found_nobc["rewritten"])
        out["off_modules_through_import_hook"] = len(found["hooked"])
        # one start: CPU of a one-test run, off minus not installed, per round
        for label, extra in (("", {}), ("_no_bytecode", {"PYTHONDONTWRITEBYTECODE": "1"})):
            starts = interleaved({"not_installed": (one, [*base, *NOT_INSTALLED]), "off": (one, base)},
                                 {**env, **extra}, 1, start_runs, False)
            out[f"off_start_cpu_ms{label}"] = summary(
                [1000 * (o["cpu_s"] - n["cpu_s"]) for o, n in zip(starts["off"], starts["not_installed"])])
            out[f"start{label}"] = figures(starts)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_on(a: int, b: int, runs: int, instr_runs: int, big: tuple[int, int] | None, big_runs: int,
             big_instructions: bool) -> dict[str, Any]:
    """On against plain parametrize: ``a`` x ``b`` cells without and with the JSON report (instructions, CPU, peak
    RSS); ``big`` cells (default 100,000) the same for CPU and peak RSS."""
    tmp = Path(tempfile.mkdtemp(prefix="gpucompat-bench-on-"))
    try:
        env = environment()
        base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        out: dict[str, Any] = {}
        shapes = [("", a, b, runs, instr_runs)]
        if big is not None:
            shapes.append((f"_{big[0] * big[1] // 1000}k", big[0], big[1], big_runs, big_runs if big_instructions
                           else 0))
        for label, x, y, n, n_instr in shapes:
            plain = suite(tmp / f"s{x}x{y}", "plain", _PLAIN, x, y)
            plugin = suite(tmp / f"s{x}x{y}", "plugin", _PLUGIN, x, y)
            report = str(tmp / f"report{label}.json")
            variants = {
                "plain": (plain, [*base, *NOT_INSTALLED]),
                "no_report": (plugin, [*base, "--gpucompat"]),
                "report": (plugin, [*base, "--gpucompat", "--gpucompat-report", report]),
            }
            timed = interleaved(variants, env, x * y, n, False)
            part: dict[str, Any] = {"cells": x * y, "measured": figures(timed)}
            part["cpu_ratio_no_report"] = ratio(timed, "no_report", "plain", "cpu_s")
            part["cpu_ratio_report"] = ratio(timed, "report", "plain", "cpu_s")
            part["report_cpu_ratio"] = ratio(timed, "report", "no_report", "cpu_s")
            part["rss_ratio_no_report"] = ratio(timed, "no_report", "plain", "peak_rss_mib")
            part["rss_ratio_report"] = ratio(timed, "report", "plain", "peak_rss_mib")
            if valgrind() and n_instr:
                counted = interleaved(variants, env, x * y, n_instr, True)
                part["instructions"] = figures(counted)
                part["instructions_ratio_no_report"] = ratio(counted, "no_report", "plain", "instructions")
                part["instructions_ratio_report"] = ratio(counted, "report", "plain", "instructions")
                part["report_instructions_ratio"] = ratio(counted, "report", "no_report", "instructions")
            part["report_bytes"] = Path(report).stat().st_size
            out[f"on{label}"] = part
        main = out["on"]
        out["on_instructions_ratio_no_report"] = main.get("instructions_ratio_no_report")
        out["report_instructions_ratio"] = main.get("report_instructions_ratio")
        for key, value in list(out.items()):
            if key.startswith("on_") and key[3:4].isdigit():
                out[f"rss_ratio{key[2:]}_report"] = value["rss_ratio_report"]
                out[f"rss_ratio{key[2:]}_no_report"] = value["rss_ratio_no_report"]
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def goal(key: str, value: Any) -> str:
    if key not in GOALS:
        return ""
    op, target = GOALS[key]
    median = value.get("median") if isinstance(value, dict) else value
    if median is None:
        return f"goal {op} {target}: not measured"
    met = median >= target if op == ">=" else median <= target
    return f"goal {op} {target}: {'met' if met else 'MISSED'}"


def rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Table rows for bench/run.py's table."""
    def fmt(value: Any, unit: str = "x") -> str:
        if isinstance(value, dict):
            s = value.get("spread")
            return f"{value['median']:.3f}{unit}" + (f" (spread {100 * s:.1f} %)" if s is not None else "")
        return "n/a" if value is None else f"{value}"

    out: list[tuple[str, str, str]] = []
    for key, unit in (("off_instructions_ratio", "x"), ("off_cpu_ratio", "x"), ("off_start_cpu_ms", " ms"),
                      ("off_start_cpu_ms_no_bytecode", " ms")):
        if key in result:
            out.append((key, fmt(result[key], unit), goal(key, result[key])))
    if "off_modules_imported" in result:
        out.append(("off_modules_imported", str(result["off_modules_imported"]),
                    goal("off_modules_imported", result["off_modules_imported"])))
        out.append(("off_modules_rewritten (no bytecode)", f"{result['off_modules_rewritten']} "
                    f"({result['off_modules_rewritten_no_bytecode']})", ""))
    for part_key in [k for k in result if k.startswith("on") and isinstance(result[k], dict) and "cells" in
                     result[k]]:
        part = result[part_key]
        cells = part["cells"]
        for key in ("instructions_ratio_no_report", "instructions_ratio_report", "report_instructions_ratio",
                    "cpu_ratio_no_report", "cpu_ratio_report", "report_cpu_ratio", "rss_ratio_no_report",
                    "rss_ratio_report"):
            if key in part:
                gkey = {"instructions_ratio_no_report": "on_instructions_ratio_no_report",
                        "report_instructions_ratio": "report_instructions_ratio"}.get(key, "")
                if key == "rss_ratio_report" and cells >= 100_000:
                    gkey = "rss_ratio_100k_report"
                out.append((f"{key} [{cells:,} cells]", fmt(part[key]), goal(gkey, part[key]) if gkey and
                            part_key == ("on" if cells < 100_000 else part_key) else ""))
        plain = part["measured"]["plain"]["peak_rss_mib"]["median"]
        rep = part["measured"]["report"]["peak_rss_mib"]["median"]
        out.append((f"peak RSS plain / report [{cells:,} cells]", f"{plain:.0f} / {rep:.0f} MiB", ""))
    return out
