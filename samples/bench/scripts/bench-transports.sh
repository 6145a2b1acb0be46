#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Transports side by side: 16 B ping-pong RTT (p50/p99) and pipelined 16 B
# message rate for weft over tcp and uring, beside the raw-socket floor, at
# busy_poll_us 20 and 0: weft-bench's pingpong pattern (N round trips after
# 2000 warm-up) and its rate pattern on one connection with WINDOW messages
# in flight (SECS seconds after 0.1 s of warm-up). weft-bench runs every
# configuration RUNS times (default 5, at most 32), interleaved round-robin
# so drifting machine load hits all alike; the table shows the median of
# each column (and the min..max of p50 in brackets).
# Usage: samples/bench/scripts/bench-transports.sh [BUILD_DIR]   (default build-bench)
set -euo pipefail
cd "$(dirname "$0")/../../.."
BUILD=${1:-build-bench}
RUNS=${RUNS:-5}
N=${N:-20000}      # round trips per run (after 2000 warm-up)
SECS=${SECS:-1}    # seconds of the pipelined phase per run
WINDOW=${WINDOW:-64}
if [ ! -x "$BUILD/samples/bench/weft-bench" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DWEFT_WITH_URING=ON \
    -DWEFT_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target weft-bench >/dev/null
fi
WB="$BUILD/samples/bench/weft-bench"

CONFIGS=(raw-busy tcp:20 uring:20 raw-block tcp:0 uring:0)
ARGS=()
for c in "${CONFIGS[@]}"; do ARGS+=(-S "$c"); done
CSV=$(mktemp)
trap 'rm -f "$CSV"' EXIT
"$WB" "${ARGS[@]}" -p pingpong,rate -s 16 --rate "1x$WINDOW" --rate-size 16 \
  -n "$N" -w 2000 -t "$SECS" -r "$RUNS" -q --no-progress --csv "$CSV"

echo "load average before/after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| configuration | p50 RTT µs (min..max) | p99 RTT µs | pipelined msgs/s |"
echo "|---|---|---|---|"
# One line per configuration, in -S order: its pingpong row and rate row.
awk -F, '
  NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
  $col["pattern"] == "pingpong" {
    order[++n] = $1
    name[$1] = $col["mode"] == "weft" ? sprintf("weft %s, busy_poll_us=%s", \
      $col["transport"], $col["busy_poll_us"]) : $1
    p50[$1] = sprintf("%.2f (%.2f..%.2f)", $col["p50_us"], \
      $col["p50_us_min"], $col["p50_us_max"])
    p99[$1] = $col["p99_us"]
  }
  $col["pattern"] == "rate" { mps[$1] = $col["msgs_per_s"] }
  END {
    for (k = 1; k <= n; k++)
      printf "| %s | %s | %.1f | %.0f |\n", name[order[k]], p50[order[k]],
        p99[order[k]], mps[order[k]]
  }' "$CSV"
