"""Rule windows computed from the released code (kb.bounds, kb.windows): lint refuses a bound one release off its
window and a `when` that contradicts the rule's own flags, accepts the shipped knowledge base, and the corrected
rules answer `gpucompat check --env` at their bounds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from _cost import cpu

from pytest_gpucompat.cli import main
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.kb import load_kb
from pytest_gpucompat.kb.history import load_history
from pytest_gpucompat.kb.lint import format_lint, lint_rules
from pytest_gpucompat.kb.load import load_rule_file

REPO = Path(__file__).resolve().parent.parent
RULES = REPO / "matrices" / "rules"
T4 = '{name: "Tesla T4", compute_capability: "7.5"}'
A100 = '{name: "NVIDIA A100-SXM4-80GB", compute_capability: "8.0"}'
H100 = '{name: "NVIDIA H100 80GB HBM3", compute_capability: "9.0"}'


def shipped(rule_id: str) -> dict:
    for path in sorted(RULES.glob("*.yaml")):
        for raw in yaml.safe_load(path.read_text())["rules"]:
            if raw["id"] == rule_id:
                return raw
    raise KeyError(rule_id)


def lint_one(tmp_path: Path, raw: dict) -> list[str]:
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump({"rules": [raw]}, sort_keys=False))
    return [p for r in lint_rules(load_rule_file(path)) for p in r.problems]


# ---------------------------------------------------------------------------------------------- lint of windows


def test_the_shipped_knowledge_base_lints_clean(capsys):
    assert main(["rules", "--lint"]) == 0
    out = capsys.readouterr().out
    assert "0 with problems" in out
    figure = re.search(r"(\d+) of (\d+) upstream/verified engine rules have a window", out)
    assert figure is not None and int(figure.group(1)) >= 30
    said = " ".join(out.split())
    typed = re.search(r"(\d+) with a typed release range that neither a window nor a scoped flag holds", said)
    assert typed is not None and int(typed.group(1)) < int(figure.group(2))  # the rules left to compute, counted


def test_the_summary_counts_a_typed_range_and_not_a_computed_one(tmp_path):
    from pytest_gpucompat.kb.lint import bounds_summary

    computed = load_rule_file_raw(tmp_path, shipped("vllm-awq-quantization-needs-sm75"))
    raw = shipped("vllm-awq-quantization-needs-sm75")
    del raw["bounds"]
    raw["id"] = "typed-copy"
    typed = load_rule_file_raw(tmp_path, raw)
    said = " ".join(bounds_summary([*computed, *typed]).split())
    assert "1 of 2 upstream/verified engine rules have a window" in said
    assert "1 with a typed release range that neither a window nor a scoped flag holds (typed-copy;" in said


def load_rule_file_raw(tmp_path: Path, raw: dict) -> list:
    path = tmp_path / f"{raw['id']}.yaml"
    path.write_text(yaml.safe_dump({"rules": [raw]}, sort_keys=False))
    return list(load_rule_file(path))


@pytest.mark.parametrize(("rule_id", "packages", "releases"), [
    # a fact window (FLASH_ATTN's declared capability) with an anchor and a setting: 0.13.0 left out
    ("vllm-v1-flash-attn-backend-needs-sm80", {"vllm": ">=0.14"}, "0.13.0"),
    # one release too early: 0.12.0 has no attention_backend setting and no window
    ("vllm-v1-flash-attn-backend-needs-sm80", {"vllm": ">=0.12.0"}, "0.12.0"),
    # an anchor window (the Triton backend's SM89 refusal, from 0.24.0): one release late and one early
    ("vllm-v1-fp8-kv-triton-needs-sm89", {"vllm": ">=0.25.0"}, "0.24.0"),
    ("vllm-v1-fp8-kv-triton-needs-sm89", {"vllm": ">=0.23.0"}, "0.23.0"),
    # a release-notes window (CUDA 12 builds end with 1.0)
    ("tensorrt-llm-needs-cuda12-driver", {"tensorrt-llm": ">=0.9,<1.0"}, "1.0.0"),
    ("tensorrt-llm-needs-cuda12-driver", {"tensorrt-llm": ">=0.9,<1.2"}, "1.1.0"),
])
def test_lint_refuses_a_bound_one_release_off_its_window(tmp_path, rule_id, packages, releases):
    raw = shipped(rule_id)
    assert lint_one(tmp_path, raw) == []  # as shipped
    raw["when"]["packages"] = packages
    problems = lint_one(tmp_path, raw)
    assert problems and any(f"first: {releases}" in p for p in problems), problems


def test_a_narrower_bound_is_accepted_only_with_its_reason_and_only_inside(tmp_path):
    raw = shipped("vllm-v1-flash-attn-backend-needs-sm80")
    raw["when"]["packages"] = {"vllm": "==0.26.*"}
    assert any("uncovered" in p for p in lint_one(tmp_path, raw))
    raw["bounds"]["narrower"] = "only 0.26.0 was run"
    assert lint_one(tmp_path, raw) == []
    raw["when"]["packages"] = {"vllm": ">=0.12.0,<0.27"}  # still nothing outside the window
    assert any("first: 0.12.0" in p and "do not hold" in p for p in lint_one(tmp_path, raw))
    raw["when"]["packages"] = {"vllm": ">=0.13.0"}  # the whole window: the reason is stale
    assert any("bounds.narrower" in p for p in lint_one(tmp_path, raw))


def test_lint_refuses_a_when_that_contradicts_its_own_flags(tmp_path):
    raw = shipped("vllm-rope-theta-removed-v1")
    assert lint_one(tmp_path, raw) == []
    raw["when"]["packages"] = {"vllm": ">=0.26"}  # the bound the rule had: --rope-theta is gone from 0.11.1
    problems = lint_one(tmp_path, raw)
    assert any(p.startswith("when contradicts flags: --rope-theta") and "0.11.1-0.25.1 out" in p
               for p in problems), problems
    raw["when"]["packages"] = {"vllm": ">=0.11.1,<0.30"}
    assert any("0.30.0-0.34.0 out" in p for p in lint_one(tmp_path, raw))


def test_a_rule_on_both_sides_of_a_flag_is_not_a_contradiction(tmp_path):
    """kv_cache_dtype fp8 before 0.4.1: releases with and without --kv-cache-dtype are all broken for it."""
    assert lint_one(tmp_path, shipped("vllm-kv-cache-dtype-before-0.4.1-only-fp8-e5m2")) == []


# --------------------------------------------------------------------------------------------- bad bounds input


@pytest.mark.parametrize(("bounds", "field"), [
    ({"anchors": [{"file": "vllm/platforms/cuda.py", "code": "raise ValueError("}]}, "bounds.anchors[0].code"),
    ({"anchors": [{"file": "vllm/x.py", "value": "not a name!"}]}, "bounds.anchors[0].value"),
    ({"anchors": [{"text": "x"}]}, "bounds.anchors[0].file"),
    ({"anchors": [{"file": "/etc/passwd", "text": "x"}]}, "bounds.anchors[0].file"),
    ({"anchors": [{"file": "a.py", "text": "x", "equals": 1}]}, "bounds.anchors[0].equals"),
    ({"facts": [{"backend": "FLASH_ATTN", "refuses": "compute_capabilty"}]}, "bounds.facts[0].refuses"),
    ({"facts": [{"release": "cudnn", "matches": ">=9"}]}, "bounds.facts[0].release"),
    ({"facts": [{"release": "cuda", "matches": "twelve"}]}, "bounds.facts[0].matches"),
    ({"narrower": "why"}, "bounds"),
    ({"facts": [], "colour": 1}, "bounds.colour"),
    ({"facts": [{"selection": "crashes"}]}, "bounds.facts[0].selection"),
    ({"facts": [{"selection": "refused", "picks": ["../x"]}]}, "bounds.facts[0].picks"),
    ({"facts": [{"selection": "refused", "backend": "FLASH_ATTN"}]}, "bounds.facts[0].backend"),
    ({"facts": [{"release": "cuda", "matches": ">=12"}], "unknown": " "}, "bounds.unknown"),
    ({"anchors": [{"file": "a.py", "text": "x", "gate": "compute_capability"}]}, "bounds.anchors[0].gate"),
    ({"anchors": [{"file": "a.py", "value": "C.get_min_capability", "gate": "dtype"}]}, "bounds.anchors[0].gate"),
    # what CPython's parser fails on with MemoryError / RecursionError rather than SyntaxError, and huge literals
    ({"anchors": [{"file": "a.py", "code": "-" * 200_000 + "1"}]}, "bounds.anchors[0].code"),
    ({"anchors": [{"file": "a.py", "code": "a" + ".b" * 100_000}]}, "bounds.anchors[0].code"),
    ({"anchors": [{"file": "a.py", "assert_in": "(" * 1000 + "1" + ")" * 1000}]}, "bounds.anchors[0].assert_in"),
    ({"anchors": [{"file": "a.py", "code": "x = [" + "[" * 300 + "]" * 300 + "]"}]}, "bounds.anchors[0].code"),
    ({"anchors": [{"file": "a.py", "string": "x" * 10_000_000}]}, "bounds.anchors[0].string"),
])
def test_malformed_bounds_are_one_line_errors_naming_rule_and_field(tmp_path, bounds, field):
    raw = shipped("vllm-v1-flash-attn-backend-needs-sm80")
    raw["bounds"] = bounds
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump({"rules": [raw]}))
    with pytest.raises(InputError) as err:
        load_rule_file(path)
    text = str(err.value)
    assert "\n" not in text and "vllm-v1-flash-attn-backend-needs-sm80" in text and field in text, text


@pytest.mark.parametrize("command", [["rules", "--lint"], ["check", "-q"], ["rules", "x"]])
def test_a_hostile_code_anchor_is_one_line_in_every_command(tmp_path, capsys, command):
    raw = shipped("vllm-v1-flash-attn-backend-needs-sm80")
    raw["bounds"] = {"anchors": [{"file": "vllm/a.py", "code": "not " * 490 + "x"}]}  # parses; deep when walked
    raw["id"] = "x"
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({"rules": [raw]}))
    assert main([*command, "--kb", str(good)]) in (0, 1)  # loads (the anchor is not evaluated here)
    raw["bounds"] = {"anchors": [{"file": "vllm/a.py", "code": "-" * 300_000 + "1"}]}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"rules": [raw]}))
    capsys.readouterr()
    assert main([*command, "--kb", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bounds.anchors[0].code" in err[0] and "Traceback" not in err[0]


def test_the_history_tool_takes_a_hostile_anchor_as_not_holding():
    import sys

    sys.path.insert(0, str(REPO / "tools"))
    from _history_anchors import evaluate

    assert evaluate({"code": "not " * 490 + "x"}, "x = 1\n") == {"holds": False}
    assert evaluate({"code": "x = 1"}, "a" + ".b" * 100_000) == {"holds": False}  # a file too deep to parse
    assert evaluate({"code": "x = 1"}, "x = 1\n") == {"holds": True}


def test_a_gate_typed_beside_its_anchors_value_is_refused(tmp_path):
    # the anchor reads get_min_capability() per release: the rule's compute-capability gate is that value
    raw = shipped("vllm-fp8-quant-needs-sm89-before-0.5.1")
    assert lint_one(tmp_path, raw) == []
    raw["when"]["compute_capability"] = "<8.0"
    problems = lint_one(tmp_path, raw)
    assert any("gate" in p and "reads 89" in p and "<8.9" in p and "0.4.2-0.5.0.post1" in p for p in problems), problems
    del raw["bounds"]["anchors"][0]["gate"]  # without the claim, a narrower gate is the rule's own business
    assert lint_one(tmp_path, raw) == []
    raw = shipped("vllm-awq-quantization-needs-sm75")
    raw["when"]["compute_capability"] = "<7.0"
    assert any("reads 75" in p for p in lint_one(tmp_path, raw))


@pytest.mark.parametrize(("gpu", "vllm", "rule_id", "fires"), [
    ('{name: "NVIDIA L4", compute_capability: "8.9"}', "0.4.1", "vllm-fp8-quant-needs-sm90-0.4.1", True),
    ('{name: "NVIDIA L4", compute_capability: "8.9"}', "0.4.2", "vllm-fp8-quant-needs-sm89-before-0.5.1", False),
    (T4, "0.6.0", "vllm-fp8-quant-needs-sm80-0.5.1-0.13.0", True),
    (T4, "0.14.0", "vllm-fp8-quant-needs-sm75", False),
])
def test_each_release_has_the_fp8_floor_its_code_returns(capsys, tmp_path, gpu, vllm, rule_id, fires):
    text = f"gpus: [{gpu}]\npackages: {{vllm: \"{vllm}\"}}\nparams: {{engine: vllm, quantization: fp8}}\n"
    assert (rule_id in broken_upstream(check(capsys, tmp_path, text))) is fires


def test_a_fact_the_release_notes_do_not_state_is_unknown_not_false(tmp_path, capsys):
    # TensorRT-LLM 0.7.1 and 0.8.0's notes name no CUDA: neither inside the CUDA 12 window nor outside it
    raw = shipped("tensorrt-llm-needs-cuda12-driver")
    assert lint_one(tmp_path, raw) == []  # as shipped: covered, and bounds.unknown says why
    del raw["bounds"]["unknown"]
    problems = lint_one(tmp_path, raw)
    assert len(problems) == 1 and "0.7.1-0.8.0 state no fact" in problems[0] and "bounds.unknown" in problems[0]
    raw["when"]["packages"] = {"tensorrt-llm": ">=0.9,<1.1"}  # stopping short of them is a choice to explain too
    assert any("0.7.1-0.8.0 state no fact" in p for p in lint_one(tmp_path, raw))
    raw["bounds"]["unknown"] = "left out: not stated"
    assert lint_one(tmp_path, raw) == []
    raw["when"]["packages"] = {"tensorrt-llm": ">=0.12,<1.1"}  # nowhere near them: the reason is stale
    assert any("bounds.unknown" in p and "remove it" in p for p in lint_one(tmp_path, raw))
    assert main(["rules", "tensorrt-llm-needs-cuda12-driver"]) == 0
    out = capsys.readouterr().out
    assert "not stated in 0.7.1-0.8.0" in out and "unknown (a fact not stated): 0.7.1-0.8.0" in out


@pytest.mark.parametrize(("bounds", "says"), [
    ({"facts": [{"backend": "NO_SUCH_BACKEND", "refuses": "compute_capability"}]},
     "bounds.facts[0].backend: no vllm release"),
    ({"anchors": [{"file": "vllm/no/such/file.py", "text": "x"}]}, "not evaluated"),
    ({"facts": [{"backend": "FLASH_ATTN", "refuses": "head_size"}]}, "names no head_size"),
    ({"facts": [{"release": "cuda", "matches": ">=12"}]}, "bounds.facts[0].release: no vllm release"),
])
def test_bounds_the_history_cannot_judge_are_lint_errors(tmp_path, bounds, says):
    raw = shipped("vllm-v1-flash-attn-backend-needs-sm80")
    raw["bounds"] = bounds
    problems = lint_one(tmp_path, raw)
    assert any(says in p for p in problems), problems
    assert all("\n" not in p for p in problems)


SELECTION_ONLY = [
    # the window computed from the selection data alone (kb.predict over vllm-selection.json): a forced FLASH_ATTN
    # is refused below cc 8.0 in every priority-design release (0.11.1+); the setting exists from 0.13.0
    ("vllm-v1-flash-attn-backend-needs-sm80", {"selection": "refused"}, ">=0.13.0", [(">=0.14", "first: 0.13.0")]),
    # a forced TRITON_ATTN with an fp8 KV cache below cc 8.9 is refused when the layers are built from 0.24.0
    ("vllm-v1-fp8-kv-triton-needs-sm89", {"selection": "refused-at-init", "picks": "TRITON_ATTN"}, ">=0.24.0",
     [(">=0.25.0", "first: 0.24.0"), (">=0.23.0", "0.23.0")]),
]


@pytest.mark.parametrize(("rule_id", "fact", "shipped_range", "off"), SELECTION_ONLY)
def test_a_selection_fact_alone_bounds_the_rule(tmp_path, rule_id, fact, shipped_range, off):
    """A rule that restates the selection gets its window from the prediction: lint accepts the shipped range with
    no other fact or anchor, and refuses one release off either way."""
    raw = shipped(rule_id)
    assert raw["when"]["packages"]["vllm"] == shipped_range
    raw["bounds"] = {"facts": [fact]}
    assert lint_one(tmp_path, raw) == []
    for packages, says in off:
        raw["when"]["packages"] = {"vllm": packages}
        problems = lint_one(tmp_path, raw)
        assert any(says in p for p in problems), problems


def test_a_selection_fact_follows_the_data(tmp_path):
    """The window moves with the data: a selection file in which 0.24.0's Triton backend accepts fp8 on every GPU
    (the release's profiles with the init refusal removed) makes lint refuse a rule that still covers 0.24.0."""
    raw = shipped("vllm-v1-fp8-kv-triton-needs-sm89")
    raw["bounds"] = {"facts": [{"selection": "refused-at-init", "picks": "TRITON_ATTN"}]}
    data = json.loads((REPO / "matrices" / "history" / "vllm-selection.json").read_text())
    versions = [r["version"] for r in data["releases"]]

    def drop(node):  # type: ignore[no-untyped-def]
        if isinstance(node, dict):
            node.pop("refuses_at_init", None)
            for value in node.values():
                drop(value)
        elif isinstance(node, list):
            for value in node:
                drop(value)

    for run in data["runs"]:
        if versions.index(run["first"]) <= versions.index("0.24.0") <= versions.index(run["last"]):
            drop(run["profiles"])
    history = tmp_path / "h"
    history.mkdir()
    (history / "vllm-selection.json").write_text(json.dumps(data))
    (history / "vllm.json").write_text((REPO / "matrices" / "history" / "vllm.json").read_text())
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump({"rules": [raw]}, sort_keys=False))
    problems = [p for r in lint_rules(load_rule_file(path), known={"vllm": load_history("vllm", history)})
                for p in r.problems]
    assert any("0.24.0" in p and "bounds do not" in p for p in problems), problems


