"""Matrix expansion through its public functions, plain pytest: the product's order and ids, every refusal's whole
message, and the cell limit at its edge (the plugin's pytester tests reach the same code through a marker)."""

from __future__ import annotations

from pathlib import Path

import pytest

import pytest_gpucompat
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.common.versions import parse_specifier
from pytest_gpucompat.workload.matrix import MAX_CELLS, MatrixCell, cells_from_marker, expand_block, load_named_matrices


def ids(cells: list[MatrixCell]) -> list[str]:
    return [c.id for c in cells]


def test_the_product_follows_the_data_engines_then_params_then_axes() -> None:
    cells = expand_block({"engine": ["vllm", "sglang"], "params": {"dtype": ["fp16", "bf16"], "tp": 2, "eager": [True]},
                          "axes": {"driver": [">=550", "<550"]}}, "m.yaml", "matrices.m[0]")
    assert ids(cells) == [
        f"{e}-dtype={d}-tp=2-eager=true-driver={v}"
        for e in ("vllm", "sglang") for d in ("fp16", "bf16") for v in (">=550", "<550")]
    assert cells[0] == MatrixCell("vllm", {"dtype": "fp16", "tp": 2, "eager": True}, {"driver": ">=550"})
    assert cells[0].to_dict() == {"engine": "vllm", "params": {"dtype": "fp16", "tp": 2, "eager": True},
                                  "axes": {"driver": ">=550"}}
    assert MatrixCell("hf", {"x": False}).id == "hf-x=false"
    assert pytest_gpucompat.Cell is pytest_gpucompat.MatrixCell is MatrixCell  # Cell: its earlier name, kept


def test_one_engine_no_params_is_one_cell_without_axes() -> None:
    (cell,) = expand_block({"engine": "hf"}, "s", "w")
    assert cell == MatrixCell("hf") and cell.id == "hf" and dict(cell.axes) == {} and dict(cell.params) == {}
    assert expand_block({"engine": "hf", "params": {"a": []}}, "s", "w") == []  # an empty axis: no cell


def test_glob_axes_are_not_version_ranges() -> None:
    cells = expand_block({"engine": "hf", "axes": {"gpu": ["*H100*"], "arch": "hopper"}}, "s", "w")
    assert [dict(c.axes) for c in cells] == [{"gpu": "*H100*", "arch": "hopper"}]


@pytest.mark.parametrize(("block", "field", "problem"), [
    ({"engine": "hf", "param": {}}, "w.param", "unknown key (engine, params, axes)"),
    ({"engine": "hf", "matrix": "m"}, "w.matrix", "unknown key (engine, params, axes)"),
    ({"params": {"a": [1]}}, "w.engine", "required: an engine name or a list of them"),
    ({"engine": []}, "w.engine", "required: an engine name or a list of them"),
    ({"engine": ["hf", 3]}, "w.engine[1]", "an engine name must be a string, not 3"),
    ({"engine": "hf", "params": [1]}, "w.params", "must be a mapping of name -> list of values"),
    ({"engine": "hf", "axes": "x"}, "w.axes", "must be a mapping of name -> list of values"),
    ({"engine": "hf", "axes": {1: ["x"]}}, "w.axes.1", "an axis name must be a string"),
])
def test_each_refusal_names_its_field(block: dict, field: str, problem: str) -> None:
    with pytest.raises(InputError) as info:
        expand_block(block, "m.yaml", "w")
    assert str(info.value) == f"m.yaml: field '{field}': {problem}"


def test_an_axis_that_is_not_a_version_range_is_refused_with_the_parsers_reason() -> None:
    with pytest.raises(InputError) as info:
        expand_block({"engine": "hf", "axes": {"driver": [">=550", "not a range"]}}, "m.yaml", "w")
    assert info.value.field == "w.axes.driver" and info.value.source == "m.yaml"


