#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# weft-kv-server as a Redis Cluster, against Redis' own cluster clients: a
# 3-node cluster on loopback started by samples/kv/scripts/kv-cluster.sh; redis-cli -c
# sets and gets keys that land on every node; -MOVED, -CROSSSLOT (also in
# MULTI) and hash tags as Redis answers them; the CLUSTER commands;
# SETSLOT MIGRATING/IMPORTING with -ASK and ASKING, then NODE; a bad
# [cluster] line stops the server naming file, line and key;
# redis-benchmark --cluster; redis-py's RedisCluster (kv_cluster_py.py);
# a slot migrated (MIGRATE) there and back under redis-py writers, with no
# acknowledged write lost (kv_cluster_migrate.py); weft-kvbench --cluster
# (one connection per node, MOVED and ASK followed), also while a slot
# moves under it; weft-kv --cluster.
# Usage: test_kv_cluster.sh weft-kv-server kv-cluster.sh kv_cluster_py.py
#        kv_cluster_migrate.py weft-kvbench weft-kv
set -u
server=$1 cluster=$2 pyscript=$3 migscript=$4 kvbench=$5 cli=$6
. "$(dirname "$0")/kv_checks.sh" # need, checkout, summary
need "scripts/deps.sh: redis-tools, python3-redis" redis-cli redis-benchmark /usr/bin/python3
dir=$(mktemp -d)
trap '"$cluster" stop -d "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT

# Keys with hash tags, the braces escaped: tests/check_deps.sh would read
# a literal one as the shell's. U1 and U2 are "{user1000}.following" and
# "{user1000}.followers", KA "{a}x", KB "{b}x", T "{tag17}", TA and TB
# "{tag17}a" and "{tag17}b".
U1=$'\x7buser1000\x7d.following' U2=$'\x7buser1000\x7d.followers'
KA=$'\x7ba\x7dx' KB=$'\x7bb\x7dx'
T=$'\x7btag17\x7d' TA=$'\x7btag17\x7da' TB=$'\x7btag17\x7db'

# Fixed ports (every node's config names the others'): a random base, and
# another if one of them is taken (other tests may run at the same time).
started=0
for _ in 1 2 3 4 5; do
  base=$((20000 + RANDOM % 9000))
  if "$cluster" start -n 3 -p "$base" -d "$dir" -s "$server" >"$dir/start.out" 2>&1; then
    started=1
    break
  fi
done
[ $started = 1 ] || { echo "FAIL: the cluster did not start:"; cat "$dir/start.out"; exit 1; }
p1=$base p2=$((base + 1)) p3=$((base + 2))
r() { timeout 10 redis-cli -p "$1" "${@:2}" 2>&1; }
rc() { timeout 10 redis-cli -c -p "$1" "${@:2}" 2>&1; }
id_of() { r "$1" cluster myid; }
id1=$(id_of "$p1") id2=$(id_of "$p2") id3=$(id_of "$p3")

# ---- slots and redirections ----
checkout kv_cluster_keyslot_foo 12182 "$(r "$p1" cluster keyslot foo)"
checkout kv_cluster_keyslot_bar 5061 "$(r "$p1" cluster keyslot bar)"
checkout kv_cluster_keyslot_crc_vector 12739 "$(r "$p1" cluster keyslot 123456789)"
checkout kv_cluster_keyslot_hash_tag "$(r "$p1" cluster keyslot "$U1")" \
  "$(r "$p1" cluster keyslot "$U2")"
checkout kv_cluster_moved "MOVED 12182 127.0.0.1:$p3" "$(r "$p1" set foo x)"
checkout kv_cluster_owner_serves OK "$(r "$p3" set foo x)"
checkout kv_cluster_crossslot "CROSSSLOT Keys in request don't hash to the same slot" \
  "$(r "$p1" mset a 1 b 2)"
checkout kv_cluster_crossslot_before_moved \
  "CROSSSLOT Keys in request don't hash to the same slot" "$(r "$p2" del foo bar)"
checkout kv_cluster_hash_tag_mset OK \
  "$(rc "$p1" mset "$U1" 1 "$U2" 2)"
checkout kv_cluster_hash_tag_mget "$(printf '1\n2')" \
  "$(rc "$p2" mget "$U1" "$U2")"
