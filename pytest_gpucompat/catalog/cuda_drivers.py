"""The driver a CUDA version needs: what the "CUDA Version" nvidia-smi prints says of the driver itself.

Reports state the CUDA version their driver supports (nvidia-smi's header, NVML's ``cudaDriverVersion``) more often
than the driver's number, while driver rules are written on the number (``driver: "<525.60.13"``). A driver that
supports CUDA X.Y exactly is at least X.Y's GA driver and older than the next CUDA minor's, so ``driver_range``
gives the drivers a stated CUDA version allows and ``kb.match`` judges a driver condition on all of them: it holds
only when it holds for every driver of the range, and is unknown otherwise.

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from packaging.version import Version

GA_DRIVERS: tuple[tuple[str, str], ...] = (
    ("10.0", "410.48"), ("10.1", "418.39"), ("10.2", "440.33"),
    ("11.0", "450.36.06"), ("11.1", "455.23"), ("11.2", "460.27.03"), ("11.3", "465.19.01"), ("11.4", "470.42.01"),
    ("11.5", "495.29.05"), ("11.6", "510.39.01"), ("11.7", "515.43.04"), ("11.8", "520.61.05"),
    ("12.0", "525.60.13"), ("12.1", "530.30.02"), ("12.2", "535.54.03"), ("12.3", "545.23.06"), ("12.4", "550.54.14"),
    ("12.5", "555.42.02"), ("12.6", "560.28.03"), ("12.8", "570.26"), ("12.9", "575.51.03"), ("13.0", "580.65.06"),
)
"""CUDA minor -> the oldest Linux x86_64 driver that supports it (CUDA Toolkit release notes, table "CUDA Toolkit and
Corresponding Driver Versions": the minor's first release, 11.0 its RC). The last entry's range has no upper end: a
newer CUDA not listed here is judged as "at least this driver"."""

_TABLE = tuple((Version(cuda), Version(driver)) for cuda, driver in GA_DRIVERS)
_SPELLED = {Version(driver): driver for _, driver in GA_DRIVERS}


def spelled(driver: Version) -> str:
    """A driver of the table as NVIDIA writes it (``520.61.05``, which ``Version`` normalizes to 520.61.5)."""
    return _SPELLED.get(driver, str(driver))


def driver_range(cuda_driver: Version) -> tuple[Version, Version | None] | None:
    """The drivers whose supported CUDA version is ``cuda_driver`` (its major.minor): [lowest, upper) with upper
    None for no known end; None for a CUDA older than the table."""
    minor = Version(".".join(str(p) for p in (cuda_driver.release + (0,))[:2]))
    below = [i for i, (cuda, _) in enumerate(_TABLE) if cuda <= minor]
    if not below:
        return None
    i = below[-1]  # a minor the table skips (12.7) lies between its neighbours
    return _TABLE[i][1], _TABLE[i + 1][1] if i + 1 < len(_TABLE) else None
