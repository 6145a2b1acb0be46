#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-http's static files, one binary beside another (before and after a
# change): each serves a 64 MB file over plain tcp from one loop, and curl
# fetches it FETCHES times in a row (one connection each) while perf stat
# counts the server's sendfile, pread, sendmsg and write system calls (the
# kernel's syscall tracepoints), and read and sendto too: weft-http before
# file regions read the file with read(2), and the tcp transport sends a
# single buffer with send(2), which is sendto. The loop itself makes a few
# preads of its own (/proc/self/schedstat for the adaptive busy-poll
# window: docs/architecture.md), a handful per second. Prints, per binary and run, the counts,
# the wall time of the fetches and weft-http's own count at exit of the
# static bytes sent from the file and read into buffers, and the server's
# CPU time over the fetches (utime + stime from /proc/PID/stat, in clock
# ticks of 10 ms). RUNS rounds,
# the binaries alternating within each.
#
# Usage: samples/http/scripts/bench-static.sh BEFORE AFTER [RUNS]
#   BEFORE, AFTER: weft-http binaries (RUNS default 3)
# Environment: FETCHES (curl fetches per run, 10), SIZE_MB (64).
#
# The exact commands, per binary and run:
#   weft-http -o loop.loops=1 -o server.listen=tcp://127.0.0.1:0 \
#     -o http.root=$DIR
#   perf stat -x, -e syscalls:sys_enter_sendfile64,syscalls:sys_enter_pread64,\
#     syscalls:sys_enter_sendmsg,syscalls:sys_enter_write,\
#     syscalls:sys_enter_read,syscalls:sys_enter_sendto -p $PID
#   for i in 1..FETCHES: curl -s -o /dev/null -w '%{size_download}' URL
# (the first fetch's bytes are also compared with the file).
set -euo pipefail
before=$1 after=$2 runs=${3:-3}
fetches=${FETCHES:-10}
size_mb=${SIZE_MB:-64}
for tool in perf curl; do
  command -v "$tool" >/dev/null ||
    { echo "$tool is needed (scripts/deps.sh installs it)"; exit 1; }
done
dir=$(mktemp -d)
pid="" perf_pid=""
cleanup() {
  [ -n "$perf_pid" ] && kill -INT "$perf_pid" 2>/dev/null
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
head -c $((size_mb * 1024 * 1024)) /dev/urandom >"$dir/file.bin"
events=syscalls:sys_enter_sendfile64,syscalls:sys_enter_pread64
events=$events,syscalls:sys_enter_sendmsg,syscalls:sys_enter_write
events=$events,syscalls:sys_enter_read,syscalls:sys_enter_sendto
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# cpu_ticks PID: utime + stime of process PID (fields 14 and 15 of its
# stat; the name, field 2, holds no space here).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# measure NAME BINARY: one run; prints one line.
measure() {
  local name=$1 bin=$2 port i t0 t1 got
  : >"$dir/server.log"
  "$bin" -o loop.loops=1 -o server.listen=tcp://127.0.0.1:0 \
    -o "http.root=$dir" 2>"$dir/server.log" &
  pid=$!
  for i in $(seq 100); do
    port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$dir/server.log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "$name did not start"; cat "$dir/server.log"; exit 1; }
  curl -s "http://127.0.0.1:$port/file.bin" | cmp -s - "$dir/file.bin" ||
    { echo "$name: the file differs"; exit 1; }
  perf stat -x, -e "$events" -p "$pid" -o "$dir/perf.out" &
  perf_pid=$!
  sleep 0.5 # perf attached
  local cpu0 cpu1
  cpu0=$(cpu_ticks "$pid")
  t0=$(date +%s.%N)
  for i in $(seq "$fetches"); do
    got=$(curl -s -o /dev/null -w '%{size_download}' \
      "http://127.0.0.1:$port/file.bin")
    [ "$got" = $((size_mb * 1024 * 1024)) ] ||
      { echo "$name: fetch $i got $got bytes"; exit 1; }
  done
  t1=$(date +%s.%N)
  cpu1=$(cpu_ticks "$pid")
  kill -INT "$perf_pid"; wait "$perf_pid" || true; perf_pid=""
  kill "$pid"; wait "$pid" || true; pid=""
  local counts
  counts=$(awk -F, '/syscalls/ { sub("syscalls:sys_enter_", "", $3);
    printf "%s=%s ", $3, $1 }' "$dir/perf.out")
  printf '%-7s %s wall=%.2fs cpu=%d ticks | %s\n' "$name" "$counts" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
    $((cpu1 - cpu0)) "$(grep 'static files' "$dir/server.log" |
      sed 's/weft-http: //')"
}

for r in $(seq "$runs"); do
  measure before "$before"
  measure after "$after"
done