# MULTI: a key of another slot fails the transaction, as in Redis 7
# (the key tagged a is node 3's; redis-cli prints a blank line after an
# error here).
checkout kv_cluster_multi_crossslot \
  "$(printf "OK\nQUEUED\nCROSSSLOT Keys in request don't hash to the same slot\n\nEXECABORT Transaction discarded because of previous errors.")" \
  "$(printf "multi\nset $KA 1\nset $KB 1\nexec\n" | r "$p3")"
checkout kv_cluster_asking_readonly "$(printf 'OK\nOK\nOK')" \
  "$(printf 'asking\nreadonly\nreadwrite\n' | r "$p1")"

# ---- redis-cli -c: keys on every node ----
for i in $(seq 0 59); do
  out=$(rc "$p1" set "key:$i" "value:$i")
  [ "$out" = OK ] || checkout "kv_cluster_cli_set_key:$i" OK "$out"
done
bad=0
for i in $(seq 0 59); do
  port=$((base + i % 3)) # read from every node in turn, redirected
  [ "$(rc "$port" get "key:$i")" = "value:$i" ] || bad=$((bad + 1))
done
checkout kv_cluster_cli_get_every_key 0 "$bad"
for p in "$p1" "$p2" "$p3"; do
  n=$(r "$p" dbsize)
  checkout "kv_cluster_keys_on_node_$p" yes "$([ "$n" -gt 0 ] && echo yes || echo "no ($n keys)")"
done
checkout kv_cluster_countkeysinslot 1 "$(r "$p3" cluster countkeysinslot 12182)"
checkout kv_cluster_getkeysinslot foo "$(r "$p3" cluster getkeysinslot 12182 10)"

# ---- CLUSTER NODES / SLOTS / SHARDS / INFO ----
nodes=$(r "$p1" cluster nodes)
checkout kv_cluster_nodes_lines 3 "$(echo "$nodes" | grep -c ' connected')"
checkout kv_cluster_nodes_myself "$id1 127.0.0.1:$p1@$((p1 + 1000)) myself,master - 0 0 1 connected 0-5460" \
  "$(echo "$nodes" | grep myself)"
checkout kv_cluster_slots_first "$(printf '0\n5460\n127.0.0.1\n%s\n%s' "$p1" "$id1")" \
  "$(r "$p1" cluster slots | head -5)"
checkout kv_cluster_shards_first "$(printf 'slots\n0\n5460\nnodes\nid\n%s' "$id1")" \
  "$(r "$p1" cluster shards | head -6)"
checkout kv_cluster_info_state "cluster_state:ok" "$(r "$p2" cluster info | head -1 | tr -d '\r')"
checkout kv_cluster_info_enabled "cluster_enabled:1" \
  "$(r "$p2" info cluster | grep cluster_enabled | tr -d '\r')"

# ---- a slot moves: MIGRATING/IMPORTING, ASK and ASKING, then NODE ----
# "tag17" hashes to an empty slot of node 1 (nothing above used it).
s=$(r "$p1" cluster keyslot "$T")
checkout kv_cluster_move_slot_empty 0 "$(r "$p1" cluster countkeysinslot "$s")"
checkout kv_cluster_setslot_migrating OK "$(r "$p1" cluster setslot "$s" migrating "$id2")"
checkout kv_cluster_setslot_importing OK "$(r "$p2" cluster setslot "$s" importing "$id1")"
checkout kv_cluster_nodes_migrating yes \
  "$(r "$p1" cluster nodes | grep -q "\[$s->-$id2\]" && echo yes)"
checkout kv_cluster_ask "ASK $s 127.0.0.1:$p2" "$(r "$p1" set "$TA" 1)"
checkout kv_cluster_importing_without_asking "MOVED $s 127.0.0.1:$p1" "$(r "$p2" set "$TA" 1)"
checkout kv_cluster_importing_with_asking "$(printf 'OK\nOK\nMOVED %s 127.0.0.1:%s' "$s" "$p1")" \
  "$(printf "asking\nset $TA 1\nget $TA\n" | r "$p2")"
checkout kv_cluster_cli_follows_ask OK "$(rc "$p1" set "$TB" 2)"
checkout kv_cluster_not_owner_migrating "ERR I'm not the owner of hash slot $s" \
  "$(r "$p2" cluster setslot "$s" migrating "$id3")"
checkout kv_cluster_unknown_node "ERR I don't know about node nobody" \
  "$(r "$p1" cluster setslot "$s" node nobody)"
