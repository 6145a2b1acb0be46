#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-kv-server's resident memory under clients that never read.
#
# Default mode: one client, before the channel defences (flow control,
# output limit) and now: the client
# SETs an 8 KiB value, then sends up to 300 000 pipelined GETs of it
# without reading a byte, keeps the connection open until SECONDS, then
# closes; /proc/PID/status VmRSS is sampled every 0.5 s, and 5 s more after
# the close, and the peak seen in samples every 20 ms. A server is killed
# once it passes 4 GiB (`ulimit -v` 8 GiB as a backstop). Per transport,
# three runs in a row:
# the old server, the new one, and the new one with
# -o server.flow_control=false (the 64 MiB output limit alone). Prints a
# markdown table per transport: time, then RSS and GETs sent so far for
# each run.
# Usage: samples/kv/scripts/bench-never-read.sh [BUILD_DIR] [BEFORE_COMMIT] [SECONDS]
#        [TRANSPORTS]
#        (default build/release, d1b5206: ed2bcb0's parent, the last commit
#        without channel/limits.c; 20 s; "tcp uring")
#
# --clients N: what each such client costs the current server, per
# transport, with everything at its defaults (flow control, the output
# limit, uring's zero-copy sends from 64 KiB): 1, then N clients of
# samples/kv/scripts/never_read_client.c (a weft client, so ucx:// too; built here
# against BUILD_DIR's libweft), each SETting the value and pipelining GETs
# it never reads while its own queue is writable, for SECONDS. Prints the
# server's RSS before, its peak (0.1 s samples) and the growth per client.
# verbs needs RDMA hardware or the Soft-RoCE VM, which this script does not
# start; there, with KV_HOST set to rxe0's address (RoCE has no loopback):
#   WEFT_VM_RUN='samples/kv/scripts/bench-never-read.sh --clients 64
#     build/dev 10 verbs' scripts/test-verbs-vm.sh build/dev
# KV_SERVER=PATH measures that server binary instead (another commit's),
# with the same client. KV_HOST: the address the server listens on and the
# clients connect to (default 127.0.0.1).
# Usage: [KV_SERVER=PATH] [KV_HOST=ADDR] samples/kv/scripts/bench-never-read.sh
#        --clients N [BUILD_DIR] [SECONDS] [TRANSPORTS]
#        (default build/release, 10 s, "tcp uring ucx")
set -euo pipefail
cd "$(dirname "$0")/../../.."
. scripts/lib.sh
clients=
if [ "${1:-}" = --clients ]; then
  clients=$2
  shift 2
fi
build=${1:-build/release}
if [ -n "$clients" ]; then
  seconds=${2:-10}
  transports=${3:-tcp uring ucx}
else
  before=$(git rev-parse --short "${2:-d1b5206}")
  seconds=${3:-20}
  transports=${4:-tcp uring}
fi
need python3 python3
need cmake cmake
need cc build-essential
release() { # SRC DIR [TARGETS]: a Release build of the KV server in DIR
  if [ ! -x "$2/samples/kv/weft-kv-server" ] ||
    { [ -n "${3:-}" ] && [ ! -e "$2/libweft.so" ]; }; then
    [ -f "$2/CMakeCache.txt" ] ||
      quiet_run "configuring $2" cmake -S "$1" -B "$2" \
        -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF -DWEFT_WITH_UCX=ON \
        -DWEFT_WITH_URING=ON
    quiet_build "$2" --target weft-kv-server ${3:-}
  fi
}
host=${KV_HOST:-127.0.0.1}
out=$(mktemp -d)
pid=
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$out"' EXIT

# NAME TRANSPORT BINARY [-o ...]: starts a server (pid, port), its log in
# $out/NAME.log. RESP, or the binary protocol when $proto is rpc (ucx,
# verbs: RESP needs TCP on the wire).
proto=resp
server_start() {
  local name=$1 transport=$2 bin=$3 rpc= resp=$host:0
  shift 3
  [ "$proto" = rpc ] && rpc=$host:0 resp=
  port=
  (ulimit -v $((8 << 20)) && exec "$bin" -o loop.loops=1 \
    -o kv.rpc_listen="$rpc" -o transport.name="$transport" \
    -o kv.resp_listen="$resp" "$@") 2>"$out/$name.log" &
  pid=$!
  for _ in $(seq 600); do # up to 60 s: a loaded machine starts it slowly
    port=$(sed -n "s/.*$proto on .*:\\([0-9]*\\)\$/\\1/p" "$out/$name.log")
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] || {
    echo "weft: $bin did not start:" >&2
    cat "$out/$name.log" >&2
    exit 1
  }
}

rss_kib() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status"; }

