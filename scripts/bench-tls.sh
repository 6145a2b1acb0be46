#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What TLS costs, each figure beside its plaintext twin measured in the same
# run, interleaved (A B A B ...), medians of RUNS:
#
#  a. weft-bench: 16 B ping-pong and 16 B / 1 MiB streams over tcp and
#     uring, plaintext and +tls (the TLS handler first at both ends), and
#     the same library's floor beside them: raw-tls-busy and raw-tls-block,
#     a minimal echo over OpenSSL alone (SSL_read spinning on a nonblocking
#     socket, or blocking), as raw-busy and raw-block are for plaintext;
#     weft-bench itself interleaves: repetition r of every setup runs
#     before repetition r+1. The ping-pong p50 ratios to the floor: tcp+tls
#     and uring+tls at busy_poll_us 20 / raw-tls-busy, tcp+tls at 0 /
#     raw-tls-block (issue 32's target: <= 1.1x). Beside them, `openssl
#     speed -evp` of the negotiated cipher (AES-128-GCM: weft offers it
#     first) on one core, 16 KiB blocks: the ceiling of user-space records.
#  b. weft-kv-server's TLS listener beside its plaintext one (one server,
#     one store, one loop: redis-server answers on one thread), and redis-server's tls-port beside its port, all driven by
#     redis-benchmark -t set,get (--tls --cacert for the TLS ports) at -P 1
#     -c 1, -P 1 -c 50 and -P 16 -c 50, runs interleaved weft, weft+tls,
#     redis, redis+tls: throughput, and each server's CPU per request
#     (utime + stime from /proc/PID/stat over each redis-benchmark run, its
#     SET and GET together; issue 32's targets at -c 50: weft+tls >= 1.0x
#     redis+tls in throughput, <= 1.0x in CPU per request).
#  c. whether encrypted records go out in as few writes as the plaintext:
#     the socket writes (write, writev, sendmsg on a TCP socket; strace -f
#     -y) of a fixed workload, plaintext vs TLS: weft-kv-server and
#     redis-server answering redis-benchmark -P 16 (the same requests), and
#     weft-bench's 16 B stream (bytes per write; the run is timed, so its
#     count is not fixed). uring submits its sends through the ring, so
#     strace sees tcp only.
#
# Certificates are made at run time by tests/tls/make-certs.sh in a
# temporary directory (never committed). Prints markdown tables.
# Usage: scripts/bench-tls.sh [BUILD_DIR] [RUNS]   (build/release, 5)
#   env BENCH_TLS_PARTS  the parts to run, e.g. "c" (default "abc")
#   env BENCH_TLS_SCALE  divides every round-trip and request count (1): a
#                        quick check that the script works, not a result
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
build=${1:-build/release}
runs=${2:-5}
parts=${BENCH_TLS_PARTS:-abc}
scale=${BENCH_TLS_SCALE:-1}
scripts/deps.sh
for p in openssl redis-cli redis-benchmark redis-server strace python3; do
  need "$p" "$p"
done
if [ ! -x "$build/samples/kv/weft-kv-server" ] ||
  [ ! -x "$build/samples/bench/weft-bench" ]; then
  quiet_configure "$build" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF
  quiet_build "$build" --target weft-kv-server weft-bench
fi
WB=$build/samples/bench/weft-bench
KV=$build/samples/kv/weft-kv-server
tmp=$(mktemp -d)
pids=()
stop_all() { # each server; under strace its child, then strace ends itself
  local p c kids
  for p in "${pids[@]}"; do
    kids=$(cat "/proc/$p/task/$p/children" 2>/dev/null || true)
    if [ -n "$kids" ]; then
      for c in $kids; do kill "$c" 2>/dev/null || true; done
    else
      kill "$p" 2>/dev/null || true
    fi
    wait "$p" 2>/dev/null || true
  done
  pids=()
}
trap 'stop_all; rm -rf "$tmp"' EXIT
tests/tls/make-certs.sh "$tmp/certs"
C=$tmp/certs
uring=()
if [ -f "$build/CMakeCache.txt" ] &&
  grep -q '^WEFT_WITH_URING:BOOL=ON' "$build/CMakeCache.txt"; then
  uring=(-S uring:20 -S uring+tls:20)
fi

commit=$(git rev-parse --short HEAD)
git diff --quiet HEAD -- . || commit="$commit, with changes not committed"
echo "commit: $commit"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"

