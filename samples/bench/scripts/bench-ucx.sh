#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft over UCX beside ucx_perftest, interleaved, median of N runs (default 5).
#   samples/bench/scripts/bench-ucx.sh [BUILD_DIR] [RUNS]
# Rows: weft-bench's 16 B ping-pong and 1 x 64 message rate over ucx (tcp;
# shared memory with error_mode=none), weft-ucx-peer (UCX AM ping-pong set
# up as weft sets UCX up, no weft), ucx_perftest tag_lat / am_lat /
# stream_lat / tag_bw on loopback, and weft-bench's 64 KiB unidirectional
# stream over ucx beside tag_bw 64 KiB.
# perftest's *_lat figure is one-way (half the round trip): the script
# doubles it; its MB/s are 2^20 bytes: the script converts them to 10^6,
# weft-bench's unit.
# Shared-memory round trips are bimodal here: per process, the host runs
# the two pinned threads either on one physical core (~0.2 us round trips
# for ucx_perftest and weft-ucx-peer) or on two (~1 us). Medians over all
# runs then depend on how many runs landed in each mode, so the shm rows
# also get per-mode medians (split at the largest gap, if it is over 1.5x)
# and the shm ratios compare the two-core ("cross") medians, like with like.
set -euo pipefail
BUILD=${1:-build-ucx}
RUNS=${2:-5}
PEER="$BUILD/samples/bench/weft-ucx-peer"
BENCH="$BUILD/samples/bench/weft-bench"
# A fresh port per run: each helper runs in a command substitution (a
# subshell), so a counter would never advance, and a UCX listener cannot
# reuse a port still in TIME_WAIT.
new_port() { echo $((20000 + RANDOM % 20000)); }
declare -A vals

perftest() { # TLS TEST SIZE -> median column (lat: us one-way; bw: MB/s)
  local tls=$1 test=$2 size=$3 port=$(new_port)
  UCX_TLS=$tls ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  local out
  out=$(UCX_TLS=$tls timeout 60 ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
        -s "$size" -n 20000 -f 2>/dev/null | tail -1)
  wait "$srv" 2>/dev/null || true
  case $test in
    *_lat) echo "$out" | awk '{printf "%.3f", 2*$2}' ;;  # round trip, us
    # MB/s average; perftest's MB is 2^20 bytes: converted to 10^6
    *_bw) echo "$out" | awk '{printf "%.0f", $6 * 1.048576}' ;;
  esac
}

# TLS MODE CSV ARGS...: one weft-bench run over ucx, its CSV to file CSV.
bench_ucx() {
  UCX_TLS=$1 WEFT_TRANSPORT_UCX_ERROR_MODE=$2 timeout 120 "$BENCH" -S ucx \
    -r 1 -q --no-progress --csv "$3" "${@:4}" >/dev/null 2>&1 || true
}

# Column COLUMN of the PATTERN row of weft-bench's CSV FILE (empty if none).
csv_value() { # FILE PATTERN COLUMN
  awk -F, -v p="$2" -v c="$3" '
    NR == 1 {for (i = 1; i <= NF; i++) col[$i] = i; next}
    $col["pattern"] == p {print $col[c] + 0; exit}' "$1"
}

# weft-bench's 16 B ping-pong (20000 round trips after 2000 warm-up) and
# 16 B message rate with 64 in flight on one connection for 1 s.
weft() { # TLS MODE -> "p50_us msgs_per_s"
  local csv
  csv=$(mktemp)
  bench_ucx "$1" "$2" "$csv" -p pingpong,rate -s 16 --rate 1x64 \
    --rate-size 16 -n 20000 -w 2000 -t 1
  echo "$(csv_value "$csv" pingpong p50_us) $(csv_value "$csv" rate msgs_per_s)"
  rm -f "$csv"
}

# weft-bench's unidirectional stream of 64 KiB messages (-p stream), the
# peer of ucx_perftest tag_bw: payload MB/s (10^6 bytes).
stream() { # TLS MODE -> MB/s
  local csv
  csv=$(mktemp)
  bench_ucx "$1" "$2" "$csv" -p stream -s 65536
  csv_value "$csv" stream mb_per_s
  rm -f "$csv"
}

