"""A driver given by the CUDA version it supports (nvidia-smi's "CUDA Version"): a driver rule judged on every
driver that version allows (catalog.cuda_drivers, kb.match): plain pytest."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from pytest_gpucompat.catalog.cuda_drivers import GA_DRIVERS, driver_range, spelled
from pytest_gpucompat.kb import load_kb
from pytest_gpucompat.kb.index import matching_rules
from pytest_gpucompat.kb.match import Facts, contradiction, rule_matches, spec_holds_on_range
from pytest_gpucompat.machine.fingerprint import from_dict


@pytest.mark.parametrize(("cuda", "expected"), [
    ("11.8", ("520.61.05", "525.60.13")),
    ("12.2", ("535.54.03", "545.23.06")),
    ("12.4.1", ("550.54.14", "555.42.02")),
    ("12.7", ("560.28.03", "570.26")),  # a minor the table skips: between its neighbours
    ("13.0", ("580.65.06", None)),  # the newest: no known end
    ("14.1", ("580.65.06", None)),
    ("9.2", None),
])
def test_the_drivers_a_cuda_version_allows(cuda: str, expected: tuple[str, str | None] | None) -> None:
    found = driver_range(Version(cuda))
    assert (None if found is None else (spelled(found[0]), found[1] and spelled(found[1]))) == expected


def test_the_table_is_ordered_both_ways() -> None:
    cudas = [Version(c) for c, _ in GA_DRIVERS]
    drivers = [Version(d) for _, d in GA_DRIVERS]
    assert cudas == sorted(cudas) and drivers == sorted(drivers) and len(set(drivers)) == len(drivers)


@pytest.mark.parametrize(("spec", "lower", "upper", "holds"), [
    ("<525.60.13", "520.61.05", "525.60.13", True),
    ("<525.60.13", "525.60.13", "530.30.02", False),
    ("<525", "520.61.05", "525.60.13", False),  # 525.0 to 525.60.13 may be in the range
    (">=525.60.13,<550.54.14", "535.54.03", "545.23.06", True),
    (">=525.60.13,<550.54.14", "550.54.14", "555.42.02", False),
    (">=580", "580.65.06", None, True),
    ("<600", "580.65.06", None, False),  # no known end: not every driver of it
    ("==535.54.03", "535.54.03", "545.23.06", False),  # not a bound: cannot be told from a range
])
def test_a_specifier_on_a_range_of_drivers(spec: str, lower: str, upper: str | None, holds: bool) -> None:
    assert spec_holds_on_range(SpecifierSet(spec), Version(lower), Version(upper) if upper else None) is holds


@pytest.mark.parametrize(("stated", "fires"), [
    ({"cuda_driver": "11.8"}, True),  # a CUDA 11.8 driver is below 525.60.13
    ({"cuda_driver": "12.0"}, False),
    ({"cuda_driver": "11.8", "driver": "530.30.02"}, False),  # a stated driver decides, not its CUDA
    ({}, False),  # neither: unknown, never a match
])
def test_a_driver_rule_judged_on_the_cuda_version(stated: dict[str, str], fires: bool) -> None:
    kb = load_kb()
    rule = kb.by_id()["cuda-12-runtime-needs-r525"]
    fp = from_dict({"gpus": [{"name": "NVIDIA A100-SXM4-80GB"}], "cuda_runtime": "12.1", **stated}, "t", None)
    assert rule_matches(rule, Facts.of(fp), None, {}) is fires
    assert ("cuda-12-runtime-needs-r525" in {r.id for r in matching_rules(kb, fp)}) is fires  # the index agrees
    # explaining a failure: only a stated driver contradicts the rule; a range of drivers is not a known driver
    assert contradiction(rule, Facts.of(fp), None, {}) == ("when.driver" if "driver" in stated else None)
