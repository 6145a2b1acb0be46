# SPDX-License-Identifier: Apache-2.0
"""The KV fuzzer's clients (samples/kv/tests/kv_fuzz.py): connections that the
watchdog can see waiting, redirections followed as Redis Cluster clients
do, and one method per operation family, each checking every reply
against the model (kv_fuzz_model.py)."""
import socket
import threading
import time
import traceback

import kv_fuzz_model as m
from kv_fuzz_model import Err, Simple, encode

# Operation families, each skippable with --skip. The weights are out of
# their sum. Families that reach a known defect say which in KNOWN.
FAMILIES = {
    "strings": 30, "multi": 10, "pipeline-split": 5, "shared": 6,
    "transfer": 5, "scan": 3, "keys": 2, "partial": 3, "malformed": 2,
    "abandon": 2,
    "auth": 2, "inline": 2, "inline-quotes": 1, "restore": 2,
    "cluster": 3, "cluster-multi": 1, "migrate-silent": 1, "migrator": 0,
    "restore-busykey": 1, "auth-limits": 1, "keys-flood": 3,
    "setslot-direct": 3, "filler": 0,
}
KNOWN = {
    "cluster-multi": "(a) MULTI with CLUSTER COUNTKEYSINSLOT/GETKEYSINSLOT "
    "deadlocks two loops",
    "setslot-direct": "(b) SETSLOT NODE strands a concurrent SET behind "
    "MOVED",
    "migrate-silent": "(c) MIGRATE to a silent host blocks loops",
    "inline-quotes": "(f) inline commands ignore quotes",
    "restore-busykey": "(g) RESTORE onto an existing key: checksum error, "
    "not BUSYKEY",
    "auth-limits": "(e) no limits before AUTH",
}
PASSWORD = "fuzz-pw"
REDIRECTS = ("MOVED ", "ASK ", "TRYAGAIN")


class Closed(Exception):
    """The server closed the connection (or the run is stopping)."""


class Failure(Exception):
    """A reply the model did not predict."""


class Fuzz:
    """The run: options, counters, failures, the stop flag."""

    def __init__(self, opts):
        self.opts = opts
        self.stop = threading.Event()  # the run's time is up
        self.abort = threading.Event()  # a hang: stop waiting for replies
        self.lock = threading.Lock()
        self.failures = []
        self.t0 = time.monotonic() * 1000
        self.slot_log = {}  # slot -> the migrator's recent calls on it
        # Failure reports being built: the migrator makes no call while
        # any is (Migrator.call), so a report sees the slot as it was.
        self.freezing = 0
        self.counts = dict(sequences=0, commands=0, checks=0, migrations=0,
                           reconnects=0, flooded=0)
        self.clients = []  # everything the watchdog watches
        self.longest = (0.0, None, None)  # the longest wait: s, who, what

    def waited(self, who, since):
        """Keeps the longest wait for a reply of the run (printed at the
        end: the margin under the hang bound)."""
        if since is None:
            return
        w = time.monotonic() - since
        with self.lock:
            if w > self.longest[0]:
                self.longest = (w, getattr(who, "name", "?"),
                                getattr(who, "last", None))

    def count(self, **kw):
        with self.lock:
            for k, v in kw.items():
                self.counts[k] += v

    def freeze(self, on):
        """Starts (True) or ends (False) one report's freeze."""
        with self.lock:
            self.freezing += 1 if on else -1

    def frozen(self):
        with self.lock:
            return self.freezing > 0

    def fail(self, who, msg):
        with self.lock:
            self.failures.append(f"{who}: {msg}")
        print(f"FAIL: {who}: {msg} (seed {self.opts.seed})", flush=True)


