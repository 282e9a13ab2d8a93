"""Version and specifier parsing shared by rules, matrices and fingerprints.

Driver versions (580.159.04), CUDA versions (13.0), local torch builds (2.11.0+cu130) and
pre-releases (1.4.0rc1) are all PEP 440 versions; a bare version in a condition means "this
release line" (``"12.1"`` matches 12.1 and 12.1.105, ``"535"`` matches 535.104.05).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

_OPERATOR = re.compile(r"^\s*(~=|==|!=|<=|>=|<|>|===)")


def parse_version(text: str) -> Version:
    """Parse a version; raises ValueError with the offending text. Remembered by the text itself: a value that is not
    a str is parsed as its ``str()``, and is no key of its own (``1`` and ``True``, ``0.0`` and ``-0.0`` are equal
    keys, different texts)."""
    return _parse_text(text if text.__class__ is str else str(text))


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Version:
    try:
        return Version(text.strip())
    except InvalidVersion:
        raise ValueError(f"'{text}' is not a version") from None


def is_version(text: object) -> bool:
    try:
        parse_version(str(text))
    except ValueError:
        return False
    return True


@lru_cache(maxsize=4096)
def parse_specifier(text: str) -> SpecifierSet:
    """Parse a PEP 440 specifier set; a bare version means ``==X.*``."""
    raw = str(text).strip()
    if not raw:
        raise ValueError("empty specifier")
    parts = []
    for part in raw.split(","):
        part = part.strip()
        if not _OPERATOR.match(part):
            if part.endswith(".*"):
                part = "==" + part
            else:
                parse_version(part)
                part = f"=={part}.*"
        parts.append(part)
    try:
        return SpecifierSet(",".join(parts))
    except InvalidSpecifier:
        raise ValueError(f"'{raw}' is not a version specifier") from None


def matches(spec: SpecifierSet, version: Version) -> bool:
    """Pre-releases and local builds count: a 1.4.0rc1 or 2.11.0+cu130 runner is still that version."""
    return spec.contains(version, prereleases=True)


_SEPARATORS = re.compile(r"[-_.]+")


def normalize_package(name: str) -> str:
    """``tensorrt_llm`` and ``TensorRT-LLM`` are the same distribution: PEP 503's normal form, as
    ``packaging.utils.canonicalize_name`` writes it (written here: that module imports packaging's wheel-tag
    machinery, which nothing else of a run needs; tests/test_installed.py holds the two to the same names)."""
    return _SEPARATORS.sub("-", name).lower()


def norm_value(value: Any) -> Any:
    """Compare parameter values loosely: 16 == 16.0 == "16", "FP8" == "fp8", True == "true" (rule conditions and
    matrix values, and a cell's setting against an engine's default)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value).strip().lower()