peer() { # TLS MODE -> p50 round trip, us
  UCX_TLS=$1 WEFT_TRANSPORT_UCX_ERROR_MODE=$2 timeout 60 "$PEER" -n 20000 \
    -p "$(new_port)" | sed -E 's/.*p50_us=([0-9.]+).*/\1/'
}

add() { vals[$1]="${vals[$1]:-} $2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
med() { echo "${vals[$1]}" | median; }
# Median of the upper (cross-core) or lower (same-core) mode: MODE KEY.
mode_med() {
  echo "${vals[$2]}" | tr ' ' '\n' | grep -v '^$' | sort -g | awk -v m="$1" '
    {a[NR] = $1}
    END {
      cut = NR; best = 1.5
      for (i = 1; i < NR; i++) if (a[i] > 0 && a[i+1] / a[i] > best) { best = a[i+1] / a[i]; cut = i }
      lo = 1; hi = cut
      if (m == "cross") { if (cut == NR) { lo = 1; hi = NR } else { lo = cut + 1; hi = NR } }
      else if (cut == NR) { print "-"; exit }
      print a[lo + int((hi - lo) / 2)]
    }'
}
for r in $(seq "$RUNS"); do
  read -r p m < <(weft tcp peer);      add weft_tcp_rtt "$p"; add weft_tcp_rate "$m"
  add perf_tcp_tag_rtt "$(perftest tcp tag_lat 16)"
  read -r p m < <(weft shm,tcp none);  add weft_shm_rtt "$p"; add weft_shm_rate "$m"
  add perf_shm_tag_rtt "$(perftest shm tag_lat 16)"
  add peer_shm_rtt "$(peer shm,tcp none)"
  add peer_tcp_rtt "$(peer tcp peer)"
  add perf_shm_am_rtt "$(perftest shm ucp_am_lat 16)"
  add perf_shm_stream_rtt "$(perftest shm stream_lat 16)"
  add perf_tcp_am_rtt "$(perftest tcp ucp_am_lat 16)"
  add perf_tcp_stream_rtt "$(perftest tcp stream_lat 16)"
  add perf_shm_tag_bw "$(perftest shm tag_bw 65536)"
  add perf_tcp_tag_bw "$(perftest tcp tag_bw 65536)"
  add weft_shm_stream_bw "$(stream shm,tcp none)"
  add weft_tcp_stream_bw "$(stream tcp peer)"
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "metric median (runs: values)"
for k in $(printf '%s\n' "${!vals[@]}" | sort); do
  echo "$k $(echo "${vals[$k]}" | median) (${vals[$k]# })"
done
for k in weft_shm_rtt peer_shm_rtt perf_shm_tag_rtt perf_shm_am_rtt; do
  echo "$k cross-core median $(mode_med cross $k), same-core median $(mode_med same $k)"
done
wx=$(mode_med cross weft_shm_rtt); px=$(mode_med cross perf_shm_tag_rtt)
qx=$(mode_med cross peer_shm_rtt)
echo "ratio weft_shm/perftest_shm_tag (cross-core) $(ratio "$wx" "$px")"
echo "ratio weft_shm/peer_shm (cross-core) $(ratio "$wx" "$qx")"
echo "ratio peer_shm/perftest_shm_tag (cross-core) $(ratio "$qx" "$px")"
echo "ratio weft_tcp/perftest_tcp_tag $(ratio "$(med weft_tcp_rtt)" "$(med perf_tcp_tag_rtt)")"
echo "ratio weft_tcp/peer_tcp $(ratio "$(med weft_tcp_rtt)" "$(med peer_tcp_rtt)")"
echo "ratio weft_shm_stream/perftest_shm_tag_bw $(ratio "$(med weft_shm_stream_bw)" "$(med perf_shm_tag_bw)")"
echo "ratio weft_tcp_stream/perftest_tcp_tag_bw $(ratio "$(med weft_tcp_stream_bw)" "$(med perf_tcp_tag_bw)")"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
