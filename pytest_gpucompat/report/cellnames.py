"""Short names for the cells of a test that tell each apart from its siblings, at any width.

A pytest node id is `path::test[id]`, and the parametrized ids of one test usually share most of their text: cut in
the middle to fit a terminal, two cells of vLLM print as the same line. Here a cell is named by its test and only the
parameters that tell it apart from the other cells of that test (its siblings):

* the engine, then each parameter (and axis) the cell has, leaving out those that every sibling of the same engine
  has with the same value (the harness's `gpu_memory_utilization=0.08` on every vLLM cell tells nothing apart), or
  for the only cell of its engine those that every sibling has;
* where two siblings still read alike (a parameter the record does not keep, e.g. the model): the cell's full
  parameters, then the words of its id that not every sibling has, then the whole id.

Names are words separated by spaces, so a narrow terminal wraps them instead of cutting them. The full node id stays
in `--json` and in the Markdown. Pure functions.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .model import CellRecord


@dataclass(frozen=True)
class CellName:
    """Where a cell belongs and what tells it apart: `file` (`suites/test_smoke.py`), `test` (the function),
    `params` (the words that tell it from its siblings) and `runner` (when cells are matched by runner)."""

    file: str
    test: str
    params: str
    runner: str = ""

    @property
    def line(self) -> str:
        """`test_x · vllm dtype=float16`: the cell on one line, without its file (with its runner first)."""
        text = f"{self.test} · {self.params}" if self.params else self.test
        return f"{self.runner}: {text}" if self.runner else text

    @property
    def full(self) -> str:
        """The line with its file: unique across a report."""
        text = f"{self.file}::{self.test}" if self.file else self.test
        text = f"{text} · {self.params}" if self.params else text
        return f"{self.runner}: {text}" if self.runner else text


def _text(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _pairs(cell: CellRecord) -> list[tuple[str, str]]:
    pairs = [("engine", cell.engine)] if cell.engine else []
    pairs += [(str(k), _text(v)) for k, v in {**cell.params, **cell.axes}.items()]
    return pairs


def _words(pairs: Iterable[tuple[str, str]]) -> str:
    return " ".join(v if k == "engine" else f"{k}={v}" for k, v in pairs)


def _bracket(nodeid: str) -> str:
    head, sep, tail = nodeid.partition("[")
    return tail[:-1] if sep and tail.endswith("]") else ""


def _split(nodeid: str) -> tuple[str, str]:
    """`path::test[id]` -> (`path`, `test`); a node id without `::` has no file."""
    base = nodeid.split("[", 1)[0]
    path, sep, test = base.partition("::")
    return (path, test) if sep else ("", base)


def _name_siblings(cells: Mapping[str, CellRecord]) -> dict[str, str]:
    """The distinguishing words of each cell of one test (module doc)."""
    pairs = {key: _pairs(cell) for key, cell in cells.items()}
    by_engine: dict[str | None, list[str]] = {}
    for key, cell in cells.items():
        by_engine.setdefault(cell.engine, []).append(key)
    names: dict[str, str] = {}
    everyone = set.intersection(*(set(p) for p in pairs.values()))
    for engine_keys in by_engine.values():
        # a lone cell of its engine keeps what tells it from the other engines' cells
        common = set.intersection(*(set(pairs[k]) for k in engine_keys)) if len(engine_keys) > 1 else everyone
        for key in engine_keys:
            names[key] = _words(p for p in pairs[key] if p[0] == "engine" or p not in common)
    for attempt in (lambda k: _words(pairs[k]), _id_words(cells), lambda k: _bracket(cells[k].nodeid) or k):
        seen: dict[str, list[str]] = {}
        for key, name in names.items():
            seen.setdefault(name, []).append(key)
        clashes = [k for ks in seen.values() if len(ks) > 1 for k in ks]
        if not clashes:
            break
        for key in clashes:
            names[key] = attempt(key)
    return names


def _id_words(cells: Mapping[str, CellRecord]) -> _IdWords:
    return _IdWords({key: _bracket(cell.nodeid).split("-") for key, cell in cells.items()})


class _IdWords:
    """The words of a cell's id that not every sibling's id has, joined by '-' as pytest joins them."""

    def __init__(self, words: Mapping[str, list[str]]) -> None:
        self.words = words
        self.common = set.intersection(*(set(w) for w in words.values())) if words else set()

    def __call__(self, key: str) -> str:
        return "-".join(w for w in self.words[key] if w not in self.common)


def cell_names(cells: Mapping[str, CellRecord], by_runner: bool = False) -> dict[str, CellName]:
    """Each key of `cells` (a node id, or `runner: nodeid` with `by_runner`) -> its name among the cells of its test
    (and runner). Siblings are the cells of `cells` of one test: pass every cell the reader will see, both reports'."""
    groups: dict[tuple[str, str, str], dict[str, CellRecord]] = {}
    for key, cell in cells.items():
        path, test = _split(cell.nodeid)
        groups.setdefault((cell.runner if by_runner else "", path, test), {})[key] = cell
    out: dict[str, CellName] = {}
    for (runner, path, test), members in groups.items():
        if len(members) == 1:
            (key,) = members
            out[key] = CellName(path, test, _words(_pairs(members[key])), runner)
            continue
        for key, words in _name_siblings(members).items():
            out[key] = CellName(path, test, words, runner)
    return out
