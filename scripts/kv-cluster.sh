#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A static weft-kv-server cluster on this machine (Redis Cluster protocol,
# samples/kv/README.md "Cluster"): N nodes on loopback, each with its own
# RESP and RPC port and an even share of the 16384 slots, as Redis'
# utils/create-cluster does for redis-server.
#
# Usage:
#   scripts/kv-cluster.sh start [-n NODES] [-p BASE_PORT] [-d DIR]
#                               [-b BUILD_DIR | -s SERVER] [-l LOOPS]
#                               [-- SERVER_ARGS...]
#   scripts/kv-cluster.sh stop  [-d DIR]
#   scripts/kv-cluster.sh status [-d DIR]
#
# start writes DIR/nodeI.ini for node I (1..N: RESP on BASE_PORT+I-1, weft
# RPC on BASE_PORT+I-1+1000, every node's line in [cluster]), starts
# SERVER (default BUILD_DIR/samples/kv/weft-kv-server) -c DIR/nodeI.ini (log DIR/nodeI.log,
# pid DIR/nodeI.pid), waits until each listens, and prints one line per
# node: "nodeI 127.0.0.1:PORT rpc=127.0.0.1:PORT slots=FIRST-LAST".
# SERVER_ARGS go to every node (e.g. -o kv.requirepass=...). stop sends
# SIGTERM to the nodes of DIR and waits for them. Defaults: 3 nodes, base
# port 30001, DIR /tmp/weft-kv-cluster, BUILD_DIR build/dev, 1 loop each.
# Then: redis-cli -c -p 30001, redis-benchmark --cluster -p 30001.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

cmd=${1:-}
[ $# -gt 0 ] && shift
nodes=3 base=30001 dir=/tmp/weft-kv-cluster build=$root/build/dev loops=1
server=
extra=()
while [ $# -gt 0 ]; do
  case $1 in
  -n) nodes=$2; shift 2 ;;
  -p) base=$2; shift 2 ;;
  -d) dir=$2; shift 2 ;;
  -b) build=$2; shift 2 ;;
  -s) server=$2; shift 2 ;;
  -l) loops=$2; shift 2 ;;
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

stop_nodes() {
  local f pid
  for f in "$dir"/node*.pid; do
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

start_nodes() {
  local i port
  server=${server:-$build/samples/kv/weft-kv-server}
  [ -x "$server" ] || { echo "kv-cluster.sh: $server is missing: build first (cmake --build $build)" >&2; exit 1; }
  mkdir -p "$dir"
  stop_nodes
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
    : >"$dir/node$i.log"
    # Not our stdout: a caller reading it ($(...), a pipe) would wait
    # for the nodes to exit.
    "$server" -c "$dir/node$i.ini" "${extra[@]}" </dev/null >"$dir/node$i.log" 2>&1 &
    echo $! >"$dir/node$i.pid"
  done
  for i in $(seq 1 "$nodes"); do
    for _ in $(seq 100); do
      grep -q ': resp on ' "$dir/node$i.log" && break
      if ! kill -0 "$(cat "$dir/node$i.pid")" 2>/dev/null; then
        echo "kv-cluster.sh: node$i exited:" >&2
        cat "$dir/node$i.log" >&2
        stop_nodes
        exit 1
      fi
      sleep 0.1
    done
    grep -q ': resp on ' "$dir/node$i.log" || {
      echo "kv-cluster.sh: node$i did not start in 10 s:" >&2
      cat "$dir/node$i.log" >&2
      stop_nodes
      exit 1
    }
  done
  step "$nodes nodes up in $dir"
  node_lines | sed 's/^node = //'
}

case $cmd in
start) start_nodes ;;
stop) stop_nodes ;;
status)
  for f in "$dir"/node*.pid; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .pid)
    if kill -0 "$(cat "$f")" 2>/dev/null; then echo "$n up"; else echo "$n down"; fi
  done ;;
*) echo "usage: $0 start|stop|status [options] (see the top of the script)" >&2
   exit 2 ;;
esac
