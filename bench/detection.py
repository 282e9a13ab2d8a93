"""Detection power of the memory and precision checks, measured against planted faults and clean controls.

    python bench/detection.py [--json] [--quick]

Leaks: create -> generate -> destroy cycles of the transformers engine in a child process (the suites' own
``create_destroy_cycles``), with a planted leak of N MiB per cycle (host memory on a CPU machine, CUDA memory
through the torch allocator on a GPU) or nothing planted; judged by the suites' ``leak_verdict`` on the metric
the suite uses there. Drift: greedy generations of a copy of the tiny model whose weights got relative noise
(``build_perturbed_model``) against the float32 reference, or of the clean model on other prompts, judged by
``verdict_drift`` with the float32 thresholds of matrices/thresholds.yaml.
Goal: every planted leak of >= 1 MiB/cycle and every perturbation of >= 1e-3 detected; no clean run flagged.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any

from pytest_gpucompat.checks.compare import compare_generations, thresholds_for, verdict_drift
from pytest_gpucompat.checks.cycles import create_destroy_cycles
from pytest_gpucompat.checks.memory import MemorySample, leak_verdict
from pytest_gpucompat.engines import create
from pytest_gpucompat.engines.base import EngineSpec
from pytest_gpucompat.engines.isolation import run_in_child
from pytest_gpucompat.models import build_perturbed_model, build_tiny_model, fixed_prompts, model_vocab_size

MIB = 1024 * 1024
_HELD: list[Any] = []


def _cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


class _Plant:
    """Leaks `mib` MiB per cycle on purpose: a bytearray (host) or a CUDA tensor (GPU), kept alive."""

    def __init__(self, mib: float, on_gpu: bool) -> None:
        self.mib, self.on_gpu = mib, on_gpu

    def __call__(self, cycle: int) -> None:
        if self.mib <= 0:
            return
        size = int(self.mib * MIB)
        if self.on_gpu:
            import torch

            _HELD.append(torch.ones(size // 4, dtype=torch.float32, device="cuda"))
        else:
            block = bytearray(size)
            block[::4096] = b"\x01" * len(block[::4096])  # touch every page so it counts in RSS
            _HELD.append(block)


def leak_run(model: str, mib: float, cycles: int, on_gpu: bool) -> list[dict[str, Any]]:
    spec = EngineSpec("hf", model, {"dtype": "float32", "device": "cuda" if on_gpu else "cpu"})
    prompts = fixed_prompts(2, 12, model_vocab_size(model), seed=5)
    return create_destroy_cycles(spec, cycles, prompts, 8, on_cycle=_Plant(mib, on_gpu))


def judge_leak(rows: list[dict[str, Any]], on_gpu: bool) -> tuple[bool, float | None]:
    fields = set(MemorySample.__dataclass_fields__)
    samples = [MemorySample(**{k: v for k, v in r.items() if k in fields}) for r in rows]
    metrics = ("torch_allocated_mib", "nvml_process_mib") if on_gpu else ("host_rss_mib",)
    verdicts = [leak_verdict(samples, m, warmup=1) for m in metrics]
    leaked = any(v.leaked for v in verdicts)
    return leaked, verdicts[0].slope_mib_per_cycle


def generations(model: str, device: str, seed: int) -> list[Any]:
    engine = create("hf")
    engine.start(EngineSpec("hf", model, {"dtype": "float32", "device": device}))
    try:
        prompts = fixed_prompts(8, 16, model_vocab_size(model), seed=seed)
        return engine.generate(prompts, 16, 5)
    finally:
        engine.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the JSON result last")
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke check of the benchmark)")
    args = parser.parse_args(argv)
    on_gpu = _cuda()
    device = "cuda" if on_gpu else "cpu"
    model = str(build_tiny_model())
    began = time.perf_counter()

    sizes = [0.5, 1.0, 2.0, 4.0] if not args.quick else [1.0]
    repeats = 3 if not args.quick else 1
    clean_leak_runs = 6 if not args.quick else 2
    cycles = 8 if not args.quick else 5
    leak_rows = []
    for mib in [*(s for s in sizes for _ in range(repeats)), *([0.0] * clean_leak_runs)]:
        rows = run_in_child(leak_run, model, mib, cycles, on_gpu, timeout_s=600)
        leaked, slope = judge_leak(rows, on_gpu)
        leak_rows.append({"planted_mib_per_cycle": mib, "detected": leaked, "slope_mib_per_cycle": slope})
        print(f"leak  planted {mib:>4} MiB/cycle  slope {slope if slope is not None else float('nan'):+.3f}  "
              f"{'FLAGGED' if leaked else 'clean'}", file=sys.stderr)

    thresholds = thresholds_for("float32")
    reference = {seed: generations(model, device, seed) for seed in range(10, 15 if not args.quick else 11)}
    noises = [1e-3, 3e-3, 1e-2] if not args.quick else [1e-3]
    drift_rows = []
    for noise in noises:
        for k, seed in enumerate(reference):
            bad = str(build_perturbed_model(model, noise, seed=k + 1))
            ok, message = verdict_drift(compare_generations(reference[seed], generations(bad, device, seed), 5),
                                        thresholds)
            drift_rows.append({"planted_rel_noise": noise, "detected": not ok, "message": message})
    for seed in reference:  # clean controls: the same model again, other prompts
        ok, message = verdict_drift(compare_generations(reference[seed], generations(model, device, seed), 5),
                                    thresholds)
        drift_rows.append({"planted_rel_noise": 0.0, "detected": not ok, "message": message})

    gate = 1.0
    planted = [r for r in leak_rows if r["planted_mib_per_cycle"] >= gate]
    detected_sizes = [r["planted_mib_per_cycle"] for r in leak_rows if r["planted_mib_per_cycle"] > 0 and r["detected"]]
    result = {
        "machine": {"device": device, "python": platform.python_version(), "platform": platform.platform()},
        "leak": {
            "planted_runs": len(planted),
            "planted_detected": sum(r["detected"] for r in planted),
            "clean_runs": sum(1 for r in leak_rows if r["planted_mib_per_cycle"] == 0),
            "clean_flagged": sum(1 for r in leak_rows if r["planted_mib_per_cycle"] == 0 and r["detected"]),
            "smallest_detected_mib_per_cycle": min(detected_sizes) if detected_sizes else None,
            "below_goal_runs": [r for r in leak_rows if 0 < r["planted_mib_per_cycle"] < gate],
            "cycles_per_run": cycles,
        },
        "drift": {
            "planted_runs": sum(1 for r in drift_rows if r["planted_rel_noise"] > 0),
            "planted_detected": sum(1 for r in drift_rows if r["planted_rel_noise"] > 0 and r["detected"]),
            "clean_runs": sum(1 for r in drift_rows if r["planted_rel_noise"] == 0),
            "clean_flagged": sum(1 for r in drift_rows if r["planted_rel_noise"] == 0 and r["detected"]),
            "smallest_planted_rel_noise": min(noises),
        },
        "seconds": round(time.perf_counter() - began, 1),
    }
    leak, drift = result["leak"], result["drift"]
    print(f"{'check':<6} {'planted runs':>12} {'detected':>9} {'clean runs':>10} {'clean flagged':>13}")
    for name, row in (("leak", leak), ("drift", drift)):
        print(f"{name:<6} {row['planted_runs']:>12} {row['planted_detected']:>9} {row['clean_runs']:>10} "
              f"{row['clean_flagged']:>13}")
    print(f"smallest leak detected: {leak['smallest_detected_mib_per_cycle']} MiB/cycle on {device}; "
          f"smallest perturbation planted: {drift['smallest_planted_rel_noise']:g}")
    goal = (leak["planted_detected"] == leak["planted_runs"] and leak["clean_flagged"] == 0
            and drift["planted_detected"] == drift["planted_runs"] and drift["clean_flagged"] == 0)
    print(f"goal met: {'yes' if goal else 'NO'}")
    if args.json:
        print(json.dumps(result))
    return 0 if goal else 1


if __name__ == "__main__":
    sys.exit(main())
