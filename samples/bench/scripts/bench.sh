#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The transport benchmarks in one command: builds weft-bench (Release),
# runs every pattern over every transport built here beside the raw-socket
# floors, in one process, repetitions interleaved; writes weft-bench.csv,
# .json and .md (every table), the charts (*.png) and summary.md (the 16 B
# and 1 MiB figures per setup, with the commit measured:
# samples/bench/scripts/bench-summary.py) into OUT_DIR.
#
#   samples/bench/scripts/bench.sh [--quick] [--out OUT_DIR | --update-docs] [BUILD_DIR]
#
# BUILD_DIR defaults to build-bench, OUT_DIR to BUILD_DIR/bench-results: by
# default no tracked file changes. --update-docs writes into samples/bench/docs/
# instead and puts summary.md between the weft-bench markers of
# docs/benchmarks.md (the reference page's weft-bench table).
# --dry-run prints where it would write and stops.
#
# About 10 minutes on a 2-core machine; --quick (fewer sizes, repetitions
# and round trips) about 2. UCX runs over tcp
# (UCX_TLS=tcp; shared memory needs a process of its own, docs/transports/ucx.md).
# Extra weft-bench flags: WEFT_BENCH_ARGS="..."; a prebuilt binary:
# WEFT_BENCH=path (see below).
set -euo pipefail
cd "$(dirname "$0")/../../.."
QUICK=0 UPDATE=0 DRY=0
BUILD=build-bench
OUT=
usage() { sed -n '10,16p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    --update-docs) UPDATE=1 ;;
    --dry-run) DRY=1 ;;
    --out)
      [ $# -ge 2 ] || { echo "bench.sh: --out needs a directory" >&2; exit 2; }
      OUT=$2
      shift
      ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "bench.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    *) BUILD=$1 ;;
  esac
  shift
done
DOC=
if [ "$UPDATE" = 1 ]; then
  [ -z "$OUT" ] || {
    echo "bench.sh: --out and --update-docs exclude each other" >&2
    exit 2
  }
  OUT=samples/bench/docs
  DOC=docs/benchmarks.md
fi
[ -n "$OUT" ] || OUT=$BUILD/bench-results
if [ "$DRY" = 1 ]; then
  echo "out=$OUT"
  echo "doc=${DOC:-none}"
  exit 0
fi

scripts/deps.sh

# WEFT_BENCH=path/to/weft-bench runs a binary built elsewhere (e.g. from a
# clean checkout while the tree is being edited); BUILD_DIR is then only
# read for which transports it was built with (its CMakeCache.txt).
if [ -n "${WEFT_BENCH:-}" ]; then
  WB=$WEFT_BENCH
  BUILD=$(dirname "$(dirname "$(dirname "$WB")")")
else
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DWEFT_BUILD_TESTS=OFF \
    >/dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target weft-bench >/dev/null
  WB="$BUILD/samples/bench/weft-bench"
fi
# The commit the figures are from (WEFT_BENCH_COMMIT for a binary built
# elsewhere): the reference page names it beside every figure.
COMMIT=${WEFT_BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [ -z "${WEFT_BENCH_COMMIT:-}" ] &&
  [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  COMMIT="$COMMIT with uncommitted changes"
fi

# Transports: tcp always; uring and ucx when built and working here.
CONFIGS=(-S raw-busy -S raw-block -S tcp:20 -S tcp:0)
export UCX_TLS=${UCX_TLS:-tcp}
for t in uring ucx; do
  if grep -q "^WEFT_WITH_${t^^}:BOOL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null &&
    timeout 60 "$WB" -S "$t:20" -p pingpong -s 16 -n 10 -w 0 -r 1 -q \
      --no-progress >/dev/null 2>&1; then
    # (weft-bench runs a ucx server in a process of its own: UCX 1.13
    # aborts a process that opens and closes connections on several
    # workers at once, docs/transports/ucx.md.)
    CONFIGS+=(-S "$t:20" -S "$t:0")
  else
    echo "bench.sh: $t not built or not working here, skipped" >&2
  fi
done

if [ "$QUICK" = 1 ]; then
  RUN=(-s "16,4K,1M" -r 2 -n 5000 -w 500 -t 0.2 --idle-seconds 1)
else
  RUN=(-s "16,256,4K,64K,1M" -r 3 -n 20000 -w 2000 -t 0.4 --idle-seconds 2)
fi
mkdir -p "$OUT"
# shellcheck disable=SC2086
"$WB" "${CONFIGS[@]}" "${RUN[@]}" --progress ${WEFT_BENCH_ARGS:-} \
  --csv "$OUT/weft-bench.csv" --json "$OUT/weft-bench.json" \
  --md "$OUT/weft-bench.md"
python3 -m json.tool "$OUT/weft-bench.json" >/dev/null
samples/bench/scripts/bench-plot.sh "$OUT/weft-bench.csv" "$OUT"
# summary.md beside the data; with --update-docs only in the page.
SUMMARY=$OUT/summary.md
if [ -n "$DOC" ]; then
  SUMMARY=$(mktemp)
  trap 'rm -f "$SUMMARY"' EXIT
fi
# shellcheck disable=SC2046
samples/bench/scripts/bench-summary.py "$OUT/weft-bench.csv" "$OUT/weft-bench.json" \
  "$COMMIT" $([ "$QUICK" = 1 ] && echo --quick) >"$SUMMARY"

if [ -z "$DOC" ]; then
  echo "bench.sh: wrote $OUT/ (summary.md: the table of docs/benchmarks.md;" \
    "--update-docs writes samples/bench/docs/ and that table)"
  exit 0
fi
# The generated table of docs/benchmarks.md: between the markers.
BEGIN='<!-- weft-bench:begin -->'
END='<!-- weft-bench:end -->'
grep -qF "$BEGIN" "$DOC" && grep -qF "$END" "$DOC" || {
  echo "bench.sh: $DOC has no $BEGIN ... $END markers" >&2
  exit 1
}
awk -v b="$BEGIN" -v e="$END" -v f="$SUMMARY" '
  $0 == b { print; while ((getline line < f) > 0) print line; skip = 1; next }
  $0 == e { skip = 0 }
  !skip' "$DOC" >"$DOC.tmp"
mv "$DOC.tmp" "$DOC"
echo "bench.sh: wrote $OUT/ and the weft-bench table of $DOC"
