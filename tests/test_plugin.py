"""The pytest side, through pytester: marks, ids, not-covered cells, reports, bad input, xdist."""

from __future__ import annotations

import gc
import json
import textwrap

import pytest
from conftest import requires

RULES = textwrap.dedent("""
    rules:
      - id: t-fp8-kv-crash
        summary: fp8 KV cache crashes before sm89
        severity: broken
        failure: crash
        engine: vllm
        confidence: upstream
        when: {compute_capability: "<8.9", params: {kv_cache_dtype: [fp8_e4m3]}}
        sources: [{kind: code, ref: x}]
      - id: t-tp-garbles
        summary: TP over PCIe garbles output
        severity: broken
        failure: wrong-output
        engine: vllm
        confidence: upstream
        when: {params: {tensor_parallel_size: [2]}}
        sources: [{kind: code, ref: x}]
      - id: t-docs-says-tp-hangs
        summary: an article says TP hangs
        severity: broken
        failure: hang
        engine: vllm
        confidence: documents
        when: {params: {tensor_parallel_size: ">=4"}}
        sources: [{kind: seed, ref: "000 §3"}]
      - id: t-slow-eager
        summary: eager mode is slower
        severity: degraded
        failure: slow
        engine: vllm
        confidence: upstream
        when: {params: {enforce_eager: [true]}}
        sources: [{kind: doc, ref: x}]
""")
OWN_RULES = ("--gpucompat-kb", "rules.yaml", "--gpucompat-no-builtin-rules")
A100 = 'name: a100-runner\ngpus: [{name: "NVIDIA A100-SXM4-80GB", compute_capability: "8.0"}]\ndriver: "550.54.15"\n'
TEST = textwrap.dedent("""
    import pytest

    @pytest.mark.gpucompat(engine="vllm", params={"kv_cache_dtype": ["auto", "fp8_e4m3"],
                                                  "tensor_parallel_size": [1, 2, 4]})
    def test_cell(gpucompat_cell, gpucompat_record, gpucompat_findings):
        gpucompat_record("tokens_per_s", 100.0 * gpucompat_cell.params["tensor_parallel_size"])
        if gpucompat_cell.params["tensor_parallel_size"] == 2:
            assert False, "garbled"
""")


@pytest.fixture
def project(pytester):
    pytester.makefile(".yaml", rules=RULES, a100=A100)
    pytester.makepyfile(test_matrix=TEST)
    return pytester


def cells_of(path):
    return {c["nodeid"].split("[", 1)[1].rstrip("]"): c for c in json.loads(path.read_text())["cells"]}


def test_without_the_option_nothing_changes(project):
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.no_fnmatch_line("*gpucompat:*rules*")
    result = project.runpytest("-rs")
    result.stdout.fnmatch_lines(["*run pytest with --gpucompat*"])


def test_ini_option_enables(project):
    project.makeini("[pytest]\ngpucompat = true\n")
    result = project.runpytest("--gpucompat-env", "a100.yaml", *OWN_RULES, "--co", "-q")
    result.stdout.fnmatch_lines(["*test_cell[[]vllm-kv_cache_dtype=auto-tensor_parallel_size=1[]]*"])


