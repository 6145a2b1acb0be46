#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What flow control costs a well-behaved client: redis-benchmark against
# two weft-kv-servers from the same build, one with the defaults ([server]
# flow_control on) and one with -o server.flow_control=false, and, given a
# BEFORE_DIR, a third: a build of the commit before the limits work
# (samples/kv/scripts/bench-never-read.sh makes one in /tmp/weft-before-COMMIT/build).
# All run for the whole script (2 loops each, the defaults otherwise). Per
# run and per setting (-P 1 and -P 16; -t set,get -d 16 -r 100000
# -n 200000 -c 50) the servers are measured back to back, in an order
# that rotates from run to run, RUNS runs. Prints a markdown table:
# medians of ops/s and p50, the spread (min-max), the ratio on/off of the
# medians and the median of each run's on/off (measured back to back), and
# the same for on/before; the target is a ratio >= 0.97.
# Usage: samples/kv/scripts/bench-flow-control.sh [BUILD_DIR] [RUNS] [BEFORE_DIR]
#        [N16]  (default build/release, 5, none, 200000: N16 is -n at -P 16,
#        where 200 000 requests take under a second)
set -euo pipefail
cd "$(dirname "$0")/../../.."
. scripts/lib.sh
. samples/kv/scripts/kv_lib.sh # bench_csv
build=${1:-build/release}
runs=${2:-5}
before_dir=${3:-}
n16=${4:-200000}
need redis-benchmark redis-tools
need python3 python3
need cmake cmake
if [ ! -x "$build/samples/kv/weft-kv-server" ]; then
  quiet_run "configuring $build" cmake -S . -B "$build" \
    -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF
  quiet_build "$build" --target weft-kv-server
fi
out=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$out"' EXIT
declare -A port
# NAME BINARY [-o ...]: a server on a port the kernel picks (other helpers'
# benchmarks use fixed ones), its port into port[NAME].
serve() {
  local name=$1 bin=$2
  shift 2
  "$bin" -o loop.loops=2 -o kv.rpc_listen= -o kv.resp_listen=127.0.0.1:0 \
    "$@" 2>"$out/$name.log" &
  pids+=($!)
  for _ in $(seq 50); do
    port[$name]=$(sed -n 's/.*resp on .*:\([0-9]*\)$/\1/p' "$out/$name.log")
    [ -n "${port[$name]}" ] && return 0
    sleep 0.1
  done
  cat "$out/$name.log" >&2
  exit 1
}
serve on "$build/samples/kv/weft-kv-server"
serve off "$build/samples/kv/weft-kv-server" -o server.flow_control=false
who_all="on off"
if [ -n "$before_dir" ]; then
  serve before "$before_dir/samples/kv/weft-kv-server"
  who_all="on off before"
fi
configs=("-P 1 -n 200000" "-P 16 -n $n16")
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for run in $(seq "$runs"); do
  # rotate the order by one each run: on off before, off before on, ...
  read -ra w <<<"$who_all"
  order=()
  for i in "${!w[@]}"; do order+=("${w[$(((i + run) % ${#w[@]}))]}"); done
  for ci in "${!configs[@]}"; do
    for who in "${order[@]}"; do
      step "run $run/$runs: ${configs[$ci]}, server $who"
      # shellcheck disable=SC2086
      bench_csv "$who,$ci,$run" "${port[$who]}" -c 50 ${configs[$ci]}
    done
  done
done
echo "commit $(git rev-parse --short HEAD); load average at the start: $load_start, at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/all.csv" "${configs[@]}" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
configs = sys.argv[2:]
whos = [w for w in ("on", "off", "before") if any(r[0] == w for r in rows)]
head = "| command | redis-benchmark | " + " | ".join(
    f"{w}: ops/s | {w}: min-max" for w in whos)
sep = "|---|---|" + "---:|---:|" * len(whos)
for w in whos[1:]:
    head += f" | on/{w} | median of runs' on/{w}"
    sep += "---:|---:|"
head += " | " + " | ".join(f"{w} p50 ms" for w in whos) + " |"
sep += "---:|" * len(whos)
print(head)
print(sep)
for ci, cfg in enumerate(configs):
    for test in ("SET", "GET"):
        sel = [r for r in rows if r[1] == str(ci) and r[3] == test]
        rps = {w: [float(r[4]) for r in sel if r[0] == w] for w in whos}
        p50 = {w: statistics.median(float(r[7]) for r in sel if r[0] == w)
               for w in whos}
        med = {w: statistics.median(rps[w]) for w in whos}
        by_run = {(r[0], r[2]): float(r[4]) for r in sel}
        line = f"| {test} | {cfg} -c 50 | " + " | ".join(
            f"{med[w]:,.0f} | {min(rps[w]):,.0f}-{max(rps[w]):,.0f}" for w in whos)
        for w in whos[1:]:
            # measured back to back in one run: a paired ratio
            paired = statistics.median(by_run[("on", n)] / by_run[(w, n)]
                                       for x, n in by_run if x == "on")
            line += f" | {med['on'] / med[w]:.3f} | {paired:.3f}"
        line += " | " + " | ".join(f"{p50[w]:.3f}" for w in whos) + " |"
        print(line)
PY
