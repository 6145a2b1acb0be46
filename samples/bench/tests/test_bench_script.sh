#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# samples/bench/scripts/bench.sh changes no tracked file unless asked (--update-docs):
# its output paths (--dry-run), then a whole run in a scratch copy of the
# scripts and docs with a stub weft-bench that writes the tracked run's
# CSV/JSON/MD: by default docs/ stays byte for byte as it was and the
# results land in the build directory; with --update-docs samples/bench/docs/ and
# the weft-bench table of docs/benchmarks.md are rewritten. No benchmark runs.
# Usage: test_bench_script.sh SOURCE_DIR
set -u
src=$(cd "${1:?usage: test_bench_script.sh SOURCE_DIR}" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# A scratch tree: the scripts bench.sh runs, the docs it may write.
tree=$dir/tree
b=samples/bench
mkdir -p "$tree/scripts" "$tree/$b/scripts" "$tree/docs" "$tree/$b/docs" "$dir/fixture"
cp "$src"/scripts/{deps.sh,lib.sh} "$tree/scripts/"
cp "$src"/$b/scripts/{bench.sh,bench-plot.sh,bench-summary.py} "$tree/$b/scripts/"
cp "$src/docs/benchmarks.md" "$tree/docs/"
cp "$src"/$b/docs/* "$tree/$b/docs/"
cp "$src"/$b/docs/weft-bench.{csv,json,md} "$dir/fixture/"
stub=$dir/stub-build/samples/bench/weft-bench
mkdir -p "$(dirname "$stub")"
cat >"$stub" <<STUB
#!/usr/bin/env bash
# weft-bench's outputs, copied from the tracked run.
while [ \$# -gt 0 ]; do
  case \$1 in
    --csv) cp "$dir/fixture/weft-bench.csv" "\$2"; shift ;;
    --json) cp "$dir/fixture/weft-bench.json" "\$2"; shift ;;
    --md) cp "$dir/fixture/weft-bench.md" "\$2"; shift ;;
  esac
  shift
done
STUB
chmod +x "$stub"
sums() { (cd "$tree" && find docs $b/docs -type f | LC_ALL=C sort | xargs sha256sum); }
before=$(sums)

# Where it would write. Every run is in the scratch tree with the stub,
# so a bench.sh that ignored --dry-run could not build or touch the source.
run() { (cd "$tree" && WEFT_BENCH=$stub $b/scripts/bench.sh "$@"); }
paths=$(run --dry-run --quick)
case $paths in
  *"out=build-bench/bench-results"*"doc=none"*) ok ;;
  *) bad "default output: $paths" ;;
esac
paths=$(run --dry-run --out "$dir/o" build-x)
[ "$paths" = "out=$dir/o
doc=none" ] && ok || bad "--out: $paths"
paths=$(run --dry-run --update-docs)
[ "$paths" = "out=samples/bench/docs
doc=docs/benchmarks.md" ] && ok || bad "--update-docs: $paths"
if run --dry-run --update-docs --out x 2>/dev/null; then
  bad "--update-docs with --out accepted"
else ok; fi
if run --dry-run --bogus 2>/dev/null; then
  bad "an unknown option accepted"
else ok; fi

# By default: the results in the build directory, docs/ untouched.
if WEFT_BENCH_COMMIT=stubcommit run --quick "$dir/build" >"$dir/log" 2>&1; then
  ok
else
  bad "bench.sh --quick failed: $(cat "$dir/log")"
fi
[ "$(sums)" = "$before" ] && ok || bad "bench.sh --quick changed docs/ or $b/docs/"
for f in weft-bench.csv weft-bench.json weft-bench.md summary.md; do
  [ -s "$dir/build/bench-results/$f" ] && ok || bad "no $f in the build dir"
done
grep -q '^| tcp bp=20 | 11.5 (11.1..12.0) | 1.30x |' \
  "$dir/build/bench-results/summary.md" && ok || bad "summary's tcp row"
grep -q 'built at \*\*stubcommit\*\*' "$dir/build/bench-results/summary.md" &&
  ok || bad "summary does not name the commit"

# --update-docs: samples/bench/docs/ and the table between the markers.
if WEFT_BENCH_COMMIT=stubcommit run --quick --update-docs "$dir/build" \
  >"$dir/log" 2>&1; then
  ok
else
  bad "bench.sh --update-docs failed: $(cat "$dir/log")"
fi
grep -q 'built at \*\*stubcommit\*\*' "$tree/docs/benchmarks.md" && ok ||
  bad "--update-docs did not write the table"
[ ! -e "$tree/$b/docs/summary.md" ] && ok ||
  bad "--update-docs left summary.md in $b/docs"
[ "$(grep -c 'weft-bench:begin' "$tree/docs/benchmarks.md")" = 1 ] && ok ||
  bad "markers doubled"

echo "test_bench_script: $passed passed, $failed failed"
[ "$failed" = 0 ]
