#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The KV service's operator habits, as Redis users have them: weft-kv
# behaves as redis-cli (-h HOST -p PORT, --help, -n 0, -r/-i, commands
# from stdin with redis-cli's quoting, an interactive mode with line
# editing, history and help driven through tmux, a RESP port named as
# such); SHUTDOWN over RESP (redis-cli) and RPC (weft-kv) with Redis 7's
# forms for a server without persistence, AUTH and [kv] shutdown_command
# respected; weft-kvbench prints what it measured when interrupted
# (SIGINT), status 130.
# Usage: test_kv_cli.sh PATH/TO/weft-kv-server PATH/TO/weft-kv
#        PATH/TO/weft-kvbench  (CTest)
set -u
server=$1 cli=$2 kvbench=$3
. "$(dirname "$0")/kv_checks.sh" # need, checkout, summary
need "scripts/deps.sh installs it" redis-cli tmux
dir=$(mktemp -d)
pids=()
trap 'tmux -S "$dir/tmux.sock" kill-server 2>/dev/null
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$dir"' EXIT

. "$(dirname "$0")/kv_server.sh" # start_server

exit_status() { # PID: sets $status to its exit status once it exits (up
  # to 60 s), else to "running"; in this shell, which can wait for it
  status=running
  for _ in $(seq 600); do
    if ! kill -0 "$1" 2>/dev/null; then
      wait "$1"
      status=$?
      return
    fi
    sleep 0.1
  done
}

rcli() { timeout 10 redis-cli -p "$port" "$@" 2>&1; }
wkv() { timeout 10 "$cli" "$@" 2>&1; }

# ---- weft-kv as redis-cli ----
start_server cli 127.0.0.1
checkout kv_cli_host_port OK "$(wkv -h 127.0.0.1 -p "$rpc_port" set k v)"
checkout kv_cli_port_only v "$(wkv -p "$rpc_port" get k)"
checkout kv_cli_help_long "yes" \
  "$(wkv --help | grep -q '^  -h HOST ' && echo yes || echo no)"
# The front door lists --help alone for weft-kv, -h, --help elsewhere.
checkout kv_cli_help_line "--help:-h, --help" \
  "$(wkv --help | grep -oE '^  (-h, )?--help' | sed 's/^  //'):$(
    "$server" --help | grep -oE '^  (-h, )?--help' | sed 's/^  //')"
checkout kv_cli_h_needs_host "weft-kv: option '-h' needs a value" \
  "$(wkv -h | head -1)"
checkout kv_cli_connect_and_port 2 \
  "$(wkv --connect "127.0.0.1:$rpc_port" -p "$rpc_port" ping >/dev/null; echo $?)"
checkout kv_cli_db0 PONG "$(wkv -n 0 -p "$rpc_port" ping)"
checkout kv_cli_db1 "weft-kv: -n 1: weft-kv-server has database 0 only" \
  "$(wkv -n 1 -p "$rpc_port" ping | head -1)"
checkout kv_cli_repeat "$(printf '1\n2\n3')" \
  "$(wkv -r 3 -i 0.01 -p "$rpc_port" incr counter)"
# Commands from stdin, one per line, split as redis-cli splits them;
# error replies and bad quoting do not stop it, status 0 as redis-cli.
out=$(printf '%s\n' 'set q "a b\x41\n"' "set s 'it\\'s'" 'get s' \
  'strlen q' '"unterminated' 'get "q"x' 'incr s' '' 'ping' |
  timeout 10 "$cli" --no-raw -p "$rpc_port" 2>&1)
want=$(cat <<'END'
OK
OK
"it's"
(integer) 5
Invalid argument(s)
Invalid argument(s)
(error) ERR value is not an integer or out of range
PONG
END
)
checkout kv_cli_stdin_lines "$want" "$out"
printf 'ping\n' | timeout 10 "$cli" -p "$rpc_port" >/dev/null 2>&1
checkout kv_cli_stdin_status 0 $?
printf 'incr s\nquit\nping\n' | timeout 10 "$cli" -p "$rpc_port" >"$dir/quit.out" 2>&1
checkout kv_cli_stdin_quit "ERR value is not an integer or out of range:0" \
  "$(cat "$dir/quit.out"):$?"
