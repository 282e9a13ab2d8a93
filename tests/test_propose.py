"""Proposed rules for failures no rule explains: pure functions, checked with the real rule loader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.kb import load_kb, load_rule_file, parse_rule
from pytest_gpucompat.kb.failure_modes import DEFAULT, classify, load_failure_modes
from pytest_gpucompat.kb.propose import (
    error_line,
    generalise,
    group_failures,
    proposals_yaml,
    propose_rule,
    signature_of,
)
from pytest_gpucompat.kb.signatures import Failure, explaining_rules
from pytest_gpucompat.machine.fingerprint import GPU, Fingerprint

H200 = GPU(index=0, name="NVIDIA H200", compute_capability="9.0", memory_mib=143771)
H100 = GPU(index=0, name="NVIDIA H100 80GB HBM3", compute_capability="9.0", memory_mib=81559)
FP = Fingerprint(name="h200", gpus=(H200,), driver="580.159.04", cuda_driver="13.0", cuda_runtime="13.0",
                 packages={"vllm": "0.26.0", "transformers": "5.17.0", "torch": "2.11.0"})
UVICORN = ('Traceback (most recent call last):\n  File "<site-packages>/vllm/entrypoints/launcher.py", line 10\n'
           "    import uvicorn\nModuleNotFoundError: No module named 'uvicorn'")


def failure(reason="server exited with status 1 during start-up", log_tail=UVICORN, engine="openai",
            params=None, fp=FP, phase="setup", runner="h200"):
    params = {"server": "vllm", "dtype": "bfloat16"} if params is None else params
    return Failure(fingerprint=fp, engine=engine, params=params, reason=reason, log_tail=log_tail, phase=phase,
                   runner=runner, nodeid=f"t.py::t[{runner}]")


def test_error_line_prefers_the_log_then_the_exception_the_reason_names():
    assert error_line(failure()) == "ModuleNotFoundError: No module named 'uvicorn'"
    assert error_line(failure(reason="vllm: LLM() failed: ValueError: Tokenizer not available", log_tail="INFO x")) \
        == "ValueError: Tokenizer not available"
    assert error_line(failure(reason="server exited with status 1\nmore", log_tail=None)) == \
        "server exited with status 1"
    assert error_line(failure(reason=None, log_tail=None)) == ""


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        ("ModuleNotFoundError: No module named 'uvicorn'", "ModuleNotFoundError: No module named 'uvicorn'"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.10 GiB total)",
         r"torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate [0-9.]+ MiB \(GPU [0-9.]+; [0-9.]+ GiB "
         r"total\)"),
        ("OSError: /opt/venv/lib/libcudart.so.13: cannot open shared object file",
         r"OSError: \S+: cannot open shared object file"),
        ("RuntimeError: invalid pointer 0x7f3a2c001000 on GPU-2fc03f42-7b54-5c67-42a0-ed118352ef91",
         r"RuntimeError: invalid pointer 0x[0-9a-fA-F]+ on GPU-[0-9a-fA-F-]+"),
        ("a 1 b 2 c 3 d 4 e 5 f 6", r"a [0-9.]+ b [0-9.]+ c [0-9.]+ d [0-9.]+"),  # at most 4 volatile parts
        ("x" * 300, "x" * 160),
    ],
)
def test_generalise_escapes_the_text_and_generalises_what_changes_between_runs(line, signature):
    assert generalise(line) == signature
    assert re.search(signature, line)


def test_a_generalised_signature_the_loader_would_refuse_falls_back_to_the_literal_text():
    f = failure(log_tail="RuntimeError: bad /a/b:c/d and /e/f", reason=None)
    signature = signature_of(f)
    assert signature == "RuntimeError: bad" or re.search(signature, "RuntimeError: bad /a/b:c/d and /e/f")
    parse_rule({"id": "x", "summary": "s", "severity": "broken", "failure": "crash", "confidence": "upstream",
                "sources": [{"kind": "doc", "ref": "x"}], "signature": [signature]}, "p.yaml")


def test_the_failure_mode_table_names_what_kind_of_failure_it_is():
    modes = load_failure_modes()
    assert classify([failure()], modes) == ("error-at-start", "broken")
    assert classify([failure(reason="engine hung in generate() after 600 s", log_tail=None, phase="call")],
                    modes) == ("hang", "broken")
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert classify([failure(log_tail=oom)], modes) == ("oom", "broken")
    assert classify([failure(reason="engine process died: SIGSEGV", log_tail=None, phase="call")], modes) == \
        ("crash", "broken")
    drift = "AssertionError: vllm bfloat16 drifted from the float32 reference: max |delta logprob| 0.3 > 0.2"
    assert classify([failure(reason=drift, log_tail=None, phase="call")], modes) == ("precision", "degraded")
    assert classify([failure(reason="AssertionError: vllm: leak: 2.0 MiB/cycle", log_tail=None, phase="call")],
                    modes) == ("memory", "degraded")
    assert classify([failure(reason="assert 3 == 4", log_tail=None, phase="call")], modes) == \
        ("wrong-output", "broken")
    assert classify([failure(phase="call", log_tail=None, reason="x")], ()) == DEFAULT


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("failure_modes: [{failure: exploded, severity: broken}]", "failure_modes[0].failure"),
        ("failure_modes: [{failure: crash, severity: broken, phase: later}]", "failure_modes[0].phase"),
        ("failure_modes: [{failure: crash, severity: broken, pattern: '(a+)+'}]", "failure_modes[0].pattern"),
        ("failure_modes: [{failure: crash, severity: broken, when: x}]", "failure_modes[0].when"),
        ("failure_modes: 3", "failure_modes"),
    ],
)
def test_a_bad_failure_mode_table_is_one_line_naming_the_entry(tmp_path: Path, content: str, field: str):
    path = tmp_path / "failure_modes.yaml"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        load_failure_modes(path)
    assert str(path) in str(info.value) and f"field '{field}'" in str(info.value)
    assert load_failure_modes(tmp_path / "missing.yaml") == ()


def test_a_proposed_rule_is_valid_for_the_loader_and_explains_its_failures(tmp_path: Path):
    failures = [failure(), failure(params={"server": "vllm", "dtype": "bfloat16", "max_model_len": 512})]
    taken = {r.id for r in load_kb().rules}
    proposal = propose_rule(failures, "reports/h200.json", taken, load_failure_modes())
    assert proposal["id"] == "vllm-0.26.0-modulenotfounderror-no-module-named-uvicorn" and proposal["id"] in taken
    assert proposal["engine"] == "vllm" and proposal["confidence"] == "verified"
    assert (proposal["severity"], proposal["failure"]) == ("broken", "error-at-start")
    assert proposal["when"] == {"gpu": ["NVIDIA H200"], "driver": "580.159.04", "cuda_driver": "13.0",
                                "cuda_runtime": "13.0", "packages": {"vllm": "==0.26.0"},
                                "params": {"dtype": ["bfloat16"]}}  # what both share; server names the engine
    assert proposal["sources"] == [{"kind": "report", "ref": "reports/h200.json"}]
    path = tmp_path / "proposed.yaml"
    path.write_text(proposals_yaml([proposal]))
    assert "gpu: [NVIDIA H200]" in path.read_text()
    (rule,) = load_rule_file(path)
    assert [r.id for r in explaining_rules([rule], failures[1])] == [rule.id]
    again = propose_rule(failures, "reports/h200.json", taken, ())
    assert again["id"] == proposal["id"] + "-2"


def test_failures_on_several_runners_share_only_what_they_have_in_common(tmp_path: Path):
    other = Fingerprint(name="h100", gpus=(H100,), driver="570.124.06", cuda_driver="12.8", cuda_runtime="13.0",
                        packages={"vllm": "0.26.0"})
    failures = [failure(), failure(fp=other, runner="h100")]
    (group,) = group_failures(failures)
    proposal = propose_rule(group, "fleet.json", set(), load_failure_modes())
    assert proposal["when"] == {"gpu": ["NVIDIA H100 80GB HBM3", "NVIDIA H200"], "cuda_runtime": "13.0",
                                "packages": {"vllm": "==0.26.0"}, "params": {"dtype": ["bfloat16"]}}
    assert "2 failed cells on h100, h200" in proposal["note"]
    path = tmp_path / "p.yaml"
    path.write_text(proposals_yaml([proposal]))
    (rule,) = load_rule_file(path)
    assert all(explaining_rules([rule], f) for f in failures)


def test_failures_are_grouped_by_engine_and_signature():
    hf = failure(engine="hf", params={}, log_tail="ValueError: x 1")
    groups = group_failures([failure(), hf, failure(), failure(engine="hf", params={}, log_tail="ValueError: x 2")])
    assert [len(g) for g in groups] == [2, 2]
    proposal = propose_rule(groups[1], "r.json", set(), load_failure_modes())
    assert proposal["engine"] is None and proposal["signature"] == [r"ValueError: x [0-9.]+"]
    assert proposal["when"]["packages"] == {"transformers": "==5.17.0"}  # the hf engine's version
    assert yaml.safe_load(proposals_yaml([proposal]))["rules"][0]["id"].startswith("hf-5.17.0-valueerror-x")
