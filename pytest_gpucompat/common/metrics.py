"""The figures the shipped suites record, defined once, and how a figure measured over rounds is summarized.

`gpucompat diff --fail-on` and `--gpucompat-compare-fail` check threshold names and signs against this registry
(so a misspelt metric is an error, not a gate that silently compares nothing), and `docs/ci.md` carries the table
that `markdown_table()` renders (a test keeps the two equal). Pure: no engine, no clock.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from .checkkinds import (
    Chart,
    CheckKind,
    Display,
    KeyFigure,
    LimitSource,
    Metric,
    declared_charts,
    declared_figures,
    declared_metrics,
    register,
)

SPREAD_SUFFIX = "_spread"


def spread_name(metric: str) -> str:
    """Where the relative spread of a figure measured over rounds is recorded: `tokens_per_s` -> `..._spread`."""
    return metric + SPREAD_SUFFIX


def _with_spread(name: str, better: Literal["higher", "lower"], unit: str, summary: str, floor: float = 0.0,
                 tolerance: float | None = None, display: Display | None = None) -> tuple[Metric, Metric]:
    return (
        Metric(name, better, unit, "smoke", f"{summary}; median of the rounds", floor, tolerance,
               display or Display()),
        Metric(spread_name(name), "lower", "ratio", "smoke", f"(max - min) / median of `{name}` over the rounds"),
    )


def _golden(prefix: str, against: str) -> tuple[Metric, ...]:
    """The precision figures, measured against golden outputs recorded on another runner (checks/golden.py)."""
    gate = DRIFT_TOLERANCE if prefix == "golden_" else None
    shown = Display("golden Δlp ", ".3g") if prefix == "golden_" else Display()  # the one a matrix cell shows
    return (
        Metric(f"{prefix}max_abs_logprob_delta", "lower", "nats", "golden", f"largest logprob difference to {against}",
               DRIFT_FLOOR, gate, shown),
        Metric(f"{prefix}mean_abs_logprob_delta", "lower", "nats", "golden", f"mean logprob difference to {against}",
               DRIFT_FLOOR),
        Metric(f"{prefix}token_agreement", "higher", "fraction", "golden",
               f"greedy tokens equal to those of {against}", AGREEMENT_FLOOR),
        Metric(f"{prefix}logprobs_close", "higher", "0/1", "golden",
               f"1 when every prompt is logprobs-close to {against}"),
        Metric(f"{prefix}first_divergence", "higher", "position", "golden",
               f"earliest generated position where a token differs from {against}"),
    )


THROUGHPUT_TOLERANCE = 0.25
"""tokens/s 25 % lower (TTFT 25 % longer) is a regression by default: between two H200 runs of one unchanged
transformers stack (docs/reports, vLLM 0.25.0 and 0.26.0 serial runs) its cells' tokens/s moved by up to 24 %, beyond
their rounds' own spread, so a tighter default would fail unchanged stacks; `--fail-on tokens_per_s:-10%` tightens it
where runs are steadier."""
DRIFT_FLOOR = 0.05
"""nats: a logprob difference that moved less than this has not moved (bfloat16 alone differs by ~0.01-0.1)."""
DRIFT_TOLERANCE = 0.5
"""A drift figure 50 % (and DRIFT_FLOOR nats) worse than the baseline's is a regression by default."""
AGREEMENT_FLOOR = 0.05
"""A token agreement that moved less than 5 points has not moved (one token of 16 is 6 points)."""

_THRESHOLDS = LimitSource("thresholds", "pytest_gpucompat.report.figures:threshold_limit",
                          "KEY of the cell's dtype in matrices/thresholds.yaml")
