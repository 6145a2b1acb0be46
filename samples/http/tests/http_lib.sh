# SPDX-License-Identifier: Apache-2.0
# Sourced by the weft-http test scripts: starts the server and counts
# checks.
. "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib.sh" # weft's: log_match

# The address weft-http listens on: $host if the test set it before
# sourcing this file (test_http_transport.sh: rxe0's address in the
# Soft-RoCE VM, where RoCE has no loopback), else 127.0.0.1.
host=${host:-127.0.0.1}

# start_weft_http SERVER TRANSPORT LOG ARGS...: starts SERVER on
# TRANSPORT://$host:0 with one loop and ARGS, its stderr in LOG; sets
# $pid and $port. A transport this host cannot run (no RDMA device, no
# io_uring, ...) skips the test (77), its reason in $WEFT_TEST_SKIP_LOG.
start_weft_http() {
  local server=$1 transport=$2 log=$3
  shift 3
  : >"$log"
  "$server" -o loop.loops=1 -o "server.listen=$transport://$host:0" "$@" \
    2>"$log" &
  pid=$!
  # Up to 60 s for the port (a loaded machine, the VM's emulated CPU), no
  # longer than the server lives.
  port=$(log_match "$log" 's/.*listening on .*:\([0-9]*\)$/\1/p' 600 "$pid") &&
    return 0
  if grep -qi "not permitted\|blocked\|no usable\|not supported\|no RDMA" \
    "$log"; then
    echo "SKIP: weft-http cannot listen on the $transport transport here:"
    cat "$log"
    echo "SKIPPED $(basename "$0") over $transport: $(tail -n1 "$log" |
      sed 's/.*weft: [a-z]*: //')" >>"${WEFT_TEST_SKIP_LOG:-/dev/null}"
    exit 77
  fi
  echo "FAIL: weft-http did not start:"
  cat "$log"
  exit 1
}

passed=0 failed=0
# check NAME STATUS DETAIL: counts a check that passed when STATUS is 0.
check() {
  if [ "$2" = 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $1: $3"
  fi
}
