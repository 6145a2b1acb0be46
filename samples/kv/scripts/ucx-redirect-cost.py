#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What a ucx REDIRECT costs a client's first connect (docs/transports/ucx.md).

    samples/kv/scripts/ucx-redirect-cost.py SERVER CLIENT N
    (SERVER: weft-kv-server, CLIENT: weft-kv, of one build; N runs each)

Starts two 2-loop weft-kv-servers with their RPC listener on ucx, one with
transport.ucx.spread on and one off, and times `CLIENT set k v` (a fresh
process each time: UCX's init, one connect, one RPC) against them
alternately. A fresh process has no route, so the spread=on server keeps
every other run on loop 0 and redirects the others to loop 1 (nothing else
may connect to it meanwhile). Prints the medians of the kept, redirected
and spread=off runs. UCX_TLS and WEFT_TRANSPORT_UCX_* come from the
environment (UCX_TLS defaults to tcp); SERVER_ARGS and CLIENT_ARGS add
options to either side.
"""
import os
import random
import statistics
import subprocess
import sys
import time


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    srv, cli, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = dict(os.environ, UCX_TLS=os.environ.get("UCX_TLS", "tcp"))
    # UCX's listener does not reuse a port in TIME_WAIT: a new one each run.
    port_on = random.randrange(20000, 30000, 4)
    port_off = port_on + 2

    def server(port, spread):
        args = [srv] + os.environ.get("SERVER_ARGS", "").split() + [
            "-o", "loop.loops=2",
            "-o", f"kv.rpc_listen=ucx://127.0.0.1:{port}",
            "-o", f"kv.resp_listen=127.0.0.1:{port + 1}"]
        return subprocess.Popen(
            args, env=dict(env, WEFT_TRANSPORT_UCX_SPREAD=spread),
            stdout=subprocess.DEVNULL)

    def run(port):
        args = [cli] + os.environ.get("CLIENT_ARGS", "").split() + [
            "--connect", f"ucx://127.0.0.1:{port}", "set", "k", "v"]
        t = time.perf_counter()
        r = subprocess.run(args, env=env, stdout=subprocess.DEVNULL)
        if r.returncode != 0:
            raise SystemExit(f"{cli} failed against port {port}")
        return (time.perf_counter() - t) * 1e3

    servers = [server(port_on, "on"), server(port_off, "off")]
    try:
        time.sleep(1.5)
        kept, redirected, off = [], [], []
        for i in range(n):
            (kept if i % 2 == 0 else redirected).append(run(port_on))
            off.append(run(port_off))
    finally:
        for s in servers:
            s.terminate()
            s.wait()
    m = statistics.median
    print(f"n={n}: spread=on kept {m(kept):.1f} ms, spread=on redirected "
          f"{m(redirected):.1f} ms, spread=off {m(off):.1f} ms; redirected "
          f"- off = {m(redirected) - m(off):.1f} ms, kept - off = "
          f"{m(kept) - m(off):.1f} ms")


if __name__ == "__main__":
    main()
