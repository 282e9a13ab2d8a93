"""Detection power of the memory and precision checks, measured against planted faults and clean controls.

    python bench/detection.py [--json] [--runs N] [--quick]

Leaks: create -> generate -> destroy cycles of the transformers engine in a child process, exactly as the memory
suite runs them (its ``create_destroy_cycles`` with its default ``CyclePolicy``, judged by its
``memory_verdict``), with one leak class planted per run, at the goal's size of 1 MiB per cycle:

- ``allocator``: CUDA tensors kept alive, inside the torch allocator's cached segments (GPU only);
- ``host``: host memory kept alive in the engine's process;
- ``orphan_process``: a helper process per cycle that escapes (double fork, new session) and keeps memory (a CUDA
  allocation on a GPU, host memory elsewhere);
- ``foreign_process_control``: a clean engine, beside a process that is not the engine's and keeps growing its
  memory (GPU memory on a GPU). Detected = recognised and reported as not the engine's (GPU only); flagged = the
  clean engine failed for it.

Clean controls (nothing planted) are shared by the allocator, host and orphan classes. Drift: greedy generations
of a copy of the tiny model whose weights got relative noise (``build_perturbed_model``) against the float32
reference, or of the clean model on other prompts, judged by ``verdict_drift`` with the float32 thresholds.
Goal: every planted class detected, no clean run flagged, no foreign process blamed. Human output goes to stderr;
``--json`` prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

from pytest_gpucompat.catalog.base import EngineSpec
from pytest_gpucompat.checks.compare import compare_generations, thresholds_for, verdict_drift
from pytest_gpucompat.checks.cycles import create_destroy_cycles
from pytest_gpucompat.checks.leaks import CyclePolicy, memory_verdict
from pytest_gpucompat.checks.memory import MemorySample
from pytest_gpucompat.checks.ownership import OWNER_ENV
from pytest_gpucompat.engines import create
from pytest_gpucompat.engines.isolation import run_in_child
from pytest_gpucompat.workload.models import build_perturbed_model, build_tiny_model, fixed_prompts, model_vocab_size

MIB = 1024 * 1024
PLANT_MIB = 1.0
_HELD: list[Any] = []
CLASSES = ("allocator", "host", "orphan_process", "foreign_process_control")

# A process that holds `mib` MiB (CUDA when asked) and says so on the pipe `fd`; with `grow`, it adds that much
# again every half second. With `escape` it double-forks into a new session first, so that nothing descends from
# its starter any more: only the environment still says whose it is.
_HOLDER = r"""
import os, sys, time
mib, fd = float(sys.argv[1]), int(sys.argv[5])
on_gpu, escape, grow = (flag == "1" for flag in sys.argv[2:5])
if escape:
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
held = []
def take():
    if on_gpu:
        import torch
        held.append(torch.ones(int(mib * 1048576) // 4, device="cuda"))
        torch.cuda.synchronize()
    else:
        block = bytearray(int(mib * 1048576))
        block[::4096] = b"\x01" * len(block[::4096])
        held.append(block)
take()
os.write(fd, b"ready\n")
os.close(fd)
while True:
    time.sleep(0.5)
    if grow:
        take()
"""


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def start_holder(mib: float, on_gpu: bool, escape: bool, grow: bool, env: dict[str, str] | None = None) -> int:
    """Start a memory holder and wait until it holds; returns the pid of the starter (escaped: already gone)."""
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(mib), "1" if on_gpu else "0", "1" if escape else "0",
                             "1" if grow else "0", str(write)], pass_fds=(write,), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        line = pipe.readline()
    if escape:
        proc.wait(timeout=60)
    if line.strip() != b"ready":
        raise RuntimeError("the planted memory holder did not start")
    return proc.pid


class _Plant:
    """Leaks `mib` MiB per cycle of one class on purpose, kept alive until the measuring process ends."""

    def __init__(self, leak: str, mib: float, on_gpu: bool) -> None:
        self.leak, self.mib, self.on_gpu = leak, mib, on_gpu

    def __call__(self, cycle: int) -> None:
        if self.leak == "allocator":
            import torch

            _HELD.append(torch.ones(int(self.mib * MIB) // 4, dtype=torch.float32, device="cuda"))
        elif self.leak == "host":
            block = bytearray(int(self.mib * MIB))
            block[::4096] = b"\x01" * len(block[::4096])
            _HELD.append(block)
        elif self.leak == "orphan_process":
            start_holder(self.mib, self.on_gpu, escape=True, grow=False)


def leak_run(model: str, leak: str | None, on_gpu: bool) -> list[dict[str, Any]]:
    """The memory suite's cycles, with its default policy, and `leak` planted after each destroy."""
    spec = EngineSpec("hf", model, {"dtype": "float32", "device": "cuda" if on_gpu else "cpu"})
    prompts = fixed_prompts(2, 12, model_vocab_size(model), seed=5)
    plant = _Plant(leak, PLANT_MIB, on_gpu) if leak in ("allocator", "host", "orphan_process") else None
    return create_destroy_cycles(spec, CyclePolicy.from_env(), prompts, 8, on_cycle=plant)


def judge(rows: list[dict[str, Any]], foreign_pid: int | None) -> dict[str, Any]:
    fields = set(MemorySample.__dataclass_fields__)
    samples = [MemorySample(**{k: v for k, v in r.items() if k in fields}) for r in rows]
    verdict = memory_verdict(samples, warmup=1)
    recognised = foreign_pid is not None and any(
        p.get("pid") == foreign_pid and p.get("owner") != "ours" for s in samples for p in s.others)
    return {"flagged": verdict.leaked, "fired": [v.metric for v in verdict.fired], "cycles": len(samples) - 1,
            "foreign_recognised": recognised, "message": verdict.message("hf")}


def _foreign_holder(on_gpu: bool) -> subprocess.Popen[bytes]:
    """A process that is not the engine's: no owner token, started before the measuring child, growing."""
    env = {k: v for k, v in os.environ.items() if k != OWNER_ENV}
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, "8", "1" if on_gpu else "0", "0", "1", str(write)],
                            pass_fds=(write,), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        pipe.readline()
    return proc


def run_leaks(model: str, on_gpu: bool, runs: int) -> dict[str, Any]:
    applies = {"allocator": on_gpu, "host": True, "orphan_process": True, "foreign_process_control": True}
    plan = [(leak, i) for leak in CLASSES if applies[leak] for i in range(runs)] + [(None, i) for i in range(runs)]
    rows: list[dict[str, Any]] = []
    for leak, _ in plan:
        foreign = _foreign_holder(on_gpu) if leak == "foreign_process_control" else None
        try:
            result = judge(run_in_child(leak_run, model, leak, on_gpu, timeout_s=900),
                           foreign.pid if foreign else None)
        finally:
            if foreign is not None:
                foreign.kill()
                foreign.wait()
        rows.append({"leak": leak, **result})
        print(f"leak  {leak or 'clean':<24} cycles {result['cycles']:>2}  "
              f"{'FLAGGED ' + ','.join(result['fired']) if result['flagged'] else 'clean'}"
              f"{'  (foreign recognised)' if result['foreign_recognised'] else ''}", file=sys.stderr)
    clean = [r for r in rows if r["leak"] is None]
    classes: dict[str, Any] = {}
    for leak in CLASSES:
        planted = [r for r in rows if r["leak"] == leak]
        if leak == "foreign_process_control":
            classes[leak] = {
                "planted_runs": len(planted) if on_gpu else 0,
                "planted_detected": sum(r["foreign_recognised"] for r in planted) if on_gpu else 0,
                "clean_runs": len(planted), "clean_flagged": sum(r["flagged"] for r in planted),
                "applies": True, **({} if on_gpu else {"note": "no GPU: nothing to attribute, only blame is counted"})}
        else:
            classes[leak] = {
                "planted_runs": len(planted), "planted_detected": sum(r["flagged"] for r in planted),
                "clean_runs": len(clean), "clean_flagged": sum(r["flagged"] for r in clean),
                "applies": applies[leak], "fired": sorted({m for r in planted for m in r["fired"]})}
    planted_all = [r for r in rows if r["leak"] in ("allocator", "host", "orphan_process")]
    return {
        "leak": {"planted_runs": len(planted_all), "planted_detected": sum(r["flagged"] for r in planted_all),
                 "clean_runs": len(clean), "clean_flagged": sum(r["flagged"] for r in clean),
                 "planted_mib_per_cycle": PLANT_MIB, "policy": CyclePolicy.from_env().__dict__,
                 "cycles_per_run": sorted({r["cycles"] for r in rows})},
        "leak_classes": classes,
    }


def generations(model: str, device: str, seed: int) -> list[Any]:
    engine = create("hf")
    engine.start(EngineSpec("hf", model, {"dtype": "float32", "device": device}))
    try:
        prompts = fixed_prompts(8, 16, model_vocab_size(model), seed=seed)
        return engine.generate(prompts, 16, 5)
    finally:
        engine.shutdown()


def run_drift(model: str, device: str, quick: bool) -> dict[str, Any]:
    thresholds = thresholds_for("float32")
    reference = {seed: generations(model, device, seed) for seed in range(10, 11 if quick else 15)}
    noises = [1e-3] if quick else [1e-3, 3e-3, 1e-2]
    rows = []
    for noise in noises:
        for k, seed in enumerate(reference):
            bad = str(build_perturbed_model(model, noise, seed=k + 1))
            ok, message = verdict_drift(compare_generations(reference[seed], generations(bad, device, seed), 5),
                                        thresholds)
            rows.append({"planted_rel_noise": noise, "detected": not ok, "message": message})
    for seed in reference:  # clean controls: the same model again, other prompts
        ok, message = verdict_drift(compare_generations(reference[seed], generations(model, device, seed), 5),
                                    thresholds)
        rows.append({"planted_rel_noise": 0.0, "detected": not ok, "message": message})
    planted = [r for r in rows if r["planted_rel_noise"] > 0]
    clean = [r for r in rows if r["planted_rel_noise"] == 0]
    return {"planted_runs": len(planted), "planted_detected": sum(r["detected"] for r in planted),
            "clean_runs": len(clean), "clean_flagged": sum(r["detected"] for r in clean),
            "smallest_planted_rel_noise": min(noises)}


def goal_met(result: dict[str, Any]) -> bool:
    parts = [result["drift"], *(c for c in result["leak_classes"].values() if c["applies"])]
    return all(p["planted_detected"] == p["planted_runs"] and p["clean_flagged"] == 0 for p in parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (tables on stderr)")
    parser.add_argument("--runs", type=int, default=3, help="planted runs per leak class and clean runs (default 3)")
    parser.add_argument("--quick", action="store_true", help="one run of each, fewer drift runs")
    parser.add_argument("--only", choices=("leak", "drift"), help="measure one of the two")
    args = parser.parse_args(argv)
    on_gpu = _cuda()
    device = "cuda" if on_gpu else "cpu"
    model = str(build_tiny_model())
    began = time.perf_counter()
    result: dict[str, Any] = {
        "machine": {"device": device, "python": platform.python_version(), "platform": platform.platform(),
                    "cores": os.cpu_count(), "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None},
    }
    if args.only != "drift":
        result.update(run_leaks(model, on_gpu, 1 if args.quick else max(1, args.runs)))
    if args.only != "leak":
        result["drift"] = run_drift(model, device, args.quick)
    result["seconds"] = round(time.perf_counter() - began, 1)
    rows = [*result.get("leak_classes", {}).items(), *([("drift", result["drift"])] if "drift" in result else [])]
    print(f"{'check':<24} {'planted runs':>12} {'detected':>9} {'clean runs':>10} {'clean flagged':>13}",
          file=sys.stderr)
    for name, row in rows:
        if row.get("applies", True):
            print(f"{name:<24} {row['planted_runs']:>12} {row['planted_detected']:>9} {row['clean_runs']:>10} "
                  f"{row['clean_flagged']:>13}", file=sys.stderr)
        else:
            print(f"{name:<24} {'does not apply on ' + device:>47}", file=sys.stderr)
    goal = goal_met({"drift": {"planted_runs": 0, "planted_detected": 0, "clean_flagged": 0}, "leak_classes": {},
                     **result})
    result["goal_met"] = goal
    print(f"goal met: {'yes' if goal else 'NO'} ({result['seconds']} s on {device})", file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    return 0 if goal else 1


if __name__ == "__main__":
    sys.exit(main())
