#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Real Redis clients against weft-kv-server: redis-cli sets, gets and
# deletes; every request gets its answer (an unknown command with CR/LF in
# its name, a protocol error, an oversized value, a huge SCAN pattern); the
# commands common clients send answer as Redis 7 does (MULTI/EXEC, TTLs,
# HELLO 3); AUTH with requirepass and an ACL user, from redis-cli and from
# weft-kv; protected mode refuses the machine's own non-loopback address;
# redis-benchmark runs a short load without errors.
# Usage: test_kv_redis.sh PATH/TO/weft-kv-server PATH/TO/weft-kv  (CTest)
set -u
server=$1 cli=$2
. "$(dirname "$0")/kv_checks.sh" # need, scratch_dir, checkout, summary
need "apt-get install redis-tools" redis-cli redis-benchmark
scratch_dir

. "$(dirname "$0")/kv_server.sh" # start_server
start_server main 127.0.0.1
main_pid=$pid

check() { # NAME EXPECTED ARGS...: redis-cli's output must equal EXPECTED
  local name=$1 want=$2; shift 2
  local got
  got=$(timeout 10 redis-cli -p "$port" "$@" 2>&1)
  if [ "$got" == "$want" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: redis-cli $*: got '$got', want '$want'"
  fi
}
check kv_redis_set_ok OK set greeting hello
check kv_redis_get_value hello get greeting
check kv_redis_exists 1 exists greeting
check kv_redis_del_counts 1 del greeting
check kv_redis_get_after_del "" get greeting
check kv_redis_incr 1 incr counter
check kv_redis_incr_again 2 incr counter
check kv_redis_set_text OK set word hello
check kv_redis_incr_not_integer "ERR value is not an integer or out of range" \
  incr word
check kv_redis_mset OK mset a 1 b 2
check kv_redis_mget "$(printf '1\n2\n')" mget a b missing
check kv_redis_ping PONG ping
check kv_redis_unknown \
  "ERR unknown command 'nosuch', with args beginning with: 'a' " nosuch a

# CR and LF in a command name: the error still comes (as spaces), and the
# next command gets its own reply, not this one's.
checkout kv_redis_unknown_crlf_then_ping \
  "$(printf "%s\n\nPONG" "ERR unknown command 'foo  bar', with args beginning with: 'x' ")" \
  "$(printf '"foo\\r\\nbar" x\nping\n' | timeout 10 redis-cli -p "$port" 2>&1)"
# A protocol error is answered, then the connection closes (cat sees EOF).
out=$(exec 3<>"/dev/tcp/127.0.0.1/$port" && printf '*x\r\n' >&3 &&
  timeout 10 cat <&3)
checkout kv_redis_protocol_error_answered \
  "$(printf -- '-ERR Protocol error: invalid multibulk length\r')" "$out"
# A value over max_value_bytes (1 MiB by default), sent whole by redis-cli.
checkout kv_redis_oversized_value_answered \
  "ERR Protocol error: invalid bulk length (2000000 bytes, maximum 1048576)" \
  "$(head -c 2000000 /dev/zero | tr '\0' v |
    timeout 10 redis-cli -p "$port" -x set big 2>&1)"
check kv_redis_oversized_not_stored 0 exists big
# SCAN with a 60 KB pattern over two 64 KiB keys: refused at once (the
# backtracking matcher took seconds per key; redis-cli gets 5 s). Its first
# 1024 bytes, within the limit, match both keys.
long=$(head -c 65535 /dev/zero | tr '\0' a)
check kv_redis_set_long_key1 OK set "1$long" v
check kv_redis_set_long_key2 OK set "2$long" v
pattern="*$(printf '[a]%.0s' $(seq 20000))b$(head -c 1438 /dev/zero | tr '\0' a)"
checkout kv_redis_scan_huge_pattern_refused \
  "ERR MATCH pattern too long, must be at most 1024 bytes" \
  "$(timeout 5 redis-cli -p "$port" scan 0 match "$pattern" count 1000 2>&1)"
checkout kv_redis_scan_pattern_at_limit \
  "$(printf '1%s\n2%s' "$long" "$long")" \
  "$(timeout 5 redis-cli -p "$port" --scan --pattern "${pattern:0:1024}" 2>&1 |
    sort)"
check kv_redis_flushall OK flushall
check kv_redis_dbsize 0 dbsize


