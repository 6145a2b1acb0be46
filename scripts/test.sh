#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds weft and runs every test: the normal build (warnings are errors),
# the layer and dependency checks, and an install check, then the same
# suite under ASan+UBSan, the cross-thread tests under TSan, the verbs tests
# in a Soft-RoCE VM, the README's main job (scripts/run.sh), bounded fuzzing
# of every decoder and peer-controlled header, and a clang-format check.
# Ends with one summary line per stage: passed, failed, skipped, and what
# was skipped with the reason.
# Usage: scripts/test.sh [--quick]   (--quick: the normal build only)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
scripts/deps.sh

JOBS=$(nproc)
SUMMARY=()
summary() {
  [ ${#SUMMARY[@]} -gt 0 ] || return 0
  echo "=== weft tests: summary ==="
  printf '%s\n' "${SUMMARY[@]}"
}
trap summary EXIT

# STAGE CTEST-LOG SKIP-LOG: "N passed, N failed, N skipped" and the skips.
ctest_summary() {
  local stage=$1 log=$2 skips=$3 total failed skipped
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n1)
  failed=$(sed -n 's/.*, \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -n1)
  skipped=$(grep -c '(Skipped)$' "$log" || true)
  total=${total:-0} failed=${failed:-0}
  SUMMARY+=("$stage: $((total - failed - skipped)) passed, $failed failed, $skipped skipped")
  [ "$skipped" -eq 0 ] || SUMMARY+=("  skipped programs: $(sed -n \
    's/^[[:space:]]*[0-9]* - \(.*\) (Skipped)$/\1/p' "$log" | tr '\n' ' ')")
  if [ -s "$skips" ]; then
    while IFS= read -r line; do
      SUMMARY+=("  ${line#SKIPPED }")
    done < <(sort -u "$skips")
  fi
}

run_suite() { # NAME CMAKE-ARGS... ; builds into build/NAME and runs ctest
  local name=$1 rc=0
  shift
  echo "=== weft tests: $name ==="
  # Every plugin on, whatever an older configure of this directory cached.
  quiet_configure "build/$name" -DWEFT_WERROR=ON -DWEFT_WITH_URING=ON \
    -DWEFT_WITH_UCX=ON -DWEFT_WITH_VERBS=ON -DWEFT_BUILD_SAMPLES=ON "$@"
  quiet_build "build/$name"
  rm -f "build/$name/skipped.log"
  WEFT_TEST_SKIP_LOG="$PWD/build/$name/skipped.log" \
    ctest --test-dir "build/$name" --output-on-failure -j"$JOBS" \
    ${CTEST_ARGS:-} 2>&1 | tee "build/$name/ctest.log" || rc=$?
  ctest_summary "$name" "build/$name/ctest.log" "build/$name/skipped.log"
  return $rc
}

run_suite default -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "=== weft tests: install, then build a user's program with pkg-config and CMake ==="
tests/consumer/check.sh build/default
SUMMARY+=("install: passed")
if [ "${1:-}" != "--quick" ]; then
  # Debug build type keeps asserts and the buffer leak detector on.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_suite asan-ubsan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
      -DWEFT_SANITIZE=address,undefined
  # TSan runs 5-15x slower: the 100-client echoes move a quarter of the
  # bytes (2.5 MiB per client), so two suites sharing 2 cores finish.
  # tests/tsan.supp: liburing's raw mmaps (see the file).
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp \
  WEFT_TEST_SCALE=0.25 CTEST_ARGS="-L threads" \
    run_suite tsan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
      -DWEFT_SANITIZE=thread
  # The verbs transport on a real verbs stack: Soft-RoCE in a qemu VM
  # running the normal build's verbs tests. Fails loudly if the VM cannot boot.
  echo "=== weft tests: verbs in a Soft-RoCE VM ==="
  scripts/test-verbs-vm.sh build/default
  SUMMARY+=("verbs VM: $(cat build/verbs-vm/summary.txt 2>/dev/null)")
  # The README's main job, as a user runs it: it must exit 0.
  echo "=== weft tests: the main job (scripts/run.sh) ==="
  scripts/run.sh
  SUMMARY+=("main job (scripts/run.sh): passed")
  # Fuzzing: each libFuzzer target for a bounded time under ASan+UBSan,
  # starting from its seed corpus (copied: findings stay out of the tree).
  # WEFT_FUZZ_SECONDS overrides the 20 s per target.
  echo "=== weft tests: fuzz ==="
  quiet_configure build/fuzz -DWEFT_WERROR=ON -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_COMPILER=clang -DWEFT_SANITIZE=address,undefined \
    -DWEFT_BUILD_FUZZ=ON -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_SAMPLES=OFF
  quiet_build build/fuzz
  targets=0
  for corpus in tests/fuzz/corpus/*/; do
    name=$(basename "$corpus")
    work="build/fuzz/corpus-$name"
    mkdir -p "$work" && cp "$corpus"* "$work/"
    rc=0
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "build/fuzz/tests/fuzz/fuzz_$name" -max_total_time="${WEFT_FUZZ_SECONDS:-20}" \
      -print_final_stats=1 "$work" >"$work.log" 2>&1 || rc=$?
    echo "fuzz_$name: $(grep -o 'number_of_executed_units: [0-9]*' "$work.log")"
    [ "$rc" -eq 0 ] || { tail -60 "$work.log"; echo "fuzz_$name failed"; exit 1; }
    targets=$((targets + 1))
  done
  SUMMARY+=("fuzz: $targets targets, ${WEFT_FUZZ_SECONDS:-20} s each, no finding")
else
  SUMMARY+=("asan-ubsan, tsan, verbs VM, main job, fuzz: not run (--quick)")
fi
# Style last, so a formatting slip does not hide test results.
echo "=== weft tests: clang-format (.clang-format) ==="
git ls-files '*.c' '*.h' | xargs clang-format --dry-run --Werror
SUMMARY+=("clang-format: clean")
echo "=== weft tests: all passed ==="
