"""Write the contract of the TensorRT-LLM API that the `tensorrt-llm` adapter and the `trtllm-serve` server path rely
on: the parameters, fields, attributes and command-line options they use, read from TensorRT-LLM's sources with
`ast` (nothing of TensorRT-LLM is imported), with where each came from.

    python tools/trtllm_contract.py SOURCE_ROOT --tag v1.2.1 --commit SHA [--read-from TEXT] [-o FILE]

SOURCE_ROOT is a tree holding TensorRT-LLM's `tensorrt_llm/...` files, e.g. a checkout of the release tag. Classes
whose every field matters (SamplingParams, KvCacheConfig, the outputs) are written whole; for the LLM-API arguments
only the fields the adapter passes or reads (`LLM_ARGS_USED` in the adapter) are written, with any that the sources
lack listed under `missing`, so a test fails on them. The test suite checks the adapter against every file written.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CHECKOUT = str(Path(__file__).resolve().parent.parent)
if _CHECKOUT not in sys.path:  # the adapter of this checkout, not another installed copy
    sys.path.insert(0, _CHECKOUT)
from pytest_gpucompat.engines.trtllm import LLM_ARGS_USED  # noqa: E402

REPOSITORY = "https://github.com/NVIDIA/TensorRT-LLM"
LLM_PY = "tensorrt_llm/llmapi/llm.py"
ARGS_PY = "tensorrt_llm/llmapi/llm_args.py"
RESULT_PY = "tensorrt_llm/executor/result.py"


@dataclass(frozen=True)
class Item:
    """One thing to read: `member` of class `cls` in `path` (a method), its fields (member ""), or the click command
    function `member` (cls ""); `only` keeps just those names."""

    key: str
    path: str
    cls: str
    member: str
    only: tuple[str, ...] = ()


ITEMS: tuple[Item, ...] = (
    Item("LLM.__init__", LLM_PY, "LLM", "__init__"),
    Item("LLM.generate", LLM_PY, "BaseLLM", "generate"),
    Item("LLM.shutdown", LLM_PY, "BaseLLM", "shutdown"),
    Item("TorchLlmArgs", ARGS_PY, "TorchLlmArgs", "", LLM_ARGS_USED),
    Item("KvCacheConfig", ARGS_PY, "KvCacheConfig", ""),
    Item("SamplingParams", "tensorrt_llm/sampling_params.py", "SamplingParams", ""),
    Item("RequestOutput", RESULT_PY, "GenerationResultBase", "", ("outputs",)),
    Item("CompletionOutput", RESULT_PY, "CompletionOutput", ""),
    Item("Logprob", RESULT_PY, "Logprob", ""),
    Item("trtllm-serve serve", "tensorrt_llm/commands/serve.py", "", "serve"),
)


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}


def _is_dataclass(node: ast.ClassDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
                isinstance(target, ast.Attribute) and target.attr == "dataclass"):
            return True
    return False


def _call_name(node: ast.AST | None) -> str:
    if isinstance(node, ast.Call):
        func = node.func
        return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return ""


def _keyword(call: ast.AST | None, name: str) -> Any:
    for kw in call.keywords if isinstance(call, ast.Call) else ():
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def _own_fields(node: ast.ClassDef) -> list[str]:
    """Init fields of one class body: a dataclass's annotated names except `field(init=False)`; a pydantic model's
    annotated names except private (`_x`, PrivateAttr) ones; ClassVar annotations never."""
    dataclass_like = _is_dataclass(node)
    out: list[str] = []
    for stmt in node.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        name = stmt.target.id
        if "ClassVar" in ast.unparse(stmt.annotation):
            continue
        if dataclass_like:
            if _call_name(stmt.value) == "field" and _keyword(stmt.value, "init") is False:
                continue
        elif name.startswith("_") or _call_name(stmt.value) == "PrivateAttr":
            continue
        out.append(name)
    return out


def _lineage(classes: Mapping[str, ast.ClassDef], name: str) -> list[ast.ClassDef]:
    """`name` and the bases defined in the same file, bases first (a simple MRO for single-file hierarchies)."""
    node = classes.get(name)
    if node is None:
        return []
    chain: list[ast.ClassDef] = []
    for base in node.bases:
        if isinstance(base, ast.Name):
            chain += [c for c in _lineage(classes, base.id) if c not in chain]
    return [*chain, node]


def _members(classes: Mapping[str, ast.ClassDef], name: str) -> tuple[list[str], list[str]]:
    """(fields, attributes) of a class with its in-file bases: attributes are properties and `self.x = ...` of
    `__init__`."""
    fields: list[str] = []
    attributes: list[str] = []
    for node in _lineage(classes, name):
        fields += [f for f in _own_fields(node) if f not in fields]
        for stmt in node.body:
            if not isinstance(stmt, ast.FunctionDef):
                continue
            if any(isinstance(d, ast.Name) and d.id == "property" for d in stmt.decorator_list):
                attributes.append(stmt.name)
            elif stmt.name == "__init__":
                attributes += [t.attr for s in ast.walk(stmt) if isinstance(s, (ast.Assign, ast.AnnAssign))
                               for t in (s.targets if isinstance(s, ast.Assign) else [s.target])
                               if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                               and t.value.id == "self"]
    return fields, list(dict.fromkeys(a for a in attributes if a not in fields))


def _signature(fn: ast.FunctionDef) -> dict[str, Any]:
    args = fn.args
    names = [a.arg for a in (*args.posonlyargs, *args.args)]
    return {"params": [n for n in names if n not in ("self", "cls")],
            "keyword_only": [a.arg for a in args.kwonlyargs],
            "var_keyword": args.kwarg is not None}


def _method(classes: Mapping[str, ast.ClassDef], cls: str, member: str) -> ast.FunctionDef | None:
    node = classes.get(cls)
    found = [s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == member] if node else []
    return found[0] if found else None


def _click_command(tree: ast.Module, name: str) -> dict[str, Any] | None:
    """Options (every spelling) and arguments of the click command function `name`; `flags` take no value."""
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if fn is None:
        return None
    options: list[str] = []
    flags: list[str] = []
    arguments: list[str] = []
    for dec in fn.decorator_list:
        kind = _call_name(dec)
        spellings = [a.value for a in dec.args if isinstance(a, ast.Constant) and isinstance(a.value, str)] \
            if isinstance(dec, ast.Call) else []
        if kind == "option":
            names = [s for s in spellings if s.startswith("-")]
            options += names
            if _keyword(dec, "is_flag") is True:
                flags += names
        elif kind == "argument":
            arguments += spellings[:1]
    return {"options": sorted(options), "flags": sorted(flags), "arguments": arguments}


def extract(root: Path, items: Sequence[Item] = ITEMS) -> dict[str, dict[str, Any]]:
    """Every item read from the sources under `root`; an item not found there is recorded as `missing: true`."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        path = root / item.path
        tree = ast.parse(path.read_text(encoding="utf-8")) if path.is_file() else ast.Module(body=[], type_ignores=[])
        classes = _classes(tree)
        entry: dict[str, Any] = {"path": item.path, "class": item.cls} if item.cls else {"path": item.path}
        if not item.cls:
            found = _click_command(tree, item.member)
            entry.update(found if found is not None else {"missing": True})
        elif item.member:
            fn = _method(classes, item.cls, item.member)
            entry.update(_signature(fn) if fn is not None else {"missing": True})
        elif item.cls not in classes:
            entry["missing"] = True
        else:
            fields, attributes = _members(classes, item.cls)
            if item.only:
                fields = [n for n in item.only if n in fields]
                attributes = [n for n in item.only if n in attributes]
                entry["missing"] = [n for n in item.only if n not in fields and n not in attributes]
                entry["subset"] = True
            entry["fields"] = fields
            if item.only:
                entry["attributes"] = attributes
        out[item.key] = entry
    return out


