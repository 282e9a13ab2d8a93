"""A cell's first payload, taken as data by the report writer of the same process (``session.payload.taken_cell``),
is what decoding its JSON text gives: the same keys in the same order, equal values of the same types, in containers
of its own; any payload the shortcut cannot vouch for, and any text it did not just make, is decoded."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest
from _data import same

from pytest_gpucompat.kb.verdicts import Finding
from pytest_gpucompat.session import payload
from pytest_gpucompat.session.state import LiveCell
from pytest_gpucompat.workload.matrix import MatrixCell

FINDING = Finding(id="r-fallback", severity="degraded", confidence="upstream", failure="fallback", engine=None,
                  summary="falls back", workaround=None, symptom=None, note=None, claims=("c1",),
                  sources=(("code", "x"),), action="annotate")


class Text(str):
    pass


PARAMS: list[dict[str, Any]] = [
    {"a": 3, "b": 17},
    {},
    {"x": 1.5, "y": None, "z": True, "w": "ü", "big": 10**30, "neg": -0.0},
    {"nan": float("nan"), "inf": -math.inf},
    {"s": "\ud800 lone", "q": 'quote " and \\ and \n'},
    {"nested": [1, 2]},  # not flat: decoded
    {"t": (1, 2)},  # a tuple becomes a list: decoded
    {"d": {"k": 1}},
    {"sub": Text("text")},  # a str subclass
    {"flag": 1, "other": False},
]


def new_cell(text: str | None, nodeid: str = "t.py::test[x]", worker: str | None = None) -> dict[str, Any]:
    return payload.new_cell(nodeid, worker, json.loads(text or ""))


@pytest.mark.parametrize("params", PARAMS, ids=str)
@pytest.mark.parametrize("findings", [(), (FINDING,)], ids=["plain", "finding"])
@pytest.mark.parametrize("gpu", [None, "0,1"])
@pytest.mark.parametrize("runner", ["bench", None, ""])
@pytest.mark.parametrize("axes", [{}, {"gpu": "h100"}])
@pytest.mark.parametrize("engine", ["hf", "", None])
def test_taken_cell_is_the_decoded_payloads(params: dict[str, Any], findings: tuple[Finding, ...], gpu: str | None,
                                            runner: str | None, axes: dict[str, str], engine: Any,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    if gpu is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", gpu)
    cs = LiveCell(cell=MatrixCell(engine=engine, params=params, axes=axes), findings=findings)
    fixed = payload.fixed_part(cs)
    assert payload.fixed_text(cs) == json.dumps(fixed, default=str)[1:-1]  # the flat cell's text is the same
    text = cs.payload_for("setup", True, runner)
    assert text is not None
    worker = "gw0" if runner else None
    cell = payload.taken_cell(text, "t.py::test[x]", worker)
    flat = not findings and all(type(v) in (str, int, float, bool, type(None)) for v in params.values())
    assert (cell is not None) == flat
    if cell is not None:
        assert same(cell, new_cell(text, worker=worker))
        assert payload.taken_cell(text, "t.py::test[x]", worker) is None  # taken once


def test_taken_cell_shares_nothing_with_the_cell() -> None:
    params = {"a": 1}
    cs = LiveCell(cell=MatrixCell(engine="hf", params=params, axes={"gpu": "h100"}))
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    try:
        text = cs.payload_for("setup", True, "bench")
        cell = payload.taken_cell(text, "t.py::test[x]", None)
        assert cell is not None
        cell["params"]["a"] = 2
        cell["axes"]["gpu"] = "a100"
        cell["extra"]["k"] = 1
        assert params == {"a": 1} and cs.cell.params == {"a": 1} and cs.cell.axes == {"gpu": "h100"}
        again = LiveCell(cell=MatrixCell(engine="hf", params={"a": 1})).payload_for("setup", True, "bench")
        assert same(payload.taken_cell(again, "n", None), new_cell(again, "n"))  # the shared parts are untouched
    finally:
        del os.environ["CUDA_VISIBLE_DEVICES"]


def test_only_the_very_text_made_last_is_taken() -> None:
    first = LiveCell(cell=MatrixCell(engine="hf", params={"a": 1})).payload_for("setup", True, "bench")
    second = LiveCell(cell=MatrixCell(engine="hf", params={"a": 2})).payload_for("setup", True, "bench")
    assert first is not None and second is not None
    assert payload.taken_cell(first, "n", None) is None  # replaced by the later one
    assert payload.taken_cell("".join(list(second)), "n", None) is None  # equal text, another object: decoded
    assert payload.taken_cell(None, "n", None) is None
    assert payload.taken_cell(second, "n", None) is not None


def test_later_phases_and_measured_cells_are_decoded() -> None:
    cs = LiveCell(cell=MatrixCell(engine="hf", params={"a": 1}))
    payload.taken_cell(cs.payload_for("setup", True, "bench"), "n", None)
    cs.metrics["tokens_per_s"] = 3.0
    call = cs.payload_for("call", True, "bench")
    assert call is not None and payload.taken_cell(call, "n", None) is None
    measured = LiveCell(cell=MatrixCell(engine="hf", params={"a": 1}), notes={"prompts": ["p"]})
    assert payload.taken_cell(measured.payload_for("setup", True, "bench"), "n", None) is None
    failed = LiveCell(cell=MatrixCell(engine="hf", params={"a": 1}), engine_failed=True)
    assert payload.taken_cell(failed.payload_for("setup", False, "bench"), "n", None) is None


def test_the_visible_gpus_are_read_as_each_cell_s_setup_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CUDA_VISIBLE_DEVICES`` as the cell's setup ended (its engine has started by then) is the record's gpu: set,
    unset, changed by the test after its setup (the same GPUs as before), and read again by a re-run's setup."""
    cs = LiveCell(cell=MatrixCell(engine="hf", params={"a": 1}))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-é,1")
    assert payload.visible_gpus() == "GPU-é,1"
    assert payload.live_part(cs, "bench", "GPU-é,1")["extra"] == {"gpu": "GPU-é,1"}
    assert json.loads("{" + payload.live_text(cs, "bench", "GPU-é,1"))["extra"] == {"gpu": "GPU-é,1"}
    assert payload.live_part(cs, "bench", None)["extra"] == {}
    assert json.loads("{" + payload.live_text(cs, "bench", None))["extra"] == {}

    def gpu(sent: str | None) -> Any:
        assert sent is not None
        return json.loads(sent)["extra"].get("gpu")

    assert gpu(cs.payload_for("setup", True, "bench")) == "GPU-é,1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # the test changes it: its engine runs where it started
    assert cs.payload_for("call", True, "bench") is None  # nothing new to say
    assert gpu(cs.payload_for("call", False, "bench")) == "GPU-é,1"
    assert gpu(cs.payload_for("teardown", False, "bench")) == "GPU-é,1"
    assert gpu(cs.payload_for("setup", True, "bench")) == "7"  # a re-run's setup
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert payload.visible_gpus() is None
    assert gpu(cs.payload_for("teardown", False, "bench")) == "7"
    assert gpu(cs.payload_for("setup", True, "bench")) is None
    assert payload.build(cs, "bench")["extra"] == {}  # a cell stopped in its setup, or collected: read now
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert payload.build(cs, "bench")["extra"] == {"gpu": "2"}

