"""How the plugin's own cost grows: with the number of cells and with the size of the knowledge base.

    python bench/scaling.py [--json] [--runs N] [--cells 1000,10000,100000] [--rules-factor 10]

For each size: the overhead of `pytest --gpucompat --gpucompat-report` over plain `pytest.mark.parametrize` on
the same trivial cells (as bench/run.py's `plugin_overhead_ratio`, whole processes, interleaved), measured as the
processes' CPU time (user + system, which other load on the machine disturbs less than wall time) and as wall
time; once with the shipped knowledge base and once with a generated one `--rules-factor` times its size (each
rule copied under new ids). KB throughput: cells per second through `matching_rules`, cold caches, for the same
sizes and both knowledge bases. Medians and spreads ((max - min) / median) of `--runs` runs; the machine and its
load average at the start are recorded. Tables go to stderr, `--json` prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _run_module() -> Any:
    """bench/run.py, for its generated fingerprints and engine parameters (one definition of the cells)."""
    spec = importlib.util.spec_from_file_location("gpucompat_bench_run", HERE / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def big_kb(directory: Path, factor: int) -> tuple[Path, int]:
    """The shipped rule files, each rule also copied `factor - 1` times under new ids: a KB `factor` times larger."""
    import copy as copy_mod

    import yaml

    from pytest_gpucompat.common.paths import matrices_dir

    directory.mkdir(parents=True, exist_ok=True)
    rules = 0
    for path in sorted((matrices_dir() / "rules").glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        original = list(data.get("rules") or [])
        for k in range(factor):  # one file per copy: each stays under the loader's size limit
            copy = dict(data, rules=[dict(copy_mod.deepcopy(rule), id=f"{rule['id']}-copy{k}") if k else rule
                                     for rule in original])
            text = yaml.safe_dump(copy_mod.deepcopy(copy), sort_keys=False, allow_unicode=True)
            (directory / f"{path.stem}-{k}.yaml").write_text(text, encoding="utf-8")
            rules += len(original)
    return directory, rules


def _spread(values: list[float]) -> float | None:
    median = statistics.median(values)
    return (max(values) - min(values)) / median if median else None


def _summary(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "spread": _spread(values),
            "runs": [round(v, 4) for v in values]}


def _timed(argv: list[str], cwd: Path, env: dict[str, str], cells: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children) of one pytest run that must pass every cell."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode != 0 or f"{cells} passed" not in summary:
        raise RuntimeError(f"{' '.join(argv[3:])}: rc={proc.returncode} {summary}\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


_PLAIN = """import pytest

@pytest.mark.parametrize("b", list(range({b})))
@pytest.mark.parametrize("a", list(range({a})))
def test_cell(a, b):
    pass
"""
_PLUGIN = """import pytest

@pytest.mark.gpucompat(engine="hf", params={{"a": list(range({a})), "b": list(range({b}))}})
def test_cell(gpucompat_cell):
    pass
"""


def overhead(cells: int, runs: int, kb_dir: Path, tmp: Path) -> dict[str, Any]:
    a = 100 if cells >= 1000 else 10
    b = cells // a
    root = tmp / f"overhead-{cells}"
    for name, body in (("plain", _PLAIN), ("plugin", _PLUGIN)):
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "test_suite.py").write_text(body.format(a=a, b=b))
        (root / name / "pytest.ini").write_text("[pytest]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    env["GPUCOMPAT_RUNNER"] = "bench"
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    report = ["--gpucompat", "--gpucompat-report", str(root / "r.json")]
    variants = {
        "plain": (root / "plain", [*base, "-p", "no:gpucompat"]),
        "plugin": (root / "plugin", [*base, *report]),
        "plugin_big_kb": (root / "plugin", [*base, *report, "--gpucompat-no-builtin-rules", "--gpucompat-kb",
                                            str(kb_dir)]),
    }
    times: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in variants}
    for _ in range(runs):  # interleaved: drift in the machine's load hits every variant alike
        for name, (cwd, argv) in variants.items():
            wall, cpu = _timed(argv, cwd, env, a * b)
            times[name]["wall"].append(wall)
            times[name]["cpu"].append(cpu)
    out: dict[str, Any] = {"cells": a * b}
    for name in ("plugin", "plugin_big_kb"):
        for kind in ("cpu", "wall"):
            ratios = [p / q for p, q in zip(times[name][kind], times["plain"][kind])]
            out[f"{name}_ratio_{kind}"] = _summary(ratios)
    out["seconds"] = {name: {kind: _summary(v) for kind, v in t.items()} for name, t in times.items()}
    return out


def kb_throughput(cells: int, runs: int, kb_dir: Path, run_mod: Any) -> dict[str, Any]:
    from pytest_gpucompat.kb import index as index_mod
    from pytest_gpucompat.kb import load_kb, matching_rules

    out: dict[str, Any] = {"cells": cells}
    for label, kb in (("shipped", load_kb()), ("big", load_kb([str(kb_dir)], builtin=False))):
        rng = random.Random(20240611)
        fps = run_mod.generate_fingerprints(rng, 100 if cells >= 1000 else 10)
        params = run_mod.generate_params(rng, max(1, cells // len(fps)))
        rates = []
        for _ in range(runs):
            index_mod.clear_match_cache()
            t0 = time.perf_counter()
            for fp in fps:
                for engine, p in params:
                    matching_rules(kb, fp, engine, p)
            rates.append(len(fps) * len(params) / (time.perf_counter() - t0))
        out[label] = {"rules": len(kb.rules), "cells_per_s": _summary(rates)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout (tables on stderr)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each measurement (default 3)")
    parser.add_argument("--cells", default="1000,10000,100000", help="cell counts (default 1000,10000,100000)")
    parser.add_argument("--rules-factor", type=int, default=10, help="size of the generated KB (default 10x)")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.cells.split(",") if x.strip()]
    run_mod = _run_module()
    result: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "load_average_at_start": os.getloadavg()[0],
                    "python": platform.python_version(), "os": platform.platform(), "cpu": run_mod._cpu_model()},
        "runs": args.runs, "rules_factor": args.rules_factor,
    }
    tmp = Path(tempfile.mkdtemp(prefix="gpucompat-scaling-"))
    try:
        kb_dir, rules = big_kb(tmp / "kb", args.rules_factor)
        result["big_kb_rules"] = rules
        result["overhead"] = []
        result["kb"] = []
        for cells in sizes:
            _log(f"scaling: {cells} cells ...")
            result["kb"].append(kb_throughput(cells, args.runs, kb_dir, run_mod))
            result["overhead"].append(overhead(cells, args.runs, kb_dir, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _log(f"{'cells':>8} {'overhead CPU':>13} {'(10x rules)':>12} {'overhead wall':>14} {'(10x rules)':>12} "
         f"{'KB cells/s':>11} {'(10x rules)':>12}")
    for ov, kb in zip(result["overhead"], result["kb"]):
        _log(f"{ov['cells']:>8} {ov['plugin_ratio_cpu']['median']:>12.2f}x "
             f"{ov['plugin_big_kb_ratio_cpu']['median']:>11.2f}x "
             f"{ov['plugin_ratio_wall']['median']:>13.2f}x {ov['plugin_big_kb_ratio_wall']['median']:>11.2f}x "
             f"{kb['shipped']['cells_per_s']['median']:>11,.0f} {kb['big']['cells_per_s']['median']:>12,.0f}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
