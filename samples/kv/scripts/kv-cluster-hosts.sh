#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A static weft-kv-server cluster across machines, one node per line of a
# host list (samples/kv/README.md "Cluster"; samples/kv/scripts/kv-cluster.sh is the
# one-machine version). Every node gets the same [cluster] section, an even
# share of the 16384 slots in host-list order, and is started over ssh.
#
# Usage:
#   samples/kv/scripts/kv-cluster-hosts.sh start  HOSTS [-s SERVER] [-d DIR] [-l LOOPS]
#                                      [-- SERVER_ARGS...]
#   samples/kv/scripts/kv-cluster-hosts.sh stop   HOSTS [-d DIR]
#   samples/kv/scripts/kv-cluster-hosts.sh status HOSTS [-d DIR]
#
# HOSTS is a file with one node per line: "HOST [RESP_PORT [RPC_PORT]]"
# (defaults 6380 and 7001; '#' starts a comment). HOST is the address the
# node listens on and the one clients are redirected to, so it must be
# reachable from every client. SERVER is weft-kv-server's path on the
# remote machines (default /usr/local/bin/weft-kv-server, where
# `cmake --install` puts it); DIR the directory there for each node's
# config, log and pid (default /tmp/weft-kv-cluster). Node I's files are
# nodeI.ini, nodeI.log and nodeI.pid, so several nodes may share a host;
# a node keeps its slot map in nodeI.nodes.conf ([cluster] config_file),
# which start removes: a new cluster begins from its node lines.
#
# A node on a non-loopback address without a password refuses other hosts
# (protected mode), so start needs WEFT_KV_REQUIREPASS in the environment
# unless every host is a loopback address; it reaches the nodes in their
# environment, never on a command line (ps shows those).
#
# WEFT_REMOTE is the command that runs a shell command on a host, called as
# `$WEFT_REMOTE HOST COMMAND` with the command's input on stdin (default
# "ssh -o BatchMode=yes"; the tests use a local runner).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=scripts/lib.sh
. "$root/scripts/lib.sh"

usage() {
  echo "usage: $0 start|stop|status HOSTS [options] (see the top of the script)" >&2
  exit 2
}
cmd=${1:-}
hosts=${2:-}
[ -n "$cmd" ] && [ -n "$hosts" ] || usage
shift 2
server=/usr/local/bin/weft-kv-server dir=/tmp/weft-kv-cluster loops=1
extra=()
while [ $# -gt 0 ]; do
  case $1 in
  -s) server=$2; shift 2 ;;
  -d) dir=$2; shift 2 ;;
  -l) loops=$2; shift 2 ;;
  --) shift; extra=("$@"); break ;;
  *) echo "kv-cluster-hosts.sh: unknown option '$1' (see the usage at the top of $0)" >&2
     exit 2 ;;
  esac
done
[ -r "$hosts" ] || { echo "kv-cluster-hosts.sh: cannot read the host list '$hosts'" >&2; exit 2; }
read -r -a remote <<<"${WEFT_REMOTE:-ssh -o BatchMode=yes}"
command -v "${remote[0]}" >/dev/null || {
  echo "kv-cluster-hosts.sh: ${remote[0]} is missing (scripts/deps.sh: openssh-client)" >&2
  exit 1
}

# The host list as "HOST RESP RPC" lines, comments and blanks dropped.
hs=()
while read -r h resp rpc _; do
  h=${h%%#*}
  [ -n "$h" ] || continue
  resp=${resp:-6380} rpc=${rpc:-7001}
  case $resp$rpc in *[!0-9]*)
    echo "kv-cluster-hosts.sh: $hosts: '$h $resp $rpc': ports are numbers" >&2
    exit 2 ;;
  esac
  hs+=("$h $resp $rpc")
