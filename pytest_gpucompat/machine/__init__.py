"""The machine: its fingerprint (GPU, driver, CUDA, interconnect), environment, installed engines and their
declared requirements, the software stack.

PYTEST_DONT_REWRITE
"""