# ---- a. weft-bench, and the cipher's speed on one core ----
part_a() {
speed() { # one `openssl speed` figure: AES-128-GCM, 16 KiB blocks, MB/s
  openssl speed -seconds 1 -bytes 16384 -evp aes-128-gcm 2>/dev/null |
    awk 'tolower($1) == "aes-128-gcm" { v = $NF; sub(/k$/, "", v); print v * 1000 / 1e6 }'
}
step "openssl speed (before)"
speeds=("$(speed)")
step "weft-bench: ${runs} repetitions, plaintext, +tls and raw-tls interleaved"
"$WB" -S tcp:20 -S tcp+tls:20 -S tcp+tls:0 "${uring[@]}" -S raw-tls-busy \
  -S raw-tls-block --tls-certs "$C" -p pingpong,stream -s 16,1M -r "$runs" \
  -n $((20000 / scale)) -w $((2000 / scale)) -t 0.5 \
  --no-progress -q --csv "$tmp/wb.csv" >/dev/null 2>"$tmp/wb.err"
grep 'TLS TLSv' "$tmp/wb.err" >&2 || true
step "openssl speed (after)"
speeds+=("$(speed)")

echo
echo "### a. weft-bench, plaintext vs +tls (busy_poll_us 20; medians of $runs)"
echo
python3 - "$tmp/wb.csv" "${speeds[@]}" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
aes = statistics.median(float(s) for s in sys.argv[2:] if s)
def get(cfg, pat, size, key):
    for r in rows:
        if r["config"] == cfg and r["pattern"] == pat and r["size"] == size:
            return float(r[key])
    return None
print("| transport | measure | plaintext | TLS | TLS / plaintext |")
print("|---|---|---:|---:|---:|")
for t in ("tcp", "uring"):
    plain, tls = f"{t} bp=20", f"{t}+tls bp=20"
    if get(plain, "pingpong", "16", "p50_us") is None:
        continue
    for pat, size, key, what in (("pingpong", "16", "p50_us", "16 B ping-pong p50, µs"),
                                 ("pingpong", "16", "p99_us", "16 B ping-pong p99, µs"),
                                 ("stream", "16", "mb_per_s", "16 B stream, MB/s"),
                                 ("stream", "1048576", "mb_per_s", "1 MiB stream, MB/s")):
        a, b = get(plain, pat, size, key), get(tls, pat, size, key)
        if a is None or b is None:
            continue
        print(f"| {t} | {what} | {a:,.1f} | {b:,.1f} | {b / a:.2f} |")
print()
print("weft +tls vs OpenSSL's own floor (raw-tls: SSL_read/SSL_write alone), "
      "16 B ping-pong p50 (target <= 1.1x):")
print()
print("| weft | µs | floor | µs | weft / floor |")
print("|---|---:|---|---:|---:|")
for weft, floor in (("tcp+tls bp=20", "raw-tls-busy"), ("uring+tls bp=20", "raw-tls-busy"),
                    ("tcp+tls bp=0", "raw-tls-block")):
    a, b = get(weft, "pingpong", "16", "p50_us"), get(floor, "pingpong", "16", "p50_us")
    if a is not None and b is not None:
        print(f"| {weft} | {a:,.1f} | {floor} | {b:,.1f} | {a / b:.2f} |")
mibs = get("tcp+tls bp=20", "stream", "1048576", "mb_per_s")
print()
print(f"openssl speed -evp aes-128-gcm, 16 KiB blocks, one core: {aes:,.0f} MB/s "
      f"(median of {len(sys.argv) - 2}: {', '.join(sys.argv[2:])})"
      + (f"; tcp+tls 1 MiB stream / that: {mibs / aes:.2f}" if mibs else ""))
PY
}

