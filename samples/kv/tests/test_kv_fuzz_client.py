#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The KV fuzzer's client (tests/kv_fuzz_client.py) against a stale -ASK.

Defect (h) of issue 27 was the fuzzer's own: a pipeline's commands that a
migrating node answered with -ASK were resent one after the other, the
last ones seconds later, each straight to the ASK target with ASKING. By
then the slot could have moved on and that target import it again from a
node that holds the key: it serves an ASKING command as Redis does (the
owner sent the client there), so a read of the key answered nil and a
write went to a node that then took the owner's copy over it.

Here, deterministically: node A owns the key, node B imports its slot
from A (A not yet migrating), and the client resends a GET whose -ASK to B
came from A earlier. The GET must read A's value: the client asks A again
instead of following the old ASK.

Usage: test_kv_fuzz_client.py --server PATH/weft-kv-server
"""
import argparse
import sys
import time
import types

import kv_fuzz as F
import kv_fuzz_client as C
import kv_fuzz_model as M
from kv_fuzz_model import Err


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    o = ap.parse_args()
    servers = F.Servers(o.server, 1)
    try:
        ports = servers.cluster(2)
        fz = C.Fuzz(types.SimpleNamespace(seed=1, skip=set(), hang=20, ops=0))
        client = C.Client(fz, C.Group("cluster", ports, None), 0)
        client.router = C.Router(client, ports, None)
        key = "{stale-ask}k"
        slot = M.keyslot(key)
        a = client.router.slots[slot]
        b = next(p for p in ports if p != a)
        ca, cb = client.router.conn(a), client.router.conn(b)
        ida = ca.call(["CLUSTER", "MYID"]).decode()
        if ca.call(["SET", key, "on-a"]) != M.Simple("OK"):
            raise SystemExit("SET on the owner failed")
        if cb.call(["CLUSTER", "SETSLOT", slot, "IMPORTING", ida]) != \
                M.Simple("OK"):
            raise SystemExit("SETSLOT IMPORTING failed")
        # A's -ASK to B from an earlier round of the slot's migration.
        now = time.monotonic() * 1000
        ask = Err(f"ASK {slot} 127.0.0.1:{b}")
        got = []
        client.resend(["GET", key], ask, lambda a_, r, ts, tr: got.append(r),
                      [(a, ask, now - 3000, now - 2990)], fresh=False)
        if got != [b"on-a"]:
            print(f"FAIL: GET {key} after an old -ASK read {got}, want "
                  f"[b'on-a'] (node {a} holds it; {b} imports the slot and "
                  "served the ASKING GET without it)")
            return 1
        print("test_kv_fuzz_client: an old -ASK is asked again: ok")
        return 0
    finally:
        for name, what, tail in servers.stop():
            print(f"server {name} {what}:\n{tail}")


if __name__ == "__main__":
    sys.exit(main())