# Pointed at the RESP port: named, at once (not after --timeout).
checkout kv_cli_resp_port \
  "weft-kv: 127.0.0.1:$port speaks the Redis protocol (RESP), not weft RPC: use redis-cli, or weft-kv's RPC port ([kv] rpc_listen, 7001 by default)" \
  "$(timeout 10 "$cli" --timeout 60000 -p "$port" get k 2>&1)"

# Interactive: a terminal (tmux) gets the prompt, line editing, history
# (kept in WEFT_KV_HISTFILE, without AUTH lines), completion, help and
# quit.
tm() { tmux -S "$dir/tmux.sock" "$@"; }
screen() { tm capture-pane -p -t kv 2>/dev/null; }
wait_screen() { # PATTERN (grep -E): the screen shows it within 60 s
  for _ in $(seq 600); do
    screen | grep -qE "$1" && return 0
    sleep 0.1
  done
  echo "screen, waiting for '$1':"; screen
  return 1
}
hist="$dir/history"
tm new-session -d -s kv -x 150 -y 50 \
  "env WEFT_KV_HISTFILE=$hist $cli -p $rpc_port; echo weft-kv-exited-\$?; sleep 600"
prompt="127\\.0\\.0\\.1:$rpc_port>"
wait_screen "^$prompt ?\$"
checkout kv_cli_prompt 0 $?
typed() { # NAME PATTERN KEYS...: after KEYS (tmux send-keys), the screen
  # shows PATTERN (NAME "-": waited for, not a check of its own)
  local name=$1 pattern=$2 rc
  shift 2
  tm send-keys -t kv "$@"
  wait_screen "$pattern"
  rc=$?
  [ "$name" = - ] || checkout "$name" 0 $rc
}
typed kv_cli_interactive_set '^OK$' 'set word hello' Enter
# Line editing: a wrong letter erased before Enter.
typed kv_cli_line_editing '^"hello"$' 'get wordx' BSpace Enter
# History: Up brings the last line back.
typed - '^\(integer\) 1$' 'del word' Enter
typed kv_cli_history_up '^\(integer\) 0$' Up Enter
typed kv_cli_tab_completion "^$prompt ?dbsize\$" 'dbsi' Tab Enter
typed kv_cli_help '^Commands:$' 'help' Enter
typed kv_cli_help_command '^  summary: Returns the string value of a key\.$' \
  'help get' Enter
typed - '^\(error\) ERR AUTH' 'auth secretword' Enter
typed kv_cli_quit '^weft-kv-exited-0$' 'quit' Enter
tm kill-server 2>/dev/null
checkout kv_cli_history_file "yes:no" \
  "$(grep -q 'set.040word.040hello' "$hist" && echo yes || echo no):$(
    grep -q 'secretword' "$hist" && echo yes || echo no)"
# SHUTDOWN from weft-kv (RPC): the server stops, weft-kv prints nothing.
checkout kv_cli_shutdown "" "$(wkv -p "$rpc_port" shutdown nosave)"
exit_status "$pid"
checkout kv_cli_shutdown_exit 0 "$status"

# ---- SHUTDOWN ----
start_server main 127.0.0.1
checkout kv_shutdown_save_refused \
  "ERR SHUTDOWN SAVE: this server has no persistence (no RDB, no AOF), nothing can be saved; use SHUTDOWN or SHUTDOWN NOSAVE" \
  "$(rcli shutdown save)"
checkout kv_shutdown_abort "ERR No shutdown in progress." "$(rcli shutdown abort)"
checkout kv_shutdown_nosave_save_syntax "ERR syntax error" "$(rcli shutdown nosave save)"
checkout kv_shutdown_abort_now_syntax "ERR syntax error" "$(rcli shutdown abort now)"
checkout kv_shutdown_unknown_word "ERR syntax error" "$(rcli shutdown soon)"
checkout kv_shutdown_in_multi \
  "$(printf 'OK\nERR Command not allowed inside a transaction\n\nEXECABORT Transaction discarded because of previous errors.\n')" \
  "$(printf 'multi\nshutdown\nexec\n' | rcli)"
