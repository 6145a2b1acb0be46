# SPDX-License-Identifier: Apache-2.0
# Sourced by the KV service's shell tests: start_server, with $server (the
# weft-kv-server program), $dir (a scratch directory) and the array $pids
# (killed by the test's exit trap) set by the test.

start_server() { # NAME HOST ARGS...: starts a server with RESP and RPC on
  # HOST, port 0, and ARGS (later -o win); sets $port (RESP), $rpc_port
  # and $pid; waits for both listeners (up to 30 s on a loaded machine)
  local name=$1 host=$2; shift 2
  : >"$dir/$name.log"
  "$server" -o loop.loops=2 -o "kv.rpc_listen=$host:0" \
    -o "kv.resp_listen=$host:0" "$@" 2>"$dir/$name.log" &
  pid=$!
  pids+=("$pid")
  port="" rpc_port=""
  for _ in $(seq 300); do
    port=$(sed -n 's/.*resp on tcp:\/\/.*:\([0-9]*\)$/\1/p' "$dir/$name.log")
    rpc_port=$(sed -n 's/.*rpc on tcp:\/\/.*:\([0-9]*\)$/\1/p' "$dir/$name.log")
    [ -n "$port" ] && [ -n "$rpc_port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "FAIL: server $name did not start:"; cat "$dir/$name.log"; exit 1; }
}
