#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Several weft-kv-server builds or settings beside redis-server, all driven by
# redis-benchmark with the same settings, interleaved: throughput and server
# CPU per request (utime + stime of the server process from /proc/PID/stat
# over each run, both tests of the run together).
#
# Usage: samples/kv/scripts/bench-kv-cpu.sh RUNS LABEL=BINARY[,OPTION...] ...
#   e.g. samples/kv/scripts/bench-kv-cpu.sh 3 \
#          main=/tmp/main/samples/kv/weft-kv-server \
#          main-1loop=/tmp/main/samples/kv/weft-kv-server,-o,loop.loops=1 \
#          new=build/release/samples/kv/weft-kv-server
# Each run does, for each redis-benchmark setting (CONFIGS, default
# "-P 1 -c 50" and "-P 16 -c 50"), each weft server then redis-server:
#   redis-benchmark -p PORT -t set,get -d 16 -r 100000 -n N $setting --csv
# (N=200000 unless set). Prints the load average before and after, and a
# markdown table of medians (min..max of the runs for ops/s): throughput,
# redis-benchmark's p50 latency, server CPU per request, each beside
# redis-server's of the same runs.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. scripts/lib.sh
. samples/kv/scripts/kv_lib.sh
runs=${1:?usage: $0 RUNS LABEL=BINARY[,OPTION...] ...}
shift
n=${N:-200000}
if [ -n "${CONFIGS:-}" ]; then
  IFS=';' read -r -a configs <<<"$CONFIGS"
else
  configs=("-P 1 -c 50" "-P 16 -c 50")
fi
command -v redis-server >/dev/null || scripts/deps.sh
scratch_with_children

kv_servers_start "$out" 6400 "$@"

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq "$runs"); do
  for ci in "${!configs[@]}"; do
    for si in "${!labels[@]}"; do
      before=$(cpu_ticks "${spids[$si]}")
      # shellcheck disable=SC2086
      bench_csv "${labels[$si]},$ci,$run" "${ports[$si]}" -n "$n" ${configs[$ci]}
      after=$(cpu_ticks "${spids[$si]}")
      echo "${labels[$si]},$ci,$run,$((after - before))" >>"$out/cpu.csv"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$n" "$(getconf CLK_TCK)" "${labels[*]}" "${configs[@]}" <<'PY'
import csv, statistics, sys
out, n, hz, labels = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()
configs = sys.argv[5:]
rows = list(csv.reader(open(out + "/all.csv")))
cpu = list(csv.reader(open(out + "/cpu.csv")))
print("| redis-benchmark | server | SET ops/s (min..max) | GET ops/s (min..max) "
      "| SET / redis | GET / redis | p50 ms SET, GET | p50 / redis "
      "| server CPU µs per request | CPU / redis |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
# redis-benchmark --csv: test, rps, avg, min, p50, ... (after our 3 fields)
def med(who, ci, test, col=4):
    v = [float(r[col].strip('"')) for r in rows
         if r[0] == who and r[1] == str(ci) and r[3].strip('"') == test]
    return statistics.median(v), min(v), max(v)
def cpu_us(who, ci):
    ticks = [int(r[3]) for r in cpu if r[0] == who and r[1] == str(ci)]
    return statistics.median(t * 1e6 / hz / (2 * n) for t in ticks)
for ci, cfg in enumerate(configs):
    red = {t: med("redis", ci, t)[0] for t in ("SET", "GET")}
    red50 = {t: med("redis", ci, t, 7)[0] for t in ("SET", "GET")}
    red_us = cpu_us("redis", ci)
    for who in labels:
        s, g = med(who, ci, "SET"), med(who, ci, "GET")
        s50, g50 = med(who, ci, "SET", 7)[0], med(who, ci, "GET", 7)[0]
        us = cpu_us(who, ci)
        print(f"| {cfg} | {who} | {s[0]:,.0f} ({s[1]:,.0f}..{s[2]:,.0f}) | "
              f"{g[0]:,.0f} ({g[1]:,.0f}..{g[2]:,.0f}) | {s[0]/red['SET']:.2f} | "
              f"{g[0]/red['GET']:.2f} | {s50:.3f}, {g50:.3f} | "
              f"{s50/red50['SET']:.2f}, {g50/red50['GET']:.2f} | {us:.2f} | "
              f"{us/red_us:.2f} |")
PY
# The weft servers' selector counters (printed at stop): how the adaptive
# busy-poll window moved during the runs.
for si in "${!labels[@]}"; do
  [ "${labels[$si]}" = redis ] && continue
  kill -TERM "${spids[$si]}" 2>/dev/null || true
  wait "${spids[$si]}" 2>/dev/null || true
  grep -h 'loop [0-9]*:' "$out/${labels[$si]}.log" | sed "s/^/${labels[$si]}: /" || true
done
