#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the Soft-RoCE VM instead of guest-tests.sh when
# scripts/test-verbs-vm.sh runs with WEFT_VM_BENCH=1: weft-bench of build
# directory $1 over verbs, with plain sockets (raw-busy, raw-block) and tcp
# over the same dummy interface as peers measured in the same run. The
# markdown tables go to the console between the BENCH-BEGIN and BENCH-END
# lines, which the host script copies out. Numbers measured under qemu TCG
# emulation are a record, not a target.
#   env WEFT_VM_BENCH_ARGS  replaces the default weft-bench arguments
BUILD=$1
BENCH=$BUILD/samples/bench/weft-bench
[ -x "$BENCH" ] || { echo "no $BENCH (build the samples)"; exit 1; }
export WEFT_LEAK_DETECT=0
IP=${IP:-192.0.2.1}
ts() { echo "[t=$(cut -d' ' -f1 /proc/uptime)s] $*"; }
# Few round trips: under TCG a blocking round trip takes 1-8 ms depending
# on the host's load, so the default run takes 2 minutes (up to ~5 loaded).
ARGS=${WEFT_VM_BENCH_ARGS:-"-S raw-busy -S raw-block -S verbs:20 -S verbs:0 \
-S tcp:20 -S tcp:0 -p pingpong,rate -s 16,4K,64K -r 3 -n 300 -w 30 \
-t 0.5"}
ts "weft-bench $ARGS --host $IP"
# shellcheck disable=SC2086 # ARGS is a word list on purpose
"$BENCH" $ARGS --host "$IP" --no-progress --md /tmp/bench.md >/tmp/bench.out
rc=$?
cat /tmp/bench.out
echo "BENCH-BEGIN"
[ -s /tmp/bench.md ] && cat /tmp/bench.md
echo "BENCH-END"
ts "weft-bench rc=$rc"
exit $rc
