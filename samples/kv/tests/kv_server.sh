# SPDX-License-Identifier: Apache-2.0
# Sourced by the KV service's shell tests: start_server and
# start_resp_server, with $server (the weft-kv-server program), $dir (a
# scratch directory) and the array $pids (killed by the test's exit trap)
# set by the test.

launch() { # NAME ARGS...: runs $server on two loops with ARGS (later -o
  # win), its stderr in $dir/NAME.log; sets $pid and adds it to $pids
  local name=$1; shift
  : >"$dir/$name.log"
  "$server" -o loop.loops=2 "$@" 2>"$dir/$name.log" &
  pid=$!
  pids+=("$pid")
}

listen_port() { # NAME LISTENER: prints the port server NAME's log names
  # for LISTENER (resp, rpc) once it does (up to 30 s on a loaded
  # machine); nothing if it never does
  local _ p=""
  for _ in $(seq 300); do
    p=$(sed -n "s/.*$2 on tcp:\/\/.*:\([0-9]*\)$/\1/p" "$dir/$1.log")
    [ -n "$p" ] && break
    sleep 0.1
  done
  echo "$p"
}

started() { # NAME: fails the test unless $port is set (server NAME listens)
  [ -n "$port" ] || { echo "FAIL: server $1 did not start:"; cat "$dir/$1.log"; exit 1; }
}

start_server() { # NAME HOST ARGS...: starts a server with RESP and RPC on
  # HOST, port 0, and ARGS (later -o win); sets $port (RESP), $rpc_port
  # and $pid; waits for both listeners
  local name=$1 host=$2; shift 2
  launch "$name" -o "kv.rpc_listen=$host:0" -o "kv.resp_listen=$host:0" "$@"
  port=$(listen_port "$name" resp)
  rpc_port=$(listen_port "$name" rpc)
  started "$name"
}

start_resp_server() { # NAME ARGS...: starts a server with RESP only (no
  # RPC listener) on 127.0.0.1, port 0, and ARGS; sets $port and $pid
  local name=$1; shift
  launch "$name" -o kv.rpc_listen= -o kv.resp_listen=127.0.0.1:0 "$@"
  port=$(listen_port "$name" resp)
  started "$name"
}
