"""Whether each installed engine is installed completely: the fingerprint's `installs`.

An engine installed without what it declares it needs (``pip install --no-deps``, an image built by hand) still
runs, but picks other backends than a default install: vLLM without flashinfer-python, say. For each engine of the
registry that has `packages` and is installed, its ``Requires-Dist`` requirements (installed.requirements) that
apply to this platform with no extras are checked against the installed distributions, and its acceleration
packages (the descriptor's `acceleration`) are recorded with their versions. Read like the rest of the fingerprint:
metadata files only, no import of importlib.metadata or of the engine; packaging's requirement parser is imported
only when an engine is installed.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..catalog.registry import canonical_name, descriptors, tracked_packages
from ..common.errors import InputError
from ..common.inputs import bool_field, text_field
from ..common.installed import find, normalize, requirements
from ..common.versions import is_version


@dataclass(frozen=True)
class EngineInstall:
    """Whether an installed engine has what it declares it needs: its ``Requires-Dist`` requirements that apply to
    this platform with no extras, each installed in a version its specifier allows.

    complete:     ``not missing``; None when its requirements could not be read (the fingerprint's `reasons` say
                  why). An engine installed without them (``pip install --no-deps``, a hand-built image) runs, but
                  picks other backends than a default install: vLLM without flashinfer-python, say.
    missing:      every unsatisfied requirement as its text plus why, sorted:
                  ``flashinfer-python==0.6.14 (not installed)``, ``xgrammar==0.2.9 (0.2.7 installed)``.
    acceleration: the engine's acceleration packages (its descriptor's `acceleration`) that are installed, with
                  their versions; absent ones are left out.
    """

    version: str | None = None
    complete: bool | None = None
    missing: tuple[str, ...] = ()
    acceleration: Mapping[str, str] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "complete": self.complete, "missing": list(self.missing),
                "acceleration": dict(self.acceleration)}

    def describe(self) -> str:
        """`incomplete install: missing flashinfer-python==0.6.14 (not installed); acceleration flash-attn 2.8.3`."""
        if self.complete is None:
            head = "install not checked (its requirements could not be read)"
        elif self.complete:
            head = "complete install"
        else:
            head = "incomplete install: missing " + (", ".join(self.missing) or "requirements not listed")
        found = ", ".join(f"{name} {version}" for name, version in self.acceleration.items()) or "none"
        return f"{head}; acceleration {found}"


def engine_installs(reasons: list[str] | None = None) -> dict[str, EngineInstall]:
    """For each engine of the registry that has `packages` and is installed: its declared requirements checked
    against what is installed (EngineInstall), and its acceleration packages found.

    Requirements come from the engine's METADATA (installed.requirements), keep those whose marker holds here with
    no extra, and compare names PEP 503-normalized; an installed prerelease counts as satisfying, as `pip check`
    has it. What cannot be read or judged makes `complete` None with a line in `reasons`, never an exception.
    packaging's requirement parser is imported only when an engine is installed.
    """
    reasons = [] if reasons is None else reasons
    engines = [d for d in descriptors() if d.packages]
    found = find(dict.fromkeys(name for d in engines for name in (*d.packages, *d.acceleration)), reasons)
    declared: dict[str, tuple[str, str | None, list[str] | None]] = {}  # engine -> (distribution, version, lines)
    for d in engines:
        dist = next((name for name in d.packages if name in found), None)
        if dist is None:
            continue
        try:
            lines: list[str] | None = requirements(dist, found[dist])
        except (OSError, UnicodeError) as exc:
            reasons.append(f"{d.name} {found[dist].version}: its requirements cannot be read: {exc}")
            lines = None
        declared[d.name] = (dist, found[dist].version, lines)
    if not declared:
        return {}
    from packaging.requirements import InvalidRequirement, Requirement

    environment = {"extra": ""}
    applying: dict[str, list[Requirement] | None] = {}
    for engine, (_, version, lines) in declared.items():
        if lines is None:
            applying[engine] = None
            continue
        kept: list[Requirement] = []
        for line in lines:
            try:
                req = Requirement(line)
                if req.marker is None or req.marker.evaluate(environment):
                    kept.append(req)
            except (InvalidRequirement, ValueError, LookupError, TypeError) as exc:
                reasons.append(f"{engine} {version}: requirement {line!r} cannot be judged: {exc}")
                applying[engine] = None
                break
        else:
            applying[engine] = kept
    have = find(dict.fromkeys(normalize(r.name) for reqs in applying.values() for r in reqs or ()))
    out: dict[str, EngineInstall] = {}
    descriptor_of = {d.name: d for d in engines}
    for engine, reqs in applying.items():
        missing = None if reqs is None else sorted({text for r in reqs if (text := _unmet(r, have)) is not None})
        out[engine] = EngineInstall(
            version=declared[engine][1],
            complete=None if missing is None else not missing,
            missing=tuple(missing or ()),
            acceleration={name: found[name].version for name in descriptor_of[engine].acceleration if name in found},
        )
    return out


def _unmet(req: Any, have: Mapping[str, Any]) -> str | None:
    """``flashinfer-python==0.6.14 (not installed)`` or ``xgrammar==0.2.9 (0.2.7 installed)``; None when met."""
    req.marker = None  # the text names what is needed; the marker held, or the requirement would not be here
    installed = have.get(normalize(req.name))
    if installed is None:
        return f"{req} (not installed)"
    if not req.specifier:
        return None
    try:
        ok = req.specifier.contains(installed.version, prereleases=True)
    except ValueError:  # not a PEP 440 version, with packaging versions that raise for one
        ok = False
    return None if ok else f"{req} ({installed.version} installed)"


_INSTALL_KEYS = set(EngineInstall.__dataclass_fields__)


def installs_field(data: Any, source: str, where: str) -> dict[str, EngineInstall]:
    """`installs` of a file: engine (a registry name or alias of an engine with `packages`) -> {version, complete,
    missing, acceleration}, each optional; `complete` left out (not null) follows `missing` where that is given."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise InputError(source, where, "must map engine names to {version, complete, missing, acceleration}")
    checked = tracked_packages()
    out: dict[str, EngineInstall] = {}
    for key, entry in data.items():
        at = f"{where}.{key}"
        try:
            engine = canonical_name(str(key))
        except ValueError:
            engine = str(key)
        if engine not in checked:
            raise InputError(source, at, f"not an engine whose install is checked ({', '.join(checked)})")
        if not isinstance(entry, Mapping):
            raise InputError(source, at, "must be a mapping of version, complete, missing, acceleration")
        unknown = set(map(str, entry)) - _INSTALL_KEYS
        if unknown:
            raise InputError(source, f"{at}.{sorted(unknown)[0]}", "unknown key")
        version = text_field(entry.get("version"), source, f"{at}.version")
        if version is not None and not is_version(version):
            raise InputError(source, f"{at}.version", f"'{version}' is not a version")
        complete = bool_field(entry.get("complete"), source, f"{at}.complete")
        missing_raw = entry.get("missing")
        if missing_raw is not None and not isinstance(missing_raw, list):
            raise InputError(source, f"{at}.missing", "must be a list of requirements, each with why in parentheses")
        items = set()
        for i, item in enumerate(missing_raw or ()):
            if not isinstance(item, str) or not item.strip():
                raise InputError(source, f"{at}.missing[{i}]", "must be a requirement, as `flashinfer-python==0.6.14 "
                                 "(not installed)`")
            items.add(item.strip())
        missing = tuple(sorted(items))
        if "complete" not in entry and missing_raw is not None:  # `complete: null` says: not known
            complete = not missing
        if complete and missing:
            raise InputError(source, f"{at}.complete", "is true, but `missing` lists unmet requirements")
        acceleration_raw = entry.get("acceleration")
        if acceleration_raw is not None and not isinstance(acceleration_raw, Mapping):
            raise InputError(source, f"{at}.acceleration", "must map package names to versions")
        acceleration = {}
        for name, value in (acceleration_raw or {}).items():
            text = text_field(value, source, f"{at}.acceleration.{name}")
            if text is None or not is_version(text):
                raise InputError(source, f"{at}.acceleration.{name}", f"'{value}' is not a version")
            acceleration[normalize(str(name))] = text
        out[engine] = EngineInstall(version=version, complete=complete, missing=missing, acceleration=acceleration)
    return out


__all__ = ["EngineInstall", "engine_installs", "installs_field"]