class Conn:
    """One RESP connection; reading waits at most the run's hang bound,
    while the watchdog sees how long it has waited."""

    def __init__(self, owner, port, auth):
        self.owner, self.port = owner, port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.settimeout(0.2)
        self.buf = bytearray()
        if auth:
            self.send(encode(["AUTH", auth]))
            if self.read(1) != [Simple("OK")]:
                raise Failure("AUTH with the right password refused")

    def send(self, data, chunks=1, rng=None):
        """Sends data, in `chunks` random pieces with short pauses."""
        if chunks > 1 and len(data) > 1:
            cuts = sorted(rng.sample(range(1, len(data)),
                                     min(chunks - 1, len(data) - 1)))
            for a, z in zip([0] + cuts, cuts + [len(data)]):
                self.sock.sendall(data[a:z])
                time.sleep(0.001)
        else:
            self.sock.sendall(data)

    def read(self, n, eof_ok=False):
        """n replies, in order. Raises Closed at EOF (or stop)."""
        out = []
        self.owner.wait_since = time.monotonic()
        try:
            while len(out) < n:
                r = m.parse(self.buf)
                if r is not None:
                    out.append(r[0])
                    del self.buf[:r[1]]
                    continue
                if self.owner.fz.abort.is_set():
                    raise Closed("the run was aborted")
                try:
                    d = self.sock.recv(65536)
                except socket.timeout:
                    continue
                except OSError as e:
                    raise Closed(repr(e))
                if not d:
                    if eof_ok:
                        return out
                    raise Closed(f"EOF after {len(out)} of {n} replies")
                self.buf += d
        finally:
            self.owner.fz.waited(self.owner, self.owner.wait_since)
            self.owner.wait_since = None
        return out

    def wait_eof(self):
        """True when the server closes the connection."""
        try:
            return self.read(1, eof_ok=True) == []
        except Closed:
            return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Router:
    """Connections to one server or cluster, and the slot map (followed on
    MOVED); `port_of` picks the node for a key."""

    def __init__(self, owner, ports, auth):
        self.owner, self.ports, self.auth = owner, ports, auth
        self.conns = {}
        self.slots = {}
        if len(ports) > 1:
            for first, last, node, *_ in self.conn(ports[0]).call(
                    ["CLUSTER", "SLOTS"]):
                for s in range(first, last + 1):
                    self.slots[s] = int(node[1])

    def conn(self, port):
        c = self.conns.get(port)
        if c is None:
            c = Conn(self.owner, port, self.auth)
            c.call = lambda a, c=c: (c.send(encode(a)), c.read(1)[0])[1]
            self.conns[port] = c
        return c

    def port_of(self, key):
        return self.slots.get(m.keyslot(key), self.ports[0]) \
            if len(self.ports) > 1 else self.ports[0]

    def drop(self, port):
        c = self.conns.pop(port, None)
        if c:
            c.close()

    def close(self):
        for p in list(self.conns):
            self.drop(p)


def redirect(r):
    """(kind, port, slot) for a MOVED, ASK or TRYAGAIN error, else None."""
    if not (isinstance(r, Err) and r.startswith(REDIRECTS)):
        return None
    parts = r.split()
    if parts[0] == "TRYAGAIN":
        return "TRYAGAIN", None, None
    port = int(parts[2].rsplit(":", 1)[1])
    return parts[0], port, int(parts[1])


class Group:
    """One server or one cluster: ports, password, shared keys and the
    acknowledged increments of its counters."""

    def __init__(self, name, ports, auth):
        self.name, self.ports, self.auth = name, ports, auth
        self.cluster = len(ports) > 1
        self.counters = [f"{{s}}ctr{i}" for i in range(4)]
        self.pairs = [(f"{{p{i}}}a", f"{{p{i}}}b") for i in range(2)]
        self.acked = {k: 0 for k in self.counters}
        self.sent = {k: 0 for k in self.counters}
        self.slots_used = {m.keyslot(k) for k in self.counters}
        self.slots_used |= {m.keyslot(a) for a, _ in self.pairs}
        self.lock = threading.Lock()
        self.silent_port = None
        self.flooder = None  # the one client that may flood (keys-flood)

    def tag_for(self, base):
        """A hash tag whose slot no other tag of the group has."""
        tag = base
        while m.keyslot("{" + tag + "}") in self.slots_used:
            tag += "x"
        self.slots_used.add(m.keyslot("{" + tag + "}"))
        return tag


