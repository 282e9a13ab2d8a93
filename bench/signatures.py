"""Signature matching, RE2 against Python's re, on the shipped knowledge base and the shipped reports.

    python bench/signatures.py [--json] [--runs N]

Every signature of the shipped rules and of the failure-mode table is compiled by both matchers and searched over
the failure lines the product searches (``kb.signatures.failure_lines``) of every failed, errored or xfailed cell of
the reports in docs/reports/ and of the hostile report corpus, plus each rule's own symptom (one failure each).
Measured, each as the median of ``--runs`` passes with its spread ((max - min) / median):

- ``compile_ms``: compiling all patterns (RE2: ``kb.linear_regex.compile_linear``; re: ``re.compile``, its cache
  purged; the shape check both go through on load is left out);
- ``failures_per_s``: failures judged against every pattern per second, as the product searches them: re line by
  line, RE2 once over the lines joined (``kb.signatures.signature_matches``); ``re2_vs_re`` is RE2's over re's;
- ``agree``: whether both find the same (pattern, failure) pairs;
- ``long_failure_*``: one failure of the most text a signature is searched in (64 KiB: the corpus's lines over and
  over), judged against every pattern: re line by line, RE2 once over the joined lines;
- ``chain_*``: one pattern that has no repeat, ``(?:x|x)`` n times then ``Q``, on a line of n+20 ``x``: re's time
  doubles with each n (measured up to n=22, then extrapolated to the n=40 of the hostile corpus), RE2's does not.

The table goes to stderr; ``--json`` prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpucompat.kb import load_kb  # noqa: E402
from pytest_gpucompat.kb.failure_modes import load_failure_modes  # noqa: E402
from pytest_gpucompat.kb.linear_regex import LinearPattern, compile_linear, joined  # noqa: E402
from pytest_gpucompat.kb.signatures import (  # noqa: E402
    MAX_LINE_CHARS,
    MAX_TEXT_CHARS,
    failure_lines,
    signature_matches,
)

FAILED = {"failed", "error", "xfailed", "xpassed"}


def corpus_failures() -> list[tuple[str, ...]]:
    failures: list[tuple[str, ...]] = []
    for folder in (ROOT / "docs" / "reports", ROOT / "tests" / "hostile" / "reports"):
        for path in sorted(folder.rglob("*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):
                continue  # a hostile file that is not JSON
            cells = data.get("cells") if isinstance(data, dict) else None
            for cell in cells if isinstance(cells, list) else ():
                if isinstance(cell, dict) and cell.get("outcome") in FAILED:
                    reason, tail = cell.get("reason"), cell.get("log_tail")
                    failures.append(failure_lines(reason if isinstance(reason, str) else None,
                                                  tail if isinstance(tail, str) else None))
    failures += [failure_lines(rule.symptom, None) for rule in load_kb().rules]
    return [lines for lines in failures if lines]


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, float, list[float]]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return median, (max(times) - min(times)) / median if median else 0.0, times


def chain_seconds(n: int, matcher: str) -> float:
    text, line = "(?:x|x)" * n + "Q", "x" * (n + 20)
    search = re.compile(text).search if matcher == "re" else compile_linear(text).search
    start = time.perf_counter()
    search(line)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout (the table on stderr)")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)

    texts = [p.pattern for r in load_kb().rules for p in r.signature]
    texts += [m.pattern.pattern for m in load_failure_modes() if m.pattern is not None]
    failures = corpus_failures()
    out: dict[str, Any] = {"patterns": len(texts), "failures": len(failures),
                           "lines": sum(map(len, failures)), "runs": args.runs}

    def compile_re() -> list[re.Pattern[str]]:
        re.purge()
        return [re.compile(t) for t in texts]

    def compile_re2() -> list[LinearPattern]:
        return [compile_linear(t) for t in texts]

    for name, make in (("re", compile_re), ("re2", compile_re2)):
        median, spread, _ = timed(make, args.runs)
        out[f"{name}_compile_ms"], out[f"{name}_compile_ms_spread"] = median * 1000, spread
    python, linear = compile_re(), compile_re2()

    def judge_re() -> set[tuple[int, int]]:
        return {(i, j) for j, lines in enumerate(failures) for i, p in enumerate(python)
                if any(p.search(line) for line in lines)}

    def judge_re2() -> set[tuple[int, int]]:
        out = set()
        for j, lines in enumerate(failures):
            text = joined(lines)
            out |= {(i, j) for i, p in enumerate(linear) if signature_matches((p,), text)}
        return out

    found = {}
    for name, judge in (("re", judge_re), ("re2", judge_re2)):
        median, spread, _ = timed(judge, args.runs)
        out[f"{name}_failures_per_s"] = len(failures) / median if median else None
        out[f"{name}_failures_per_s_spread"] = spread
        found[name] = judge()
    out["re2_vs_re"] = (out["re2_failures_per_s"] or 0) / (out["re_failures_per_s"] or 1)
    out["agree"], out["matches"] = found["re"] == found["re2"], len(found["re2"])
    corpus = [line for lines in failures for line in lines]
    long_text, n = [], 0
    while n < MAX_TEXT_CHARS - MAX_LINE_CHARS:
        long_text.append(corpus[len(long_text) % len(corpus)])
        n += len(long_text[-1]) + 1
    for name, judge_long in (("re", lambda: [any(p.search(line) for line in long_text) for p in python]),
                             ("re2", lambda: [signature_matches((p,), joined(long_text)) for p in linear])):
        median, spread, _ = timed(judge_long, args.runs)
        out[f"long_failure_{name}_ms"], out[f"long_failure_{name}_ms_spread"] = median * 1000, spread
    out["long_failure_lines"] = len(long_text)
    out["long_failure_re2_vs_re"] = out["long_failure_re_ms"] / out["long_failure_re2_ms"]
    chain = {n: chain_seconds(n, "re") for n in (16, 18, 20, 22)}
    out["chain_re_s"] = {str(n): s for n, s in chain.items()}
    out["chain_re_s_at_40_extrapolated"] = chain[22] * 2 ** (40 - 22)
    out["chain_re2_s_at_40"] = statistics.median(chain_seconds(40, "re2") for _ in range(args.runs))

    width = max(map(len, out))
    for key, value in out.items():
        shown = f"{value:,.4g}" if isinstance(value, float) else str(value)
        print(f"{key:<{width}}  {shown}", file=sys.stderr)
    if args.json:
        print(json.dumps(out, allow_nan=False))
    return 0 if out["agree"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
