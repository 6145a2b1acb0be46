#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""redis-py (Debian's python3-redis) against weft-kv-server: the commands
issue 31 added, through redis-py's own methods where it has them.

WATCH/UNWATCH (redis-py's transaction() and pipelines that watch), across
connections on different loops: EXEC fails when a watched key changed,
was made, deleted, expired, flushed or got a TTL; optimistic increments
from threads add up. FLUSHDB, SETEX/PSETEX, UNLINK, MSETNX, GETRANGE/
SETRANGE/SUBSTR, SETBIT/GETBIT, LCS, EXPIREAT/PEXPIREAT/EXPIRETIME, RENAMENX, COPY, TOUCH,
RANDOMKEY, SCAN ... TYPE, SELECT 0, TIME, CONFIG GET/SET, CLIENT LIST/
KILL, commands of more than 1024 arguments, and the error a command
outside the KV service gets.

Usage: kv_redis_compat.py PORT   (a server without a password, 2 loops)
Run by samples/kv/tests/test_kv_redis_compat.sh. Prints one line per failed check and
"N passed, M failed"; exits 1 on any failure.
"""
import sys
import threading
import time

import redis

from kv_checks import check, raises, run, summary

def watched_exec(r, key, change):
    """WATCH key, run change() (another connection's writes), then
    MULTI/PING/EXEC: True when EXEC ran, False when it failed (WatchError)."""
    with r.pipeline() as p:
        p.watch(key)
        change()
        p.multi()
        p.ping()
        try:
            p.execute()
            return True
        except redis.WatchError:
            return False


def watch(r, other):
    """WATCH and UNWATCH; `other` is another connection (another loop)."""
    r.set("w", "1")
    check("watch_untouched_runs", watched_exec(r, "w", lambda: None), True)
    check("watch_set_fails", watched_exec(r, "w", lambda: other.set("w", "2")),
          False)
    check("watch_same_value_fails",
          watched_exec(r, "w", lambda: other.set("w", "2")), False)
    check("watch_read_runs", watched_exec(r, "w", lambda: other.get("w")),
          True)
    check("watch_incr_fails", watched_exec(r, "w", lambda: other.incr("w")),
          False)
    check("watch_expire_fails",
          watched_exec(r, "w", lambda: other.expire("w", 100)), False)
    check("watch_persist_fails",
          watched_exec(r, "w", lambda: other.persist("w")), False)
    check("watch_del_fails", watched_exec(r, "w", lambda: other.delete("w")),
          False)
    check("watch_made_fails", watched_exec(r, "w", lambda: other.set("w", 1)),
          False)
    check("watch_flushall_fails",
          watched_exec(r, "w", lambda: other.flushall()), False)
    r.set("w", "1")
    check("watch_flushdb_fails",
          watched_exec(r, "w", lambda: other.flushdb()), False)
    check("watch_flush_missing_runs",
          watched_exec(r, "w", lambda: other.flushall()), True)
    other.set("w", "1", px=500)  # 500 ms: still there at WATCH on a loaded machine
    check("watch_expired_fails",
          watched_exec(r, "w", lambda: time.sleep(0.7)), False)
    other.set("w", "1")
    check("watch_other_key_runs",
          watched_exec(r, "w", lambda: other.set("not-w", "1")), True)
    # EXEC forgets the keys: the next transaction runs whatever changes.
    with r.pipeline() as p:
        p.watch("w")
        other.set("w", "3")
        p.multi()
        p.ping()
        raises("watch_fails_once", p.execute, redis.WatchError, "")
        p.multi()
        p.set("w", "4")
        check("watch_forgotten_after_exec", p.execute(), [True])
    # UNWATCH, DISCARD forget them too.
    check("watch", r.execute_command("WATCH", "w"), True)
    other.set("w", "5")
    check("unwatch", r.execute_command("UNWATCH"), True)
    r.execute_command("MULTI")
    r.execute_command("PING")
    check("unwatch_then_exec_runs", r.execute_command("EXEC"), ["PONG"])
    r.execute_command("WATCH", "w")
    other.set("w", "6")
    r.execute_command("MULTI")
    check("discard", r.execute_command("DISCARD"), "OK")
    r.execute_command("MULTI")
    r.execute_command("PING")
    check("discard_unwatches", r.execute_command("EXEC"), ["PONG"])
    r.execute_command("MULTI")
    raises("watch_in_multi", lambda: r.execute_command("WATCH", "w"),
           redis.ResponseError, "WATCH inside MULTI is not allowed")
    r.execute_command("DISCARD")
    raises("watch_arity", lambda: r.execute_command("WATCH"),
           redis.ResponseError, "wrong number of arguments for 'watch'")


def optimistic_increments(port):
    """redis-py's transaction(): threads on their own connections add 1 to
    a counter with GET, MULTI, SET, EXEC under WATCH, retrying on
    WatchError; none is lost."""
    threads, each = 4, 50
    redis.Redis(port=port).set("counter", 0)

    def work():
        c = redis.Redis(port=port, decode_responses=True)
        for _ in range(each):
            def step(pipe):
                v = int(pipe.get("counter"))
                pipe.multi()
                pipe.set("counter", v + 1)
            c.transaction(step, "counter")
    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check("optimistic_increments",
          redis.Redis(port=port).get("counter"), str(threads * each).encode())


def strings(r):
    """SETEX, PSETEX, MSETNX, GETRANGE, SUBSTR, SETRANGE."""
    check("setex", r.setex("sx", 100, "v"), True)
    check("setex_ttl", 95 <= r.ttl("sx") <= 100, True)
    check("psetex", r.psetex("px", 100000, "v"), True)
    check("psetex_pttl", 95000 <= r.pttl("px") <= 100000, True)
    raises("setex_zero", lambda: r.setex("sx", 0, "v"), redis.ResponseError,
           "invalid expire time in 'setex' command")
    raises("psetex_negative", lambda: r.psetex("px", -5, "v"),
           redis.ResponseError, "invalid expire time in 'psetex' command")
    raises("setex_not_int", lambda: r.execute_command("SETEX", "sx", "x", "v"),
           redis.ResponseError, "value is not an integer")
    r.delete("m1", "m2", "m3")
    check("msetnx", r.msetnx({"m1": "a", "m2": "b"}), True)
    check("msetnx_one_exists", r.msetnx({"m2": "x", "m3": "c"}), False)
    check("msetnx_nothing_set", r.mget("m2", "m3"), ["b", None])
    raises("msetnx_odd", lambda: r.execute_command("MSETNX", "a", "1", "b"),
           redis.ResponseError, "wrong number of arguments for 'msetnx'")
    r.set("s", "Hello World")
    check("getrange", r.getrange("s", 0, 4), "Hello")
    check("getrange_negative", r.getrange("s", -5, -1), "World")
    check("getrange_clamped", r.getrange("s", 5, 1000), " World")
    check("getrange_empty", r.getrange("s", 5, 3), "")
    check("getrange_missing", r.getrange("nothing", 0, -1), "")
    check("substr", r.substr("s", 0, 4), "Hello")
    check("setrange", r.setrange("s", 6, "Redis"), 11)
    check("setrange_value", r.get("s"), "Hello Redis")
    r.delete("pad")
    check("setrange_pads", r.setrange("pad", 3, "x"), 4)
    check("setrange_padded", r.get("pad"), "\x00\x00\x00x")
    check("setrange_empty_missing", r.setrange("nothing", 5, ""), 0)
    check("setrange_empty_made_nothing", r.exists("nothing"), 0)
    raises("setrange_negative", lambda: r.setrange("s", -1, "x"),
           redis.ResponseError, "offset is out of range")
    raises("setrange_too_big", lambda: r.setrange("s", 1 << 40, "x"),
           redis.ResponseError, "string exceeds maximum allowed size")
    r.mset({"lcs1": "ohmytext", "lcs2": "mynewtext"})
    check("lcs", r.execute_command("LCS", "lcs1", "lcs2"), "mytext")
    check("lcs_len", r.execute_command("LCS", "lcs1", "lcs2", "LEN"), 6)
    check("lcs_idx", r.execute_command("LCS", "lcs1", "lcs2", "IDX",
                                       "MINMATCHLEN", "4", "WITHMATCHLEN"),
          ["matches", [[[4, 7], [5, 8], 4]], "len", 6])
    check("lcs_missing", r.execute_command("LCS", "lcs1", "nothing"), "")
    raises("lcs_len_idx",
           lambda: r.execute_command("LCS", "lcs1", "lcs2", "LEN", "IDX"),
           redis.ResponseError, "If you want both the length and indexes")
    r.mset({"lcs1": "a" * 5000, "lcs2": "b" * 5000})
    raises("lcs_bounded", lambda: r.execute_command("LCS", "lcs1", "lcs2"),
           redis.ResponseError, "would take more than 64 MiB")
    r.set("bits", "1")  # 0x31 = 00110001
    check("setbit", r.setbit("bits", 6, 1), 0)
    check("setbit_value", r.get("bits"), "3")  # 00110011
    check("setbit_old", r.setbit("bits", 2, 0), 1)
    check("getbit", [r.getbit("bits", i) for i in range(8)],
          [0, 0, 0, 1, 0, 0, 1, 1])
    check("getbit_past_end", r.getbit("bits", 100), 0)
    r.delete("bits")
    check("setbit_grows", (r.setbit("bits", 17, 1), r.strlen("bits")), (0, 3))
    raises("setbit_offset", lambda: r.setbit("bits", 1 << 32, 1),
           redis.ResponseError, "bit offset is not an integer or out of range")
    raises("setbit_bit", lambda: r.execute_command("SETBIT", "bits", 0, 2),
           redis.ResponseError,
           "bit is not an integer or out of range")
    raises("setbit_too_big", lambda: r.setbit("bits", (1 << 32) - 1, 1),
           redis.ResponseError, "string exceeds maximum allowed size")


def keyspace(r):
    """UNLINK, TOUCH, EXPIREAT, PEXPIREAT, EXPIRETIME, PEXPIRETIME,
    RENAMENX, COPY, RANDOMKEY, SCAN TYPE, FLUSHDB, SELECT."""
    r.mset({"k1": "1", "k2": "2", "k3": "3"})
    check("unlink", r.unlink("k1", "k2", "missing"), 2)
    check("touch", r.touch("k3", "k3", "missing"), 2)
    at = int(time.time()) + 1000
    check("expireat", r.expireat("k3", at), True)
    check("expiretime", r.execute_command("EXPIRETIME", "k3"), at)
    check("expireat_ttl", 990 <= r.ttl("k3") <= 1000, True)
    check("pexpireat", r.pexpireat("k3", at * 1000 + 500), True)
    check("pexpiretime",
          abs(r.execute_command("PEXPIRETIME", "k3") - (at * 1000 + 500)) <= 2,
          True)
    check("expireat_past_deletes", r.expireat("k3", 1), True)
    check("expireat_past_gone", r.exists("k3"), 0)
    check("expiretime_missing", r.execute_command("EXPIRETIME", "k3"), -2)
    r.set("k4", "v")
    check("expiretime_none", r.execute_command("EXPIRETIME", "k4"), -1)
    check("expireat_nx", r.expireat("k4", at, nx=True), True)
    check("expireat_nx_again", r.expireat("k4", at + 5, nx=True), False)
    r.set("src", "v", ex=500)
    r.set("dst", "old")
    check("renamenx_exists", r.renamenx("src", "dst"), False)
    check("renamenx", r.renamenx("src", "new"), True)
    check("renamenx_moved", (r.get("new"), r.exists("src")), ("v", 0))
    check("renamenx_ttl_kept", 490 <= r.ttl("new") <= 500, True)
    raises("renamenx_missing", lambda: r.renamenx("src", "x"),
           redis.ResponseError, "no such key")
    check("copy", r.copy("new", "copied"), True)
    check("copy_value", r.get("copied"), "v")
    check("copy_ttl", 490 <= r.ttl("copied") <= 500, True)
    check("copy_exists", r.copy("new", "dst"), False)
    check("copy_replace", r.copy("new", "dst", replace=True), True)
    check("copy_replaced", r.get("dst"), "v")
    check("copy_missing", r.copy("missing", "x"), False)
    check("copy_db0", r.execute_command("COPY", "new", "c2", "DB", "0"), 1)
    raises("copy_db1", lambda: r.copy("new", "c3", destination_db=1),
           redis.ResponseError, "DB index is out of range")
    raises("copy_same", lambda: r.copy("new", "new"), redis.ResponseError,
           "source and destination objects are the same")
    check("scan_type_string", sorted(r.scan_iter(match="cop*",
                                                 _type="string")),
          ["copied"])
    check("scan_type_hash", list(r.scan_iter(_type="hash")), [])
    check("select_0", r.execute_command("SELECT", 0), True)
    raises("select_1", lambda: r.execute_command("SELECT", 1),
           redis.ResponseError, "DB index is out of range")
    check("randomkey_some", r.randomkey() is not None, True)
    check("flushdb", r.flushdb(), True)
    check("flushdb_empty", r.dbsize(), 0)
    check("randomkey_empty", r.randomkey(), None)
    r.set("only", "1")
    check("randomkey_only", r.randomkey(), "only")
    sec, usec = r.time()
    check("time", abs(sec - time.time()) < 5 and 0 <= usec < 1000000, True)


def many_arguments(r):
    """More than 1024 arguments: Redis takes up to 1M (within the query
    buffer limit); weft's RESP limit was 1024, a protocol error."""
    n = 5000
    keys = [f"many:{i}" for i in range(n)]
    check("mset_5000_pairs", r.mset({k: str(i) for i, k in enumerate(keys)}),
          True)
    got = r.mget(keys)
    check("mget_5000", (len(got), got[0], got[-1]), (n, "0", str(n - 1)))
    check("exists_5000", r.exists(*keys), n)
    check("del_5000", r.delete(*keys), n)
    check("still_connected", r.ping(), True)


def config(r):
    """CONFIG GET and SET."""
    check("config_get", r.config_get("protected-mode"),
          {"protected-mode": "yes"})
    check("config_set_live", r.config_set("protected-mode", "no"), True)
    check("config_set_applied", r.config_get("protected-mode"),
          {"protected-mode": "no"})
    r.config_set("protected-mode", "yes")
    check("config_set_same_value", r.config_set("appendonly", "no"), True)
    raises("config_set_fixed", lambda: r.config_set("maxmemory", "100mb"),
           redis.ResponseError, "CONFIG SET failed (possibly related to "
           "argument 'maxmemory')")
    raises("config_set_unknown", lambda: r.config_set("no-such", "1"),
           redis.ResponseError, "Unknown option or number of arguments for "
           "CONFIG SET - 'no-such'")
    raises("config_set_bad_bool",
           lambda: r.config_set("protected-mode", "maybe"),
           redis.ResponseError, "argument must be 'yes' or 'no'")
    check("config_set_all_or_nothing", r.config_get("protected-mode"),
          {"protected-mode": "yes"})
    check("config_resetstat", r.config_resetstat(), True)


def clients(port):
    """CLIENT LIST and KILL across connections."""
    a = redis.Redis(port=port, decode_responses=True)
    b = redis.Redis(port=port, decode_responses=True)
    a.client_setname("alpha")
    b.client_setname("beta")
    b.get("x")
    listed = a.client_list()
    names = {c["name"] for c in listed}
    check("client_list_names", {"alpha", "beta"} <= names, True)
    beta = [c for c in listed if c["name"] == "beta"][0]
    check("client_list_last_cmd", beta["cmd"], "get")
    check("client_list_id", a.client_list(client_id=[beta["id"]])[0]["name"],
          "beta")
    check("client_list_type", a.client_list(_type="pubsub"), [])
    check("client_kill_id", a.client_kill_filter(_id=beta["id"]), 1)
    gone = False
    for _ in range(100):  # the close happens on b's loop
        try:
            b.connection_pool.get_connection("ping").send_command("PING")
            b.connection_pool.reset()
        except redis.ConnectionError:
            gone = True
            break
        if not any(c["name"] == "beta" for c in a.client_list()):
            gone = True
            break
        time.sleep(0.05)
    check("client_kill_closed", gone, True)
    check("client_kill_none", a.client_kill_filter(_id="999999"), 0)
    raises("client_kill_old_none", lambda: a.client_kill("1.2.3.4:5"),
           redis.ResponseError, "No such client")
    me = a.client_info()
    check("client_kill_skipme",
          a.client_kill_filter(addr=me["addr"], skipme=True), 0)


def outside(r):
    """A command outside the KV service: Redis' unknown command error."""
    raises("hset_unknown", lambda: r.hset("h", "f", "v"), redis.ResponseError,
           "unknown command 'HSET', with args beginning with: 'h' 'f' 'v'")


def main():
    port = int(sys.argv[1])
    r = redis.Redis(port=port, decode_responses=True)
    others = [redis.Redis(port=port) for _ in range(3)]
    for o in others:
        o.ping()  # three connections: at least one on the other loop
    r.flushall()
    for o in others:
        run(watch, r, o)
    run(optimistic_increments, port)
    for part in (strings, keyspace, many_arguments, config, outside):
        run(part, r)
    run(clients, port)
    sys.exit(summary())


main()
