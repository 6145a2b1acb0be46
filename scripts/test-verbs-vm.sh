#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs weft's verbs tests on a real verbs stack: boots Debian's kernel in qemu
# with Soft-RoCE (rdma_rxe), shares this machine's / read-only into the VM
# and runs tests/verbs-vm/guest-tests.sh chrooted into it against a normal
# build directory. Exit 0 only when the tests passed inside the VM; a VM
# that cannot be built or booted is a failure, never a skip.
#
# Usage: scripts/test-verbs-vm.sh [BUILD_DIR]   (default build/default,
#        which must be configured with -DWEFT_WITH_VERBS=ON and built)
#   env WEFT_VM_DIR      kernel + initramfs cache (default build/verbs-vm)
#   env WEFT_VM_TESTS    tests to run: programs of BUILD_DIR/tests or
#                        samples/kv/tests, or ctest names of BUILD_DIR
#                        (default: the verbs ones, test_http_verbs among
#                        them; tests/verbs-vm/guest-tests.sh)
#   env WEFT_VM_TIMEOUT  seconds before the VM is killed (default 900)
#   env WEFT_VM_BENCH=1  run tests/verbs-vm/guest-bench.sh (weft-bench over
#                        verbs, tcp and raw sockets; a few minutes) instead
#                        of the tests; the tables land in $WEFT_VM_DIR/bench.md
#   env WEFT_VM_RUN=CMD  run the shell command CMD instead (from this
#                        repository's root, with WEFT_TEST_HOST and KV_HOST
#                        set to rxe0's address; tests/verbs-vm/guest-run.sh);
#                        its output is printed and lands in $WEFT_VM_DIR/run.out,
#                        the exit status is CMD's. E.g. the KV server's memory
#                        under clients that never read, over verbs:
#   WEFT_VM_RUN='samples/kv/scripts/bench-never-read.sh --clients 64 build/dev
#     10 verbs' scripts/test-verbs-vm.sh build/dev
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=$(cd "${1:-build/default}" && pwd)
VM=${WEFT_VM_DIR:-build/verbs-vm}
mkdir -p "$VM"
VM=$(cd "$VM" && pwd)

for p in qemu-system-x86_64 busybox cpio rdma depmod ibv_devices ibv_devinfo \
  ibv_rc_pingpong; do
  command -v "$p" >/dev/null || {
    echo "test-verbs-vm: FAIL: $p is missing (scripts/deps.sh installs it)" >&2
    exit 1
  }
done
# The kernel and initramfs are cached; rebuilt when the script changes.
if [ ! -s "$VM/initrd.gz" ] || [ ! -s "$VM/vmlinuz" ] ||
   [ tests/verbs-vm/build-initrd.sh -nt "$VM/initrd.gz" ]; then
  echo "=== verbs VM: building kernel + initramfs in $VM ==="
  bash tests/verbs-vm/build-initrd.sh "$VM" >"$VM/build.log" 2>&1 || {
    tail -20 "$VM/build.log" >&2
    echo "test-verbs-vm: FAIL: cannot build the VM image (see $VM/build.log)" >&2
    exit 1
  }
fi
# What the VM runs: the guest script with the build directory baked in (the
# kernel command line cannot carry arguments with spaces).
RUN="$VM/run-in-vm.sh"
GUEST=guest-tests.sh WHAT="the verbs tests"
ARGS="'$BUILD'"
[ "${WEFT_VM_BENCH:-0}" = 0 ] || GUEST=guest-bench.sh WHAT="weft-bench"
if [ -n "${WEFT_VM_RUN:-}" ]; then
  GUEST=guest-run.sh WHAT="WEFT_VM_RUN" ARGS="'$ROOT' '$VM/run-cmd.sh'"
  printf '%s\n' "$WEFT_VM_RUN" >"$VM/run-cmd.sh"
fi
{
  echo '#!/bin/sh'
  [ -z "${WEFT_VM_TESTS:-}" ] || echo "export WEFT_VM_TESTS='$WEFT_VM_TESTS'"
  [ -z "${WEFT_VM_BENCH_ARGS:-}" ] ||
    echo "export WEFT_VM_BENCH_ARGS='$WEFT_VM_BENCH_ARGS'"
  echo "exec sh '$ROOT/tests/verbs-vm/$GUEST' $ARGS"
} >"$RUN"
chmod +x "$RUN"
echo "=== verbs VM: running $WHAT from $BUILD ==="
rc=0
SHARE_DIR=/ VM_TIMEOUT=${WEFT_VM_TIMEOUT:-900} \
  VM_APPEND="rxe_chroot=/mnt/host rxe_test=$RUN" \
  bash tests/verbs-vm/run-vm.sh "$VM" || rc=$?
LOG=$(ls -t "$VM"/console-*.log | head -n1)
if ! grep -q 'rxe0 created' "$LOG"; then
  echo "test-verbs-vm: FAIL: the VM did not boot to a working rxe0 (see $LOG)" >&2
  exit 1
fi
if [ "$GUEST" = guest-bench.sh ]; then
  sed -n '/^BENCH-BEGIN/,/^BENCH-END/{/^BENCH-/d;p}' "$LOG" | tr -d '\r' \
    >"$VM/bench.md"
  echo "=== verbs VM: weft-bench tables in $VM/bench.md ==="
fi
if [ "$GUEST" = guest-run.sh ]; then
  sed -n '/^RUN-BEGIN/,/^RUN-END/{/^RUN-/d;p}' "$LOG" | tr -d '\r' \
    >"$VM/run.out"
  echo "=== verbs VM: the command's output (also in $VM/run.out) ==="
  cat "$VM/run.out"
fi
# The guest's summary line ("N passed, N failed, N skipped"), for
# scripts/test.sh.
sed -n 's/^VM-SUMMARY: //p' "$LOG" | tr -d '\r' >"$VM/summary.txt"
if [ $rc -ne 0 ]; then
  echo "test-verbs-vm: FAIL: $WHAT failed inside the VM (see $LOG)" >&2
  exit 1
fi
echo "=== verbs VM: passed ==="
