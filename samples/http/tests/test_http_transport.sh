#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-http and weft's HTTP client (weft-http-load) over a transport that
# curl cannot speak: keep-alive and pipelined requests, /json, and a static
# file, all answered 2xx. ctest test_http_ucx runs it over ucx here;
# test_http_verbs over verbs skips here (no RDMA device) and runs inside the
# Soft-RoCE VM, which scripts/test.sh boots (tests/verbs-vm/guest-tests.sh).
# The static file is fetched pipelined while its sends wait on the peer
# (verbs' 16 credits of 8 KiB; ucx's window, which test_http_ucx sets
# below the file), so flow control pauses weft-http's reading with the
# next request in hand: each request must still be answered.
# Usage: test_http_transport.sh PATH/TO/weft-http PATH/TO/weft-http-load \
#          TRANSPORT [-o KEY=VALUE ...]   (options for both programs)
#   env WEFT_TEST_HOST  the address to listen on and connect to (default
#                       127.0.0.1; in the VM rxe0's: RoCE has no loopback)
set -u
server=$1 load=$2 transport=$3
shift 3
both=("$@")
host=${WEFT_TEST_HOST:-127.0.0.1}
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
head -c 200000 /dev/urandom >"$dir/big.bin"
. "$(dirname "$0")/http_lib.sh"
start_weft_http "$server" "$transport" "$dir/server.log" -o "http.root=$dir" \
  "${both[@]}"
run() { # NAME ARGS...
  local name=$1; shift
  timeout 120 "$load" -o loop.loops=1 "${both[@]}" \
    -o "client.connect=$transport://$host:$port" "$@" >"$dir/out" 2>&1
  check "$name" $? "$(cat "$dir/out")"
}
run http_load_keep_alive -o load.connections=2 -o load.requests=2000
run http_load_pipelined -o load.connections=2 -o load.pipeline=16 \
  -o load.requests=4000 -o load.path=/json
run http_load_static_file -o load.path=/big.bin -o load.requests=40 \
  -o load.pipeline=4
# The file's bytes were read into buffers (this transport cannot send
# from a file): weft-http's count at exit.
kill "$pid"; wait "$pid"; pid=""
grep -q 'static files: 0 bytes sent from the file (sendfile), 8000000 read' \
  "$dir/server.log"
check http_static_file_read_path $? "$(grep 'static files' "$dir/server.log")"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ] || { echo "weft-http's log:"; tail -20 "$dir/server.log"; }
[ "$failed" = 0 ]