def test_an_anchor_whose_file_is_in_no_release_is_named(tmp_path):
    """Evaluated by the history tool, matched no file: told apart from an anchor never evaluated."""
    import sys

    sys.path.insert(0, str(REPO / "tools"))
    from _history_anchors import evaluate_release

    raw = shipped("vllm-v1-flash-attn-backend-needs-sm80")
    raw["bounds"] = {"anchors": [{"file": "vllm/no/such/file.py", "text": "x"}]}
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump({"rules": [raw]}))
    rule = load_rule_file(path)[0]
    anchor = rule.bounds.anchors[0]
    assert evaluate_release({anchor.digest: anchor.spec()}, {"vllm/other.py": "x"}) == {anchor.digest: {
        "holds": False}}
    history = json.loads((REPO / "matrices" / "history" / "vllm.json").read_text())
    first, last = history["releases"][0]["version"], history["releases"][-1]["version"]
    history["anchors"] = {anchor.digest: [{"first": first, "last": last, "holds": False}]}
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "vllm.json").write_text(json.dumps(history))
    found = load_history("vllm", tmp_path / "h")
    problems = [p for r in lint_rules([rule], known={"vllm": found}) for p in r.problems]
    assert any("bounds.anchors[0].file: vllm/no/such/file.py matches no file in any vllm release" in p
               for p in problems), problems