# ---- b. weft-kv-server and redis-server, plaintext and TLS ----
WPORT=6393 WTPORT=6394 RPORT=6395 RTPORT=6396
kv_start() { # weft-kv-server, both RESP listeners; extra arguments first
  # One loop, as redis-server has one thread for commands: with two, two
  # busy-poll windows on this 2-CPU machine would be counted against it.
  "$@" "$KV" -o loop.loops=1 -o kv.rpc_listen= \
    -o kv.resp_listen=127.0.0.1:$WPORT -o kv.tls_listen=127.0.0.1:$WTPORT \
    -o kv.tls_cert_file="$C/server.pem" -o kv.tls_key_file="$C/server.key" \
    -o kv.tls_auth_clients=no 2>"$tmp/kv.log" &
  pids+=($!)
}
redis_start() { # redis-server, port and tls-port; extra arguments first
  "$@" redis-server --port $RPORT --tls-port $RTPORT \
    --tls-cert-file "$C/server.pem" --tls-key-file "$C/server.key" \
    --tls-ca-cert-file "$C/ca.pem" --tls-auth-clients no --save "" \
    --appendonly no --daemonize no --loglevel warning >"$tmp/redis.log" 2>&1 &
  pids+=($!)
}
wait_port() { # PORT: up to 5 s for a listener
  for _ in $(seq 50); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "weft: nothing answers on port $1" >&2
  cat "$tmp/kv.log" "$tmp/redis.log" >&2
  exit 1
}
tls_args=(--tls --cacert "$C/ca.pem")

part_b() {
kv_start
redis_start
wait_port $WPORT
wait_port $RPORT
local wpid=${pids[0]} rpid=${pids[1]}
configs=("-P 1 -c 1 -n $((20000 / scale))" "-P 1 -c 50 -n $((100000 / scale))"
  "-P 16 -c 50 -n $((400000 / scale))")
targets=(weft weft+tls redis redis+tls)
for run in $(seq "$runs"); do
  for ci in "${!configs[@]}"; do
    step "redis-benchmark run $run/$runs: ${configs[$ci]}"
    for who in "${targets[@]}"; do
      args=()
      case $who in
        weft) port=$WPORT pid=$wpid ;;
        weft+tls) port=$WTPORT pid=$wpid args=("${tls_args[@]}") ;;
        redis) port=$RPORT pid=$rpid ;;
        redis+tls) port=$RTPORT pid=$rpid args=("${tls_args[@]}") ;;
      esac
      before=$(cpu_ticks "$pid")
      # shellcheck disable=SC2086
      redis-benchmark -p $port "${args[@]}" -t set,get -d 16 -r 100000 \
        ${configs[$ci]} --csv 2>/dev/null | tail -n +2 |
        sed "s/^/$who,$ci,$run,/" >>"$tmp/kv.csv"
      after=$(cpu_ticks "$pid")
      echo "$who,$ci,$run,$((after - before))" >>"$tmp/cpu.csv"
    done
  done
done
stop_all

echo
echo "### b. redis-benchmark -t set,get -d 16 -r 100000 (medians of $runs)"
echo
python3 - "$tmp/kv.csv" "$tmp/cpu.csv" "${configs[@]}" <<'PY'
import csv, os, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
cpu = list(csv.reader(open(sys.argv[2])))
configs = sys.argv[3:]
tick_us = 1e6 / os.sysconf("SC_CLK_TCK")
def med(who, ci, test, col):
    sel = [float(r[col]) for r in rows
           if r[0] == who and r[1] == str(ci) and r[3].strip('"') == test]
    return statistics.median(sel) if sel else float("nan")
def cpu_us(who, ci):
    # server CPU over a run (SET and GET: 2 x -n requests) per request, µs
    cfg = configs[ci].split()
    reqs = 2 * int(cfg[cfg.index("-n") + 1])
    sel = [int(r[3]) * tick_us / reqs for r in cpu if r[0] == who and r[1] == str(ci)]
    return statistics.median(sel) if sel else float("nan")
def ratio(a, b):
    return f"{a / b:.2f}" if b > 0 else "-"
print("| test | redis-benchmark | weft ops/s | weft+tls ops/s | weft tls/plain "
      "| redis ops/s | redis+tls ops/s | redis tls/plain | weft+tls / redis+tls "
      "| CPU µs/req weft+tls | CPU µs/req redis+tls | CPU weft+tls / redis+tls "
      "| p50 ms: weft, weft+tls, redis, redis+tls |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for ci, cfg in enumerate(configs):
    ct, cr = cpu_us("weft+tls", ci), cpu_us("redis+tls", ci)
    for test in ("SET", "GET"):
        w, wt, r, rt = (med(x, ci, test, 4) for x in ("weft", "weft+tls", "redis", "redis+tls"))
        p = ", ".join(f"{med(x, ci, test, 7):.3f}" for x in ("weft", "weft+tls", "redis", "redis+tls"))
        print(f"| {test} | {' '.join(cfg.split()[:4])} | {w:,.0f} | {wt:,.0f} | {wt / w:.2f} "
              f"| {r:,.0f} | {rt:,.0f} | {rt / r:.2f} | {wt / rt:.2f} "
              f"| {ct:.2f} | {cr:.2f} | {ratio(ct, cr)} | {p} |")
print()
print("Server CPU per request: utime + stime of the server process over each "
      "redis-benchmark run (SET and GET together; the same figure on both rows), "
      f"/proc/PID/stat in ticks of {tick_us:,.0f} µs, divided by its requests. "
      "Plaintext: " + "; ".join(
          f"{' '.join(c.split()[:4])}: weft {cpu_us('weft', i):.2f}, redis {cpu_us('redis', i):.2f}"
          for i, c in enumerate(configs)) + " µs/request.")
PY
}

