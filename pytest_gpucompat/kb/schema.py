"""The knowledge base as data: rules, their parsed conditions and sources, and the vocabularies they use.

Everything here is frozen and parsed once at load time (``kb.load``); matching (``kb.match``, ``kb.index``) only
reads it.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_type_hints

from packaging.specifiers import SpecifierSet

from ..common.versions import normalize_package
from .bounds import Bounds
from .linear_regex import LinearPattern

SEVERITIES = ("broken", "degraded", "advice")
FAILURES = ("crash", "hang", "error-at-start", "oom", "wrong-output", "slow", "memory", "fallback", "precision",
            "none")
CONFIDENCES = ("documents", "upstream", "verified")
ACTIONS = ("skip", "xfail-strict", "xfail", "annotate")
"""What a finding does to a cell, strongest first (kb.verdicts.action_for)."""
SOURCE_KINDS = ("seed", "code", "doc", "issue", "report")
INTERCONNECTS = ("pcie", "nvlink")
INSTALL_STATES = ("complete", "incomplete")
MODEL_SHAPE = ("architecture", "head_size", "num_attention_heads", "num_key_value_heads", "torch_dtype", "quant_method",
               "quant_bits", "sliding_window", "mla")
"""The facts of a cell's model a rule may test (`when.model_shape`): read from the checkpoint's config.json by the
plugin (checkpoint.model_shape), given by `gpucompat check --model`, or in a fingerprint's `params`. Judged as
parameters of the cell under these names; a fact the config does not give is unknown and matches no condition."""
WEIGHTS_PARAM = "model_weights_mib"
"""The model's weights in MiB for the cell's dtype: measured from the checkpoint by the plugin, or given in a
fingerprint's ``params`` for ``gpucompat check``; what ``needs.gpu_memory_mib`` divides over the GPUs."""


@dataclass(frozen=True)
class Source:
    kind: str
    ref: str


@dataclass(frozen=True)
class ParamCondition:
    """A list of accepted values (normalized by ``norm_value``; None = not set), or a specifier on a numeric value.
    Judged by ``kb.match.param_condition_holds``."""

    values: tuple[Any, ...] | None = None
    specifier: SpecifierSet | None = None


@dataclass(frozen=True)
class Conditions:
    """A rule's ``when``: every condition that is set must hold (AND); an unset one is no condition."""

    gpu: tuple[str, ...] = ()
    arch: tuple[str, ...] = ()
    compute_capability: SpecifierSet | None = None
    gpu_count: SpecifierSet | None = None
    gpu_memory_mib: SpecifierSet | None = None
    interconnect: str | None = None
    driver: SpecifierSet | None = None
    cuda_driver: SpecifierSet | None = None
    cuda_runtime: SpecifierSet | None = None
    # (package, specifier): installed in a version the specifier accepts (an empty one: installed at all); a
    # specifier of None: the package is NOT installed (`absent` in a rule file)
    packages: tuple[tuple[str, SpecifierSet | None], ...] = ()
    # (the rule's engine, "complete" | "incomplete"): the engine is installed with (or without) every requirement
    # it declares for this platform (the fingerprint's `installs`)
    install: tuple[str, str] | None = None
    # the cell needs the product of these parameters' values (absent = 1) in GPUs: holds when fewer are visible
    needs_gpus: tuple[str, ...] = ()
    # the model's weights split over the product of these parameters must fit the smallest visible GPU
    needs_memory: tuple[str, ...] = ()
    # (dividend, divisor): the cell needs the first parameter divisible by the second (attention heads by the tensor
    # parallel size): holds when both are whole numbers and it is not; not judged while either is unknown
    needs_divisible: tuple[tuple[str, str], ...] = ()
    params: tuple[tuple[str, ParamCondition], ...] = ()
    model: tuple[str, ...] = ()
    # (variable, values, negated; None = not set): the runner's environment (the fingerprint's ``env``) has one of
    # the values (negated: none of them), e.g. a rule that holds only while an engine variable is not switched off
    env: tuple[tuple[str, tuple[str | None, ...], bool], ...] = ()

    @property
    def has_gpu_condition(self) -> bool:
        return bool(self.gpu or self.arch or self.compute_capability or self.gpu_memory_mib)


NO_CONDITIONS = Conditions()
SPECIFIER_FIELDS: tuple[str, ...] = tuple(name for name, hint in get_type_hints(Conditions).items()
                                          if hint == SpecifierSet | None)
"""The conditions that are one version specifier (``when.driver: ">=580"``), in field order: the loader parses
each of them as one and ``describe_when`` says each; a new one is its field here (docs/extending.md, "Add a rule
field")."""


@dataclass(frozen=True)
class FlagFact:
    """A flag (``--kv-cache-dtype``) or environment variable (``VLLM_USE_V1``) a rule names. With ``versions`` it
    exists in exactly the engine releases that specifier accepts (checked on both sides of each bound); without,
    in every release of the rule's own range. ``--flag=value`` says the flag accepts that value. ``gpucompat rules
    --lint`` checks all of it against the engine history."""

    name: str
    versions: SpecifierSet | None = None
    nowhere: bool = False  # `versions: none`: no release has it (a flag copied from an article that never existed)


@dataclass(frozen=True)
class Rule:
    id: str
    summary: str
    severity: str
    failure: str
    confidence: str
    sources: tuple[Source, ...]
    engine: str | None = None
    when: Conditions = field(default_factory=Conditions)
    symptom: str | None = None
    workaround: str | None = None
    flags: tuple[str, ...] = ()
    flag_facts: tuple[FlagFact, ...] = ()  # the same names, with the releases each exists in where stated
    claims: tuple[str, ...] = ()
    note: str | None = None
    file: str = ""
    # regular expressions, compiled on load by RE2 (kb/signatures.py): any of them in a failed cell's reason or log
    # tail identifies the failure as this rule's
    signature: tuple[LinearPattern, ...] = ()
    # what the rule's release window rests on (kb.bounds): lint computes the window and holds when.packages to it
    bounds: Bounds | None = None


@dataclass(frozen=True)
class KnowledgeBase:
    rules: tuple[Rule, ...]
    files: tuple[str, ...] = ()
    not_encoded: Mapping[str, str] = field(default_factory=dict, hash=False)

    def by_id(self) -> dict[str, Rule]:
        return {r.id: r for r in self.rules}


def filter_rules(
    rules: Iterable[Rule], engine: str | None = None, severity: str | None = None, confidence: str | None = None
) -> list[Rule]:
    """``gpucompat rules --engine/--severity/--confidence``: ``engine="none"`` selects the rules without one."""
    out = []
    for r in rules:
        if engine is not None and (r.engine or "none") != normalize_package(engine):
            continue
        if severity is not None and r.severity != severity:
            continue
        if confidence is not None and r.confidence != confidence:
            continue
        out.append(r)
    return out
