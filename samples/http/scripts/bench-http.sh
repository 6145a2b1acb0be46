#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-http's /plaintext beside nginx (nginx-light) and h2o (Debian's h2o)
# serving the same 13-byte body ("Hello, World!", text/plain), each server
# on one CPU with one worker/loop, wrk pinned to the other CPU: keep-alive
# and pipelined (depth 16, a wrk Lua script), RUNS interleaved runs
# (server order rotates per run), then a markdown table of medians: rate
# (min..max), ratios to the faster peer, p99 latency, and server CPU per
# request (utime + stime of the server process from /proc/PID/stat over
# the run, divided by the requests wrk counted).
#
# With TLS=1 the same over HTTPS: TLS 1.3 only at every server, the same
# EC P-256 certificate (made at run time by tests/tls/make-certs.sh in the
# scratch directory, never committed), records made in user space by
# OpenSSL everywhere (weft's tls.ktls stays off; nginx's KTLS option is not
# set); wrk speaks https with OpenSSL's default suites, so all three
# negotiate the same suite (printed, and checked to be the same). Before
# measuring, each server must answer curl -k over TLS 1.3 and refuse a
# client capped at TLS 1.2.
#
# Usage: samples/http/scripts/bench-http.sh [RUNS]   (default 5)
# Environment: WEFT_HTTP (the weft-http binary; default: build/release's,
#   built if missing), DURATION (s per run, 10), CONNS (wrk -c, 64),
#   SERVER_CPU (0), CLIENT_CPU (1), TLS (1 = HTTPS, see above; default 0),
#   MAX_LOAD (1-minute load average above which the script refuses to
#   measure, 0.5; FORCE=1 measures anyway and says so in the output),
#   ORDER (1 = load wrk-order.c into wrk in the keep-alive runs: each run's
#   line on stderr gains where the latency went (server and network, or
#   waiting in wrk's socket) and whether the server answered in the order
#   the requests arrived; see that file; default 0).
#
# The exact commands, per run and server (SCHEME https with TLS=1):
#   taskset -c $SERVER_CPU <server>            (started once, kept running)
#   taskset -c $CLIENT_CPU wrk -t1 -c$CONNS -d${DURATION}s --latency URL
#   taskset -c $CLIENT_CPU wrk -t1 -c$CONNS -d${DURATION}s --latency \
#     -s pipeline.lua URL -- 16
#
# The peers are configured as TechEmpower's nginx entry configures nginx
# (access log off, server_tokens off, sendfile and tcp_nopush off,
# tcp_nodelay on, keepalive_requests high enough that no connection is
# closed during a run, keepalive_disable none, one worker) and h2o as
# closely as its configuration allows (one thread, file.file: its mruby
# handler, the other way to answer a fixed body, costs more CPU per
# request).
#
# Why nginx and h2o gain little from pipelining (and weft much): each of
# them keeps every connection (64 accepts per run, no reconnects: strace
# -f -c -p PID) and answers all 16 requests of a batch, but writes each
# response with its own writev as soon as it is made, so a batch of 16
# requests (one TCP segment in) goes back as 16 TCP segments, each with
# TCP_NODELAY (ss -tin during a run: data_segs_out / data_segs_in = 16 for
# both, 1 for weft), and wrk acknowledges them with pure ACKs. On loopback
# a segment's cost (TCP output, the receiver's input run in the sender's
# softirq, waking wrk) falls on the sender, once per response whether
# pipelined or not. Pipelining spares the peers only the read side (one recvfrom per
# 16 requests instead of one per request; epoll_wait was already shared
# by 64 connections); weft gathers the responses of one read into one
# sendmsg (16 per write). We know of no nginx or h2o setting that batches
# responses across pipelined requests (nginx's postpone_output holds only output
# that is not the end of a response; tcp_nopush acts with sendfile only).
# So how much the peers' rate rises with pipelining depends on which side
# was the limit in keep-alive: where the server's CPU is (the first reading
# in docs/benchmarks.md), barely; where wrk is near its own limit (as issue
# 33 says of its own reading: nginx 96-101k keep-alive, 137-139k
# pipelined), more, because pipelining also cuts wrk's work per request;
# where both wait for a loaded machine's scheduler, most. Compare servers by
# their CPU per request, not by the rate ratio alone.
set -euo pipefail
cd "$(dirname "$0")/../../.."
. scripts/lib.sh
runs=${1:-5}
duration=${DURATION:-10}
conns=${CONNS:-64}
scpu=${SERVER_CPU:-0}
ccpu=${CLIENT_CPU:-1}
for tool in wrk nginx h2o taskset curl openssl; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || scripts/deps.sh
done
nginx=$(command -v nginx || echo /usr/sbin/nginx)
weft=${WEFT_HTTP:-build/release/samples/http/weft-http}
if [ ! -x "$weft" ]; then
  quiet_configure build/release -DCMAKE_BUILD_TYPE=Release \
    -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_SAMPLES=ON
  quiet_run "building weft-http" cmake --build build/release -j2 \
    --target weft-http
