"""``when.env``: a rule scoped to an engine variable's value (the fingerprint's ``env``).

The case that asked for it: vLLM 0.22-0.34 installed without FlashInfer fails at start in its sampler, unless
``VLLM_USE_FLASHINFER_SAMPLER=0`` (vllm/envs.py: ``bool(int(os.environ[...]))`` when set, else True;
vllm/v1/sample/ops/topk_topp_sampler.py ``flashinfer_sampler_supported`` returns before the import when off). On
the H200 with the variable set to 0 the engine got past the sampler and failed in attention instead, so the
sampler rule must not claim those cells.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pytest_gpucompat.cli import main
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.kb.load import load_rule_file
from pytest_gpucompat.kb.match import env_holds
from pytest_gpucompat.kb.schema import Conditions

H200_NO_FLASHINFER = """gpus: [{name: NVIDIA H200, compute_capability: "9.0"}]
packages: {vllm: "0.26.0"}
installs: {vllm: {version: "0.26.0", complete: false, missing: ["flashinfer-python==0.6.14 (not installed)"]}}
params: {engine: vllm, kv_cache_dtype: fp8_e5m2}
"""
SAMPLER = "vllm-without-flashinfer-fails-at-start"


def found(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str) -> set[str]:
    path = tmp_path / "env.yaml"
    path.write_text(text)
    assert main(["check", "--env", str(path), "--json"]) == 0
    out, _ = capsys.readouterr()
    return {f["id"] for f in json.loads(out)["findings"]}


@pytest.mark.parametrize(("env", "holds"), [
    ("", True),  # not set: the sampler's default is on
    ('env: {VLLM_USE_FLASHINFER_SAMPLER: "1"}\n', True),
    ('env: {VLLM_USE_FLASHINFER_SAMPLER: "0"}\n', False),
])
def test_the_sampler_rule_follows_the_variable(capsys, tmp_path, env, holds):
    ids = found(capsys, tmp_path, H200_NO_FLASHINFER + env)
    assert (SAMPLER in ids) is holds, ids
    # the attention failure the variable does not avoid is claimed either way
    assert "vllm-0.26-fp8-e5m2-kv-fails-at-start-on-hopper" in ids


def test_env_holds_lists_and_negations():
    listed = Conditions(env=(("X", (None, "1"), False),))
    assert env_holds(listed, {}) and env_holds(listed, {"X": "1"})
    assert not env_holds(listed, {"X": "0"}) and not env_holds(listed, {"X": "true"})
    negated = Conditions(env=(("X", ("0",), True),))
    assert env_holds(negated, {}) and env_holds(negated, {"X": "2"})
    assert not env_holds(negated, {"X": "0"})
    both = Conditions(env=(("X", ("0",), True), ("Y", ("a",), False)))
    assert not env_holds(both, {"Y": "a", "X": "0"}) and env_holds(both, {"Y": "a"}) and not env_holds(both, {})


@pytest.mark.parametrize(("env", "field"), [
    ([], "when.env"),
    ({"1BAD": ["0"]}, "when.env"),
    ({"X": []}, "when.env.X"),
    ({"X": "0"}, "when.env.X"),
    ({"X": [True]}, "when.env.X"),
    ({"X": {"is": ["0"]}}, "when.env.X"),
    ({"X": [["0"]]}, "when.env.X"),
])
def test_malformed_env_conditions_are_one_line_errors(tmp_path, env, field):
    raw = {"id": "r", "summary": "s", "severity": "advice", "failure": "none", "confidence": "documents",
           "sources": [{"kind": "doc", "ref": "x"}], "when": {"env": env}}
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump({"rules": [raw]}))
    with pytest.raises(InputError) as err:
        load_rule_file(path)
    text = str(err.value)
    assert "\n" not in text and field in text, text


def test_describe_says_the_condition(capsys):
    assert main(["rules", SAMPLER]) == 0
    out, _ = capsys.readouterr()
    assert "VLLM_USE_FLASHINFER_SAMPLER not =0" in out, out
