#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Throughput of weft-kv-server clusters of 1, 2 and 3 nodes beside a 3-node
# redis-server cluster, all on this machine, measured in the same run and
# interleaved (weft-1, weft-2, weft-3, redis-3, weft-1, ...): redis-benchmark
# --cluster -t set,get (plain redis-benchmark for one node: --cluster wants
# two or more) against every cluster, and weft-kvbench --cluster against
# the weft ones. Every node has one loop without busy polling
# (loop.busy_poll_us=0), as redis-server is one thread that sleeps when
# idle. Prints the load average and a markdown table of medians.
# Usage: samples/kv/scripts/bench-kv-cluster.sh [BUILD_DIR] [RUNS]  (default build/release, 3)
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${1:-build/release}
runs=${2:-3}
. scripts/lib.sh
need redis-benchmark redis-tools
need redis-server redis-server
if [ ! -x "$build/samples/kv/weft-kv-server" ]; then
  quiet_configure "$build" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF
  quiet_build "$build"
fi
work=$(mktemp -d)
rpids=()
cleanup() {
  for n in 1 2 3; do samples/kv/scripts/kv-cluster.sh stop -d "$work/weft$n" || true; done
  for p in "${rpids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# weft clusters: N nodes from base port 32N01 (RPC 33N01).
for n in 1 2 3; do
  samples/kv/scripts/kv-cluster.sh start -n "$n" -p "32${n}01" -d "$work/weft$n" \
    -s "$build/samples/kv/weft-kv-server" -- -o loop.busy_poll_us=0 >/dev/null
done
# redis-server cluster: 34401..34403 (bus 44401..44403).
for i in 1 2 3; do
  port=$((34400 + i))
  mkdir -p "$work/redis$i"
  (cd "$work/redis$i" && exec redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
    --cluster-config-file nodes.conf --save "" --appendonly no \
    --loglevel warning </dev/null >/dev/null 2>&1) &
  rpids+=($!)
done
sleep 1
redis-cli --cluster create 127.0.0.1:34401 127.0.0.1:34402 127.0.0.1:34403 \
  --cluster-replicas 0 --cluster-yes >/dev/null
for _ in $(seq 50); do
  redis-cli -p 34401 cluster info | grep -q 'cluster_state:ok' && break
  sleep 0.2
done

rb() { # PORT CLUSTER(0/1): one redis-benchmark run as "TEST,rps" lines
  local flag=()
  [ "$2" = 1 ] && flag=(--cluster)
  redis-benchmark "${flag[@]}" -p "$1" -t set,get -n 200000 -c 50 -P 16 \
    -d 16 -r 100000 --csv 2>/dev/null | tail -n +2 | cut -d, -f1,2 | tr -d '"'
}
kb() { # N: one weft-kvbench --cluster run (workload A) as "KVBENCH,ops/s"
  local ops
  ops=$("$build/samples/kv/weft-kvbench" --cluster --connect "127.0.0.1:33${1}01" \
    -o loop.loops=1 -o loop.busy_poll_us=0 --records 20000 --warmup 1 \
    --duration 3 --connections 4 --pipeline 16 2>/dev/null |
    sed -n 's/^throughput *\([0-9]*\) ops\/s/\1/p')
  echo "KVBENCH,${ops:-0}"
}
out=$work/all.csv
for run in $(seq "$runs"); do
  step "run $run of $runs"
  for who in weft1 weft2 weft3 redis3; do
    case $who in
    weft1) rb 32101 0 ;;
    weft2) rb 32201 1 ;;
    weft3) rb 32301 1 ;;
    redis3) rb 34401 1 ;;
    esac | sed "s/^/$who,$run,/" >>"$out"
    case $who in weft*) kb "${who#weft}" | sed "s/^/$who,$run,/" >>"$out" ;; esac
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
who = ["weft1", "weft2", "weft3", "redis3"]
def med(w, t):
    v = [float(r[3]) for r in rows if r[0] == w and r[2] == t]
    return statistics.median(v) if v else None
print("| load | weft 1 node | weft 2 nodes | weft 3 nodes | redis 3 nodes | weft 3 / redis 3 |")
print("|---|---:|---:|---:|---:|---:|")
for t, name in (("SET", "redis-benchmark SET"), ("GET", "redis-benchmark GET"),
                ("KVBENCH", "weft-kvbench --cluster A")):
    m = [med(w, t) for w in who]
    cells = [f"{x:,.0f}" if x else "-" for x in m]
    ratio = f"{m[2]/m[3]:.2f}" if m[2] and m[3] else "-"
    print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
PY
