"""Write each vLLM and SGLang release's server flags, environment variables, attention backends and pinned
requirements as committed data, read from the released artifacts on the package index without installing or
importing any of them (the sources are read with `ast`).

    python tools/engine_history.py [--engine vllm|sglang] [--index-url URL] [--cache-dir DIR]
                                   [--output-dir DIR] [--rules-dir DIR] [--since VERSION] [--jobs N]

Releases come from the index's JSON simple API (--index-url, else PIP_INDEX_URL, else pip's default). Per release one
artifact is read: an x86_64 Linux (or pure) wheel through HTTP Range requests, only its Python files and METADATA,
else the sdist. What was fetched is cached by the artifact's sha256 (and what was extracted by sha256 and this tool's
own source), so a re-run fetches only new releases. Writes matrices/history/<engine>.json: the releases, then for
each flag / env var / backend / requirement its runs, the maximal stretches of consecutive read releases in which it
exists with the same attributes (format described in pytest_gpucompat/kb/history.py). The code anchors of the rules
about the engine (``bounds.anchors`` in --rules-dir, kb/bounds.py) are evaluated against every release read, from the
cache, and stored the same way under ``anchors``: re-run the tool after adding or changing an anchor.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TOOLS = Path(__file__).resolve().parent
if str(_TOOLS) not in sys.path:  # the helpers are siblings of this script; tools/ is not a package
    sys.path.insert(0, str(_TOOLS))

import requests  # noqa: E402
from _history_anchors import ANCHOR_KINDS, read_anchored, rule_anchors  # noqa: E402
from _history_ast import Project  # noqa: E402
from _history_exec import Interpreter  # noqa: E402
from _history_facts import extract_backends, extract_env, extract_requires  # noqa: E402
from _history_fetch import Counter, Release, default_index_url, ensure_cached, list_releases, load_cached  # noqa: E402
from _history_flags import sglang_flags, vllm_flags  # noqa: E402
from _history_scope import Budget  # noqa: E402
from _history_selection import extract_selection, render_selection  # noqa: E402
from packaging.version import InvalidVersion, Version  # noqa: E402

FORMAT = 1
TOOL = "tools/engine_history.py"
TOOL_VERSION = "1"
KINDS = ("flags", "env", "backends", "requires", *ANCHOR_KINDS)
DEFAULT_OUTPUT = _TOOLS.parent / "matrices" / "history"
DEFAULT_RULES = _TOOLS.parent / "matrices" / "rules"
DEFAULT_CACHE = Path("~/.cache/gpucompat-engine-history")
_URL = re.compile(r"^=?(https?|ftp|wss?|grpcs?)://", re.IGNORECASE)


@dataclass(frozen=True)
class Engine:
    name: str
    package: str
    since: str
    flags: Callable[[Interpreter], dict[str, dict[str, Any]]]
    backends: bool
    selection_since: str | None = None
    """First release whose attention-backend selection is read (`<engine>-selection.json`); None: not read."""


ENGINES = {
    "vllm": Engine("vllm", "vllm", "0.2.0", vllm_flags, True, "0.10.2"),
    "sglang": Engine("sglang", "sglang", "0.1.12", sglang_flags, False),
}


NOT_EXTRACTION = ("_history_anchors.py",)
"""Helpers whose results are never cached (anchors are evaluated on every run): they do not key the cache."""


def tool_hash() -> str:
    """A digest of this tool's code: extraction results cached under it are re-made when the code changes."""
    digest = hashlib.sha256()
    for path in sorted([Path(__file__).resolve(), *(p for p in _TOOLS.glob("_history_*.py")
                                                    if p.name not in NOT_EXTRACTION)]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def extract_release(engine_name: str, files: dict[str, str], filename: str,
                    version: str | None = None) -> dict[str, dict[str, Any]]:
    """The facts of one release from its fetched files (run in a worker process)."""
    engine = ENGINES[engine_name]
    project = Project({p: t for p, t in files.items() if p.endswith(".py")})
    ev = Interpreter(project)
    flags = engine.flags(ev)
    if not flags:
        raise ValueError("no server flags found in the sources read")
    ev.steps = 0
    backends = extract_backends(project, ev) if engine.backends else {}
    facts = {"flags": flags, "env": extract_env(project, ev), "backends": backends,
             "requires": extract_requires(files, filename)}
    if engine.selection_since and version and _is_at_least(version, engine.selection_since):
        try:
            facts["selection"] = extract_selection(project)
        except (Budget, RecursionError, Exception) as exc:  # the selection's reading fails alone, never the facts
            facts["selection"] = {"error": _one_line(exc)}
    for kind in ("flags", "env"):
        for attrs in facts[kind].values():
            if isinstance(attrs.get("default"), str) and _URL.match(attrs["default"]):
                del attrs["default"]  # a URL default (telemetry, artifact servers): no host names in committed data
    return facts


def _is_at_least(version: str, since: str) -> bool:
    try:
        return Version(version) >= Version(since)
    except InvalidVersion:
        return False


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _extract_cached(engine_name: str, release_text: str, cache_file: str, facts_file: str,
                    filename: str) -> tuple[str, dict[str, Any] | None, str | None]:
    """Worker: facts from the facts cache, else extracted from the sources cache (and stored)."""
    facts_path = Path(facts_file)
    if facts_path.is_file():
        return release_text, json.loads(facts_path.read_text(encoding="utf-8")), None
    try:
        files = load_cached(Path(cache_file))
        facts = extract_release(engine_name, files, filename, release_text)
    except Budget:
        return release_text, None, "extraction ran past its step budget"
    except Exception as exc:  # one bad release is reported, never a traceback
        return release_text, None, _one_line(exc)
    facts_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = facts_path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(facts, sort_keys=True, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, facts_path)
    return release_text, facts, None


def collect(engine: Engine, index_url: str, cache_dir: Path, since: Version, jobs: int,
            log: Callable[[str], None]) -> tuple[list[Release], dict[str, dict[str, Any]], int]:
    """Releases with their facts: fetch what the cache lacks (threads), then extract what the facts cache lacks
    (processes). Returns (releases, facts by version, bytes fetched)."""
    session = requests.Session()
    counter = Counter()
    releases = list_releases(session, index_url, engine.package, since)
    log(f"{engine.name}: {len(releases)} releases on the index since {since}")
    src_dir = cache_dir / engine.package
    facts_dir = src_dir / f"facts-{tool_hash()}"
    for old in src_dir.glob("facts-*") if src_dir.is_dir() else []:
        if old != facts_dir and old.is_dir():  # extracted by an earlier version of this tool
            shutil.rmtree(old, ignore_errors=True)

    def fetch(release: Release) -> None:
        if release.artifact is None:
            return
        before = counter.bytes
        try:
            ensure_cached(session, release.artifact, engine.package, src_dir, counter)
        except Exception as exc:
            release.error = _one_line(exc)
            log(f"{engine.name} {release.text}: cannot read {release.artifact.filename}: {release.error}")
            return
        if counter.bytes > before:
            log(f"{engine.name} {release.text}: fetched {release.artifact.filename} "
                f"({(counter.bytes - before) / 1e6:.1f} MB)")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(fetch, releases))
    facts: dict[str, dict[str, Any]] = {}
    todo = [r for r in releases if r.error is None and r.artifact is not None]
    with ProcessPoolExecutor(max_workers=max(1, min(jobs, os.cpu_count() or 1))) as pool:
        futures = [pool.submit(_extract_cached, engine.name, r.text, str(src_dir / f"{_key(r)}.zip"),
                               str(facts_dir / f"{_key(r)}.json"), r.artifact.filename) for r in todo]
        by_text = {r.text: r for r in todo}
        for future in futures:
            text, result, error = future.result()
            if error is not None:
                by_text[text].error = error
                log(f"{engine.name} {text}: cannot extract: {error}")
            else:
                facts[text] = result  # type: ignore[assignment]
                log(f"{engine.name} {text}: " + ", ".join(f"{len(result.get(k, {}))} {k}" for k in KINDS))
    return releases, facts, counter.bytes