done <"$hosts"
n=${#hs[@]}
if [ "$n" -lt 1 ] || [ "$n" -gt 64 ]; then
  echo "kv-cluster-hosts.sh: $hosts lists $n nodes; 1 to 64 are supported" >&2
  exit 2
fi

# node_lines: every node's [cluster] line, slots split evenly in list order.
node_lines() {
  local i h resp rpc
  for i in $(seq 1 "$n"); do
    read -r h resp rpc <<<"${hs[$((i - 1))]}"
    echo "node = node$i $h:$resp rpc=$h:$rpc slots=$(((i - 1) * 16384 / n))-$((i * 16384 / n - 1))"
  done
}

on() { "${remote[@]}" "$1" "$2"; } # HOST COMMAND (stdin passed on)

all_loopback() {
  local l
  for l in "${hs[@]}"; do
    case $l in 127.* | localhost* | "::1"*) ;; *) return 1 ;; esac
  done
}

start_nodes() {
  local i h resp rpc quoted
  if [ -z "${WEFT_KV_REQUIREPASS:-}" ] && ! all_loopback; then
    echo "kv-cluster-hosts.sh: set WEFT_KV_REQUIREPASS: nodes on other than loopback addresses refuse other hosts without a password (protected mode)" >&2
    exit 2
  fi
  quoted=$(printf ' %q' "${extra[@]}")
  [ ${#extra[@]} -gt 0 ] || quoted=
  for i in $(seq 1 "$n"); do
    read -r h resp rpc <<<"${hs[$((i - 1))]}"
    step "node$i: $h:$resp (rpc $rpc)"
    {
      printf '[loop]\nloops = %s\n[kv]\n' "$loops"
      printf 'resp_listen = %s:%s\nrpc_listen = %s:%s\n' "$h" "$resp" "$h" "$rpc"
      printf '[cluster]\nenabled = yes\nmyself = node%s\n' "$i"
      node_lines
    } | on "$h" "mkdir -p $(printf %q "$dir") && rm -f $(printf %q "$dir/node$i.nodes.conf") && cat > $(printf %q "$dir/node$i.ini")"
    # The password travels in the environment of the remote shell's stdin
    # script, not in its arguments.
    printf 'export WEFT_KV_REQUIREPASS=%q\ncd %q\nnohup %q -c node%s.ini%s </dev/null >node%s.log 2>&1 &\necho $! >node%s.pid\n' \
      "${WEFT_KV_REQUIREPASS:-}" "$dir" "$server" "$i" "$quoted" "$i" "$i" |
      on "$h" "bash -s"
  done
  for i in $(seq 1 "$n"); do
    read -r h resp rpc <<<"${hs[$((i - 1))]}"
    if ! on "$h" "cd $(printf %q "$dir") && for t in \$(seq 100); do grep -q ': resp on ' node$i.log && exit 0; kill -0 \$(cat node$i.pid) 2>/dev/null || break; sleep 0.1; done; cat node$i.log; exit 1" </dev/null >&2; then
      echo "kv-cluster-hosts.sh: node$i on $h did not start (its log is above)" >&2
      stop_nodes
      exit 1
    fi
  done
  step "$n nodes up"
  node_lines | sed 's/^node = //'
}

stop_nodes() {
  local i h resp rpc
  for i in $(seq 1 "$n"); do
    read -r h resp rpc <<<"${hs[$((i - 1))]}"
    on "$h" "cd $(printf %q "$dir") 2>/dev/null && [ -e node$i.pid ] && p=\$(cat node$i.pid) && kill \$p 2>/dev/null; for t in \$(seq 50); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done; rm -f node$i.pid; true" </dev/null || true
  done
}

status_nodes() {
  local i h resp rpc
  for i in $(seq 1 "$n"); do
    read -r h resp rpc <<<"${hs[$((i - 1))]}"
    if on "$h" "kill -0 \$(cat $(printf %q "$dir")/node$i.pid 2>/dev/null) 2>/dev/null" </dev/null; then
      echo "node$i $h:$resp up"
    else
      echo "node$i $h:$resp down"
    fi
  done
}

case $cmd in
start) start_nodes ;;
stop) stop_nodes ;;
status) status_nodes ;;
*) usage ;;
esac
