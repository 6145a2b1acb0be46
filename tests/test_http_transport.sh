#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-http and weft's HTTP client (weft-http-load) over a transport that
# curl cannot speak (ucx; verbs inside the Soft-RoCE VM): keep-alive and
# pipelined requests, /json, and a static file, all answered 2xx.
# Usage: test_http_transport.sh PATH/TO/weft-http PATH/TO/weft-http-load TRANSPORT
set -u
server=$1 load=$2 transport=$3
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
head -c 200000 /dev/urandom >"$dir/big.bin"
: >"$dir/server.log"
"$server" -o loop.loops=1 -o "server.listen=$transport://127.0.0.1:0" \
  -o "http.root=$dir" 2>"$dir/server.log" &
pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$dir/server.log")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "SKIP: weft-http did not start on the $transport transport"
  cat "$dir/server.log"
  exit 77
fi
passed=0 failed=0
run() { # NAME ARGS...
  local name=$1; shift
  if timeout 120 "$load" -o loop.loops=1 \
    -o "client.connect=$transport://127.0.0.1:$port" "$@" >"$dir/out" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAIL: $name:"; cat "$dir/out"
  fi
}
run http_load_keep_alive -o load.connections=2 -o load.requests=2000
run http_load_pipelined -o load.connections=2 -o load.pipeline=16 \
  -o load.requests=4000 -o load.path=/json
run http_load_static_file -o load.path=/big.bin -o load.requests=40 \
  -o load.pipeline=4
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
