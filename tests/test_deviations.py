"""Every setting an adapter gives its engine is one the cell records as a deviation from the engine's defaults."""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.catalog import registry
from pytest_gpucompat.catalog.base import EngineFailed, EngineSpec
from pytest_gpucompat.engines import create
from pytest_gpucompat.engines.deviations import (
    Deviation,
    apply_engine_defaults,
    deviations,
    harness_environment,
    harness_settings,
)
from pytest_gpucompat.report.model import CellRecord, deviation_groups
from pytest_gpucompat.report.validate import InvalidField, check_report_dict


class _Refused(Exception):
    pass


def _fake_modules(monkeypatch: pytest.MonkeyPatch, modules: dict[str, dict[str, Any]]) -> None:
    for name, attrs in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Stand-in vllm and sglang packages whose constructors record the keywords they were given, then refuse."""
    seen: dict[str, Any] = {}

    def llm(**kwargs: Any) -> None:
        seen["vllm"] = kwargs
        raise _Refused("stand-in")

    def engine(**kwargs: Any) -> None:
        seen["sglang"] = kwargs
        raise _Refused("stand-in")

    _fake_modules(monkeypatch, {
        "vllm": {"LLM": lambda model, **kw: llm(**kw), "__version__": "0.0-standin"},
        "sglang": {"__version__": "0.0-standin"},
        "sglang.srt": {}, "sglang.srt.entrypoints": {},
        "sglang.srt.entrypoints.engine": {"Engine": lambda model_path, **kw: engine(**kw)},
    })
    before = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    yield seen
    after = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    assert after == before, "an adapter changed the environment"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("params", [{}, {"dtype": "bfloat16", "enforce_eager": True},
                                    {"gpu_memory_utilization": 0.5, "mem_fraction_static": 0.5, "seed": 3}])
def test_what_the_adapter_passes_is_what_the_cell_records(captured: dict[str, Any], engine: str,
                                                          params: dict[str, Any]) -> None:
    with pytest.raises(EngineFailed, match="stand-in"):
        create(engine).start(EngineSpec(engine, "/model", params))
    passed = captured[engine]
    recorded = {d.name: d.value for d in deviations(engine, params)}
    assert set(passed) == set(recorded), "a setting the report would not show, or one it shows but never passed"
    for name, value in passed.items():
        expected = "bfloat16" if name == "dtype" else recorded[name]
        assert value == expected, name


def test_the_shipped_engines_declare_no_environment_and_only_reasoned_defaults() -> None:
    for d in registry.descriptors():
        assert dict(d.harness_env) == {}, d.name  # an engine runs with the environment as the user set it
        for name, default in d.harness_defaults.items():
            assert default.why.strip(), f"{d.name}.{name} has no reason"
        if d.server is not None:
            assert dict(d.server.env_defaults) == {}, d.name
            assert "enforce_eager" not in d.server.defaults


def test_sources_of_deviations() -> None:
    found = deviations("vllm", {"dtype": "bfloat16", "env": {"VLLM_ATTENTION_BACKEND": "FLASHINFER"},
                                "start_timeout_s": 60})
    by_name = {d.name: d for d in found}
    assert by_name["dtype"].by == "cell"
    assert by_name["gpu_memory_utilization"].by == "harness" and "share the GPU" in (by_name[
        "gpu_memory_utilization"].why or "")
    assert by_name["VLLM_ATTENTION_BACKEND"].by == "environment"
    assert "start_timeout_s" not in by_name and "env" not in by_name  # harness keys are not engine settings
    # a cell that sets the harness's setting itself: one entry, the cell's
    found = deviations("vllm", {"gpu_memory_utilization": 0.5})
    assert [(d.name, d.by) for d in found if d.name == "gpu_memory_utilization"] == [
        ("gpu_memory_utilization", "cell")]


def test_an_openai_cell_records_its_servers_settings_and_never_its_key() -> None:
    found = {d.name: d for d in deviations("openai", {"server": "sglang", "api_key": "s3cret", "dtype": "bf16"})}
    assert found["mem_fraction_static"].by == "harness" and found["dtype"].by == "cell"
    assert "api_key" not in found and "server" not in found
    assert {d.name for d in deviations("openai", {"endpoint": "http://127.0.0.1:1"})} == set()  # not started here


def test_declared_environment_is_recorded_and_never_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    vllm = registry.descriptor("vllm")
    assert vllm is not None
    declared = registry.HarnessDefault("1", "a reason")
    monkeypatch.setattr(registry, "_REGISTRY", {**registry._REGISTRY, "vllm": registry.EngineDescriptor(
        **{**vllm.__dict__, "harness_env": {"VLLM_SOMETHING": declared}})})
    assert harness_environment("vllm", {}, {}) == {"VLLM_SOMETHING": "1"}
    assert harness_environment("vllm", {}, {"VLLM_SOMETHING": "0"}) == {}  # the user's environment wins
    assert harness_environment("vllm", {"env": {"VLLM_SOMETHING": "2"}}, {}) == {}  # so does the cell's
    assert [(d.name, d.by, d.why) for d in deviations("vllm", {}, {}) if d.by == "environment"] == [
        ("VLLM_SOMETHING", "environment", "a reason")]


def test_settle_keeps_the_engines_default_and_drops_equal_settings() -> None:
    found = (Deviation("seed", 0, "harness", "fixed"), Deviation("enforce_eager", True, "cell"),
             Deviation("gpu_memory_utilization", 0.2, "harness", "room"), Deviation("block_size", 16, "cell"))
    settled = apply_engine_defaults(found, {"seed": 0, "enforce_eager": False, "gpu_memory_utilization": 0.9})
    assert [d.to_dict() for d in settled] == [
        {"name": "enforce_eager", "value": True, "by": "cell", "engine_default": False},
        {"name": "gpu_memory_utilization", "value": 0.2, "by": "harness", "why": "room", "engine_default": 0.9},
        {"name": "block_size", "value": 16, "by": "cell"},
    ]


def test_harness_settings_yield_to_the_cell() -> None:
    assert harness_settings("vllm", {}) == {"gpu_memory_utilization": 0.2, "seed": 0}
    assert harness_settings("vllm", {"seed": 7}) == {"gpu_memory_utilization": 0.2}
    assert harness_settings("pkg.mod:Factory", {}) == {}


def _cell(deviations_: list[dict[str, Any]], engine: str = "vllm", outcome: str = "passed") -> dict[str, Any]:
    return {"nodeid": f"t.py::test[{engine}-{len(deviations_)}]", "outcome": outcome, "engine": engine,
            "runner": "r", "deviations": deviations_}


def test_the_record_round_trips_and_groups() -> None:
    entry = {"name": "enforce_eager", "value": True, "by": "cell", "engine_default": False}
    cell = CellRecord.from_dict(_cell([entry]))
    assert cell.deviations == (entry,) and cell.to_dict()["deviations"] == [entry]
    assert cell.deviations_text() == "enforce_eager=True (cell; engine default False)"
    assert "deviations" not in CellRecord.from_dict(_cell([])).to_dict()
    groups = deviation_groups([cell, CellRecord.from_dict({**_cell([entry]), "nodeid": "x"}),
                               CellRecord.from_dict(_cell([entry], outcome="skipped"))])
    assert groups == [("vllm", "enforce_eager=True (cell; engine default False)", 2)]  # a skipped cell ran nothing


def _report(cells: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema_version": 1, "created": "2026-01-01T00:00:00Z", "tool_version": "0", "runners": {"r": {}},
            "cells": cells}


@pytest.mark.parametrize("bad, field", [
    ("x", "$.cells[0].deviations"),
    (["x"], "$.cells[0].deviations[0]"),
    ([{"value": 1, "by": "cell"}], "$.cells[0].deviations[0].name"),
    ([{"name": "a", "by": "someone"}], "$.cells[0].deviations[0].by"),
])
def test_a_bad_deviation_is_named(bad: Any, field: str) -> None:
    with pytest.raises(InvalidField) as info:
        check_report_dict(_report([_cell(bad)]))
    assert info.value.path == field


def test_every_rendering_shows_them(tmp_path: Path) -> None:
    from pytest_gpucompat.report.html import render_html
    from pytest_gpucompat.report.junit import render_junit
    from pytest_gpucompat.report.markdown import render_markdown
    from pytest_gpucompat.report.model import Report

    entry = {"name": "gpu_memory_utilization", "value": 0.2, "by": "harness", "why": "room",
             "engine_default": 0.9}
    report = Report.from_dict(_report([_cell([entry])]))
    assert "gpu_memory_utilization=0.2 (harness; engine default 0.9)" in render_markdown(report)
    html = render_html(report)
    section = html.index('id="deviations"')
    assert section < html.index('id="runners"')
    row = html[section:].split("</tr>")[1]  # the table's first row after its head: setting, value, default, why
    assert all(f">{text}<" in row for text in ("gpu_memory_utilization", "0.2", "harness", "0.9", "room"))
    assert 'name="deviation.gpu_memory_utilization" value="0.2 (harness; engine default 0.9)"' in render_junit(report)
    json.dumps(report.to_dict())  # still plain JSON


SUITE = '''
import pytest

@pytest.mark.gpucompat(engine="hf", params={"dtype": ["bfloat16", "no-such-dtype"]})
def test_generates(gpucompat_cell, gpucompat_engine):
    out = gpucompat_engine.engine.generate([[5, 6, 7]], max_tokens=2, top_n=2)
    assert len(out[0].token_ids) == 2
'''


def test_a_run_records_them_for_cells_that_start_and_for_cells_that_cannot(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_dev=SUITE)
    result = pytester.runpytest_subprocess("--gpucompat", "--gpucompat-report", "r.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    cells = {c["params"]["dtype"]: c for c in json.loads((pytester.path / "r.json").read_text())["cells"]}
    assert cells["bfloat16"]["deviations"] == [{"name": "dtype", "value": "bfloat16", "by": "cell"}]
    assert cells["no-such-dtype"]["outcome"] == "skipped"  # the engine refused it: recorded before the start
    assert cells["no-such-dtype"]["deviations"] == [{"name": "dtype", "value": "no-such-dtype", "by": "cell"}]


RULE_ON_SHAPE = '''
rules:
  - id: head-128-breaks
    summary: "Planted: any engine with a head size 128 model crashes."
    severity: broken
    failure: crash
    when:
      model_shape: {head_size: [128], architecture: [Qwen2ForCausalLM]}
    confidence: upstream
    sources: [{kind: doc, ref: "planted"}]
'''


def test_rules_on_the_model_shape_judge_the_cells_model_before_it_is_built(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", rules=RULE_ON_SHAPE)
    pytester.makepyfile(test_shape='''
import pytest

@pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
def test_cell(gpucompat_cell, gpucompat_model):
    assert gpucompat_model.is_dir()
''')
    result = pytester.runpytest_subprocess(
        "--gpucompat", "--gpucompat-kb", "rules.yaml", "--gpucompat-model", "tiny-qwen2", "--gpucompat-model",
        "tiny-qwen2-h64", "--gpucompat-report", "r.json", "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    cells = {c["nodeid"]: c for c in json.loads((pytester.path / "r.json").read_text())["cells"]}
    (skipped,) = [c for c in cells.values() if c["outcome"] == "skipped"]
    assert "[tiny-qwen2-hf" in skipped["nodeid"]  # head size 128; tiny-qwen2-h64 (64) ran
    assert skipped["rules"] == ["head-128-breaks"]


def test_the_backend_an_engine_process_logged_is_what_ran(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """vLLM as shipped chooses its attention backend in its engine-core process: the adapter reads it from what
    that process wrote to the isolated child's log (its own logger sees nothing, and collective_rpc may refuse)."""
    from pytest_gpucompat.engines import child

    log = tmp_path / "child.log"
    log.write_text("(EngineCore pid=1) INFO Using FLASH_ATTN attention backend from an earlier engine\n")
    monkeypatch.setitem(child._CHILD, "log", str(log))

    class LLM:
        def __init__(self, model: str, **kwargs: Any) -> None:
            with open(log, "a") as handle:  # what the engine core process writes to the inherited stderr
                handle.write("(EngineCore pid=2) INFO [cuda.py:482] Using FLASHINFER attention backend out of "
                             "potential backends: ['FLASH_ATTN', 'FLASHINFER']\n")
            self.llm_engine = types.SimpleNamespace(model_config=None, vllm_config=None)

        def collective_rpc(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("refused: insecure serialization")

    _fake_modules(monkeypatch, {"vllm": {"LLM": LLM, "__version__": "0.0-standin"}})
    info = create("vllm").start(EngineSpec("vllm", "/model", {}))
    assert info.attention_backend == "FLASHINFER"


def test_an_engines_own_defaults_are_read_from_its_arguments_dataclass() -> None:
    import dataclasses

    from pytest_gpucompat.engines.deviations import dataclass_defaults

    @dataclasses.dataclass
    class Args:
        gpu_memory_utilization: float = 0.92
        enforce_eager: bool = False
        seed: int | None = 0
        compilation_config: dict = dataclasses.field(default_factory=dict)
        model: str = dataclasses.field(default="x")

    found = dataclass_defaults(Args, ["gpu_memory_utilization", "enforce_eager", "seed", "compilation_config",
                                      "no_such_field"])
    assert found == {"gpu_memory_utilization": 0.92, "enforce_eager": False, "seed": 0}
    assert dataclass_defaults(object, ["x"]) == {}

