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
# Usage: samples/http/scripts/bench-http.sh [RUNS]   (default 5)
# Environment: WEFT_HTTP (the weft-http binary; default: build/release's,
#   built if missing), DURATION (s per run, 10), CONNS (wrk -c, 64),
#   SERVER_CPU (0), CLIENT_CPU (1), MAX_LOAD (1-minute load average above
#   which the script refuses to measure, 0.5; FORCE=1 measures anyway and
#   says so in the output).
#
# The exact commands, per run and server:
#   taskset -c $SERVER_CPU <server>            (started once, kept running)
#   taskset -c $CLIENT_CPU wrk -t1 -c$CONNS -d${DURATION}s --latency URL
#   taskset -c $CLIENT_CPU wrk -t1 -c$CONNS -d${DURATION}s --latency \
#     -s pipeline.lua URL -- 16
set -euo pipefail
cd "$(dirname "$0")/../../.."
. scripts/lib.sh
runs=${1:-5}
duration=${DURATION:-10}
conns=${CONNS:-64}
scpu=${SERVER_CPU:-0}
ccpu=${CLIENT_CPU:-1}
for tool in wrk nginx h2o taskset; do
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

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() { # PORT
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$1/plaintext" && return 0
    sleep 0.1
  done
  echo "bench-http: nothing answers on port $1"; exit 1
}

# --- the three servers, one CPU each, one worker/loop ---
labels=(weft nginx h2o)
declare -A port spid
port[weft]=$(free_port)
taskset -c "$scpu" "$weft" -o loop.loops=1 -o loop.pin=false \
  -o "server.listen=127.0.0.1:${port[weft]}" 2>"$out/weft.log" &
spid[weft]=$!; pids+=("$!")

port[nginx]=$(free_port)
mkdir -p "$out/nginx"
cat >"$out/nginx/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
user root;
error_log $out/nginx/error.log;
pid $out/nginx/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  client_body_temp_path $out/nginx/body;
  proxy_temp_path $out/nginx/proxy;
  fastcgi_temp_path $out/nginx/fastcgi;
  uwsgi_temp_path $out/nginx/uwsgi;
  scgi_temp_path $out/nginx/scgi;
  server {
    listen 127.0.0.1:${port[nginx]};
    location = /plaintext { default_type text/plain; return 200 "Hello, World!"; }
  }
}
CONF
taskset -c "$scpu" "$nginx" -c "$out/nginx/nginx.conf" -p "$out/nginx" &
spid[nginx]=$!; pids+=("$!")

port[h2o]=$(free_port)
mkdir -p "$out/h2o"
printf 'Hello, World!' >"$out/h2o/plaintext.txt"
cat >"$out/h2o/h2o.conf" <<CONF
user: root
listen:
  host: 127.0.0.1
  port: ${port[h2o]}
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

cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

modes=(keepalive pipelined)
for run in $(seq "$runs"); do
  # rotate the order of the servers each run
  order=("${labels[@]:$((run % 3))}" "${labels[@]:0:$((run % 3))}")
  for mode in "${modes[@]}"; do
    for s in "${order[@]}"; do
      url="http://127.0.0.1:${port[$s]}/plaintext"
      extra=()
      [ "$mode" = pipelined ] && extra=(-s "$out/pipeline.lua")
      before=$(cpu_ticks "${spid[$s]}")
      if [ "$mode" = pipelined ]; then
        taskset -c "$ccpu" wrk -t1 -c"$conns" -d"${duration}s" --latency \
          "${extra[@]}" "$url" -- 16 >"$out/wrk.txt" 2>&1
      else
        taskset -c "$ccpu" wrk -t1 -c"$conns" -d"${duration}s" --latency \
          "$url" >"$out/wrk.txt" 2>&1
      fi
      after=$(cpu_ticks "${spid[$s]}")
      reqs=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$out/wrk.txt")
      rps=$(sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$out/wrk.txt")
      p99=$(awk '$1 == "99%" { print $2 }' "$out/wrk.txt")
      errs=$(grep -c 'Non-2xx\|Socket errors' "$out/wrk.txt" || true)
      echo "$s,$mode,$run,$reqs,$rps,$p99,$((after - before)),$errs" \
        >>"$out/all.csv"
      echo "run $run $mode $s: $rps req/s, p99 $p99, errors $errs" >&2
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
for mode in ("keepalive", "pipelined"):
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