# The commands common clients send, as redis-cli prints Redis 7's answers.
check kv_redis_decrby 5 decrby counter -5
check kv_redis_set_ttl OK set t v
check kv_redis_ttl_none -1 ttl t
check kv_redis_ttl_missing -2 ttl missing
check kv_redis_expire 1 expire t 100
ttl=$(timeout 10 redis-cli -p "$port" ttl t 2>&1)
checkout kv_redis_ttl yes "$([ "$ttl" -ge 95 ] 2>/dev/null && [ "$ttl" -le 100 ] && echo yes || echo "$ttl")"
check kv_redis_pexpire_gt 1 pexpire t 200000 gt
check kv_redis_expire_nx_xx \
  "ERR NX and XX, GT or LT options at the same time are not compatible" \
  expire t 5 nx xx
check kv_redis_persist 1 persist t
check kv_redis_pttl_persisted -1 pttl t
check kv_redis_type string type t
check kv_redis_type_none none type missing
check kv_redis_append 3 append t xy
check kv_redis_strlen 3 strlen t
check kv_redis_getdel vxy getdel t
check kv_redis_getdel_gone "" getdel t
check kv_redis_setnx 1 setnx n 1
check kv_redis_setnx_again 0 setnx n 2
check kv_redis_getset 1 getset n 2
check kv_redis_getex 2 getex n ex 50
check kv_redis_getex_ttl 50 ttl n
check kv_redis_getex_persist 2 getex n persist
check kv_redis_incrbyfloat 10.6 incrbyfloat f 10.6
check kv_redis_incrbyfloat_again 5010.60000000000000009 incrbyfloat f 5.0e3
check kv_redis_incrbyfloat_bad "ERR value is not a valid float" \
  incrbyfloat f abc
check kv_redis_rename OK rename n m
check kv_redis_rename_missing "ERR no such key" rename n q
check kv_redis_keys m keys 'm*'
check kv_redis_keys_pattern_too_long \
  "ERR KEYS pattern too long, must be at most 1024 bytes" \
  keys "$(head -c 1025 /dev/zero | tr '\0' '*')"
check kv_redis_set_exat_past OK set gone v exat 1
check kv_redis_set_exat_past_gone 0 exists gone
check kv_redis_client_setname OK client setname tester
check kv_redis_command_count 72 command count
checkout kv_redis_multi_exec "$(printf 'OK\nQUEUED\nQUEUED\nQUEUED\nOK\n2\n2')" \
  "$(printf 'multi\nset a 1\nincr a\nget a\nexec\n' | timeout 10 redis-cli -p "$port" 2>&1)"
checkout kv_redis_multi_execabort \
  "$(printf "OK\nERR wrong number of arguments for 'get' command\n\nQUEUED\nEXECABORT Transaction discarded because of previous errors.")" \
  "$(printf 'multi\nget\nset a 9\nexec\n' | timeout 10 redis-cli -p "$port" 2>&1)"
check kv_redis_multi_execabort_kept 2 get a
checkout kv_redis_multi_discard "$(printf 'OK\nQUEUED\nOK\n2')" \
  "$(printf 'multi\nset a 5\ndiscard\nget a\n' | timeout 10 redis-cli -p "$port" 2>&1)"
checkout kv_redis_resp3_hello \
  "$(printf 'server redis\nversion 7.0.0\nproto 3')" \
  "$(timeout 10 redis-cli -3 -p "$port" hello 3 2>&1 | head -3)"
checkout kv_redis_resp3_config_map "save " \
  "$(timeout 10 redis-cli -3 -p "$port" config get save 2>&1)"
checkout kv_redis_info_server_section "# Server:no clients" \
  "$(timeout 10 redis-cli -p "$port" info server | tr -d '\r' | head -1):$(
    timeout 10 redis-cli -p "$port" info server | grep -q '^# Clients' &&
      echo clients || echo no clients)"

out=$(timeout 120 redis-benchmark -p "$port" -t get,set -n 20000 -c 20 -q 2>&1)
if [ $? -eq 0 ] && [ "$(grep -c 'requests per second' <<<"$out")" -eq 2 ] &&
   ! grep -qi 'error' <<<"$out"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAIL: kv_redis_benchmark_runs_clean: $out"
fi
kill -TERM $main_pid && wait $main_pid
rc=$?
if [ $rc -eq 0 ]; then passed=$((passed + 1)); else
  failed=$((failed + 1)); echo "FAIL: kv_redis_server_stops_cleanly: exit $rc"
  cat "$dir/main.log"; fi

# AUTH: requirepass and one ACL user, from redis-cli and from weft-kv (its
# password from -a, WEFT_KV_PASSWORD, REDISCLI_AUTH or [kv] password).
start_server auth 127.0.0.1 -o kv.requirepass=s3cret -o kv.user=alice \
  -o kv.user_password=apw
