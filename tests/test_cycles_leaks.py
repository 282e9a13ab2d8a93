"""Real create/destroy cycles of the transformers engine on the CPU, with a helper process left running per cycle:
found although it escaped into a new session, named, judged a leak, and stopped at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_gpucompat.checks.cycles import create_destroy_cycles
from pytest_gpucompat.checks.leaks import CyclePolicy, memory_verdict
from pytest_gpucompat.checks.memory import MemorySample
from pytest_gpucompat.engines.base import EngineSpec
from pytest_gpucompat.models import build_tiny_model, fixed_prompts, model_vocab_size

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
ESCAPE = "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(120)\nos._exit(0)\n"


def _leave_a_helper(cycle: int) -> None:
    subprocess.run([sys.executable, "-c", ESCAPE], check=True, timeout=30)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return build_tiny_model("qwen2", tmp_path_factory.mktemp("models"))


def _run(model: Path, on_cycle, policy: CyclePolicy):
    spec = EngineSpec("hf", str(model), {"dtype": "float32", "device": "cpu"})
    rows = create_destroy_cycles(spec, policy, fixed_prompts(2, 8, model_vocab_size(str(model)), seed=1), 4,
                                 on_cycle=on_cycle)
    fields = set(MemorySample.__dataclass_fields__)
    return rows, memory_verdict([MemorySample(**{k: v for k, v in r.items() if k in fields}) for r in rows])


def test_a_helper_left_per_cycle_is_found_named_and_stopped(model: Path) -> None:
    rows, verdict = _run(model, _leave_a_helper, CyclePolicy(5, 5, 60.0))
    assert "started_processes" in [v.metric for v in verdict.fired]
    assert [r["started_processes"] for r in rows] == [0, 1, 2, 3, 4, 5]
    left = rows[-1]["left_running"]
    assert len(left) == 5 and all("time.sleep(120)" in p["command"] for p in left)
    assert not any(_alive(p["pid"]) for p in left)  # stopped once measured
    assert "processes the engine started and left running" in verdict.message("hf")


def test_clean_cycles_stop_at_the_minimum_and_flag_nothing(model: Path) -> None:
    rows, verdict = _run(model, None, CyclePolicy(5, 12, 60.0))
    assert not verdict.leaked, verdict.message("hf")
    assert len(rows) - 1 >= 5 and rows[-1]["left_running"] == []
    assert os.environ.get("GPUCOMPAT_MEMORY_OWNER") is None