def test_marks_from_rules_and_report(project):
    result = project.runpytest("--gpucompat", "--gpucompat-env", "a100.yaml", *OWN_RULES,
                               "--gpucompat-report", "out.json", "-rsxX")
    # auto/tp1 passes; tp2 strict-xfails (known wrong output, upstream); tp4 runs as usual (its rule is an
    # unconfirmed claim: documents only) and passes, evidence against the claim; fp8 cells skip (known crash)
    result.assert_outcomes(passed=2, xfailed=1, skipped=3)
    result.stdout.fnmatch_lines([
        "*gpucompat: what-if a100-runner: NVIDIA A100-SXM4-80GB, driver 550.54.15*",
        "*known bad here: [[]t-fp8-kv-crash[]]*",
    ])
    cells = cells_of(project.path / "out.json")
    assert len(cells) == 6
    assert cells["vllm-kv_cache_dtype=auto-tensor_parallel_size=1"]["outcome"] == "passed"
    assert cells["vllm-kv_cache_dtype=auto-tensor_parallel_size=1"]["metrics"]["tokens_per_s"] == 100.0
    tp2 = cells["vllm-kv_cache_dtype=auto-tensor_parallel_size=2"]
    assert tp2["outcome"] == "xfailed" and tp2["rules"] == ["t-tp-garbles"]
    tp4 = cells["vllm-kv_cache_dtype=auto-tensor_parallel_size=4"]
    assert tp4["outcome"] == "passed"  # an unconfirmed claim never xfails, skips or colours a cell
    assert tp4["rules"] == ["t-docs-says-tp-hangs"]
    assert tp4["findings"][0]["unconfirmed"] is True and tp4["findings"][0]["action"] == "annotate"
    result.stdout.fnmatch_lines(["*evidence against rule(s) t-docs-says-tp-hangs:*tensor_parallel_size=4*passed*"])
    from pytest_gpucompat.report import load_report
    from pytest_gpucompat.report.diff import stale_rules

    stale = {s.rule_id: s for s in stale_rules(load_report(project.path / "out.json"))}
    assert list(stale) == ["t-docs-says-tp-hangs"] and stale["t-docs-says-tp-hangs"].confidence == "documents"
    fp8 = cells["vllm-kv_cache_dtype=fp8_e4m3-tensor_parallel_size=1"]
    assert fp8["outcome"] == "skipped" and "t-fp8-kv-crash" in fp8["reason"]
    report = json.loads((project.path / "out.json").read_text())
    assert report["runners"]["a100-runner"]["driver"] == "550.54.15"


def test_run_known_bad_turns_skips_into_strict_xfail(project):
    result = project.runpytest("--gpucompat", "--gpucompat-env", "a100.yaml", *OWN_RULES,
                               "--gpucompat-run-known-bad")
    # fp8 cells now run as strict xfail; they pass in this toy test, so strict xfail fails them (XPASS strict),
    # but for the one that tensor_parallel_size=2 garbles: it fails as expected
    outcomes = {k: v for k, v in result.parseoutcomes().items() if k not in ("warning", "warnings")}
    assert outcomes == {"passed": 2, "failed": 2, "xfailed": 2}, outcomes
    result.stdout.fnmatch_lines_random([
        "FAILED *test_cell[[]vllm-kv_cache_dtype=fp8_e4m3-tensor_parallel_size=1[]] - [[]XPASS(st*",
        "FAILED *test_cell[[]vllm-kv_cache_dtype=fp8_e4m3-tensor_parallel_size=4[]] - [[]XPASS(st*",
    ])


def test_degraded_findings_are_attached_not_acted_on(pytester):
    pytester.makefile(".yaml", rules=RULES, a100=A100)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="vllm", params={"enforce_eager": [True, False]})
        def test_cell(gpucompat_cell, gpucompat_findings):
            ids = [f.id for f in gpucompat_findings]
            assert ids == (["t-slow-eager"] if gpucompat_cell.params["enforce_eager"] else [])
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-env", "a100.yaml", *OWN_RULES)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["DEGRADED: runs, but slower*(1)", "  [[]t-slow-eager[]] *(1 cell)"])


def test_version_axes_not_covered_here(pytester):
    pytester.makefile(".yaml", a100=A100)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="hf", axes={"driver": [">=550,<560", ">=580"], "gpu": ["*A100*", "*H200*"]})
        def test_cell(gpucompat_cell):
            pass
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-env", "a100.yaml", "--gpucompat-report", "r.json", "-rs")
    result.assert_outcomes(passed=1, skipped=3)
    result.stdout.fnmatch_lines(["*not covered here: needs driver >=580 (this runner: 550.54.15)*"])
    cells = cells_of(pytester.path / "r.json")
    assert cells["hf-driver=>=550,<560-gpu=*A100*"]["outcome"] == "passed"
    assert cells["hf-driver=>=580-gpu=*H200*"]["outcome"] == "not-covered"


