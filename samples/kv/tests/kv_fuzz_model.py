# SPDX-License-Identifier: Apache-2.0
"""The KV fuzzer's wire codec and reference model (samples/kv/tests/kv_fuzz.py).

RESP: `encode` builds a request, `parse` takes one reply off a buffer.
Replies are Python values: bytes (bulk), None (nil), int, Simple (+),
Err (-) and lists.

The model is Redis 7's semantics of the string and key commands, per key,
with expiry kept exact by "possible worlds": a world maps each key of a
client's namespace to (value, lo, hi), where [lo, hi] (monotonic ms, the
server's clock being CLOCK_MONOTONIC too) bounds the key's deadline, or
lo = hi = None without a TTL. A command is sent at ts and answered at tr,
so it ran at some instant in [ts, tr]: a key whose deadline may fall in
there forks the world into one where it had expired and one where it had
not, and the reply keeps only the worlds that predict it. No world left
is a failure. With the long TTLs most commands use no fork ever happens.
"""
import random

# ---- RESP ----


class Simple(str):
    """A simple string reply (+OK)."""


class Err(str):
    """An error reply (-ERR ...), without the '-'."""


class Range:
    """An integer reply within [lo, hi] (a TTL)."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def __repr__(self):
        return f"Range({self.lo}, {self.hi})"


def encode(args):
    """A RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, int):
            a = str(a)
        if isinstance(a, str):
            a = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def parse(buf, pos=0):
    """One reply from buf at pos: (value, next pos), or None if incomplete.
    Raises ValueError on a malformed reply."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return None
    kind, line = buf[pos:pos + 1], buf[pos + 1:end]
    nxt = end + 2
    if kind == b"+":
        return Simple(line.decode("latin-1")), nxt
    if kind == b"-":
        return Err(line.decode("latin-1")), nxt
    if kind == b":":
        return int(line), nxt
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, nxt
        if len(buf) < nxt + n + 2:
            return None
        return bytes(buf[nxt:nxt + n]), nxt + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return None, nxt
        items = []
        for _ in range(n):
            r = parse(buf, nxt)
            if r is None:
                return None
            items.append(r[0])
            nxt = r[1]
        return items, nxt
    raise ValueError(f"bad reply type {kind!r} in "
                     f"{bytes(buf[pos:pos + 40])!r}")


def matches(got, want):
    """Whether a reply is the one the model predicts."""
    if isinstance(want, Range):
        return type(got) is int and want.lo <= got <= want.hi
    if isinstance(want, list):
        return (isinstance(got, list) and len(got) == len(want)
                and all(matches(g, w) for g, w in zip(got, want)))
    if isinstance(want, Err):
        return isinstance(got, Err) and got == want
    if isinstance(want, Simple):
        return isinstance(got, Simple) and got == want
    return type(got) is type(want) and got == want


# ---- cluster slots ----


def crc16(data):
    """CRC16/XMODEM, Redis Cluster's key hash."""
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def keyslot(key):
    """The slot of a key (bytes or str), hash tags as Redis."""
    if isinstance(key, str):
        key = key.encode()
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    return crc16(key) % 16384


# ---- the model ----

NOTINT = Err("ERR value is not an integer or out of range")
OVERFLOW = Err("ERR increment or decrement would overflow")
SYNTAX = Err("ERR syntax error")
OK = Simple("OK")
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
MAX_VALUE = 1 << 20  # [kv] max_value_bytes' default
MARGIN = 5.0  # ms: the clocks' reading granularity, both sides


def as_int(v):
    """Redis' string2ll: the integer a value holds, or None."""
    if not v or len(v) > 20:
        return None
    s = v.decode("latin-1")
    body = s[1:] if s[0] == "-" else s
    if not body.isdigit() or not body.isascii():
        return None
    if body[0] == "0" and (len(body) > 1 or s[0] == "-"):
        return None
    n = int(s)
    return n if I64_MIN <= n <= I64_MAX else None


