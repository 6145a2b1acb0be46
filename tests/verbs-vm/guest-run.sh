#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs inside the Soft-RoCE VM instead of guest-tests.sh when
# scripts/test-verbs-vm.sh runs with WEFT_VM_RUN=COMMAND: the shell script
# $2 (COMMAND, written there by the host script: the kernel command line
# cannot carry it) from the repository's root $1, with WEFT_TEST_HOST and
# KV_HOST set to the address rxe0 is bound to (RoCE has no loopback). Its
# output goes to the console between the RUN-BEGIN and RUN-END lines,
# which the host script copies out. Exit status: the command's.
ROOT=$1
CMD=$2
cd "$ROOT" || exit 1
export WEFT_TEST_HOST=${IP:-192.0.2.1} KV_HOST=${IP:-192.0.2.1}
export WEFT_LEAK_DETECT=0
ts() { echo "[t=$(cut -d' ' -f1 /proc/uptime)s] $*"; }
ts "WEFT_VM_RUN: $(cat "$CMD")"
echo "RUN-BEGIN"
sh "$CMD" 2>&1
rc=$?
echo "RUN-END"
ts "WEFT_VM_RUN rc=$rc"
exit $rc
