#!/usr/bin/env bash
# Real Redis clients against weft-kv-server: redis-cli sets, gets and
# deletes; every request gets its answer (an unknown command with CR/LF in
# its name, a protocol error, an oversized value, a huge SCAN pattern);
# redis-benchmark runs a short load without errors.
# Usage: test_kv_redis.sh PATH/TO/weft-kv-server   (run by CTest)
set -u
server=$1
if ! command -v redis-cli >/dev/null || ! command -v redis-benchmark >/dev/null; then
  echo "FAIL: redis-cli and redis-benchmark are needed (apt-get install redis-tools)"
  exit 1
fi
log=$(mktemp)
"$server" -o loop.loops=2 -o kv.rpc_listen= -o kv.resp_listen=127.0.0.1:0 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 50); do
  port=$(sed -n 's/.*resp on tcp:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: server did not start:"; cat "$log"; exit 1; }

passed=0 failed=0
check() { # NAME EXPECTED ARGS...: redis-cli's output must equal EXPECTED
  local name=$1 want=$2; shift 2
  local got
  got=$(timeout 10 redis-cli -p "$port" "$@" 2>&1)
  if [ "$got" == "$want" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: redis-cli $*: got '$got', want '$want'"
  fi
}
check kv_redis_set_ok OK set greeting hello
check kv_redis_get_value hello get greeting
check kv_redis_exists 1 exists greeting
check kv_redis_del_counts 1 del greeting
check kv_redis_get_after_del "" get greeting
check kv_redis_incr 1 incr counter
check kv_redis_incr_again 2 incr counter
check kv_redis_set_text OK set word hello
check kv_redis_incr_not_integer "ERR value is not an integer or out of range" \
  incr word
check kv_redis_mset OK mset a 1 b 2
check kv_redis_mget "$(printf '1\n2\n')" mget a b missing
check kv_redis_ping PONG ping
check kv_redis_unknown \
  "ERR unknown command 'nosuch', with args beginning with: 'a' " nosuch a

checkout() { # NAME EXPECTED OUTPUT: OUTPUT must equal EXPECTED
  if [ "$3" == "$2" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $1: got '$3', want '$2'"
  fi
}
# CR and LF in a command name: the error still comes (as spaces), and the
# next command gets its own reply, not this one's.
checkout kv_redis_unknown_crlf_then_ping \
  "$(printf "%s\n\nPONG" "ERR unknown command 'foo  bar', with args beginning with: 'x' ")" \
  "$(printf '"foo\\r\\nbar" x\nping\n' | timeout 10 redis-cli -p "$port" 2>&1)"
# A protocol error is answered, then the connection closes (cat sees EOF).
out=$(exec 3<>"/dev/tcp/127.0.0.1/$port" && printf '*x\r\n' >&3 &&
  timeout 10 cat <&3)
checkout kv_redis_protocol_error_answered \
  "$(printf -- '-ERR Protocol error: invalid multibulk length\r')" "$out"
# A value over max_value_bytes (1 MiB by default), sent whole by redis-cli.
checkout kv_redis_oversized_value_answered \
  "ERR Protocol error: invalid bulk length (2000000 bytes, maximum 1048576)" \
  "$(head -c 2000000 /dev/zero | tr '\0' v |
    timeout 10 redis-cli -p "$port" -x set big 2>&1)"
check kv_redis_oversized_not_stored 0 exists big
# SCAN with a 60 KB pattern over two 64 KiB keys: refused at once (the
# backtracking matcher took seconds per key; redis-cli gets 5 s). Its first
# 1024 bytes, within the limit, match both keys.
long=$(head -c 65535 /dev/zero | tr '\0' a)
check kv_redis_set_long_key1 OK set "1$long" v
check kv_redis_set_long_key2 OK set "2$long" v
pattern="*$(printf '[a]%.0s' $(seq 20000))b$(head -c 1438 /dev/zero | tr '\0' a)"
checkout kv_redis_scan_huge_pattern_refused \
  "ERR MATCH pattern too long, must be at most 1024 bytes" \
  "$(timeout 5 redis-cli -p "$port" scan 0 match "$pattern" count 1000 2>&1)"
checkout kv_redis_scan_pattern_at_limit \
  "$(printf '1%s\n2%s' "$long" "$long")" \
  "$(timeout 5 redis-cli -p "$port" --scan --pattern "${pattern:0:1024}" 2>&1 |
    sort)"
check kv_redis_flushall OK flushall
check kv_redis_dbsize 0 dbsize

out=$(timeout 120 redis-benchmark -p "$port" -t get,set -n 20000 -c 20 -q 2>&1)
if [ $? -eq 0 ] && [ "$(grep -c 'requests per second' <<<"$out")" -eq 2 ] &&
   ! grep -qi 'error' <<<"$out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: kv_redis_benchmark_runs_clean: $out"
fi
kill -TERM $pid && wait $pid
rc=$?
if [ $rc -eq 0 ]; then passed=$((passed + 1)); else
  failed=$((failed + 1)); echo "FAIL: kv_redis_server_stops_cleanly: exit $rc"
  cat "$log"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
