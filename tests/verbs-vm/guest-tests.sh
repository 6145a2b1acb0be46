#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the Soft-RoCE VM, chrooted into the host's tree (see
# scripts/test-verbs-vm.sh): the verbs tests of build directory $1 (and the
# TLS suite over tcp, for kernel TLS), then a
# check of rxe's counters that no RNR NAK was sent or received (credits must
# keep every receive posted). Exit 0 only if everything passed.
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
# test_tls_tcp: the TLS suite over tcp on loopback, where Debian's kernel
# has the tls module, so ktls = on hands record encryption to the kernel.
for t in ${WEFT_VM_TESTS:-test_channel_verbs test_hostile_verbs test_read_budget_verbs test_verbs \
  test_verbs_scale test_kv_verbs test_tls_tcp}; do
  ts "===== $t"
  bin=$BUILD/tests/$t # the framework's; the KV's are samples/kv's
  [ -x "$bin" ] || bin=$BUILD/samples/kv/tests/$t
  if [ -x "$bin" ]; then
    s=0
    case $t in
      test_verbs_scale) export WEFT_TEST_SCALE=$SCALE_CONNS ;;
      *) export WEFT_TEST_SCALE=$SCALE ;;
    esac
    case $t in
      test_tls_*) WEFT_TEST_TRANSPORT=${t#test_tls_} WEFT_TEST_HOST=127.0.0.1 \
        "$bin" || s=$? ;;
      *) "$bin" || s=$? ;;
    esac
    case $s in
      0) passed=$((passed + 1)) ;;
      77) skipped="$skipped $t" ;; # every check skipped (tests/harness.h)
      *) failed=$((failed + 1)); rc=1 ;;
    esac
  else
    echo "missing $BUILD/tests/$t"; failed=$((failed + 1)); rc=1
  fi
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
