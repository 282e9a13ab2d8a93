#!/usr/bin/env bash
# rerender.sh - render every committed report again with the current renderer (needs no GPU).
#
#   tools/gpu/rerender.sh [DIR]     # default docs/reports
#
# For each report JSON under DIR that has an HTML or Markdown rendering beside it (X.json -> X.html, X.md), writes
# those renderings again from the JSON; the JSON itself is not touched. Prints what it rendered and what failed
# (a report the current renderer refuses is named with its reason, and the run goes on).
set -uo pipefail
DIR=${1:-docs/reports}
GPUCOMPAT=${GPUCOMPAT:-gpucompat}
rendered=0 failed=0
while IFS= read -r -d '' json; do
  base=${json%.json}
  args=()
  [ -f "$base.html" ] && args+=(--html "$base.html")
  [ -f "$base.md" ] && args+=(--markdown "$base.md")
  [ ${#args[@]} -gt 0 ] || continue
  if err=$("$GPUCOMPAT" report "$json" "${args[@]}" 2>&1 >/dev/null); then
    rendered=$((rendered + 1))
  else
    failed=$((failed + 1)); echo "not rendered: $json: $(echo "$err" | tail -1)"
  fi
done < <(find "$DIR" -name '*.json' -print0 | sort -z)
echo "$rendered report(s) rendered again, $failed refused"
[ "$failed" -eq 0 ]