# ------------------------------------------------------------------------------------- what-ifs at the bounds


def check(capsys, tmp_path, text: str) -> dict[str, dict]:
    path = tmp_path / "env.yaml"
    path.write_text(text)
    assert main(["check", "--env", str(path), "--json"]) == 0
    out, _ = capsys.readouterr()
    return {f["id"]: f for f in json.loads(out)["findings"] if not f["unconfirmed"]}


def broken_upstream(found: dict[str, dict]) -> set[str]:
    return {i for i, f in found.items() if f["severity"] == "broken" and f["confidence"] in ("upstream", "verified")}


@pytest.mark.parametrize(("text", "rule_id"), [
    (f"gpus: [{T4}]\npackages: {{vllm: \"0.20.0\"}}\nparams: {{engine: vllm, attention_backend: FLASH_ATTN}}\n",
     "vllm-v1-flash-attn-backend-needs-sm80"),
    (f"gpus: [{H100}]\npackages: {{vllm: \"0.15.0\"}}\n"
     "params: {engine: vllm, attention_backend: TRITON_ATTN, kv_cache_dtype: fp8_e5m2}\n",
     "vllm-fp8-e5m2-kv-triton-asserts"),
    (f"gpus: [{A100}]\npackages: {{vllm: \"0.15.0\"}}\nparams: {{engine: vllm, rope_theta: 1000000}}\n",
     "vllm-rope-theta-removed-v1"),
    (f"gpus: [{A100}]\ndriver: \"470.82.01\"\npackages: {{tensorrt-llm: \"0.20.0\"}}\n"
     "params: {engine: tensorrt-llm}\n", "tensorrt-llm-needs-cuda12-driver"),
    (f"gpus: [{A100}]\ndriver: \"550.54.15\"\npackages: {{tensorrt-llm: \"1.1.0\"}}\n"
     "params: {engine: tensorrt-llm}\n", "tensorrt-llm-cuda13-needs-driver-580"),
    # 0.8.0's notes name no CUDA: unknown, not "not CUDA 12"; covered, with the reason in bounds.unknown
    (f"gpus: [{A100}]\ndriver: \"470.82.01\"\npackages: {{tensorrt-llm: \"0.8.0\"}}\n"
     "params: {engine: tensorrt-llm}\n", "tensorrt-llm-needs-cuda12-driver"),
])
def test_what_ifs_inside_the_corrected_windows_are_broken(capsys, tmp_path, text, rule_id):
    assert rule_id in broken_upstream(check(capsys, tmp_path, text))


