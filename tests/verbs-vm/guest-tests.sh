#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the Soft-RoCE VM, chrooted into the host's tree (see
# scripts/test-verbs-vm.sh): the verbs tests of build directory $1 (and the
# TLS suite over tcp, for kernel TLS), then a
# check of rxe's counters that no RNR NAK was sent or received (credits must
# keep every receive posted). Exit 0 only if everything passed.
# A test is a program of $1/tests or $1/samples/kv/tests, or else a ctest
# test of $1 (a script: test_http_verbs, weft-http and weft-http-load over
# verbs), run through ctest so its command is the one CMake registered.
BUILD=$1
[ -d "$BUILD/tests" ] || { echo "no build directory $BUILD"; exit 1; }
export WEFT_LEAK_DETECT=1 CK_DEFAULT_TIMEOUT=240 WEFT_TEST_TRANSPORT=verbs
# RoCE has no loopback: servers listen on the address rxe0 is bound to.
export WEFT_TEST_HOST=${IP:-192.0.2.1}
# The 100-client echo moves 2 GB at full scale: far too slow under TCG.
SCALE=${WEFT_TEST_SCALE:-0.05}
# test_verbs_scale's thousand connections are the point, not its bytes:
# full scale, a quarter (250) in a sanitizer build.
SCALE_CONNS=1
grep -q '^WEFT_SANITIZE:[A-Z]*=.' "$BUILD/CMakeCache.txt" 2>/dev/null &&
  SCALE_CONNS=0.25
ts() { echo "[t=$(cut -d' ' -f1 /proc/uptime)s] $*"; }
rc=0 passed=0 failed=0 skipped=""
# run_ctest NAME: ctest test NAME of $BUILD, its output shown; 77 if ctest
# skipped it, 1 if it failed.
run_ctest() {
  out=/tmp/ctest-$1.log
  ctest --test-dir "$BUILD" -R "^$1\$" --output-on-failure >"$out" 2>&1
  cat "$out"
  grep -q ' 0 tests failed out of 1$' "$out" || return 1
  ! grep -q '(Skipped)$' "$out" || return 77
}
# is_ctest NAME: NAME is a ctest test of $BUILD.
is_ctest() {
  ctest --test-dir "$BUILD" -N -R "^$1\$" 2>/dev/null | grep -q '^Total Tests: 1$'
}
# test_tls_tcp: the TLS suite over tcp on loopback, where Debian's kernel
# has the tls module, so ktls = on hands record encryption to the kernel.
TESTS=${WEFT_VM_TESTS:-test_channel_verbs test_hostile_verbs test_read_budget_verbs \
  test_verbs test_verbs_scale test_kv_verbs test_http_verbs test_tls_tcp}
unset WEFT_VM_TESTS # weft's programs would warn: it names no weft setting
for t in $TESTS; do
  ts "===== $t"
  bin=$BUILD/tests/$t # the framework's; the KV's are samples/kv's
  [ -x "$bin" ] || bin=$BUILD/samples/kv/tests/$t
  case $t in
    test_verbs_scale) export WEFT_TEST_SCALE=$SCALE_CONNS ;;
    *) export WEFT_TEST_SCALE=$SCALE ;;
  esac
  s=0
  if [ -x "$bin" ]; then
    case $t in
      test_tls_*) WEFT_TEST_TRANSPORT=${t#test_tls_} WEFT_TEST_HOST=127.0.0.1 \
        "$bin" || s=$? ;;
      *) "$bin" || s=$? ;;
    esac
  elif is_ctest "$t"; then
    run_ctest "$t" || s=$?
  else
    echo "missing $t: neither a program of $BUILD/tests nor a ctest test"; s=1
  fi
  case $s in
    0) passed=$((passed + 1)) ;;
    77) skipped="$skipped $t" ;; # every check skipped (tests/harness.h)
    *) failed=$((failed + 1)); rc=1 ;;
  esac
done
n_skipped=$(echo $skipped | wc -w)
echo "VM-SUMMARY: $passed passed, $failed failed, $n_skipped skipped${skipped:+:$skipped}"
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
for c in rcvd_rnr_err send_rnr_err retry_rnr_exceeded_err retry_exceeded_err; do
  v=$(cat "$C/$c" 2>/dev/null || echo "?")
  echo "rxe0 $c = $v"
  case $v in 0|"?") ;; *) [ "$c" = retry_exceeded_err ] || rc=1 ;; esac
done
ts "verbs tests rc=$rc"
exit $rc
