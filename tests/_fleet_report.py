"""A synthetic fleet report for the HTML tests: 4 runners × 50 test items, every cell state, every chart's data.
`fleet_report(n)` makes a larger fleet of the same kind (the page must stay usable with any number of runners).

Deterministic (a seeded generator). One runner is a what-if run (`what_if` and `host` in its fingerprint), runner
names and parameter values are long, and each test group shares a long model path (it belongs in the group header).
"""

from __future__ import annotations

import random
from typing import Any

from pytest_gpucompat.report.merge import merge_reports
from pytest_gpucompat.report.model import Report

RUNNERS = (
    ("a100-80gb-pcie-ci-runner-eu-west-01", "NVIDIA A100 80GB PCIe", "535.104.05", "0.24.3"),
    ("h100-sxm-ci-runner-us-east-02", "NVIDIA H100 80GB HBM3", "550.54.15", "0.25.1"),
    ("h200-ci-runner-03", "NVIDIA H200", "580.159.04", "0.26.0"),
    ("l40s-what-if-preview-runner-04", "NVIDIA L40S", "570.86.10", "0.26.0"),
)
_MORE_GPUS = (  # (GPU, driver) of the runners after these four, in turn
    ("NVIDIA B200", "580.82.07"), ("NVIDIA H100 PCIe", "550.127.05"), ("NVIDIA A10G", "535.183.01"),
    ("NVIDIA GH200 480GB", "570.133.20"), ("NVIDIA L4", "550.90.07"), ("NVIDIA RTX 6000 Ada Generation", "565.57.01"),
)
WHAT_IF_RUNNER = RUNNERS[3][0]
WHAT_IF_FILE = "fleet/l40s-570-vllm-0.26.yaml"
WHAT_IF_HOST = "ci-cpu-host-7 (no GPU; x86_64, 2 cores, Debian 12)"
MODEL = "/models/meta-llama/Meta-Llama-3.1-8B-Instruct-FP8-dynamic-calibrated-2025-11"
MEMORY_METRICS = ("nvml_process_mib", "nvml_device_used_mib", "torch_reserved_mib", "host_rss_mib")
SMOKE = "suites/test_smoke.py::test_generates_requested_tokens"
DRIFT = "suites/test_precision.py::test_logprobs_close_to_fp32_reference"
EMBED = "suites/test_precision.py::test_embeddings_close_to_fp32_reference"
MEMORY = "suites/test_memory.py::test_create_destroy_cycles_do_not_leak"
LIMITS = {"bfloat16": 0.3, "float16": 0.05, "float32": 0.005}


def _fingerprint(name: str, gpu: str, driver: str, vllm: str) -> dict[str, Any]:
    fp: dict[str, Any] = {
        "schema": 1, "name": name,
        "gpus": [{"index": i, "name": gpu, "architecture": "hopper", "compute_capability": "9.0",
                  "memory_mib": 81559} for i in range(2)],
        "driver": driver, "cuda_driver": "12.8", "cuda_runtime": "12.8",
        "packages": {"torch": "2.9.0+cu128", "vllm": vllm, "sglang": "0.5.16", "transformers": "5.17.0"},
        "params": {}, "reasons": [],
    }
    if name == WHAT_IF_RUNNER:
        fp.update(what_if=WHAT_IF_FILE, host=WHAT_IF_HOST)
    return fp


def _items() -> list[tuple[str, str, dict[str, Any]]]:
    """The 50 test items: (test, engine, params)."""
    items: list[tuple[str, str, dict[str, Any]]] = []
    for engine in ("vllm", "sglang", "hf"):
        for dtype in ("bfloat16", "float16", "float32"):
            for backend in ("FLASHINFER_WITH_TENSOR_CORES_ENABLED", "FLASH_ATTN"):
                if len(items) < 15:
                    items.append((SMOKE, engine, {"model": MODEL, "dtype": dtype, "attention_backend": backend}))
    for engine in ("vllm", "sglang", "hf", "tensorrt-llm"):
        for dtype in ("bfloat16", "float16", "float32"):
            for kv in ("auto", "fp8_e4m3"):
                if len(items) < 39:
                    items.append((DRIFT, engine, {"model": MODEL, "dtype": dtype, "kv_cache_dtype": kv}))
    for engine, dtype in (("vllm", "bfloat16"), ("vllm", "float16"), ("hf", "bfloat16"), ("sglang", "bfloat16"),
                          ("hf", "float32")):
        items.append((EMBED, engine, {"model": MODEL, "dtype": dtype, "task": "embed"}))
    for engine in ("vllm", "sglang", "hf"):
        for util in (0.5, 0.9):
            if len(items) < 50:
                items.append((MEMORY, engine, {"model": MODEL, "gpu_memory_utilization": util,
                                               "enforce_eager": True}))
    assert len(items) == 50
    return items