for p in "$p1" "$p2" "$p3"; do
  checkout "kv_cluster_setslot_node_$p" OK "$(r "$p" cluster setslot "$s" node "$id2")"
done
checkout kv_cluster_moved_after_setslot "MOVED $s 127.0.0.1:$p2" "$(r "$p1" get "$TB")"
checkout kv_cluster_get_after_move 2 "$(rc "$p1" get "$TB")"
checkout kv_cluster_setslot_keys_left \
  "ERR Can't assign hashslot 12182 to a different node while I still hold keys for this hash slot." \
  "$(r "$p3" cluster setslot 12182 node "$id1")"

# ---- redis-benchmark --cluster ----
out=$(timeout 120 redis-benchmark --cluster -p "$p1" -t set,get -n 2000 -q 2>&1)
checkout kv_cluster_benchmark_masters yes \
  "$(echo "$out" | grep -q 'Cluster has 3 master nodes' && echo yes)"
checkout kv_cluster_benchmark_set_get 2 \
  "$(echo "$out" | tr '\r' '\n' | grep -cE '^(SET|GET): [0-9.]+ requests per second')"
checkout kv_cluster_benchmark_no_errors 0 "$(echo "$out" | grep -ciE 'error|MOVED|CROSSSLOT')"

# ---- redis-py's RedisCluster ----
py=$(timeout 120 /usr/bin/python3 "$pyscript" "$p2" 3 2>&1)
checkout kv_cluster_redis_py "0 failed" "$(echo "$py" | tail -1 | sed 's/.*, //')"
echo "$py" | grep FAIL

# ---- DUMP / RESTORE / MIGRATE, then a slot moved under writers ----
checkout kv_cluster_restore_foreign_payload "ERR DUMP payload version or checksum are wrong" \
  "$(r "$p3" restore foo 0 notweft replace)"
checkout kv_cluster_dump "$(printf 'WKV\001x')" "$(r "$p3" dump foo)"
checkout kv_cluster_restore_busykey "BUSYKEY Target key name already exists." \
  "$(r "$p3" restore foo 0 "$(printf 'WKV\001y')")"
checkout kv_cluster_restore_replace "$(printf 'OK\ny')" \
  "$(r "$p3" restore foo 0 "$(printf 'WKV\001y')" replace; r "$p3" get foo)"
r "$p3" set foo x >/dev/null
checkout kv_cluster_migrate_nokey NOKEY "$(r "$p1" migrate 127.0.0.1 "$p2" "" 0 1000 keys nokey)"
# A target outside the [cluster] node lines is refused (no connect).
checkout kv_cluster_migrate_refused_outside_config \
  "ERR MIGRATE target 127.0.0.1:1 is not a node of this server's [cluster] config; set [kv] migrate_any_host = yes to allow any host" \
  "$(r "$p3" migrate 127.0.0.1 1 foo 0 500)"
checkout kv_cluster_migrate_kept_on_refusal x "$(r "$p3" get foo)"
mig=$(timeout 120 /usr/bin/python3 "$migscript" "$p1" "$p2" "$p3" 2>&1)
checkout kv_cluster_migrate_under_load "0 failed" "$(echo "$mig" | tail -1 | sed 's/.*, \([0-9]* failed\).*/\1/')"
echo "$mig" | grep FAIL

# ---- weft-kv --cluster ----
rp1=$((p1 + 1000)) # node 1's RPC port
wkv() { timeout 10 "$cli" --cluster --connect "127.0.0.1:$rp1" "$@" 2>&1; }
checkout kv_cluster_weft_kv_moved "MOVED 12182 127.0.0.1:$((p3 + 1000))" \
  "$(timeout 10 "$cli" --connect "127.0.0.1:$rp1" get foo 2>&1)"
checkout kv_cluster_weft_kv_follows x "$(wkv get foo)"
checkout kv_cluster_weft_kv_set_get "$(printf 'OK\nw')" "$(wkv set bar w; wkv get bar)"
checkout kv_cluster_weft_kv_rpc_slots "$((p1 + 1000))" "$(wkv cluster slots | sed -n 4p)"

# ---- weft-kvbench --cluster, and a slot moved under its load ----
bench() { timeout 60 "$kvbench" --cluster --connect "127.0.0.1:$rp1" \
  --records 3000 --warmup 0 --connections 2 --pipeline 8 "$@" 2>&1; }
