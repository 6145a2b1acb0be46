#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# redis-py (Debian's python3-redis) against weft-kv-server: starts two
# servers on free ports, one without a password and one with [kv]
# requirepass and an ACL user, and runs samples/kv/tests/kv_redis_py.py against them
# with Debian's python3 (/usr/bin/python3 sees python3-redis; a pyenv shim
# first on PATH would not).
# Usage: test_kv_redis_py.sh PATH/TO/weft-kv-server   (run by CTest)
set -u
server=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/kv_checks.sh"  # need_redis_py, scratch_dir
. "$here/kv_server.sh"  # start_resp_server
need_redis_py
scratch_dir

start_resp_server open
open_port=$port
start_resp_server auth -o kv.requirepass=s3cret -o kv.user=alice -o kv.user_password=apw
timeout 120 /usr/bin/python3 "$here/kv_redis_py.py" "$open_port" "$port"
