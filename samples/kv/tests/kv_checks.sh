# SPDX-License-Identifier: Apache-2.0
# Sourced by the KV service's shell tests: the counted checks (the shell
# side of kv_checks.py), the programs a test needs before it starts, and
# its scratch directory.

# need HINT PROGRAM...: fails the test (exit 1) on the first PROGRAM not
# on PATH; HINT says where it comes from (a package of scripts/deps.sh).
need() {
  local hint=$1 p
  shift
  for p in "$@"; do
    command -v "$p" >/dev/null || { echo "FAIL: $p is needed ($hint)"; exit 1; }
  done
}

# need_redis_py: fails the test (exit 1) when /usr/bin/python3 cannot
# import redis-py.
need_redis_py() {
  /usr/bin/python3 -c 'import redis' 2>/dev/null ||
    { echo "FAIL: redis-py is needed (apt-get install python3-redis)"; exit 1; }
}

# scratch_dir: sets $dir (a new scratch directory) and the array $pids,
# with an exit trap that kills and reaps every pid in $pids (the servers
# the test started) and removes $dir.
scratch_dir() {
  dir=$(mktemp -d)
  pids=()
  trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$dir"' EXIT
}

passed=0 failed=0
checkout() { # NAME EXPECTED OUTPUT: OUTPUT must equal EXPECTED
  if [ "$3" == "$2" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $1: got '$3', want '$2'"
  fi
}

# summary: prints the counts; its status is the test's (0: none failed).
summary() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
