#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A static weft-kv-server cluster on this machine (Redis Cluster protocol,
# samples/kv/README.md "Cluster"): N nodes on loopback, each with its own
# RESP and RPC port and an even share of the 16384 slots, as Redis'
# utils/create-cluster does for redis-server.
#
# Usage:
#   samples/kv/scripts/kv-cluster.sh start [-n NODES] [-p BASE_PORT] [-d DIR]
#                               [-b BUILD_DIR | -s SERVER] [-l LOOPS]
#                               [-- SERVER_ARGS...]
#   samples/kv/scripts/kv-cluster.sh stop  [-d DIR]
#   samples/kv/scripts/kv-cluster.sh restart -i I [-d DIR] [-b BUILD_DIR | -s SERVER]
#                               [-- SERVER_ARGS...]
#   samples/kv/scripts/kv-cluster.sh status [-d DIR]
#
# start writes DIR/nodeI.ini for node I (1..N: RESP on BASE_PORT+I-1, weft
# RPC on BASE_PORT+I-1+1000, every node's line in [cluster]), starts
# SERVER (default BUILD_DIR/samples/kv/weft-kv-server) -c DIR/nodeI.ini (log DIR/nodeI.log,
# pid DIR/nodeI.pid), waits until each listens, and prints one line per
# node: "nodeI 127.0.0.1:PORT rpc=127.0.0.1:PORT slots=FIRST-LAST".
# SERVER_ARGS go to every node (e.g. -o kv.requirepass=...). stop sends
# SIGTERM to the nodes of DIR and waits for them. restart stops node I
# and starts it again from DIR/nodeI.ini: it comes back with the slot map
# of its state file, DIR/nodeI.nodes.conf ([cluster] config_file's
# default; start removes those of an earlier cluster). Defaults: 3 nodes, base
# port 30001 (0: a random free one, from the lines start prints), DIR
# /tmp/weft-kv-cluster, BUILD_DIR build/dev, 1 loop each.
# Then: redis-cli -c -p 30001, redis-benchmark --cluster -p 30001.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

cmd=${1:-}
[ $# -gt 0 ] && shift
nodes=3 base=30001 dir=/tmp/weft-kv-cluster build=$root/build/dev loops=1
server= only=
extra=()
while [ $# -gt 0 ]; do
  case $1 in
  -n) nodes=$2; shift 2 ;;
  -p) base=$2; shift 2 ;;
  -d) dir=$2; shift 2 ;;
  -b) build=$2; shift 2 ;;
  -s) server=$2; shift 2 ;;
  -l) loops=$2; shift 2 ;;
  -i) only=$2; shift 2 ;;
  --) shift; extra=("$@"); break ;;
  *) echo "kv-cluster.sh: unknown option '$1' (see the usage at the top of $0)" >&2
     exit 2 ;;
  esac
done
case $nodes in '' | *[!0-9]*) echo "kv-cluster.sh: -n wants 1 to 64" >&2; exit 2 ;; esac
if [ "$nodes" -lt 1 ] || [ "$nodes" -gt 64 ]; then
  echo "kv-cluster.sh: -n wants 1 to 64" >&2
  exit 2
fi

# node_lines: the [cluster] node lines of every node, slots split evenly.
node_lines() {
  local i first last
  for i in $(seq 1 "$nodes"); do
    first=$(((i - 1) * 16384 / nodes))
    last=$((i * 16384 / nodes - 1))
    echo "node = node$i 127.0.0.1:$((base + i - 1)) rpc=127.0.0.1:$((base + i - 1 + 1000)) slots=$first-$last"
  done
}

# stop_nodes [I]: node I, or every node of DIR.
stop_nodes() {
  local f pid
  for f in "$dir"/node${1:-*}.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    rm -f "$f"
  done
}

# run_node I: starts node I from DIR/nodeI.ini in the background.
run_node() {
  : >"$dir/node$1.log"
  # Not our stdout: a caller reading it ($(...), a pipe) would wait
  # for the nodes to exit.
  "$server" -c "$dir/node$1.ini" "${extra[@]}" </dev/null >"$dir/node$1.log" 2>&1 &
  echo $! >"$dir/node$1.pid"
}

# wait_node I: until node I listens; 1 (its log on stderr) if it exits
# or does not listen in 10 s.
wait_node() {
  for _ in $(seq 100); do
    grep -q ': resp on ' "$dir/node$1.log" && return 0
    if ! kill -0 "$(cat "$dir/node$1.pid")" 2>/dev/null; then
      echo "kv-cluster.sh: node$1 exited:" >&2
      cat "$dir/node$1.log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "kv-cluster.sh: node$1 did not start in 10 s:" >&2
  cat "$dir/node$1.log" >&2
  return 1
}

find_server() {
  server=${server:-$build/samples/kv/weft-kv-server}
  [ -x "$server" ] || { echo "kv-cluster.sh: $server is missing: build first (cmake --build $build)" >&2; exit 1; }
}

# start_at: writes every node's config for $base, starts the nodes and
# waits for them; 1 (every node stopped) if one does not come up.
start_at() {
  local i port
  for i in $(seq 1 "$nodes"); do
    port=$((base + i - 1))
    {
      echo "[loop]"
      echo "loops = $loops"
      echo "[kv]"
      echo "resp_listen = 127.0.0.1:$port"
      echo "rpc_listen = 127.0.0.1:$((port + 1000))"
      echo "[cluster]"
      echo "enabled = yes"
      echo "myself = node$i"
      node_lines
    } >"$dir/node$i.ini"
    run_node "$i"
  done
  for i in $(seq 1 "$nodes"); do
    wait_node "$i" || { stop_nodes; return 1; }
  done
}

start_nodes() {
  find_server
  mkdir -p "$dir"
  stop_nodes
  rm -f "$dir"/node*.nodes.conf # a new cluster: its [cluster] lines
  if [ "$base" = 0 ]; then
    # Ports from 20000 to 28999, again if one is taken (a test beside
    # others): only the last try's failure is told.
    for try in 1 2 3 4 5; do
      base=$((20000 + RANDOM % 9000))
      if [ $try = 5 ]; then start_at || exit 1; else start_at 2>/dev/null && break; fi
    done
  else
    start_at || exit 1
  fi
  step "$nodes nodes up in $dir"
  node_lines | sed 's/^node = //'
}

restart_node() {
  case $only in '' | *[!0-9]*) echo "kv-cluster.sh: restart wants -i I (a node number)" >&2; exit 2 ;; esac
  [ -e "$dir/node$only.ini" ] || { echo "kv-cluster.sh: no $dir/node$only.ini: start the cluster first" >&2; exit 1; }
  find_server
  stop_nodes "$only"
  run_node "$only"
  wait_node "$only" || { stop_nodes; exit 1; }
  step "node$only restarted"
}

case $cmd in
start) start_nodes ;;
stop) stop_nodes ;;
restart) restart_node ;;
status)
  for f in "$dir"/node*.pid; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .pid)
    if kill -0 "$(cat "$f")" 2>/dev/null; then echo "$n up"; else echo "$n down"; fi
  done ;;
*) echo "usage: $0 start|stop|restart|status [options] (see the top of the script)" >&2
   exit 2 ;;
esac