@pytest.mark.parametrize(("text", "rule_id"), [
    (f"gpus: [{A100}]\npackages: {{vllm: \"0.20.0\"}}\nparams: {{engine: vllm, attention_backend: FLASH_ATTN}}\n",
     "vllm-v1-flash-attn-backend-needs-sm80"),
    (f"gpus: [{H100}]\npackages: {{vllm: \"0.10.2\"}}\nparams: {{engine: vllm, kv_cache_dtype: fp8_e5m2}}\n",
     "vllm-fp8-e5m2-kv-triton-asserts"),
    (f"gpus: [{A100}]\npackages: {{vllm: \"0.11.0\"}}\nparams: {{engine: vllm, rope_theta: 1000000}}\n",
     "vllm-rope-theta-removed-v1"),
    (f"gpus: [{A100}]\ndriver: \"470.82.01\"\npackages: {{tensorrt-llm: \"0.7.0\"}}\n"
     "params: {engine: tensorrt-llm}\n", "tensorrt-llm-needs-cuda12-driver"),  # before the history: not judged
])
def test_what_ifs_outside_stay_quiet(capsys, tmp_path, text, rule_id):
    found = check(capsys, tmp_path, text)
    assert rule_id not in found
    if "0.10.2" in text:
        assert not {i for i in broken_upstream(found) if "e5m2" in i}


