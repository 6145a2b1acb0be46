#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A stateful, concurrent fuzzer for weft-kv-server (samples/kv).

Starts its own servers (one node with 2 loops and a password; a 3-node
cluster with 2 loops each), then runs seeded clients against them for a
bounded time. Every reply is checked against a reference model
(kv_fuzz_model.py): each client owns a namespace of keys (hash tags pin
them to one slot each), so its model is exact; shared counters see only
INCRBY (their final value must be the sum of the acknowledged increments)
and transfer pairs only MULTI {INCRBY a x; DECRBY b x} (every read of the
pair sums to 0). A migrator moves the clients' slots between the cluster
nodes all the while (SETSLOT IMPORTING/MIGRATING, GETKEYSINSLOT, MIGRATE,
SETSLOT NODE). A watchdog fails the run when any request waits longer
than --hang seconds for its reply.

--seed S replays client i's command sequence exactly (its generator is
seeded from S and i only); how the clients interleave is up to the
scheduler. Prints the seed, counts and "N passed, N failed"; exits 1 on a
failure.

Usage: kv_fuzz.py --server PATH/weft-kv-server [--seed S] [--seconds T]
       [--skip FAMILY,...] [--only FAMILY,...] [--clients N] [--hang S]
       [--mode single|cluster|both] [--ops N]
       kv_fuzz.py --redis PATH/redis-server ...   (checks the model itself)
Families: FAMILIES in kv_fuzz_client.py; samples/kv/README.md "Fuzzing".
"""
import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import kv_fuzz_model as m
from kv_fuzz_client import (FAMILIES, KNOWN, PASSWORD, Client, Closed,
                            Failure, Fuzz, Group, Router, short)
from kv_fuzz_model import Err, Simple, encode


# ---- servers ----


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_log(proc, log, text, what):
    """Waits (generously: sanitizer builds start slowly) for `text` in the
    server's log; the line that has it."""
    for _ in range(600):
        with open(log, errors="replace") as f:
            for line in f:
                if text in line:
                    return line
        if proc.poll() is not None:
            return None
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not start in 60 s: {open(log).read()}")


