"""The fingerprint's `installs`: each installed engine's declared requirements checked against what is installed, its
acceleration packages, hand-written `installs` validated, and the notice at the top of a report on such an install."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.catalog.registry import descriptors, tracked_packages
from pytest_gpucompat.common.errors import InputError
from pytest_gpucompat.common.installed import find, normalize, requirements
from pytest_gpucompat.machine import fingerprint as fpmod
from pytest_gpucompat.machine import installs as installs_mod
from pytest_gpucompat.machine.installs import EngineInstall, engine_installs

OTHER_PLATFORM = "win32" if sys.platform != "win32" else "linux"


def dist(site: Path, name: str, version: str, requires: list[str] = (), kind: str = "dist-info") -> Path:  # type: ignore[assignment]
    """A distribution's metadata directory as an installer leaves it (a description after the headers)."""
    folder = site / f"{name.replace('-', '_')}-{version}.{kind}"
    folder.mkdir(parents=True)
    headers = "".join(f"Requires-Dist: {line}\n" for line in requires)
    if kind == "egg-info":  # setuptools: requirements in requires.txt, not in PKG-INFO
        (folder / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (folder / "requires.txt").write_text("".join(f"{line}\n" for line in requires))
        return folder
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{headers}\n"
                                     "Requires-Dist: from-the-description-not-a-header\n")
    return folder