class Client(threading.Thread):
    """A client: its own key namespace and model, a seeded sequence of
    operations until the run ends or a check fails."""

    def __init__(self, fz, group, cid):
        super().__init__(name=f"client{cid}", daemon=True)
        self.fz, self.group, self.cid = fz, group, cid
        self.rng = m.client_rng(fz.opts.seed, cid)
        self.wait_since = None
        self.last = None  # the last request sent, for a hang report
        self.history = []
        self.worlds = [{}]
        self.tags = [group.tag_for(f"c{cid}t{j}") for j in range(2)]
        self.keys = {t: [f"{{{t}}}k{n}" for n in range(6)] for t in self.tags}
        # Keys SET and deleted again at once (setslot-direct), so that
        # their slot is mostly empty: the migrator moves it with SETSLOT
        # NODE alone.
        self.etag = group.tag_for(f"c{cid}e") if group.cluster else None
        self.ekeys = [f"{{{self.etag}}}e{n}" for n in range(3)] \
            if group.cluster else []
        self.key_history = {k: [] for ks in self.keys.values() for k in ks}
        self.key_history.update({k: [] for k in self.ekeys})
        self.served = None  # where the reply being checked came from
        self.last_seen = {}
        self.failed = False
        fams = [f for f in FAMILIES if f not in fz.opts.skip
                and FAMILIES[f] and self.applies(f)]
        self.families = fams
        self.weights = [FAMILIES[f] for f in fams]
        self.router = None
        self.migrated_silent = self.flooded = False
        # ms a TTL may overrun in a cluster: MIGRATE sends what is left, so
        # a moved key's deadline moves by the transfer's time (as Redis').
        self.late = 3000 if group.cluster else 0
        self.allowance = 0  # seconds a request may take beyond the bound

    def applies(self, fam):
        if fam == "keys-flood":  # one flood per server: it burns a loop
            if self.group.flooder is None:
                self.group.flooder = self.cid
            return not self.group.cluster and self.group.flooder == self.cid
        if fam in ("auth", "auth-limits", "migrate-silent", "scan"):
            return not self.group.cluster
        if fam in ("cluster-multi", "setslot-direct"):
            return self.group.cluster
        return True

    # ---- running ----

    def run(self):
        try:
            self.router = Router(self, self.group.ports, self.group.auth)
            n = 0
            while not self.fz.stop.is_set() and (
                    not self.fz.opts.ops or n < self.fz.opts.ops):
                fam = self.rng.choices(self.families, self.weights)[0]
                getattr(self, "op_" + fam.replace("-", "_"))()
                n += 1
                self.fz.count(sequences=1)
        except Failure as e:
            self.failed = True
            self.fz.fail(self.name, f"{e}\n  last commands: "
                         + "\n    ".join(map(str, self.history[-12:])))
        except Closed as e:
            self.failed = True
            if not self.fz.abort.is_set():
                self.fz.fail(self.name, f"connection lost: {e}; last request "
                             f"{self.last}")
        except Exception as e:  # a bug here is a failure too
            self.failed = True
            self.fz.fail(self.name, f"{type(e).__name__}: {e}; last "
                         f"{self.last}\n{traceback.format_exc()}")
        finally:
            if self.router:
                self.router.close()

    def note(self, cmd, got):
        """Remembers a request and its reply, also per key, for the
        failure report."""
        t = round(time.monotonic() * 1000 - self.fz.t0)
        entry = (t, self.served, short(cmd), short(got))
        self.history = self.history[-40:] + [entry]
        if isinstance(cmd, list) and len(cmd) > 1:
            for k in cmd[1:]:
                if isinstance(k, str) and k in self.key_history:
                    self.key_history[k] = self.key_history[k][-30:] + [entry]

    def key_report(self, cmd):
        """The recent history of the keys cmd names."""
        out = []
        for k in cmd[1:] if isinstance(cmd, list) else []:
            if isinstance(k, str) and k in self.key_history:
                out.append(f"  history of {k} (ms since start, node):\n    "
                           + "\n    ".join(map(str, self.key_history[k])))
        if isinstance(cmd, list) and len(cmd) > 1 and self.group.cluster:
            out.append(self.where(cmd))
            slot = m.keyslot(cmd[1])
            with self.fz.lock:
                log = list(self.fz.slot_log.get(slot, []))
            out.append(f"  the migrator on slot {slot} (sent, answered ms):"
                       "\n    " + "\n    ".join(map(str, log[-25:])))
        return "\n".join(out)

    def where(self, cmd):
        """What each node holds of cmd's keys now (ASKING GET, so that an
        importing node answers too), for a cluster failure report."""
        lines = []
        for port in self.group.ports:
            try:
                c = Conn(self, port, None)
                got = []
                for k in cmd[1:]:
                    if isinstance(k, str) and k in self.key_history:
                        c.send(encode(["ASKING"]) + encode(["GET", k]) +
                               encode(["PTTL", k]))
                        r = c.read(3)
                        got.append(f"{k}={short(r[1], 30)} pttl {r[2]}")
                slot = m.keyslot(cmd[1])
                c.send(encode(["CLUSTER", "GETKEYSINSLOT", slot, 50]) +
                       encode(["CLUSTER", "NODES"]))
                keys, nodes = c.read(2)
                got.append(f"GETKEYSINSLOT {slot}: {short(keys, 200)}")
                got.append(slot_marks(nodes, slot))
                c.close()
                t = round(time.monotonic() * 1000 - self.fz.t0)
                lines.append(f"    node {port} at {t}: {', '.join(got)}")
            except (OSError, Closed) as e:
                lines.append(f"    node {port}: {e!r}")
        return ("  where the keys are now (ASKING GET; the migrator waits "
                "meanwhile):\n" + "\n".join(lines))

    def check(self, cmd, got, ts, tr):
        """Narrows the model by one reply; a Failure when none predicts it."""
        self.note(cmd, got)
        worlds, want = m.narrow(self.worlds, cmd, got, ts, tr, self.late)
        self.fz.count(checks=1)
        if not worlds:
            self.fz.freeze(True)
            try:
                report = self.key_report(cmd)
            finally:
                self.fz.freeze(False)
            raise Failure(f"{short(cmd)} answered {short(got)}, the model "
                          f"predicts {short(want)}\n{report}")
        self.worlds = worlds

    def expect(self, ok, what):
        self.fz.count(checks=1)
        if not ok:
            raise Failure(what)

    # ---- sending, with redirections followed ----

    def batch(self, cmds, check=None, chunks=1, raw=None):
        """Sends cmds (keys of one slot) pipelined, to the slot's node;
        checks each reply in execution order: those served at once, then
        the redirected ones, each resent until served."""
        check = check or self.check
        port = self.router.port_of(key_of(cmds[0]))
        c = self.router.conn(port)
        self.last = short(cmds[-1])
        ts = time.monotonic() * 1000
        c.send(raw or b"".join(encode(a) for a in cmds), chunks, self.rng)
        got = c.read(len(cmds))
        tr = time.monotonic() * 1000
        self.fz.count(commands=len(cmds))
        later = []
        self.served = port
        for a, r in zip(cmds, got):
            if redirect(r):
                later.append((a, r))
            else:
                check(a, r, ts, tr)
        for a, r in later:
            self.resend(a, r, check, [(port, r, ts, tr)], fresh=False)

    def hops_text(self, hops):
        """The redirections a command met, for the failure report: node,
        redirection, ms since start when sent and when answered."""
        t0 = self.fz.t0
        return ", ".join(f"{p} {redirect(r)[0]} {round(ts - t0)}-"
                         f"{round(tr - t0)}" for p, r, ts, tr in hops[-4:])

    def resend(self, a, r, check, hops, fresh=True):
        """Follows redirections for one command until it is served; `hops`
        the redirections so far (node, reply, sent, answered). An -ASK
        holds only while its migration lasts: followed at once when
        `fresh`, else its node is asked again first. A batch's redirected
        commands are resent one after the other, seconds after their ASK
        for a pipeline of hundreds; by then the slot may have moved on and
        its ASK target import it again from a node that holds the key,
        and that target serves the ASKING command without the key (as
        Redis does: ASKING says the owner sent the client there)."""
        start = time.monotonic()
        tries = 0
        while True:
            kind, port, slot = redirect(r)
            if kind == "ASK" and not fresh:
                kind, port = "AGAIN", hops[-1][0]
            fresh = True
            if time.monotonic() - start > self.fz.opts.hang:
                raise Failure(f"{short(a)}: still redirected after "
                              f"{tries} tries ({r})")
            tries += 1
            if kind == "MOVED":
                self.router.slots[slot] = port
            else:
                time.sleep(min(0.002 * tries, 0.05))
            if kind == "TRYAGAIN" or port is None:
                port = self.router.port_of(key_of([a]))
            c = self.router.conn(port)
            self.last = short(a)
            ts = time.monotonic() * 1000
            if kind == "ASK":
                c.send(encode(["ASKING"]) + encode(a))
                asking, r = c.read(2)
                self.fz.count(commands=2)
                self.expect(asking == Simple("OK"), f"ASKING: {asking}")
            else:
                c.send(encode(a))
                r = c.read(1)[0]
                self.fz.count(commands=1)
            tr = time.monotonic() * 1000
            if not redirect(r):
                self.served = (f"{port}{' ASK' if kind == 'ASK' else ''}"
                               f" {round(ts - self.fz.t0)}-"
                               f"{round(tr - self.fz.t0)} after "
                               f"{self.hops_text(hops)}")
                return check(a, r, ts, tr)
            hops.append((port, r, ts, tr))
            if kind == "MOVED" and tries % 20 == 0:
                time.sleep(0.01)

    def tx(self, body, check=None, discard=False, bad=None):
        """MULTI, body, EXEC (or DISCARD): the EXEC array checked element
        by element; retried while a redirection aborts it."""
        check = check or self.check
        start = time.monotonic()
        while True:
            port = self.router.port_of(key_of(body))
            c = self.router.conn(port)
            frames = [["MULTI"]] + body + [["DISCARD" if discard else "EXEC"]]
            self.last = f"MULTI {[short(a) for a in body]}"
            ts = time.monotonic() * 1000
            c.send(b"".join(encode(a) for a in frames))
            got = c.read(len(frames))
            tr = time.monotonic() * 1000
            self.fz.count(commands=len(frames))
            self.note(["MULTI"] + body, got)
            self.expect(got[0] == Simple("OK"), f"MULTI answered {got[0]}")
            queued, last = got[1:-1], got[-1]
            moved = [redirect(q) for q in queued if redirect(q)]
            for a, q in zip(body, queued):
                if a is bad:
                    self.expect(isinstance(q, Err) and q.startswith("ERR "),
                                f"bad {a} queued as {q}")
                elif not redirect(q):
                    self.expect(q == Simple("QUEUED"), f"{short(a)} in MULTI "
                                f"answered {q}")
            if discard:
                return self.expect(last == Simple("OK"), f"DISCARD: {last}")
            if redirect(last) and not bad:
                # EXEC itself redirected (the slot moved since the queue
                # was checked): nothing ran, as in Redis.
                moved.append(redirect(last))
            elif bad or moved:
                self.expect(last == Err("EXECABORT Transaction discarded "
                                        "because of previous errors."),
                            f"EXEC after an error answered {short(last)}")
            if bad or moved:
                if bad:
                    return
                for kind, p, slot in moved:
                    if kind == "MOVED":
                        self.router.slots[slot] = p
                if time.monotonic() - start > self.fz.opts.hang:
                    raise Failure(f"MULTI still redirected: {moved[0]}")
                time.sleep(0.01)
                continue
            self.expect(isinstance(last, list) and len(last) == len(body),
                        f"EXEC answered {short(last)} for {len(body)} "
                        "commands")
            self.served = f"{port} EXEC"
            for a, r in zip(body, last):
                check(a, r, ts, tr)
            return

    # ---- operations: one method per family ----

    def pick_keys(self):
        return self.keys[self.rng.choice(self.tags)]

    def op_strings(self):
        keys = self.pick_keys()
        self.batch([m.gen_cmd(self.rng, keys)
                    for _ in range(self.rng.randint(1, 20))])

    def op_pipeline_split(self):
        """A pipeline sent in pieces; sometimes a long one (past the
        server's 16 KiB reply buffers and the socket's)."""
        keys = self.pick_keys()
        n = self.rng.choice([self.rng.randint(1, 8),
                             self.rng.randint(100, 600)])
        self.batch([m.gen_cmd(self.rng, keys) for _ in range(n)],
                   chunks=self.rng.randint(2, 12))

    def op_abandon(self):
        """Reads pipelined (large values go out straight from the stored
        blob), then the connection closed before any reply is read."""
        keys = self.pick_keys()
        port = self.router.port_of(keys[0])
        c = self.router.conn(port)
        c.send(b"".join(encode([self.rng.choice(["GET", "STRLEN", "MGET"]),
                                self.rng.choice(keys)])
                        for _ in range(self.rng.randint(1, 200))))
        self.router.drop(port)
        self.fz.count(reconnects=1)

    def op_multi(self):
        body, bad = m.gen_tx(self.rng, self.pick_keys())
        self.tx(body, discard=self.rng.random() < 0.15, bad=bad)

    def op_shared(self):
        g, cmds = self.group, []
        for _ in range(self.rng.randint(1, 5)):
            k = self.rng.choice(g.counters)
            if self.rng.random() < 0.2:
                cmds.append(["GET", k])
            else:
                cmds.append(["INCRBY", k, self.rng.randint(1, 100)])
        for a in cmds:
            if a[0] == "INCRBY":
                with g.lock:
                    g.sent[a[1]] += a[2]
        self.batch(cmds, check=self.check_counter)

    def check_counter(self, a, got, ts, tr):
        """INCRBY on a shared counter: at least what this client saw last
        plus its increment (every increment is positive)."""
        self.note(a, got)
        k = a[1]
        seen = self.last_seen.get(k, 0)
        if a[0] == "GET":
            n = int(got) if got is not None else 0
            self.expect(n >= seen, f"GET {k} = {n}, went back from {seen}")
        else:
            self.expect(type(got) is int and got >= seen + a[2],
                        f"INCRBY {k} {a[2]} = {got}, last seen {seen}")
            n = got
            with self.group.lock:
                self.group.acked[k] += a[2]
        self.last_seen[k] = n

    def op_transfer(self):
        a, b = self.rng.choice(self.group.pairs)
        x = self.rng.randint(1, 100)
        r = self.rng.random()
        if r < 0.6:
            body = [["INCRBY", a, x], ["DECRBY", b, x]]
        elif r < 0.8:
            body = [["GET", a], ["GET", b]]
        else:
            return self.batch([["MGET", a, b]], check=self.check_pair)
        self.pair_seen = []
        self.tx(body, check=self.check_pair_elem)
        v = [int(x) if x is not None else 0 for x in self.pair_seen]
        self.expect(sum(v) == 0, f"transfer pair {a},{b} read {v}: "
                    "a transaction was seen half done")

    def check_pair_elem(self, a, got, ts, tr):
        self.note(a, got)
        self.expect(got is None or isinstance(got, (bytes, int)),
                    f"{a} in a transfer answered {got}")
        self.pair_seen.append(got)

    def check_pair(self, a, got, ts, tr):
        self.note(a, got)
        v = [int(x) if x is not None else 0 for x in got]
        self.expect(sum(v) == 0, f"MGET of a transfer pair read {got}")

    def live(self, keys=None):
        """(surely alive, maybe alive) keys of this client now."""
        sure, maybe = m.live_keys(self.worlds, time.monotonic() * 1000,
                                  self.late)
        if keys is not None:
            sure, maybe = sure & set(keys), maybe & set(keys)
        return sure, maybe

    def check_listing(self, what, got, sure, maybe, exact):
        got = {x.decode() for x in got}
        self.note([what], sorted(got))
        self.expect(got <= maybe, f"{what} listed keys the model does not "
                    f"have: {sorted(got - maybe)}")
        if exact:
            self.expect(sure <= got, f"{what} missed keys: "
                        f"{sorted(sure - got)}")

    def op_scan(self):
        pattern = f"{{c{self.cid}t*"
        count = self.rng.randint(1, 50)
        c = self.router.conn(self.group.ports[0])
        sure, maybe = self.live()
        cursor, got, calls = b"0", [], 0
        while True:
            self.last = f"SCAN {cursor} MATCH {pattern} COUNT {count}"
            r = c.call(["SCAN", cursor, "MATCH", pattern, "COUNT", count])
            calls += 1
            self.expect(isinstance(r, list) and len(r) == 2,
                        f"SCAN answered {short(r)}")
            cursor, keys = r
            got += keys
            if cursor == b"0" or calls > 100000:
                break
        self.fz.count(commands=calls)
        self.check_listing("SCAN", got, sure, maybe | self.live()[1], True)

    def op_keys(self):
        tag = self.rng.choice(self.tags)
        pattern = self.rng.choice([f"{{c{self.cid}t*", f"{{{tag}}}*", "*"])
        k = self.keys[tag][0]
        port = self.router.port_of(k)
        c = self.router.conn(port)
        sure, maybe = self.live()
        self.last = f"KEYS {pattern} (pipelined)"
        c.send(encode(["PING"]) + encode(["KEYS", pattern]) +
               encode(["PING"]))
        got = c.read(3)
        self.fz.count(commands=3)
        self.expect(got[0] == got[2] == Simple("PONG"), f"PING: {got}")
        self.expect(isinstance(got[1], list), f"KEYS: {short(got[1])}")
        if pattern == "*":  # other clients' keys too: just this one's
            got[1] = [x for x in got[1] if x.startswith(b"{c%dt" % self.cid)]
        if pattern.endswith("}*"):
            sure = {x for x in sure if x.startswith("{" + tag + "}")}
            maybe = {x for x in maybe if x.startswith("{" + tag + "}")}
        self.check_listing("KEYS", got[1], sure, maybe | self.live()[1],
                           not self.group.cluster)

    def op_keys_flood(self):
        """Thousands of KEYS pipelined over a store of 30000 keys or more
        (once, by one client of the server: a flood keeps a loop busy to
        the run's end, and the machine is shared): this client waits for
        them, a reply at a time
        and each within the hang bound (progress, not the whole flood:
        each KEYS walks every key, so the flood takes as long as the
        machine makes it), and must not hold the loop's other clients or
        the other loop's past the bound. A KEYS over more keys than weft's
        bound is refused (samples/kv/README.md, "Fairness"). The flood
        ends with the run: the connection closes, the rest unanswered."""
        if self.flooded:
            return self.op_strings()
        self.flooded = True
        port = self.group.ports[0]
        c = self.router.conn(port)
        self.last = "1000 x SET {c%dbulk}... (pipelined)" % self.cid
        for i in range(0, 30000, 1000):
            c.send(b"".join(encode(["SET", f"{{c{self.cid}bulk}}{j}", j])
                            for j in range(i, i + 1000)))
            self.expect(c.read(1000) == [Simple("OK")] * 1000, "bulk SET")
        self.fz.count(commands=30000)
        self.last = "3000 x KEYS nomatch:* (pipelined)"
        c.send(encode(["KEYS", "nomatch:*"]) * 3000 + encode(["PING"]))
        self.fz.count(flooded=1)
        for i in range(3001):
            if self.fz.stop.is_set():
                self.router.drop(port)
                self.fz.count(reconnects=1)
                return
            self.last = f"reply {i} of 3000 x KEYS nomatch:* (pipelined)"
            got = c.read(1)[0]
            self.fz.count(commands=1, checks=1)
            if i == 3000:
                self.expect(got == Simple("PONG"), f"PING: {short(got)}")
            else:
                bound = isinstance(got, Err) and got.startswith(
                    "ERR KEYS would examine more than")
                self.expect(got == [] or bound,
                            f"KEYS {i} of the flood: {short(got)}")

    def op_partial(self):
        """Complete commands, then a piece of one (or a MULTI left open),
        then the connection closed: the piece must not run."""
        keys = self.pick_keys()
        cmds = [m.gen_cmd(self.rng, keys)
                for _ in range(self.rng.randint(0, 4))]
        piece = encode(m.gen_cmd(self.rng, keys))
        piece = piece[:self.rng.randrange(1, len(piece))]
        if cmds:
            self.batch(cmds)
        port = self.router.port_of(keys[0])
        c = self.router.conn(port)
        if self.rng.random() < 0.3:
            body = [m.gen_cmd(self.rng, keys) for _ in range(3)]
            c.send(b"".join(encode(a) for a in [["MULTI"]] + body) + piece)
            got = c.read(4)
            self.expect(got[0] == Simple("OK"), f"MULTI: {got}")
        else:
            c.send(piece)
        self.router.drop(port)
        self.fz.count(reconnects=1)

    MALFORMED = [b"*2\r\n$3\r\nGET\r\n$-5\r\n", b"*1\r\n$abc\r\n", b"*abc\r\n",
                 b"*3000000000\r\n", b"*1\r\n$999999999999\r\n"]

    def op_malformed(self):
        frame = self.rng.choice(self.MALFORMED)
        port = self.rng.choice(self.group.ports)
        c = Conn(self, port, self.group.auth)
        try:
            self.last = f"malformed {frame!r}"
            c.send(encode(["PING"]) + frame)
            got = c.read(2)
            self.note(["malformed", frame], got)
            self.expect(got[0] == Simple("PONG") and isinstance(got[1], Err)
                        and got[1].startswith("ERR Protocol error"),
                        f"{frame!r} answered {got}")
            self.expect(c.wait_eof(), f"{frame!r}: the connection stayed open")
        finally:
            c.close()
        self.fz.count(commands=2, reconnects=1)

    def op_auth(self):
        c = Conn(self, self.group.ports[0], None)
        try:
            k = self.pick_keys()[0]
            self.last = "AUTH sequence"
            c.send(b"".join(encode(a) for a in
                            [["GET", k], ["AUTH", "wrong"],
                             ["AUTH", "default", "wrong"]]))
            got = c.read(3)
            self.note(["GET, AUTH wrong x2"], got)
            self.expect(got == [Err("NOAUTH Authentication required.")] +
                        [Err("WRONGPASS invalid username-password pair or "
                             "user is disabled.")] * 2, f"got {got}")
            ts = time.monotonic() * 1000
            c.send(encode(["AUTH", PASSWORD]) + encode(["GET", k]))
            ok, v = c.read(2)
            self.expect(ok == Simple("OK"), f"AUTH: {ok}")
            self.check(["GET", k], v, ts, time.monotonic() * 1000)
        finally:
            c.close()
        self.fz.count(commands=5, reconnects=1)

    def op_inline(self, quotes=False):
        keys = self.pick_keys()
        k = self.rng.choice(keys)
        words = ["".join(self.rng.choice("abcxyz019")
                         for _ in range(self.rng.randint(1, 6)))
                 for _ in range(self.rng.randint(2, 3) if quotes else 1)]
        if quotes:
            text = " ".join(words)
            a, raw = ["SET", k, text], f'SET {k} "{text}"'
        else:
            a = self.rng.choice([["SET", k, words[0]], ["GET", k],
                                 ["INCR", k], ["DEL", k], ["STRLEN", k]])
            raw = " ".join(str(x) for x in a)
        self.batch([a, ["GET", k]], raw=raw.encode() + b"\r\n" +
                   encode(["GET", k]))

    def op_inline_quotes(self):
        self.op_inline(quotes=True)

    def op_restore(self):
        keys = self.pick_keys()
        k, k2 = self.rng.choice(keys), self.rng.choice(keys)
        got = {}

        def keep(a, r, ts, tr):
            if a[0] == "DUMP":
                self.note(a, r)
                got["dump"] = r
            else:
                self.check(a, r, ts, tr)
                got["value"] = r

        self.batch([["GET", k], ["DUMP", k]], check=keep)
        v, payload = got.get("value"), got.get("dump")
        if v is None or payload is None:
            self.expect(payload is None or v is not None,
                        f"DUMP {k} answered a payload for a missing key")
            return
        a = ["RESTORE", k2, 0, m.Dumped(payload, v)]
        if self.rng.random() < 0.4:
            a.append("REPLACE")
        self.batch([a, ["GET", k2]])

    def op_restore_busykey(self):
        """Known defect (g): RESTORE of a bad payload onto an existing key
        is BUSYKEY (Redis checks the key first)."""
        k = self.rng.choice(self.pick_keys())
        self.batch([["RESTORE", k, 0, m.gen_value(self.rng)], ["GET", k]])

    def op_auth_limits(self):
        """Known defect (e): before AUTH, Redis refuses a multibulk of more
        than 10 elements or a bulk string of more than 16 KiB at once."""
        frame, what = self.rng.choice([
            (b"*%d\r\n" % self.rng.randint(11, 1000), "multibulk length"),
            (b"*1\r\n$%d\r\n" % self.rng.randint(16385, 1 << 20),
             "bulk length")])
        c = Conn(self, self.group.ports[0], None)
        try:
            self.last = f"unauthenticated {frame!r}"
            c.send(frame)
            got = c.read(1)
            self.note(["unauthenticated", frame], got)
            self.expect(got == [Err(f"ERR Protocol error: unauthenticated "
                                    f"{what}")], f"{frame!r} answered {got}")
            self.expect(c.wait_eof(), f"{frame!r}: the connection stayed open")
        finally:
            c.close()
        self.fz.count(commands=1, reconnects=1)

    def op_cluster(self):
        tag = self.rng.choice(self.tags)
        k = self.rng.choice(self.keys[tag])
        slot = m.keyslot(k)
        r = self.rng.random()
        port = self.rng.choice(self.group.ports)
        if not self.group.cluster:
            got = self.router.conn(port).call(["CLUSTER", "KEYSLOT", k])
            self.fz.count(commands=1)
            return self.expect(got == Err("ERR This instance has cluster "
                                          "support disabled"), f"{got}")
        if r < 0.4:
            got = self.router.conn(port).call(["CLUSTER", "KEYSLOT", k])
            self.fz.count(commands=1)
            return self.expect(got == slot, f"KEYSLOT {k} = {got}, "
                               f"want {slot}")
        maybe = self.live(self.keys[tag])[1]
        if r < 0.7:
            got = self.router.conn(port).call(
                ["CLUSTER", "COUNTKEYSINSLOT", slot])
            self.expect(type(got) is int and 0 <= got <= len(maybe),
                        f"COUNTKEYSINSLOT {slot} = {got}, at most "
                        f"{len(maybe)} keys there")
        else:
            got = self.router.conn(port).call(
                ["CLUSTER", "GETKEYSINSLOT", slot, 100])
            self.expect(isinstance(got, list), f"GETKEYSINSLOT: {got}")
            self.check_listing("GETKEYSINSLOT", got, set(),
                               maybe | self.live(self.keys[tag])[1], False)
        self.fz.count(commands=1)

    def op_setslot_direct(self):
        """Known defect (b): SET, GET, DEL of a key in a slot the migrator
        moves with SETSLOT NODE alone (no MIGRATING: the slot is empty
        between these), so a SET that lands on the old owner just as it
        gives the slot away is stranded there, behind MOVED."""
        k = self.rng.choice(self.ekeys)
        self.batch([["SET", k, m.gen_value(self.rng)]])
        self.batch([["GET", k], ["DEL", k]])

    def op_cluster_multi(self):
        """Known defect (a): CLUSTER COUNTKEYSINSLOT/GETKEYSINSLOT in MULTI."""
        keys = self.pick_keys()
        sub = self.rng.choice([["CLUSTER", "COUNTKEYSINSLOT", 0],
                               ["CLUSTER", "GETKEYSINSLOT", 0, 1]])

        def check(a, r, ts, tr):
            if a[0] == "CLUSTER":
                self.note(a, r)
                return self.expect(isinstance(r, (int, list)), f"{a}: {r}")
            self.check(a, r, ts, tr)

        self.tx([["SET", keys[0], m.gen_value(self.rng)], sub], check=check)

    def op_migrate_silent(self):
        """Known defect (c): MIGRATE to a host that never answers, with a
        timeout longer than the hang bound: its own client may wait that
        long, but no other client may (once per client: it waits)."""
        if self.migrated_silent:
            return self.op_strings()
        self.migrated_silent = True
        k = self.rng.choice(self.pick_keys())
        timeout = int(self.fz.opts.hang * 1500)
        a = ["MIGRATE", "127.0.0.1", self.group.silent_port, k, 0, timeout]

        def check(a, r, ts, tr):
            self.note(a, r)
            # An error (IOERR, or a refusal of the target) leaves the key
            # where it was; NOKEY needs it to be missing.
            outs = m.step(self.worlds, ["EXISTS", k], ts, tr, self.late)
            ok = [w for n, w in outs if isinstance(r, Err) or
                  (not n and r == Simple("NOKEY"))]
            self.expect(ok, f"{short(a)} answered {r}")
            self.worlds = m.dedupe(ok)

        self.allowance = timeout / 1000
        try:
            self.batch([a], check=check)
        finally:
            self.allowance = 0


