"""The knowledge base: rule files (``matrices/rules/*.yaml``) and what they say about a machine or a test cell.

Modules, in the order data flows through them:

- ``schema``: the frozen data (``Rule``, ``Conditions``, ``KnowledgeBase``, ...) and the vocabularies;
- ``load``: YAML validation and ``load_kb`` (cached per file version);
- ``match``: a fingerprint's ``Facts``, one function per condition kind, the reference ``rule_matches`` (the test
  oracle), ``describe_runner`` and the fleet-axis check;
- ``index``: ``matching_rules``, every rule at once through bit masks built from ``match``'s functions (with
  ``paramkey``: a cell's parameters as one exact key; ``rulesets``: a result mask as its rules);
- ``verdicts``: what matched rules do (``Finding``, ``Decision``, the policy);
- ``evaluate``: the one pipeline, ``evaluate_cell`` (pytest, fleet preview) and ``evaluate_machine`` (check);
- ``check``: ``gpucompat check``'s text and JSON; ``lint``: ``gpucompat rules --lint``;
- ``signatures`` (with ``regex_safety``): which known issue a failed cell is, by the rules' ``signature``;
  ``propose`` (with ``failure_modes``): the rule ``gpucompat explain`` proposes for a failure no rule explains.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from .evaluate import CellVerdict, evaluate_cell, evaluate_machine
from .index import clear_match_cache, matching_rules
from .load import builtin_rule_files, load_kb, load_rule_file, parse_rule
from .match import Facts, describe_runner, rule_matches
from .schema import (
    CONFIDENCES,
    FAILURES,
    INTERCONNECTS,
    SEVERITIES,
    SOURCE_KINDS,
    WEIGHTS_PARAM,
    Conditions,
    KnowledgeBase,
    ParamCondition,
    Rule,
    Source,
    filter_rules,
)
from .signatures import Failure, explaining_rules
from .verdicts import Decision, Finding, cell_findings, concerns_cell, confirmed, decide, finding_for, findings_for

__all__ = [
    "CONFIDENCES",
    "FAILURES",
    "INTERCONNECTS",
    "SEVERITIES",
    "SOURCE_KINDS",
    "WEIGHTS_PARAM",
    "CellVerdict",
    "Conditions",
    "Decision",
    "Facts",
    "Failure",
    "Finding",
    "KnowledgeBase",
    "ParamCondition",
    "Rule",
    "Source",
    "builtin_rule_files",
    "cell_findings",
    "clear_match_cache",
    "concerns_cell",
    "confirmed",
    "decide",
    "describe_runner",
    "evaluate_cell",
    "evaluate_machine",
    "explaining_rules",
    "filter_rules",
    "finding_for",
    "findings_for",
    "load_kb",
    "load_rule_file",
    "matching_rules",
    "parse_rule",
    "rule_matches",
]