class Servers:
    """The weft-kv-server processes of the run, in a temporary directory."""

    def __init__(self, path, loops):
        self.path, self.loops = path, loops
        self.dir = tempfile.mkdtemp(prefix="kv-fuzz-")
        self.procs = []  # (name, Popen, log)
        self.reported = set()  # names dead() returned
        self.stopping = False  # stop() sent SIGTERM: no exit is a crash

    def spawn(self, name, args, path=None):
        log = os.path.join(self.dir, name + ".log")
        with open(log, "w") as f:
            p = subprocess.Popen([path or self.path] + args,
                                 stdin=subprocess.DEVNULL,
                                 stdout=f, stderr=subprocess.STDOUT)
        self.procs.append((name, p, log))
        return p, log

    def single(self):
        """One node, requirepass set: its RESP port."""
        p, log = self.spawn("single", [
            "-o", f"loop.loops={self.loops}", "-o", "kv.rpc_listen=",
            "-o", "kv.resp_listen=127.0.0.1:0",
            "-o", f"kv.requirepass={PASSWORD}"])
        line = wait_log(p, log, "resp on tcp://127.0.0.1:", "the server")
        if line is None:
            raise RuntimeError(f"the server exited: {open(log).read()}")
        return int(line.rsplit(":", 1)[1])

    def redis(self, path):
        """A redis-server, for checking the model itself (--redis)."""
        for _attempt in range(5):
            port = free_port()
            p, log = self.spawn("redis", path=path, args=[
                "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--requirepass", PASSWORD])
            if wait_log(p, log, "Ready to accept connections", "redis"):
                return port
            self.procs.pop()
        raise RuntimeError("redis-server did not start in 5 attempts")

    def cluster(self, n):
        """n nodes as samples/kv/scripts/kv-cluster.sh starts them (slots split
        evenly), on free ports: their RESP ports."""
        for _attempt in range(5):
            ports = [free_port() for _ in range(n)]
            rpcs = [free_port() for _ in range(n)]
            lines = [f"node = node{i} 127.0.0.1:{ports[i]} "
                     f"rpc=127.0.0.1:{rpcs[i]} slots={i * 16384 // n}-"
                     f"{(i + 1) * 16384 // n - 1}" for i in range(n)]
            started = []
            for i in range(n):
                ini = os.path.join(self.dir, f"node{i}.ini")
                with open(ini, "w") as f:
                    f.write(f"[loop]\nloops = {self.loops}\n[kv]\n"
                            f"resp_listen = 127.0.0.1:{ports[i]}\n"
                            f"rpc_listen = 127.0.0.1:{rpcs[i]}\n"
                            f"[cluster]\nenabled = yes\nmyself = node{i}\n"
                            + "\n".join(lines) + "\n")
                started.append(self.spawn(f"node{i}", ["-c", ini]))
            if all(wait_log(p, log, ": resp on ", f"node {log}")
                   for p, log in started):
                return ports
            for p, _ in started:  # a port was taken: again, elsewhere
                p.kill()
                p.wait()
            self.procs = [x for x in self.procs if x[1].poll() is None]
        raise RuntimeError("the cluster did not start in 5 attempts")

    def dead(self):
        """(name, exit code, log tail) of a server that exited (not one
        that stop() ends: the watchdog may look once more meanwhile)."""
        for name, p, log in self.procs:
            if p.poll() is not None and not self.stopping:
                self.reported.add(name)
                return name, p.returncode, open(log, errors="replace").read()[
                    -3000:]
        return None

    def stop(self):
        """Stops every server (SIGTERM, as an operator would); the ones
        that exited badly or whose log has a sanitizer report, with the
        log's tail."""
        self.stopping = True
        for _, p, _ in self.procs:
            if p.poll() is None:
                p.terminate()
        bad = []
        for name, p, log in self.procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                bad.append((name, "did not stop in 60 s after SIGTERM", ""))
                continue
            text = open(log, errors="replace").read()
            report = [x for x in SANITIZER_REPORTS if x in text]
            if name in self.reported:
                continue
            if p.returncode not in (0, -signal.SIGTERM) or report:
                bad.append((name, f"exited with {p.returncode}"
                            + (f", {report[0]!r} in its log" if report
                               else ""), text[-3000:]))
        return bad


SANITIZER_REPORTS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:", "WARNING: ThreadSanitizer")


