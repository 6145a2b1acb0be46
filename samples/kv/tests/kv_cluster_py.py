# SPDX-License-Identifier: Apache-2.0
"""redis-py's RedisCluster (Debian's python3-redis) against a weft-kv-server
cluster (samples/kv/tests/test_kv_cluster.sh): topology discovery from one node, keys
routed to every node, hash tags, pipelines, the server's CROSSSLOT, and
the CLUSTER commands' parsed replies. Prints FAIL lines and "N passed, M
failed"; exits 1 on a failure.

Usage: /usr/bin/python3 kv_cluster_py.py PORT NODES
"""
import sys

import kv_checks
from kv_checks import check, summary
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

port, nodes = int(sys.argv[1]), int(sys.argv[2])
kv_checks.prefix = "kv_cluster_py_"


rc = RedisCluster(host="127.0.0.1", port=port, decode_responses=True)
check("nodes_discovered", len(rc.get_nodes()), nodes)
for i in range(200):
    rc.set(f"key:{i}", str(i))
check("get_every_key", [rc.get(f"key:{i}") for i in range(200)],
      [str(i) for i in range(200)])
# Each node holds some of them (its own slots only).
sizes = [rc.get_redis_connection(n).dbsize() for n in rc.get_nodes()]
check("keys_on_every_node", all(s > 0 for s in sizes), True)
check("keys_total", sum(sizes) >= 200, True)
check("keyslot_server_agrees", rc.cluster_keyslot("foo"), rc.keyslot("foo"))
check("keyslot_foo", rc.cluster_keyslot("foo"), 12182)
# Hash tags: one slot, so multi-key commands work.
rc.execute_command("MSET", "{user1000}.following", "a",
                   "{user1000}.followers", "b")
check("hash_tag_mget",
      rc.execute_command("MGET", "{user1000}.following",
                         "{user1000}.followers"), ["a", "b"])
# The server's own CROSSSLOT (redis-py refuses such commands before
# sending them, so send one on a node's plain connection).
conn = rc.get_default_node().redis_connection
try:
    conn.execute_command("MSET", "a", "1", "b", "2")
    check("crossslot", "no error", "CROSSSLOT")
except ResponseError as e:
    check("crossslot", str(e), "Keys in request don't hash to the same slot")
# A pipeline spread over the nodes.
p = rc.pipeline()
for i in range(30):
    p.incr(f"counter:{i}")
check("pipeline", p.execute(), [1] * 30)
info = rc.cluster_info(target_nodes=RedisCluster.RANDOM)
check("cluster_info_state", info["cluster_state"], "ok")
check("cluster_info_known_nodes", int(info["cluster_known_nodes"]), nodes)
slot = rc.keyslot("key:1")
owner = rc.get_node_from_key("key:1")
check("countkeysinslot",
      rc.cluster_countkeysinslot(slot) >= 1, True)
check("getkeysinslot",
      "key:1" in rc.get_redis_connection(owner).execute_command(
          "CLUSTER", "GETKEYSINSLOT", slot, 1000), True)
rc.close()
sys.exit(summary())
