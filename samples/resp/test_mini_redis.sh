#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-mini-redis (samples/resp) against redis-cli and a raw socket: every
# command it serves, the errors for an unknown command and a wrong count
# of arguments, a pipelined batch answered in order, and a malformed
# request answered with Redis' protocol error before the connection closes.
# Usage: test_mini_redis.sh PATH/TO/weft-mini-redis   (CTest)
set -u
server=${1:?usage: test_mini_redis.sh PATH/TO/weft-mini-redis}
command -v redis-cli >/dev/null ||
  { echo "FAIL: redis-cli is needed (scripts/deps.sh installs it)"; exit 1; }
dir=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT

# Any free port: the server prints the address it bound. Waits for that
# line (or the server's end), not for a set time.
"$server" -o loop.loops=2 -o server.listen=127.0.0.1:0 2>"$dir/log" &
pid=$!
port=""
while [ -z "$port" ] && kill -0 "$pid" 2>/dev/null; do
  sleep 0.05
  port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$dir/log")
done
[ -n "$port" ] || { echo "FAIL: weft-mini-redis did not start:"; cat "$dir/log"; exit 1; }

passed=0 failed=0
expect() { # NAME WANT COMMAND...
  local name=$1 want=$2
  shift 2
  local got
  got=$(timeout 20 redis-cli -p "$port" "$@" 2>&1)
  if [ "$got" = "$want" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: want '$want', got '$got'"
  fi
}

expect ping PONG PING
expect ping_message hello PING hello
expect echo 'a b' ECHO 'a b'
expect set OK SET greeting hello
expect get hello GET greeting
expect get_missing '' GET nothing
expect set_replaces OK SET greeting again
expect get_replaced again GET greeting
expect exists 1 EXISTS greeting nothing
expect dbsize 1 DBSIZE
expect del 1 DEL greeting nothing
expect del_gone 0 EXISTS greeting
expect binary_safe OK SET "$(printf 'k\001')" "$(printf 'v\r\nv')"
expect unknown "ERR unknown command 'FLUSHALL'" FLUSHALL
expect arity "ERR wrong number of arguments for 'get' command" GET a b

# A pipeline: 1000 SETs and a GET in one write, the replies in order.
python3 - "$port" <<'PY' && passed=$((passed + 1)) || failed=$((failed + 1))
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
req = b"".join(b"*3\r\n$3\r\nSET\r\n$2\r\nk%d\r\n$1\r\n%d\r\n" % (i % 10, i % 10)
               for i in range(1000)) + b"*2\r\n$3\r\nGET\r\n$2\r\nk7\r\n"
s.sendall(req)
want = b"+OK\r\n" * 1000 + b"$1\r\n7\r\n"
got = b""
while len(got) < len(want):
    chunk = s.recv(65536)
    if not chunk:
        break
    got += chunk
if got != want:
    print("FAIL: pipeline: %d bytes, want %d: %r" % (len(got), len(want), got[-40:]))
    sys.exit(1)
PY

# A malformed request: Redis' error text, then the server closes.
python3 - "$port" <<'PY' && passed=$((passed + 1)) || failed=$((failed + 1))
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
s.sendall(b"*2\r\n$3\r\nGET\r\n$x\r\n")
got = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    got += chunk
if not got.startswith(b"-ERR Protocol error"):
    print("FAIL: malformed request: %r" % got)
    sys.exit(1)
PY

# The server stops on SIGTERM, with status 0.
kill "$pid"
wait "$pid"
status=$?
pid=""
if [ "$status" = 0 ]; then passed=$((passed + 1)); else
  failed=$((failed + 1)); echo "FAIL: exit status $status on SIGTERM"; cat "$dir/log"
fi
echo "test_mini_redis: $passed passed, $failed failed"
[ "$failed" = 0 ]