# ---- c. socket writes of a fixed workload, plaintext vs TLS ----
# strace -y names each descriptor, so the loop's eventfd writes and the
# log's are left out: only writes to TCP sockets count.
count_writes() { # LOG: "calls bytes" of successful socket writes
  awk '/(write|writev|sendmsg)\([0-9]+<(TCP|TCPv6|socket):/ && / = [0-9]+$/ {
         n++; b += $NF } END { printf "%d %d\n", n, b }' "$1"
}
fixed=(-t set -d 16 -r 100000 -P 16 -c 10 -n 20000)
part_c() {
traced() { # LOG COMMAND...: COMMAND under strace (exec: the same pid)
  local log=$1
  shift
  exec strace -f -y -qq -e trace=write,writev,sendmsg -o "$log" "$@"
}
: >"$tmp/writes.txt"
for run in $(seq "$runs"); do
  step "socket writes, run $run/$runs"
  for who in weft redis; do
    for mode in plain tls; do
      if [ $who = weft ]; then
        kv_start traced "$tmp/$who-$mode.strace"
        port=$WPORT tport=$WTPORT
      else
        redis_start traced "$tmp/$who-$mode.strace"
        port=$RPORT tport=$RTPORT
      fi
      wait_port $port
      if [ $mode = plain ]; then
        redis-benchmark -p $port "${fixed[@]}" -q >/dev/null 2>&1
      else
        redis-benchmark -p $tport "${tls_args[@]}" "${fixed[@]}" -q \
          >/dev/null 2>&1
      fi
      stop_all
      # the readiness pings (one reply each) are in both logs alike
      echo "$who $mode $(count_writes "$tmp/$who-$mode.strace")" \
        >>"$tmp/writes.txt"
    done
  done
  for mode in plain tls; do
    setup=tcp:20
    [ $mode = tls ] && setup=tcp+tls:20
    (traced "$tmp/wb-$mode.strace" "$WB" -S "$setup" --tls-certs "$C" \
      -p stream -s 16 -r 1 -t 0.5 -q --no-progress >/dev/null 2>&1)
    echo "weft-bench $mode $(count_writes "$tmp/wb-$mode.strace")" \
      >>"$tmp/writes.txt"
  done
done

echo
echo "### c. socket writes (write/writev/sendmsg on TCP sockets, strace -f -y; medians of $runs)"
echo
python3 - "$tmp/writes.txt" "${fixed[*]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
def med(who, mode, i):
    return statistics.median(int(r[i]) for r in rows if r[0] == who and r[1] == mode)
print("| workload | plaintext writes | TLS writes | TLS / plaintext | "
      "plaintext bytes/write | TLS bytes/write |")
print("|---|---:|---:|---:|---:|---:|")
for who, what in (("weft", f"weft-kv-server, redis-benchmark {sys.argv[2]}"),
                  ("redis", f"redis-server, redis-benchmark {sys.argv[2]}"),
                  ("weft-bench", "weft-bench -p stream -s 16 (tcp, 0.5 s, under strace)")):
    pc, tc = med(who, "plain", 2), med(who, "tls", 2)
    pb, tb = med(who, "plain", 3), med(who, "tls", 3)
    fixed = who != "weft-bench"
    print(f"| {what} | {pc:,.0f} | {tc:,.0f} | {tc / pc:.2f}{'' if fixed else ' (timed: not comparable)'} "
          f"| {pb / max(pc, 1):,.0f} | {tb / max(tc, 1):,.0f} |")
PY
}

[[ $parts != *a* ]] || part_a
[[ $parts != *b* ]] || part_b
[[ $parts != *c* ]] || part_c
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
