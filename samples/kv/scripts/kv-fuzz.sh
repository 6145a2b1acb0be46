#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A longer run of the KV fuzzer (samples/kv/tests/kv_fuzz.py, samples/kv/README.md
# "Fuzzing"): RUNS runs of SECONDS each, each with its own seed (the run
# number after BASE_SEED), against BUILD_DIR's weft-kv-server; prints each
# run's summary, then the seeds that failed and the totals.
#
# Usage: samples/kv/scripts/kv-fuzz.sh [-b BUILD_DIR] [-n RUNS] [-t SECONDS]
#                           [-s BASE_SEED] [-- KV_FUZZ_ARGS...]
# Defaults: build/dev, 10 runs, 60 s, base seed 1000; e.g.
#   samples/kv/scripts/kv-fuzz.sh -n 30 -t 60 -- --mode cluster --skip keys-flood
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=$root/build/dev runs=10 secs=60 base=1000
while [ $# -gt 0 ]; do
  case $1 in
  -b) build=$2; shift 2 ;;
  -n) runs=$2; shift 2 ;;
  -t) secs=$2; shift 2 ;;
  -s) base=$2; shift 2 ;;
  --) shift; break ;;
  *) echo "kv-fuzz.sh: unknown option '$1' (see the usage at the top of $0)" >&2
     exit 2 ;;
  esac
done
server=$build/samples/kv/weft-kv-server
[ -x "$server" ] || { echo "kv-fuzz.sh: $server is missing: build it first" >&2; exit 1; }
log=$(mktemp -d)/kv-fuzz
failed=() seqs=0 cmds=0 checks=0 migs=0
for i in $(seq 1 "$runs"); do
  seed=$((base + i))
  rc=0
  /usr/bin/python3 "$root/samples/kv/tests/kv_fuzz.py" --server "$server" --seed "$seed" \
    --seconds "$secs" "$@" >"$log.$seed" 2>&1 || rc=$?
  sum=$(grep '^kv_fuzz: seed .*sequences' "$log.$seed" || true)
  echo "run $i: ${sum#kv_fuzz: } -> $(tail -n1 "$log.$seed" | grep -o '[0-9]* failed$' || echo "exit $rc")"
  read -r s c k g < <(echo "$sum" | sed -n \
    's/.*: \([0-9]*\) sequences, \([0-9]*\) commands, .* clients, \([0-9]*\) model checks, \([0-9]*\) slot.*/\1 \2 \3 \4/p') || true
  seqs=$((seqs + ${s:-0})) cmds=$((cmds + ${c:-0})) checks=$((checks + ${k:-0})) migs=$((migs + ${g:-0}))
  if [ "$rc" -ne 0 ]; then
    failed+=("$seed")
    grep -A30 '^FAIL' "$log.$seed" | head -60
  fi
done
echo "kv-fuzz.sh: $runs runs of $secs s: $seqs sequences, $cmds commands, $checks model checks, $migs slot migrations"
echo "kv-fuzz.sh: failing seeds: ${failed[*]:-none} (logs in $(dirname "$log"))"
[ ${#failed[@]} -eq 0 ]