noauth="NOAUTH Authentication required."
wrongpass="WRONGPASS invalid username-password pair or user is disabled."
check kv_redis_noauth "$noauth" get k
check kv_redis_noauth_ping "$noauth" ping
check kv_redis_noauth_unknown_first \
  "ERR unknown command 'nosuch', with args beginning with: " nosuch
check kv_redis_auth_wrong "$wrongpass" auth wrong
check kv_redis_auth_user_wrong "$wrongpass" auth alice s3cret
checkout kv_redis_auth_then_set "$(printf 'OK\nOK')" \
  "$(printf 'auth s3cret\nset k v\n' | timeout 10 redis-cli -p "$port" 2>&1)"
checkout kv_redis_auth_flag v \
  "$(timeout 10 redis-cli -p "$port" -a s3cret --no-auth-warning get k 2>&1)"
checkout kv_redis_auth_acl_user v \
  "$(timeout 10 redis-cli -p "$port" --user alice --pass apw --no-auth-warning get k 2>&1)"
checkout kv_redis_auth_env v \
  "$(REDISCLI_AUTH=s3cret timeout 10 redis-cli -p "$port" get k 2>&1)"
checkout kv_redis_auth_wrong_flag \
  "$(printf 'AUTH failed: %s\n%s' "$wrongpass" "$noauth")" \
  "$(timeout 10 redis-cli -p "$port" -a nope --no-auth-warning get k 2>&1)"
checkout kv_redis_hello_auth "server redis" \
  "$(timeout 10 redis-cli -p "$port" hello 3 auth alice apw 2>&1 | head -1)"
wkv() { timeout 10 "$cli" --connect "127.0.0.1:$rpc_port" "$@"; }
checkout kv_cli_noauth "$noauth" "$(wkv get k 2>&1)"
checkout kv_cli_password_flag v "$(wkv -a s3cret --no-auth-warning get k 2>&1)"
checkout kv_cli_password_env v "$(WEFT_KV_PASSWORD=s3cret wkv get k 2>&1)"
checkout kv_cli_rediscli_auth v "$(REDISCLI_AUTH=s3cret wkv get k 2>&1)"
checkout kv_cli_acl_user v "$(WEFT_KV_PASSWORD=apw wkv --user alice get k 2>&1)"
printf '[kv]\npassword = s3cret\n' >"$dir/client.ini"
checkout kv_cli_password_file v "$(wkv -c "$dir/client.ini" get k 2>&1)"
out=$(wkv -a nope --no-auth-warning get k 2>&1); rc=$?
checkout kv_cli_wrong_password_fails "1:yes:no" \
  "$rc:$(grep -q 'WRONGPASS' <<<"$out" && echo yes || echo no):$(
    grep -q nope <<<"$out" && echo yes || echo no)"
checkout kv_cli_password_warning yes \
  "$(wkv -a s3cret get k 2>&1 >/dev/null | grep -q '^Warning: Using a password' && echo yes || echo no)"
checkout kv_auth_no_password_in_log no \
  "$(grep -q -e s3cret -e apw "$dir/auth.log" && echo yes || echo no)"

# Protected mode: without a password, a client from the machine's own
# non-loopback address gets DENIED (and the server a log line); loopback
# clients are served. With requirepass it gets NOAUTH instead.
ip=$(ip -4 -o addr show scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
if [ -z "$ip" ]; then
  # Reported as a skip (scripts/test.sh's summary reads the log), not a pass.
  why="no IPv4 address outside the loopback network here"
  echo "SKIPPED test_kv_redis protected_mode: $why" | tee -a "${WEFT_TEST_SKIP_LOG:-/dev/null}"
else
  start_server protected 0.0.0.0
  check kv_redis_protected_loopback_served PONG ping
  out=$(timeout 10 redis-cli -h "$ip" -p "$port" ping 2>&1)
  checkout kv_redis_protected_denied \
    "DENIED weft-kv-server is running in protected mode because protected mode is enabled and no password is set for the default user." \
    "${out%% In this mode*}"
  grep -q "protected mode refused a RESP connection from $ip:" "$dir/protected.log"
  checkout kv_redis_protected_logged 0 "$?"
  checkout kv_cli_protected_denied yes \
    "$(timeout 10 "$cli" --connect "$ip:$rpc_port" ping 2>&1 | grep -q '^DENIED' && echo yes || echo no)"
  start_server protected_pw 0.0.0.0 -o kv.requirepass=pw
  checkout kv_redis_protected_password_noauth "$noauth" \
    "$(timeout 10 redis-cli -h "$ip" -p "$port" ping 2>&1)"
  start_server unprotected 0.0.0.0 -o kv.protected_mode=no
  checkout kv_redis_unprotected_served PONG \
    "$(timeout 10 redis-cli -h "$ip" -p "$port" ping 2>&1)"
fi
summary
