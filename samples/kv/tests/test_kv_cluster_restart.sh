#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A weft-kv-server cluster node restarted after a reshard serves the slot
# map it served before (its state file, [cluster] config_file), not the
# one of its [cluster] lines: a 3-node cluster (samples/kv/scripts/kv-cluster.sh),
# slots 0-2 resharded from node 1 to node 2 with redis-cli --cluster
# reshard, then node 2 and node 1 restarted in turn. Each time redis-cli -c
# must reach the key without a redirection loop, MOVED must point one way
# (node 1 to node 2, node 2 serving), CLUSTER NODES must agree between the
# nodes with the epochs the reshard gave; and a malformed or unreadable
# state file stops the server naming the file and the line.
# Usage: test_kv_cluster_restart.sh weft-kv-server kv-cluster.sh
set -u
server=$1 cluster=$2
. "$(dirname "$0")/kv_checks.sh" # need, checkout, summary
need "scripts/deps.sh: redis-tools, coreutils" redis-cli timeout
dir=$(mktemp -d)
trap '"$cluster" stop -d "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT

# Free ports, picked by kv-cluster.sh (-p 0): node 1's is in its first
# line, "node1 127.0.0.1:PORT ...".
"$cluster" start -n 3 -p 0 -d "$dir" -s "$server" >"$dir/start.out" 2>&1 ||
  { echo "FAIL: the cluster did not start:"; cat "$dir/start.out"; exit 1; }
base=$(sed -n 's/^node1 127.0.0.1:\([0-9]*\) .*/\1/p' "$dir/start.out")
p1=$base p2=$((base + 1)) p3=$((base + 2))
r() { timeout 10 redis-cli -p "$1" "${@:2}" 2>&1; }
# redis-cli -c follows MOVED for ever when two nodes point at each other:
# the timeout ends it (exit status 124, reported by the checks).
rc() { timeout 10 redis-cli -c -p "$1" "${@:2}" 2>&1; }
id1=$(r "$p1" cluster myid) id2=$(r "$p2" cluster myid)

# k596 hashes to slot 0 (CRC16 & 16383), among the slots moved below.
key=k596
checkout restart_key_slot 0 "$(r "$p1" cluster keyslot "$key")"
checkout restart_state_file_written yes \
  "$([ -s "$dir/node2.nodes.conf" ] && echo yes || echo no)"
checkout restart_set_before OK "$(rc "$p1" set "$key" before)"

# ---- reshard slots 0-2 from node 1 to node 2 ----
timeout 120 redis-cli --cluster reshard "127.0.0.1:$p1" --cluster-from "$id1" \
  --cluster-to "$id2" --cluster-slots 3 --cluster-yes >"$dir/reshard.out" 2>&1
checkout restart_reshard_exit 0 "$?"
checkout restart_reshard_moved_key before "$(r "$p2" get "$key")"
checkout restart_moved_after_reshard "MOVED 0 127.0.0.1:$p2" "$(r "$p1" get "$key")"

# The view of slots and epochs of node $1: "ID EPOCH SLOTS..." per node.
view() { r "$1" cluster nodes | awk '{ printf "%s %s", $1, $7; for (i = 9; i <= NF; i++) printf " %s", $i; print "" }' | sort; }
agreed=$(view "$p3")
checkout restart_views_agree_before "$agreed" "$(view "$p1")"
checkout restart_epoch_of_node2 "6 0-2 5461-10921" \
  "$(echo "$agreed" | grep "^$id2 " | cut -d' ' -f2-)"

# ---- restart node 2 (the slots' new owner), then node 1 (the old) ----
for n in 2 1; do
  pn=$((base + n - 1))
  "$cluster" restart -i "$n" -d "$dir" -s "$server" >"$dir/restart.out" 2>&1 ||
    { echo "FAIL: node$n did not restart:"; cat "$dir/restart.out"; exit 1; }
  # The store is in memory: the key went with node 2's first restart.
  checkout "restart_${n}_cli_set" OK "$(rc "$p3" set "$key" "after$n")"
  checkout "restart_${n}_cli_get_from_1" "after$n" "$(rc "$p1" get "$key")"
  checkout "restart_${n}_cli_get_from_2" "after$n" "$(rc "$p2" get "$key")"
  checkout "restart_${n}_moved_one_way" "MOVED 0 127.0.0.1:$p2|after$n" \
    "$(r "$p1" get "$key")|$(r "$p2" get "$key")"
  checkout "restart_${n}_views_agree" "$agreed" "$(view "$pn")"
  checkout "restart_${n}_state_ok" "cluster_state:ok" \
    "$(r "$pn" cluster info | head -1 | tr -d '\r')"
  checkout "restart_${n}_current_epoch" "cluster_current_epoch:6" \
    "$(r "$pn" cluster info | grep current_epoch | tr -d '\r')"
done

# ---- a bad state file stops the server, naming the file and line ----
"$cluster" stop -d "$dir" >/dev/null 2>&1
cp "$dir/node3.nodes.conf" "$dir/node3.good"
sed -i '3s/ connected / connected 99999 /' "$dir/node3.nodes.conf"
err=$(timeout 10 "$server" -c "$dir/node3.ini" 2>&1)
checkout restart_bad_slot_named yes \
  "$(echo "$err" | grep -q "node3.nodes.conf:3: a slot range FIRST-LAST or a slot, from 0 to 16383: 99999" && echo yes || echo "no: $err")"
sed 's/myself,master/master/' "$dir/node3.good" >"$dir/node3.nodes.conf"
sed -i '2s/ master / myself,master /' "$dir/node3.nodes.conf"
err=$(timeout 10 "$server" -c "$dir/node3.ini" 2>&1)
checkout restart_other_nodes_file_named yes \
  "$(echo "$err" | grep -q "node3.nodes.conf:2: not node node3's state file" && echo yes || echo "no: $err")"
rm -f "$dir/node3.nodes.conf"
mkdir "$dir/node3.nodes.conf"
err=$(timeout 10 "$server" -c "$dir/node3.ini" 2>&1)
checkout restart_unreadable_file_named yes \
  "$(echo "$err" | grep -q "node3.nodes.conf:1: Is a directory" && echo yes || echo "no: $err")"

summary
