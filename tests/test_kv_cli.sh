#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The KV service's operator habits, as Redis users have them: SHUTDOWN
# over RESP (redis-cli) with Redis 7's forms for a server without
# persistence, AUTH and [kv] shutdown_command respected; weft-kvbench
# prints what it measured when interrupted (SIGINT), status 130.
# Usage: test_kv_cli.sh PATH/TO/weft-kv-server PATH/TO/weft-kv
#        PATH/TO/weft-kvbench  (CTest)
set -u
server=$1 cli=$2 kvbench=$3
command -v redis-cli >/dev/null ||
  { echo "FAIL: redis-cli is needed (apt-get install redis-tools)"; exit 1; }
dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$dir"' EXIT

start_server() { # NAME ARGS...: RESP and RPC on 127.0.0.1, port 0; sets
  # $port (RESP), $rpc_port and $pid
  local name=$1; shift
  : >"$dir/$name.log"
  "$server" -o loop.loops=1 -o kv.rpc_listen=127.0.0.1:0 \
    -o kv.resp_listen=127.0.0.1:0 "$@" 2>"$dir/$name.log" &
  pid=$!
  pids+=("$pid")
  port="" rpc_port=""
  for _ in $(seq 300); do # up to 30 s on a loaded machine
    port=$(sed -n 's/.*resp on tcp:\/\/.*:\([0-9]*\)$/\1/p' "$dir/$name.log")
    rpc_port=$(sed -n 's/.*rpc on tcp:\/\/.*:\([0-9]*\)$/\1/p' "$dir/$name.log")
    [ -n "$port" ] && [ -n "$rpc_port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "FAIL: server $name did not start:"; cat "$dir/$name.log"; exit 1; }
}

exit_status() { # PID: sets $status to its exit status once it exits (up
  # to 60 s), else to "running"; in this shell, which can wait for it
  status=running
  for _ in $(seq 600); do
    if ! kill -0 "$1" 2>/dev/null; then
      wait "$1"
      status=$?
      return
    fi
    sleep 0.1
  done
}

passed=0 failed=0
checkout() { # NAME EXPECTED GOT
  if [ "$3" == "$2" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $1: got '$3', want '$2'"
  fi
}
rcli() { timeout 10 redis-cli -p "$port" "$@" 2>&1; }

# ---- SHUTDOWN ----
start_server main
checkout kv_shutdown_save_refused \
  "ERR SHUTDOWN SAVE: this server has no persistence (no RDB, no AOF), nothing can be saved; use SHUTDOWN or SHUTDOWN NOSAVE" \
  "$(rcli shutdown save)"
checkout kv_shutdown_abort "ERR No shutdown in progress." "$(rcli shutdown abort)"
checkout kv_shutdown_nosave_save_syntax "ERR syntax error" "$(rcli shutdown nosave save)"
checkout kv_shutdown_abort_now_syntax "ERR syntax error" "$(rcli shutdown abort now)"
checkout kv_shutdown_unknown_word "ERR syntax error" "$(rcli shutdown soon)"
checkout kv_shutdown_in_multi \
  "$(printf 'OK\nERR Command not allowed inside a transaction\n\nEXECABORT Transaction discarded because of previous errors.\n')" \
  "$(printf 'multi\nshutdown\nexec\n' | rcli)"
checkout kv_shutdown_refused_still_serves PONG "$(rcli ping)"
# Redis answers an accepted SHUTDOWN with the close; redis-cli prints
# nothing and exits 0, and so does the server.
checkout kv_shutdown_nosave_quiet "" "$(rcli shutdown nosave now force)"
exit_status "$pid"
checkout kv_shutdown_server_exit 0 "$status"
grep -q "SHUTDOWN from 127.0.0.1:" "$dir/main.log"
checkout kv_shutdown_logged 0 $?

start_server plain
checkout kv_shutdown_plain "" "$(rcli shutdown)"
exit_status "$pid"
checkout kv_shutdown_plain_exit 0 "$status"

# AUTH first: an unauthenticated client cannot stop the server.
start_server auth -o kv.requirepass=s3cret
checkout kv_shutdown_noauth "NOAUTH Authentication required." "$(rcli shutdown nosave)"
checkout kv_shutdown_noauth_still_serves PONG \
  "$(rcli -a s3cret --no-auth-warning ping)"
checkout kv_shutdown_auth "" "$(rcli -a s3cret --no-auth-warning shutdown)"
exit_status "$pid"
checkout kv_shutdown_auth_exit 0 "$status"

# [kv] shutdown_command = no: nobody.
start_server disabled -o kv.shutdown_command=no
checkout kv_shutdown_disabled \
  "ERR SHUTDOWN is disabled on this server ([kv] shutdown_command = no)" \
  "$(rcli shutdown nosave)"
checkout kv_shutdown_disabled_still_serves PONG "$(rcli ping)"

# ---- weft-kvbench: SIGINT prints what was measured ----
start_server bench
"$kvbench" --connect "127.0.0.1:$rpc_port" --records 1000 --warmup 0 \
  --duration 3600 --connections 1 --pipeline 4 \
  >"$dir/bench.out" 2>"$dir/bench.err" &
bpid=$!
pids+=("$bpid")
for _ in $(seq 600); do # the first progress line of the measured run
  grep -q "^weft-kvbench: run " "$dir/bench.err" && break
  sleep 0.1
done
kill -INT "$bpid"
exit_status "$bpid"
checkout kvbench_sigint_status 130 "$status"
checkout kvbench_sigint_partial yes \
  "$(grep -qE '^run +[0-9.]+ s, [1-9][0-9]* ops .*\(interrupted\)$' "$dir/bench.out" &&
    grep -q '^throughput ' "$dir/bench.out" && echo yes || echo no)"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] || { cat "$dir"/*.log "$dir"/bench.*; exit 1; }
