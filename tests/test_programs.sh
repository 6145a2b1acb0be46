#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every weft program answers --help the same way (exit 0: usage, every key
# it reads with its default, examples), answers --version and -V with
# "<prog> (weft) VERSION" (exit 0), and reports a bad -o key in the same
# form. Arguments: VERSION_H PROGRAM_PATH[,EXTRA_ARGS] ..., VERSION_H being
# the generated weft/version.h (the version expected), EXTRA_ARGS
# (separated by ':') what the program needs besides options (a mode, a
# command).
set -uo pipefail
. "$(dirname "$0")/../scripts/lib.sh" # log_match
version=$(sed -n 's/^#define WEFT_VERSION_STRING "\(.*\)"$/\1/p' "$1")
shift
[ -n "$version" ] || { echo "FAIL: no WEFT_VERSION_STRING in the header"; exit 1; }
fail=0
bad() { echo "FAIL: $*"; fail=1; }

for spec in "$@"; do
  path=${spec%%,*}
  extra=()
  [ "$spec" = "$path" ] || IFS=: read -r -a extra <<<"${spec#*,}"
  prog=$(basename "$path")

  out=$("$path" --help 2>&1); rc=$?
  [ $rc -eq 0 ] || bad "$prog --help exited $rc"
  grep -q "^usage: $prog " <<<"$out" || bad "$prog --help: no usage line"
  grep -q '^busy_poll_us = 20$' <<<"$out" &&
    grep -q '^pool_retain_bytes = 4194304$' <<<"$out" ||
    bad "$prog --help: the [loop] keys with their defaults are missing"
  [ "$(sed -n '/^Examples:/,$p' <<<"$out" | grep -c "^  $prog")" -ge 2 ] ||
    bad "$prog --help: fewer than two examples"
  grep -q '^  -V, --version ' <<<"$out" || bad "$prog --help: no --version"

  for flag in --version -V; do
    out=$("$path" $flag 2>&1); rc=$?
    [ $rc -eq 0 ] || bad "$prog $flag exited $rc"
    [ "${out%%$'\n'*}" = "$prog (weft) $version" ] ||
      bad "$prog $flag said '${out%%$'\n'*}', expected '$prog (weft) $version'"
  done

  # A section with a dot: the key is what follows the last dot.
  err=$("$path" -o a.b.c=v "${extra[@]}" 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || bad "$prog -o a.b.c=v exited $rc, expected 2"
  want="$prog: -o a.b.c=v: unknown section [a.b]; valid sections: loop, transport, server, client"
  [ "${err:0:${#want}}" = "$want" ] ||
    bad "$prog -o a.b.c=v said: ${err%%$'\n'*}"

  err=$("$path" -o loop.loops=many "${extra[@]}" 2>&1 >/dev/null); rc=$?
  want="$prog: -o loop.loops=many: [loop] loops = \"many\": expected an integer from 0 to 1024"
  [ $rc -eq 2 ] && [ "${err:0:${#want}}" = "$want" ] ||
    bad "$prog -o loop.loops=many (exit $rc) said: ${err%%$'\n'*}"

  # A misspelled WEFT_* variable and a WEFT_LOG_LEVEL that is no level are
  # warned of, not taken silently (the bad -o stops the program before it
  # starts anything).
  err=$(WEFT_TRANSPROT_NAME=uring WEFT_LOG_LEVEL=verbose \
    "$path" -o loop.loops=many "${extra[@]}" 2>&1 >/dev/null)
  grep -q 'WEFT_TRANSPROT_NAME names no weft setting (did you mean WEFT_TRANSPORT_NAME?)' <<<"$err" ||
    bad "$prog: a misspelled WEFT_TRANSPROT_NAME was not warned of: $err"
  grep -q 'WEFT_LOG_LEVEL="verbose" is not a level' <<<"$err" ||
    bad "$prog: WEFT_LOG_LEVEL=verbose was not warned of: $err"
  # A log line as Redis writes them: pid, date, time with ms, level.
  grep -Eq '^[0-9]+ [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} weft: warn: ' <<<"$err" ||
    bad "$prog: a log line without pid, time (ms) and level: $err"
  [ $fail -eq 0 ] && echo "ok: $prog"
done

# ---- settings a program would ignore, and errors that name the setting ----
dir=$(mktemp -d)
listener=""
trap 'rm -rf "$dir"; [ -z "$listener" ] || kill "$listener" 2>/dev/null' EXIT
for spec in "$@"; do
  path=${spec%%,*}
  case $(basename "$path") in
  weft-kv-server) kv_server=$path ;;
  weft-echo) echo_prog=$path ;;
  weft-bench) bench=$path ;;
  esac
