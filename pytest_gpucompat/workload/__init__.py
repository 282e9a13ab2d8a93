"""What cells run: the test matrix, built-in models and checkpoints, tokenizers, prompts, the float32
reference, inputs, golden outputs.

PYTEST_DONT_REWRITE
"""
