"""The ``gpucompat`` command: env, check, rules, and the report commands. Bad input exits 2 with one line.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from . import __version__
from .common import jsontext
from .common.errors import InputError, visible
from .common.textfit import fit
from .options import CLI, add_options

if TYPE_CHECKING:
    from .machine.fingerprint import Fingerprint


def _unrecognized(parser: argparse.ArgumentParser, command: str | None, extras: Sequence[str]) -> int:
    """An argument the command does not take: the command's own usage and one error line, with the nearest of its
    flags for a misspelt one (argparse would print the top-level usage, which names no flag of the command)."""
    import difflib

    target = parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            target = action.choices[command]
    flags = [flag for action in target._actions for flag in action.option_strings if flag.startswith("--")]
    hints = []
    for extra in extras:
        near = difflib.get_close_matches(extra.split("=", 1)[0], flags, n=1) if extra.startswith("-") else []
        if near:
            hints.append(f"{extra}: did you mean {near[0]}?")
    message = f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else "")
    target.print_usage(sys.stderr)
    print(f"{target.prog}: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        return _unrecognized(parser, getattr(args, "command", None), extras)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Visible(sys.stdout), _Visible(sys.stderr)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except InputError as exc:
        print(f"gpucompat: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `gpucompat rules | head -1`: the reader has all it wanted
        sys.stdout, sys.stderr = saved
        _stdout_to_devnull()
        return 141  # what a shell reports for a writer ended by SIGPIPE
    finally:
        sys.stdout, sys.stderr = saved


class _Visible:
    """A text stream that writes control characters from files and logs as visible escapes (errors.visible):
    everything the command prints about a user's files passes through it; newlines and tabs stay."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _stdout_to_devnull() -> None:
    """Point stdout's descriptor at /dev/null, so that the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a captured stream has no descriptor
        pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpucompat", description="GPU x driver x CUDA x engine compatibility.")
    parser.add_argument("--version", action="version", version=f"gpucompat {__version__}")
    sub = parser.add_subparsers(dest="command")

    env = sub.add_parser("env", help="print this machine's fingerprint")
    env.add_argument("--json", action="store_true", help="JSON that `check --env` and `--gpucompat-env` read back")
    add_options(env.add_argument, "", CLI["env"], cli=True)
    env.set_defaults(func=cmd_env)

    check = sub.add_parser("check", help="known problems for this machine or a fingerprint file")
    add_options(check.add_argument, "", CLI["check"], cli=True)
    check.add_argument("--json", action="store_true")
    check.add_argument("--fail-on", choices=("broken", "degraded"),
                       help="exit 1 when such a finding backed by upstream or verified evidence exists "
                            "(unconfirmed claims never fail it)")
    check.add_argument("--severity", choices=("broken", "degraded", "advice"),
                       help="list only findings this severe or worse (advice: all); the verdict and --fail-on still "
                            "judge every finding")
    check.add_argument("--quiet", "-q", action="store_true",
                       help="print only the verdict line (one per runner of a fleet); --json ignores it")
    check.add_argument("--args", metavar="COMMAND",
                       help='your own command line, e.g. "vllm serve MODEL --kv-cache-dtype fp8": each flag and value '
                            "checked against the engine's release history, then the known problems with its settings; "
                            "exit 1 when a flag or value would be refused")
    check.add_argument("--collect-env", metavar="FILE",
                       help="a pasted environment instead of this machine: vLLM's collect_env, SGLang's "
                            "`python3 -m sglang.check_env` or nvidia-smi output, as an issue shows it (- for stdin); "
                            "what it cannot read it says")
    check.add_argument("--model", metavar="DIR_OR_CONFIG_JSON",
                       help="your model's directory or its config.json (no weights needed): its architecture, heads, "
                            "head size, dtype and quantization judged by the rules that name them")
    check.add_argument("--to", metavar="ENGINE==VERSION",
                       help="with --args: check against this release (an upgrade check) instead of the installed one")
    check.set_defaults(func=cmd_check)

    rules = sub.add_parser("rules", help="list the knowledge base")
    add_options(rules.add_argument, "", CLI["rules"], cli=True)
    from .catalog.registry import kb_engine_names

    rules.add_argument("ids", nargs="*", metavar="ID",
                       help="show these rules in full: conditions, flags, and the anchors and facts their release "
                            "window is computed from, with where each holds")
    rules.add_argument("--engine", help=f"{', '.join(kb_engine_names())}, or none")
    rules.add_argument("--severity", choices=("broken", "degraded", "advice"))
    rules.add_argument("--confidence", choices=("documents", "upstream", "verified"))
    rules.add_argument("--json", action="store_true")
    rules.add_argument("--lint", action="store_true",
                       help="check the flags, variables and settings rules name against every release they cover "
                            "(the engines' release history; offline)")
    rules.set_defaults(func=cmd_rules)

    from .report.cli import add_report_subparsers

    add_report_subparsers(sub)
    return parser


def cmd_env(args: argparse.Namespace) -> int:
    from .machine.fingerprint import collect

    fp = collect(args.runner)
    print(jsontext.dumps(fp.to_dict(), indent=2) if args.json else format_fingerprint(fp))
    if not args.topology:
        return 0
    from .machine.topology import compare, nvidia_smi_topology

    topo, reason = nvidia_smi_topology()
    out = sys.stderr if args.json else sys.stdout
    if topo is None:
        print(f"topology: not checked: {reason}", file=out)
        return 0
    mismatches = compare(fp.links, topo)
    for mismatch in mismatches:
        print(f"topology: {mismatch}", file=out)
    print(f"topology: {len(topo)} GPU pairs, {len(mismatches)} disagree with nvidia-smi topo -m", file=out)
    return 1 if mismatches else 0


def format_fingerprint(fp: Fingerprint) -> str:
    """The readable form of ``gpucompat env``."""
    lines = [f"runner:        {fp.name}"]
    if fp.gpus:
        for gpu in fp.gpus:
            bits = [f"cc {gpu.compute_capability}" if gpu.compute_capability else None,
                    gpu.architecture,
                    f"{gpu.memory_mib} MiB" if gpu.memory_mib else None,
                    f"PCIe gen{gpu.pcie_generation} x{gpu.pcie_width}" if gpu.pcie_generation else None,
                    "MIG" if gpu.mig else None,
                    f"ECC {'on' if gpu.ecc else 'off'}" if gpu.ecc is not None else None]
            detail = ", ".join(b for b in bits if b)
            lines.append(f"gpu {gpu.index}:         {gpu.name} ({detail})" + (f" {gpu.uuid}" if gpu.uuid else ""))
    else:
        lines.append("gpus:          none")
    lines.append(f"driver:        {fp.driver or '-'}")
    lines.append(f"cuda (driver): {fp.cuda_driver or '-'}")
    lines.append(f"cuda (stack):  {fp.cuda_runtime or '-'}")
    if fp.links:
        lines.append("links:         " + ", ".join(f"{lk.a}-{lk.b} {lk.path or lk.kind}" for lk in fp.links))
    lines.append(f"interconnect:  {fp.interconnect or '-'}")
    pkgs = ", ".join(f"{k} {v}" for k, v in fp.packages.items()) or "-"
    lines.append(f"packages:      {pkgs}")
    for engine, install in fp.installs.items():
        lines.append(f"install:       {engine} {install.version or '?'}: {install.describe()}")
    lines.append(f"python:        {fp.python or '-'}   libc: {fp.libc or '-'}   container: {fp.container or '-'}")
    lines.append(f"os:            {fp.os or '-'}")
    if fp.cuda_visible_devices is not None:
        lines.append(f"CUDA_VISIBLE_DEVICES={fp.cuda_visible_devices}")
    env = {k: v for k, v in fp.env.items() if k != "CUDA_VISIBLE_DEVICES"}  # the line above says it
    lines.append("env:           " + ("-" if not env else f"{len(env)} engine variable{'s' if len(env) != 1 else ''}"))
    lines += [f"  {name}={value}" for name, value in env.items()]
    for reason in fp.reasons:
        lines.append(f"note:          {reason}")
    return "\n".join(lines)


def cmd_check(args: argparse.Namespace) -> int:
    from .kb import check, evaluate_machine, load_kb
    from .kb.predict import machine_predictions, refuse_bad_settings
    from .machine import fingerprint

    if args.to and not args.args:
        raise InputError("--to", None, "needs --args: the command line to check against that release")
    kb = load_kb(args.kb, builtin=not args.no_builtin_rules)
    if args.collect_env and args.env:
        raise InputError("--collect-env", None, "give a fingerprint file (--env) or a pasted environment, not both")
    if args.collect_env:
        fleet = {"": _pasted_fingerprint(args.collect_env, quiet=args.json or args.quiet)}
    else:
        fleet = fingerprint.load(args.env) if args.env else {"": fingerprint.collect()}
    if args.model:
        fleet = {name: _with_model(fp, args.model, quiet=args.json or args.quiet) for name, fp in fleet.items()}
    if args.args:
        return _check_command_line(args, kb, fleet)
    results = [(fp, evaluate_machine(kb, fp)) for fp in fleet.values()]
    for fp in fleet.values():
        refuse_bad_settings(machine_predictions(fp), args.env or "this machine")
    if args.json:  # the whole document, filtered by --severity; --quiet is for people, not for JSON readers
        docs = [{**check.to_json(fp, found, args.severity), "predictions": machine_predictions(fp)}
                for fp, found in results]
        print(jsontext.dumps(docs[0] if len(docs) == 1 else {"fleet": docs}, indent=2))
    elif args.quiet:
        print(check.format_quiet(results))
    elif len(results) > 1:
        print(check.format_fleet(results, severity=args.severity))
    else:
        fp, found = results[0]
        print(_with_predictions(check.format_findings(fp, found, severity=args.severity), fp))
    return 1 if any(check.exceeds(found, args.fail_on) for _, found in results) else 0


def _with_model(fp: Fingerprint, path: str, quiet: bool) -> Fingerprint:
    """``check --model``: the model's facts (workload.checkpoint.model_facts) as the fingerprint's parameters, and
    its quantization as the ``quantization`` setting the command line does not set (the engines take it from the
    checkpoint's ``quant_method`` when none is asked for); what was read on stderr."""
    from .workload.checkpoint import as_params, model_facts

    facts = model_facts(path)
    if not quiet:
        print(f"{path}: read {', '.join(f'{k}={v}' for k, v in facts.items()) or 'no fact rules test'}",
              file=sys.stderr)
        if "architecture" not in facts:
            print(f"{path}: names no architecture: rules about one cannot judge it", file=sys.stderr)
    return replace(fp, params={**fp.params, **as_params(facts)})


def _pasted_fingerprint(path: str, quiet: bool) -> Fingerprint:
    """``check --collect-env FILE|-``: the paste read into a fingerprint (machine.pasted), with what was read and
    what was not on stderr (the findings stay the only thing on stdout)."""
    from .common.inputs import read_text
    from .machine.fingerprint import from_dict
    from .machine.pasted import MAX_TEXT_BYTES, read_pasted

    if path == "-":
        source = "<stdin>"
        text = sys.stdin.read(MAX_TEXT_BYTES + 1)
    else:
        source = path
        text = read_text(path, limit=MAX_TEXT_BYTES)
    pasted = read_pasted(text, source)
    fp = from_dict(pasted.data, source, None, default_name="pasted")
    if not quiet:
        print(f"{source}: read as {', '.join(pasted.formats)}: {len(pasted.read)} facts read, "
              f"{len(pasted.unread)} not", file=sys.stderr)
        for line in pasted.unread:
            print(f"{source}: not read: {line}", file=sys.stderr)
    return fp


def _check_command_line(args: argparse.Namespace, kb: Any, fleet: dict[str, Fingerprint]) -> int:
    """``check --args ... [--to ENGINE==X]``: the command line against the release, then the KB for the machine
    with that release and the command line's settings (kb.cmdline)."""
    from .kb import check, evaluate_machine
    from .kb.cmdline import check_command, engine_of, format_command_check, parse_target, split_args, target_fingerprint
    from .kb.predict import machine_predictions, refuse_bad_settings

    if len(fleet) != 1:
        raise InputError("--env", None, "--args checks one machine: give a fingerprint file of one runner")
    fp = next(iter(fleet.values()))
    argv = split_args(args.args)
    engine = engine_of(argv)
    engine, version = parse_target(args.to, engine) if args.to else (engine, None)
    if engine is None:
        raise InputError("--args", None, "cannot tell which engine this command starts: name it in --to ENGINE==X")
    checked = check_command(argv, engine, fp.packages.get(engine), version)
    named = checked.settings.get("model")
    if not args.model and isinstance(named, str) and os.path.isfile(os.path.join(named, "config.json")):
        fp = _with_model(fp, named, quiet=args.json or args.quiet)  # a local model the command serves: its config
    target, assumed = target_fingerprint(fp, checked)
    checked = replace(checked, assumed=assumed)
    found = evaluate_machine(kb, target)
    refuse_bad_settings(machine_predictions(target), "--args")
    if args.json:
        print(jsontext.dumps({"command": checked.to_dict(), **check.to_json(target, found, args.severity),
                              "predictions": machine_predictions(target)}, indent=2))
    elif args.quiet:  # the command line's verdict and the machine's, one line each
        print(fit(format_command_check(checked).splitlines()[0]))
        print(check.format_quiet([(target, found)]))
    else:
        print(fit(format_command_check(checked)))
        print()
        print(_with_predictions(check.format_findings(target, found, severity=args.severity), target))
    return 1 if checked.broken or check.exceeds(found, args.fail_on) else 0


def _with_predictions(text: str, fp: Fingerprint) -> str:
    """The findings, then what each engine release of the machine is predicted to pick (kb.predict)."""
    from .kb.predict import format_predictions, machine_predictions

    lines = format_predictions(machine_predictions(fp))
    if not lines:
        return text
    head, sep, verdict = text.rpartition("\n\nverdict:")  # the verdict stays the last line
    block = fit("\n".join(lines))
    return f"{head}\n\n{block}{sep}{verdict}" if sep else f"{text}\n\n{block}"


def cmd_rules(args: argparse.Namespace) -> int:
    from .catalog.registry import kb_engine_names
    from .common.versions import normalize_package
    from .kb import filter_rules, finding_for, load_kb

    known = (*kb_engine_names(), "none")
    if args.engine is not None and normalize_package(args.engine) not in known:
        raise InputError("--engine", None, f"unknown engine {args.engine!r} (known: {', '.join(known)})")
    if args.lint:  # a validation: every signature pattern judged here, none taken from the per-user cache
        from .kb.signatures import judging_every_pattern

        with judging_every_pattern():
            kb = load_kb(args.kb, builtin=not args.no_builtin_rules)
    else:
        kb = load_kb(args.kb, builtin=not args.no_builtin_rules)
    rules = filter_rules(kb.rules, engine=args.engine, severity=args.severity, confidence=args.confidence)
    if args.ids:
        return _show_rules(kb, args.ids, args.json)
    if args.lint:
        from .kb.lint import format_lint, lint_rules

        problems = lint_rules(rules)
        print(format_lint(problems, rules=rules))
        return 1 if any(p.problems for p in problems) else 0
    if args.json:
        print(jsontext.dumps([finding_for(r).to_dict() | {"file": r.file} for r in rules], indent=2))
        return 0
    # control characters escaped before wrapping (which would fold them into spaces), as every printed line is
    rows = [(visible(r.id), r.severity, r.confidence, r.engine or "-", visible(r.summary)) for r in rules]
    sys.stdout.write("".join(line + "\n" for line in rules_table(rows)))
    print(f"\n{len(rules)} of {len(kb.rules)} rules")
    return 0


def rules_table(rows: Sequence[tuple[str, str, str, str, str]], width: int | None = None) -> list[str]:
    """`gpucompat rules` as a table with a header row, no line wider than the terminal: the summary beside the
    other columns where at least 30 columns are left for it, else on the lines below each rule, wrapped."""
    import textwrap

    from .common.textfit import terminal_width

    width = width or terminal_width()
    head = ("rule", "severity", "confidence", "engine", "summary")
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(4)]
    left = sum(widths) + 4
    beside = width - left >= 30

    def cells(row: Sequence[str]) -> str:
        return " ".join(value.ljust(w) for value, w in zip(row[:4], widths))

    if left - 1 > width:  # not even the four short columns fit: each rule's id on a line of its own
        lines = ["rule", "    severity confidence engine: summary"]
        for row in rows:
            lines.append(fit(row[0], width).rstrip())
            lines += textwrap.wrap(f"{row[1]} {row[2]} {row[3]}: {row[4]}", width, initial_indent="    ",
                                   subsequent_indent="    ")
        return lines
    lines = [(cells(head) + (" summary" if beside else "")).rstrip()]
    for row in rows:
        if beside:
            wrapped = textwrap.wrap(row[4], width - left) or [""]
            lines.append(f"{cells(row)} {wrapped[0]}".rstrip())
            lines += [" " * left + more for more in wrapped[1:]]
        else:
            lines.append(fit(cells(row).rstrip(), width).rstrip("\n"))
            lines += textwrap.wrap(row[4], width, initial_indent="    ", subsequent_indent="    ")
    return lines