# ------------------------------------------------------------------------------ lint linear in the history size


def _big_history(tmp_path: Path, extra: int) -> Path:
    data = json.loads((REPO / "matrices" / "history" / "vllm.json").read_text())
    first, last = data["releases"][0]["version"], data["releases"][-1]["version"]
    for i in range(extra):
        data["flags"][f"--x{i}"] = [{"first": first, "last": last, "dest": f"x{i}"}]
    out = tmp_path / f"h{extra}"
    out.mkdir()
    (out / "vllm.json").write_text(json.dumps(data, separators=(",", ":")))
    selection = REPO / "matrices" / "history" / "vllm-selection.json"  # read beside the history (selection facts)
    (out / "vllm-selection.json").write_text(selection.read_text())
    return out


def test_lint_time_is_linear_in_the_history(tmp_path, monkeypatch):
    """200,000 extra flags: lint reads each run a bounded number of times (a per-release scan of every flag per
    setting took minutes). Structural: the per-setting lookup is indexed, so the lint of the big history takes
    about what loading it takes."""
    from pytest_gpucompat.kb import history as history_module

    rules = [r for r in load_kb().rules if r.engine == "vllm"]
    big = load_history("vllm", _big_history(tmp_path, 200_000))
    assert big is not None and len(big.runs["flags"]) > 200_000

    def scanned(self, index):  # type: ignore[no-untyped-def]
        # no scan of every flag of a release: failed at the first one, not after minutes of scanning
        raise AssertionError(f"History.flags_at({index}): a scan of every flag of a release")

    monkeypatch.setattr(history_module.History, "flags_at", scanned)
    with cpu() as used:  # CPU time: a loaded machine stretches the wall clock, not the work done
        results = lint_rules(rules, known={"vllm": big})
    elapsed = used.seconds
    assert not [p for r in results for p in r.problems]
    assert elapsed < 30, f"lint of a 200,000-flag history took {elapsed:.1f} CPU s"
    assert "0 with problems" in format_lint(results, known={"vllm": big})


