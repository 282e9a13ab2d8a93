"""Each hookspec, implemented in a conftest as a user would: the hook is called and its answer is used."""

from __future__ import annotations

import json

import pytest

FAKE_GPUS = """
import dataclasses
import pytest_gpucompat.fingerprint as fingerprint

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
