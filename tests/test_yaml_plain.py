"""YAML read the short way (``common.inputs._plain_data``) is what PyYAML's own constructor builds from the same
nodes, for every YAML file the project ships and for the scalars and shapes the short way hands back to it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _data import same

from pytest_gpucompat.common import inputs
from pytest_gpucompat.common.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p for d in ("pytest_gpucompat", "matrices", "examples", "suites") for p in (ROOT / d).rglob("*.y*ml"))

SNIPPETS = [
    "a: 1\nb: -2\nc: 0x1F\nd: 0o17\ne: 017\nf: 1_000\ng: 1:30\n",
    "a: 1.5\nb: .inf\nc: -.Inf\nd: 1e3\ne: 1_0.5\nf: 6.8523015e+5\n",
    "a: yes\nb: No\nc: on\nd: OFF\ne: true\nf: ~\ng: null\nh:\n",
    "a: 2001-12-14\nb: 2001-12-14t21:59:43.10-05:00\n",
    "a: !!str 1\nb: !!int '7'\nc: !!float '2'\nd: !!binary aGVsbG8=\n",
    "- [1, 2, {a: b}]\n- {x: [y, z]}\n- 'quoted'\n- \"esc\\n\"\n",
    "base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n",
    "a: 1\na: 2\n",
    "1: one\n'1': other\n",
    "1: one\n1.0: other\n",
    "? [a, b]\n: c\n",
    "? {a: b}\n: c\n",
    "s: !!set {a, b}\n",
    "o: !!omap [a: 1, b: 2]\n",
    "p: !!pairs [a: 1, a: 2]\n",
    "x: " + "9" * 500 + "\n",
    "x: !!python/name:os.system\n",
    "= : 1\n",
    "",
    "just text\n",
]


def _both(text: str) -> tuple[Any, Any]:
    """(the short way, PyYAML's constructor) on the same composed nodes; an exception as its type."""
    fast = inputs._loaders()[1]
    if fast is None:
        pytest.skip("PyYAML without libyaml")
    results = []
    for short in (True, False):
        loader = fast(text)
        try:
            node = loader.get_single_node()
            if node is None:
                results.append(None)
                continue
            data = inputs._plain_data(loader, node) if short else inputs._NOT_PLAIN
            if data is inputs._NOT_PLAIN:
                data = loader.construct_document(node)
            results.append(data)
        except Exception as exc:  # noqa: BLE001 - compared by type
            results.append(type(exc))
        finally:
            loader.dispose()
    return results[0], results[1]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_files(path: Path) -> None:
    short, constructor = _both(path.read_text())
    assert same(short, constructor)


@pytest.mark.parametrize("text", SNIPPETS)
def test_snippets(text: str) -> None:
    short, constructor = _both(text)
    assert same(short, constructor), (short, constructor)


@pytest.mark.parametrize("text", SNIPPETS)
def test_parse_yaml_as_the_strict_loader(text: str) -> None:
    """What parse_yaml returns or refuses is what the strict pure-Python loader does (its errors are the ones
    users see)."""
    try:
        got: Any = inputs.parse_yaml(text, "f.yaml")
    except InputError as exc:
        got = str(exc)
    try:
        import yaml

        want: Any = yaml.load(text, Loader=inputs._loaders()[0])
    except Exception:  # noqa: BLE001 - parse_yaml's error for it
        assert isinstance(got, str)
        return
    assert same(got, want)
