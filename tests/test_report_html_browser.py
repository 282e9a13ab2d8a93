"""The HTML report in a real headless Chromium: it renders, runs without JS errors, and a click shows details.

The page has a test-only mode (`#selftest`): on load it exercises the filters, clicks the first cell and the
most detailed failing cell, and writes the result into `#gc-selftest`; JS errors, CSP violations and
console.error calls are recorded into `#gc-errors`. `--dump-dom` gives us that DOM, `--screenshot` a PNG.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_gpucompat.report.html import render_html
from pytest_gpucompat.report.merge import merge_reports
from pytest_gpucompat.report.model import OUTCOMES, Report

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> str:
    for name in CHROMIUM_CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no headless Chromium found (install the Debian package `chromium`)")


def _fingerprint(name: str, gpu: str, count: int) -> dict[str, Any]:
    return {
        "schema": 1,
        "name": name,
        "gpus": [
            {
                "index": i,
                "name": gpu,
                "architecture": "hopper",
                "compute_capability": "9.0",
                "memory_mib": 143771,
                "ecc": True,
                "mig": False,
            }
            for i in range(count)
        ],
        "driver": "580.159.04",
        "cuda_driver": "13.0",
        "cuda_runtime": "13.0",
        "links": [{"a": 0, "b": 1, "kind": "nvlink", "path": "NV18"}] if count > 1 else [],
        "interconnect": "nvlink" if count > 1 else None,
        "packages": {"torch": "2.11.0+cu130", "vllm": "0.26.0"},
        "os": "Linux-6.8",
        "libc": "glibc 2.36",
        "python": "3.12.3",
        "container": None,
        "cuda_visible_devices": None,
        "params": {},
        "reasons": [] if count else ["NVML not available: libnvidia-ml.so.1: cannot open shared object file"],
    }


def _report() -> Report:
    finding = {
        "id": "vllm-fp8-kv-cache-ampere-backend",
        "severity": "broken",
        "confidence": "documents",
        "summary": "FP8 KV cache </script><script>alert(1)</script>",
        "action": "xfail",
    }
    reports = []
    for runner, gpu, count, shift in (
        ("h200", "NVIDIA H200", 8, 0),
        ("a100", "NVIDIA A100-SXM4-80GB", 1, 2),
        ("cpu-only", "", 0, 4),
    ):
        cells = []
        for i in range(len(OUTCOMES)):
            outcome = OUTCOMES[(i + shift) % len(OUTCOMES)]
            cells.append(
                {
                    "nodeid": f"suites/test_smoke.py::test_generate[vllm-case{i}]",
                    "test": "suites/test_smoke.py::test_generate",
                    "engine": "vllm" if i % 2 else "hf",
                    "params": {"dtype": "bfloat16", "case": i},
                    "axes": {},
                    "outcome": outcome,
                    "reason": f"{outcome}: <img src=x onerror=alert(1)> & more" if outcome != "passed" else None,
                    "rules": [finding["id"]],
                    "findings": [finding],
                    "metrics": {"tokens_per_s": 800.0 + i, "ttft_s": 0.012},
                    "duration_s": 1.0 + i,
                    "log_tail": "line 1\n\x1b[31mERROR\x1b[0m crash" if i == 1 else None,
                    "worker": "gw0",
                    "runner": runner,
                    "when": "call",
                    "extra": {"engine_info": {"attention_backend": "FLASHINFER"}},
                }
            )
        cells.append(
            {
                "nodeid": "suites/test_versions.py::test_new[vllm-0.27]",
                "outcome": "not-covered",
                "reason": "covered by another runner",
                "runner": runner,
                "axes": {"vllm": "0.27.1"},
            }
        )
        reports.append(Report.from_run(_fingerprint(runner, gpu, count), cells, exitstatus=1))
    return merge_reports(reports)


def _run(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        chromium,
        "--headless",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        *args,
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.insert(1, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _page_errors(stderr: str) -> list[str]:
    """Console messages of the page itself (Chromium's own D-Bus and GPU noise is not the page's)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(render_html(_report()), encoding="utf-8")
    return path


def test_page_runs_without_errors_and_click_shows_details(page: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    result = _run(chromium, tmp_path / "profile", "--dump-dom", page.as_uri() + "#selftest")
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    errors = re.search(r'<pre id="gc-errors"[^>]*data-count="(\d+)"[^>]*>(.*?)</pre>', dom, re.S)
    assert errors is not None, "the error recorder is missing from the DOM"
    assert errors.group(1) == "0", html.unescape(errors.group(2))
    assert not _page_errors(result.stderr)
    selftest = re.search(r'<output id="gc-selftest" data-result="([^"]*)"', dom)
    assert selftest is not None and html.unescape(selftest.group(1)) == "ok"
    # The detail panel is open and shows the clicked cell's details (built from the JSON, escaped).
    panel = re.search(r'<aside id="detail"([^>]*)>(.*?)</aside>', dom, re.S)
    assert panel is not None and "hidden" not in panel.group(1)
    for heading in ("Reason", "Rules", "Findings", "Metrics", "Other", "Log tail"):
        assert f">{heading}<" in panel.group(2)
    assert "FLASHINFER" in panel.group(2)
    assert "&lt;img src=x onerror=alert(1)&gt;" in panel.group(2) and "\x1b" not in panel.group(2)
    assert "<img src=x" not in dom and "<script>alert(1)" not in dom
    assert dom.count('class="cell o-') >= len(OUTCOMES) * 3


def test_screenshot(page: Path, tmp_path: Path) -> None:
    chromium = _chromium()
    shot = tmp_path / "report.png"
    result = _run(
        chromium, tmp_path / "profile", "--window-size=1440,1000", f"--screenshot={shot}", page.as_uri() + "#selftest"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert not _page_errors(result.stderr)
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
    keep = os.environ.get("GPUCOMPAT_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)
