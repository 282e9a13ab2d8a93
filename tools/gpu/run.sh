#!/usr/bin/env bash
# run.sh - on the GPU machine, from the repository root: run the suites once and leave everything a committed run
# keeps in $OUT: the report JSON with its HTML and Markdown renders, the package set, pytest's console, the attention
# backend of each cell, and with a baseline the diff against it.
#
#   tools/gpu/run.sh NAME [--baseline docs/reports/OLD.json] [pytest arguments...]
#
# NAME names the files: <gpu>-<driver>-NAME.json (h200-580.159.04-NAME.json on the H200). The engine's wheels are
# installed into $GPUCOMPAT_SITE (tools/gpu/carry.sh's last call); this tree goes first on the path, so the code
# that runs is the tree's and the installed wheel gives the plugin's entry points. pytest is stopped (SIGTERM: the
# report is still written, interrupted) after $GPUCOMPAT_RUN_S seconds (default 540: one command may run 600).
set -uo pipefail
NAME=${1:?usage: tools/gpu/run.sh NAME [--baseline REPORT] [pytest arguments...]}
shift
BASELINE=""
if [ "${1:-}" = "--baseline" ]; then BASELINE=$2; shift 2; fi
OUT=${OUT:-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${GPUCOMPAT_SITE:+:$GPUCOMPAT_SITE}"
[ -n "${GPUCOMPAT_SITE:-}" ] && export PATH="$GPUCOMPAT_SITE/bin:$PATH"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | awk '{print tolower($NF)}')
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
P="$OUT/${GPU:-gpu}-${DRIVER:-unknown}-$NAME"
python3 -m pip list --format=freeze 2>/dev/null | grep -v '^pytest-gpucompat==' >"$P-packages.txt"
t0=$(date +%s)
timeout -s TERM -k 30 "${GPUCOMPAT_RUN_S:-540}" python3 -m pytest --gpucompat -p no:cacheprovider -rfEsx \
  --gpucompat-runner "${GPUCOMPAT_RUNNER:-${GPU:-gpu}-$NAME}" --gpucompat-report "$P.json" "$@" >"$P-console.txt" 2>&1
status=$?
echo "pytest exit $status after $(( $(date +%s) - t0 )) s"
tail -25 "$P-console.txt"
[ -f "$P.json" ] || { echo "no report written"; exit 1; }
python3 -m pytest_gpucompat.cli report "$P.json" --html "$P.html" --markdown "$P.md"
python3 tools/gpu/backends.py "$P.json" | tee "$P-backends.txt"
if [ -n "$BASELINE" ]; then
  python3 -m pytest_gpucompat.cli diff --allow-missing "$BASELINE" "$P.json" >"$P-diff.txt" 2>&1
  echo "diff against $BASELINE: exit $? ($P-diff.txt)"; head -30 "$P-diff.txt"
fi
exit 0
