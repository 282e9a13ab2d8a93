"""Each hookspec, implemented in a conftest as a user would: the hook is called and its answer is used."""

from __future__ import annotations

import json

import pytest

FAKE_GPUS = """
import dataclasses
import pytest_gpucompat.machine.fingerprint as fingerprint

_collect = fingerprint.collect


def _four_gpus(*args, **kwargs):
    fp = _collect(*args, **kwargs)
    gpus = tuple(fingerprint.GPU(index=i, name="NVIDIA H200", uuid=f"GPU-{i}") for i in range(4))
    return dataclasses.replace(fp, gpus=gpus)


fingerprint.collect = _four_gpus
"""


@pytest.mark.parametrize("hook", [False, True], ids=["default", "conftest-hook"])
def test_gpu_for_worker_hook_sets_each_workers_gpus(pytester: pytest.Pytester, hook: bool) -> None:
    pytest.importorskip("xdist")
    conftest = FAKE_GPUS
    if hook:
        conftest += """

def pytest_gpucompat_gpu_for_worker(config, worker_index, gpu_uuids):
    return ",".join(gpu_uuids[2 * worker_index: 2 * worker_index + 2])
"""
    pytester.makeconftest(conftest)
    pytester.makepyfile(f"""
        import json, os

        def test_where(worker_id):
            with open(os.path.join({str(pytester.path)!r}, worker_id + ".json"), "w") as fh:
                json.dump(os.environ.get("CUDA_VISIBLE_DEVICES"), fh)
    """)
    pytester.runpytest("--gpucompat", "-n", "2").assert_outcomes(passed=1)
    seen = {p.stem: json.loads(p.read_text()) for p in pytester.path.glob("gw*.json")}
    (worker, value), = seen.items()
    index = int(worker[2:])
    expected = f"GPU-{2 * index},GPU-{2 * index + 1}" if hook else f"GPU-{index}"
    assert value == expected


def test_every_hookspec_is_documented() -> None:
    """What it decides, when it is called and an example, in hooks.py; listed in docs/extending.md."""
    import inspect
    from pathlib import Path

    from pytest_gpucompat import hooks

    extending = (Path(__file__).resolve().parent.parent / "docs" / "extending.md").read_text(encoding="utf-8")
    specs = [name for name, fn in vars(hooks).items() if name.startswith("pytest_") and inspect.isfunction(fn)]
    assert specs
    for name in specs:
        doc = inspect.getdoc(getattr(hooks, name)) or ""
        assert "Called" in doc and "Example" in doc and "Return" in doc, name
        assert f"`{name}`" in extending, f"{name} is not listed in docs/extending.md"


SHARED_GPU = FAKE_GPUS.replace("for i in range(4)", "for i in range(1)").replace(
    'uuid=f"GPU-{i}"', 'uuid=f"GPU-{i}", memory_mib=1000')


def test_sharing_hooks_decide_needs_and_exclusive_tests(pytester: pytest.Pytester) -> None:
    """pytest_gpucompat_gpu_need and pytest_gpucompat_cell_exclusive, as the ledger of a shared GPU sees them."""
    pytest.importorskip("xdist")
    pytester.makeconftest(SHARED_GPU + """

def pytest_gpucompat_gpu_need(config, spec, total_mib):
    return 0.25 * total_mib if spec.engine.startswith("fake_engine") else None


def pytest_gpucompat_cell_exclusive(config, item):
    return True if item.originalname == "test_alone" else None
""")
    pytester.makepyfile(fake_engine="""
        from pytest_gpucompat.catalog.base import RunInfo

        class Engine:
            name = "fake"

            def start(self, spec):
                return RunInfo(engine="fake", version="0", device="cuda")

            def shutdown(self):
                pass
    """)
    pytester.makepyfile(test_hooked="""
        import json, os

        from pytest_gpucompat import EngineSpec

        def held(config):
            with open(os.path.join(config.workerinput["gpucompat_share_dir"], "ledger.json")) as fh:
                return [(e["what"], e["mib"]) for e in json.load(fh)["entries"] if e["held"]]

        def test_alone(pytestconfig):
            assert held(pytestconfig) == [("exclusive test test_hooked.py::test_alone", None)]

        def test_engine(gpucompat_pool, pytestconfig):
            gpucompat_pool.get(EngineSpec(engine="fake_engine:Engine", model="m", params={"isolated": False}))
            assert held(pytestconfig) == [("fake_engine:Engine on m", 250.0)]
    """)
    result = pytester.runpytest("--gpucompat", "-n", "1", "--gpucompat-workers-per-gpu", "2", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
