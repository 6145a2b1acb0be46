# SPDX-License-Identifier: Apache-2.0
# Shared by weft's scripts (sourced, not run): quiet output with a line of
# progress per step, so a long step never sits silent for more than about
# five seconds, and a check that the programs a script needs are there.

# step TEXT...: one progress line.
step() { echo "weft: $*" >&2; }

# cpu_ticks PID: the utime + stime of a process so far, in clock ticks
# (getconf CLK_TCK a second), from /proc/PID/stat (fields 14 and 15, counted
# after the command name, which may hold spaces).
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

# need PROGRAM PACKAGE: fails naming the package to install when a program
# is missing (scripts/deps.sh installs every one of them).
need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "weft: $1 is missing: apt-get install $2 (scripts/deps.sh does)" >&2
  exit 1
}

# log_match FILE SED_SCRIPT [TRIES [PID]]: waits for a line of FILE (a
# server's log) that `sed -n SED_SCRIPT` prints something for, polling every
# 0.1 s up to TRIES times (default 600), and prints it; false, printing
# nothing, if none comes, or as soon as process PID (the server writing
# FILE) has exited. E.g. the address a server listens on, once it says so.
log_match() {
  local _ found
  for _ in $(seq "${3:-600}"); do
    found=$(sed -n "$2" "$1")
    [ -n "$found" ] && { echo "$found"; return 0; }
    [ -z "${4:-}" ] || kill -0 "$4" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
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

# scratch_with_children: a scratch directory in $out and an array pids for
# the background processes a script starts; on exit, however the script
# ends, each of them is killed and waited for and the directory removed.
scratch_with_children() {
  out=$(mktemp -d)
  pids=()
  trap kill_children_and_scratch EXIT
}
kill_children_and_scratch() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$out"
}
