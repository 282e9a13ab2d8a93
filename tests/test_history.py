"""The engine release history as the package reads it (kb.history), and what is checked against it: rules
(`rules --lint`), a user's command line (`check --args ... --to ...`) and a cell's settings (kb.settings).

A small history written here states the cases exactly; tests/test_history_data.py asks the same of the committed
history of the real releases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.kb import evaluate_cell, load_kb
from pytest_gpucompat.kb.cmdline import check_command, engine_of, given_flags, target_fingerprint
from pytest_gpucompat.kb.history import load_history
from pytest_gpucompat.kb.lint import lint_rules
from pytest_gpucompat.kb.settings import setting_rules
from pytest_gpucompat.machine.fingerprint import Fingerprint

RELEASES = ["0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0"]
HISTORY = {
    "format": 1, "engine": "vllm", "package": "vllm", "tool": "tools/engine_history.py", "tool_version": "1",
    "releases": [{"version": v, "file": f"vllm-{v}-py3-none-any.whl", "sha256": "0" * 64, "uploaded": "2025-01-01",
                  "yanked": False} | ({"error": "could not read"} if v == "0.4.0" else {}) for v in RELEASES],
    "flags": {
        "--kv-cache-dtype": [
            {"first": "0.2.0", "last": "0.3.0", "dest": "kv_cache_dtype", "choices": ["auto", "fp8_e5m2"],
             "default": "auto"},
            {"first": "0.5.0", "last": "0.5.0", "dest": "kv_cache_dtype", "choices": ["auto", "fp8", "fp8_e4m3"],
             "default": "auto"}],
        "--swap-space": [{"first": "0.1.0", "last": "0.2.0", "dest": "swap_space", "default": 4}],
        "--cpu-offload-gb": [{"first": "0.3.0", "last": "0.5.0", "dest": "swap_space", "default": 0}],
        "--enforce-eager": [{"first": "0.1.0", "last": "0.5.0", "dest": "enforce_eager", "action": "store_true",
                             "default": False}],
        "--max-model-len": [{"first": "0.1.0", "last": "0.2.0", "dest": "max_model_len", "default": None},
                            {"first": "0.3.0", "last": "0.5.0", "dest": "max_model_len", "default": 2048}],
        "--max-num-seqs": [{"first": "0.1.0", "last": "0.5.0", "dest": "max_num_seqs", "default": 256}],
        "--max-num-batched-tokens": [{"first": "0.1.0", "last": "0.5.0", "dest": "max_num_batched_tokens"}],
    },
    "env": {"VLLM_USE_V1": [{"first": "0.3.0", "last": "0.5.0", "default": "1"}]},
    "backends": {},
    "requires": {"torch": [{"first": "0.1.0", "last": "0.3.0", "specifier": "==2.1.2"},
                           {"first": "0.5.0", "last": "0.5.0", "specifier": "==2.4.0"}]},
}


@pytest.fixture
def matrices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A matrices directory with the shipped rules' place empty and the history above."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "none.yaml").write_text("rules: []\n")
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "vllm.json").write_text(json.dumps(HISTORY))
    monkeypatch.setenv("GPUCOMPAT_MATRICES_DIR", str(tmp_path))
    return tmp_path


def _rules(tmp_path: Path, text: str):
    path = tmp_path / "team.yaml"
    path.write_text(text)
    return load_kb([path], builtin=False).rules


def test_runs_answer_per_release_and_an_unread_release_is_unknown(matrices):
    h = load_history("vllm")
    assert h is not None and h.span() == "0.1.0-0.5.0"
    assert h.item("flags", "--kv_cache_dtype", h.index_of("0.2.0"))["choices"] == ["auto", "fp8_e5m2"]
    assert h.item("flags", "--kv-cache-dtype", h.index_of("0.1.0")) is None
    assert h.item("flags", "--kv-cache-dtype", h.index_of("0.4.0")).get("unknown")
    assert h.where("flags", "--kv-cache-dtype") == "0.2.0-0.5.0"  # 0.4.0 unknown: not a gap
    assert h.where("flags", "--enforce-eager") == "0.1.0-0.5.0"  # the unread 0.4.0 does not split the stretch
    assert h.index_of("0.5.0+cu130") == h.index_of("0.5.0.dev3") == h.index_of("0.5.0")
    assert h.index_of("0.9.0") is None


@pytest.mark.parametrize("damage, field", [
    (lambda d: d.update(format=2), "format"),
    (lambda d: d["releases"].reverse(), "releases"),
    (lambda d: d["flags"]["--swap-space"][0].update(first="0.9.0"), "flags.--swap-space[0]"),
    (lambda d: d["flags"].update({"--x": {"first": "0.1.0"}}), "flags.--x"),
    (lambda d: d["releases"][0].update(version="not a version"), "releases[0].version"),
])
def test_a_damaged_history_is_one_line_naming_the_field(matrices, damage, field):
    data = json.loads(json.dumps(HISTORY))
    damage(data)
    (matrices / "history" / "vllm.json").write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        load_history("vllm")
    assert f"field '{field}'" in str(err.value) and "vllm.json" in str(err.value)


def test_lint_flags_a_flag_missing_from_part_of_the_rules_range(matrices, tmp_path):
    rules = _rules(tmp_path, """rules:
  - {id: unbounded, summary: s, severity: advice, failure: none, confidence: upstream, engine: vllm,
     workaround: pass --kv-cache-dtype fp8, flags: [--kv-cache-dtype], sources: [{kind: doc, ref: r}]}
  - {id: bounded, summary: s, severity: advice, failure: none, confidence: upstream, engine: vllm,
     when: {packages: {vllm: ">=0.2.0,<0.4"}}, workaround: pass --kv-cache-dtype fp8_e5m2,
     flags: [--kv-cache-dtype], sources: [{kind: doc, ref: r}]}
