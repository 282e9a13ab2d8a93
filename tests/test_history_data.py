"""The committed release history of the real engines (matrices/history/), and what it answers: the shipped rules
pass `rules --lint`, real flags removed between real releases are caught, the shipped matrices' settings exist in
the releases they run on."""

from __future__ import annotations

import pytest

from pytest_gpucompat.kb import evaluate_cell, load_kb
from pytest_gpucompat.kb.cmdline import check_command
from pytest_gpucompat.kb.history import load_history
from pytest_gpucompat.kb.lint import lint_rules
from pytest_gpucompat.machine.fingerprint import Fingerprint
from pytest_gpucompat.workload.matrix import load_named_matrices


@pytest.mark.parametrize("engine, first", [("vllm", "0.2.0"), ("sglang", "0.1.12")])
def test_the_history_covers_every_release_from_the_first_asked(engine: str, first: str) -> None:
    history = load_history(engine)
    assert history is not None and history.releases[0].text == first
    assert all(r.read for r in history.releases) and len(history.releases) > 80
    assert all(r.file and len(r.sha256) == 64 for r in history.releases)  # where each release was read from


def test_every_shipped_rule_passes_the_lint() -> None:
    results = lint_rules(load_kb().rules)
    assert [(r.rule_id, r.problems) for r in results if r.problems] == []
    assert sum(1 for r in results if r.checked and r.against == "history") > 60


def test_known_facts_of_the_releases() -> None:
    vllm, sglang = load_history("vllm"), load_history("sglang")
    assert vllm is not None and sglang is not None
    assert vllm.where("flags", "--disable-custom-all-reduce").startswith("0.3.0-")
    assert sglang.where("flags", "--enable-flashinfer") == "0.1.13-0.1.17"
    assert sglang.where("flags", "--attention-backend").startswith("0.3.1-")
    i = vllm.index_of("0.26.0")
    assert i is not None and vllm.item("requires", "torch", i) == {"specifier": "==2.11.0"}
    assert vllm.item("requires", "flashinfer-python", i) == {"specifier": "==0.6.14"}
    cc = [vllm.item("backends", "FLASHINFER", vllm.index_of(v)).get("compute_capability") for v in ("0.23.0", "0.24.0")]
    assert cc[0].startswith(">=7.5") and cc[1].startswith(">=8.0")


def test_a_flag_removed_between_two_real_releases() -> None:
    check = check_command(["python", "-m", "sglang.launch_server", "--model-path", "m", "--disable-flashinfer"],
                          "sglang", "0.3.6", "0.4.2")
    (flag,) = [f for f in check.flags if f.given.written == "--disable-flashinfer"]
    assert flag.problems and flag.problems[0].startswith("removed in 0.4.1.post2")
    assert check.broken
    check = check_command(["vllm", "serve", "m", "--swap-space", "4", "--kv-cache-dtype", "fp8_e5m2"],
                          "vllm", "0.17.1", "0.18.0")
    by_flag = {f.given.written: f for f in check.flags}
    assert by_flag["--swap-space"].problems[0].startswith("removed in 0.18.0")
    assert by_flag["--kv-cache-dtype"].ok
    assert not check_command(["vllm", "serve", "m", "--kv-cache-dtype", "fp8_e5m2"], "vllm", "0.26.0", None).broken


def test_the_shipped_matrices_settings_exist_where_they_run_and_an_old_release_is_told() -> None:
    kb = load_kb([], builtin=False)
    cells = [c for cells in load_named_matrices().values() for c in cells if c.engine in ("vllm", "sglang")]
    for engine, version in (("vllm", "0.26.0"), ("sglang", "0.5.16")):
        fp = Fingerprint(name="r", packages={engine: version})
        stopped = [(c.id, evaluate_cell(kb, fp, c.engine, c.params).decision.reason) for c in cells
                   if c.engine == engine and evaluate_cell(kb, fp, c.engine, c.params).decision.action != "run"]
        assert stopped == []
    old = Fingerprint(name="r", packages={"sglang": "0.2.0"})
    triton = next(c for c in cells if c.engine == "sglang" and c.params.get("attention_backend") == "triton")
    verdict = evaluate_cell(kb, old, "sglang", triton.params)
    assert verdict.decision.action == "skip" and "sglang 0.2.0 has no setting 'attention_backend'" in \
        verdict.decision.reason