register(CheckKind(
    "smoke", "the engine starts and generates what was asked, finite and deterministic; its speed",
    metrics=(
    *_with_spread("tokens_per_s", "higher", "tokens/s", "generated tokens per second, 4 prompts x 16 tokens",
                  tolerance=THROUGHPUT_TOLERANCE, display=Display(style="grouped", suffix=" tok/s")),
    *_with_spread("ttft_s", "lower", "s", "time to the first token of one prompt", floor=0.002,
                  tolerance=THROUGHPUT_TOLERANCE, display=Display("TTFT ", "duration")),
    Metric("rounds", None, "count", "smoke", "measured rounds behind the medians (after one warm-up round)"),
    Metric("generate_s", "lower", "s", "smoke", "seconds of one 4 x 16 token generation; median of the rounds"),
    Metric("repeat_request_s", "lower", "s", "smoke", "seconds per repeat of an identical request"),
    ),
    figures=(KeyFigure("tokens_per_s", "tokens/s", None, 50), KeyFigure("ttft_s", "TTFT", None, 60)),
    charts=(Chart("performance", "per-engine", ("tokens_per_s",), "Throughput and start time per engine version",
                  "Bar: the median over the runner's cells of that engine; whisker: lowest to highest.",
                  labels=("tokens/s",), rank=30),),
))
register(CheckKind(
    "drift", "logprobs and greedy tokens against the float32 reference",
    run="pytest_gpucompat.checks.compare:verdict_drift",
    metrics=(
    Metric("max_abs_logprob_delta", "lower", "nats", "precision", "largest logprob difference to the reference",
           DRIFT_FLOOR, DRIFT_TOLERANCE, Display("Δlp ", ".3g")),
    Metric("mean_abs_logprob_delta", "lower", "nats", "precision", "mean logprob difference to the reference",
           DRIFT_FLOOR),
    Metric("token_agreement", "higher", "fraction", "precision", "greedy tokens equal to the reference's",
           AGREEMENT_FLOOR, 0.0, Display("agree ", ".0f", 100, " %")),
    Metric("logprobs_close", "higher", "0/1", "precision", "1 when every prompt is logprobs-close"),
    Metric("attention_backend_known", None, "0/1", "precision", "1 when the engine said its attention backend"),
    ),
    figures=(KeyFigure("max_abs_logprob_delta", "max |Δlogprob|", "thresholds:max_abs_logprob_delta", 10),
             KeyFigure("token_agreement", "token agreement", "thresholds:min_token_agreement", 20)),
    limits=(_THRESHOLDS,),
    charts=(Chart("drift", "against-limit", ("max_abs_logprob_delta", "token_agreement"),
                  "Precision drift against the limit",
                  "Each dot is one runner's cell; right of the red line is over the dtype's limit "
                  "(matrices/thresholds.yaml).",
                  "share of the dtype's limit used (max |Δlogprob|, or 1 − cosine against 1 − the minimum cosine)",
                  rank=10),),
))
register(CheckKind(
    "golden", "outputs against golden outputs recorded on another runner", run="pytest_gpucompat.checks.golden:judge",
    metrics=(
    *_golden("golden_", "the golden reference (--gpucompat-golden)"),
    *_golden("golden_cell_", "the same cell in the golden file"),
    *_golden("outputs_", "the same cell's outputs on the other runner or in the baseline (report/cross.py)"),
    ),
    figures=(KeyFigure("golden_max_abs_logprob_delta", "golden max |Δlogprob|", "thresholds:max_abs_logprob_delta",
                       30),),
    charts=(Chart("drift", "against-limit", ("golden_max_abs_logprob_delta",), rank=10),),
))
register(CheckKind(
    "embedding", "embeddings against the float32 reference", run="pytest_gpucompat.checks.compare:verdict_embeddings",
    metrics=(
    Metric("min_cosine", "higher", "cosine", "precision", "lowest embedding cosine with the reference", 0.001,
           0.0, Display("cos ", "near-one")),
    ),
    figures=(KeyFigure("min_cosine", "cosine", "thresholds:min_cosine", 40),),
    charts=(Chart("drift", "against-limit", ("min_cosine",), rank=10),),
))
register(CheckKind(
    "leak", "memory and processes across engine create/destroy cycles",
    run="pytest_gpucompat.checks.leaks:memory_verdict",
    metrics=(
    Metric("leak_mib_per_cycle", "lower", "MiB/cycle", "memory",
           "steady memory growth per engine create/destroy, of the signal nearest its limit", 1.0, 0.0,
           Display(style="+.2g", suffix=" MiB/cycle")),
    Metric("leak_limit_mib_per_cycle", None, "MiB/cycle", "memory", "the limit of that signal"),
    Metric("leaked_processes_per_cycle", "lower", "processes/cycle", "memory",
           "processes the engine started and left running, per cycle"),
    Metric("device_leak_mib_per_cycle", "lower", "MiB/cycle", "memory",
           "whole-GPU memory growth per cycle (a cross-check: other processes move it)"),
    Metric("cycles", None, "count", "memory", "create/destroy cycles measured"),
    Metric("cycle_s", "lower", "s", "memory", "seconds per create/destroy cycle"),
    Metric("nvml_process_mib_after_last_cycle", "lower", "MiB", "memory",
           "GPU memory of the engine's processes, helpers left running included"),
    Metric("torch_allocated_mib_after_last_cycle", "lower", "MiB", "memory", "live tensors in torch's allocator"),
    Metric("started_processes_after_last_cycle", "lower", "count", "memory",
           "processes the engine started that still ran after the last cycle"),
    Metric("torch_reserved_mib_after_last_cycle", "lower", "MiB", "memory", "memory torch's allocator holds"),
    Metric("host_rss_mib_after_last_cycle", "lower", "MiB", "memory", "resident host memory"),
    Metric("device_used_before_mib", None, "MiB", "memory", "GPU memory in use before the engine started"),
    Metric("process_mib_while_up", "lower", "MiB", "memory", "GPU memory of the engine while it is up"),
    Metric("device_left_behind_mib", "lower", "MiB", "memory",
           "GPU memory still held after shutdown by the engine's processes or by no live process"),
    Metric("others_growth_mib", None, "MiB", "memory",
           "growth of GPU memory held by other processes meanwhile (not blamed)"),
    ),
    figures=(KeyFigure("leak_mib_per_cycle", "leak", "leak", 70),),
    limits=(LimitSource("leak", "pytest_gpucompat.report.figures:leak_limit", "the memory suite's leak tolerance"),),
    charts=(Chart("memory", "per-cycle",
                  ("nvml_process_mib", "nvml_device_used_mib", "torch_reserved_mib", "host_rss_mib"),
                  "Memory per create/destroy cycle",
                  "One line per cell and runner, from cycle 1 (after the warm-up cycle; cycle 0 is before the first "
                  "engine). A leak is a line that keeps climbing; hover a point for its MiB.", unit="MiB", rank=20),),
))
register(CheckKind(
    "harness", "what the harness measures of every cell",
    metrics=(
    Metric("start_s", "lower", "s", "harness", "seconds the engine took to start"),
    Metric("engine_s", "lower", "s", "harness", "seconds spent inside engines for the cell"),
    Metric("reference_s", "lower", "s", "harness", "seconds spent in the float32 reference for the cell"),
    Metric("measured_under_sharing", None, "0/1", "harness",
           "1 when other engines of the run were live on the cell's GPU meanwhile (--gpucompat-workers-per-gpu): "
           "its timings are not those of a GPU of its own"),
    Metric("compile_wait_s", None, "s", "harness",
           "seconds the cell's starts waited for another worker's first start of the same configuration to fill "
           "its compile caches (--gpucompat-workers-per-gpu; compile_caches says which)"),
    ),
    charts=(Chart("performance", "per-engine", ("start_s",), labels=("engine start, s",), rank=31),),
))

