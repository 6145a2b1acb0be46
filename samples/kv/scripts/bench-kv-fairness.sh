#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fairness under a pipeline of costly commands (issue 27), weft-kv-server
# beside redis-server: with KEYS keys in the store, one client sends
# COMMANDS pipelined KEYS in one write and reads the replies, while another
# client of the same loop (weft: loop.loops=1; redis is single-threaded)
# sends PINGs one at a time; the PINGs' latencies from the flood's write to
# its last reply (or to the end of WINDOW seconds) give p50/p99/max.
# Rounds interleave: weft, then redis, ROUNDS times.
#
# weft gets `KEYS *` (the issue's command: each copies at most 100000 keys
# and answers an error past them). redis gets `KEYS nomatch*`: the same
# scan of every key, without the ~13 MB reply per command that `KEYS *`
# over a million keys makes, which for 1000 pipelined would be ~13 GB of
# output buffer (Redis runs a read's whole query buffer before it writes,
# and its normal clients have no output limit). A server still busy with
# the flood at the end of the window is reported as stalled (its unanswered
# PING counts with the window's length, a lower bound); one that does not
# answer a PING 15 s after its flood's client closed is killed and
# restarted (redis reloads the store from the RDB file this script saved).
#
# Usage: samples/kv/scripts/bench-kv-fairness.sh [--update-docs] [BUILD_DIR]
#   (default build/release: a Release build of weft-kv-server, made if
#   missing). Environment: KEYS (1000000), COMMANDS (1000), ROUNDS (3),
#   WINDOW (30 s). Results go to $TMPDIR/weft-kv-fairness-DATE.md
#   (printed); --update-docs writes them into samples/kv/docs/benchmarks.md
#   (between the bench-kv-fairness markers).
set -euo pipefail
cd "$(dirname "$0")/../../.."
. scripts/lib.sh
update=false
if [ "${1:-}" = --update-docs ]; then
  update=true
  shift
fi
build=${1:-build/release}
keys=${KEYS:-1000000}
commands=${COMMANDS:-1000}
rounds=${ROUNDS:-3}
window=${WINDOW:-30}
need python3 python3
need redis-server redis-server
if [ ! -x "$build/samples/kv/weft-kv-server" ]; then
  quiet_configure "$build" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF
  quiet_build "$build" --target weft-kv-server
fi
weft_bin=$build/samples/kv/weft-kv-server
out=$(mktemp -d)
wpid= rpid=
cleanup() {
  for p in $wpid $rpid; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$out"
}
trap cleanup EXIT
base=$((20000 + RANDOM % 10000))
wport=$base rport=$((base + 1))

# The client side: load, flood, PINGs. Subcommands:
#   load PORT KEYS                 MSET k0..k{KEYS-1} in 500-pair commands
#   round PORT COMMANDS PATTERN WINDOW   one round; prints one line:
#     p50_ms p99_ms max_ms pings flood_s done(0/1) replies
cat >"$out/client.py" <<'PY'
import socket, sys, threading, time

def conn(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

def cmd(*args):
    return b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a), a) for a in args)

def load(port, n):
    s = conn(port)
    for base in range(0, n, 500):
        words = [b"MSET"]
        for i in range(base, min(n, base + 500)):
            words += [b"k%d" % i, b"v"]
        s.sendall(cmd(*words))
        assert s.recv(16) == b"+OK\r\n"
    s.close()

class Replies:
    """Counts top-level RESP replies as they stream in (simple types,
    bulk strings, arrays of bulk strings: what KEYS answers)."""
    def __init__(self):
        self.buf, self.pos, self.count, self.todo = b"", 0, 0, []
    def line(self):
        i = self.buf.find(b"\r\n", self.pos)
        if i < 0:
            return None
        l, self.pos = self.buf[self.pos:i], i + 2
        return l
    def feed(self, data):
        self.buf = self.buf[self.pos:] + data
        self.pos = 0
        while True:
            mark = self.pos
            if not self.step():
                self.pos = mark
                return
    def step(self):
        l = self.line()
        if l is None:
            return False
        t = l[:1]
        if t == b"*":
            n = int(l[1:])
            for _ in range(max(n, 0)):
                h = self.line()
                if h is None:
                    return False
                if h[:1] == b"$" and int(h[1:]) >= 0:
                    if len(self.buf) - self.pos < int(h[1:]) + 2:
                        return False
                    self.pos += int(h[1:]) + 2
        elif t == b"$" and int(l[1:]) >= 0:
            if len(self.buf) - self.pos < int(l[1:]) + 2:
                return False
            self.pos += int(l[1:]) + 2
        self.count += 1
        return True