# ------------------------------------------------------------------------------------ anchors evaluated per file


def _evaluate():  # type: ignore[no-untyped-def]
    import sys

    sys.path.insert(0, str(REPO / "tools"))
    from _history_anchors import evaluate

    return evaluate


SOURCE = '''
class FlashAttentionBackend:
    supports_quant_query_input = True
    DEFAULT = [16, 32]

    @classmethod
    def get_min_capability(cls) -> int:
        # a comment
        return 80

    def forward(self):
        assert self.kv_cache_dtype in {"fp8_e4m3", "fp8"} or (self.kv_cache_dtype.startswith("nvfp4"))
        raise ValueError(f"Selected backend {selected_backend} is not valid for "
                         f"this configuration. Reason: {reasons}")
'''


@pytest.mark.parametrize(("spec", "holds", "value"), [
    ({"text": "supports_quant_query_input   =  True"}, True, None),  # whitespace-insensitive
    ({"string": "Selected backend {selected_backend} is not valid for this configuration"}, True, None),
    ({"string": "not valid for this configuration!"}, False, None),
    ({"code": 'assert self.kv_cache_dtype in {"fp8", "fp8_e4m3"} or self.kv_cache_dtype.startswith("nvfp4")'},
     True, None),  # set order and parentheses do not matter
    ({"code": ["x = 1", "supports_quant_query_input = True"]}, True, None),  # alternatives
    ({"value": "FlashAttentionBackend.get_min_capability", "at_least": 75}, True, 80),
    ({"value": ["Fp8Config.get_min_capability", "FlashAttentionBackend.get_min_capability"], "at_most": 75},
     False, 80),
    ({"value": "FlashAttentionBackend.DEFAULT", "equals": [32, 16]}, True, [16, 32]),
    ({"assert_in": "self.kv_cache_dtype", "excludes": ["fp8_e5m2"]}, True, ["fp8", "fp8_e4m3"]),
    ({"assert_in": "self.kv_cache_dtype", "contains": ["fp8_e5m2"]}, False, ["fp8", "fp8_e4m3"]),
    ({"value": "Missing.attr"}, False, None),
])
def test_anchor_kinds(spec, holds, value):
    found = _evaluate()({"files": ["x.py"], **spec}, SOURCE)
    assert found["holds"] is holds
    assert found.get("value") == value


