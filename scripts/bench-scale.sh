#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Multi-loop scaling: the rate of weft-echo's server and of weft-kv-server
# over 1, 2, ... N loops (N = nproc), for each socket transport (tcp,
# uring; ucx with UCX_TLS=tcp if it was built), as a markdown table.
#
#   echo: weft-echo server with L loops; weft-echo client, one loop, 32
#         connections each ping-ponging 16 B messages (32 in flight):
#         round trips/s.
#   kv:   weft-kv-server (RESP) with L loops; redis-benchmark -t get -P 16
#         -c 50 -d 16: GETs/s (RESP over tcp and uring only: redis-benchmark
#         speaks kernel TCP).
#
# Placement: weft pins server loop i to CPU i (WEFT_BENCH_PIN=false: the
# server's loops float); the client runs on the last CPU (taskset, its loop
# unpinned), so up to N-1 loops the client has a core of its own, and at N
# loops it shares the last one with a server loop.
# Runs are interleaved (every run measures every row, the loop counts in
# alternating order) and the table gives medians and min..max, the
# server's median CPU over the run (% of one core, from /proc/PID/stat),
# and the load average before and after.
# Usage: [WEFT_BENCH_PIN=false] scripts/bench-scale.sh [BUILD_DIR] [RUNS]
#        (default build/release, 3 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
runs=${2:-3}
scripts/deps.sh
if [ ! -x "$build/samples/kv/weft-kv-server" ] ||
  [ ! -x "$build/samples/echo/weft-echo" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" -j2 --target weft-echo weft-kv-server >/dev/null
fi
echo_bin=$build/samples/echo/weft-echo
kv_bin=$build/samples/kv/weft-kv-server
ncpu=$(nproc)
hz=$(getconf CLK_TCK)
client_cpu=$((ncpu - 1))
pin=${WEFT_BENCH_PIN:-true}
. scripts/lib.sh
bench_server_setup # port, out, server_pid, the EXIT trap; start_server

# CPU ticks (user + system) the server has used so far.
server_ticks() {
  awk '{print $14 + $15}' "/proc/$server_pid/stat" 2>/dev/null || echo 0
}

# Runs the client command line, timed, and prints "RATE CPU": what `pick`
# (a sed script) finds in its output and the server's CPU over the run in
# % of one core.
measure() {
  local pick=$1 t0 c0 rate ticks elapsed_ns
  shift
  t0=$(date +%s%N) c0=$(server_ticks)
  rate=$("$@" 2>&1 | sed -n "$pick") || true
  ticks=$(($(server_ticks) - c0)) elapsed_ns=$(($(date +%s%N) - t0))
  echo "$rate $((100 * ticks * 1000000000 / hz / elapsed_ns))"
}

# echo TRANSPORT LOOPS: prints "ROUND_TRIPS/S SERVER_CPU%", or nothing.
run_echo() {
  local t=$1 loops=$2 rate
  start_server "$echo_bin" server -o loop.loops="$loops" -o loop.pin="$pin" \
    -o server.listen="$t://127.0.0.1:$port" || { stop_server; return 0; }
  rate=$(measure 's/.*rate: \([0-9]*\) round trips.*/\1/p' \
    taskset -c "$client_cpu" "$echo_bin" client -o loop.loops=1 \
    -o loop.pin=false -o client.connect="$t://127.0.0.1:$port" \
    -o echo.connections=32 -o echo.count=6000 -o echo.size=16)
  stop_server
  echo "$rate"
}

# kv TRANSPORT LOOPS: prints "GETS/S SERVER_CPU%", or nothing.
run_kv() {
  local t=$1 loops=$2 rate
  start_server "$kv_bin" -o loop.loops="$loops" -o loop.pin="$pin" \
    -o kv.rpc_listen= \
    -o kv.resp_listen="$t://127.0.0.1:$port" || { stop_server; return 0; }
  rate=$(measure 's/^"GET","\([0-9.]*\)".*/\1/p' \
    taskset -c "$client_cpu" redis-benchmark -p "$port" -t get -P 16 \
    -c 50 -d 16 -n 300000 --csv)
  stop_server
  echo "$rate"
}

transports=(tcp uring)
if grep -q '^WEFT_WITH_UCX:BOOL=ON' "$build/CMakeCache.txt"; then
  transports+=("ucx")
fi
export UCX_TLS=${UCX_TLS:-tcp}
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for run in $(seq "$runs"); do
  order=$(seq 1 "$ncpu")
  [ $((run % 2)) -eq 0 ] && order=$(seq "$ncpu" -1 1)
  for loops in $order; do
    for t in "${transports[@]}"; do
      # A fresh port for every server: the last one's may be in TIME_WAIT.
      port=$((port + 1))
      r=$(run_echo "$t" "$loops")
      echo "echo,$t,$loops,$run,${r// /,}" >>"$out/all.csv"
      [ "$t" = ucx ] && continue
      port=$((port + 1))
      r=$(run_kv "$t" "$loops")
      echo "kv,$t,$loops,$run,${r// /,}" >>"$out/all.csv"
    done
  done
  echo "run $run of $runs done" >&2
done
echo "load average: before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg); $ncpu CPUs, client on CPU $client_cpu, server loops pinned: $pin"
python3 - "$out/all.csv" <<'PY'
import csv, statistics, sys
rows = [r for r in csv.reader(open(sys.argv[1]))]
keys = sorted({(r[0], r[1]) for r in rows}, key=lambda k: (k[0], ["tcp", "uring", "ucx"].index(k[1])))
loops = sorted({int(r[2]) for r in rows})
what = {"echo": "weft-echo, 32 x 1 in flight, 16 B: round trips/s",
        "kv": "weft-kv-server, redis-benchmark GET -P 16 -c 50: GETs/s"}
print("| server | transport | " + " | ".join(f"{l} loop{'s' if l > 1 else ''}" for l in loops)
      + (f" | {loops[-1]} vs 1 |" if len(loops) > 1 else " |"))
print("|---|---|" + "---:|" * (len(loops) + (len(loops) > 1)))
for k in keys:
    cells, med = [], {}
    for l in loops:
        sel = [r for r in rows if (r[0], r[1]) == k and int(r[2]) == l and len(r) > 5 and r[4]]
        if not sel:
            cells.append("failed")
            continue
        v = [float(r[4]) for r in sel]
        cpu = statistics.median(float(r[5]) for r in sel)
        med[l] = statistics.median(v)
        cells.append(f"{med[l]:,.0f} ({min(v):,.0f}..{max(v):,.0f}), server {cpu:.0f}%")
    ratio = ""
    if len(loops) > 1:
        ratio = f" | {med[loops[-1]] / med[loops[0]]:.2f}x" if loops[0] in med and loops[-1] in med else " | -"
    print(f"| {what[k[0]]} | {k[1]} | " + " | ".join(cells) + ratio + " |")
PY
