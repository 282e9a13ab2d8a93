"""`gpucompat explain`: committed real reports, synthetic fleets, bad input; and `explained_by` in every rendering."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from _fleet_report import fleet_report
from test_hostile_inputs import EXPECTED, HOSTILE, assert_one_line

from pytest_gpucompat.cli import main
from pytest_gpucompat.kb import load_rule_file
from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.io import load_report, write_report_atomic
from pytest_gpucompat.report.junit import render_junit
from pytest_gpucompat.report.markdown import render_markdown
from pytest_gpucompat.report.merge import merge_reports
from pytest_gpucompat.report.model import Report

REPORTS = Path(__file__).resolve().parent.parent / "docs" / "reports"


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests read whole lines; test_textfit.py checks that the text fits a terminal."""
    monkeypatch.setenv("COLUMNS", "1000")
VLLM = REPORTS / "h200-580.159.04-vllm-0.26.0.json"  # 3 failed cells: the embedding one and two without uvicorn
PASSED = REPORTS / "h200-580.159.04-sglang-0.5.16.json"
QWEN3_ASR = "ValueError: 'qwen3_asr' is already used by a Transformers config, pick another name."


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def proposed_yaml(out: str) -> str:
    return out[out.index("\nrules:\n") + 1:]


def test_a_committed_report_its_known_issue_and_a_rule_for_the_rest(capsys, tmp_path):
    code, out, err = run(capsys, str(VLLM))
    assert code == 1 and err == ""
    assert out.startswith(f"{VLLM}: 3 failed or errored cells: 1 explained by known issues, 2 not explained")
    assert "matches known issue vllm-0.26-pooling-needs-tokenizer (broken, verified)" in out
    assert "workaround: Start pooling models with the tokenizer" in out
    assert "not explained: ModuleNotFoundError: No module named 'uvicorn' (2 cells; proposed rule " in out
    proposal = tmp_path / "proposed.yaml"
    proposal.write_text(proposed_yaml(out))
    (rule,) = load_rule_file(proposal)  # the real loader: the proposal is a valid rule
    assert rule.engine == "vllm" and rule.confidence == "verified" and rule.failure == "error-at-start"
    assert [s.ref for s in rule.sources] == [str(VLLM)]
    assert rule.signature[0].pattern == "ModuleNotFoundError: No module named 'uvicorn'"
    assert "580.159.04" in str(rule.when.driver) and str(dict(rule.when.packages)["vllm"]) == "==0.26.0"
    code, out, _ = run(capsys, str(VLLM), "--kb", str(proposal))
    assert code == 0 and ": 3 failed or errored cells: 3 explained by known issues, 0 not explained" in out


def test_json_is_all_that_goes_to_stdout(capsys):
    code, out, _ = run(capsys, str(VLLM), "--json")
    data = json.loads(out)
    assert code == 1 and (data["failed"], data["explained"], data["unexplained"]) == (3, 1, 2)
    (issue,) = data["known_issues"]
    assert issue["rule"]["id"] == "vllm-0.26-pooling-needs-tokenizer" and issue["rule"]["workaround"]
    assert issue["cells"][0]["explained_by"] == ["vllm-0.26-pooling-needs-tokenizer"]
    (group,) = data["unexplained_failures"]
    assert group["error"] == "ModuleNotFoundError: No module named 'uvicorn'" and len(group["cells"]) == 2
    assert group["proposed_rule"]["when"]["gpu"] == ["NVIDIA H200"]


def test_a_report_without_failures_is_all_explained(capsys):
    assert run(capsys, str(PASSED)) == (0, f"{PASSED}: no failed or errored cell\n", "")


INTERRUPTED = REPORTS / "h200-580.159.04-sglang-0.5.16-golden.json"  # cut by its own timeout in a memory cell


def test_a_cell_the_run_was_stopped_in_is_no_failure_of_the_stack(capsys):
    code, out, _ = run(capsys, str(INTERRUPTED))
    assert code == 1  # not judged is not explained: a gate on explain does not pass an interrupted run
    assert out.startswith(f"{INTERRUPTED}: 1 failed or errored cell: 0 explained by known issues, 0 not explained, "
                          "1 stopped with the run")
    assert "not judged: the run was stopped before this cell ended" in out
    assert "proposed rule" not in out and "rules:" not in out  # no rule for a fact about the run
    code, out, _ = run(capsys, str(INTERRUPTED), "--json")
    data = json.loads(out)
    assert (data["failed"], data["explained"], data["unexplained"]) == (1, 0, 0)
    assert [c["nodeid"].split("::")[1][:38] for c in data["stopped"]] == ["test_create_destroy_cycles_do_not_leak"]