def _show_rules(kb: Any, ids: list[str], as_json: bool) -> int:
    """`gpucompat rules ID ...`: each rule in full, with its computed window and its lint problems."""
    from .kb import finding_for
    from .kb.describe import describe_when
    from .kb.history import histories
    from .kb.lint import lint_rules, stack_history
    from .kb.windows import describe

    by_id = kb.by_id()
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise InputError("rules", None, f"no rule {unknown[0]!r} (gpucompat rules lists them)")
    found = histories()
    out = []
    for rule_id in ids:
        rule = by_id[rule_id]
        history = (found.get(rule.engine) or stack_history(rule.engine, found)) if rule.engine else None
        problems = [p for r in lint_rules([rule], known=found) for p in r.problems]
        if as_json:
            out.append(finding_for(rule).to_dict() | {"file": rule.file, "window": describe(rule, history),
                                                      "lint": problems})
            continue
        print(f"{rule.id} ({rule.severity}, {rule.confidence}, {rule.engine or 'no engine'}): {rule.summary}")
        print(f"when: {describe_when(rule) or 'always'}")
        if rule.flag_facts:
            print("flags: " + ", ".join(f.name + (f" ({f.versions})" if f.versions is not None else
                                                  " (none)" if f.nowhere else "") for f in rule.flag_facts))
        for line in describe(rule, history):
            print(line)
        print("lint: " + ("; ".join(problems) if problems else "no problem"))
        print()
    if as_json:
        print(jsontext.dumps(out, indent=2))
    return 1 if any(r.problems for r in lint_rules([by_id[i] for i in ids], known=found)) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
