#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# redis-py (Debian's python3-redis) against weft-kv-server: the commands of
# issue 31 (samples/kv/tests/kv_redis_compat.py), on a server of two loops so that
# WATCH is checked across loops.
# Usage: test_kv_redis_compat.sh PATH/TO/weft-kv-server   (run by CTest)
set -u
server=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/kv_checks.sh"  # need_redis_py, scratch_dir
. "$here/kv_server.sh"  # start_resp_server
need_redis_py
scratch_dir
start_resp_server server
timeout 120 /usr/bin/python3 "$here/kv_redis_compat.py" "$port"
rc=$?
kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server died:"; tail -20 "$dir/server.log"; exit 1; }
exit $rc
