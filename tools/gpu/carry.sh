#!/usr/bin/env bash
# carry.sh - bring one wheel list to an offline GPU machine in chunks, and print the calls that do it.
#
# The GPU machine reaches no package index and each command sent there carries at most 64 MiB: the working tree
# plus the paths it names. From the repository root, here:
#
#   tools/gpu/carry.sh tools/gpu/wheels/vllm-0.26.0.txt
#
# downloads the list's wheels (binary, the machine's Python and platform, no dependencies: the list is complete)
# into .devcarry/NAME/ (ignored), checks one version per distribution, adds this tree's own wheel (built into
# dist/), packs everything into one tar split into chunks that fit beside the tree, and writes the calls into
# .devcarry/NAME/calls.txt: one per chunk, back to back (the machine keeps the chunks outside its copy of the
# tree only while it stays warm), the last one reassembling, checking and installing them into
# "$HOME/.devcarry/NAME/site" and then running tools/gpu/run.sh. It prints the bundle's size in bytes.
#
# Options: -s MIB chunk size (default: what fits beside the tree, at most 60), -p PYVER (default 3.12).
set -euo pipefail

CHUNK_MIB=""
PYVER=3.12
while getopts "s:p:h" opt; do
  case "$opt" in
    s) CHUNK_MIB=$OPTARG ;;
    p) PYVER=$OPTARG ;;
    h) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "usage: $0 [-s CHUNK_MIB] [-p PYVER] LIST" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { echo "usage: $0 [-s CHUNK_MIB] [-p PYVER] LIST" >&2; exit 2; }
LIST=$1
NAME=$(basename "$LIST" .txt)
[[ "$NAME" =~ ^[A-Za-z0-9._-]+$ ]] || { echo "bad list name: $NAME" >&2; exit 2; }
cd "$(git rev-parse --show-toplevel)"
git check-ignore -q .devcarry/probe || { echo ".devcarry/ is not ignored here; refusing to download into the tree" >&2; exit 1; }

REL=.devcarry/$NAME
rm -rf "$REL" && mkdir -p "$REL/wheels"
mapfile -t SPECS < <(sed 's/#.*//; s/[[:space:]]//g; /^$/d' "$LIST")
for spec in "${SPECS[@]}"; do
  [[ "$spec" =~ ^[A-Za-z0-9._-]+==[A-Za-z0-9.+!_-]+$ ]] || { echo "$LIST: not NAME==VERSION: $spec" >&2; exit 2; }
