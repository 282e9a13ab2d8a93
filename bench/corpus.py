"""The knowledge base against real users' reports (bench/corpus/*.yaml): prediction, diagnosis, false alarms.

    python bench/corpus.py [--json] [--split tune|held-out|all]

Each report is stated with only what it says (bench/corpus/README.md). For each one:

- **prediction**: `gpucompat check` on the stated fingerprint, with the stated command line's settings
  (`check --args`, read as kb.launch takes a pasted command apart) and the report's engine: the broken and degraded
  findings backed by upstream or verified evidence (an unconfirmed claim never counts);
- **diagnosis**: `explain`'s matching of the stated log against every rule's signature (kb.signatures), with the
  stated facts ruling rules out where they contradict them.

A positive is **predicted** / **diagnosed** when a rule of its `expected.rules` (the rules that name its cause)
is among them. Recall is over every positive: one whose cause no rule names (`expected.rules: []`) is a miss, and
`named` counts those that have a rule at all; `any_*` count the positives on which any broken or degraded finding
fired (right or wrong). A control's **false alarm** is any broken or degraded finding or any diagnosis. The split
is the entry id's sha256 (5 of 8 held out), never chosen by hand.

The table goes to stderr; ``--json`` prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpucompat.common.errors import InputError  # noqa: E402
from pytest_gpucompat.common.inputs import load_file  # noqa: E402
from pytest_gpucompat.kb import evaluate_machine, load_kb  # noqa: E402
from pytest_gpucompat.kb.cmdline import check_command, target_fingerprint  # noqa: E402
from pytest_gpucompat.kb.launch import words_of  # noqa: E402
from pytest_gpucompat.kb.signatures import Failure, explaining_rules  # noqa: E402
from pytest_gpucompat.machine.fingerprint import Fingerprint, from_dict  # noqa: E402
from pytest_gpucompat.workload.checkpoint import as_params, model_shape  # noqa: E402

CORPUS = ROOT / "bench" / "corpus"
SEVERE = ("broken", "degraded")


def split_of(entry_id: str) -> str:
    return "held-out" if int(hashlib.sha256(entry_id.encode()).hexdigest()[:8], 16) % 8 < 5 else "tune"


def load_corpus(directory: Path = CORPUS) -> list[dict[str, Any]]:
    entries = []
    for path in sorted(directory.glob("*.yaml")):
        data = load_file(path)
        for entry in data.get("reports") or []:
            entries.append({**entry, "_file": path.name})
    return entries


def stated_fingerprint(entry: dict[str, Any]) -> tuple[Fingerprint, str | None]:
    """The fingerprint the report states, with its command line's settings and the engine as a parameter; the
    second value says why the command line could not be read, if so."""
    stated = entry.get("stated") or {}
    engine = entry["engine"]
    fp = from_dict(stated.get("fingerprint") or {}, f"{entry['_file']}:{entry['id']}", None, default_name=entry["id"])
    params: dict[str, Any] = {"engine": engine}
    if stated.get("model"):
        params["model"] = stated["model"]
    if isinstance(stated.get("model_config"), dict):  # what `check --model` reads from a pasted config.json
        params.update(as_params(model_shape(stated["model_config"])))
    fp = dataclasses.replace(fp, params={**fp.params, **params})
    command = stated.get("command")
    if not command:
        return fp, None
    try:
        checked = check_command(words_of(str(command)), engine, fp.packages.get(engine), None)
    except (InputError, ValueError) as exc:
        return fp, str(exc)
    target, _ = target_fingerprint(fp, checked)
    return target, None


def judge(entry: dict[str, Any], kb: Any) -> dict[str, Any]:
    fp, unread = stated_fingerprint(entry)
    engine = entry["engine"]
    found = [f for f in evaluate_machine(kb, fp) if f.severity in SEVERE and not f.unconfirmed]
    log = (entry.get("stated") or {}).get("log") or ""
    failure = Failure(fingerprint=fp, engine=engine, params=dict(fp.params), reason=None, log_tail=str(log))
    diagnosed = [r.id for r in explaining_rules(kb.rules, failure) if r.confidence != "documents"]
    expected = set((entry.get("expected") or {}).get("rules") or [])
    return {"id": entry["id"], "engine": engine, "split": split_of(entry["id"]), "control": bool(entry.get("control")),
            "cause_class": entry.get("cause_class"), "named": bool(expected),
            "predicted": bool(expected & {f.id for f in found}), "diagnosed": bool(expected & set(diagnosed)),
            "any_predicted": bool(found), "any_diagnosed": bool(diagnosed),
            "findings": sorted({f.id for f in found}), "diagnoses": diagnosed, "command_unread": unread}


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for split in ("tune", "held-out", "all"):
        part = [r for r in results if split == "all" or r["split"] == split]
        pos = [r for r in part if not r["control"]]
        ctl = [r for r in part if r["control"]]
        out[split] = {
            "positives": len(pos), "controls": len(ctl), "named": sum(r["named"] for r in pos),
            "predicted": sum(r["predicted"] for r in pos), "diagnosed": sum(r["diagnosed"] for r in pos),
            "prediction_recall": _rate(sum(r["predicted"] for r in pos), len(pos)),
            "diagnosis_recall": _rate(sum(r["diagnosed"] for r in pos), len(pos)),
            "any_predicted": sum(r["any_predicted"] for r in pos),
            "any_diagnosed": sum(r["any_diagnosed"] for r in pos),
            "false_alarms": sum(r["any_predicted"] or r["any_diagnosed"] for r in ctl),
            "engines": sorted({r["engine"] for r in part}),
        }
    return out


def _rate(hit: int, total: int) -> float | None:
    return round(hit / total, 3) if total else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--split", choices=("tune", "held-out", "all"), default="tune",
                        help="list the reports of this part (the summary always gives every part); the held-out "
                             "part's are listed only when asked for, so that rules are written without them")
    args = parser.parse_args(argv)
    kb = load_kb()
    results = [judge(e, kb) for e in load_corpus()]
    summary = summarize(results)
    for r in results:
        if args.split in ("all", r["split"]):
            kind = "control" if r["control"] else r["cause_class"]
            print(f"{r['split']:<8} {r['id']:<24} {kind:<28} predicted: {','.join(r['findings']) or '-'}; "
                  f"diagnosed: {','.join(r['diagnoses']) or '-'}", file=sys.stderr)
    for split, s in summary.items():
        print(f"{split}: {s['positives']} positives ({s['named']} with a rule naming the cause), {s['controls']} "
              f"controls; predicted {s['predicted']} (recall {s['prediction_recall']}), diagnosed {s['diagnosed']} "
              f"(recall {s['diagnosis_recall']}); "
              f"any broken/degraded predicted {s['any_predicted']}, diagnosed {s['any_diagnosed']}; "
              f"false alarms {s['false_alarms']}", file=sys.stderr)
    if args.json:
        print(json.dumps({"summary": summary, "reports": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
