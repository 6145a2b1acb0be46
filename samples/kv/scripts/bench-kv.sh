#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-kv-server beside redis-server, both driven by redis-benchmark with the
# same settings in the same run: -t get,set, 16 B values, at -P 1 -c 1,
# -P 1 -c 50 and -P 16 -c 50; 3 runs of each, interleaved (weft, redis,
# weft, ...), medians reported as a markdown table.
# Usage: samples/kv/scripts/bench-kv.sh [BUILD_DIR] [RUNS]   (default build/release, 3)
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${1:-build/release}
runs=${2:-3}
. samples/kv/scripts/kv_lib.sh # bench_csv
scripts/deps.sh
if [ ! -x "$build/samples/kv/weft-kv-server" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" >/dev/null
fi
WPORT=6391 RPORT=6392
"$build/samples/kv/weft-kv-server" -o loop.loops=2 -o kv.rpc_listen= \
  -o kv.resp_listen=127.0.0.1:$WPORT 2>/dev/null &
wpid=$!
redis-server --port $RPORT --save "" --appendonly no --daemonize no \
  --loglevel warning >/dev/null &
rpid=$!
trap 'kill $wpid $rpid 2>/dev/null || true; wait 2>/dev/null || true' EXIT
sleep 1
out=$(mktemp -d)
configs=("-P 1 -c 1 -n 20000" "-P 1 -c 50 -n 100000" "-P 16 -c 50 -n 400000")
for run in $(seq "$runs"); do
  for ci in "${!configs[@]}"; do
    for who in weft redis; do
      port=$WPORT; [ $who = redis ] && port=$RPORT
      # shellcheck disable=SC2086
      bench_csv "$who,$ci,$run" $port ${configs[$ci]}
    done
  done
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/all.csv" "${configs[@]}" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
configs = sys.argv[2:]
print("| command | redis-benchmark | weft-kv ops/s | redis ops/s | ratio | weft p50 ms | redis p50 ms |")
print("|---|---|---:|---:|---:|---:|---:|")
for ci, cfg in enumerate(configs):
    for test in ("SET", "GET"):
        med = {}
        for who in ("weft", "redis"):
            sel = [r for r in rows if r[0] == who and r[1] == str(ci) and r[3] == test]
            med[who] = (statistics.median(float(r[4]) for r in sel),
                        statistics.median(float(r[7]) for r in sel))
        w, r = med["weft"], med["redis"]
        print(f"| {test} | {' '.join(cfg.split()[:4])} | {w[0]:,.0f} | {r[0]:,.0f} | "
              f"{w[0]/r[0]:.2f} | {w[1]:.3f} | {r[1]:.3f} |")
PY