def round_(port, n, pattern, window):
    ping, flood = conn(port), conn(port)
    ping.sendall(cmd(b"PING"))
    assert ping.recv(16) == b"+PONG\r\n"
    lat, stop = [], threading.Event()
    def pinger():
        while not stop.is_set():
            t0 = time.monotonic()
            ping.sendall(cmd(b"PING"))
            ping.settimeout(max(0.001, end - t0))
            try:
                got = b""
                while not got.endswith(b"\r\n"):
                    d = ping.recv(16)
                    if not d:
                        return
                    got += d
                lat.append(time.monotonic() - t0)
            except socket.timeout:
                lat.append(time.monotonic() - t0)  # unanswered: a bound
                return
    replies = Replies()
    start = time.monotonic()
    end = start + window
    th = threading.Thread(target=pinger)
    th.start()
    flood.sendall(cmd(b"KEYS", pattern) * n)
    flood.settimeout(0.2)
    while replies.count < n and time.monotonic() < end:
        try:
            d = flood.recv(1 << 20)
        except socket.timeout:
            continue
        if not d:
            break
        replies.feed(d)
    flood_s = time.monotonic() - start
    done = replies.count >= n
    stop.set()
    th.join()
    lat.sort()
    pct = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3
    print("%.2f %.2f %.2f %d %.2f %d %d" % (pct(0.5), pct(0.99), lat[-1] * 1e3,
          len(lat), flood_s, done, replies.count))
    ping.close()
    flood.close()

if sys.argv[1] == "load":
    load(int(sys.argv[2]), int(sys.argv[3]))
else:
    round_(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].encode(),
           float(sys.argv[5]))
PY

wait_port() { # PORT PID LOG
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  cat "$3" >&2
  return 1
}

weft_start() {
  "$weft_bin" -o loop.loops=1 -o kv.rpc_listen= \
    -o "kv.resp_listen=127.0.0.1:$wport" 2>"$out/weft.log" &
  wpid=$!
  wait_port "$wport" "$wpid" "$out/weft.log"
  step "weft: loading $keys keys"
  python3 "$out/client.py" load "$wport" "$keys"
}

redis_start() {
  redis-server --port "$rport" --save "" --appendonly no --dir "$out" \
    --dbfilename fair.rdb --daemonize no --loglevel warning \
    >"$out/redis.log" 2>&1 &
  rpid=$!
  wait_port "$rport" "$rpid" "$out/redis.log"
  # Still loading the RDB file: PING answers -LOADING until it is done.
  until [ "$(redis-cli -p "$rport" PING 2>/dev/null)" = PONG ]; do
    sleep 0.2
  done
  if [ ! -f "$out/fair.rdb" ]; then
    step "redis: loading $keys keys"
    python3 "$out/client.py" load "$rport" "$keys"
    redis-cli -p "$rport" SAVE >/dev/null
  fi
}

stop_hard() { # PID
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
weft_start
redis_start
rows=()
for r in $(seq "$rounds"); do
  for who in weft redis; do
    if [ $who = weft ]; then
      port=$wport pattern='*'
    else
      port=$rport pattern='nomatch*'
    fi
    step "round $r: $who, $commands pipelined KEYS $pattern"
    line=$(python3 "$out/client.py" round "$port" "$commands" "$pattern" \
      "$window")
    rows+=("$who $r $line $(cut -d' ' -f1 /proc/loadavg)")
    step "  p50 p99 max (ms), pings, flood s, done, replies: $line"
    # A server still busy with the flood (the client closed its
    # connection) and not answering within 15 s is killed and restarted:
    # a SIGTERM would wait for the flood (Redis handles it in serverCron).
    if ! timeout 15 redis-cli -p "$port" PING >/dev/null 2>&1; then
      step "  $who does not answer: restarting it"
      if [ $who = weft ]; then
        stop_hard "$wpid"
        weft_start
      else
        stop_hard "$rpid"
        redis_start
      fi
    fi
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

result=$out/result.md
{
  echo "Command: \`samples/kv/scripts/bench-kv-fairness.sh\` (KEYS=$keys COMMANDS=$commands"
  echo "ROUNDS=$rounds WINDOW=$window), $(date -u +%Y-%m-%d), weft at"
  echo "$(git rev-parse --short HEAD), $(redis-server --version | cut -d' ' -f3),"
  echo "$(nproc) CPUs shared with other work: load average $load_before before,"
  echo "$load_after after. PING latency while the flood runs, one PING at a"
  echo "time; \"flood\" is the time to the last of its replies (a server still"
  echo "busy at the window's end is stalled: its unanswered PING counts as the"
  echo "window, a lower bound)."
  echo
  echo "| server | round | PING p50 ms | p99 ms | max ms | PINGs | flood s | flood done | load |"
  echo "|---|---:|---:|---:|---:|---:|---:|---|---:|"
  for row in "${rows[@]}"; do
    read -r who rr p50 p99 max n fs done replies load <<<"$row"
    d=yes
    [ "$done" = 1 ] || d="no ($replies of $commands)"
    echo "| $who | $rr | $p50 | $p99 | $max | $n | $fs | $d | $load |"
  done
} >"$result"
cat "$result"
if $update; then
  python3 - "$result" samples/kv/docs/benchmarks.md <<'PY'
import sys
res, readme = open(sys.argv[1]).read(), sys.argv[2]
text = open(readme).read()
b, e = "<!-- bench-kv-fairness begin -->", "<!-- bench-kv-fairness end -->"
i, j = text.index(b) + len(b), text.index(e)
open(readme, "w").write(text[:i] + "\n" + res + text[j:])
PY
  step "results written into samples/kv/docs/benchmarks.md"
else
  keep=${TMPDIR:-/tmp}/weft-kv-fairness-$(date -u +%Y%m%dT%H%M%S).md
  cp "$result" "$keep"
  step "results in $keep (--update-docs writes them into samples/kv/docs/benchmarks.md)"
fi