def _key(release: Release) -> str:
    assert release.artifact is not None
    return release.artifact.sha256 or hashlib.sha256(release.artifact.url.encode()).hexdigest()


# -- runs and the output file


def compact(releases: list[Release], facts: dict[str, dict[str, Any]]) -> dict[str, dict[str, list[dict]]]:
    """Per kind and item, the maximal runs of consecutive read releases with identical attributes. Releases that
    could not be read are skipped: they neither end a run nor start one."""
    read = [r.text for r in releases if r.error is None and r.text in facts]
    out: dict[str, dict[str, list[dict]]] = {}
    for kind in KINDS:
        names = sorted({name for v in read for name in facts[v].get(kind, {})})
        items: dict[str, list[dict]] = {}
        for name in names:
            runs: list[dict] = []
            current: dict | None = None
            current_key = None
            for version in read:
                attrs = facts[version].get(kind, {}).get(name)
                if attrs is None:
                    current = None
                    continue
                key = json.dumps(attrs, sort_keys=True)
                if current is not None and key == current_key:
                    current["last"] = version
                else:
                    current = {"first": version, "last": version, **{k: attrs[k] for k in sorted(attrs)}}
                    current_key = key
                    runs.append(current)
            items[name] = runs
        out[kind] = items
    return out


def render(engine: Engine, releases: list[Release], runs: dict[str, dict[str, list[dict]]]) -> str:
    """The output file's text: one release per line, one run per line, items sorted (diff-friendly, deterministic)."""
    def dumps(value: Any) -> str:
        return json.dumps(value, separators=(", ", ": "), ensure_ascii=False)

    lines = ["{", f' "format": {FORMAT},', f' "engine": {dumps(engine.name)},', f' "package": {dumps(engine.package)},',
             f' "tool": {dumps(TOOL)},', f' "tool_version": {dumps(TOOL_VERSION)},', ' "releases": [']
    rows = []
    for r in releases:
        row: dict[str, Any] = {"version": r.text, "file": r.artifact.filename if r.artifact else "",
                               "sha256": r.artifact.sha256 if r.artifact else "",
                               "uploaded": r.artifact.uploaded if r.artifact else "",
                               "yanked": bool(r.artifact and r.artifact.yanked)}
        if r.error is not None:
            row["error"] = r.error
        rows.append("  " + dumps(row))
    lines.append(",\n".join(rows))
    lines.append(" ],")
    for i, kind in enumerate(KINDS):
        tail = "," if i < len(KINDS) - 1 else ""
        items = runs.get(kind, {})
        if not items:
            lines.append(f' {dumps(kind)}: {{}}{tail}')
            continue
        lines.append(f' {dumps(kind)}: {{')
        blocks = []
        for name in sorted(items):
            body = ",\n".join("   " + dumps(run) for run in items[name])
            blocks.append(f"  {dumps(name)}: [\n{body}\n  ]")
        lines.append(",\n".join(blocks))
        lines.append(f" }}{tail}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=sorted(ENGINES), help="one engine (default: all)")
    parser.add_argument("--index-url", help="PEP 691 simple index (default: PIP_INDEX_URL, else pip's default)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="fetched sources and extracted facts")
    parser.add_argument("--output-dir", type=Path, default=DEFAULT_OUTPUT, help="where <engine>.json is written")
    parser.add_argument("--rules-dir", type=Path, default=DEFAULT_RULES,
                        help="rule files whose code anchors are evaluated against every release")
    parser.add_argument("--since", help="first version to read (default: 0.2.0 for vLLM, 0.1.12 for SGLang)")
    parser.add_argument("--jobs", type=int, default=4, help="parallel downloads (extraction uses at most the CPUs)")
    args = parser.parse_args(argv)
    try:
        since_override = Version(args.since) if args.since else None
    except InvalidVersion:
        parser.error(f"--since: not a version: {args.since}")
    index_url = default_index_url(args.index_url)
    cache_dir = args.cache_dir.expanduser()

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    summaries = []
    for name in [args.engine] if args.engine else list(ENGINES):
        engine = ENGINES[name]
        started = time.monotonic()
        releases, facts, fetched = collect(engine, index_url, cache_dir, since_override or Version(engine.since),
                                           max(1, args.jobs), log)
        anchors = rule_anchors(args.rules_dir, engine.name)
        for release in releases:
            if release.text in facts and release.artifact is not None:
                zip_path = cache_dir / engine.package / f"{_key(release)}.zip"
                facts[release.text] = {**facts[release.text], "anchors": read_anchored(zip_path, anchors)}
        runs = compact(releases, facts)
        out = args.output_dir / f"{engine.name}.json"
        text = render(engine, releases, runs)
        write_atomic(out, text)
        if engine.selection_since:
            sel_out = args.output_dir / f"{engine.name}-selection.json"
            write_atomic(sel_out, render_selection(engine.name, TOOL, TOOL_VERSION, releases, facts,
                                                   engine.selection_since))
            log(f"{engine.name}: wrote {sel_out}")
        unread = [r for r in releases if r.error is not None]
        summaries.append(
            f"{engine.name}: {len(releases)} releases ({len(releases) - len(unread)} read, {len(unread)} unread), "
            f"{len(runs['flags'])} flags, {len(runs['env'])} env vars, {len(runs['backends'])} backends, "
            f"{len(runs['requires'])} requirements, {len(anchors)} code anchors; fetched {fetched / 1e6:.1f} MB; "
            f"wrote {out} "
            f"({len(text.encode()) / 1e6:.2f} MB) in {time.monotonic() - started:.0f} s")
    for line in summaries:
        log(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
