"""How `gpucompat rules --lint` grows with the size of the release history.

    python bench/lint_scaling.py [--json] [--runs N] [--sizes 0,50000,100000,200000]

The shipped vLLM history with N extra flags (each one run over every release, a setting of its own) is written to a
temporary directory; per size, the median of --runs timings of loading it and of linting the shipped vLLM rules
against it (the windows of rules with bounds included). A lint that scans every flag per release and setting grows
with releases × flags × settings; this one reads each run a bounded number of times, so lint time over the size
grows like the size (`lint_growth`: the largest size's lint time over the half size's, ~2 when linear) and stays
a fraction of the load (`lint_over_load`). The table goes to stderr; --json prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _history(directory: Path, extra: int) -> Path:
    data = json.loads((ROOT / "matrices" / "history" / "vllm.json").read_text(encoding="utf-8"))
    first, last = data["releases"][0]["version"], data["releases"][-1]["version"]
    for i in range(extra):
        data["flags"][f"--x{i}"] = [{"first": first, "last": last, "dest": f"x{i}"}]
    out = directory / f"h{extra}"
    out.mkdir()
    (out / "vllm.json").write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
    return out


def _stats(values: list[float]) -> dict[str, float]:
    median = statistics.median(values)
    return {"median_s": round(median, 4), "spread": round((max(values) - min(values)) / median, 3) if median else 0.0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="0,50000,100000,200000")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from pytest_gpucompat.kb import history as history_module
    from pytest_gpucompat.kb import load_kb
    from pytest_gpucompat.kb.lint import lint_rules

    sizes = [int(s) for s in args.sizes.split(",")]
    rules = [r for r in load_kb().rules if r.engine == "vllm"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            directory = _history(Path(tmp), size)
            loads, lints = [], []
            for _ in range(max(1, args.runs)):
                history_module._load.cache_clear()
                started = time.perf_counter()
                found = history_module.load_history("vllm", directory)
                loads.append(time.perf_counter() - started)
                assert found is not None
                started = time.perf_counter()
                problems = [p for r in lint_rules(rules, known={"vllm": found}) for p in r.problems]
                lints.append(time.perf_counter() - started)
                assert not problems, problems[:3]
            size_mb = (directory / "vllm.json").stat().st_size / 1e6
            rows.append({"extra_flags": size, "file_mb": round(size_mb, 2), "load": _stats(loads),
                         "lint": _stats(lints)})
    big, half = rows[-1], next((r for r in rows if r["extra_flags"] * 2 == rows[-1]["extra_flags"]), None)
    result = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "system": platform.platform(),
                    "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None},
        "rules": len(rules), "sizes": rows,
        "lint_growth": round(big["lint"]["median_s"] / half["lint"]["median_s"], 2) if half else None,
        "lint_over_load": round(big["lint"]["median_s"] / big["load"]["median_s"], 3),
    }
    for r in rows:
        print(f"{r['extra_flags']:>8} extra flags {r['file_mb']:>7.2f} MB  load {r['load']['median_s']:8.3f} s  "
              f"lint {r['lint']['median_s']:8.3f} s (spread {r['lint']['spread']:.2f})", file=sys.stderr)
    print(f"lint growth (largest / half size): {result['lint_growth']}; lint / load at the largest: "
          f"{result['lint_over_load']}", file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
