#!/usr/bin/env bash
# Builds weft and runs every test: the normal build (warnings are errors), then
# the same suite under ASan+UBSan, then the cross-thread tests under TSan.
# Usage: scripts/test.sh [--quick]   (--quick: the normal build only)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

JOBS=$(nproc)
echo "=== weft tests: clang-format (.clang-format) ==="
git ls-files '*.c' '*.h' | xargs clang-format --dry-run --Werror

run_suite() { # NAME CMAKE-ARGS... ; builds into build/NAME and runs ctest
  local name=$1; shift
  echo "=== weft tests: $name ==="
  cmake -S . -B "build/$name" -DWEFT_WERROR=ON "$@" >/dev/null
  cmake --build "build/$name" -j"$JOBS" >/dev/null
  ctest --test-dir "build/$name" --output-on-failure -j"$JOBS" ${CTEST_ARGS:-}
}

run_suite default -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "=== weft tests: install, then build a user's program with pkg-config and CMake ==="
tests/consumer/check.sh build/default
if [ "${1:-}" != "--quick" ]; then
  # Debug build type keeps asserts and the buffer leak detector on.
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_suite asan-ubsan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
      -DWEFT_SANITIZE=address,undefined
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  CTEST_ARGS="-L threads" \
    run_suite tsan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
      -DWEFT_SANITIZE=thread
fi
echo "=== weft tests: all passed ==="
