#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-http's /plaintext driven by weft-http-load over each of the given
# weft transports, on one host: keep-alive and pipelined, RUNS interleaved
# runs (the transport order rotates per run), then a markdown table of the
# median rate (min..max) per transport and mode. Made for the Soft-RoCE VM,
# where verbs can run beside tcp on the same emulated CPUs (weft's
# scripts/test-verbs-vm.sh with WEFT_VM_RUN, which sets WEFT_TEST_HOST to
# rxe0's address: RoCE has no loopback); on a host, any of tcp, uring, ucx.
#
# Usage: samples/http/scripts/bench-http-transports.sh BUILD_DIR RUNS \
#          TRANSPORT...
# e.g., from weft's top level (samples/http/docs/benchmarks.md, "Over verbs
# and tcp in the Soft-RoCE VM"):
#   WEFT_VM_RUN='samples/http/scripts/bench-http-transports.sh build/release
#     5 verbs tcp' scripts/test-verbs-vm.sh build/release
# Environment: WEFT_TEST_HOST (the address, default 127.0.0.1), SECONDS_RUN
#   (s per measurement, 5), CONNS (load.connections, 4), DEPTH
#   (load.pipeline of the pipelined mode, 16).
#
# The exact commands, per run, transport T and mode (the server started
# afresh for each transport and run, one loop each side):
#   weft-http -o loop.loops=1 -o server.listen=T://HOST:0
#   weft-http-load -o loop.loops=1 -o client.connect=T://HOST:PORT \
#     -o load.connections=$CONNS -o load.requests=1000000 \
#     -o load.seconds=$SECONDS_RUN [-o load.pipeline=$DEPTH]
# The rate is weft-http-load's own ("rate: N requests/s"): responses over
# the time to the last one. Nothing here is pinned or checked for a quiet
# machine: record the load and read only ratios within one table.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '11,12p' "$0" >&2; exit 2; }
build=$1 runs=$2
shift 2
transports=("$@")
cd "$(dirname "$0")/../../.."
. scripts/lib.sh # log_match
server=$build/samples/http/weft-http
load=$build/samples/http/weft-http-load
[ -x "$server" ] && [ -x "$load" ] ||
  { echo "no weft-http or weft-http-load in $build/samples/http" >&2; exit 1; }
host=${WEFT_TEST_HOST:-127.0.0.1}
secs=${SECONDS_RUN:-5} conns=${CONNS:-4} depth=${DEPTH:-16}
dir=$(mktemp -d)
pid=""
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

# measure TRANSPORT PORT MODE: one weft-http-load run; prints its rate.
measure() {
  local extra=()
  [ "$3" = keepalive ] || extra=(-o "load.pipeline=$depth")
  "$load" -o loop.loops=1 -o "client.connect=$1://$host:$2" \
    -o "load.connections=$conns" -o load.requests=1000000 \
    -o "load.seconds=$secs" "${extra[@]}" >"$dir/out" 2>&1 ||
    { cat "$dir/out" >&2; echo "weft-http-load failed over $1" >&2; exit 1; }
  sed -n 's/.*rate: \([0-9]*\) requests.*/\1/p' "$dir/out"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$runs"); do
  n=${#transports[@]}
  for i in $(seq 0 $((n - 1))); do
    t=${transports[$(((i + r) % n))]}
    "$server" -o loop.loops=1 -o "server.listen=$t://$host:0" \
      2>"$dir/server.log" &
    pid=$!
    port=$(log_match "$dir/server.log" \
      's/.*listening on .*:\([0-9]*\)$/\1/p' 600 "$pid") ||
      { cat "$dir/server.log" >&2; exit 1; }
    for mode in keepalive pipelined; do
      rate=$(measure "$t" "$port" "$mode")
      echo "run $r $t $mode: $rate requests/s"
      echo "$rate" >>"$dir/$t-$mode"
    done
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    pid=""
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "| mode | transport | requests/s median (min..max) |"
echo "|---|---|---:|"
for mode in keepalive pipelined; do
  for t in "${transports[@]}"; do
    sort -n "$dir/$t-$mode" | awk -v m="$mode" -v t="$t" \
      '{ v[NR] = $1 } END { printf "| %s | %s | %d (%d..%d) |\n", m, t,
        v[int((NR + 1) / 2)], v[1], v[NR] }'
  done
done
