"""The checks the suites make: outputs against a reference (compare), memory over engine lives (memory, cycles).

PYTEST_DONT_REWRITE
"""