done
# expect NAME STATUS PATTERN COMMAND...: COMMAND exits STATUS and its stderr
# matches the extended regular expression PATTERN.
expect() {
  local name=$1 want=$2 pattern=$3 rc
  shift 3
  err=$(timeout 30 "$@" 2>&1 >/dev/null); rc=$?
  [ $rc -eq "$want" ] || bad "$name: exit $rc, expected $want: $err"
  grep -Eq -- "$pattern" <<<"$err" || bad "$name: said: $err"
}
if [ -n "${kv_server:-}" ]; then
  expect kv_server_listen_key 2 \
    'does not read \[server\] listen; it reads \[kv\] rpc_listen' \
    "$kv_server" -o server.listen=127.0.0.1:1
  expect kv_server_other_programs_section 2 \
    'does not read \[kvbench\]; it reads \[loop\]' \
    "$kv_server" -o kvbench.workload=A
  # From a file (a server's and its clients' keys in one): ignored, with
  # an info line.
  printf '[client]\nconnect = 127.0.0.1:1\n' >"$dir/shared.ini"
  expect kv_server_file_other_section 2 \
    'shared.ini:2: \[client\] connect ignored: this program does not read \[client\]' \
    env WEFT_LOG_LEVEL=info "$kv_server" -c "$dir/shared.ini" -o loop.loops=many
  # A port in use and a bad endpoint: the key named, status 2.
  python3 -c 'import socket,sys,time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(300)' >"$dir/port" &
  listener=$!
  for _ in $(seq 600); do [ -s "$dir/port" ] && break; sleep 0.1; done
  busy=$(cat "$dir/port")
  expect kv_server_port_in_use 2 \
    "\[kv\] resp_listen = 127.0.0.1:$busy: address already in use" \
    "$kv_server" -o kv.resp_listen=127.0.0.1:$busy -o kv.rpc_listen=127.0.0.1:0
  expect kv_server_bad_endpoint 2 '\[kv\] rpc_listen = bogus://127.0.0.1:1' \
    "$kv_server" -o kv.rpc_listen=bogus://127.0.0.1:1 -o kv.resp_listen=127.0.0.1:0
  # A channel's log line names the peer.
  WEFT_LOG_LEVEL=info "$kv_server" -o kv.resp_listen=127.0.0.1:0 \
    -o kv.rpc_listen=127.0.0.1:0 2>"$dir/kv.log" &
  kv_pid=$!
  port=$(log_match "$dir/kv.log" 's|.*resp on tcp://127.0.0.1:\([0-9]*\)$|\1|p')
  exec 3<>"/dev/tcp/127.0.0.1/$port"
  printf '*2\r\n$x\r\n' >&3
  timeout 30 cat <&3 >/dev/null
  exec 3<&-
  for _ in $(seq 600); do grep -q 'Protocol error' "$dir/kv.log" && break; sleep 0.1; done
  kill "$kv_pid"; wait "$kv_pid"
  grep -Eq 'weft: info: channel [0-9]+ \(peer 127\.0\.0\.1:[0-9]+\): kv: RESP: Protocol error' "$dir/kv.log" ||
    bad "kv_server_log_names_peer: $(cat "$dir/kv.log")"
fi
if [ -n "${echo_prog:-}" ] && [ -n "${busy:-}" ]; then
  expect echo_port_in_use 2 \
    "\[server\] listen = 127.0.0.1:$busy: address already in use" \
    "$echo_prog" server -o server.listen=127.0.0.1:$busy
  expect echo_connect_names_address 1 'connect to tcp://127.0.0.1:1: ' \
    "$echo_prog" client -o client.connect=127.0.0.1:1
fi
if [ -n "${bench:-}" ]; then
  expect bench_setup_window_not_a_number 2 '"abc" is not a whole number' \
    "$bench" -S tcp:abc
fi
[ $fail -eq 0 ] && echo "ok: settings a program would ignore are refused or warned of"
exit $fail
