#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# samples/kv/scripts/kv-cluster-hosts.sh, the cluster launcher for several machines,
# run against this one: a host list of three loopback nodes, started
# through a local stand-in for ssh (samples/kv/tests/local-remote.sh); redis-cli -c
# sets keys that land on every node; status, stop; a list with a
# non-loopback host and no password is refused before anything starts.
# Usage: test_kv_cluster_hosts.sh weft-kv-server kv-cluster-hosts.sh local-remote.sh
set -u
server=$1 launcher=$2
export WEFT_REMOTE=$3
command -v redis-cli >/dev/null || { echo "FAIL: redis-cli is needed (scripts/deps.sh: redis-tools)"; exit 1; }
dir=$(mktemp -d)
hosts=$dir/hosts
trap '"$launcher" stop "$hosts" -d "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# Ports below the kernel's ephemeral range (32768 up), where no client
# socket holds one; another start on a fresh base if one is taken anyway.
started=no
for attempt in 1 2 3; do
  base=$((20000 + RANDOM % 12000))
  {
    echo "# three nodes on this machine"
    for i in 0 1 2; do echo "127.0.0.1 $((base + i)) $((base + 100 + i))"; done
  } >"$hosts"
  if "$launcher" start "$hosts" -s "$server" -d "$dir" >"$dir/start.out" 2>&1; then
    started=yes
    break
  fi
  grep -q -i "address already in use" "$dir/start.out" || break
done
[ $started = yes ] || { cat "$dir/start.out"; fail "start"; exit 1; }
grep -q "node3 127.0.0.1:$((base + 2)) rpc=127.0.0.1:$((base + 102)) slots=10922-16383" "$dir/start.out" ||
  fail "start printed no node3 line: $(cat "$dir/start.out")"
[ "$("$launcher" status "$hosts" -d "$dir" | grep -c ' up$')" = 3 ] || fail "status: not 3 up"

for k in $(seq 1 30); do
  out=$(timeout 10 redis-cli -c -p "$base" set "key$k" "v$k" 2>&1)
  [ "$out" = OK ] || fail "set key$k: $out"
done
for i in 0 1 2; do
  port=$((base + i))
  n=$(timeout 10 redis-cli -p "$port" dbsize 2>&1)
  case $n in '' | *[!0-9]* | 0) fail "node on $port holds '$n' keys" ;; esac
done
port3=$((base + 2))
[ "$(timeout 10 redis-cli -c -p "$port3" get key7 2>&1)" = v7 ] || fail "get key7 through node3"

"$launcher" stop "$hosts" -d "$dir"
[ "$("$launcher" status "$hosts" -d "$dir" | grep -c ' down$')" = 3 ] || fail "status after stop: not 3 down"

echo "192.0.2.77 6380" >"$dir/remote-hosts"
out=$(env -u WEFT_KV_REQUIREPASS "$launcher" start "$dir/remote-hosts" -s "$server" -d "$dir" 2>&1)
rc=$?
[ $rc = 2 ] && [[ $out == *"set WEFT_KV_REQUIREPASS"* ]] || fail "no password for a remote host: rc $rc, '$out'"

[ $failed = 0 ] && echo "test_kv_cluster_hosts: passed" || exit 1