""")
    results = {r.rule_id: r for r in lint_rules(rules)}
    assert results["unbounded"].problems == (
        "--kv-cache-dtype: vllm 0.1.0 (which the rule covers) lacks it; 0.2.0-0.5.0 has it",)
    assert results["bounded"].checked and not results["bounded"].problems


def test_lint_checks_stated_versions_on_both_sides_of_each_bound(matrices, tmp_path):
    rules = _rules(tmp_path, """rules:
  - {id: exact, summary: s, severity: advice, failure: none, confidence: upstream, engine: vllm,
     flags: [{flag: --swap-space, versions: "<0.3"}], sources: [{kind: doc, ref: r}]}
  - {id: too-long, summary: s, severity: advice, failure: none, confidence: upstream, engine: vllm,
     flags: [{flag: --swap-space, versions: "<0.4"}], sources: [{kind: doc, ref: r}]}
  - {id: too-short, summary: s, severity: advice, failure: none, confidence: upstream, engine: vllm,
     flags: [{flag: --swap-space, versions: "<0.2"}], sources: [{kind: doc, ref: r}]}
""")
    results = {r.rule_id: r.problems for r in lint_rules(rules)}
    assert results["exact"] == ()
    assert results["too-long"] and results["too-short"]
    assert "0.1.0-0.2.0 do" in results["too-long"][0]


def test_lint_checks_flags_no_release_has_and_values_by_release(matrices, tmp_path):
    rules = _rules(tmp_path, """rules:
  - {id: never, summary: s, severity: advice, failure: none, confidence: documents, engine: vllm,
     flags: [{flag: --prefetch-stream, versions: none}], sources: [{kind: seed, ref: r}]}
  - {id: wrongly-never, summary: s, severity: advice, failure: none, confidence: documents, engine: vllm,
     flags: [{flag: --swap-space, versions: none}], sources: [{kind: seed, ref: r}]}
  - {id: value, summary: s, severity: broken, failure: error-at-start, confidence: upstream, engine: vllm,
     when: {packages: {vllm: ">=0.2"}, params: {kv_cache_dtype: [fp8_e5m2]}},
     flags: [{flag: --kv-cache-dtype=fp8_e5m2, versions: ">=0.2,<0.4"}], sources: [{kind: doc, ref: r}]}
  - {id: value-wrong, summary: s, severity: broken, failure: error-at-start, confidence: upstream, engine: vllm,
     flags: [{flag: --kv-cache-dtype=fp8, versions: ">=0.2"}], sources: [{kind: doc, ref: r}]}