@pytest.fixture
def site(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A sys.path of one empty site directory: only what a test puts there is installed."""
    monkeypatch.setattr(sys, "path", [str(tmp_path)])
    return tmp_path


def test_a_complete_install(site: Path) -> None:
    dist(site, "vllm", "0.26.0", ["flashinfer-python==0.6.14", "torch>=2.9", "numpy"])
    dist(site, "flashinfer_python", "0.6.14")
    dist(site, "torch", "2.9.0+cu128")  # a local version satisfies ==/>= of its public one
    dist(site, "numpy", "2.1.0")
    installs = engine_installs()
    assert installs == {"vllm": EngineInstall(version="0.26.0", complete=True, missing=(),
                                                   acceleration={"flashinfer-python": "0.6.14"})}


def test_missing_and_wrong_versions_are_listed_sorted_with_why(site: Path) -> None:
    dist(site, "vllm", "0.26.0", ["xgrammar==0.2.9", "flashinfer-python==0.6.14", "Flash_Attn>=2.7",
                                   "torch==2.9.0", "numpy"])
    dist(site, "xgrammar", "0.2.7")
    dist(site, "flash-attn", "2.8.3")  # Flash_Attn is flash-attn (PEP 503)
    dist(site, "torch", "2.8.0")
    reasons: list[str] = []
    install = engine_installs(reasons)["vllm"]
    assert install.complete is False and reasons == []
    assert install.missing == ("flashinfer-python==0.6.14 (not installed)", "numpy (not installed)",
                               "torch==2.9.0 (2.8.0 installed)", "xgrammar==0.2.9 (0.2.7 installed)")
    assert install.acceleration == {"flash-attn": "2.8.3"}


def test_only_requirements_that_apply_here_without_extras_count(site: Path) -> None:
    dist(site, "sglang", "0.5.20", [
        f'mac-or-windows-only ; sys_platform == "{OTHER_PLATFORM}"',  # another platform's
        'ancient-python-only ; python_version < "3"',
        'test-tool ; extra == "test"',  # an extra's: ignored
        'srt-kernel==1.0 ; extra == "srt" and sys_platform != "nowhere"',
        'needed-here>=1 ; python_version >= "3"',  # a marker that holds here: counted
        "needed-here>=1",  # the same requirement twice is listed once
    ])
    install = engine_installs()["sglang"]
    assert install.missing == ("needed-here>=1 (not installed)",)  # the text without its marker
    assert install.complete is False and install.acceleration == {}


def test_acceleration_packages_present_and_absent(site: Path) -> None:
    dist(site, "sglang", "0.5.20")
    dist(site, "sgl_kernel", "0.3.21")
    dist(site, "Flashinfer_Cubin", "0.6.13")
    dist(site, "xformers", "0.0.35")  # not one of SGLang's acceleration packages
    installs = engine_installs()
    assert list(installs) == ["sglang"]  # engines not installed are left out
    assert installs["sglang"].acceleration == {"sgl-kernel": "0.3.21", "flashinfer-cubin": "0.6.13"}
    assert installs["sglang"].complete is True


def test_the_acceleration_lists_live_on_the_descriptors() -> None:
    checked = [d for d in descriptors() if d.packages]
    assert [d.name for d in checked] == list(tracked_packages())
    for d in checked:
        assert d.acceleration, d.name
        assert all(normalize(name) == name for name in d.acceleration), d.name  # as the fingerprint keys them
        assert len(set(d.acceleration)) == len(d.acceleration), d.name
    assert "flashinfer-python" in checked[0].acceleration and "sglang-kernel" in checked[1].acceleration
    assert all(not d.acceleration for d in descriptors() if not d.packages)


def test_no_engine_installed_means_no_installs(site: Path) -> None:
    dist(site, "flashinfer_python", "0.6.14")
    assert engine_installs() == {}


def test_requirements_that_cannot_be_read_or_judged_leave_complete_unknown(
        site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist(site, "vllm", "0.26.0", ["numpy", "not a requirement ((("])
    dist(site, "tensorrt_llm", "1.2.0", ["numpy"])
    reasons: list[str] = []
    installs = engine_installs(reasons)
    assert installs["vllm"] == EngineInstall(version="0.26.0", complete=None, missing=(), acceleration={})
    assert installs["tensorrt-llm"].complete is False  # one engine's bad metadata does not touch another's
    assert len(reasons) == 1 and reasons[0].startswith("vllm 0.26.0: requirement 'not a requirement ((('")

    def unreadable(name: str, found: Any) -> list[str]:
        raise OSError(f"[Errno 5] Input/output error: '{found.metadata}/METADATA'")

    monkeypatch.setattr(installs_mod, "requirements", unreadable)
    reasons = []
    installs = engine_installs(reasons)
    assert {k: v.complete for k, v in installs.items()} == {"vllm": None, "tensorrt-llm": None}
    assert reasons[0].startswith("vllm 0.26.0: its requirements cannot be read: [Errno 5]")


def test_requirements_read_from_a_wheel_and_from_an_egg(site: Path) -> None:
    dist(site, "vllm", "0.26.0", ["numpy>=2", 'torch==2.9.0 ; platform_machine == "x86_64"'])
    dist(site, "sglang", "0.5.0", ["numpy>=2", 'triton ; extra == "srt"'], kind="egg-info")
    found = find(["vllm", "sglang"])
    assert requirements("vllm", found["vllm"]) == ["numpy>=2", 'torch==2.9.0 ; platform_machine == "x86_64"']
    assert requirements("sglang", found["sglang"])[0] == "numpy>=2"  # requires.txt, through importlib.metadata
    assert engine_installs()["sglang"].missing == ("numpy>=2 (not installed)",)


def test_collect_and_to_dict_write_the_shape_others_read(site: Path) -> None:
    dist(site, "vllm", "0.26.0", ["flashinfer-python==0.6.14", "xgrammar==0.2.9"])
    dist(site, "xgrammar", "0.2.7")
    dist(site, "flash_attn", "2.8.3")
    data = json.loads(json.dumps(fpmod.collect("r1").to_dict()))
    assert data["installs"] == {"vllm": {
        "version": "0.26.0", "complete": False,
        "missing": ["flashinfer-python==0.6.14 (not installed)", "xgrammar==0.2.9 (0.2.7 installed)"],
        "acceleration": {"flash-attn": "2.8.3"},
    }}
    assert json.loads(json.dumps(fpmod.Fingerprint(name="x").to_dict()))["installs"] == {}


def test_gpucompat_env_shows_each_install(site: Path) -> None:
    from pytest_gpucompat.cli import format_fingerprint

    fp = fpmod.Fingerprint(name="x", installs={
        "vllm": EngineInstall("0.26.0", False, ("flashinfer-python==0.6.14 (not installed)",),
                                    {"flash-attn": "2.8.3"}),
        "sglang": EngineInstall("0.5.20", True, (), {"sglang-kernel": "0.4.7", "flashinfer-python": "0.6.13"}),
        "tensorrt-llm": EngineInstall("1.2.0", None),
    })
    lines = format_fingerprint(fp).splitlines()
    assert ("install:       vllm 0.26.0: incomplete install: missing flashinfer-python==0.6.14 (not installed); "
            "acceleration flash-attn 2.8.3") in lines
    assert ("install:       sglang 0.5.20: complete install; acceleration sglang-kernel 0.4.7, flashinfer-python "
            "0.6.13") in lines
    assert any(line.startswith("install:       tensorrt-llm 1.2.0: install not checked") for line in lines)
    assert not [line for line in format_fingerprint(fpmod.Fingerprint(name="y")).splitlines()
                if line.startswith("install:")]


def test_gpucompat_env_reads_them_without_importlib_metadata(tmp_path: Path) -> None:
    dist(tmp_path, "vllm", "0.26.0", ["flashinfer-python==0.6.14"])
    code = ("import sys, io, json, contextlib\nfrom pytest_gpucompat.cli import main\nout = io.StringIO()\n"
            "with contextlib.redirect_stdout(out): main(['env', '--json'])\n"
            "print(json.dumps([json.loads(out.getvalue())['installs'], 'importlib.metadata' in sys.modules]))")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    installs, imported = json.loads(out)
    assert installs["vllm"]["missing"] == ["flashinfer-python==0.6.14 (not installed)"] and imported is False


# --------------------------------------------------------------------------- hand-written and report fingerprints


def test_hand_written_installs_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "box.yaml"
    path.write_text("installs:\n  trtllm: {version: 1.2.0, missing: ['flashinfer-python==0.2.5 (not installed)']}\n"
                    "  vllm: {version: 0.26.0, complete: true, acceleration: {Flash_Attn: 2.8.3}}\n"
                    "  sglang: {version: 0.5.20}\n")
    fp = fpmod.load(path)["box"]
    assert fp.installs == {
        "tensorrt-llm": EngineInstall("1.2.0", False, ("flashinfer-python==0.2.5 (not installed)",)),
        "vllm": EngineInstall("0.26.0", True, (), {"flash-attn": "2.8.3"}),
        "sglang": EngineInstall("0.5.20", None),  # neither complete nor missing: not known
    }
    again = tmp_path / "again.json"
    again.write_text(json.dumps(fp.to_dict()))
    assert fpmod.load(again)["box"].installs == fp.installs
    old = fp.to_dict()
    del old["installs"]  # written before the field existed
    again.write_text(json.dumps(old))
    assert fpmod.load(again)["box"].installs == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("installs: [vllm]\n", "field 'installs': must map engine names"),
        ("installs: {vllm: complete}\n", "field 'installs.vllm': must be a mapping"),
        ("installs: {vllm: {complete: 'no'}}\n", "field 'installs.vllm.complete': must be true or false, not 'no'"),
        ("installs: {vllm: {complete: 1}}\n", "field 'installs.vllm.complete': must be true or false"),
        ("installs: {vllm: {complete: true, missing: ['x (not installed)']}}\n",
         "field 'installs.vllm.complete': is true, but `missing` lists"),
        ("installs: {vllm: {missing: flashinfer}}\n", "field 'installs.vllm.missing': must be a list"),
        ("installs: {vllm: {missing: [1]}}\n", "field 'installs.vllm.missing[0]': must be a requirement"),
        ("installs: {vllm: {missing: [null]}}\n", "field 'installs.vllm.missing[0]'"),
        ("installs: {vllm: {version: latest}}\n", "field 'installs.vllm.version': 'latest' is not a version"),
        ("installs: {vllm: {version: [1]}}\n", "field 'installs.vllm.version': must be a string"),
        ("installs: {vllm: {acceleration: [flash-attn]}}\n", "field 'installs.vllm.acceleration': must map"),
        ("installs: {vllm: {acceleration: {flash-attn: null}}}\n",
         "field 'installs.vllm.acceleration.flash-attn': 'None' is not a version"),
        ("installs: {vllm: {completed: true}}\n", "field 'installs.vllm.completed': unknown key"),
        ("installs: {hf: {complete: true}}\n", "field 'installs.hf': not an engine whose install is checked"),
        ("installs: {tgi: {complete: true}}\n", "field 'installs.tgi': not an engine whose install is checked"),
        ("fleet: {a: {installs: {sglang: {complete: yes please}}}}\n", "field 'fleet.a.installs.sglang.complete'"),
    ],
)
def test_bad_hand_written_installs_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        fpmod.load(path)
    assert str(info.value).startswith(f"{path}: field ") and "\n" not in str(info.value)
    assert message in str(info.value)


INCOMPLETE = {"vllm": {"version": "0.26.0", "complete": False, "acceleration": {"flash-attn": "2.8.3"},
                       "missing": ["flashinfer-python==0.6.14 (not installed)", "xgrammar==0.2.9 (0.2.7 installed)"]}}
COMPLETE = {"vllm": {"version": "0.26.0", "complete": True, "missing": [], "acceleration": {}}}
NOTICE = ("vllm 0.26.0 on ci-h200 is installed without its declared requirements: flashinfer-python==0.6.14 "
          "(not installed), xgrammar==0.2.9 (0.2.7 installed): it picks other backends than a default install")


def test_from_report_keeps_installs() -> None:
    fp = fpmod.from_report({"name": "ci-h200", "installs": INCOMPLETE, "what_if": "x.yaml"}, "r.json", "ci-h200")
    assert fp.installs["vllm"].complete is False and fp.installs["vllm"].missing[0].startswith("flashinfer-python")


def _report(installs: dict[str, Any] | None, runner: str = "ci-h200") -> Any:
    from pytest_gpucompat.report.model import Report

    fingerprint: dict[str, Any] = {"name": runner, "packages": {"vllm": "0.26.0"}}
    if installs is not None:
        fingerprint["installs"] = installs
    cells = [{"nodeid": "suites/test_x.py::test_x[tiny-vllm]", "engine": "vllm", "outcome": "failed",
              "reason": "AssertionError: tokens differ"}]
    return Report.from_dict(json.loads(Report.from_run(fingerprint, cells, created="2026-01-31T12:00:00Z").to_json()))


def test_the_json_report_keeps_installs_and_checks_their_types() -> None:
    from pytest_gpucompat.report.model import Report, ReportError

    report = _report(INCOMPLETE)
    assert report.runners["ci-h200"]["installs"] == INCOMPLETE
    data = json.loads(report.to_json())
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(fpmod.__file__).parent.parent / "report" / "schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(data)
    for bad, where in [(["vllm"], ".installs: expected object"),
                       ({"vllm": {"complete": "no"}}, ".installs.vllm.complete: expected boolean or null"),
                       ({"vllm": {"missing": [3]}}, ".installs.vllm.missing[0]: expected string"),
                       ({"vllm": {"acceleration": {"flash-attn": 2}}},
                        '.installs.vllm.acceleration["flash-attn"]: expected string')]:
        data["runners"]["ci-h200"]["installs"] = bad
        with pytest.raises(ReportError) as info:
            Report.from_dict(data)
        assert str(info.value).startswith(f'report: $.runners["ci-h200"]{where}')


def test_a_report_on_an_incomplete_install_says_so_at_the_top() -> None:
    from pytest_gpucompat.report.html import render_html
    from pytest_gpucompat.report.markdown import render_markdown

    report = _report(INCOMPLETE)
    md = render_markdown(report)
    assert f"> {NOTICE}." in md.replace("\\", "")  # escaped for Markdown, the same words
    assert md.index("[!WARNING]") < md.index("### Runners") < md.index("test_x")
    page = render_html(report)
    at = page.index('id="incomplete-installs"')
    assert at < page.index("<main>") and NOTICE in page
    for installs in (None, COMPLETE, {"vllm": {"version": "0.26.0", "complete": None}}):  # old, complete, unknown
        quiet = _report(installs)
        assert "declared requirements" not in render_markdown(quiet) and "[!WARNING]" not in render_markdown(quiet)
        assert 'id="incomplete-installs"' not in render_html(quiet) and "declared requirements" not in render_html(
            quiet)


def test_an_old_report_renders_as_before() -> None:
    from pytest_gpucompat.report.markdown import render_markdown

    assert render_markdown(_report(None)) == render_markdown(_report(COMPLETE))


def test_the_notice_cannot_break_out_of_its_markup() -> None:
    from pytest_gpucompat.report.html import render_html
    from pytest_gpucompat.report.markdown import render_markdown

    evil = {"vllm": {"version": "0.26.0", "complete": False, "missing": ["<script>x</script>|`y`\n> [!x]"]}}
    report = _report(evil, runner="r<b>")
    page = render_html(report)
    assert "<script>x</script>" not in page and "r<b>" not in page
    md = render_markdown(report)
    notice = [line for line in md.splitlines() if "declared requirements" in line]
    assert len(notice) == 1 and "<script>" not in notice[0] and "|" not in notice[0].replace("\\|", "")
