#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Several KV servers sharing one host, as on a shared machine: SERVERS
# (default 4) weft-kv-servers with their defaults, then SERVERS with their
# loops pinned (-o loop.pin=true), then SERVERS redis-servers, each server
# driven at the same time by its own redis-benchmark. Kinds are
# interleaved, RUNS rounds (issue 32: pinned by default, every weft process
# put its loop 0 on CPU 0 and four of them stalled 300-600 ms at a time).
#
# Usage: samples/kv/scripts/bench-kv-hosts.sh BINARY [RUNS [SERVERS]]
#   e.g. samples/kv/scripts/bench-kv-hosts.sh build/release/samples/kv/weft-kv-server 5
# Each server of a round runs
#   redis-benchmark -p PORT -t set,get -d 16 -r 100000 -n N -c 50 --csv
# (N=100000 unless set), all SERVERS at once. Prints a markdown table of,
# per kind: the sum of the servers' ops/s (median of the rounds, min..max),
# the median of their p50 and p99 latency, and the worst max latency of any
# server in any round (the stall).
set -euo pipefail
bin=$(realpath "${1:?usage: $0 BINARY [RUNS [SERVERS]]}")
runs=${2:-5}
servers=${3:-4}
cd "$(dirname "$0")/../../.."
. scripts/lib.sh
. samples/kv/scripts/kv_lib.sh
n=${N:-100000}
command -v redis-server >/dev/null || scripts/deps.sh
need redis-benchmark redis-tools
need redis-cli redis-tools
scratch_with_children
kinds=(weft weft-pinned redis)
base=6500

# start_kind KIND: SERVERS servers of KIND on base..base+SERVERS-1, in
# `spids`; returns once each answers PING.
start_kind() {
  local k p
  local -a cmd
  spids=()
  for k in $(seq 0 $((servers - 1))); do
    p=$((base + k))
    case $1 in
    weft) cmd=("$bin" -o kv.rpc_listen= -o "kv.resp_listen=127.0.0.1:$p") ;;
    weft-pinned) cmd=("$bin" -o kv.rpc_listen= \
      -o "kv.resp_listen=127.0.0.1:$p" -o loop.pin=true) ;;
    redis) cmd=(redis-server --port "$p" --save "" --appendonly no \
      --daemonize no --loglevel warning) ;;
    esac
    # the server itself in the background (not a subshell around it), so
    # that stop_kind's signal reaches it and the port is free for the
    # next kind
    "${cmd[@]}" >/dev/null 2>"$out/$1.$k.log" &
    spids+=($!)
    pids+=($!)
  done
  for k in $(seq 0 $((servers - 1))); do
    for _ in $(seq 300); do
      kill -0 "${spids[$k]}" 2>/dev/null || break
      redis-cli -p $((base + k)) ping >/dev/null 2>&1 && continue 2
      sleep 0.1
    done
    echo "$1 server $k did not start or answer:" >&2
    cat "$out/$1.$k.log" >&2
    return 1
  done
}

stop_kind() {
  local p
  for p in "${spids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${spids[@]}"; do wait "$p" 2>/dev/null || true; done
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq "$runs"); do
  for kind in "${kinds[@]}"; do
    step "round $run of $runs: $servers $kind servers"
    start_kind "$kind"
    bpids=()
    for k in $(seq 0 $((servers - 1))); do
      bench_csv "$kind,$run,$k" $((base + k)) -n "$n" -c 50 &
      bpids+=($!)
    done
    wait "${bpids[@]}"
    stop_kind
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/all.csv" "${kinds[@]}" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
kinds = sys.argv[2:]
# redis-benchmark --csv: test, rps, avg, min, p50, p95, p99, max (after
# our kind, run, server)
print("| servers | test | ops/s, sum of servers (min..max) | / redis "
      "| p50 ms | p99 ms | worst max ms |")
print("|---|---|---:|---:|---:|---:|---:|")
def col(kind, test, c, run=None):
    return [float(r[c]) for r in rows if r[0] == kind and r[3] == test
            and (run is None or r[1] == run)]
for test in ("SET", "GET"):
    sums = {}
    for kind in kinds:
        per_run = sorted({r[1] for r in rows if r[0] == kind})
        sums[kind] = [sum(col(kind, test, 4, run)) for run in per_run]
    red = statistics.median(sums["redis"])
    for kind in kinds:
        s = sums[kind]
        print(f"| {kind} | {test} | {statistics.median(s):,.0f} "
              f"({min(s):,.0f}..{max(s):,.0f}) | "
              f"{statistics.median(s) / red:.2f} | "
              f"{statistics.median(col(kind, test, 7)):.3f} | "
              f"{statistics.median(col(kind, test, 9)):.3f} | "
              f"{max(col(kind, test, 10)):.1f} |")
PY