""")
    results = {r.rule_id: r.problems for r in lint_rules(rules)}
    assert results["never"] == () and results["value"] == ()
    assert results["wrongly-never"] == ("--swap-space: the rule says no vllm release has it; 0.1.0-0.2.0 do",)
    assert results["value-wrong"] == ("--kv-cache-dtype=fp8: the rule says vllm >=0.2 accepts it; 0.5.0 do",)


def test_lint_wants_every_flag_of_the_workaround_listed_and_checks_settings_and_choices(matrices, tmp_path):
    rules = _rules(tmp_path, """rules:
  - {id: r, summary: s, severity: broken, failure: crash, confidence: upstream, engine: vllm,
     when: {params: {kv_cache_dtype: [fp8_e5m2]}},
     workaround: "set VLLM_USE_V1=0 or pass --enforce-eager", sources: [{kind: doc, ref: r}]}
""")
    (result,) = lint_rules(rules)
    text = "\n".join(result.problems)
    assert "names --enforce-eager" in text and "names VLLM_USE_V1" in text
    assert "setting kv_cache_dtype does not exist in vllm 0.1.0" in text
    assert "'fp8_e5m2' is not a choice of kv_cache_dtype in vllm 0.5.0" in text


def test_a_setting_the_release_lacks_or_a_value_it_refuses_stops_the_cell(matrices):
    fp = Fingerprint(name="r", packages={"vllm": "0.5.0"})
    kb = load_kb([], builtin=False)
    verdict = evaluate_cell(kb, fp, "vllm", {"kv_cache_dtype": "fp8_e5m2", "dtype": "bfloat16"})
    assert verdict.decision.action == "skip"
    assert "vllm 0.5.0 does not accept kv_cache_dtype='fp8_e5m2'" in verdict.decision.reason
    verdict = evaluate_cell(kb, fp, "vllm", {"kv_cache_dtype": "fp8_e4m3", "unheard_of_kwarg": 1})
    assert verdict.decision.action == "run"  # a keyword no release has as a flag is not judged
    old = Fingerprint(name="r", packages={"vllm": "0.1.0"})
    verdict = evaluate_cell(kb, old, "vllm", {"kv_cache_dtype": "auto"})
    assert verdict.decision.action == "skip" and "exists in 0.2.0-0.5.0" in verdict.decision.reason
    assert setting_rules("vllm", "0.4.0", {"kv_cache_dtype": "x"}) == ()  # unread: unknown, not refused
    assert setting_rules("vllm", "0.9.0", {"kv_cache_dtype": "x"}) == ()  # not in the history


def test_a_command_line_against_a_later_release(matrices):
    argv = ["vllm", "serve", "/models/m", "--swap-space", "8", "--kv-cache-dtype", "fp8_e5m2", "--enforce-eager",
            "--max-num", "8", "--max-num-seq", "4"]
    assert engine_of(argv) == "vllm"
    check = check_command(argv, "vllm", "0.2.0", "0.5.0")
    by_flag = {f.given.written: f for f in check.flags}
    assert "removed in 0.3.0" in by_flag["--swap-space"].problems[0]
    assert "perhaps now --cpu-offload-gb" in by_flag["--swap-space"].problems[0]
    assert "'fp8_e5m2' is not one of its choices in 0.5.0" in by_flag["--kv-cache-dtype"].problems[0]
    assert "0.2.0 accepts it" in by_flag["--kv-cache-dtype"].problems[0]
    assert by_flag["--enforce-eager"].ok and by_flag["--enforce-eager"].given.value is None
    assert "ambiguous" in by_flag["--max-num"].problems[0]
    assert by_flag["--max-num-seq"].ok and "an abbreviation of --max-num-seqs" in by_flag["--max-num-seq"].notes[0]
    assert ("--max-model-len", None, 2048) in check.defaults_changed
    assert check.broken and check.settings == {"model": "/models/m", "enforce_eager": True, "max_num_seqs": 4}
    same = check_command(["vllm", "serve", "m", "--max-num-seqs", "8", "--enforce-eager"], "vllm", "0.5.0", None)
    assert not same.broken and same.settings == {"model": "m", "max_num_seqs": 8, "enforce_eager": True}


def test_the_target_machine_takes_the_releases_exact_pins(matrices):
    fp = Fingerprint(name="r", packages={"vllm": "0.2.0", "torch": "2.1.2"}, params={"x": 1})
    check = check_command(["vllm", "serve", "m", "--enforce-eager"], "vllm", "0.2.0", "0.5.0")
    target, assumed = target_fingerprint(fp, check)
    assert target.packages == {"vllm": "0.5.0", "torch": "2.4.0"}
    assert target.params == {"x": 1, "model": "m", "enforce_eager": True}
    assert assumed == ("vllm 0.5.0", "torch 2.4.0 (pinned by vllm 0.5.0)")


def test_values_are_taken_by_the_releases_own_actions(matrices):
    h = load_history("vllm")
    words = ["serve", "m", "--enforce-eager", "model-dir", "--max-num-seqs=4", "--max-model-len", "-1"]
    given = given_flags(words, h, h.index_of("0.5.0"))
    assert [(g.written, g.value) for g in given] == [("--enforce-eager", None), ("--max-num-seqs", "4"),
                                                     ("--max-model-len", "-1")]


@pytest.mark.parametrize("argv", [
    ["gpucompat", "check", "--args", "vllm serve m", "--to", "vllm==0.9.0"],
    ["gpucompat", "check", "--args", "vllm serve m", "--to", "sglang==0.5.0"],
    ["gpucompat", "check", "--args", "vllm serve 'm", "--to", "vllm==0.5.0"],
    ["gpucompat", "check", "--args", "my-server --port 1", "--to", "not-a-version"],
    ["gpucompat", "check", "--args", "my-server --port 1"],
    ["gpucompat", "check", "--to", "vllm==0.5.0"],
])
def test_check_args_bad_input_is_one_line(matrices, capsys, argv):
    from pytest_gpucompat.cli import main

    assert main(argv[1:]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpucompat: error: ")


def test_check_args_prints_the_flags_then_the_known_problems(matrices, capsys):
    from pytest_gpucompat.cli import main

    code = main(["check", "--args", "vllm serve m --swap-space 8", "--to", "vllm==0.5.0"])
    out = capsys.readouterr().out
    assert code == 1
    assert out.splitlines()[0].startswith("vllm ") and "this command line breaks" in out.splitlines()[0]
    assert "removed in" in out or "does not have it" in out
    assert "verdict:" in out
    code = main(["check", "--args", "vllm serve m --enforce-eager", "--to", "vllm==0.5.0", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["command"]["target"] == "0.5.0" and doc["fingerprint"]["packages"]["vllm"] == "0.5.0"


def test_check_args_takes_quiet_and_severity(matrices, capsys):
    from pytest_gpucompat.cli import main

    code = main(["check", "--args", "vllm serve m --swap-space 8", "--to", "vllm==0.5.0", "--quiet"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and len(lines) == 2 and "this command line breaks" in lines[0] and "verdict" in lines[1]
    assert main(["check", "--args", "vllm serve m", "--to", "vllm==0.5.0", "--severity", "broken"]) == 0