class Silent:
    """A host that accepts connections and never answers (MIGRATE's
    target for known defect (c))."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return


# ---- the migrator ----


FILLER = 20000  # keys per node that stay put


class Migrator(threading.Thread):
    """Moves the clients' and the shared keys' slots between the cluster's
    nodes, as redis-cli --cluster reshard does, until the run ends."""

    def __init__(self, fz, group, slots, eslots):
        super().__init__(name="migrator", daemon=True)
        self.fz, self.group, self.slots = fz, group, sorted(slots)
        self.eslots = sorted(eslots)  # moved with SETSLOT NODE alone
        self.rng = m.client_rng(fz.opts.seed, "migrator")
        self.wait_since, self.last = None, None

    def call(self, port, *a):
        while self.fz.frozen() and not self.fz.stop.is_set():
            time.sleep(0.01)  # a failure report reads the nodes
        self.last = f"{port}: {' '.join(map(str, a))}"
        t = round(time.monotonic() * 1000 - self.fz.t0)
        r = self.router.conn(port).call(list(a))
        self.fz.count(commands=1, checks=1)
        if a[0] != "CLUSTER" or a[1] == "SETSLOT":  # for failure reports
            slot = a[2] if a[0] == "CLUSTER" else m.keyslot(a[-1])
            with self.fz.lock:
                log = self.fz.slot_log.setdefault(slot, [])
                log.append((t, round(time.monotonic() * 1000 - self.fz.t0),
                            short(self.last, 60), short(r, 30)))
                del log[:-40]
        return r

    def ok(self, port, *a):
        r = self.call(port, *a)
        if r != Simple("OK"):
            raise Failure(f"{self.last} answered {short(r)}")

    def run(self):
        try:
            self.router = Router(self, self.group.ports, None)
            ports = self.group.ports
            ids = {p: self.call(p, "CLUSTER", "MYID").decode() for p in ports}
            owner = dict(self.router.slots)
            if "filler" not in self.fz.opts.skip:
                self.fill(owner)
            while not self.fz.stop.is_set():
                direct = self.eslots and self.rng.random() < 0.3
                slot = self.rng.choice(self.eslots if direct else self.slots)
                src = owner[slot]
                dst = self.rng.choice([p for p in ports if p != src])
                if direct:
                    if not self.move_direct(slot, src, dst, ids):
                        continue
                else:
                    self.move(slot, src, dst, ids)
                owner[slot] = dst
                self.fz.count(migrations=1)
                self.fz.stop.wait(self.rng.uniform(0.05, 0.3))
        except Failure as e:
            self.fz.fail("migrator", str(e))
        except Closed as e:
            if not self.fz.abort.is_set():
                self.fz.fail("migrator", f"connection lost: {e}; last "
                             f"{self.last}")
        finally:
            if getattr(self, "router", None):
                self.router.close()

    def move(self, slot, src, dst, ids):
        self.ok(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
        self.ok(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
        while True:
            keys = self.call(src, "CLUSTER", "GETKEYSINSLOT", slot, 10)
            if not isinstance(keys, list):
                raise Failure(f"{self.last} answered {short(keys)}")
            if not keys:
                break
            r = self.call(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000,
                          "REPLACE", "KEYS", *keys)
            if r not in (Simple("OK"), Simple("NOKEY")):
                raise Failure(f"{self.last} answered {short(r)}")
        order = [dst, src] + [p for p in self.group.ports
                              if p not in (src, dst)]
        if self.rng.random() < 0.3:  # not redis-cli's order: still safe
            self.rng.shuffle(order)
        for p in order:
            self.ok(p, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst])


    def fill(self, owner):
        """FILLER keys on each node, in slots that never move: the walks
        over the store (COUNTKEYSINSLOT, SETSLOT NODE's check) take
        longer, and commands meet them halfway."""
        moving = set(self.slots) | set(self.eslots)
        for port in self.group.ports:
            tag = next(f"f{port}x{i}" for i in range(100000)
                       if owner[m.keyslot("{" + f"f{port}x{i}" + "}")] == port
                       and m.keyslot("{" + f"f{port}x{i}" + "}") not in moving)
            c = self.router.conn(port)
            for i in range(0, FILLER, 1000):
                c.send(b"".join(encode(["SET", f"{{{tag}}}{j}", j])
                                for j in range(i, min(i + 1000, FILLER))))
                got = c.read(min(1000, FILLER - i))
                if any(r != Simple("OK") for r in got):
                    raise Failure(f"filler SET on {port}: {short(got)}")
            self.fz.count(commands=FILLER)

    def move_direct(self, slot, src, dst, ids):
        """An empty slot given away with SETSLOT NODE alone, the owner
        first (it refuses while it holds keys of the slot: False)."""
        r = self.call(src, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
        if isinstance(r, Err) and "still hold keys" in r:
            return False
        if r != Simple("OK"):
            raise Failure(f"{self.last} answered {short(r)}")
        for p in self.group.ports:
            if p != src:
                self.ok(p, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
        return True


# ---- the watchdog and the end ----


def watchdog(fz, servers):
    """Fails the run when a request waits longer than the hang bound or a
    server exits; then aborts it."""
    while not fz.abort.wait(0.25):
        now = time.monotonic()
        for c in fz.clients:
            since = c.wait_since
            bound = fz.opts.hang + getattr(c, "allowance", 0)
            if since is not None and now - since > bound:
                fz.fail(c.name, f"no reply for {now - since:.1f} s (the "
                        f"hang bound is {fz.opts.hang} s); waiting for "
                        f"{c.last}")
                fz.abort.set()
                fz.stop.set()
                return
        dead = servers.dead()
        if dead:
            fz.fail(dead[0], f"the server exited with {dead[1]}:\n{dead[2]}")
            fz.abort.set()
            fz.stop.set()
            return


class Final:
    """The end-of-run checks, each over fresh connections."""

    def __init__(self, fz):
        self.fz = fz
        self.wait_since, self.last, self.name = None, None, "final"

    def client(self, c):
        """Every key of a client reads as its model says."""
        if c.failed:
            return
        r = Router(self, c.group.ports, c.group.auth)
        c.router = r
        try:
            for keys in c.keys.values():
                c.batch([["GET", k] for k in keys])
        except (Failure, Closed) as e:
            self.fz.fail(c.name, f"final read: {e}\n  last commands: "
                         + "\n    ".join(map(str, c.history[-12:])))
        finally:
            r.close()

    def group(self, g):
        """Counters: the acknowledged increments, no more than were sent;
        transfer pairs: 0 in all."""
        r = Router(self, g.ports, g.auth)
        try:
            for k in g.counters:
                v = r.conn(r.port_of(k)).call(["GET", k])
                n = int(v) if v is not None else 0
                self.fz.count(checks=1)
                if not g.acked[k] <= n <= g.sent[k]:
                    self.fz.fail(f"{g.name} {k}", f"counter is {n}, "
                                 f"acknowledged increments sum to "
                                 f"{g.acked[k]}, sent {g.sent[k]}")
            for a, b in g.pairs:
                v = r.conn(r.port_of(a)).call(["MGET", a, b])
                self.fz.count(checks=1)
                if sum(int(x) for x in v if x is not None) != 0:
                    self.fz.fail(f"{g.name} {a}", f"transfer pair reads {v}")
        except Closed as e:
            self.fz.fail(f"{g.name} final", f"connection lost: {e}")
        finally:
            r.close()


# ---- main ----


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", help="weft-kv-server (required without "
                    "--redis)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=float(
        os.environ.get("WEFT_KV_FUZZ_SECONDS", 20)))
    ap.add_argument("--ops", type=int, default=0,
                    help="stop each client after this many operations")
    ap.add_argument("--clients", type=int, default=4,
                    help="clients on the single node (the cluster gets 3)")
    ap.add_argument("--loops", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--mode", choices=["single", "cluster", "both"],
                    default="both")
    ap.add_argument("--hang", type=float, default=float(
        os.environ.get("WEFT_KV_FUZZ_HANG", 20)),
        help="seconds a reply may take before the run fails")
    ap.add_argument("--skip", default=os.environ.get("WEFT_KV_FUZZ_SKIP", ""),
                    help="families to leave out, comma-separated: "
                    + ", ".join(FAMILIES))
    ap.add_argument("--only", default="", help="run just these families")
    ap.add_argument("--redis", metavar="REDIS_SERVER",
                    help="check the model against this redis-server (one "
                    "node; no cluster, no weft-only families)")
    o = ap.parse_args()
    o.skip = {s for s in o.skip.split(",") if s}
    if o.only:
        o.skip |= set(FAMILIES) - set(o.only.split(","))
    bad = o.skip - set(FAMILIES)
    if bad:
        ap.error(f"unknown families {sorted(bad)}; known: "
                 + ", ".join(FAMILIES))
    if not o.server and not o.redis:
        ap.error("--server PATH/weft-kv-server is required")
    if o.redis and not os.access(o.redis, os.X_OK):
        why = f"{o.redis} is missing (scripts/deps.sh: redis-server)"
        print(f"SKIPPED test_kv_fuzz_model: {why}")
        with open(os.environ.get("WEFT_TEST_SKIP_LOG", os.devnull), "a") as f:
            f.write(f"SKIPPED test_kv_fuzz_model: {why}\n")
        sys.exit(77)
    if o.redis:  # weft's own limits and MIGRATE target
        o.skip |= {"keys-flood", "migrate-silent"}
    if o.seed is None:
        o.seed = random.SystemRandom().randrange(1 << 31)
    return o


def main():
    o = parse_args()
    # Killed (ctest's timeout, kv-fuzz.sh stopped): the servers go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    fz = Fuzz(o)
    servers = Servers(o.server, o.loops)
    silent = Silent()
    groups, cid = [], 0
    print(f"kv_fuzz: seed {o.seed} (replay: --seed {o.seed}), {o.seconds:g} s"
          f", mode {'redis' if o.redis else o.mode}, skip {','.join(sorted(o.skip)) or 'none'}",
          flush=True)
    for name in sorted(o.skip & set(KNOWN)):
        print(f"kv_fuzz: skipping {name}: known defect {KNOWN[name]}")
    try:
        if o.redis:  # the model against Redis itself
            m.MAX_VALUE = 512 << 20  # proto-max-bulk-len
            g = Group("redis", [servers.redis(o.redis)], PASSWORD)
            groups.append((g, o.clients))
        elif o.mode in ("single", "both"):
            g = Group("single", [servers.single()], PASSWORD)
            groups.append((g, o.clients))
        if o.mode in ("cluster", "both") and not o.redis:
            g = Group("cluster", servers.cluster(o.nodes), None)
            groups.append((g, 3))
        for g, n in groups:
            g.silent_port = silent.port
            for _ in range(n):
                fz.clients.append(Client(fz, g, cid))
                cid += 1
            if g.cluster and "migrator" not in o.skip:
                slots = {m.keyslot("{" + t + "}") for c in fz.clients
                         if c.group is g for t in c.tags} | \
                    {m.keyslot(g.counters[0]), m.keyslot(g.pairs[0][0])}
                eslots = {m.keyslot(c.ekeys[0]) for c in fz.clients
                          if c.group is g} \
                    if "setslot-direct" not in o.skip else set()
                fz.clients.append(Migrator(fz, g, slots, eslots))
        dog = threading.Thread(target=watchdog, args=(fz, servers),
                               daemon=True)
        for c in fz.clients:
            c.start()
        dog.start()
        end = time.monotonic() + o.seconds
        while time.monotonic() < end and not fz.stop.is_set():
            if o.ops and not any(c.is_alive() for c in fz.clients
                                 if isinstance(c, Client)):
                break
            time.sleep(0.1)
        fz.stop.set()
        for c in fz.clients:
            c.join(timeout=2.5 * o.hang + 10)
        if not fz.abort.is_set() and not servers.dead():
            # The final reads run under the watchdog too.
            final = Final(fz)
            everyone, fz.clients = fz.clients, [final]
            for c in [c for c in everyone if isinstance(c, Client)]:
                final.client(c)
            for g, _ in groups:
                final.group(g)
            fz.abort.set()
    finally:
        for name, what, tail in servers.stop():
            fz.fail(name, f"the server {what}:\n{tail}")
    cs = fz.counts
    print(f"kv_fuzz: seed {o.seed}: {cs['sequences']} sequences, "
          f"{cs['commands']} commands, {cid} clients, {cs['checks']} model "
          f"checks, {cs['migrations']} slot migrations, {cs['reconnects']} "
          f"reconnects, {cs['flooded']} KEYS floods")
    w, who, what = fz.longest
    print(f"kv_fuzz: longest wait for a reply {w:.2f} s (the hang bound is "
          f"{o.hang:g} s): {who}, {short(str(what), 80)}")
    nfail = len(fz.failures)
    print(f"{cs['checks'] - nfail} passed, {nfail} failed")
    if nfail:
        print(f"kv_fuzz: replay with --seed {o.seed}; server logs were in "
              f"{servers.dir}")
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