def test_an_anchor_in_a_file_that_does_not_parse_does_not_hold():
    assert _evaluate()({"files": ["x.py"], "code": "x = 1"}, "def (:\n") == {"holds": False}


# --------------------------------------------------------------------------------- release notes -> history


NOTES = """# Release Notes

## TensorRT-LLM Release 1.1
- The base Docker image for TensorRT-LLM is updated to `nvcr.io/nvidia/pytorch:25.10-py3`.

## TensorRT-LLM Release 0.19.0
  - The dependent NVIDIA ModelOpt version is updated to 0.27.

## TensorRT-LLM Release 0.18.0
  - The base Docker image for TensorRT-LLM is updated to `nvcr.io/nvidia/pytorch:25.03-py3`.
  - The dependent TensorRT version is updated to 10.9.
  - The dependent CUDA version is updated to 12.8.1.

## TensorRT-LLM Release 0.16.0
  - Updated to TensorRT v10.7.
  - Updated to CUDA v12.6.3.
"""


def _notes_tool():  # type: ignore[no-untyped-def]
    import sys

    sys.path.insert(0, str(REPO / "tools"))
    import release_notes_history

    return release_notes_history


def test_release_notes_become_a_stack_history(tmp_path):
    tool = _notes_tool()
    (tmp_path / "notes.md").write_text(NOTES)
    out = tmp_path / "h" / "tensorrt-llm-stack.json"
    assert tool.main(["--release-notes", str(tmp_path / "notes.md"), "--output", str(out)]) == 0
    history = load_history("tensorrt-llm-stack", out.parent)
    assert history is not None and [r.text for r in history.releases] == ["0.16.0", "0.18.0", "0.19.0", "1.1.0"]
    value = {r.text: {k: (history.item("stack", k, i) or {}).get("value") for k in ("cuda", "trt", "driver_floor")}
             for i, r in enumerate(history.releases)}
    assert value["0.16.0"] == {"cuda": "12.6.3", "trt": "10.7", "driver_floor": "525.60.13"}
    assert value["0.19.0"] == {"cuda": "12.8.1", "trt": "10.9", "driver_floor": "525.60.13"}  # kept from 0.18.0
    assert history.item("stack", "cuda", 2)["from"] == "0.18.0"
    assert value["1.1.0"]["cuda"] == "13.0.2" and value["1.1.0"]["driver_floor"] == "580"  # its container's CUDA


