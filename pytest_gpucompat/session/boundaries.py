"""The hooks GPU sharing needs at each test's setup and after its teardown (``sharing.begin``, ``GpuShare.end``),
registered once they have something to do: in a worker sharing its GPU (at configure) and once the session's engine
pool exists. A run with neither, such as a suite of quick cells, pays no hook call per test for them (pluggy calls
every registered implementation of a hook, a wrapper as a generator, for each test).

PYTEST_DONT_REWRITE
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import sharing

_NAME = "gpucompat-test-bounds"


class _TestBounds:
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        sharing.begin(item.config, item)  # after skip marks, before fixtures: an exclusive test waits here

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        try:
            return (yield)
        finally:
            share = sharing.share_for(item.config)
            if share is not None:
                share.end(item)


def watch(config: pytest.Config) -> None:
    """From now on, each test's setup and teardown go through sharing (once per run; later calls change nothing)."""
    if not config.pluginmanager.has_plugin(_NAME):
        config.pluginmanager.register(_TestBounds(), _NAME)
