"""A switch for transformers' progress bars, used wherever a tiny model is loaded or saved (the hf adapter, the
workload's model and prompt helpers).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_progress_bars() -> Iterator[None]:
    """transformers draws progress bars for tiny loads and saves; keep test output readable, then restore."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    enabled = getattr(hf_logging, "is_progress_bar_enabled", lambda: False)()
    if enabled and hasattr(hf_logging, "disable_progress_bar"):
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled and hasattr(hf_logging, "enable_progress_bar"):
            hf_logging.enable_progress_bar()
