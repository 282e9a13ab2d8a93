"""Small shared pieces: errors, atomic file writes, paths, text fitting, version comparison, the metric
catalog.

PYTEST_DONT_REWRITE
"""
