#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# redis-py (Debian's python3-redis) against weft-kv-server: the commands of
# issue 31 (samples/kv/tests/kv_redis_compat.py), on a server of two loops so that
# WATCH is checked across loops.
# Usage: test_kv_redis_compat.sh PATH/TO/weft-kv-server   (run by CTest)
set -u
server=$1
here=$(cd "$(dirname "$0")" && pwd)
if ! /usr/bin/python3 -c 'import redis' 2>/dev/null; then
  echo "FAIL: redis-py is needed (apt-get install python3-redis)"
  exit 1
fi
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }; rm -rf "$dir"' EXIT
"$server" -o loop.loops=2 -o kv.rpc_listen= -o kv.resp_listen=127.0.0.1:0 \
  2>"$dir/server.log" &
pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*resp on tcp:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$dir/server.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: the server did not start:"; cat "$dir/server.log"; exit 1; }
timeout 120 /usr/bin/python3 "$here/kv_redis_compat.py" "$port"
rc=$?
kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server died:"; tail -20 "$dir/server.log"; exit 1; }
exit $rc
