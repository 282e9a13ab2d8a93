"""The runners' side of the HTML page: a runner's column header, its fingerprint card, the what-if banner.

A what-if run (`--gpucompat-env FILE`) judged a fingerprint file while the cells really ran on another machine:
the runner's fingerprint then carries `what_if` (the file) and `host` (that machine, one line). The page names
both in a banner, in the runner's header, and on each cell that really ran.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from .text import engine_versions, gpu_summary, incomplete_installs, one_line, plain, stack_summary

_FINGERPRINT_KEYS = (
    "driver",
    "cuda_driver",
    "cuda_runtime",
    "interconnect",
    "os",
    "libc",
    "python",
    "container",
    "cuda_visible_devices",
    "params",
    "schema",
)
_GPU_COLUMNS = (
    "index",
    "name",
    "architecture",
    "compute_capability",
    "memory_mib",
    "pcie_generation",
    "pcie_width",
    "ecc",
    "mig",
    "persistence",
    "vbios",
    "uuid",
)


def e(value: Any) -> str:
    """Escape for HTML text and attribute values alike."""
    return escape("" if value is None else str(value), quote=True)


def abbreviated(text: str, limit: int) -> str:
    """`text` escaped, cut to `limit` characters with the whole of it on hover (a title) when longer."""
    if len(text) <= limit:
        return e(text)
    return f'<span class="abbr" title="{e(text)}">{e(text[: limit - 1])}…</span>'


def what_if_of(fingerprint: Mapping[str, Any]) -> tuple[str, str] | None:
    """(fingerprint file, host that really ran) for a what-if runner, None for a plain run."""
    what_if = fingerprint.get("what_if")
    if not what_if:
        return None
    return str(what_if), one_line(fingerprint.get("host") or "an unnamed machine", 300)


def what_if_banner(runners: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per what-if runner: the file its verdicts came from and the machine the cells really ran on."""
    items = []
    for name, fp in runners.items():
        found = what_if_of(fp)
        if found:
            items.append(f"<li><b>{e(name)}</b> evaluated the fingerprint file <code>{e(found[0])}</code>; the "
                         f"cells that ran really ran on <b>{e(found[1])}</b>.</li>")
    if not items:
        return ""
    return ('<section class="whatif" id="what-if" aria-label="what-if run"><b>What-if run.</b> Skips, xfails and '
            "findings follow the fingerprint file, not the machine; figures and outcomes of cells marked "
            f'"ran on" come from the machine named here.<ul>{"".join(items)}</ul></section>')


def installs_notice(runners: Mapping[str, Mapping[str, Any]]) -> str:
    """A warning per runner whose install of an engine lacks its declared requirements (fingerprint `installs`)."""
    items = "".join(f"<li>{e(line)}.</li>" for line in incomplete_installs(runners))
    if not items:
        return ""
    return ('<section class="banner" id="incomplete-installs" aria-label="incomplete installs"><b>Incomplete '
            f"install.</b><ul>{items}</ul></section>")


def runner_header(index: int, name: str, fingerprint: Mapping[str, Any], counts: Mapping[str, int]) -> str:
    versions = " · ".join(f"{k} {v}" for k, v in engine_versions(fingerprint))
    what_if = what_if_of(fingerprint)
    tally = [f'<span class="ok">{counts.get("passed", 0)} passed</span>']
    tally += [f'<span class="bad">{counts[o]} {o}</span>' for o in ("failed", "error") if counts.get(o)]
    return (
        f'<th scope="col" class="runner" data-runner="{e(name)}"><a class="rname" href="#runner-{index}">'
        f"{abbreviated(name, 60)}</a>"  # wrapped in its column (html_assets), cut only when very long
        + (f'<div class="wi" title="{e(what_if[0])} · ran on {e(what_if[1])}">what-if: {abbreviated(what_if[0], 26)}'
           "</div>" if what_if else "")
        + f'<div class="gpu">{e(gpu_summary(fingerprint))}</div>'
        f'<div class="sw">{e(stack_summary(fingerprint))}</div>'
        + (f'<div class="pk">{e(versions)}</div>' if versions else "")
        + f'<div class="rc">{" · ".join(tally)}</div></th>'
    )




def _kv_rows(pairs: Iterable[tuple[str, Any]]) -> str:
    return "".join(f"<tr><th>{e(k)}</th><td>{e(plain(v))}</td></tr>" for k, v in pairs)


def fingerprint_card(index: int, name: str, fp: Mapping[str, Any], is_open: bool = False) -> str:
    parts = [
        f'<details class="fp" id="runner-{index}"{" open" if is_open else ""}><summary><b>{e(name)}</b>'
        f'<span class="muted"> · {e(gpu_summary(fp))} · {e(stack_summary(fp))}</span></summary><div class="fp-body">'
    ]
    if fp.get("name") not in (None, name):
        parts.append(f'<p class="muted">Fingerprint name: {e(fp.get("name"))}</p>')
    reasons = fp.get("reasons") or []
    if reasons:
        parts.append(
            '<div class="reasons"><b>Could not read everything:</b><ul>'
            + "".join(f"<li>{e(r)}</li>" for r in reasons)
            + "</ul></div>"
        )
    known = [(k, fp[k]) for k in _FINGERPRINT_KEYS if k in fp and fp[k] not in (None, {}, [])]
    if known:
        parts.append(f'<table class="kv">{_kv_rows(known)}</table>')
    gpus = [g for g in fp.get("gpus") or [] if isinstance(g, Mapping)]
    if gpus:
        columns = [c for c in _GPU_COLUMNS if any(c in g for g in gpus)]
        extra_cols = sorted({k for g in gpus for k in g} - set(columns))
        columns += extra_cols
        head = "".join(f"<th>{e(c)}</th>" for c in columns)
        rows = "".join("<tr>" + "".join(f"<td>{e(plain(g.get(c, '')))}</td>" for c in columns) + "</tr>" for g in gpus)
        parts.append(
            f'<h4>GPUs</h4><div class="scroll"><table class="grid"><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div>"
        )
    links = fp.get("links") or []
    if not isinstance(links, list):  # a checked report has a list; anything else is shown as it is
        links = [links]
    if links:
        items = "".join(
            f"<li>GPU {e(link.get('a'))} ↔ GPU {e(link.get('b'))}: {e(link.get('kind'))} "
            f'<span class="muted">{e(link.get("path") or "")}</span></li>'
            if isinstance(link, Mapping)
            else f"<li>{e(plain(link))}</li>"
            for link in links
        )
        parts.append(f"<h4>Links</h4><ul>{items}</ul>")
    packages = fp.get("packages") or {}
    if packages:
        rows = "".join(
            f"<tr><th>{e(k)}</th><td>{e(v) if v is not None else '<span class=muted>not installed</span>'}</td></tr>"
            for k, v in sorted(packages.items())
        )
        parts.append(f'<h4>Packages</h4><table class="kv">{rows}</table>')
    shown = set(_FINGERPRINT_KEYS) | {"name", "gpus", "links", "packages", "reasons"}
    rest = {k: v for k, v in fp.items() if k not in shown}
    if rest:
        parts.append(
            "<h4>Other fields</h4><pre>" + e(json.dumps(rest, indent=2, ensure_ascii=False, sort_keys=True)) + "</pre>"
        )
    parts.append("</div></details>")
    return "".join(parts)


