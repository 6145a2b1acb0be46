#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/test.sh on a busy machine: `stress-ng --cpu 2` keeps two CPUs
# busy beside it, as other work did on the fresh machine where the README's
# test command failed (load 5-11, issue 28). Each run is a fresh clone of
# HEAD in a temporary directory (no build tree of this checkout; commit
# first, uncommitted changes are not in it), and prints its exit status,
# wall time, load average and test.sh's stage summary lines; the log of a
# failed run is kept in build/test-under-load/. stress-ng is stopped on
# exit, however the script ends.
# Usage: scripts/test-under-load.sh [RUNS [test.sh arguments...]]
#        (default 3 runs of the full scripts/test.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
scripts/deps.sh
need stress-ng stress-ng
need git git
runs=${1:-3}
[ $# -eq 0 ] || shift
head=$(git rev-parse HEAD)
work=$(mktemp -d)
keep=$PWD/build/test-under-load
stress=
stop_stress() {
  if [ -n "$stress" ]; then
    kill "$stress" 2>/dev/null || true # stress-ng ends its workers on TERM
    wait "$stress" 2>/dev/null || true
    stress=
  fi
}
trap 'stop_stress; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
stress-ng --cpu 2 --quiet &
stress=$!
step "stress-ng --cpu 2 running (pid $stress); testing $(git rev-parse --short HEAD), $runs runs"
failed=0
for i in $(seq "$runs"); do
  dir=$work/run$i
  git clone -q --no-checkout . "$dir"
  git -C "$dir" checkout -q "$head"
  start=$(date +%s)
  rc=0
  step "run $i of $runs: scripts/test.sh $* in $dir"
  (cd "$dir" && scripts/test.sh "$@") >"$work/run$i.log" 2>&1 || rc=$?
  echo "=== run $i of $runs: exit $rc, $(($(date +%s) - start)) s, load average $(cut -d' ' -f1-3 /proc/loadavg) ==="
  sed -n '/^=== weft tests: summary ===$/,$p' "$work/run$i.log" | tail -n +2
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    mkdir -p "$keep"
    cp "$work/run$i.log" "$keep/run$i.log"
    echo "(log: $keep/run$i.log)"
  fi
  rm -rf "$dir"
done
echo "=== $((runs - failed)) of $runs runs passed under stress-ng --cpu 2 ==="
[ "$failed" -eq 0 ]