@pytest.mark.parametrize(("reason", "interrupted", "stopped"), [
    ("did not finish: the run was stopped before the cell ended", False, True),
    ("interrupted in setup: the run was stopped before the cell ran", False, True),
    ("did not finish: the run was interrupted or its worker died", True, True),  # reports before the split
    ("did not finish: the run was interrupted or its worker died", False, False),  # so a worker died
    ("did not finish: its worker died", True, False),
    ("sglang: Engine() failed: RuntimeError", True, False),
])
def test_which_errors_are_the_runs_own(capsys, tmp_path, reason, interrupted, stopped):
    cells = [{"nodeid": "suites/test_smoke.py::test_x[tiny-qwen2-sglang]", "engine": "sglang", "outcome": "error",
              "when": "call", "reason": reason}]
    path = tmp_path / "r.json"
    write_report_atomic(Report.from_run({"name": "r", "packages": {"sglang": "0.5.16"}}, cells,
                                        interrupted=interrupted), path)
    code, out, _ = run(capsys, str(path), "--json")
    data = json.loads(out)
    assert code == 1 and (len(data["stopped"]), data["unexplained"]) == ((1, 0) if stopped else (0, 1))


def _sglang_runner(tmp_path: Path) -> Path:
    """A second runner (another GPU, driver and stack) where SGLang failed to import and vLLM's server failed."""
    fp = {"name": "h100-ci", "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}],
          "driver": "570.124.06", "cuda_driver": "12.8", "cuda_runtime": "12.8",
          "packages": {"sglang": "0.5.16", "transformers": "5.17.0", "vllm": "0.26.0", "flashinfer-python": None},
          "what_if": "fleet/h100.yaml", "host": "ci-7 (NVIDIA H100)", "workers": {"gw0": {}}}
    uvicorn = json.loads(VLLM.read_text())["cells"]
    server = next(c for c in uvicorn if c["engine"] == "openai" and c["outcome"] == "failed")
    cells = [
        {"nodeid": "suites/test_smoke.py::test_generates_requested_tokens[tiny-qwen2-sglang]", "engine": "sglang",
         "params": {"dtype": "bfloat16"}, "outcome": "error", "when": "setup",
         "reason": "sglang failed: engine process exited with status 1", "log_tail": f"Traceback ...\n{QWEN3_ASR}"},
        {**server, "runner": "h100-ci", "explained_by": []},
        {"nodeid": "suites/test_smoke.py::test_x[hf]", "engine": "hf", "outcome": "passed"},
    ]
    path = tmp_path / "h100.json"
    write_report_atomic(Report.from_run(fp, cells), path)
    return path


def test_a_merged_fleet_report_is_explained_runner_by_runner(capsys, tmp_path):
    merged = tmp_path / "fleet.json"
    write_report_atomic(merge_reports([load_report(VLLM), load_report(_sglang_runner(tmp_path))]), merged)
    code, out, _ = run(capsys, str(merged), "--json")
    data = json.loads(out)
    assert code == 1 and (data["failed"], data["explained"]) == (5, 2)
    known = {issue["rule"]["id"]: [c["runner"] for c in issue["cells"]] for issue in data["known_issues"]}
    assert known == {"vllm-0.26-pooling-needs-tokenizer": ["h200-vllm"],
                     "sglang-0.5.16-import-fails-with-transformers-5.17": ["h100-ci"]}
    (group,) = data["unexplained_failures"]  # the same failure on two runners: one proposal
    assert sorted(c["runner"] for c in group["cells"]) == ["h100-ci", "h200-vllm", "h200-vllm"]
    when = group["proposed_rule"]["when"]
    assert when["gpu"] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"] and "driver" not in when
    assert when["packages"] == {"vllm": "==0.26.0"}
    code, out, _ = run(capsys, str(merged))
    rules = yaml.safe_load(proposed_yaml(out))["rules"]
    assert [r["id"] for r in rules] == [group["proposed_rule"]["id"]]


def test_the_synthetic_fleet_of_four_runners(capsys, tmp_path):
    path = tmp_path / "fleet.json"
    write_report_atomic(fleet_report(), path)
    code, out, err = run(capsys, str(path))
    assert code == 1 and err == "" and "not explained: " in out
    proposal = tmp_path / "p.yaml"
    proposal.write_text(proposed_yaml(out))
    assert load_rule_file(proposal)
    assert run(capsys, str(path), "--kb", str(proposal))[0] == 0