out=$(bench --duration 1)
checkout kv_cluster_kvbench_no_errors "0 errors" \
  "$(echo "$out" | sed -n 's/^run .*, \([0-9]* errors\)$/\1/p')"
users() { # the user* keys node $1 holds
  r "$1" keys 'user*' | grep -c user
}
checkout kv_cluster_kvbench_keys_everywhere 3000 \
  "$(($(users "$p1") + $(users "$p2") + $(users "$p3")))"
for p in "$p1" "$p2" "$p3"; do
  n=$(users "$p")
  checkout "kv_cluster_kvbench_keys_on_$p" yes "$([ "$n" -gt 500 ] && echo yes || echo "no ($n)")"
done
# Sixteen slots from the hottest key's (zipfian: key 0) move from their
# node to the next while weft-kvbench reads and writes, following ASK and
# then MOVED. Node i owns slots (i-1)*16384/3 to i*16384/3-1
# (kv-cluster.sh).
hot=user000000000000
first=$(r "$p1" cluster keyslot "$hot")
i=$((first * 3 / 16384 + 1))
[ $((i * 16384 / 3)) -le "$first" ] && i=$((i + 1))
last=$((first + 15))
[ "$last" -ge $((i * 16384 / 3)) ] && last=$((i * 16384 / 3 - 1))
src=$((base + i - 1))
dst=$((src == p3 ? p1 : src + 1))
src_id=$(id_of "$src") dst_id=$(id_of "$dst")
in_slots=0
for s in $(seq "$first" "$last"); do
  in_slots=$((in_slots + $(r "$src" cluster countkeysinslot "$s")))
done
bench --no-load --duration 4 >"$dir/bench.out" 2>&1 &
bench_pid=$!
sleep 1
for s in $(seq "$first" "$last"); do
  r "$dst" cluster setslot "$s" importing "$src_id" >/dev/null
  r "$src" cluster setslot "$s" migrating "$dst_id" >/dev/null
  while keys=$(r "$src" cluster getkeysinslot "$s" 2) && [ -n "$keys" ]; do
    # shellcheck disable=SC2086
    r "$src" migrate 127.0.0.1 "$dst" "" 0 5000 REPLACE KEYS $keys >/dev/null
  done
  for p in "$dst" "$src" "$p1" "$p2" "$p3"; do
    r "$p" cluster setslot "$s" node "$dst_id" >/dev/null
  done
done
wait "$bench_pid"
checkout kv_cluster_kvbench_migration_exit 0 "$?"
checkout kv_cluster_kvbench_migration_no_errors "0 errors" \
  "$(sed -n 's/^run .*, \([0-9]* errors\)$/\1/p' "$dir/bench.out")"
moved=0 left=0
for s in $(seq "$first" "$last"); do
  moved=$((moved + $(r "$dst" cluster countkeysinslot "$s")))
  left=$((left + $(r "$src" cluster countkeysinslot "$s")))
done
checkout kv_cluster_kvbench_migration_slots_moved "0 $in_slots" "$left $moved"
checkout kv_cluster_kvbench_migration_slots_had_keys yes \
  "$([ "$in_slots" -gt 1 ] && echo yes || echo "no ($in_slots)")"
checkout kv_cluster_kvbench_migration_keys_kept 3000 \
  "$(($(users "$p1") + $(users "$p2") + $(users "$p3")))"
checkout kv_cluster_kvbench_migration_value 100 "$(rc "$p1" strlen "$hot")"

# ---- a bad [cluster] line names the file, the line and the key ----
printf '[cluster]\nenabled = yes\nmyself = a\nnode = a 127.0.0.1:1 slots=0-99999\n' >"$dir/bad.ini"
err=$("$server" -c "$dir/bad.ini" 2>&1)
checkout kv_cluster_bad_config_named yes \
  "$(echo "$err" | grep -q 'bad.ini:4: \[cluster\] node = .*each from 0 to 16383' && echo yes)"
printf '[cluster]\nenabled = yes\nmyself = x\nnode = a 127.0.0.1:1\n' >"$dir/bad2.ini"
err=$("$server" -c "$dir/bad2.ini" -o kv.resp_listen=127.0.0.1:0 -o kv.rpc_listen=127.0.0.1:0 2>&1)
checkout kv_cluster_bad_myself yes \
  "$(echo "$err" | grep -q 'myself = "x" names no \[cluster\] node line. the nodes are: a' && echo yes)"

summary
