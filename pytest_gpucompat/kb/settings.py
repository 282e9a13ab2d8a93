"""A cell's engine settings checked against the installed release's history: a setting the release does not have,
or a value that is not one of its choices, is a known failure at start, stated before anything starts.

Matrices outlive releases: ``enable_flashinfer`` was an SGLang setting for five releases, ``--disable-flashinfer``
for thirty. Without this, such a cell starts the engine and fails with a TypeError deep in its constructor; with it,
the cell is skipped with a reason that says which releases have the setting. Only what the history knows is judged:
a setting no release has (a keyword of the engine's Python API that is no command-line flag) is left alone, and so is
a release the history does not hold.

The findings come from rules made here (``setting_rules``), so they flow through the same pipeline as the knowledge
base's own: the same decision, reasons and reports.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ..catalog.params import HARNESS_PARAMS
from .history import History, cached_history
from .schema import Conditions, ParamCondition, Rule, Source

_SAFE = str.maketrans({c: "-" for c in "_ ./:=+"})


def setting_rules(engine: str | None, version: str | None, params: Mapping[str, Any]) -> tuple[Rule, ...]:
    """Rules for the settings in ``params`` that ``engine`` ``version`` lacks or refuses; () when nothing is known."""
    if engine is None or version is None or not params:
        return ()
    history = cached_history(engine)
    if history is None:
        return ()
    index = history.index_of(version)
    if index is None or not history.releases[index].read:
        return ()
    out = []
    for name, value in params.items():
        if name in HARNESS_PARAMS or not history.dest_known(name):
            continue
        key = value if isinstance(value, (str, int, float, bool)) or value is None else repr(value)
        rule = _rule(history, index, name, key)
        if rule is not None:
            out.append(rule)
    return tuple(out)


@lru_cache(maxsize=4096)
def _rule(history: History, index: int, name: str, value: Any) -> Rule | None:
    """One rule per (release, setting, value), made once: the pipeline remembers verdicts by rule identity."""
    release = history.releases[index]
    engine = history.engine
    found = history.flag_for_dest(name, index)
    source = Source("code", f"{engine} {release.text} as released ({release.file or 'its artifact'}), read into "
                            f"matrices/history/{engine}.json")
    slug = f"{engine}-{release.text}".translate(_SAFE)
    if found is None:
        return Rule(
            id=f"{slug}-has-no-setting-{name.translate(_SAFE)}",
            summary=f"{engine} {release.text} has no setting '{name}' (it exists in {history.dest_where(name)}): "
                    f"the engine refuses it at start.",
            severity="broken", failure="error-at-start", confidence="upstream", sources=(source,), engine=engine,
            when=Conditions(params=((name, ParamCondition()),)),
            workaround="Drop the setting, or use a release that has it.",
        )
    flag, attrs = found
    choices = attrs.get("choices")
    if not isinstance(value, str) or not isinstance(choices, list) or not choices:
        return None
    if value.lower() in {str(c).lower() for c in choices}:
        return None
    shown = ", ".join(map(str, choices[:12])) + (", ..." if len(choices) > 12 else "")
    return Rule(
        id=f"{slug}-refuses-{name.translate(_SAFE)}-{value.translate(_SAFE).lower()}",
        summary=f"{engine} {release.text} does not accept {name}={value!r} ({flag} choices: {shown}): the engine "
                f"refuses it at start.",
        severity="broken", failure="error-at-start", confidence="upstream", sources=(source,), engine=engine,
        when=Conditions(params=((name, ParamCondition(values=(value,))),)),
        workaround=f"Use one of its choices: {shown}.",
    )