def test_the_cell_limit_is_checked_before_expanding_at_its_edge() -> None:
    at_limit = expand_block({"engine": "hf", "params": {"a": list(range(100)), "b": list(range(MAX_CELLS // 100))}},
                            "s", "w")
    assert len(at_limit) == MAX_CELLS and at_limit[-1].id == f"hf-a=99-b={MAX_CELLS // 100 - 1}"
    with pytest.raises(InputError) as info:
        expand_block({"engine": "hf", "params": {"a": list(range(MAX_CELLS + 1))}}, "s", "w")
    assert str(info.value) == f"s: field 'w': expands to more than {MAX_CELLS} cells"


def test_named_matrices_and_the_marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "matrices.yaml").write_text(
        "matrices:\n  m:\n    - {engine: [vllm, sglang], params: {dtype: [fp16]}}\n    - {engine: hf}\n"
        "  n: {engine: hf}\n")
    named = load_named_matrices(str(tmp_path / "matrices.yaml"))
    assert {k: ids(list(v)) for k, v in named.items()} == {
        "m": ["vllm-dtype=fp16", "sglang-dtype=fp16", "hf"], "n": ["hf"]}
    assert load_named_matrices(str(tmp_path / "none.yaml")) == {}
    monkeypatch.setenv("GPUCOMPAT_MATRICES_DIR", str(tmp_path))
    assert ids(cells_from_marker((), {"matrix": "m"}, "t.py")) == ["vllm-dtype=fp16", "sglang-dtype=fp16", "hf"]
    assert ids(cells_from_marker((), {"matrix": "m", "engine": ["hf", "vllm"]}, "t.py")) == ["vllm-dtype=fp16", "hf"]
    assert ids(cells_from_marker((), {"engine": "hf", "params": {"a": [1, 2]}, "exclusive": True}, "t.py")) == [
        "hf-a=1", "hf-a=2"]
    for args, kwargs, message in [
        ((), {"matrix": "x"}, "t.py: field 'gpucompat(matrix)': no matrix named 'x' (known: m, n)"),
        ((), {"engine": "hf", "bogus": 1},
         "t.py: field 'gpucompat(bogus)': unknown marker argument (engine, params, axes, matrix, exclusive)"),
        (("hf",), {}, "t.py: field 'gpucompat(positional arguments)': unknown marker argument (engine, params, "
                      "axes, matrix, exclusive)"),
        ((), {"engine": "hf", "exclusive": 1}, "t.py: field 'gpucompat(exclusive)': must be True or False"),
    ]:
        with pytest.raises(InputError) as info:
            cells_from_marker(args, kwargs, "t.py")
        assert str(info.value) == message
    (tmp_path / "matrices.yaml").write_text("matrices: [1]\n")
    with pytest.raises(InputError) as info:
        load_named_matrices(str(tmp_path / "matrices.yaml"))
    assert "field 'matrices': a mapping of matrix name -> list of blocks is required" in str(info.value)
    (tmp_path / "matrices.yaml").write_text("matrices:\n  m: [1]\n")
    with pytest.raises(InputError) as info:
        load_named_matrices(str(tmp_path / "matrices.yaml"))
    assert "field 'matrices.m[0]': must be a mapping" in str(info.value)


def test_the_axis_refusal_carries_the_parsers_whole_reason() -> None:
    with pytest.raises(InputError) as info:
        expand_block({"engine": "hf", "axes": {"driver": ["not a range"]}}, "m.yaml", "w")
    with pytest.raises(ValueError) as parser:
        parse_specifier("not a range")
    assert str(info.value) == f"m.yaml: field 'w.axes.driver': {parser.value}" and str(parser.value)


def test_the_cell_limit_counts_the_product_not_the_longest_list() -> None:
    """No list is longer than the limit, their product is: refused before expanding."""
    with pytest.raises(InputError) as info:
        expand_block({"engine": "hf", "params": {"a": list(range(1000)), "b": list(range(MAX_CELLS // 1000 + 1))}},
                     "s", "w")
    assert str(info.value) == f"s: field 'w': expands to more than {MAX_CELLS} cells"
    with pytest.raises(InputError):
        expand_block({"engine": ["hf", "vllm"], "axes": {"gpu": [str(i) for i in range(MAX_CELLS // 2 + 1)]}}, "s", "w")


def test_the_cells_of_a_block_without_axes_share_one_read_only_mapping() -> None:
    """The documented memory saving of a 100,000-cell matrix: one empty axes mapping for all, that no cell can
    change for the others."""
    first, second = expand_block({"engine": "hf", "params": {"a": [1, 2]}}, "s", "w")
    assert first.axes is second.axes and dict(first.axes) == {}
    with pytest.raises(TypeError):
        first.axes["gpu"] = "x"  # type: ignore[index]
    with_axes = expand_block({"engine": "hf", "axes": {"gpu": ["a", "b"]}}, "s", "w")
    assert [dict(c.axes) for c in with_axes] == [{"gpu": "a"}, {"gpu": "b"}]


def test_a_marker_block_is_refused_in_the_marker_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError) as info:
        cells_from_marker((), {"params": {"a": [1]}}, "t.py::test_x")
    assert str(info.value) == "t.py::test_x: field 'gpucompat.engine': required: an engine name or a list of them"
    monkeypatch.setenv("GPUCOMPAT_MATRICES_DIR", str(tmp_path))  # no matrices.yaml: no named matrix
    with pytest.raises(InputError) as info:
        cells_from_marker((), {"matrix": "nightly"}, "t.py")
    assert str(info.value) == "t.py: field 'gpucompat(matrix)': no matrix named 'nightly' (known: none)"
