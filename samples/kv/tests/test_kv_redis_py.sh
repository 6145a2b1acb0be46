#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# redis-py (Debian's python3-redis) against weft-kv-server: starts two
# servers on free ports, one without a password and one with [kv]
# requirepass and an ACL user, and runs samples/kv/tests/kv_redis_py.py against them
# with Debian's python3 (/usr/bin/python3 sees python3-redis; a pyenv shim
# first on PATH would not).
# Usage: test_kv_redis_py.sh PATH/TO/weft-kv-server   (run by CTest)
set -u
server=$1
here=$(cd "$(dirname "$0")" && pwd)
if ! /usr/bin/python3 -c 'import redis' 2>/dev/null; then
  echo "FAIL: redis-py is needed (apt-get install python3-redis)"
  exit 1
fi
dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$dir"' EXIT

start() { # NAME ARGS...: a server with RESP on 127.0.0.1, port 0; sets $port
  local name=$1; shift
  : >"$dir/$name.log"
  "$server" -o loop.loops=2 -o kv.rpc_listen= -o kv.resp_listen=127.0.0.1:0 \
    "$@" 2>"$dir/$name.log" &
  pids+=("$!")
  port=""
  for _ in $(seq 50); do
    port=$(sed -n 's/.*resp on tcp:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$dir/$name.log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "FAIL: server $name did not start:"; cat "$dir/$name.log"; exit 1; }
}
start open
open_port=$port
start auth -o kv.requirepass=s3cret -o kv.user=alice -o kv.user_password=apw
timeout 120 /usr/bin/python3 "$here/kv_redis_py.py" "$open_port" "$port"
