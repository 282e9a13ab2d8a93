"""JUnit XML for CI systems that only understand JUnit: one testsuite per runner, one testcase per cell.

What JUnit has no place for (rules, findings, metrics, the fingerprint) goes into `<properties>`, which
GitLab, Jenkins and most JUnit viewers show or at least keep.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from .model import CellRecord, Report
from .text import first_line, format_params, gpu_summary

# Characters XML 1.0 cannot carry at all (engine logs contain ANSI escapes and worse).
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


# Terminal colour and cursor sequences: noise in a CI test report.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _clean(value: Any) -> str:
    return _XML_INVALID.sub("\ufffd", _ANSI.sub("", "" if value is None else str(value)))


def _prop(parent: ET.Element, name: str, value: Any) -> None:
    ET.SubElement(parent, "property", {"name": _clean(name), "value": _clean(value)})


def _classname_and_name(nodeid: str) -> tuple[str, str]:
    """Like pytest's junitxml: `suites/test_a.py::test_b[x]` -> (`suites.test_a`, `test_b[x]`)."""
    path, sep, name = nodeid.partition("::")
    if not sep:
        return "", nodeid
    module = path[:-3] if path.endswith(".py") else path
    parts = [module.replace("/", ".").replace("\\", ".")]
    *classes, func = name.split("::")
    parts.extend(classes)
    return ".".join(p for p in parts if p), func


def _suite_properties(suite: ET.Element, fingerprint: Mapping[str, Any]) -> None:
    props = ET.SubElement(suite, "properties")
    _prop(props, "gpu", gpu_summary(fingerprint))
    for i, gpu in enumerate(fingerprint.get("gpus") or []):
        gpu = gpu or {}
        detail = ", ".join(
            f"{key} {gpu[key]}" for key in ("architecture", "compute_capability", "memory_mib") if gpu.get(key)
        )
        label = str(gpu.get("name") or "unknown") + (f" ({detail})" if detail else "")
        _prop(props, f"gpu.{gpu.get('index', i)}", label)
    for key in ("driver", "cuda_driver", "cuda_runtime", "interconnect", "os", "libc", "python", "container"):
        if fingerprint.get(key) is not None:
            _prop(props, key, fingerprint[key])
    for name, version in sorted((fingerprint.get("packages") or {}).items()):
        _prop(props, f"package.{name}", version if version is not None else "not installed")
    for reason in fingerprint.get("reasons") or []:
        _prop(props, "fingerprint.reason", reason)


def _case_properties(case: ET.Element, cell: CellRecord) -> None:
    props = ET.SubElement(case, "properties")
    _prop(props, "outcome", cell.outcome)
    if cell.engine:
        _prop(props, "engine", cell.engine)
    if cell.params:
        _prop(props, "params", format_params(cell.params))
    for name, value in cell.axes.items():
        _prop(props, f"axis.{name}", value)
    for rule in cell.rules:
        _prop(props, "rule", rule)
    for f in cell.findings:
        meta = "/".join(x for x in (f.severity, f.confidence, f.action) if x)
        _prop(props, "finding", f"{f.id} [{meta}]: {f.summary}")
    for issue in cell.explained_by:
        _prop(props, "explained_by", issue["id"])
    for d in cell.deviations:
        default = f"; engine default {d['engine_default']!r}" if "engine_default" in d else ""
        _prop(props, f"deviation.{d.get('name')}", f"{d.get('value')!r} ({d.get('by')}{default})")
    if (attention := cell.attention_text()) is not None:
        _prop(props, "attention_prediction", attention)
    for name, value in cell.metrics.items():
        _prop(props, f"metric.{name}", "" if value is None else f"{value:.6g}")
    if cell.worker:
        _prop(props, "worker", cell.worker)


def _outcome_element(case: ET.Element, cell: CellRecord) -> None:
    reason = cell.reason or ""
    summary = first_line(reason)
    if cell.outcome in ("failed", "error"):
        tag = "failure" if cell.outcome == "failed" else "error"
        issue = cell.known_issue
        known = f"matches known issue {issue['id']}" if issue else ""
        message = f"{summary} ({known})" if summary and known else summary or known or cell.outcome
        elem = ET.SubElement(case, tag, {"message": _clean(message)})
        body = reason
        if cell.log_tail:
            body = f"{reason}\n\n--- engine log (tail) ---\n{cell.log_tail}" if reason else cell.log_tail
        if issue:
            said = "\n".join(f"{label}: {issue[key]}" for label, key in (("summary", "summary"),
                                                                      ("workaround", "workaround")) if issue.get(key))
            body = f"{known}\n{said}\n\n{body}".rstrip()
        elem.text = _clean(body)
    elif cell.outcome == "skipped":
        ET.SubElement(case, "skipped", {"type": "pytest.skip", "message": _clean(summary or "skipped")})
    elif cell.outcome == "xfailed":
        ET.SubElement(case, "skipped", {"type": "pytest.xfail", "message": _clean(summary or "expected failure")})
    elif cell.outcome == "not-covered":
        ET.SubElement(
            case,
            "skipped",
            {"type": "gpucompat.not-covered", "message": _clean(summary or "covered by another runner")},
        )
    # passed and xpassed are plain passing testcases (the outcome property tells an XPASS apart).


def render_junit(report: Report) -> str:
    """The JUnit XML document as a string (UTF-8 declaration included)."""
    root = ET.Element("testsuites", {"name": "gpucompat"})
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_time = 0.0
    for runner, fingerprint in report.runners.items():
        cells = [c for c in report.cells if c.runner == runner]
        counts = {
            "tests": len(cells),
            "failures": sum(c.outcome == "failed" for c in cells),
            "errors": sum(c.outcome == "error" for c in cells),
            "skipped": sum(c.outcome in ("skipped", "xfailed", "not-covered") for c in cells),
        }
        time = sum(c.duration_s or 0.0 for c in cells)
        suite = ET.SubElement(
            root,
            "testsuite",
            {
                "name": _clean(runner),
                **{k: str(v) for k, v in counts.items()},
                "time": f"{time:.3f}",
                "timestamp": _clean(report.created),
                "hostname": _clean(fingerprint.get("name") or runner),
            },
        )
        _suite_properties(suite, fingerprint)
        for cell in cells:
            classname, name = _classname_and_name(cell.nodeid)
            case = ET.SubElement(
                suite,
                "testcase",
                {"classname": _clean(classname), "name": _clean(name), "time": f"{cell.duration_s or 0.0:.3f}"},
            )
            _case_properties(case, cell)
            _outcome_element(case, cell)
        for key, value in counts.items():
            totals[key] += value
        total_time += time
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