done
PLAT=(--platform manylinux1_x86_64 --platform manylinux2010_x86_64 --platform manylinux2014_x86_64)
for n in $(seq 5 39); do PLAT+=(--platform "manylinux_2_${n}_x86_64"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  "${PLAT[@]}" -d "$REL/wheels" "${SPECS[@]}"
LISTED=$(ls "$REL/wheels" | grep -c '\.whl$')
[ "$LISTED" -eq "${#SPECS[@]}" ] || { echo "$LIST: ${#SPECS[@]} listed, $LISTED downloaded" >&2; exit 1; }
# this project's own requirements that the machine lacks (its wheel is installed without dependencies): the ones
# constraints.txt pins and the machine's package set does not hold, e.g. google-re2
MACHINE_SET=docs/reports/h200-580.159.04-hf-shared-final-packages.txt
OWN=()
for dep in $(python3 -c "import tomllib; print(' '.join(tomllib.load(open('pyproject.toml','rb'))['project']['dependencies']))"); do
  name=$(echo "$dep" | sed 's/[<>=!~;\[ ].*//' | tr 'A-Z_.' 'a-z--')
  grep -qi "^${name}==" "$MACHINE_SET" 2>/dev/null && continue
  pin=$(grep -i "^${name}==" constraints.txt | head -1)
  [ -n "$pin" ] && OWN+=("$pin")
done
if [ ${#OWN[@]} -gt 0 ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    "${PLAT[@]}" -d "$REL/wheels" "${OWN[@]}"
  echo "$NAME: with this project's own requirements: ${OWN[*]}"
fi
dups=$(ls "$REL/wheels" | sed 's/-[^-]*-.*//' | tr 'A-Z_.' 'a-z--' | sort | uniq -d)
[ -z "$dups" ] || { echo "more than one wheel for: $dups" >&2; exit 1; }
WHEEL_BYTES=$(cat "$REL"/wheels/*.whl | wc -c)

# this tree's own wheel: the plugin as a user installs it (its entry points), built from the tree that travels
rm -rf dist && python3 -m pip wheel -q --no-deps -w dist . >/dev/null
cp dist/pytest_gpucompat-*.whl "$REL/wheels/"

(cd "$REL" && sha256sum wheels/*.whl >SHA256SUMS)
tar -cf "$REL/bundle.tar" -C "$REL" SHA256SUMS wheels
BUNDLE_SHA=$(sha256sum "$REL/bundle.tar" | cut -d' ' -f1)
BUNDLE_BYTES=$(stat -c %s "$REL/bundle.tar")
TREE_BYTES=$(git ls-files -z -c -o --exclude-standard | xargs -0 -r stat -c %s -- | awk '{s+=$1} END {print s+0}')
if [ -z "$CHUNK_MIB" ]; then  # what fits beside the tree, with 2 MiB to spare
  CHUNK_MIB=$(( (64 * 1024 * 1024 - TREE_BYTES) / 1024 / 1024 - 2 ))
  [ "$CHUNK_MIB" -le 60 ] || CHUNK_MIB=60
fi
[ "$CHUNK_MIB" -ge 1 ] || { echo "the tree ($TREE_BYTES bytes) leaves no room for a chunk" >&2; exit 1; }
split -b "${CHUNK_MIB}M" -d -a 2 --numeric-suffixes=1 "$REL/bundle.tar" "$REL/part-"
rm -f "$REL/bundle.tar"
PARTS=($(cd "$REL" && ls part-??))
N=${#PARTS[@]}

D='"$HOME/.devcarry/'"$NAME"'"'
{
  echo "# $NAME: ${#SPECS[@]} listed wheels ($WHEEL_BYTES bytes) + this tree's wheel; bundle $BUNDLE_BYTES bytes"
  echo "# in $N chunk(s) of <= $CHUNK_MIB MiB beside a tree of $TREE_BYTES bytes. Send the calls back to back."
  for i in $(seq 1 "$N"); do
    p=${PARTS[$((i - 1))]}
    cmd="D=$D; mkdir -p \"\$D\""
    [ "$i" -eq 1 ] && cmd="$cmd && rm -rf \"\$D\"/part-* \"\$D\"/site \"\$D\"/wheels"
    cmd="$cmd && cp $REL/$p \"\$D\"/ && n=\$(ls \"\$D\"/part-* | wc -l) && echo \"$NAME: \$n/$N chunks\""
    cmd="$cmd && { [ \"\$n\" -eq $i ] || { echo 'earlier chunks missing (machine recycled?): start again from call 1'; exit 3; }; }"
    if [ "$i" -eq "$N" ]; then
      cmd="$cmd && cat \"\$D\"/part-* >\"\$D\"/bundle.tar && echo \"$BUNDLE_SHA  \$D/bundle.tar\" | sha256sum -c --quiet"
      cmd="$cmd && tar -xf \"\$D\"/bundle.tar -C \"\$D\" && rm -f \"\$D\"/part-* \"\$D\"/bundle.tar && (cd \"\$D\" && sha256sum -c --quiet SHA256SUMS)"
      cmd="$cmd && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target \"\$D\"/site \"\$D\"/wheels/*.whl"
      cmd="$cmd && touch \"\$D\"/site/.installed && echo \"$NAME: installed\""
    fi
    echo
    echo "## call $i/$N"
    echo "carry: [\"$REL/$p\"]"
    echo "command: $cmd"
  done
  echo
  echo "## then, on the same warm machine, each run (tools/gpu/README.md) begins with"
  echo "export GPUCOMPAT_SITE=\"\$HOME/.devcarry/$NAME/site\"; [ -f \"\$GPUCOMPAT_SITE/.installed\" ] || { echo 'not installed here (machine recycled): repeat the calls'; exit 3; }; export PYTHONPATH=\"\$GPUCOMPAT_SITE\"; export PATH=\"\$GPUCOMPAT_SITE/bin:\$PATH\";"
} >"$REL/calls.txt"
echo "$NAME: ${#SPECS[@]} wheels, $WHEEL_BYTES bytes downloaded; bundle $BUNDLE_BYTES bytes in $N chunks of <= $CHUNK_MIB MiB; calls: $REL/calls.txt"