def resolve(world, keys, ts, tr, late=0):
    """The worlds `world` splits into at a command run in [ts, tr]: every
    key of `keys` there either alive or expired (gone). A deadline may be
    up to `late` ms past its bound (MIGRATE carries a relative TTL, so a
    moved key lives on for as long as the transfer took, as in Redis)."""
    worlds = [world]
    for k in dict.fromkeys(keys):
        nxt = []
        for w in worlds:
            e = w.get(k)
            if e is None or e[1] is None:
                nxt.append(w)
            elif e[2] + late + MARGIN < ts:  # surely expired
                w = dict(w)
                del w[k]
                nxt.append(w)
            elif e[1] - MARGIN > tr:  # surely alive
                nxt.append(w)
            else:
                gone = dict(w)
                del gone[k]
                nxt += [w, gone]
        worlds = nxt
    return worlds


def ttl_of(e, ts, tr, ms, late):
    """TTL/PTTL's reply for an alive entry (or -1 without a TTL)."""
    if e[1] is None:
        return -1
    lo, hi = max(0, e[1] - tr - MARGIN), max(0, e[2] + late - ts + MARGIN)
    if ms:
        return Range(int(lo), int(hi) + 1)
    return Range(int((lo + 500) // 1000), int((hi + 500) // 1000) + 1)


def deadline(ms, ts, tr):
    """A TTL of `ms` set by a command run in [ts, tr]."""
    return (ts + ms, tr + ms)


def upper(a):
    return a.decode().upper() if isinstance(a, bytes) else str(a).upper()


def b(a):
    return a if isinstance(a, bytes) else str(a).encode()


def incr(w, k, by):
    e = w.get(k)
    cur = 0 if e is None else as_int(e[0])
    if cur is None:
        return NOTINT
    n = cur + by
    if not I64_MIN <= n <= I64_MAX:
        return OVERFLOW
    w[k] = (str(n).encode(), e[1], e[2]) if e else (str(n).encode(), None,
                                                    None)
    return n


def set_cmd(w, a, ts, tr):
    k, v = a[1], b(a[2])
    opts = [upper(x) for x in a[3:]]
    e = w.get(k)
    ret = e[0] if e else None
    if ("NX" in opts and e) or ("XX" in opts and not e):
        return ret if "GET" in opts else None
    if "EX" in opts:
        dl = deadline(int(opts[opts.index("EX") + 1]) * 1000, ts, tr)
    elif "PX" in opts:
        dl = deadline(int(opts[opts.index("PX") + 1]), ts, tr)
    elif "KEEPTTL" in opts and e:
        dl = (e[1], e[2])
    else:
        dl = (None, None)
    w[k] = (v, dl[0], dl[1])
    return ret if "GET" in opts else OK


def expire_cmd(w, a, ts, tr, ms, late):
    """EXPIRE/PEXPIRE: a list of (reply, world) (GT/LT may fork)."""
    k, t = a[1], int(a[2]) * (1 if ms else 1000)
    cond = upper(a[3]) if len(a) > 3 else ""
    e = w.get(k)
    if e is None:
        return [(0, w)]
    new = deadline(t, ts, tr)
    if cond == "NX" and e[1] is not None or cond == "XX" and e[1] is None:
        return [(0, w)]
    outcomes = [True]
    if cond in ("GT", "LT"):
        if e[1] is None:
            outcomes = [cond == "LT"]
        else:
            gt_sure, lt_sure = new[0] > e[2] + late, new[1] < e[1]
            if cond == "GT":
                outcomes = [True] if gt_sure else [False] if new[1] <= e[1] \
                    else [True, False]
            else:
                outcomes = [True] if lt_sure else [False] \
                    if new[0] >= e[2] + late \
                    else [True, False]
    res = []
    for ok in outcomes:
        if not ok:
            res.append((0, w))
            continue
        w2 = dict(w)
        if t <= 0:
            del w2[k]
        else:
            w2[k] = (e[0], new[0], new[1])
        res.append((1, w2))
    return res


def apply1(w, a, ts, tr, late):
    """One command on a resolved world (mutated): its reply, or a list of
    (reply, world) when the outcome itself may fork."""
    c = upper(a[0])
    k = a[1] if len(a) > 1 else None
    e = w.get(k) if k is not None else None
    if c == "GET":
        return e[0] if e else None
    if c == "SET":
        return set_cmd(w, a, ts, tr)
    if c == "SETNX":
        if e:
            return 0
        w[k] = (b(a[2]), None, None)
        return 1
    if c == "GETSET":
        w[k] = (b(a[2]), None, None)
        return e[0] if e else None
    if c == "GETDEL":
        w.pop(k, None)
        return e[0] if e else None
    if c == "GETEX":
        if e and len(a) > 2:
            o = upper(a[2])
            if o == "PERSIST":
                w[k] = (e[0], None, None)
            else:
                t = int(a[3]) * (1000 if o == "EX" else 1)
                w[k] = (e[0],) + deadline(t, ts, tr)
        return e[0] if e else None
    if c == "APPEND":
        v = (e[0] if e else b"") + b(a[2])
        if len(v) > MAX_VALUE:
            return Err("ERR string exceeds maximum allowed size")
        w[k] = (v, e[1], e[2]) if e else (v, None, None)
        return len(v)
    if c == "STRLEN":
        return len(e[0]) if e else 0
    if c in ("INCR", "DECR"):
        return incr(w, k, 1 if c == "INCR" else -1)
    if c in ("INCRBY", "DECRBY"):
        by = as_int(b(a[2]))
        if by is None or (c == "DECRBY" and by == I64_MIN):
            return NOTINT if by is None else Err(
                "ERR decrement would overflow")
        return incr(w, k, by if c == "INCRBY" else -by)
    if c == "DEL":
        n = 0
        for x in a[1:]:
            if w.pop(x, None) is not None:
                n += 1
        return n
    if c == "EXISTS":
        return sum(1 for x in a[1:] if x in w)
    if c == "TYPE":
        return Simple("string" if e else "none")
    if c == "MGET":
        return [w[x][0] if x in w else None for x in a[1:]]
    if c == "MSET":
        for i in range(1, len(a), 2):
            w[a[i]] = (b(a[i + 1]), None, None)
        return OK
    if c in ("TTL", "PTTL"):
        return ttl_of(e, ts, tr, c == "PTTL", late) if e else -2
    if c in ("EXPIRE", "PEXPIRE"):
        return expire_cmd(w, a, ts, tr, c == "PEXPIRE", late)
    if c == "PERSIST":
        if not e or e[1] is None:
            return 0
        w[k] = (e[0], None, None)
        return 1
    if c == "RENAME":
        if not e:
            return Err("ERR no such key")
        del w[k]
        w[a[2]] = e
        return OK
    if c == "RESTORE":  # RESTORE k 0 payload [REPLACE], payload = DUMP's
        if e and not (len(a) > 4 and upper(a[4]) == "REPLACE"):
            return Err("BUSYKEY Target key name already exists.")
        if not isinstance(a[3], Dumped):  # Redis checks the key first
            return Err("ERR DUMP payload version or checksum are wrong")
        w[k] = (a[3].value, None, None)
        return OK
    raise KeyError(c)


class Dumped(bytes):
    """RESTORE's payload placeholder: the value a DUMP of it returned."""

    def __new__(cls, payload, value):
        o = super().__new__(cls, payload)
        o.value = value
        return o


def keys_of(a):
    """The keys a modelled command touches."""
    c = upper(a[0])
    if c in ("DEL", "EXISTS", "MGET"):
        return list(a[1:])
    if c == "MSET":
        return list(a[1::2])
    if c == "RENAME":
        return [a[1], a[2]]
    return [a[1]]


def step(worlds, a, ts, tr, late=0):
    """Every (reply, world) the worlds allow for command a run in [ts, tr]."""
    out = []
    for w0 in worlds:
        for w in resolve(w0, keys_of(a), ts, tr, late):
            w = dict(w)
            r = apply1(w, a, ts, tr, late)
            if isinstance(r, list) and r and isinstance(r[0], tuple):
                out += r
            else:
                out.append((r, w))
    return out


def narrow(worlds, a, got, ts, tr, late=0):
    """The worlds left after command a answered got; [] on a mismatch.
    Also returns one predicted reply, for the failure message."""
    outs = step(worlds, a, ts, tr, late)
    keep = [w for r, w in outs if matches(got, r)]
    return dedupe(keep), outs[0][0] if outs else None


def dedupe(worlds, cap=64):
    seen, out = set(), []
    for w in worlds:
        key = tuple(sorted(w.items()))
        if key not in seen:
            seen.add(key)
            out.append(w)
    return out[:cap]


def live_keys(worlds, now, late=0):
    """(keys alive in every world, keys alive in some world) at `now`."""
    sure, maybe = None, set()
    for w in worlds:
        alive = {k for k, e in w.items()
                 if e[1] is None or e[2] + late > now - MARGIN}
        alive_sure = {k for k, e in w.items()
                      if e[1] is None or e[1] > now + 30000}
        maybe |= alive
        sure = alive_sure if sure is None else sure & alive_sure
    return sure or set(), maybe


# ---- command generation ----

ALPHA = "abcxyz019-"


def gen_value(rng):
    r = rng.random()
    if r < 0.3:
        return str(rng.randint(-1000, 1000))
    if r < 0.35:
        return rng.choice(["007", "-0", " 1", "1.5", "+3", str(I64_MAX),
                           str(I64_MIN), "9223372036854775808", ""])
    if r < 0.45:  # binary-safe: CR, LF, NUL, a RESP-looking line
        return bytes(rng.choice(b"\r\n\x00$*+-:ab") for _ in
                     range(rng.randint(1, 12)))
    if r < 0.47:
        return "v" * rng.randint(100, 20000)
    return "".join(rng.choice(ALPHA) for _ in range(rng.randint(1, 10)))


def gen_ttl(rng):
    """EX/PX arguments: mostly long, sometimes expiring during the run."""
    if rng.random() < 0.25:
        return ["PX", rng.randint(1, 300)]
    return ["EX", rng.randint(100, 100000)]


def gen_cmd(rng, keys):
    """One modelled command on the client's keys (all of one slot)."""
    k = rng.choice(keys)
    r = rng.randrange(26)
    if r < 4:
        return ["GET", k]
    if r < 8:
        a = ["SET", k, gen_value(rng)]
        if rng.random() < 0.4:
            a += gen_ttl(rng)
        elif rng.random() < 0.1:
            a.append("KEEPTTL")
        if rng.random() < 0.3:
            a.append(rng.choice(["NX", "XX"]))
        if rng.random() < 0.3:
            a.append("GET")
        return a
    if r == 8:
        return rng.choice([["SETNX", k, gen_value(rng)],
                           ["GETSET", k, gen_value(rng)]])
    if r == 9:
        return ["GETDEL", k]
    if r == 10:
        return rng.choice([["GETEX", k], ["GETEX", k, "PERSIST"],
                           ["GETEX", k] + gen_ttl(rng)])
    if r == 11:
        return ["APPEND", k, gen_value(rng)]
    if r == 12:
        return ["STRLEN", k]
    if r < 16:
        return rng.choice([["INCR", k], ["DECR", k],
                           ["INCRBY", k, rng.choice([rng.randint(-99, 99),
                                                     I64_MAX, "x", "01"])],
                           ["DECRBY", k, rng.randint(-99, 99)]])
    if r == 16:
        return ["DEL"] + rng.sample(keys, rng.randint(1, 3))
    if r == 17:
        return ["EXISTS"] + [rng.choice(keys)
                             for _ in range(rng.randint(1, 3))]
    if r == 18:
        return ["MGET"] + rng.sample(keys, rng.randint(1, 4))
    if r == 19:
        a = ["MSET"]
        for x in rng.sample(keys, rng.randint(1, 3)):
            a += [x, gen_value(rng)]
        return a
    if r == 20:
        return [rng.choice(["TTL", "PTTL"]), k]
    if r == 21:
        t = rng.choice([rng.randint(100, 100000), rng.randint(-5, 0)])
        a = ["EXPIRE", k, t]
        if rng.random() < 0.3:
            a = ["PEXPIRE", k, rng.randint(1, 300)]
        if rng.random() < 0.4:
            a.append(rng.choice(["NX", "XX", "GT", "LT"]))
        return a
    if r == 22:
        return ["PERSIST", k]
    if r == 23:
        return ["TYPE", k]
    if r == 24:
        return ["RENAME", k, rng.choice(keys)]
    return ["GET", k]


def gen_tx(rng, keys):
    """A MULTI body: modelled commands, sometimes one bad command."""
    body = [gen_cmd(rng, keys) for _ in range(rng.randint(1, 6))]
    bad = None
    if rng.random() < 0.1:
        bad = rng.choice([["NOSUCHCMD", "x"], ["GET"], ["SET", keys[0]]])
        body.insert(rng.randrange(len(body) + 1), bad)
    return body, bad


def client_rng(seed, cid):
    """Client cid's own generator: its sequence depends on the seed only."""
    return random.Random(f"{seed}:{cid}")