def test_named_matrix_and_bad_marker(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(matrix="no-such-matrix")
        def test_cell(gpucompat_cell):
            pass
    """)
    result = pytester.runpytest("--gpucompat")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error
    result.stdout.fnmatch_lines(["*gpucompat(matrix)': no matrix named 'no-such-matrix'*"])
    assert "Traceback" not in result.stdout.str()


@pytest.mark.parametrize(
    ("name", "content", "option", "fragment"),
    [
        ("bad_kb.yaml", "rules: [{id: x}]\n", "--gpucompat-kb", "rule 'x': field 'summary': required"),
        ("bad_env.yaml", "driver: soon\n", "--gpucompat-env", "field 'driver'"),
    ],
)
def test_bad_input_is_one_line_usage_error(pytester, name, content, option, fragment):
    pytester.makefile(".yaml", **{name.removesuffix(".yaml"): content})
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--gpucompat", option, name)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{name}*{fragment}*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


def test_policy_hook_can_override(project):
    project.makeconftest("""
        from pytest_gpucompat.kb import Decision

        def pytest_gpucompat_decide(config, cell, findings, fingerprint):
            return Decision("run", False, "team policy: run everything", tuple(findings))
    """)
    result = project.runpytest("--gpucompat", "--gpucompat-env", "a100.yaml", *OWN_RULES)
    result.assert_outcomes(passed=4, failed=2)


def test_fleet_preview_before_running(project):
    project.makefile(".yaml", fleet="fleet:\n  a100: {gpus: [{name: A100, compute_capability: '8.0'}]}\n"
                                    "  h200: {gpus: [{name: H200, compute_capability: '9.0'}]}\n")
    result = project.runpytest("--gpucompat", "--gpucompat-env", "fleet.yaml", *OWN_RULES)
    result.stdout.fnmatch_lines([
        "*gpucompat fleet preview: 6 cells x 2 runners*",
        "*a100: A100*",
        "*skip*fp8_e4m3*t-fp8-kv-crash*",
        "*h200: H200*",
    ])


def test_interrupted_run_still_writes_the_report(pytester):
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="hf", params={"n": [1, 2, 3]})
        def test_cell(gpucompat_cell):
            if gpucompat_cell.params["n"] == 2:
                raise KeyboardInterrupt
    """)
    result = pytester.runpytest_subprocess("--gpucompat", "--gpucompat-report", "r.json")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["interrupted"] is True
    assert [c["outcome"] for c in report["cells"]] == ["passed", "error", "error"]
    assert report["cells"][1]["reason"] == "did not finish: the run was stopped before the cell ended"
    assert report["cells"][2]["reason"] == "not run: the run was stopped before the cell started"  # not missing


def test_xdist_same_ids_and_one_report(project):
    pytest.importorskip("xdist")
    result = project.runpytest("--gpucompat", "--gpucompat-env", "a100.yaml", *OWN_RULES,
                               "-n", "2", "--gpucompat-report", "x.json")
    result.assert_outcomes(passed=2, xfailed=1, skipped=3)
    cells = cells_of(project.path / "x.json")
    assert len(cells) == 6
    assert {c["worker"] for c in cells.values() if c["outcome"] == "passed"} <= {"gw0", "gw1"}


