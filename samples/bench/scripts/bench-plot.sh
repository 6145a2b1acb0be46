#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Charts from weft-bench's CSV (gnuplot, Debian's gnuplot-nox): one line per
# configuration (transport and busy-poll window, raw floors dashed).
#   samples/bench/scripts/bench-plot.sh CSV OUT_DIR
# Writes OUT_DIR/pingpong-p50.png, pingpong-p99.png (round trip vs size),
# stream.png and bidir.png (payload MB/s vs size). A chart whose pattern is
# not in the CSV is skipped.
set -euo pipefail
CSV=${1:?usage: bench-plot.sh CSV OUT_DIR}
OUT=${2:?usage: bench-plot.sh CSV OUT_DIR}
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Column numbers from the header, so the CSV may gain columns.
col() { head -1 "$CSV" | tr ',' '\n' | grep -nx "$1" | cut -d: -f1; }

# One data file per configuration: size, value, min, max. Labels carry no
# commas (weft-bench makes them), so a plain split suffices here.
split_pattern() { # PATTERN METRIC -> $TMP/PATTERN-METRIC/<n>.dat, names
  local dir="$TMP/$1-$2" c
  c=$(col "$2")
  mkdir -p "$dir"
  awk -F, -v p="$1" -v c="$c" -v dir="$dir" '
    NR > 1 && $5 == p && $c != "" {
      if (!($1 in idx)) { idx[$1] = ++n; print $1 > (dir "/names") }
      print $6, $c, $(c + 1), $(c + 2) > (dir "/" idx[$1] ".dat")
    }' "$CSV"
  [ -s "$dir/names" ]
}

# PATTERN METRIC PNG TITLE YLABEL
chart() {
  local dir="$TMP/$1-$2"
  split_pattern "$1" "$2" || return 0
  local plots="" i=0 name dash
  while IFS= read -r name; do
    i=$((i + 1))
    case $name in raw-*) dash="dt 2 lw 2" ;; *) dash="dt 1 lw 2" ;; esac
    plots+="${plots:+, }'$dir/$i.dat' using 1:2:3:4 with yerrorlines $dash"
    plots+=" lc $i pt $((i % 7 + 1)) title '$name'"
  done <"$dir/names"
  gnuplot <<EOF
set terminal pngcairo size 960,600 noenhanced font "sans,10"
set output '$OUT/$3'
set title '$4 (median, bars min..max of the repetitions)'
set logscale x 2
set logscale y 10
set xlabel 'message size, bytes'
set ylabel '$5'
set xtics ("16 B" 16, "64 B" 64, "256 B" 256, "1 KiB" 1024, "4 KiB" 4096, \
  "16 KiB" 16384, "64 KiB" 65536, "256 KiB" 262144, "1 MiB" 1048576)
set grid xtics ytics mytics
set key outside right top
plot $plots
EOF
}

chart pingpong p50_us pingpong-p50.png "Ping-pong round trip p50" "microseconds"
chart pingpong p99_us pingpong-p99.png "Ping-pong round trip p99" "microseconds"
chart stream mb_per_s stream.png "Unidirectional throughput" "payload MB/s"
chart bidir mb_per_s bidir.png "Bidirectional throughput (echo)" \
  "payload MB/s, both directions"