# TRANSPORT N: N never-reading clients against a fresh server; one table
# row.
clients_run() {
  local t=$1 n=$2 base peak r end client flag=
  proto=resp
  if [ "$t" = ucx ] || [ "$t" = verbs ]; then
    proto=rpc flag=--rpc
  fi
  server_start "clients-$t-$n" "$t" "${KV_SERVER:-$build/samples/kv/weft-kv-server}"
  sleep 0.5
  base=$(rss_kib "$pid")
  step "$t: $n never-reading clients for $seconds s"
  "$out/never-read-client" $flag "$t://$host:$port" "$n" "$seconds" \
    >"$out/client.out" 2>"$out/client.err" &
  client=$!
  peak=$base
  end=$((SECONDS + seconds + 30))
  while kill -0 "$client" 2>/dev/null && [ $SECONDS -lt $end ]; do
    r=$(rss_kib "$pid")
    [ "$r" -gt "$peak" ] && peak=$r
    sleep 0.1
  done
  wait "$client" || { cat "$out/client.err" >&2; exit 1; }
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  awk -v t="$t" -v n="$n" -v b="$base" -v p="$peak" 'BEGIN {
    printf "| %s | %d | %.1f | %.1f | %.2f |\n", t, n, b / 1024, p / 1024,
      (p - b) / 1024 / n }' >>"$out/table"
}

if [ -n "$clients" ]; then
  release . "$build" weft_shared
  cc -O2 -Iinclude -I"$build/include" -o "$out/never-read-client" \
    samples/kv/scripts/never_read_client.c -L"$build" -lweft -Wl,-rpath,"$PWD/$build"
  for t in $transports; do
    clients_run "$t" 1
    clients_run "$t" "$clients"
  done
  echo "server: ${KV_SERVER:-$(git rev-parse --short HEAD) ($build)}; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "| transport | clients | RSS before MiB | peak MiB | growth per client MiB |"
  echo "|---|---:|---:|---:|---:|"
  cat "$out/table"
  exit 0
fi

release . "$build"
old=${TMPDIR:-/tmp}/weft-before-$before
if [ ! -d "$old/src" ]; then
  mkdir -p "$old/src"
  git archive "$before" | tar -x -C "$old/src"
fi
release "$old/src" "$old/build"

# NAME TRANSPORT BINARY [-o ...]: one run, samples into $out/NAME.csv.
run() {
  local name=$1 transport=$2 bin=$3
  server_start "$@"
  shift 3
  step "$name ($bin $*): never-reading client for $seconds s"
  python3 - "$pid" "$port" "$seconds" "$out/$name.csv" <<'PY'
import os, select, signal, socket, sys, time
pid, port, seconds, csv = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
CAP, GETS = 4 << 30, 300_000
def rss():
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return None
value = b"v" * 8192
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$8192\r\n" + value + b"\r\n")
assert s.recv(5) == b"+OK\r\n"
s.setblocking(False)
batch = b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n" * 1000
rows, sent, off, killed, peak = [], 0, 0, None, 0
start = time.monotonic()
next_row = next_check = 0.0
while True:
    t = time.monotonic() - start
    if t >= seconds + 5:
        break
    if t >= next_check:
        r = rss() if killed is None else None
        peak = max(peak, r or 0)
        if r is not None and r > CAP:
            os.kill(pid, signal.SIGKILL)
            killed, r = t, None
        if t >= next_row:
            rows.append((next_row, r, sent // (len(batch) // 1000)))
            next_row += 0.5
        next_check = t + 0.02
    left = GETS * (len(batch) // 1000) - sent
    if t < seconds and s is not None and left == 0:
        time.sleep(0.05)  # all sent: hold the connection, never read
    elif t < seconds and s is not None:
        try:
            n = s.send(batch[off:off + left])
            sent, off = sent + n, (off + n) % len(batch)
        except BlockingIOError:
            select.select([], [s], [], 0.02)
        except OSError:  # the server closed it (or was killed)
            s.close()
            s = None
    else:
        if s is not None:
            s.close()
            s = None
        time.sleep(0.05)
with open(csv, "w") as f:
    f.write(f"killed,{killed if killed is not None else ''},{peak}\n")
    for t, r, gets in rows:
        f.write(f"{t:.1f},{'' if r is None else r},{gets}\n")
PY
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
for t in $transports; do
  run "before-$t" "$t" "$old/build/samples/kv/weft-kv-server"
  run "after-$t" "$t" "$build/samples/kv/weft-kv-server"
  run "no-flow-control-$t" "$t" "$build/samples/kv/weft-kv-server" \
    -o server.flow_control=false
done
echo "before: $before, after: $(git rev-parse --short HEAD); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in $transports; do
  echo
  echo "$t:"
  python3 - "$seconds" "$out"/{before,after,no-flow-control}-"$t".csv <<'PY'
import sys
seconds, runs, peaks = float(sys.argv[1]), [], []
for path in sys.argv[2:]:
    lines = open(path).read().split("\n")
    killed, peak = lines[0].split(",")[1:3]
    peaks.append(f"{int(peak) / 2**20:,.1f}")
    if killed:
        print(f"{path.split('/')[-1][:-4]}: killed at {float(killed):.2f} s, past 4 GiB RSS")
    runs.append([l.split(",") for l in lines[1:] if l])
mib = lambda r: f"{int(r) / 2**20:,.1f}" if r else "gone"
print("| time s | before: RSS MiB | GETs sent | after: RSS MiB | GETs sent "
      "| after, flow_control=false: RSS MiB | GETs sent |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for rows in zip(*runs):
    t = rows[0][0] + (" (closed)" if float(rows[0][0]) >= seconds else "")
    print(f"| {t} | " + " | ".join(f"{mib(r[1])} | {int(r[2]):,}" for r in rows) + " |")
print("| peak (20 ms samples) | " + " | ".join(f"{p} | " for p in peaks) + "|")
PY
done
