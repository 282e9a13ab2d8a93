#!/usr/bin/env bash
# packing.sh - on the GPU machine: the packing benchmark (bench/run.py --only packing, its defaults: serial, then
# packed, each from empty compile caches), which runs longer than one command may (about 13 minutes on an H200 with
# vLLM 0.26.0), so it runs in the background across calls sent back to back:
#
#   tools/gpu/packing.sh start NAME     # starts it, returns at once
#   tools/gpu/packing.sh wait NAME      # waits up to $GPUCOMPAT_RUN_S s (default 540); repeat until it says done
#
# When done, $OUT holds <gpu>-<driver>-NAME-bench-packing.json (its JSON), -serial.json and -packed.json (both
# runs' reports) with their renders, -packed-vs-serial-diff.txt and the package set; the first-start figures of the
# packed run (compile_caches, compile_wait_s) are summed at the end.
set -uo pipefail
WHAT=${1:?usage: tools/gpu/packing.sh start|wait NAME}
NAME=${2:?usage: tools/gpu/packing.sh start|wait NAME}
W="$HOME/.gpucompat-packing/$NAME"
export PYTHONPATH="$PWD${GPUCOMPAT_SITE:+:$GPUCOMPAT_SITE}"
[ -n "${GPUCOMPAT_SITE:-}" ] && export PATH="$GPUCOMPAT_SITE/bin:$PATH"
case "$WHAT" in
  start)
    rm -rf "$W" && mkdir -p "$W/reports"
    mkdir -p "$W/tree" && cp -r pytest_gpucompat suites matrices bench pyproject.toml "$W/tree"/  # this call's tree
    (cd "$W/tree" && export PYTHONPATH="$W/tree${GPUCOMPAT_SITE:+:$GPUCOMPAT_SITE}" && setsid nohup python3 bench/run.py --json --only packing --packing-reports "$W/reports" \
      >"$W/bench.json" 2>"$W/bench.log" </dev/null & echo $! >"$W/pid")
    echo "packing benchmark started (pid $(cat "$W/pid")); send: tools/gpu/packing.sh wait $NAME"
    ;;
  wait)
    [ -f "$W/pid" ] || { echo "not started here (machine recycled?): start again"; exit 3; }
    end=$(( $(date +%s) + ${GPUCOMPAT_RUN_S:-540} ))
    while kill -0 "$(cat "$W/pid")" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
    tail -5 "$W/bench.log"
    if kill -0 "$(cat "$W/pid")" 2>/dev/null; then echo "still running: send the same command again"; exit 0; fi
    OUT=${OUT:-out}; mkdir -p "$OUT"
    GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | awk '{print tolower($NF)}')
    DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
    P="$OUT/${GPU:-gpu}-${DRIVER:-unknown}-$NAME"
    cp "$W/bench.json" "$P-bench-packing.json"
    python3 -m pip list --format=freeze | grep -v '^pytest-gpucompat==' >"$P-packages.txt"
    for run in serial packed; do
      [ -f "$W/reports/$run.json" ] || continue
      cp "$W/reports/$run.json" "$P-$run.json"
      python3 -m pytest_gpucompat.cli report "$P-$run.json" --html "$P-$run.html" --markdown "$P-$run.md"
    done
    [ -f "$P-packed.json" ] && python3 -m pytest_gpucompat.cli diff --allow-missing "$P-serial.json" "$P-packed.json" \
      >"$P-packed-vs-serial-diff.txt" 2>&1
    python3 - "$P-bench-packing.json" "$P-packed.json" <<'PY'
import json, sys
bench = json.load(open(sys.argv[1]))
print("gpu_packing_wall_ratio", bench.get("gpu_packing_wall_ratio"), "speedup", bench.get("gpu_packing_speedup"))
packing = bench.get("packing", {})
print("same cells and outcomes:", packing.get("same_outcomes"), packing.get("outcomes"))
try:
    cells = json.load(open(sys.argv[2])).get("cells", [])
except OSError:
    sys.exit(f"no packed report: {bench.get('gpu_packing_speedup_reason')}")
turns = [t for c in cells for t in c.get("compile_caches", [])]
print(f"first starts {sum(t['first_start'] for t in turns)}, waits {sum(not t['first_start'] for t in turns)}, "
      f"waited {sum(t['waited_s'] for t in turns):.1f} s in all")
PY
    ;;
  *) echo "usage: tools/gpu/packing.sh start|wait NAME" >&2; exit 2 ;;
esac