fi

load=$(cut -d' ' -f1 /proc/loadavg)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
if awk -v l="$load" -v m="${MAX_LOAD:-0.5}" 'BEGIN { exit !(l > m) }'; then
  if [ "${FORCE:-0}" != 1 ]; then
    echo "bench-http: the machine is not quiet (load $load > ${MAX_LOAD:-0.5}):"
    echo "figures would measure the other work, not the servers; not run."
    echo "(FORCE=1 runs anyway.)"
    exit 3
  fi
  echo "WARNING: FORCE=1 on a loaded machine (load $load): the figures are" \
    "not comparable with a quiet machine's"
fi

scratch_with_children

tls=${TLS:-0}
scheme=http
tag=""
if [ "$tls" = 1 ]; then
  scheme=https
  tag="+tls"
  tests/tls/make-certs.sh "$out/certs"
  cert=$out/certs/server.pem
  key=$out/certs/server.key
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# fetch PORT [curl options]: the body of /plaintext over $scheme (-k: the
# certificate is the test CA's; --http1.1: h2o would pick h2 by ALPN).
fetch() {
  local p=$1
  shift
  curl -s -k --http1.1 "$@" "$scheme://127.0.0.1:$p/plaintext"
}
wait_port() { # PORT
  for _ in $(seq 100); do
    fetch "$1" -o /dev/null && return 0
    sleep 0.1
  done
  echo "bench-http: nothing answers on port $1"; exit 1
}
# check_tls NAME PORT: NAME answers "Hello, World!" over TLS 1.3, refuses
# a client capped at 1.2; prints the suite it negotiates with OpenSSL's
# default client (wrk's).
check_tls() {
  local body suite
  body=$(fetch "$2" --tlsv1.3)
  [ "$body" = "Hello, World!" ] ||
    { echo "bench-http: $1 did not answer over TLS 1.3: '$body'" >&2; exit 1; }
  if fetch "$2" --tls-max 1.2 -o /dev/null; then
    echo "bench-http: $1 accepted TLS 1.2 (1.3 only was asked)" >&2
    exit 1
  fi
  suite=$(openssl s_client -connect "127.0.0.1:$2" -brief </dev/null 2>&1 |
    sed -n 's/^Ciphersuite: //p')
  echo "$1: TLS 1.3 only, $suite" >&2
  echo "$suite"
}

# --- the three servers, one CPU each, one worker/loop ---
labels=(weft nginx h2o)
declare -A port spid
port[weft]=$(free_port)
weft_tls=()
[ "$tls" = 1 ] && weft_tls=(-o http.tls=on -o "tls.cert_file=$cert"
  -o "tls.key_file=$key" -o tls.min_protocol=tls1.3 -o tls.ktls=off)
taskset -c "$scpu" "$weft" -o loop.loops=1 -o loop.pin=false \
  -o "server.listen=127.0.0.1:${port[weft]}" "${weft_tls[@]}" \
  2>"$out/weft.log" &
spid[weft]=$!; pids+=("$!")

# TechEmpower's nginx entry (frameworks/C/nginx there), one worker.
port[nginx]=$(free_port)
mkdir -p "$out/nginx"
nginx_listen="listen 127.0.0.1:${port[nginx]};"
[ "$tls" = 1 ] && nginx_listen="listen 127.0.0.1:${port[nginx]} ssl;
    ssl_certificate $cert;
    ssl_certificate_key $key;
    ssl_protocols TLSv1.3;"
cat >"$out/nginx/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
user root;
error_log $out/nginx/error.log error;
pid $out/nginx/nginx.pid;
events { worker_connections 4096; multi_accept off; }
http {
  access_log off;
  server_tokens off;
  msie_padding off;
  sendfile off;
  tcp_nopush off;
  tcp_nodelay on;
  keepalive_timeout 65;
  keepalive_disable none;
  keepalive_requests 100000000;
  client_body_temp_path $out/nginx/body;
  proxy_temp_path $out/nginx/proxy;
  fastcgi_temp_path $out/nginx/fastcgi;
  uwsgi_temp_path $out/nginx/uwsgi;
  scgi_temp_path $out/nginx/scgi;
  server {
    $nginx_listen
    location = /plaintext { default_type text/plain; return 200 "Hello, World!"; }
  }
}
CONF
taskset -c "$scpu" "$nginx" -c "$out/nginx/nginx.conf" -p "$out/nginx" &
spid[nginx]=$!; pids+=("$!")

# h2o: no limit on requests per connection to lift; OCSP stapling off
# (no responder for the test CA).
port[h2o]=$(free_port)
mkdir -p "$out/h2o"
printf 'Hello, World!' >"$out/h2o/plaintext.txt"
h2o_ssl=""
[ "$tls" = 1 ] && h2o_ssl="  ssl:
    certificate-file: $cert
    key-file: $key
    minimum-version: TLSv1.3
    ocsp-update-interval: 0"
cat >"$out/h2o/h2o.conf" <<CONF
user: root
listen:
  host: 127.0.0.1
  port: ${port[h2o]}
