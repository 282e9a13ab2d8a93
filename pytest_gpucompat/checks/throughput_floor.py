"""The throughput floor: a cell's engine must generate at least the floor's tokens/s on this GPU.

Floors are data, per GPU and engine, in the `throughput_floors` block of matrices/matrices.yaml: the first entry
whose `gpu` glob matches the runner's first GPU name (`cpu` on a runner without one) and that names the cell's
engine gives the floor. Where no entry does, the cell is skipped with that reason rather than passed: a floor
nobody set is no evidence of speed. Opt-in: a suite test of the matrix `throughput_floor` calls `run_floor`; the
shipped suites do not. Its kind (figures, their cell text, limit source, chart) is declared once in
`common.metrics` (`throughput_floor`).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import fnmatch
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import InputError
from ..common.inputs import load_file
from ..common.paths import matrices_dir

FIGURE = "throughput_tokens_per_s"
"""The median tokens/s the floor check measured."""
LIMIT = "throughput_floor_tokens_per_s"
"""The floor it was held to (recorded with the figure, so a report colours it without matrices/)."""
CPU = "cpu"
"""The `gpu` of a floor for a runner without a GPU."""


@dataclass(frozen=True)
class Floor:
    """One entry of the block: a GPU name glob and a floor per engine."""

    gpu: str
    floors: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FloorVerdict:
    """`passed` None: no floor applies (skip with `reason`)."""

    passed: bool | None
    reason: str
    tokens_per_s: float
    floor: float | None


def load_floors(path: str | Path | None = None) -> tuple[Floor, ...]:
    """The `throughput_floors` block of matrices.yaml (the matrices directory's unless `path` is given)."""
    source = Path(path) if path else matrices_dir() / "matrices.yaml"
    data = load_file(source, "yaml") or {}
    block = data.get("throughput_floors", []) if isinstance(data, Mapping) else []
    if not isinstance(block, list):
        raise InputError(str(source), "throughput_floors", "must be a list of {gpu, floors} entries")
    out = []
    for i, entry in enumerate(block):
        where = f"throughput_floors[{i}]"
        if not isinstance(entry, Mapping) or set(map(str, entry)) != {"gpu", "floors"}:
            raise InputError(str(source), where, "must be a mapping with exactly gpu and floors")
        floors = entry["floors"]
        if not isinstance(entry["gpu"], str) or not isinstance(floors, Mapping):
            raise InputError(str(source), where, "gpu must be a name glob and floors a mapping engine -> tokens/s")
        for engine, value in floors.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InputError(str(source), f"{where}.floors.{engine}", f"must be a positive number, got {value!r}")
        out.append(Floor(entry["gpu"], {str(k): float(v) for k, v in floors.items()}))
    return tuple(out)


def floor_for(floors: Sequence[Floor], gpu: str | None, engine: str) -> float | None:
    """The floor of `engine` on the GPU named `gpu` (None: a runner without a GPU), or None where none is set."""
    name = (gpu or CPU).lower()
    for entry in floors:
        if fnmatch.fnmatchcase(name, entry.gpu.lower()) and engine in entry.floors:
            return entry.floors[engine]
    return None


def decide(tokens_per_s: float, floor: float | None, engine: str, gpu: str | None) -> FloorVerdict:
    """Pass at or above the floor, fail below it, no verdict where no floor is set for this GPU and engine."""
    where = f"{engine} on {gpu or 'a runner without a GPU'}"
    if floor is None:
        return FloorVerdict(None, f"no throughput floor for {where} in matrices.yaml (throughput_floors): "
                                  f"measured {tokens_per_s:.4g} tokens/s, judged against nothing", tokens_per_s, None)
    ok = tokens_per_s >= floor
    text = "at least" if ok else "below"
    return FloorVerdict(ok, f"{where}: {tokens_per_s:.4g} tokens/s, {text} its floor of {floor:g}", tokens_per_s,
                        floor)


def measure(engine: Any, prompts: Sequence[Sequence[int]], max_tokens: int, rounds: int) -> float:
    """Median generated tokens/s over `rounds` generations of `prompts`, after one unmeasured warm-up call."""
    engine.generate(list(prompts[:1]), 1, 1)
    rates = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        outputs = engine.generate(list(prompts), max_tokens, 1)
        elapsed = time.perf_counter() - t0
        rates.append(sum(len(o.token_ids) for o in outputs) / elapsed if elapsed > 0 else 0.0)
    return float(statistics.median(rates))


def run_floor(engine: Any, engine_name: str, gpu: str | None, prompts: Sequence[Sequence[int]], *,
              max_tokens: int = 16, rounds: int = 3, floors: Sequence[Floor] | None = None) -> FloorVerdict:
    """Measure the started `engine` and judge it against its floor on this GPU (the kind's `run`)."""
    chosen = load_floors() if floors is None else floors
    return decide(measure(engine, prompts, max_tokens, rounds), floor_for(chosen, gpu, engine_name), engine_name, gpu)


def figures(verdict: FloorVerdict) -> dict[str, float]:
    """What a cell records of the check: the measured figure and, where one applied, its floor."""
    out = {FIGURE: verdict.tokens_per_s}
    if verdict.floor is not None:
        out[LIMIT] = verdict.floor
    return out


def recorded_floor(_key: str, cell: Any) -> tuple[float, str] | None:
    """The limit source `floor`: the floor the cell recorded next to its figure."""
    value = cell.metrics.get(LIMIT)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value), "throughput floor of this GPU"
    return None