def test_xdist_crashed_worker_cell_is_failed_not_missing(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile("""
        import os, pytest

        @pytest.mark.gpucompat(engine="hf", params={"n": [1, 2]})
        def test_cell(gpucompat_cell):
            if gpucompat_cell.params["n"] == 2:
                os._exit(3)
    """)
    result = pytester.runpytest("--gpucompat", "-n", "1", "--gpucompat-report", "r.json")
    report = json.loads((pytester.path / "r.json").read_text())
    outcomes = {c["nodeid"].split("[")[1]: c["outcome"] for c in report["cells"]}
    assert outcomes == {"hf-n=1]": "passed", "hf-n=2]": "failed"}
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_xdist_carries_a_real_engine_cell_to_the_report(pytester):
    """What an engine reports about itself (torch's own version type included) must cross xdist's channel."""
    pytest.importorskip("xdist")
    requires("transformers")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
        def test_generate(gpucompat_cell, gpucompat_engine, gpucompat_record):
            out = gpucompat_engine.engine.generate([[5, 6, 7]], 4, 2)
            gpucompat_record("tokens", len(out[0].token_ids))
            assert len(out[0].token_ids) == 4
    """)
    result = pytester.runpytest("--gpucompat", "-n", "1", "--gpucompat-report", "r.json")
    result.assert_outcomes(passed=1)
    (cell,) = json.loads((pytester.path / "r.json").read_text())["cells"]
    assert cell["metrics"]["tokens"] == 4.0 and cell["metrics"]["start_s"] > 0
    assert cell["engine_info"]["extra"]["torch"].startswith("2.")


def test_cells_record_the_time_spent_inside_engines(pytester):
    """engine_s: starts a cell triggered, its calls and the reference's, so the benchmark can tell engine time from
    the harness's own; the deterministic reference answers a repeated question from memory."""
    requires("transformers")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
        def test_a(gpucompat_cell, gpucompat_engine, gpucompat_reference):
            ref = gpucompat_reference.engine.generate([[5, 6, 7]], 4, 2)
            assert gpucompat_engine.engine.generate([[5, 6, 7]], 4, 2)[0].token_ids == ref[0].token_ids

        @pytest.mark.gpucompat(engine="hf", params={"dtype": ["float32"]})
        def test_b(gpucompat_cell, gpucompat_engine, gpucompat_reference):
            ref = gpucompat_reference.engine.generate([[5, 6, 7]], 4, 2)
            again = gpucompat_reference.engine.generate([[5, 6, 7]], 4, 2)
            assert again[0].token_ids == ref[0].token_ids
            assert gpucompat_engine.engine.generate([[5, 6, 7]], 4, 2)[0].token_ids == ref[0].token_ids
    """)
    result = pytester.runpytest("--gpucompat", "--gpucompat-report", "r.json")
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "r.json").read_text())
    cells = {c["nodeid"].split("::")[1].split("[")[0]: c for c in report["cells"]}
    a, b = cells["test_a"]["metrics"], cells["test_b"]["metrics"]
    # test_a started the engine (the reference is the same spec: hf float32) and asked both
    assert 0 < a["start_s"] <= a["engine_s"] <= cells["test_a"]["duration_s"]
    assert 0 < a["reference_s"] < a["engine_s"]
    # test_b reused the started engine and got the reference's answers from memory
    assert b.get("reference_s", 0.0) < 0.01
    assert 0 < b["engine_s"] <= cells["test_b"]["duration_s"]


def test_what_a_run_freezes_for_the_garbage_collector_is_given_back(project):
    """The plugin freezes what exists once the tests are collected (``gc.freeze``) and unfreezes it when pytest
    cleans up; objects that something else froze before the run stay frozen."""
    assert gc.get_freeze_count() == 0
    project.runpytest("--gpucompat", "--gpucompat-env", "a100.yaml", *OWN_RULES).assert_outcomes(
        passed=2, xfailed=1, skipped=3)
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        project.runpytest("--gpucompat", "--gpucompat-env", "a100.yaml", *OWN_RULES)
        assert gc.get_freeze_count() > frozen // 2  # still frozen (less what was freed since, by reference counts)
    finally:
        gc.unfreeze()
