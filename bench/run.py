"""Benchmarks of pytest-gpucompat, measured in one run on one machine.

    python bench/run.py            # readable table
    python bench/run.py --json     # the table on stderr, one JSON object on stdout

What is measured (docs/benchmarks.md has the figures and their goals):

- ``fingerprint_vs_collect_env``: wall time of ``python -m torch.utils.collect_env`` divided by that of
  ``gpucompat env --json``, each a whole process, medians of several runs; likewise ``vllm collect-env`` and
  ``env-doctor check --json`` where they are installed (null with the reason where not).
- ``kb_cells_per_s``: cells per second through ``matching_rules(kb, fp, engine, params)`` with the shipped
  knowledge base. One *cell* is one (fingerprint, engine, params) combination evaluated against ALL rules of the
  knowledge base; ``rule_checks_per_s`` is cells/s times the number of rules. The headline is cold (every
  matching cache cleared before the timed pass); ``kb_cells_per_s_warm`` is a second pass over the same cells.
- ``plugin_overhead_ratio``: a synthetic suite of 10,000 trivial cells run through
  ``@pytest.mark.gpucompat(engine="hf", params=...)`` under ``pytest --gpucompat --gpucompat-report``, divided
  by the same suite through plain ``pytest.mark.parametrize`` with the plugin disabled; whole pytest processes,
  medians of several runs. ``plugin_overhead_ratio_no_report`` is the same without ``--gpucompat-report``.
- ``off_*`` and ``on_*`` (``bench/cost.py``): the plugin off (installed, ``--gpucompat`` not given) against not
  installed on 1,000 trivial tests, and on against plain parametrize on 10,000 cells without and with the report
  (and 100,000 cells for CPU and peak RSS): instruction ratios under cachegrind, CPU-time ratios, peak RSS, the
  package's modules imported and rewritten while off, and the CPU of one start.
- ``suite_vs_engine_ratio`` (GPU only): per engine, the time its cells took divided by the time they spent inside
  engines (starts, generation, the reference, whole engine lives of the memory suite: ``metrics.engine_s`` of the
  report); ``suite_vs_engine_ratio_all`` is the wall time of the whole ``pytest --gpucompat suites/`` process
  divided by all engine time. Goal: <= 1.2.
- ``gpu_packing_speedup`` (GPU only): the vLLM + transformers cells of the suites run twice as one pytest process
  each, serial (one process, no pytest-xdist) and packed (``-n auto --gpucompat-workers-per-gpu auto``: several
  workers share each GPU); serial wall / packed wall, with ``gpu_packing_wall_ratio`` its inverse, each run's engine
  time (the reports' ``engine_s``) and a check that both runs had the same cells with the same outcomes.
  Goal: packed <= 0.5 x serial wall (moonshot 0.4).

Speed goals live here only, never in timed tests.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import cost  # noqa: E402  (bench/cost.py, beside this file)

GOALS = {
    "fingerprint_vs_collect_env": (">=", 10.0),
    "env_vs_bare_nvml": ("<=", 1.5),
    "kb_cells_per_s": (">=", 1_000_000.0),
    "plugin_overhead_ratio": ("<=", 1.15),
    "plugin_overhead_ratio_no_report": ("<=", 1.15),
    "suite_vs_engine_ratio_all": ("<=", 1.2),
    "gpu_packing_wall_ratio": ("<=", 0.5),
    "gpu_packing_speedup": (">=", 2.0),
}
MOONSHOTS = {"plugin_overhead_ratio": 1.05, "plugin_overhead_ratio_no_report": 1.05,
             "gpu_packing_wall_ratio": 0.4, "gpu_packing_speedup": 2.5}


# --------------------------------------------------------------------------- helpers


def _bin(name: str) -> str | None:
    """A console script next to this interpreter first (an activated or not venv), then on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    return shutil.which(name)


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the measured processes: bytecode caching on, as for any installed package (an
    environment that turns it off would make every run compile the plugin's modules again)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra or {})
    return env


SPREAD_KNOWN = 0.10  # repeat (up to twice the runs asked for) while (max - min) / median is wider than this


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median: how far apart the runs of one figure are."""
    median = statistics.median(values) if values else 0.0
    return (max(values) - min(values)) / median if median else None


def _settled(values: Sequence[float], runs: int) -> bool:
    """Enough runs: at least ``runs``, and either a spread within SPREAD_KNOWN or twice as many runs."""
    width = spread(values)
    return len(values) >= runs and (len(values) >= 2 * runs or (width is not None and width <= SPREAD_KNOWN))


def _time_process(argv: Sequence[str], runs: int, cwd: str | None = None, env: dict[str, str] | None = None,
                  warmup: int = 1) -> dict[str, Any]:
    """Wall time of a whole process, ``runs`` times (more while the spread is wide) after ``warmup`` untimed runs
    (page cache, .pyc)."""
    times: list[float] = []
    last_rc = 0
    last_err = ""
    i = 0
    while i < warmup or not _settled(times, runs):
        t0 = time.perf_counter()
        proc = subprocess.run(list(argv), cwd=cwd, env=env or _child_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        elapsed = time.perf_counter() - t0
        last_rc, last_err = proc.returncode, proc.stderr
        if i >= warmup:
            times.append(elapsed)
        i += 1
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "spread": spread(times),
        "runs_s": [round(t, 4) for t in times],
        "returncode": last_rc,
        "stderr_tail": last_err.strip().splitlines()[-3:] if last_rc else [],
    }


def _probe(argv: Sequence[str]) -> tuple[str | None, int | None]:
    """(None, exit status) when the command runs to its end within 120 s, else (why not, None).

    A non-zero status counts as a run: ``env-doctor check`` exits 1 when it finds a problem (no driver here).
    """
    try:
        proc = subprocess.run(list(argv), env=_child_env(), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(argv)}: {exc}", None
    if proc.returncode != 0 and not proc.stdout.strip():
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        return f"{' '.join(argv)} exited {proc.returncode} without output: {tail}", None
    return None, proc.returncode


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- 1. fingerprint vs collect-env


def _command_version(key: str) -> str | None:
    if key == "collect_env":
        return _version("torch")
    dist, command = {"vllm_collect_env": ("vllm", "vllm"), "env_doctor": ("env-doctor", "env-doctor")}[key]
    found = _version(dist)
    if found is None:  # installed in another environment: ask its own interpreter
        path = _bin(command)
        python = Path(path).parent / "python" if path else None
        if python is not None and python.exists():
            proc = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                                  capture_output=True, text=True)
            found = proc.stdout.strip() or None
    return found


_BARE_NVML = """
try:
    import pynvml
    pynvml.nvmlInit()
except Exception:
    raise SystemExit(0)
pynvml.nvmlSystemGetDriverVersion()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetMemoryInfo(h), pynvml.nvmlDeviceGetUUID(h)
    pynvml.nvmlDeviceGetCudaComputeCapability(h)
pynvml.nvmlShutdown()
"""


def bench_fingerprint(runs: int) -> dict[str, Any]:
    gpucompat = _bin("gpucompat")
    ours_argv = [gpucompat, "env", "--json"] if gpucompat else [sys.executable, "-m", "pytest_gpucompat.cli",
                                                                "env", "--json"]
    _log(f"fingerprint: {' '.join(ours_argv)} x{runs}")
    ours = _time_process(ours_argv, runs)
    out: dict[str, Any] = {"gpucompat_env": {"argv": ours_argv[1:] if gpucompat else ours_argv[2:], **ours}}

    others: list[tuple[str, str, list[str] | None, str | None]] = []
    try:
        import torch  # noqa: F401

        others.append(("collect_env", "torch.utils.collect_env",
                       [sys.executable, "-m", "torch.utils.collect_env"], None))
    except ImportError as exc:
        others.append(("collect_env", "torch.utils.collect_env", None, f"torch not installed: {exc}"))
    vllm = _bin("vllm")
    others.append(("vllm_collect_env", "vllm collect-env", [vllm, "collect-env"] if vllm else None,
                   None if vllm else "vllm is not installed (no `vllm` command)"))
    doctor = _bin("env-doctor")
    others.append(("env_doctor", "env-doctor check --json", [doctor, "check", "--json"] if doctor else None,
                   None if doctor else "env-doctor is not installed (no `env-doctor` command)"))

    # the floor: a bare process that asks NVML what `gpucompat env` asks it (nothing can fingerprint a GPU faster)
    _log(f"fingerprint: bare NVML floor x{runs}")
    floor = _time_process([sys.executable, "-c", _BARE_NVML], runs)
    out["bare_nvml"] = {"argv": ["python -c <pynvml: init, per GPU name/memory/uuid/cc, shutdown>"], **floor}
    out["env_vs_bare_nvml"] = ours["median_s"] / floor["median_s"]

    for key, label, argv, reason in others:
        ratio_key = "fingerprint_vs_" + key
        status = None
        if argv is not None and reason is None:
            reason, status = _probe(argv)
        if argv is None or reason is not None:
            _log(f"fingerprint: {label}: skipped: {reason}")
            out[key] = {"median_s": None, "reason": reason}
            out[ratio_key] = None
            out[ratio_key + "_reason"] = reason
            continue
        _log(f"fingerprint: {label} x{runs}")
        timing = _time_process(argv, runs)
        out[key] = {"argv": [label], "version": _command_version(key), **timing, "returncode": status}
        out[ratio_key] = timing["median_s"] / ours["median_s"]
    return out


# --------------------------------------------------------------------------- 2. knowledge base throughput

# (name, compute capability, architecture, memory MiB)
GPUS = [
    ("Tesla V100-SXM2-32GB", "7.0", "volta", 32768),
    ("Tesla T4", "7.5", "turing", 15360),
    ("NVIDIA A10G", "8.6", "ampere", 23028),
    ("NVIDIA A100-SXM4-40GB", "8.0", "ampere", 40960),
    ("NVIDIA A100-SXM4-80GB", "8.0", "ampere", 81920),
    ("NVIDIA L4", "8.9", "ada", 23034),
    ("NVIDIA L40S", "8.9", "ada", 46068),
    ("NVIDIA GeForce RTX 4090", "8.9", "ada", 24564),
    ("NVIDIA H100 80GB HBM3", "9.0", "hopper", 81559),
    ("NVIDIA H100 PCIe", "9.0", "hopper", 81559),
    ("NVIDIA H200", "9.0", "hopper", 143771),
    ("NVIDIA GH200 480GB", "9.0", "hopper", 97871),
    ("NVIDIA B200", "10.0", "blackwell", 183359),
    ("NVIDIA GeForce RTX 5090", "12.0", "blackwell", 32607),
]
# (driver, highest CUDA it supports)
DRIVERS = [
    ("470.256.02", "11.4"), ("525.147.05", "12.0"), ("535.104.05", "12.2"), ("535.230.02", "12.2"),
    ("545.23.08", "12.3"), ("550.54.15", "12.4"), ("550.127.05", "12.4"), ("560.35.03", "12.6"),
    ("565.57.01", "12.7"), ("570.86.15", "12.8"), ("570.133.20", "12.8"), ("575.57.08", "12.9"),
    ("580.65.06", "13.0"), ("580.95.05", "13.0"),
]
CUDA_RUNTIMES = ["11.8", "12.1", "12.2", "12.4", "12.6", "12.8", "12.9", "13.0"]
PACKAGE_VERSIONS = {
    "vllm": ["0.4.3", "0.5.5", "0.6.3", "0.6.6", "0.7.3", "0.8.5", "0.9.2", "0.10.2", "0.11.0", "0.20.1",
             "0.24.0", "0.26.0", "0.28.1"],
    "sglang": ["0.3.6", "0.4.3", "0.4.6", "0.5.2", "0.5.16", "0.5.17"],
    "tensorrt-llm": ["0.9.0", "0.12.0", "0.16.0", "0.19.0", "1.0.0", "1.2.0rc1", "1.4.0rc1"],
    "torch": ["2.1.2", "2.3.1", "2.4.0", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.0+cu128", "2.11.0+cu130",
              "2.13.0"],
}
ENGINES = ["vllm", "vllm", "vllm", "sglang", "tensorrt-llm", "hf", None]
PARAM_CHOICES: dict[str, list[Any]] = {
    "kv_cache_dtype": ["auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp16"],
    "dtype": ["auto", "bfloat16", "float16", "float32"],
    "tensor_parallel_size": [1, 2, 4, 8],
    "block_size": [8, 16, 32],
    "enforce_eager": [True, False],
    "enable_prefix_caching": [True, False],
    "quantization": ["fp8", "awq", "gptq", None],
    "max_model_len": [512, 4096, 32768, 131072],
    "attention_backend": ["flash_attn", "flashinfer", "xformers", "triton_attn", "torch_sdpa"],
    "gpu_memory_utilization": [0.25, 0.9],
    "model": ["Qwen/Qwen2-7B", "meta-llama/Llama-3.1-8B-Instruct", "google/gemma-2-9b", "deepseek-ai/DeepSeek-V3",
              "mistralai/Mixtral-8x7B-v0.1"],
}


def generate_fingerprints(rng: random.Random, n: int) -> list[Any]:
    from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint

    out = []
    for i in range(n):
        name, cc, arch, memory = rng.choice(GPUS)
        count = rng.choice([1, 1, 2, 4, 8])
        driver, cuda_driver = rng.choice(DRIVERS)
        packages = {pkg: rng.choice(versions) for pkg, versions in PACKAGE_VERSIONS.items() if rng.random() < 0.7}
        out.append(Fingerprint(
            name=f"bench-{i}",
            gpus=tuple(GPU(index=k, name=name, compute_capability=cc, architecture=arch, memory_mib=memory)
                       for k in range(count)),
            driver=driver,
            cuda_driver=cuda_driver,
            cuda_runtime=rng.choice(CUDA_RUNTIMES) if rng.random() < 0.9 else None,
            interconnect=None if count == 1 else rng.choice(["pcie", "nvlink"]),
            packages=packages,
        ))
    return out


def generate_params(rng: random.Random, n: int) -> list[tuple[str | None, dict[str, Any]]]:
    out = []
    for _ in range(n):
        engine = rng.choice(ENGINES)
        names = rng.sample(sorted(PARAM_CHOICES), rng.randint(1, 6))
        params = {k: rng.choice(PARAM_CHOICES[k]) for k in sorted(names)}
        out.append((engine, params))
    return out


def _clear_caches(rules_mod: Any) -> None:
    clear = getattr(rules_mod, "clear_match_cache", None)
    if clear is not None:
        clear()
    else:  # older versions cache only the parsed fingerprint facts
        rules_mod._facts.cache_clear()


def bench_kb(cells: int, fingerprints: int, seed: int, repeats: int, verify: int) -> dict[str, Any]:
    """``fingerprints`` fingerprints x (cells / fingerprints) engine+params sets, fingerprint-major order.

    Each repeat clears every matching cache, times one pass over all cells (cold: the caches are built inside the
    timing) and a second pass (warm: what a long session, or a second question about the same fleet, sees).
    """
    from pytest_gpucompat.kb import index as rules_mod
    from pytest_gpucompat.kb import load_kb, matching_rules

    kb = load_kb()
    rng = random.Random(seed)
    fps = generate_fingerprints(rng, fingerprints)
    per_fp = max(1, cells // fingerprints)
    param_sets = generate_params(rng, per_fp)
    total = len(fps) * len(param_sets)
    _log(f"kb: {total} cells ({len(fps)} fingerprints x {len(param_sets)} engine/params sets) x {len(kb.rules)} "
         f"rules, {repeats} repeats")

    cpu: list[float] = []  # CPU time of each cold pass: what a machine shared with other work disturbs least

    def one_pass() -> tuple[float, int]:
        matched = 0
        t0, c0 = time.perf_counter(), time.process_time()
        for fp in fps:
            for engine, params in param_sets:
                matched += len(matching_rules(kb, fp, engine, params))
        cpu.append(time.process_time() - c0)
        return time.perf_counter() - t0, matched

    cold: list[float] = []
    warm: list[float] = []
    cold_cpu: list[float] = []
    matched = 0
    for _ in range(repeats):
        _clear_caches(rules_mod)
        elapsed, matched = one_pass()
        cold.append(elapsed)
        cold_cpu.append(cpu[-1])
        elapsed, _ = one_pass()
        warm.append(elapsed)
    cells_per_s = total / statistics.median(cold)
    result: dict[str, Any] = {
        "kb_cells_per_s": cells_per_s,
        "kb_cells_per_s_warm": total / statistics.median(warm),
        "kb_cells_per_s_spread": spread(cold),
        "kb_cells_per_s_cpu": total / statistics.median(cold_cpu),
        "kb_cells_per_s_cpu_spread": spread(cold_cpu),
        "rule_checks_per_s": cells_per_s * len(kb.rules),
        "kb": {
            "cell_definition": "one (fingerprint, engine, params) combination evaluated against ALL rules of the "
                               "knowledge base via matching_rules(kb, fp, engine, params); kb_cells_per_s is the "
                               "median cold pass (every matching cache cleared first), kb_cells_per_s_warm a "
                               "second pass over the same cells",
            "cells": total,
            "fingerprints": len(fps),
            "engine_params_sets": len(param_sets),
            "rules": len(kb.rules),
            "rule_files": len(kb.files),
            "key_writer": _key_writer(),
            "seed": seed,
            "repeats": repeats,
            "cold_runs_s": [round(t, 4) for t in cold],
            "warm_runs_s": [round(t, 4) for t in warm],
            "matched_rules_total": matched,
            "matched_rules_per_cell": matched / total,
        },
    }
    if verify:
        result["kb"]["verified"] = verify_kb(kb, fps, param_sets, verify, seed)
    return result


def _key_writer() -> str:
    """What writes a cell's parameters as their exact key (``kb.paramkey``): its speed is a third of a cell's."""
    try:
        from pytest_gpucompat.kb import paramkey
    except ImportError:  # a tree from before kb.paramkey: marshal
        return "marshal 2"
    return str(paramkey.KEY_WRITER)


def verify_kb(kb: Any, fps: Sequence[Any], param_sets: Sequence[tuple[str | None, dict[str, Any]]], n: int,
              seed: int) -> dict[str, Any]:
    """``matching_rules`` against the one-rule-at-a-time reference ``rule_matches`` on ``n`` sampled cells."""
    from pytest_gpucompat.kb import Facts, matching_rules, rule_matches

    rng = random.Random(seed + 1)
    mismatches: list[dict[str, Any]] = []
    count = 0
    for _ in range(n):
        fp = rng.choice(fps)
        engine, params = rng.choice(param_sets)
        merged = {**fp.params, **params}
        want = [r.id for r in kb.rules if rule_matches(r, Facts.of(fp), engine, merged)]
        got = [r.id for r in matching_rules(kb, fp, engine, params)]
        if want != got:
            count += 1
        if want != got and len(mismatches) < 5:
            mismatches.append({"fingerprint": fp.name, "engine": engine, "params": params, "expected": want,
                               "got": got})
    if mismatches:
        _log(f"kb: MISMATCH between matching_rules and rule_matches: {mismatches[0]}")
    return {"cells": n, "mismatches": count, "examples": mismatches}


# --------------------------------------------------------------------------- 3. plugin overhead

_PLAIN_TEST = """\
import pytest

A = list(range({a}))
B = list(range({b}))


@pytest.mark.parametrize("b", B)
@pytest.mark.parametrize("a", A)
def test_cell(a, b):
    pass
"""

_PLUGIN_TEST = """\
import pytest

A = list(range({a}))
B = list(range({b}))


@pytest.mark.gpucompat(engine="hf", params={{"a": A, "b": B}})
def test_cell(gpucompat_cell):
    pass
"""


def bench_overhead(a: int, b: int, runs: int, keep: bool = False) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="gpucompat-bench-"))
    try:
        plain = tmp / "plain"
        plugin = tmp / "plugin"
        for d, body in ((plain, _PLAIN_TEST), (plugin, _PLUGIN_TEST)):
            d.mkdir()
            (d / "test_suite.py").write_text(body.format(a=a, b=b))
            # an empty ini stops pytest from picking up a configuration further up the tree
            (d / "pytest.ini").write_text("[pytest]\n")
        env = _child_env({"GPUCOMPAT_RUNNER": "bench"})
        env.pop("PYTEST_ADDOPTS", None)
        env.pop("PYTEST_PLUGINS", None)
        base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        variants = {
            "plain": (plain, [*base, "-p", "no:gpucompat"]),
            "plugin_no_report": (plugin, [*base, "--gpucompat"]),
            "plugin_report": (plugin, [*base, "--gpucompat", "--gpucompat-report", str(tmp / "report.json")]),
        }
        # check each variant once: the right number of passed cells, exit status 0
        for name, (cwd, argv) in variants.items():
            proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
            summary = (proc.stdout.strip().splitlines() or [""])[-1]
            if proc.returncode != 0 or f"{a * b} passed" not in summary:
                raise RuntimeError(f"overhead suite '{name}' did not pass {a * b} cells: rc={proc.returncode} "
                                   f"{summary}\n{proc.stderr[-2000:]}")
        report = json.loads((tmp / "report.json").read_text())
        n_report_cells = len(report.get("cells", []))
        timings: dict[str, dict[str, Any]] = {}
        # interleave the variants so drift in machine load hits all of them alike
        for name in variants:
            timings[name] = {"runs_s": []}
        while not _settled([p / q for p, q in zip(timings["plugin_report"]["runs_s"], timings["plain"]["runs_s"])],
                           runs):
            for name, (cwd, argv) in variants.items():
                t = _time_process(argv, 1, cwd=str(cwd), env=env, warmup=0)
                timings[name]["runs_s"].append(t["runs_s"][0])
        for t in timings.values():
            t["median_s"] = statistics.median(t["runs_s"])
            t["min_s"] = min(t["runs_s"])
            t["spread"] = spread(t["runs_s"])
        plain_s = timings["plain"]["median_s"]
        plain_min = timings["plain"]["min_s"]
        return {
            "plugin_overhead_ratio": timings["plugin_report"]["median_s"] / plain_s,
            "plugin_overhead_ratio_no_report": timings["plugin_no_report"]["median_s"] / plain_s,
            # ratios of the fastest runs: less sensitive to other load on the machine
            "plugin_overhead_ratio_best": timings["plugin_report"]["min_s"] / plain_min,
            "plugin_overhead_ratio_no_report_best": timings["plugin_no_report"]["min_s"] / plain_min,
            "plugin_overhead_ratio_spread": spread([p / q for p, q in zip(timings["plugin_report"]["runs_s"],
                                                                          timings["plain"]["runs_s"])]),
            "overhead": {
                "cells": a * b,
                "params": {"a": a, "b": b},
                "report_cells": n_report_cells,
                "report_bytes": (tmp / "report.json").stat().st_size,
                "argv": {k: v[1][1:] for k, v in variants.items()},
                **timings,
            },
        }
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- 4. suites vs engines (GPU)

# Every cell records ``engine_s``: the seconds it spent inside engines (pytest_gpucompat/fixtures.py): the start
# of an engine the cell was the first to ask for (later cells reuse it from the session's pool), every generate and
# embed call, the float32 reference's start and calls (also recorded apart as ``reference_s``), and each whole
# engine life the memory suite runs in a fresh process (process start, engine start, generation, shutdown).


def _gpu_present() -> tuple[bool, str]:
    try:
        from pytest_gpucompat.machine.fingerprint import collect

        fp = collect("bench")
    except Exception as exc:  # pragma: no cover - collect never raises
        return False, f"cannot fingerprint: {exc}"
    if not fp.gpus:
        return False, "no GPU"
    return True, fp.describe_gpus()


def suite_engine_ratios(report: dict[str, Any]) -> dict[str, Any]:
    """Per engine, from a report's cells: their engine time (``metrics.engine_s``), their own duration (setup, call
    and teardown) and the ratio of the two; ``start_s`` sums the first start of each distinct engine spec."""
    per_engine: dict[str, dict[str, Any]] = {}
    seen_specs: set[tuple[str, str, float]] = set()
    for cell in report.get("cells", []):
        engine = cell.get("engine") or "?"
        metrics = cell.get("metrics") or {}
        slot = per_engine.setdefault(engine, {"engine_s": 0.0, "reference_s": 0.0, "start_s": 0.0, "specs": 0,
                                              "cells": 0, "cells_s": 0.0, "outcomes": {}})
        slot["cells"] += 1
        slot["cells_s"] += float(cell.get("duration_s") or 0.0)
        outcome = cell.get("outcome") or "?"
        slot["outcomes"][outcome] = slot["outcomes"].get(outcome, 0) + 1
        for name in ("engine_s", "reference_s"):
            value = metrics.get(name)
            if isinstance(value, (int, float)):
                slot[name] += float(value)
        start = metrics.get("start_s")
        if isinstance(start, (int, float)):
            spec = (engine, json.dumps(cell.get("params") or {}, sort_keys=True, default=str), float(start))
            if spec not in seen_specs:
                seen_specs.add(spec)
                slot["start_s"] += float(start)
                slot["specs"] += 1
    for slot in per_engine.values():
        slot["ratio"] = slot["cells_s"] / slot["engine_s"] if slot["engine_s"] > 0 else None
    return per_engine


def _run_bounded(argv: Sequence[str], timeout: int, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str],
                                                                                   bool]:
    """Run a pytest process for at most ``timeout`` seconds; past it, SIGTERM (the plugin then writes its report,
    marked interrupted) and, 60 s later, SIGKILL. Returns the finished process and whether it ran past."""
    proc = subprocess.Popen(list(argv), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), False
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), True


def bench_suites(timeout: int, extra_args: Sequence[str] = (), without_gpu: bool = False,
                 keep_report: str | None = None) -> dict[str, Any]:
    ok, what = _gpu_present()
    if not ok and not without_gpu:
        return {"suite_vs_engine_ratio": None, "suite_vs_engine_ratio_reason": what}
    with tempfile.TemporaryDirectory(prefix="gpucompat-bench-suites-") as tmp:
        report_path = Path(tmp) / "r.json"
        argv = [sys.executable, "-m", "pytest", "--gpucompat", str(ROOT / "suites"), "-p", "no:cacheprovider", "-q",
                "--gpucompat-report", str(report_path), *extra_args]
        _log(f"suites: {' '.join(argv[1:])} (on {what})")
        t0 = time.perf_counter()
        proc, late = _run_bounded(argv, timeout, _child_env())
        if late:
            return {"suite_vs_engine_ratio": None, "suite_vs_engine_ratio_reason": f"suites ran past {timeout} s"}
        wall = time.perf_counter() - t0
        if not report_path.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            return {"suite_vs_engine_ratio": None,
                    "suite_vs_engine_ratio_reason": f"no report written (exit {proc.returncode}): {tail}"}
        report = json.loads(report_path.read_text())
        if keep_report:
            shutil.copyfile(report_path, keep_report)
    per_engine = suite_engine_ratios(report)
    engine_total = sum(s["engine_s"] for s in per_engine.values())
    return {
        "suite_vs_engine_ratio": {e: s["ratio"] for e, s in per_engine.items()},
        "suite_vs_engine_ratio_all": wall / engine_total if engine_total > 0 else None,
        "suites": {"gpus": what, "wall_s": wall, "engine_s": engine_total, "exit_status": proc.returncode,
                   "per_engine": per_engine, "summary": (proc.stdout.strip().splitlines() or [""])[-1]},
    }


# --------------------------------------------------------------------------- 5. cells sharing a GPU (GPU)

PACKING_SUITES = ("suites/test_smoke.py", "suites/test_precision.py", "suites/test_memory.py")
PACKING_SELECT = "(hf or vllm) and not openai"


COMPILE_CACHES = ("XDG_CACHE_HOME", "TRITON_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                  "TORCH_EXTENSIONS_DIR", "CUDA_CACHE_PATH", "VLLM_CACHE_ROOT", "FLASHINFER_WORKSPACE_BASE",
                  "TVM_FFI_CACHE_DIR")
"""Where torch, Triton, the CUDA driver, vLLM and FlashInfer keep what they compile. Empty for each measured run:
the run that goes first would otherwise compile kernels that the next one finds ready (on the H200 with vLLM 0.26.0
and shared caches, the serial run's first engine start took 63 s, the packed run's first ones, after it, 14-17 s)."""


def fresh_caches(root: Path) -> dict[str, str]:
    """An environment whose compile caches are empty folders under ``root``; the built test models stay where they
    are (they are the run's input, not compiled code), as does the Hugging Face cache."""
    from pytest_gpucompat.common.paths import cache_dir

    env = {name: str(root / name.lower()) for name in COMPILE_CACHES}
    xdg = os.environ.get("XDG_CACHE_HOME")
    env["GPUCOMPAT_CACHE_DIR"] = str(cache_dir())
    env["HF_HOME"] = os.environ.get("HF_HOME") or str(Path(xdg or Path.home() / ".cache") / "huggingface")
    return env


def _run_suites(argv: Sequence[str], report_path: Path, timeout: int,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """One whole pytest process: its wall time and its report (None with the reason when it wrote none)."""
    _log(f"packing: {' '.join(argv[1:])}")
    t0 = time.perf_counter()
    proc, late = _run_bounded(argv, timeout, env or _child_env())
    wall = time.perf_counter() - t0
    if late:  # no wall time to compare; the report the run wrote when stopped is kept (--packing-reports)
        report = json.loads(report_path.read_text()) if report_path.exists() else None
        return {"wall_s": None, "report": report, "reason": f"ran past {timeout} s", "stopped_after_s": wall}
    if not report_path.exists():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        return {"wall_s": wall, "report": None, "reason": f"no report written (exit {proc.returncode}): {tail}"}
    return {"wall_s": wall, "report": json.loads(report_path.read_text()), "exit_status": proc.returncode,
            "summary": (proc.stdout.strip().splitlines() or [""])[-1]}


def packing_summary(serial: dict[str, Any], packed: dict[str, Any]) -> dict[str, Any]:
    """The comparison of two reports of the same cells: outcomes, engine time, the longest cell."""
    def cells(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {c["nodeid"]: c for c in report.get("cells", [])}

    before, after = cells(serial), cells(packed)
    changed = {n: [before[n].get("outcome"), after[n].get("outcome")] for n in before.keys() & after.keys()
               if before[n].get("outcome") != after[n].get("outcome")}

    def engine_s(found: dict[str, dict[str, Any]]) -> float:
        return sum(float((c.get("metrics") or {}).get("engine_s") or 0.0) for c in found.values())

    def outcomes(found: dict[str, dict[str, Any]]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for cell in found.values():
            counts[cell.get("outcome") or "?"] = counts.get(cell.get("outcome") or "?", 0) + 1
        return counts

    longest = max(before.values(), key=lambda c: float(c.get("duration_s") or 0.0), default={})
    return {
        "cells": len(before),
        "same_cells": before.keys() == after.keys(),
        "only_serial": sorted(before.keys() - after.keys()),
        "only_packed": sorted(after.keys() - before.keys()),
        "same_outcomes": not changed and before.keys() == after.keys(),
        "changed_outcomes": changed,
        "outcomes": outcomes(before),
        "serial_engine_s": engine_s(before),
        "packed_engine_s": engine_s(after),
        "longest_cell": longest.get("nodeid"),
        "longest_cell_s": float(longest.get("duration_s") or 0.0),
        "shared_cells": sum(1 for c in after.values() if (c.get("metrics") or {}).get("measured_under_sharing")),
    }


def bench_packing(timeout: int, extra_args: Sequence[str] = (), workers_per_gpu: str = "auto",
                  select: str = PACKING_SELECT, keep_reports: str | None = None,
                  warm_caches: bool = False) -> dict[str, Any]:
    """The same cells serial, then packed onto shared GPUs, each as one pytest process (GPU only), each from empty
    compile caches unless ``warm_caches`` (then every run uses the machine's, and the first warms them for the
    other). The longest cell bounds the packed run from below (``floor_ratio``): a test is never split."""
    ok, what = _gpu_present()
    if not ok:
        return {"gpu_packing_speedup": None, "gpu_packing_wall_ratio": None, "gpu_packing_speedup_reason": what}
    with contextlib.suppress(Exception):  # the tiny model is built once, before either run is timed
        from pytest_gpucompat.workload.models import resolve_models

        resolve_models(["tiny-qwen2"])
    packed = ["-n", "auto", "--gpucompat-workers-per-gpu", workers_per_gpu]
    variants = [("serial", ["-p", "no:xdist"]), ("packed", packed)]
    with tempfile.TemporaryDirectory(prefix="gpucompat-bench-packing-") as tmp:
        runs: dict[str, dict[str, Any]] = {}
        for name, args in variants:
            report_path = Path(tmp) / f"{name}.json"
            argv = [sys.executable, "-m", "pytest", "--gpucompat", *PACKING_SUITES, "-k", select, "-p",
                    "no:cacheprovider", "-q", "--gpucompat-report", str(report_path), *args, *extra_args]
            caches = {} if warm_caches else fresh_caches(Path(tmp) / f"caches-{name}")
            env = _child_env(caches)
            runs[name] = {"argv": argv[1:], **_run_suites(argv, report_path, timeout, env)}
            if keep_reports and report_path.exists():
                Path(keep_reports).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(report_path, Path(keep_reports) / report_path.name)
    reports = {k: v.pop("report") for k, v in runs.items()}
    out: dict[str, Any] = {"gpu_packing_speedup": None, "gpu_packing_wall_ratio": None,
                           "packing": {"gpus": what, "select": select,
                                       "compile_caches": "the machine's" if warm_caches else "empty for each run",
                                       **runs}}
    serial = runs["serial"]
    if any(runs[k]["wall_s"] is None or reports[k] is None for k in ("serial", "packed")):
        out["gpu_packing_speedup_reason"] = serial.get("reason") or runs["packed"].get("reason")
        return out
    out["packing"].update(packing_summary(reports["serial"], reports["packed"]))
    out["gpu_packing_speedup"] = serial["wall_s"] / runs["packed"]["wall_s"]
    out["gpu_packing_wall_ratio"] = runs["packed"]["wall_s"] / serial["wall_s"]
    out["packing"]["floor_ratio"] = out["packing"]["longest_cell_s"] / serial["wall_s"]
    return out


# --------------------------------------------------------------------------- machine and table


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    versions = {d: _version(d) for d in ("pytest-gpucompat", "pytest", "pytest-xdist", "torch", "transformers",
                                         "packaging", "PyYAML", "vllm", "sglang", "tensorrt-llm", "env-doctor")}
    for dist, key in (("vllm", "vllm_collect_env"), ("env-doctor", "env_doctor")):
        if versions[dist] is None:  # a command installed in an environment of its own
            versions[dist] = _command_version(key)
    return {
        "cores": os.cpu_count(),
        "load_average_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "cpu": _cpu_model(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
    }


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if not isinstance(value, float):
        return f"{value}{unit}"
    return (f"{value:,.0f}" if value >= 1000 else f"{value:.2f}") + unit


def _goal(key: str, value: Any) -> str:
    if key not in GOALS:
        return ""
    op, target = GOALS[key]
    if value is None:
        return f"goal {op} {_fmt(target)}: not measured"
    met = value >= target if op == ">=" else value <= target
    text = f"goal {op} {_fmt(target)}: {'met' if met else 'MISSED'}"
    if key in MOONSHOTS:
        moon = MOONSHOTS[key]
        reached = value >= moon if op == ">=" else value <= moon
        text += f" (moonshot {_fmt(moon)}: {'reached' if reached else 'not reached'})"
    return text


def table(result: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str]] = []
    fp = result.get("fingerprint") or {}
    if fp:
        rows.append(("gpucompat env --json (median)", _fmt(fp["gpucompat_env"]["median_s"], " s"), ""))
        for key, label in (("collect_env", "torch collect_env"), ("vllm_collect_env", "vllm collect-env"),
                           ("env_doctor", "env-doctor check --json")):
            entry = fp.get(key) or {}
            rows.append((f"{label} (median)", _fmt(entry.get("median_s"), " s"), entry.get("reason") or ""))
        rows.append(("bare NVML floor (median)", _fmt(fp["bare_nvml"]["median_s"], " s"), ""))
        rows.append(("env_vs_bare_nvml", _fmt(result.get("env_vs_bare_nvml"), "x"),
                     _goal("env_vs_bare_nvml", result.get("env_vs_bare_nvml"))))
        for key in ("fingerprint_vs_collect_env", "fingerprint_vs_vllm_collect_env", "fingerprint_vs_env_doctor"):
            reason = result.get(key + "_reason") or ""
            rows.append((key, _fmt(result.get(key), "x"), _goal(key, result.get(key)) or reason))
    if "kb_cells_per_s" in result:
        kb = result["kb"]
        cps = result["kb_cells_per_s"]
        rows.append(("kb_cells_per_s (cold)", _fmt(cps), _goal("kb_cells_per_s", cps)))
        rows.append(("kb_cells_per_s_warm", _fmt(result["kb_cells_per_s_warm"]), "same cells, caches filled"))
        rows.append(("rule_checks_per_s", _fmt(result["rule_checks_per_s"]),
                     f"{kb['cells']} cells x {kb['rules']} rules, {kb['fingerprints']} fingerprints, "
                     f"keys: {kb.get('key_writer', 'marshal 2')}"))
        if "verified" in kb:
            v = kb["verified"]
            rows.append(("kb verified against rule_matches", f"{v['cells']} cells", f"{v['mismatches']} mismatches"))
    if "plugin_overhead_ratio" in result:
        ov = result["overhead"]
        rows.append(("plain parametrize (median)", _fmt(ov["plain"]["median_s"], " s"), f"{ov['cells']} cells"))
        rows.append(("--gpucompat (median)", _fmt(ov["plugin_no_report"]["median_s"], " s"), ""))
        rows.append(("--gpucompat --gpucompat-report (median)", _fmt(ov["plugin_report"]["median_s"], " s"), ""))
        for key in ("plugin_overhead_ratio", "plugin_overhead_ratio_no_report"):
            rows.append((key, _fmt(result[key], "x"), _goal(key, result[key])))
        for key in ("plugin_overhead_ratio_best", "plugin_overhead_ratio_no_report_best"):
            rows.append((key, _fmt(result[key], "x"), "fastest run of each"))
    if "suite_vs_engine_ratio" in result:
        ratios = result["suite_vs_engine_ratio"]
        if ratios is None:
            rows.append(("suite_vs_engine_ratio", "n/a", result.get("suite_vs_engine_ratio_reason") or ""))
        else:
            per_engine = result["suites"]["per_engine"]
            for engine, ratio in ratios.items():
                slot = per_engine[engine]
                note = (f"{slot['cells']} cells {slot['cells_s']:.1f} s / engine time {slot['engine_s']:.1f} s "
                        f"({slot['specs']} pooled starts {slot['start_s']:.1f} s, "
                        f"reference {slot['reference_s']:.1f} s)"
                        if ratio is not None else f"no engine time: {slot['outcomes']}")
                rows.append((f"suite_vs_engine_ratio[{engine}]", _fmt(ratio, "x"), note))
            suites = result["suites"]
            all_ratio = result.get("suite_vs_engine_ratio_all")
            rows.append(("suite_vs_engine_ratio_all", _fmt(all_ratio, "x"),
                         f"suites wall {suites['wall_s']:.1f} s / all engine time {suites['engine_s']:.1f} s; "
                         + _goal("suite_vs_engine_ratio_all", all_ratio)))
    if "gpu_packing_speedup" in result:
        packing = result.get("packing") or {}
        ratio = result.get("gpu_packing_wall_ratio")
        if ratio is None:
            rows.append(("gpu_packing_speedup", "n/a", result.get("gpu_packing_speedup_reason") or ""))
        else:
            serial, packed = packing["serial"], packing["packed"]
            same = "same cells and outcomes" if packing["same_outcomes"] else (
                f"DIFFERENT: {packing['changed_outcomes'] or packing['only_serial'] or packing['only_packed']}")
            rows.append(("gpu_packing_speedup", _fmt(result["gpu_packing_speedup"], "x"),
                         f"serial {serial['wall_s']:.1f} s / packed {packed['wall_s']:.1f} s, {packing['cells']} "
                         f"cells, {same}"))
            rows.append(("gpu_packing_wall_ratio", _fmt(ratio, "x"), _goal("gpu_packing_wall_ratio", ratio)))
            rows.append(("engine time serial / packed", f"{packing['serial_engine_s']:.1f} s",
                         f"{packing['packed_engine_s']:.1f} s packed; longest cell "
                         f"{packing['longest_cell_s']:.1f} s (floor {packing['floor_ratio']:.2f}x); "
                         f"{packing['shared_cells']} cells measured under sharing"))
    rows += cost.rows(result)
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    m = result["machine"]
    head = (f"pytest-gpucompat benchmarks, {result['date']}: {m['cores']} cores, {m['cpu']}, Python {m['python']}, "
            f"torch {m['versions'].get('torch')}")
    lines = [head, ""] + [f"{k:<{width}}  {v:>{vwidth}}  {note}".rstrip() for k, v, note in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _shape(text: str) -> tuple[int, int]:
    a, _, b = text.partition("x")
    return int(a), int(b or 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (the table on stderr)")
    parser.add_argument("--only", action="append",
                        choices=("fingerprint", "kb", "overhead", "off", "on", "suites", "packing"),
                        help="run only these benchmarks (repeatable; default all)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each whole process (default 5)")
    parser.add_argument("--kb-cells", type=int, default=100_000, help="cells in the knowledge-base benchmark")
    parser.add_argument("--kb-fingerprints", type=int, default=500, help="distinct fingerprints among those cells")
    parser.add_argument("--kb-repeats", type=int, default=3,
                        help="cold + warm pass pairs over the cells (medians; default 3)")
    parser.add_argument("--kb-verify", type=int, default=2000, metavar="N",
                        help="check N sampled cells against the one-rule-at-a-time reference (0: skip)")
    parser.add_argument("--seed", type=int, default=20240611, help="seed of the generated cells")
    parser.add_argument("--overhead-shape", default="100x100", metavar="AxB",
                        help="values of the two parameters of the overhead suite (default 100x100 = 10,000 cells)")
    parser.add_argument("--off-tests", type=int, default=1000, help="trivial tests of the off benchmark")
    parser.add_argument("--instr-runs", type=int, default=2,
                        help="cachegrind runs of each variant (instruction counts; 0: none; default 2)")
    parser.add_argument("--start-runs", type=int, default=11, help="runs of one start, off and not installed")
    parser.add_argument("--instr-jobs", type=int, default=1, metavar="N",
                        help="cachegrind runs at once (instruction counts do not depend on the load; CPU and RSS "
                             "runs are never run at once)")
    parser.add_argument("--on-shape", default="100x100", metavar="AxB", help="cells of the on benchmark")
    parser.add_argument("--big-shape", default="1000x100", metavar="AxB",
                        help="cells of the large on run, CPU and peak RSS (default 100,000; 0 to skip)")
    parser.add_argument("--big-runs", type=int, default=2, help="runs of each variant of the large on run")
    parser.add_argument("--big-instructions", action="store_true", help="count the large run's instructions too")
    parser.add_argument("--suites-timeout", type=int, default=3600, help="seconds the GPU suites may take")
    parser.add_argument("--suites-args", default="", metavar="ARGS",
                        help="extra pytest arguments for the GPU suites, e.g. '-n auto --gpucompat-model PATH'")
    parser.add_argument("--suites-without-gpu", action="store_true",
                        help="run the suites benchmark without a GPU too (the transformers engine on the CPU)")
    parser.add_argument("--suites-report", metavar="FILE", help="keep the GPU suites' report JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the overhead suite's temporary directory")
    parser.add_argument("--packing-workers", default="auto", metavar="K|auto",
                        help="--gpucompat-workers-per-gpu of the packed run (default auto)")
    parser.add_argument("--packing-args", default="", metavar="ARGS",
                        help="extra pytest arguments for both packing runs, e.g. '--gpucompat-timeout 300'")
    parser.add_argument("--packing-select", default=PACKING_SELECT, metavar="EXPR",
                        help=f"the cells of both packing runs, as -k (default {PACKING_SELECT!r})")
    parser.add_argument("--packing-reports", metavar="DIR", help="keep both packing runs' reports in DIR")
    parser.add_argument("--packing-warm-caches", action="store_true",
                        help="let the packing runs use the machine's compile caches (the first run warms them for "
                             "the next); by default each starts from empty ones")
    args = parser.parse_args(argv)
    cost.INSTR_JOBS = max(1, args.instr_jobs)
    only = set(args.only or ("fingerprint", "kb", "overhead", "off", "on", "suites", "packing"))
    a, _, b = args.overhead_shape.partition("x")

    result: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
        "machine": machine(),
        "goals": {k: f"{op} {v}" for k, (op, v) in GOALS.items()},
        "moonshots": MOONSHOTS,
    }
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("fingerprint", lambda: bench_fingerprint(args.runs)),
        ("kb", lambda: bench_kb(args.kb_cells, args.kb_fingerprints, args.seed, args.kb_repeats, args.kb_verify)),
        ("overhead", lambda: bench_overhead(int(a), int(b), args.runs, args.keep)),
        ("off", lambda: cost.bench_off(args.off_tests, args.runs, args.instr_runs, args.start_runs)),
        ("on", lambda: cost.bench_on(*_shape(args.on_shape), args.runs, args.instr_runs,  # type: ignore[misc]
                                     _shape(args.big_shape) if args.big_shape != "0" else None, args.big_runs,
                                     args.big_instructions)),
        ("suites", lambda: bench_suites(args.suites_timeout, shlex.split(args.suites_args), args.suites_without_gpu,
                                         args.suites_report)),
        ("packing", lambda: bench_packing(args.suites_timeout, shlex.split(args.packing_args), args.packing_workers,
                                          args.packing_select, args.packing_reports, args.packing_warm_caches)),
    ]
    for name, step in steps:
        if name not in only:
            continue
        data = step()
        if name == "fingerprint":
            ratio = ("fingerprint_vs_", "env_vs_")
            result.update({k: v for k, v in data.items() if k.startswith(ratio)})
            result["fingerprint"] = {k: v for k, v in data.items() if not k.startswith(ratio)}
        else:
            result.update(data)
    text = table(result)
    if args.json:
        print(text, file=sys.stderr)
        print(json.dumps(result, indent=2))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