def key_of(cmds):
    """The first key of the first keyed command (routing)."""
    for a in cmds:
        if len(a) > 1 and a[0] not in ("MULTI", "CLUSTER"):
            return a[1]
    return "x"


def slot_marks(nodes, slot):
    """From a CLUSTER NODES reply: the slot's owner and the node's own
    MIGRATING / IMPORTING mark for it, each node named by its port."""
    if not isinstance(nodes, bytes):
        return f"CLUSTER NODES: {short(nodes)}"
    port, owner, marks = {}, "none", []
    lines = [ln.split() for ln in nodes.decode(errors="replace").splitlines()]
    for w in lines:
        if len(w) > 1:
            port[w[0]] = w[1].split("@")[0].rsplit(":", 1)[-1]
    for w in lines:
        for r in w[8:]:
            if r.startswith("["):
                s, rest = r[1:-1].split("-", 1)
                if int(s) == slot:
                    to = rest[2:]
                    marks.append(("migrating to " if rest[0] == ">"
                                  else "importing from ")
                                 + port.get(to, to[:8]))
            elif "-" in r and int(r.split("-")[0]) <= slot <= int(
                    r.split("-")[1]) or r.isdigit() and int(r) == slot:
                owner = port.get(w[0], w[0][:8])
    return f"slot {slot} owner {owner}" + "".join(", " + x for x in marks)


def short(x, n=80):
    s = repr(x)
    return s if len(s) <= n else s[:n] + f"...({len(s)} chars)"