checkout kv_shutdown_refused_still_serves PONG "$(rcli ping)"
# Redis answers an accepted SHUTDOWN with the close; redis-cli prints
# nothing and exits 0, and so does the server.
checkout kv_shutdown_nosave_quiet "" "$(rcli shutdown nosave now force)"
exit_status "$pid"
checkout kv_shutdown_server_exit 0 "$status"
grep -q "SHUTDOWN from 127.0.0.1:" "$dir/main.log"
checkout kv_shutdown_logged 0 $?

start_server plain 127.0.0.1
checkout kv_shutdown_plain "" "$(rcli shutdown)"
exit_status "$pid"
checkout kv_shutdown_plain_exit 0 "$status"

# AUTH first: an unauthenticated client cannot stop the server.
start_server auth 127.0.0.1 -o kv.requirepass=s3cret
checkout kv_shutdown_noauth "NOAUTH Authentication required." "$(rcli shutdown nosave)"
checkout kv_shutdown_noauth_still_serves PONG \
  "$(rcli -a s3cret --no-auth-warning ping)"
checkout kv_shutdown_auth "" "$(rcli -a s3cret --no-auth-warning shutdown)"
exit_status "$pid"
checkout kv_shutdown_auth_exit 0 "$status"

# [kv] shutdown_command = no: nobody.
start_server disabled 127.0.0.1 -o kv.shutdown_command=no
checkout kv_shutdown_disabled \
  "ERR SHUTDOWN is disabled on this server ([kv] shutdown_command = no)" \
  "$(rcli shutdown nosave)"
checkout kv_shutdown_disabled_still_serves PONG "$(rcli ping)"

# [kv] shutdown_command = local (the default): not from another host;
# yes: from anywhere, once authenticated. Protected mode wants a password
# for clients from outside the loopback network.
ip=$(ip -4 -o addr show scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
if [ -z "$ip" ]; then
  echo "SKIPPED test_kv_cli shutdown_command=local: no IPv4 address outside the loopback network here" |
    tee -a "${WEFT_TEST_SKIP_LOG:-/dev/null}"
else
  for policy in local yes; do
    start_server "$policy" 0.0.0.0 -o kv.requirepass=pw \
      -o "kv.shutdown_command=$policy"
    remote=$(timeout 10 redis-cli -h "$ip" -p "$port" -a pw --no-auth-warning shutdown 2>&1)
    if [ "$policy" = local ]; then
      checkout kv_shutdown_local_remote_refused \
        "ERR SHUTDOWN is allowed from the loopback network only ([kv] shutdown_command = local)" \
        "$remote"
    else
      checkout kv_shutdown_yes_remote "" "$remote"
      exit_status "$pid"
      checkout kv_shutdown_yes_remote_exit 0 "$status"
    fi
  done
fi

# ---- weft-kvbench: SIGINT prints what was measured ----
start_server bench 127.0.0.1
"$kvbench" --connect "127.0.0.1:$rpc_port" --records 1000 --warmup 0 \
  --duration 3600 --connections 1 --pipeline 4 \
  >"$dir/bench.out" 2>"$dir/bench.err" &
bpid=$!
pids+=("$bpid")
for _ in $(seq 600); do # the first progress line of the measured run
  grep -q "^weft-kvbench: run " "$dir/bench.err" && break
  sleep 0.1
done
kill -INT "$bpid"
exit_status "$bpid"
checkout kvbench_sigint_status 130 "$status"
checkout kvbench_sigint_partial yes \
  "$(grep -qE '^run +[0-9.]+ s, [1-9][0-9]* ops .*\(interrupted\)$' "$dir/bench.out" &&
    grep -q '^throughput ' "$dir/bench.out" && echo yes || echo no)"

summary || { cat "$dir"/*.log "$dir"/bench.*; exit 1; }
