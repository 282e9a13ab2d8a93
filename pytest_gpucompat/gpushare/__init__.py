"""Cells sharing a GPU: what an engine needs and what fits (pure), and the ledger the workers share.

PYTEST_DONT_REWRITE
"""
