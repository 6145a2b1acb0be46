# SPDX-License-Identifier: Apache-2.0
# Sourced by the weft-http test scripts: starts the server and counts
# checks.
. "$(dirname "${BASH_SOURCE[0]}")/../../../scripts/lib.sh" # weft's: log_match

# start_weft_http SERVER TRANSPORT LOG ARGS...: starts SERVER on
# TRANSPORT://127.0.0.1:0 with one loop and ARGS, its stderr in LOG; sets
# $pid and $port. A transport this host cannot run skips the test (77).
start_weft_http() {
  local server=$1 transport=$2 log=$3
  shift 3
  : >"$log"
  "$server" -o loop.loops=1 -o "server.listen=$transport://127.0.0.1:0" "$@" \
    2>"$log" &
  pid=$!
  port=$(log_match "$log" 's/.*listening on .*:\([0-9]*\)$/\1/p' 100) &&
    return 0
  if grep -qi "not permitted\|blocked\|no usable\|not supported" "$log"; then
    echo "SKIP: weft-http cannot listen on the $transport transport here:"
    cat "$log"
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
