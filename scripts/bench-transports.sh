#!/usr/bin/env bash
# Transports side by side: 16 B ping-pong RTT (p50/p99) and pipelined 16 B
# message rate for weft over tcp and uring, beside the raw-socket floor, at
# busy_poll_us 20 and 0. Every configuration runs RUNS times (default 5),
# interleaved round-robin so drifting machine load hits all alike; the table
# shows the median of each column (and the min..max of p50 in brackets).
# Usage: scripts/bench-transports.sh [BUILD_DIR]   (default build-bench)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-bench}
RUNS=${RUNS:-5}
N=${N:-20000}      # round trips per run (after 2000 warm-up)
SECS=${SECS:-1}    # seconds of the pipelined phase per run
WINDOW=${WINDOW:-64}
if [ ! -x "$BUILD/samples/bench/weft-pingpong" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DWEFT_WITH_URING=ON \
    -DWEFT_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target weft-pingpong >/dev/null
fi
PP="$BUILD/samples/bench/weft-pingpong"

CONFIGS=(
  "raw-busy"
  "weft -o transport.name=tcp -o loop.busy_poll_us=20"
  "weft -o transport.name=uring -o loop.busy_poll_us=20"
  "raw-block"
  "weft -o transport.name=tcp -o loop.busy_poll_us=0"
  "weft -o transport.name=uring -o loop.busy_poll_us=0"
)
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for r in $(seq "$RUNS"); do
  for i in "${!CONFIGS[@]}"; do
    # shellcheck disable=SC2086
    line=$($PP ${CONFIGS[$i]} -n "$N" -t "$SECS" -w "$WINDOW")
    echo "$i $line" >>"$OUT"
  done
done

echo "load average before/after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| configuration | p50 RTT µs (min..max) | p99 RTT µs | pipelined msgs/s |"
echo "|---|---|---|---|"
for i in "${!CONFIGS[@]}"; do
  awk -v i="$i" -v name="${CONFIGS[$i]}" '
    function med(a, n,   k, j, t) {
      for (k = 1; k <= n; k++) for (j = k + 1; j <= n; j++)
        if (a[j] < a[k]) { t = a[k]; a[k] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    $1 == i {
      n++
      for (f = 2; f <= NF; f++) { split($f, kv, "="); v[kv[1]] = kv[2] }
      p50[n] = v["p50_us"]; p99[n] = v["p99_us"]; mps[n] = v["msgs_per_s"]
      if (n == 1 || p50[n] < lo) lo = p50[n]
      if (n == 1 || p50[n] > hi) hi = p50[n]
    }
    END {
      sub(/ -o /, " ", name); gsub(/-o /, "", name)
      printf "| %s | %.2f (%.2f..%.2f) | %.1f | %.0f |\n", name, med(p50, n),
        lo, hi, med(p99, n), med(mps, n)
    }' "$OUT"
done
