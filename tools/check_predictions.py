"""Each cell's predicted attention backend against the one its engine reported, for reports of a GPU run.

    python tools/check_predictions.py REPORT.json [REPORT.json ...]

Prints one line per cell of an engine with selection data (reported, predicted, outcome) and exits 1 when one
differs. The run that makes the evidence, on a GPU machine with vLLM installed (FlashInfer installed, then
removed: `pip uninstall -y flashinfer-python`), covering a head size 64 model and an fp8_e5m2 KV cache:

    pytest --gpucompat suites/test_smoke.py -k vllm --gpucompat-model tiny-qwen2 --gpucompat-model tiny-qwen2-h64 \
        --gpucompat-report gpu-predictions-flashinfer.json
    pip uninstall -y flashinfer-python
    pytest --gpucompat suites/test_smoke.py -k vllm --gpucompat-model tiny-qwen2 --gpucompat-model tiny-qwen2-h64 \
        --gpucompat-report gpu-predictions-no-flashinfer.json
    python tools/check_predictions.py gpu-predictions-*.json

Cells recorded before predictions existed are predicted here from their runner's fingerprint and log.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from pytest_gpucompat.common.errors import InputError  # noqa: E402
from pytest_gpucompat.common.inputs import load_file  # noqa: E402
from pytest_gpucompat.kb.predict_cells import cell_prediction, reported_backend  # noqa: E402
from pytest_gpucompat.machine.fingerprint import from_report  # noqa: E402


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    differ = 0
    for name in argv:
        try:
            data = load_file(name, "json")
            cells, runners = data["cells"], data["runners"]
        except (InputError, KeyError, TypeError) as exc:
            print(f"{name}: not a report ({exc})", file=sys.stderr)
            return 2
        for cell in cells:
            entry = cell.get("attention_prediction")
            if entry is None and cell.get("engine") and cell.get("runner") in runners:
                fp = from_report(runners[cell["runner"]], name, cell["runner"])
                reported = reported_backend(cell.get("engine_info"), cell.get("log_tail"))
                entry = cell_prediction(cell["engine"], cell.get("params") or {}, fp, reported)
            if entry is None:
                continue
            verdict = {True: "as predicted", False: "DIFFERS"}.get(entry.get("matches"), "not compared")
            predicted = entry.get("attention_backend") or entry.get("unavailable") or entry.get("outcome")
            print(f"{cell.get('nodeid')}: reported {entry.get('reported')}, predicted {predicted} "
                  f"({entry.get('outcome', '-')}): {verdict}")
            differ += entry.get("matches") is False
    print(f"{differ} cell(s) differ from the prediction")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
