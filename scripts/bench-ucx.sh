#!/usr/bin/env bash
# weft over UCX beside ucx_perftest, interleaved, median of N runs (default 5).
#   scripts/bench-ucx.sh [BUILD_DIR] [RUNS]
# Rows: weft-pingpong over ucx (tcp; shared memory with error_mode=none),
# ucx_perftest tag_lat / am_lat / stream_lat / tag_bw on loopback. perftest's
# *_lat figure is one-way (half the round trip): the script doubles it.
set -euo pipefail
BUILD=${1:-build-ucx}
RUNS=${2:-5}
PP="$BUILD/samples/bench/weft-pingpong"
PORT=13400
declare -A vals

perftest() { # TLS TEST SIZE -> median column (lat: us one-way; bw: MB/s)
  local tls=$1 test=$2 size=$3 port=$((PORT++))
  UCX_TLS=$tls ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  local out
  out=$(UCX_TLS=$tls timeout 60 ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
        -s "$size" -n 20000 -f 2>/dev/null | tail -1)
  wait "$srv" 2>/dev/null || true
  case $test in
    *_lat) echo "$out" | awk '{printf "%.3f", 2*$2}' ;;  # round trip, us
    *_bw) echo "$out" | awk '{print $6}' ;;              # MB/s average
  esac
}

weft() { # TLS MODE -> "p50_us msgs_per_s"
  local out
  out=$(UCX_TLS=$1 WEFT_TRANSPORT_UCX_ERROR_MODE=$2 timeout 120 "$PP" weft \
        -o transport.name=ucx -n 20000 -t 1)
  echo "$out" | sed -E 's/.*p50_us=([0-9.]+).*msgs_per_s=([0-9]+).*/\1 \2/'
}

add() { vals[$1]="${vals[$1]:-} $2"; }
for r in $(seq "$RUNS"); do
  read -r p m < <(weft tcp peer);      add weft_tcp_rtt "$p"; add weft_tcp_rate "$m"
  add perf_tcp_tag_rtt "$(perftest tcp tag_lat 16)"
  read -r p m < <(weft shm,tcp none);  add weft_shm_rtt "$p"; add weft_shm_rate "$m"
  add perf_shm_tag_rtt "$(perftest shm tag_lat 16)"
  add perf_shm_am_rtt "$(perftest shm ucp_am_lat 16)"
  add perf_shm_stream_rtt "$(perftest shm stream_lat 16)"
  add perf_tcp_am_rtt "$(perftest tcp ucp_am_lat 16)"
  add perf_tcp_stream_rtt "$(perftest tcp stream_lat 16)"
  add perf_shm_tag_bw "$(perftest shm tag_bw 65536)"
  add perf_tcp_tag_bw "$(perftest tcp tag_bw 65536)"
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "metric median (runs: values)"
for k in $(printf '%s\n' "${!vals[@]}" | sort); do
  echo "$k $(echo "${vals[$k]}" | median) (${vals[$k]# })"
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
