#!/usr/bin/env bash
# What flow control costs a well-behaved client: redis-benchmark against
# two weft-kv-servers from the same build, one with the defaults ([server]
# flow_control on) and one with -o server.flow_control=false, both running
# for the whole script (2 loops each, the defaults otherwise). Per run and
# per setting (-P 1 and -P 16; -t set,get -d 16 -r 100000 -n 200000 -c 50)
# both servers are measured back to back, in alternating order (on, off,
# then off, on next run), RUNS runs. Prints a markdown table: medians of
# ops/s and p50, the spread (min-max), the ratio on/off of the medians
# and the median of each run's on/off (the two measured back to back); the
# target is on/off >= 0.97.
# Usage: scripts/bench-flow-control.sh [BUILD_DIR] [RUNS]
#        (default build/release, 5)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
build=${1:-build/release}
runs=${2:-5}
need redis-benchmark redis-tools
need python3 python3
need cmake cmake
if [ ! -x "$build/samples/kv/weft-kv-server" ]; then
  quiet_run "configuring $build" cmake -S . -B "$build" \
    -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF
  quiet_build "$build" --target weft-kv-server
fi
ON=6393 OFF=6394
out=$(mktemp -d)
"$build/samples/kv/weft-kv-server" -o loop.loops=2 -o kv.rpc_listen= \
  -o kv.resp_listen=127.0.0.1:$ON 2>"$out/on.log" &
onpid=$!
"$build/samples/kv/weft-kv-server" -o loop.loops=2 -o kv.rpc_listen= \
  -o kv.resp_listen=127.0.0.1:$OFF -o server.flow_control=false \
  2>"$out/off.log" &
offpid=$!
trap 'kill $onpid $offpid 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$out"' EXIT
sleep 1
grep -q "resp on" "$out/on.log" && grep -q "resp on" "$out/off.log" || {
  cat "$out"/*.log >&2
  exit 1
}
configs=("-P 1" "-P 16")
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for run in $(seq "$runs"); do
  order="on off"
  [ $((run % 2)) -eq 0 ] && order="off on"
  for ci in "${!configs[@]}"; do
    for who in $order; do
      port=$ON
      [ "$who" = off ] && port=$OFF
      step "run $run/$runs: ${configs[$ci]}, flow control $who"
      # shellcheck disable=SC2086
      redis-benchmark -p $port -t set,get -d 16 -r 100000 -n 200000 -c 50 \
        ${configs[$ci]} --csv 2>/dev/null | tail -n +2 |
        sed "s/^/$who,$ci,$run,/" >>"$out/all.csv"
    done
  done
done
echo "commit $(git rev-parse --short HEAD); load average at the start: $load_start, at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/all.csv" "${configs[@]}" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
configs = sys.argv[2:]
print("| command | redis-benchmark | flow control on: ops/s | off: ops/s "
      "| on: min-max | off: min-max | on/off | median of runs' on/off "
      "| on p50 ms | off p50 ms |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for ci, cfg in enumerate(configs):
    for test in ("SET", "GET"):
        med, span = {}, {}
        for who in ("on", "off"):
            sel = [r for r in rows if r[0] == who and r[1] == str(ci) and r[3] == test]
            rps = [float(r[4]) for r in sel]
            med[who] = (statistics.median(rps),
                        statistics.median(float(r[7]) for r in sel))
            span[who] = f"{min(rps):,.0f}-{max(rps):,.0f}"
        on, off = med["on"], med["off"]
        # on and off of one run ran back to back: their ratio is paired
        by_run = {(r[0], r[2]): float(r[4]) for r in rows
                  if r[1] == str(ci) and r[3] == test}
        paired = statistics.median(by_run[("on", n)] / by_run[("off", n)]
                                   for w, n in by_run if w == "on")
        print(f"| {test} | {cfg} -c 50 | {on[0]:,.0f} | {off[0]:,.0f} | {span['on']} "
              f"| {span['off']} | {on[0] / off[0]:.3f} | {paired:.3f} "
              f"| {on[1]:.3f} | {off[1]:.3f} |")
PY
