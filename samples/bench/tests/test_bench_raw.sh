#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-bench's raw server (samples/bench/raw_server.c: one thread, epoll
# over every connection), briefly: under raw-busy and raw-block every
# pattern reports a row with a figure, among them a 1 MiB bidir echo
# (sends that the socket takes only in part: the backlog and EPOLLOUT)
# and rate over 4 connections; --plain-echo: a client without the hello
# is answered by a raw server and a weft server started with it, and by
# weft-echo; a late reader gets every byte back in order (the raw
# server's partial sends); --plain-echo with a pattern that needs the hello is refused.
# No speed is asserted.
# Usage: test_bench_raw.sh weft-bench weft-echo
set -u
bench=$1 echo_bin=$2
dir=$(mktemp -d)
server_pid=
cleanup() {
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
short=(-r 1 -n 300 -w 50 -t 0.2 --warm-seconds 0.05 --idle-seconds 0.3
  --idle-conns 10 -q --no-progress)

# CSV COLUMN CONFIG PATTERN SIZE CONNS WINDOW: that row's figure
field() {
  awk -F, -v f="$1" -v c="$2" -v p="$3" -v s="$4" -v n="$5" -v w="$6" '
    NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
    $1 == c && $5 == p && $6 == s && $7 == n && $8 == w { print $col[f] }' \
    "$dir/out.csv"
}

# CONFIG PATTERN SIZE CONNS WINDOW COLUMN: the figure is there and > 0
# (idle: >= 0, a blocking server may use no CPU at all)
has() {
  local v min=0
  v=$(field "$6" "$1" "$2" "$3" "$4" "$5")
  [ "$2" = idle ] && min=-1
  awk -v v="$v" -v m="$min" 'BEGIN { exit !(v != "" && v > m) }' && ok ||
    bad "$1 $2 $3 ${4}x$5: $6 '$v' in $(cat "$dir/out.csv")"
}

# Both raw servers, every pattern; 1 MiB bidir fills the socket buffers.
if timeout 120 "$bench" -S raw-busy -S raw-block -s 16,1M --rate 1x64,4x16 \
  -p pingpong,stream,bidir,rate,idle "${short[@]}" --csv "$dir/out.csv" \
  >/dev/null 2>"$dir/err.txt"; then
  for c in raw-busy raw-block; do
    has "$c" pingpong 16 1 1 p50_us
    has "$c" stream 1048576 1 0 mb_per_s
    has "$c" bidir 1048576 1 2 mb_per_s
    has "$c" rate 16 1 64 msgs_per_s
    has "$c" rate 16 4 16 msgs_per_s
  done
  has raw-block idle 0 10 0 server_cpu_pct
else
  bad "raw setups: weft-bench failed: $(cat "$dir/err.txt")"
fi
# connect counts the connections begun in -t seconds: 1 s, so that one
# connection stalled by a loaded machine (seen: 0.2 s) leaves others.
if timeout 60 "$bench" -S raw-busy -S raw-block -p connect "${short[@]}" \
  -t 1 --csv "$dir/out.csv" >/dev/null 2>"$dir/err.txt"; then
  for c in raw-busy raw-block; do has "$c" connect 0 1 0 conns_per_s; done
else
  bad "raw connect: weft-bench failed: $(cat "$dir/err.txt")"
fi

# Starts a server (server_pid) and waits until it prints "serving on"
# or "listening on" (its port goes to `port`); false after 5 s.
start_server() {
  "$@" >"$dir/srv.txt" 2>&1 &
  server_pid=$!
  for _ in $(seq 50); do
    port=$(sed -n 's/.*\(serving\|listening\) on \([a-z]*:\/\/\)\?[0-9.]*:\([0-9]*\).*/\3/p' \
      "$dir/srv.txt" | head -1)
    [ -n "$port" ] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  return 1
}

stop_server() {
  kill "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=
}

# NAME SERVER...: a --plain-echo client's rate and bidir rows against it
plain() {
  local name=$1
  shift
  if ! start_server "$@"; then
    bad "$name: the server did not start: $(cat "$dir/srv.txt")"
    stop_server
    return
  fi
  if timeout 60 "$bench" --role client -S raw-busy --plain-echo \
    --port "$port" -p rate,bidir -s 64K --rate 1x64 "${short[@]}" \
    --csv "$dir/out.csv" >/dev/null 2>"$dir/err.txt"; then
    has raw-busy rate 16 1 64 msgs_per_s
    has raw-busy bidir 65536 1 4 mb_per_s
  else
    bad "$name: the --plain-echo client failed: $(cat "$dir/err.txt")"
  fi
  stop_server
}

plain "raw-block server" "$bench" --role server -S raw-block --plain-echo \
  --no-progress

# A client that sends 16 MiB and starts reading only 0.5 s later: the
# raw server's sends are taken in part (its backlog, EPOLLOUT), and every
# byte still comes back, in order.
for m in raw-block raw-busy; do
  if start_server "$bench" --role server -S "$m" --plain-echo --no-progress; then
    timeout 60 /usr/bin/python3 - "$port" <<'PY' && ok || bad "$m: a late reader's echo came back wrong"
import socket, sys, threading, time
n = 16 << 20
data = bytes(i % 251 for i in range(n))
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
threading.Thread(target=s.sendall, args=(data,), daemon=True).start()
time.sleep(0.5)
got = bytearray()
while len(got) < n:
    b = s.recv(1 << 20)
    if not b:
        break
    got += b
sys.exit(0 if got == data else 1)
PY
  else
    bad "$m: the server did not start: $(cat "$dir/srv.txt")"
  fi
  stop_server
done
plain "tcp server" "$bench" --role server -S tcp:0 --plain-echo --no-progress
plain "weft-echo" "$echo_bin" server -o loop.loops=1 \
  -o server.listen=tcp://127.0.0.1:0

# The hello's patterns cannot run without it: refused up front (exit 2).
out=$("$bench" --role client -S raw-busy --plain-echo --port 1 -p stream \
  "${short[@]}" 2>&1)
rc=$?
[ $rc -eq 2 ] && [[ $out == *"--plain-echo is for"* ]] && ok ||
  bad "--plain-echo -p stream: rc $rc, '$out'"

echo "test_bench_raw: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
