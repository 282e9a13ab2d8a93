"""The pytest side of a run: per-run state, the report collector, xdist workers and how they share a GPU,
interrupts, golden recording, what the terminal is told.

PYTEST_DONT_REWRITE
"""
