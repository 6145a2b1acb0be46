# SPDX-License-Identifier: Apache-2.0
"""A slot moves between two weft-kv-server nodes while clients write to it
(samples/kv/tests/test_kv_cluster.sh): no acknowledged write may be lost.

Writer threads (redis-py's RedisCluster, which follows MOVED and ASK) each
own a set of keys, half of them in the slot being moved, and SET or DEL
them at random, remembering the last acknowledged value of each key (the
model). Meanwhile the slot is migrated from node A to node B the way
redis-cli --cluster reshard does (SETSLOT IMPORTING on B, MIGRATING on A,
GETKEYSINSLOT + MIGRATE until A has none, SETSLOT NODE on every node),
then back again. Afterwards every key must read as the model says, and
only the slot's owner may hold its keys. Prints FAIL lines and "N passed,
M failed"; exits 1 on a failure.

Usage: /usr/bin/python3 kv_cluster_migrate.py PORT_A PORT_B PORT_C
"""
import logging
import random
import sys
import threading
import time

import kv_checks
import redis
from kv_checks import check, summary
from redis.cluster import RedisCluster

# redis-py logs every ASK and MOVED it follows with a traceback.
logging.disable(logging.CRITICAL)
ports = [int(p) for p in sys.argv[1:4]]
TAG = "{b}"  # node A's slot (3300 in samples/kv/scripts/kv-cluster.sh's layout)
WRITERS, KEYS_PER_WRITER = 4, 60
kv_checks.prefix = "kv_cluster_migrate_"


nodes = [redis.Redis(port=p, decode_responses=True) for p in ports]
ids = [n.execute_command("CLUSTER", "MYID") for n in nodes]
slot = nodes[0].execute_command("CLUSTER", "KEYSLOT", TAG)
stop = threading.Event()
models = [dict() for _ in range(WRITERS)]
errors = []
acked = [0] * WRITERS


def writer(t):
    rc = RedisCluster(host="127.0.0.1", port=ports[0], decode_responses=True)
    rnd = random.Random(t)
    keys = [(f"{TAG}w{t}:{j}" if j % 2 == 0 else f"w{t}:{j}")
            for j in range(KEYS_PER_WRITER)]
    seq = 0
    while not stop.is_set():
        key = rnd.choice(keys)
        seq += 1
        try:
            if rnd.random() < 0.1:
                rc.delete(key)
                models[t][key] = None
            else:
                value = f"{t}:{seq}"
                rc.set(key, value)
                models[t][key] = value
            acked[t] += 1
        except Exception as e:  # the outcome is unknown: a failure
            errors.append(f"{key}: {e!r}")
            return
    rc.close()


def owner_node():
    """The index of the node CLUSTER SLOTS names for the slot."""
    shards = nodes[0].execute_command("CLUSTER", "SLOTS")
    for first, last, master, *_ in shards:
        if first <= slot <= last:
            return ports.index(int(master[1]))
    return -1


def migrate(src, dst):
    """Moves the slot from node src to node dst, as redis-cli does."""
    a, b = nodes[src], nodes[dst]
    b.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
    a.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
    batches = 0
    while True:
        keys = a.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 10)
        if not keys:
            break
        a.execute_command("MIGRATE", "127.0.0.1", ports[dst], "", 0, 5000,
                          "REPLACE", "KEYS", *keys)
        batches += 1
        time.sleep(0.01)  # let the writers in between batches
    for n in [b, a] + [nodes[i] for i in range(3) if i not in (src, dst)]:
        n.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
    return batches


threads = [threading.Thread(target=writer, args=(t,)) for t in range(WRITERS)]
for th in threads:
    th.start()
time.sleep(0.5)  # keys in the slot on node A first
batches = migrate(0, 1)
check("owner_after_first_move", owner_node(), 1)
time.sleep(0.3)
batches += migrate(1, 0)
check("owner_after_second_move", owner_node(), 0)
time.sleep(0.3)
stop.set()
for th in threads:
    th.join()
check("writer_errors", errors[:3], [])
check("writes_acknowledged", sum(acked) > 200, True)
check("batches_moved", batches > 2, True)

# Every key as the model says, read through the cluster.
rc = RedisCluster(host="127.0.0.1", port=ports[2], decode_responses=True)
lost = []
for m in models:
    for key, want in m.items():
        got = rc.get(key)
        if got != want:
            lost.append(f"{key}: got {got!r}, want {want!r}")
check("no_acknowledged_write_lost", lost[:5], [])
# The slot's keys only on its owner (node A again).
in_slot = sum(1 for m in models for k, v in m.items()
              if k.startswith(TAG) and v is not None)
counts = [n.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) for n in nodes]
check("slot_keys_on_owner_only", counts, [in_slot, 0, 0])
rc.close()
print(f"{sum(acked)} writes, {batches} MIGRATE batches")
sys.exit(summary())
