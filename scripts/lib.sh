# SPDX-License-Identifier: Apache-2.0
# Shared by weft's scripts (sourced, not run): quiet output with a line of
# progress per step, so a long step never sits silent for more than about
# five seconds, and a check that the programs a script needs are there.

# step TEXT...: one progress line.
step() { echo "weft: $*" >&2; }

# need PROGRAM PACKAGE: fails naming the package to install when a program
# is missing (scripts/deps.sh installs every one of them).
need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "weft: $1 is missing: apt-get install $2 (scripts/deps.sh does)" >&2
  exit 1
}

# quiet_run TEXT COMMAND...: runs COMMAND with its output in a log; says
# TEXT first and then, every 5 s, the log's last line; on failure, the
# log's last 40 lines. Returns COMMAND's status.
quiet_run() {
  local text=$1 log pid rc=0 waited=0 last
  shift
  log=$(mktemp)
  step "$text"
  "$@" >"$log" 2>&1 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    if [ $((waited % 5)) -eq 0 ]; then
      last=$(grep -v '^[[:space:]]*$' "$log" | tail -n1 | cut -c1-100)
      step "$text (${waited} s): ${last:-...}"
    fi
  done
  wait "$pid" || rc=$?
  if [ $rc -ne 0 ]; then
    tail -40 "$log" >&2
    echo "weft: failed: $text" >&2
  fi
  rm -f "$log"
  return $rc
}

# quiet_configure DIR [cmake arguments]: configures the build in DIR.
quiet_configure() {
  local dir=$1
  shift
  quiet_run "configuring $dir" cmake -S . -B "$dir" "$@"
}

# quiet_build DIR [cmake --build arguments]: builds DIR with every core.
quiet_build() {
  local dir=$1
  shift
  quiet_run "building $dir" cmake --build "$dir" -j"$(nproc)" "$@"
}

# ---- one benchmark server at a time (bench-echo.sh, bench-scale.sh) ----

# bench_server_setup: a free-looking port below the ephemeral range
# (32768-60999, where clients' ports would clash) in `port`, a temporary
# folder in `out`, and an EXIT trap that stops the server and removes it.
bench_server_setup() {
  port=$((20000 + RANDOM % 10000))
  out=$(mktemp -d)
  server_pid=
  trap bench_server_cleanup EXIT
}

bench_server_cleanup() {
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$out"
}

# start_server COMMAND...: runs COMMAND in the background (server_pid) and
# waits until `port` accepts connections; false if it does not within 5 s
# (its log is shown).
start_server() {
  "$@" >"$out/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  sed 's/^/server: /' "$out/server.log" >&2
  return 1
}

# stop_server: stops the server start_server started, and waits for it.
stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}

# ---- weft-kv-servers beside redis-server (bench-kv-cpu.sh, -counts.sh) ----

# kv_servers_start OUT PORT SPEC...: starts each LABEL=BINARY[,OPTION...]
# spec with -o kv.rpc_listen= and, unless its options set it, -o
# kv.resp_listen=127.0.0.1:P (the word PORT in its options becomes P),
# ports from PORT up, then redis-server (no persistence) on the next port;
# fills `labels`, `ports` and `spids` (redis last) and appends to `pids`
# (the caller's cleanup kills them). A server's stderr goes to
# OUT/LABEL.log. With KV_PRELOAD set, every server runs with
# LD_PRELOAD=$KV_PRELOAD and ALLOC_COUNT_FILE=OUT/LABEL.heap. Fails,
# showing the log, if one has exited a second later.
kv_servers_start() {
  local out=$1 port=$2 spec label si
  local -a cmd
  shift 2
  labels=() ports=() spids=()
  for spec in "$@"; do
    label=${spec%%=*}
    IFS=',' read -r -a cmd <<<"${spec#*=}"
    cmd=("${cmd[@]//PORT/$port}")
    case "${spec#*=}" in
    *kv.resp_listen=*) ;;
    *) cmd+=(-o "kv.resp_listen=127.0.0.1:$port") ;;
    esac
    kv_server_exec "$out" "$label" "${cmd[@]}" -o kv.rpc_listen= \
      2>"$out/$label.log" &
    pids+=($!) labels+=("$label") ports+=("$port") spids+=($!)
    port=$((port + 1))
  done
  kv_server_exec "$out" redis redis-server --port "$port" --save "" \
    --appendonly no --daemonize no --loglevel warning \
    >/dev/null 2>"$out/redis.log" &
  pids+=($!) labels+=(redis) ports+=("$port") spids+=($!)
  sleep 1
  for si in "${!labels[@]}"; do
    kill -0 "${spids[$si]}" 2>/dev/null && continue
    echo "${labels[$si]} did not start:" >&2
    cat "$out/${labels[$si]}.log" >&2 2>/dev/null || true
    return 1
  done
}

# kv_server_exec OUT LABEL COMMAND...: replaces this (background) shell
# with COMMAND, under KV_PRELOAD's counter if set.
kv_server_exec() {
  local out=$1 label=$2
  shift 2
  if [ -n "${KV_PRELOAD:-}" ]; then
    ALLOC_COUNT_FILE="$out/$label.heap" LD_PRELOAD="$KV_PRELOAD" exec "$@"
  fi
  exec "$@"
}
