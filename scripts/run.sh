#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job: builds weft, starts the KV service (weft-kv-server) on the
# default transport over loopback, runs a short YCSB-style load against it
# with weft-kvbench (workloads A and C, Zipfian keys), prints the results and
# stops the server gracefully.
# Extra arguments go to both programs, e.g. -o transport.name=uring
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
scripts/deps.sh
quiet_configure build/release -DCMAKE_BUILD_TYPE=Release \
  -DWEFT_BUILD_TESTS=OFF -DWEFT_WITH_URING=ON -DWEFT_WITH_UCX=ON \
  -DWEFT_WITH_VERBS=ON
quiet_build build/release
bin=build/release/samples/kv
log=$(mktemp)
"$bin/weft-kv-server" -o loop.loops=1 -o kv.rpc_listen=127.0.0.1:0 \
  -o kv.resp_listen=127.0.0.1:0 "$@" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
uri=$(log_match "$log" 's/^weft-kv-server: rpc on \(.*\)$/\1/p' 100) ||
  { cat "$log"; exit 1; }
cat "$log"
for w in A C; do
  echo "--- weft-kvbench workload $w against $uri ---"
  "$bin/weft-kvbench" -o loop.loops=1 --connect "$uri" --workload $w \
    --records 100000 --duration 5 --warmup 1 "$@"
done
kill -TERM $pid
wait $pid
echo "weft-kv-server stopped cleanly"
