"""The per-test hooks of GPU sharing are registered only where they have something to do."""

from __future__ import annotations

import pytest

from pytest_gpucompat.session import boundaries


def test_a_run_without_sharing_or_engines_has_no_per_test_hooks_until_a_pool_exists(pytester: pytest.Pytester):
    config = pytester.parseconfigure("--gpucompat", "-p", "no:cacheprovider")
    assert not config.pluginmanager.has_plugin("gpucompat-test-bounds")
    boundaries.watch(config)
    boundaries.watch(config)  # a second pool: nothing more
    plugin = config.pluginmanager.get_plugin("gpucompat-test-bounds")
    assert plugin is not None
    assert [impl.plugin for impl in config.hook.pytest_runtest_setup.get_hookimpls()].count(plugin) == 1


def test_an_exclusive_test_after_the_pool_started_stops_its_idle_engines(pytester: pytest.Pytester):
    """The session's pool starts in the first test that asks for it; an exclusive test after it empties it at its
    setup (``sharing.begin``), as it did when the hooks were always registered."""
    pytester.makeconftest("""
        import pytest
        from pytest_gpucompat.engines.pool import EnginePool

        IDLED = []

        @pytest.fixture(scope="session", autouse=True)
        def count_idle_outs():
            original = EnginePool.idle_out
            EnginePool.idle_out = lambda self: IDLED.append(1)
            yield IDLED
            EnginePool.idle_out = original
    """)
    pytester.makepyfile("""
        import pytest

        def test_first(gpucompat_pool, count_idle_outs):
            assert count_idle_outs == []

        @pytest.mark.gpucompat(engine="hf", params={"a": [1]}, exclusive=True)
        def test_alone(gpucompat_cell, count_idle_outs):
            assert count_idle_outs == [1]
    """)
    pytester.runpytest("--gpucompat", "-p", "no:cacheprovider").assert_outcomes(passed=2)