@pytest.mark.parametrize(
    ("setup", "field"),
    [
        (lambda p, kb: p.write_text("{"), "not valid JSON"),
        (lambda p, kb: kb.write_text(textwrap.dedent("""
            rules:
              - {id: team-x, summary: s, severity: broken, failure: crash, confidence: upstream,
                 signature: ["(a+)+"], sources: [{kind: doc, ref: x}]}
         """)), "rule 'team-x': field 'signature[0]'"),
        (lambda p, kb: p.write_text(VLLM.read_text().replace('"driver": "580.159.04"', '"driver": "new"', 1)),
         "field 'runners.h200-vllm.driver'"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, setup, field):
    report, kb = tmp_path / "r.json", tmp_path / "kb.yaml"
    report.write_text(VLLM.read_text())
    kb.write_text("rules: []\n")
    setup(report, kb)
    code, out, err = run(capsys, str(report), "--kb", str(kb))
    assert code == 2 and out == ""
    line = assert_one_line(err, kb if "rule" in field else report, None)
    assert line.startswith("gpucompat explain: error: ") and field in line


@pytest.mark.parametrize("name", [n for n in EXPECTED if n.startswith("reports/")])
def test_hostile_reports(capsys, name):
    code, _, err = run(capsys, str(HOSTILE / name))
    assert code == 2
    assert_one_line(err, HOSTILE / name, EXPECTED[name])


def test_the_console_command(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pytest_gpucompat.cli", "explain", str(VLLM), "--json"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1 and json.loads(out.stdout)["unexplained"] == 2
    missing = subprocess.run([sys.executable, "-m", "pytest_gpucompat.cli", "explain", str(tmp_path / "no.json")],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no such file" in missing.stderr


# --------------------------------------------------------------------------- the plugin and the renderings

RULES = textwrap.dedent("""
    rules:
      - id: team-asr-config-clash
        summary: SGLang cannot be imported next to this transformers
        severity: broken
        failure: error-at-start
        engine: sglang
        signature: ["'qwen3_asr' is already used by a Transformers config"]
        workaround: Install the transformers SGLang pins.
        confidence: upstream
        sources: [{kind: code, ref: x}]
      - id: team-engine-log-says-so
        summary: the fake engine refuses to start
        severity: broken
        failure: error-at-start
        signature: ['^FATAL: no device [0-9]+$']
        workaround: Give it a device.
        confidence: upstream
        sources: [{kind: code, ref: x}]
      - id: team-other-engine
        summary: the same words from vLLM
        severity: broken
        failure: error-at-start
        engine: vllm
        signature: ["'qwen3_asr' is already used"]
        confidence: upstream
        sources: [{kind: code, ref: x}]
""")
FAKE_ENGINE = textwrap.dedent("""
    from pytest_gpucompat.catalog.base import EngineFailed

    class Refuses:
        name = "refuses"

        def start(self, spec):
            raise EngineFailed("refused to start", log_tail="INFO probing\\nFATAL: no device 3\\nINFO bye")

        def shutdown(self):
            pass
""")
TEST = textwrap.dedent('''
    import pytest

    @pytest.mark.gpucompat(engine="sglang", params={"dtype": ["bfloat16"]})
    def test_import(gpucompat_cell):
        raise ValueError("""'qwen3_asr' is already used by a Transformers config, pick another name.""")

    @pytest.mark.gpucompat(engine="fake_engine:Refuses", params={"isolated": [False]})
    def test_start(gpucompat_cell, gpucompat_engine):
        pass

    @pytest.mark.gpucompat(engine="sglang", params={"dtype": ["float16"]})
    def test_unknown(gpucompat_cell):
        raise RuntimeError("something nobody has seen")
''')


def test_a_plugin_run_records_which_known_issue_a_failure_is(pytester, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    pytester.makefile(".yaml", rules=RULES)
    pytester.makepyfile(fake_engine=FAKE_ENGINE, test_cells=TEST)
    pytester.syspathinsert()
    result = pytester.runpytest("--gpucompat", "--gpucompat-kb", "rules.yaml", "--gpucompat-no-builtin-rules",
                                "--gpucompat-report", "r.json", "-p", "no:randomly")
    result.assert_outcomes(failed=2, errors=1)
    result.stdout.fnmatch_lines(["*test_import*: matches known issue team-asr-config-clash; workaround: Install the "
                                 "transformers SGLang pins."])
    report = load_report(pytester.path / "r.json")
    cells: dict[str, Any] = {c.nodeid.split("::")[1].split("[")[0]: c for c in report.cells}
    assert [e["id"] for e in cells["test_import"].explained_by] == ["team-asr-config-clash"]
    assert cells["test_import"].explained_by[0]["workaround"] == "Install the transformers SGLang pins."
    assert [e["id"] for e in cells["test_start"].explained_by] == ["team-engine-log-says-so"]  # from its log tail
    assert cells["test_unknown"].explained_by == ()
    raw = json.loads((pytester.path / "r.json").read_text())
    assert "explained_by" not in next(c for c in raw["cells"] if "test_unknown" in c["nodeid"])

    junit = render_junit(report)
    assert '<property name="explained_by" value="team-asr-config-clash" />' in junit
    assert "(matches known issue team-engine-log-says-so)" in junit and "workaround: Give it a device." in junit
    md = render_markdown(report)
    assert "**FAILED** (known issue `team-asr-config-clash`)" in md
    assert "Matches known issue `team-asr-config-clash`: SGLang cannot be imported next to this transformers; " \
           "workaround: Install the transformers SGLang pins." in md
    html = render_html(report)
    assert "matches known issue team-engine-log-says-so" in html
    assert '"explained_by":[{"id":"team-asr-config-clash"' in html
    code = main(["explain", str(pytester.path / "r.json"), "--kb", str(pytester.path / "rules.yaml"),
                 "--no-builtin-rules"])
    assert code == 1