register(CheckKind(
    "throughput_floor", "generated tokens/s at least the floor matrices.yaml sets for this GPU and engine (opt-in)",
    run="pytest_gpucompat.checks.throughput_floor:run_floor",
    metrics=(
        Metric("throughput_tokens_per_s", "higher", "tokens/s", "throughput_floor",
               "generated tokens per second under the throughput floor; median of the rounds",
               tolerance=THROUGHPUT_TOLERANCE, display=Display(style="grouped", suffix=" tok/s")),
        Metric("throughput_floor_tokens_per_s", None, "tokens/s", "throughput_floor",
               "the floor of this GPU and engine that figure was held to"),
    ),
    figures=(KeyFigure("throughput_tokens_per_s", "tokens/s floor", "floor", 55),),
    limits=(LimitSource("floor", "pytest_gpucompat.checks.throughput_floor:recorded_floor",
                        "the floor the cell recorded (matrices.yaml throughput_floors)"),),
    charts=(Chart("throughput-floor", "against-limit", ("throughput_tokens_per_s",), "Throughput against its floor",
                  "Each dot is one runner's cell; right of the red line is below the floor of its GPU and engine "
                  "(matrices.yaml throughput_floors).",
                  "share of the cell's tokens/s its floor takes (floor ÷ tokens/s: 1 is at the floor)", rank=40),),
))

#: Every recorded figure, from the kinds of check declared above (common.checkkinds): name -> Metric.
METRICS: dict[str, Metric] = declared_metrics()

#: In the order a cell shows them; a cell shows those it recorded (the suite decides which: see METRICS).
KEY_FIGURES: tuple[KeyFigure, ...] = declared_figures()

#: The HTML report's charts, in their order, each merged from the kinds that show a figure in it.
CHARTS: tuple[Chart, ...] = declared_charts()


def spread(values: Sequence[float]) -> float:
    """(max - min) / |median|: how far apart the rounds were, as a fraction of the figure.

    The whole range rather than an IQR: with 5 rounds an IQR rests on two or three samples, and the range is the
    conservative reading of "within noise". 0.0 for one round or identical rounds; inf when the median is 0 and the
    rounds differ (the report stores that as null).
    """
    if not values:
        raise ValueError("no rounds to summarize")
    width = max(values) - min(values)
    middle = abs(statistics.median(values))
    if width == 0:
        return 0.0
    return width / middle if middle else math.inf


def round_metrics(name: str, values: Sequence[float]) -> dict[str, float]:
    """The figures to record for a measurement repeated over rounds: its median and its spread."""
    return {name: float(statistics.median(values)), spread_name(name): spread(values)}


def gate_text(metric: Metric) -> str:
    """`worse by > 10 %`, `worse by > 0.05 nats and 50 %`: the default regression of `gpucompat diff`, in words."""
    if metric.tolerance is None or metric.better is None:
        return "—"
    parts = [f"{metric.tolerance * 100:g} %"] if metric.tolerance else []
    if metric.floor:
        parts.insert(0, f"{metric.floor:g} {metric.unit}")
    return "worse by > " + " and ".join(parts or ["0"])


def markdown_table() -> str:
    """The registry as the Markdown table in docs/ci.md."""
    rows = ["| metric | better | unit | suite | regression by default | what |", "|---|---|---|---|---|---|"]
    rows += [
        f"| `{m.name}` | {m.better or '—'} | {m.unit} | {m.suite} | {gate_text(m)} | {m.summary} |"
        for m in METRICS.values()
    ]
    return "\n".join(rows) + "\n"