$h2o_ssl
num-threads: 1
pid-file: $out/h2o/h2o.pid
error-log: $out/h2o/error.log
hosts:
  default:
    paths:
      /plaintext:
        file.file: $out/h2o/plaintext.txt
CONF
taskset -c "$scpu" h2o -c "$out/h2o/h2o.conf" >"$out/h2o/out.log" 2>&1 &
spid[h2o]=$!; pids+=("$!")

for s in "${labels[@]}"; do wait_port "${port[$s]}"; done
if [ "$tls" = 1 ]; then
  suites=$(for s in "${labels[@]}"; do check_tls "$s" "${port[$s]}"; done |
    sort -u)
  [ -n "$suites" ] && [ "$(echo "$suites" | wc -l)" = 1 ] ||
    { echo "bench-http: the servers negotiate different suites"; exit 1; }
  echo "TLS 1.3, $suites at every server"
fi

cat >"$out/pipeline.lua" <<'LUA'
-- wrk: DEPTH copies of the request in one write (HTTP pipelining).
init = function(args)
  local depth = tonumber(args[1]) or 1
  local r = {}
  for i = 1, depth do r[i] = wrk.format(nil) end
  req = table.concat(r)
end
request = function() return req end
LUA

wrk_env=()
if [ "${ORDER:-0}" = 1 ]; then
  cc -O2 -shared -fPIC -o "$out/wrk-order.so" samples/http/scripts/wrk-order.c -ldl
  wrk_env=("LD_PRELOAD=$out/wrk-order.so")
fi

modes=(keepalive pipelined)
for run in $(seq "$runs"); do
  # rotate the order of the servers each run
  order=("${labels[@]:$((run % 3))}" "${labels[@]:0:$((run % 3))}")
  for mode in "${modes[@]}"; do
    for s in "${order[@]}"; do
      url="$scheme://127.0.0.1:${port[$s]}/plaintext"
      extra=()
      [ "$mode" = pipelined ] && extra=(-s "$out/pipeline.lua")
      before=$(cpu_ticks "${spid[$s]}")
      if [ "$mode" = pipelined ]; then
        taskset -c "$ccpu" wrk -t1 -c"$conns" -d"${duration}s" --latency \
          "${extra[@]}" "$url" -- 16 >"$out/wrk.txt" 2>&1
      else
        env "${wrk_env[@]}" taskset -c "$ccpu" wrk -t1 -c"$conns" \
          -d"${duration}s" --latency "$url" >"$out/wrk.txt" 2>&1
      fi
      after=$(cpu_ticks "${spid[$s]}")
      reqs=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$out/wrk.txt")
      rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$out/wrk.txt")
      p99=$(awk '$1 == "99%" { print $2 }' "$out/wrk.txt")
      errs=$(grep -c 'Non-2xx\|Socket errors' "$out/wrk.txt" || true)
      echo "$s,$mode$tag,$run,$reqs,$rps,$p99,$((after - before)),$errs" \
        >>"$out/all.csv"
      echo "run $run $mode$tag $s: $rps req/s, p99 $p99, errors $errs" \
        "$(sed -n 's/^order: //p' "$out/wrk.txt")" >&2
      [ "$errs" = 0 ] || grep 'Non-2xx\|Socket errors' "$out/wrk.txt" >&2
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out/all.csv" "$(getconf CLK_TCK)" <<'PY'
import csv, re, statistics, sys
rows = list(csv.reader(open(sys.argv[1])))
hz = int(sys.argv[2])
def ms(t):  # wrk's latency text: 1.23ms, 456.00us, 1.20s
    m = re.match(r"([0-9.]+)(us|ms|s)$", t)
    return float(m.group(1)) * {"us": 1e-3, "ms": 1, "s": 1e3}[m.group(2)]
def col(s, mode, f):
    return [f(r) for r in rows if r[0] == s and r[1] == mode]
print("| mode | server | requests/s median (min..max) | / faster peer "
      "| p99 ms (median) | server CPU µs/request | CPU / nginx | errors |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for mode in dict.fromkeys(r[1] for r in rows):  # in the order run
    med = {}
    for s in ("weft", "nginx", "h2o"):
        rps = col(s, mode, lambda r: float(r[4]))
        cpu = col(s, mode, lambda r: int(r[6]) * 1e6 / hz / max(int(r[3]), 1))
        p99 = col(s, mode, lambda r: ms(r[5]))
        errs = sum(col(s, mode, lambda r: int(r[7])))
        med[s] = (statistics.median(rps), min(rps), max(rps),
                  statistics.median(p99), statistics.median(cpu), errs)
    peer = max(med["nginx"][0], med["h2o"][0])
    for s, (m, lo, hi, p99, cpu, errs) in med.items():
        print(f"| {mode} | {s} | {m:.0f} ({lo:.0f}..{hi:.0f}) | "
              f"{m / peer:.2f} | {p99:.2f} | {cpu:.2f} | "
              f"{cpu / med['nginx'][4]:.2f} | {errs} |")
PY