def contract(root: Path, tag: str, commit: str, read_from: str) -> dict[str, Any]:
    """The contract document for the sources under `root`, which are TensorRT-LLM at `tag` (`commit`)."""
    return {
        "engine": "tensorrt-llm",
        "repository": REPOSITORY,
        "tag": tag,
        "commit": commit,
        "read_from": read_from,
        "generated_by": f"python tools/trtllm_contract.py SOURCE_ROOT --tag {tag} --commit {commit}",
        "items": extract(root),
    }


def render(doc: Mapping[str, Any]) -> str:
    """JSON with one line per top-level key and per item, so that a new tag's contract diffs item by item."""
    head = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "items"]
    items = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc["items"].items()]
    return "{\n" + ",\n".join([*head, ' "items": {\n' + ",\n".join(items) + "\n }"]) + "\n}\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="a tree holding tensorrt_llm/... (a checkout of the tag)")
    parser.add_argument("--tag", required=True)
    parser.add_argument("--commit", required=True, help="the commit the tag points to")
    parser.add_argument("--read-from", default="a checkout of the tag", help="how the sources were obtained")
    parser.add_argument("-o", "--output", type=Path, help="default: stdout")
    args = parser.parse_args(argv)
    text = render(contract(args.root, args.tag, args.commit, args.read_from))
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
