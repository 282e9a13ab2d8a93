"""Mutation testing of the pure core, on demand (not part of CI: it takes tens of minutes on two cores).

    .venv/bin/python tools/mutation.py                 # every core module, one mutant at a time, niced
    .venv/bin/python tools/mutation.py --module kb/match.py --children 2

The pure core is what decides: the knowledge base's matching and verdicts, version ranges, the leak and drift
decisions, the diff's verdicts and the matrix expansion. mutmut (installed here on first use, at the pinned version
below; not a test dependency) changes one operator, constant or call at a time in a copy of the tree under
build/mutation/, and runs the tests that reach the changed function; a mutant that no test fails "survives". The
score is (killed + timed out) / mutants; docs/testing.md keeps the last result. A survivor that no test can tell
apart from the original (an equivalent mutant) is named in docs/reports/mutation-equivalent.json with the reason; the
run counts those apart ("equivalent") and gives the score over the other mutants too.

Prints one JSON object on stdout: the score per module and in all, the surviving mutants' names (the equivalent
ones apart, and any equivalent one that a test now kills: the file is out of date); `--show` also prints each
survivor's diff on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "mutation"
MUTMUT = "mutmut==3.8.1"

CORE = (
    "kb/match.py", "kb/evaluate.py", "common/versions.py", "checks/leaks.py", "checks/compare.py",
    "report/diff.py", "workload/matrix.py",
)
# The plain-pytest tests of those modules, through their public functions. The engine-cycle tests of the leak
# detector (test_cycles_leaks.py) run a real engine for tens of seconds per mutant and stay out: the verdicts they
# reach are pinned by tests/test_leaks.py and tests/test_core_boundaries.py.
TESTS = (
    "tests/test_core_boundaries.py", "tests/test_kb_evaluate.py", "tests/test_rules.py", "tests/test_signatures.py",
    "tests/test_kb_boundaries.py", "tests/test_knowledge_base.py", "tests/test_check_output.py", "tests/test_leaks.py",
    "tests/test_memory.py", "tests/test_compare.py", "tests/test_diff_compare.py", "tests/test_diff_coverage.py",
    "tests/test_diff_gate.py", "tests/test_diff_verdicts.py", "tests/test_cross_runner.py", "tests/test_report.py",
    "tests/test_record_schema.py", "tests/test_history_data.py", "tests/test_matrix_expansion.py",
    "tests/test_match_facts.py", "tests/test_env_conditions.py", "tests/test_kb_index_cache.py",
)
KILLED = {"killed", "timeout", "caught by type check"}
EQUIVALENT = ROOT / "docs" / "reports" / "mutation-equivalent.json"
"""{mutant name: why no test can tell it from the original}: the survivors judged equivalent, by hand."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", action="append", choices=CORE, help="only this module (repeatable)")
    parser.add_argument("--children", type=int, default=1, help="mutants run at once (default 1: a shared machine)")
    parser.add_argument("--resume", action="store_true", help="keep the work folder and its finished mutants")
    parser.add_argument("--only", action="append", metavar="GLOB",
                        help="run only the mutants whose names match (repeatable), e.g. 'pytest_gpucompat.kb.match.*' "
                             "or the survivors of an earlier run")
    parser.add_argument("--work", type=Path, default=WORK, help="the folder of the mutated copy (build/mutation)")
    parser.add_argument("--show", action="store_true", help="print each survivor's diff on stderr")
    parser.add_argument("--report", action="store_true",
                        help="run nothing: the work folder's results of an earlier run, classified again")
    args = parser.parse_args()
    modules = args.module or list(CORE)

    work = args.work.resolve()
    _install()
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "CI": ""}
    mutmut = [sys.executable, "-m", "mutmut"]
    if not args.report:
        if not args.resume or not work.exists():
            _copy_tree(work)
        _configure(work, modules)
        subprocess.run(["nice", "-n", "19", *mutmut, "run", "--max-children", str(args.children),
                        *(args.only or [])], cwd=work, env=env, check=True, stdout=sys.stderr)
    lines = subprocess.run([*mutmut, "results", "--all", "true"], cwd=work, env=env, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    status = {name.strip(): state.strip() for name, _, state in (line.rpartition(":") for line in lines) if name}
    status = {name: state for name, state in status.items() if state != "not checked"}  # not run (yet)
    if args.only:
        status = {name: state for name, state in status.items() if any(fnmatch(name, g) for g in args.only)}
    equivalent: dict[str, str] = json.loads(EQUIVALENT.read_text(encoding="utf-8")) if EQUIVALENT.exists() else {}
    killed_equivalent = sorted(n for n in equivalent if status.get(n) in KILLED)
    status = {name: "equivalent" if name in equivalent and state not in KILLED else state
              for name, state in status.items()}
    per_module: dict[str, Counter[str]] = {}
    for name, state in status.items():
        module = next((m for m in modules if name.startswith(_dotted(m) + ".")), "other")
        per_module.setdefault(module, Counter())[state] += 1
    survivors = sorted(name for name, state in status.items() if state not in KILLED | {"equivalent"})
    if args.show:
        for name in survivors:
            shown = subprocess.run([*mutmut, "show", name], cwd=work, env=env, capture_output=True, text=True)
            print(shown.stdout, file=sys.stderr)
    summary = {
        "tool": MUTMUT,
        "modules": {m: _scored(counts) for m, counts in sorted(per_module.items())},
        "total": _scored(sum(per_module.values(), Counter())),
        "survivors": survivors,
        "equivalent": {name: equivalent[name] for name in sorted(status) if status[name] == "equivalent"},
        "equivalent_but_killed": killed_equivalent,
    }
    print(json.dumps(summary, indent=1))
    return 0


def _dotted(module: str) -> str:
    return "pytest_gpucompat." + module.removesuffix(".py").replace("/", ".")


def _score(counts: Counter[str]) -> float:
    total = sum(counts.values())
    return round(sum(counts[s] for s in KILLED) / total, 4) if total else 0.0


def _scored(counts: Counter[str]) -> dict[str, int | float]:
    """The counts, the score over every mutant run and over those not named equivalent."""
    rest = Counter({state: n for state, n in counts.items() if state != "equivalent"})
    return {**counts, "score": _score(counts), "score_without_equivalent": _score(rest)}


def _install() -> None:
    try:
        from importlib.metadata import version

        if version("mutmut") == MUTMUT.split("==")[1]:
            return
    except Exception:  # not installed (PackageNotFoundError) or unreadable: install it
        pass
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", MUTMUT], check=True, stdout=sys.stderr)


def _copy_tree(work: Path) -> None:
    """The tracked and untracked-but-not-ignored files, as they are in the working tree."""
    shutil.rmtree(work, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file() and not name.startswith("build/"):
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, work / name)


def _configure(work: Path, modules: list[str]) -> None:
    """mutmut reads its settings from setup.cfg (the copy's pyproject.toml has none): only the core modules are
    mutated, only their tests run, in one process per mutant (no pytest-xdist)."""
    def listing(items: list[str]) -> str:
        return "".join(f"\n    {item}" for item in items)

    also_copy = [p for p in ("matrices", "suites", "docs", "examples", "README.md", "constraints.txt", "tools",
                             "bench") if (work / p).exists()]
    (work / "setup.cfg").write_text(
        "[mutmut]\n"
        "source_paths = pytest_gpucompat/\n"
        f"only_mutate ={listing(['pytest_gpucompat/' + m for m in modules])}\n"
        f"pytest_add_cli_args_test_selection ={listing([t for t in TESTS if (work / t).exists()])}\n"
        f"pytest_add_cli_args ={listing(['-p', 'no:xdist', '-p', 'no:cacheprovider'])}\n"
        f"also_copy ={listing(also_copy)}\n"
        "process_isolation = forkserver\n"
    )


if __name__ == "__main__":
    sys.exit(main())