def _cell(test: str, engine: str, params: dict[str, Any], runner: str, r: random.Random, k: int) -> dict[str, Any]:
    ident = "-".join([engine] + [f"{key}={value}" for key, value in params.items() if key != "model"])
    cell: dict[str, Any] = {"nodeid": f"{test}[{ident}]", "test": test, "engine": engine, "params": params,
                            "outcome": "passed", "runner": runner, "metrics": {}, "duration_s": r.uniform(1, 30)}
    special = k % 17
    if special == 3:
        cell.update(outcome="skipped", reason=f"known bad here: [vllm-fp8-kv-cache-ampere-backend-{k}] FP8 KV cache "
                                              "crashes at start on this GPU (upstream)")
        return cell
    if special == 5:
        cell.update(outcome="skipped", reason="cannot run here: [needs-2-gpus] needs 4 GPUs "
                                              "(tensor_parallel_size=4), 2 visible")
        return cell
    if special == 7:
        cell.update(outcome="skipped", reason="not covered here: vllm 0.27.* (this runner has 0.26.0)")
        return cell
    if special == 9 or engine == "tensorrt-llm":
        cell.update(outcome="skipped", reason=f"{engine} unavailable: {engine} is not importable")
        return cell
    if special == 11:
        cell.update(outcome="xfailed", reason="known bad here: [sglang-wrong-output] wrong output (verified)")
        return cell
    if special == 13:
        cell.update(outcome="error", reason="engine never finished starting", duration_s=600.0)
        return cell
    if special == 15:
        cell.update(outcome="xpassed", reason="[stale-rule] said it fails")
    cell["findings"] = [{"id": "seed-claim-everything-leaks", "severity": "degraded", "confidence": "documents",
                         "summary": "Claimed: every engine leaks", "action": "annotate"}]
    metrics = cell["metrics"]
    metrics["start_s"] = r.uniform(5, 90) if engine != "hf" else r.uniform(0.5, 3)
    if test == SMOKE:
        metrics.update(tokens_per_s=r.uniform(80, 4000), ttft_s=r.uniform(0.004, 0.4))
    elif test == DRIFT:
        limit = 1.0 if params["kv_cache_dtype"] != "auto" else LIMITS[params["dtype"]]
        share = r.choice((0.1, 0.3, 0.6, 0.9, 1.4))
        metrics.update(max_abs_logprob_delta=limit * share, token_agreement=r.uniform(0.75, 1.0))
        if share > 1 and cell["outcome"] == "passed":
            cell.update(outcome="failed", reason=f"drifted: max |delta| {limit * share:.3g} > {limit}")
    elif test == EMBED:
        metrics["min_cosine"] = 1 - r.choice((1e-6, 3e-4, 8e-4, 2e-3))
    else:
        leak = r.choice((0.0, 0.1, 0.4, 2.5))
        base = {"nvml_process_mib": 30000.0, "nvml_device_used_mib": 31000.0, "torch_reserved_mib": 28000.0,
                "host_rss_mib": 2400.0}
        cell["series"] = {m: [0.0 if m != "host_rss_mib" else 900.0] + [b + leak * i + r.uniform(-0.2, 0.2)
                                                                          for i in range(1, 7)]
                          for m, b in base.items()}
        cell["series"]["torch_reserved_mib"][3] = None  # a cycle where the allocator could not be read
        metrics.update(leak_mib_per_cycle=leak, nvml_process_mib_after_last_cycle=base["nvml_process_mib"])
    return cell


def runners(count: int = len(RUNNERS)) -> tuple[tuple[str, str, str, str], ...]:
    """The first `count` runners: the four above, then more with long names of the same kind."""
    more = []
    for n in range(len(RUNNERS), count):
        gpu, driver = _MORE_GPUS[n % len(_MORE_GPUS)]
        slug = gpu.removeprefix("NVIDIA ").split()[0].lower()
        more.append((f"{slug}-ci-runner-{('eu-west', 'us-east', 'ap-south')[n % 3]}-{n + 1:02d}", gpu, driver,
                     ("0.24.3", "0.25.1", "0.26.0")[n % 3]))
    return (RUNNERS + tuple(more))[:count]


def fleet_report(count: int = len(RUNNERS)) -> Report:
    """`count` runners (four by default), 50 test items each, merged as `gpucompat merge` does."""
    reports = []
    for n, (name, gpu, driver, vllm) in enumerate(runners(count)):
        r = random.Random(n)
        cells = [_cell(test, engine, dict(params), name, r, k + 5 * n) for k, (test, engine, params)
                 in enumerate(_items())]
        reports.append(Report.from_run(_fingerprint(name, gpu, driver, vllm), cells, exitstatus=1))
    return merge_reports(reports)
