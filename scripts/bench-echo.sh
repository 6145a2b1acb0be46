#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Echo with one client and W messages in flight (issue 17's echo table).
#
# One client, weft-bench's raw `rate` pattern with --plain-echo (no hello,
# so any echo server answers it): one connection keeps W 16 B messages in
# flight and refills what came back in one send, spinning on recv, pinned
# to CPU 0. It runs against each server in turn, every server pinned to
# CPU 1:
#   raw-busy     weft-bench --role server -S raw-busy --plain-echo: one
#                thread, epoll over its connections, spinning on
#                epoll_wait(.., 0); recv up to 1 MiB, send it back
#   raw-block    the same, blocking in epoll_wait(.., -1)
#   echo-tcp     weft-echo server, one loop, tcp (busy_poll_us and the
#                rest from the defaults, or WEFT_* variables)
#   echo-uring   the same over uring
#   echo-tcp-fixed, echo-uring-fixed
#                the same with a fixed busy-poll window
#                (-o loop.busy_poll_adaptive=false): the data path without
#                the adaptive window's decisions
#   bench-tcp, bench-uring (not by default)
#                weft-bench --role server -S tcp --plain-echo: weft-bench's
#                own weft server, one loop, the configuration's window
# at W = 64 and W = 1024 (WINDOWS). Runs are interleaved (every run
# measures every server, in reverse order on even runs), and the table
# gives messages/s medians (min..max), the ratio of each server's median
# to raw-busy's and raw-block's, the server's CPU time (% of one core) and
# its threads' run-queue wait (% of the time they were runnable, from
# /proc/PID/task/*/schedstat: how much another process wanted the server's
# CPU) over the client's run, and the load average before and after.
# Usage: scripts/bench-echo.sh [BUILD_DIR] [RUNS] [SECONDS]
#        (default build/release, 5 runs, 1 s measured per point)
#        SERVERS="raw-busy echo-tcp" WINDOWS="64 1024": a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
runs=${2:-5}
secs=${3:-1}
servers=(${SERVERS:-raw-busy raw-block echo-tcp echo-uring echo-tcp-fixed echo-uring-fixed})
windows=${WINDOWS:-64 1024}
scripts/deps.sh
echo_bin=$build/samples/echo/weft-echo
bench_bin=$build/samples/bench/weft-bench
if [ ! -x "$echo_bin" ] || [ ! -x "$bench_bin" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" -j2 --target weft-echo weft-bench >/dev/null
fi
rates=$(for w in $windows; do printf '1x%s,' "$w"; done)
rates=${rates%,}
. scripts/lib.sh
bench_server_setup # port, out, server_pid, the EXIT trap; start_server

# Starts server NAME on `port`.
start_named() {
  local name=$1
  if [ "$name" = raw-busy ] || [ "$name" = raw-block ]; then
    start_server "$bench_bin" --role server -S "$name" --plain-echo \
      --port "$port" --no-progress
  elif [ "${name#echo-}" != "$name" ]; then
    local t=${name#echo-} adaptive=true
    if [ "${t%-fixed}" != "$t" ]; then t=${t%-fixed} adaptive=false; fi
    # one loop, on CPU 1 (taskset; weft does not pin it by default)
    start_server taskset -c 1 "$echo_bin" server -o loop.loops=1 \
      -o loop.busy_poll_adaptive="$adaptive" \
      -o server.listen="$t://127.0.0.1:$port"
  elif [ "${name#bench-}" != "$name" ]; then
    start_server "$bench_bin" --role server -S "${name#bench-}" \
      --plain-echo --port "$port" --no-progress
  else
    echo "bench-echo: unknown server $name" >&2
    return 1
  fi
}

# The server's threads' time on a CPU and waiting on a run queue, in ns,
# summed: "ON_CPU WAITED".
server_sched() {
  cat /proc/"$server_pid"/task/*/schedstat 2>/dev/null |
    awk '{ on += $1; wait += $2 } END { printf "%.0f %.0f\n", on, wait }'
}

# run NAME RUN: appends "NAME,RUN,WINDOW,MSGS_PER_S,CPU%,WAIT%" lines to
# all.csv (CPU and wait over the client's whole run, both windows).
run() {
  local name=$1 r=$2 t0 s0 s1 cpu
  port=$((port + 1)) # a fresh port: the last one's may be in TIME_WAIT
  start_named "$name" || { stop_server; return 0; }
  t0=$(date +%s%N) s0=$(server_sched)
  if "$bench_bin" --role client -S raw-busy -p rate --rate "$rates" \
    --rate-size 16 --plain-echo --port "$port" -r 1 -t "$secs" \
    --no-progress -q --csv "$out/one.csv" >/dev/null 2>"$out/client.log"; then
    s1=$(server_sched)
    cpu=$(echo "$s0 $s1 $(($(date +%s%N) - t0))" | awk '{
      on = $3 - $1; w = $4 - $2
      printf "%.0f,%.0f", 100 * on / $5, (on + w > 0 ? 100 * w / (on + w) : 0) }')
    awk -F, -v n="$name" -v r="$r" -v c="$cpu" \
      '$5 == "rate" { print n "," r "," $8 "," $31 "," c }' "$out/one.csv" \
      >>"$out/all.csv"
  else
    sed "s/^/$name: /" "$out/client.log" >&2
  fi
  stop_server
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
: >"$out/all.csv"
for r in $(seq "$runs"); do
  order=("${servers[@]}")
  if [ $((r % 2)) -eq 0 ]; then
    order=()
    for ((i = ${#servers[@]} - 1; i >= 0; i--)); do order+=("${servers[i]}"); done
  fi
  for s in "${order[@]}"; do run "$s" "$r"; done
  echo "bench-echo: run $r of $runs done" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
echo "Echo, one client (raw, spinning, CPU 0), 16 B messages, servers on CPU 1;"
echo "$runs interleaved runs of $secs s; load average before $load_before, after $load_after ($(nproc) CPUs); commit $(git rev-parse --short HEAD)."
echo
/usr/bin/python3 - "$out/all.csv" "${servers[*]}" "$windows" <<'PY'
import csv, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
servers, windows = sys.argv[2].split(), [int(w) for w in sys.argv[3].split()]
def vals(s, w, col=3):
    return [float(r[col]) for r in rows if r[0] == s and int(r[2]) == w and r[3]]
print("| server | in flight | msgs/s median (min..max) | runs | / raw-busy | / raw-block | server CPU % | server run-queue wait % |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for w in windows:
    ref = {k: statistics.median(vals(k, w)) for k in ("raw-busy", "raw-block") if vals(k, w)}
    for s in servers:
        v = vals(s, w)
        if not v:
            print(f"| {s} | {w} | failed | 0 | - | - | - | - |")
            continue
        m = statistics.median(v)
        ratio = [f"{m / ref[k]:.2f}x" if k in ref else "-" for k in ("raw-busy", "raw-block")]
        cpu, wait = (statistics.median(vals(s, w, c)) for c in (4, 5))
        print(f"| {s} | {w} | {m:,.0f} ({min(v):,.0f}..{max(v):,.0f}) | {len(v)} | {ratio[0]} | {ratio[1]} | {cpu:.0f} | {wait:.0f} |")
PY