def test_release_notes_that_contradict_themselves_are_refused(tmp_path, capsys):
    tool = _notes_tool()
    (tmp_path / "notes.md").write_text(NOTES.replace("CUDA version is updated to 12.8.1", "CUDA version is updated "
                                                                                           "to 12.9.0"))
    assert tool.main(["--release-notes", str(tmp_path / "notes.md"), "--output", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert "0.18.0: CUDA 12.9.0 stated, container 25.03 has 12.8.1" in err and err.count("\n") == 1
    (tmp_path / "empty.md").write_text("# nothing\n")
    assert tool.main(["--release-notes", str(tmp_path / "empty.md"), "--output", str(tmp_path / "o.json")]) == 2
    assert "no '## TensorRT-LLM Release X' section" in capsys.readouterr().err


def test_the_history_tool_stores_where_each_anchor_holds(tmp_path):
    """rules dir -> anchors -> per-release results read from the cached archives -> runs in the history."""
    import sys
    import zipfile

    sys.path.insert(0, str(REPO / "tools"))
    import engine_history
    from _history_anchors import read_anchored, rule_anchors
    from _history_fetch import Artifact, Release
    from packaging.version import Version

    raw = shipped("vllm-v1-fp8-kv-triton-needs-sm89")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.yaml").write_text(yaml.safe_dump({"rules": [raw]}))
    anchors = rule_anchors(tmp_path / "rules", "vllm")
    assert len(anchors) == 1
    message = 'raise ValueError(f"FP8 KV cache is not supported by the Triton attention backend "\n    f"on {dev}")\n'
    texts = {"1.0": "x = 1\n", "1.1": message, "1.2": None}
    releases, facts = [], {}
    for version, text in texts.items():
        archive = tmp_path / f"{version}.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            if text is not None:
                zf.writestr("vllm/v1/attention/backends/triton_attn.py", text)
            zf.writestr("vllm/other.py", "y = 2\n")
        releases.append(Release(Version(version), version, Artifact(f"{version}.whl", "", "", 0, "", False)))
        facts[version] = {"anchors": read_anchored(archive, anchors)}
    runs = engine_history.compact(releases, facts)["anchors"]
    digest = next(iter(anchors))
    assert runs[digest] == [
        {"first": "1.0", "last": "1.0", "file": "vllm/v1/attention/backends/triton_attn.py", "holds": False},
        {"first": "1.1", "last": "1.1", "file": "vllm/v1/attention/backends/triton_attn.py", "holds": True},
        {"first": "1.2", "last": "1.2", "holds": False}]
