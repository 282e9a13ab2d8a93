"""A what-if run (`--gpucompat-env` with one fingerprint) says so in its report: the runner's fingerprint carries
`what_if` (the file) and `host` (the machine that really ran the cells), kept through `gpucompat merge` and shown
by the terminal summary and the Markdown; the fingerprint's `env` travels into the report too."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import jsonschema
import pytest

from pytest_gpucompat.report import cli
from pytest_gpucompat.report.io import load_report
from pytest_gpucompat.report.markdown import render_markdown
from pytest_gpucompat.report.validate import check_report_dict

SCHEMA = json.loads((Path(__file__).parent.parent / "pytest_gpucompat" / "report" / "schema.json").read_text())
A100 = textwrap.dedent("""
    name: a100-runner
    gpus: [{name: "NVIDIA A100-SXM4-80GB", compute_capability: "8.0"}]
    driver: "550.54.15"
    env: {VLLM_ATTENTION_BACKEND: FLASHINFER, HF_TOKEN: "hf_secret"}
""")
TEST = textwrap.dedent("""
    import pytest

    @pytest.mark.gpucompat(engine="hf", params={"n": [1, 2]})
    def test_cell(gpucompat_cell, gpucompat_record):
        gpucompat_record("tokens_per_s", 100.0)
        assert gpucompat_cell.params["n"] == 1
""")


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    pytester.makepyfile(test_cells=TEST)
    result = pytester.runpytest("--gpucompat", "--gpucompat-no-builtin-rules", "--gpucompat-report", "r.json",
                                "-p", "no:cacheprovider", *args)
    result.assert_outcomes(passed=1, failed=1)
    return result, json.loads((pytester.path / "r.json").read_text())


def test_a_what_if_run_names_its_fingerprint_file_and_the_host(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCOMPAT_RUNNER", "real-box")
    monkeypatch.setenv("VLLM_HOST_ONLY", "1")
    pytester.makefile(".yaml", a100=A100)
    result, data = run(pytester, "--gpucompat-env", "a100.yaml")
    fp = data["runners"]["a100-runner"]
    assert fp["what_if"] == "a100.yaml"
    assert fp["host"].startswith("real-box (") and fp["host"].endswith(")")
    assert fp["env"] == {"HF_TOKEN": "<redacted>", "VLLM_ATTENTION_BACKEND": "FLASHINFER"}  # the file's, not the host's
    assert "hf_secret" not in (pytester.path / "r.json").read_text()
    jsonschema.validate(data, SCHEMA)
    check_report_dict(data)
    result.stdout.fnmatch_lines(["*2 cells on what-if a100.yaml (NVIDIA A100-SXM4-80GB, driver 550.54.15), "
                                 "ran on real-box (*): 1 failed, 1 passed"])

    report = load_report(pytester.path / "r.json")
    md = render_markdown(report)
    assert f"> What-if: evaluated against `a100.yaml`; cells ran on {fp['host']}." in md
    assert "| **FAILED** *(ran)*: 100 tok/s |" in md and "| passed *(ran)*: 100 tok/s |" in md
    assert "`HF_TOKEN=<redacted>`" in md and "`VLLM_ATTENTION_BACKEND=FLASHINFER`" in md

    # gpucompat merge keeps both, on the renamed runner too
    merged_path = pytester.path / "merged.json"
    assert cli.cmd_merge([pytester.path / "r.json", pytester.path / "r.json"], merged_path) == 0
    merged = load_report(merged_path)
    for name in ("a100-runner", "a100-runner#2"):
        assert merged.runners[name]["what_if"] == "a100.yaml" and merged.runners[name]["host"] == fp["host"]
    md = render_markdown(merged)
    assert "> What-if: evaluated against `a100.yaml` for runner **a100-runner#2**; cells ran on real-box (" in md


def test_a_run_on_its_own_fingerprint_has_no_what_if(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCOMPAT_RUNNER", "real-box")
    monkeypatch.setenv("VLLM_USE_V1", "1")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    monkeypatch.setenv("VLLM_API_KEY", "sk-secret")
    result, data = run(pytester)
    fp = data["runners"]["real-box"]
    assert "what_if" not in fp and "host" not in fp
    assert fp["env"]["VLLM_USE_V1"] == "1" and fp["env"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert fp["env"]["VLLM_API_KEY"] == "<redacted>" and "sk-secret" not in (pytester.path / "r.json").read_text()
    result.stdout.fnmatch_lines(["*2 cells on *: 1 failed, 1 passed"])
    result.stdout.no_fnmatch_line("*what-if*")
    assert "What-if" not in render_markdown(load_report(pytester.path / "r.json"))


@pytest.mark.parametrize(("key", "value", "where"), [
    ("what_if", 1, '$.runners["r"].what_if'),
    ("host", None, '$.runners["r"].host'),
    ("env", ["VLLM_USE_V1=1"], '$.runners["r"].env'),
    ("env", {"VLLM_USE_V1": 1}, '$.runners["r"].env.VLLM_USE_V1'),
])
def test_report_checks_the_new_fingerprint_fields(key: str, value: object, where: str) -> None:
    data = {"schema_version": 1, "tool_version": "x", "created": "x", "runners": {"r": {key: value}}, "cells": []}
    with pytest.raises(Exception) as info:
        check_report_dict(data)
    assert where.replace('["r"]', ".r") in str(info.value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, SCHEMA)
