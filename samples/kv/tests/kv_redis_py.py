#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""redis-py (Debian's python3-redis) against weft-kv-server.

Every command weft-kv-server added for Redis clients, through redis-py's
own methods where it has them: pipelines with and without a transaction
(transaction=True sends MULTI/EXEC), scan_iter, TTLs, DECR, INCRBYFLOAT,
INFO's sections, CLIENT, COMMAND, HELLO, and AUTH with requirepass and an
ACL user.

Usage: kv_redis_py.py PORT AUTH_PORT
  PORT       a server without a password
  AUTH_PORT  a server with [kv] requirepass = s3cret and the ACL user
             alice / apw
Run by samples/kv/tests/test_kv_redis_py.sh, which starts both. Prints one line per
failed check and "N passed, M failed"; exits 1 on any failure.
"""
import sys

import redis

from kv_checks import check, raises, run, summary

def strings_and_counters(r):
    """GET/SET and the string commands."""
    check("ping", r.ping(), True)
    check("set", r.set("greeting", "hello"), True)
    check("get", r.get("greeting"), "hello")
    check("append", r.append("greeting", " world"), 11)
    check("strlen", r.strlen("greeting"), 11)
    check("getdel", r.getdel("greeting"), "hello world")
    check("getdel_gone", r.get("greeting"), None)
    check("setnx", r.setnx("once", "1"), True)
    check("setnx_again", r.setnx("once", "2"), False)
    check("getset", r.getset("once", "3"), "1")
    check("set_get_option", r.set("once", "4", get=True), "3")
    check("decr", r.decr("counter"), -1)
    check("decrby", r.decr("counter", 10), -11)
    check("incrby", r.incrby("counter", 20), 9)
    check("incrbyfloat", r.incrbyfloat("float", 10.5), 10.5)
    check("incrbyfloat_again", r.incrbyfloat("float", 0.1), 10.6)
    check("incrbyfloat_text", r.get("float"), "10.6")
    raises("incrbyfloat_not_float", lambda: r.incrbyfloat("once", "x"),
           redis.ResponseError, "value is not a valid float")
    raises("incr_not_integer", lambda: r.incr("float"), redis.ResponseError,
           "value is not an integer or out of range")
    check("mset", r.mset({"m1": "a", "m2": "b"}), True)
    check("mget", r.mget("m1", "m2", "missing"), ["a", "b", None])
    check("rename", r.rename("m1", "m3"), True)
    check("rename_moved", r.mget("m1", "m3"), [None, "a"])
    raises("rename_missing", lambda: r.rename("missing", "x"),
           redis.ResponseError, "no such key")
    check("type", r.type("m3"), "string")
    check("type_none", r.type("missing"), "none")
    check("exists", r.exists("m2", "m3", "missing"), 2)
    check("delete", r.delete("m2", "m3"), 2)


def ttls(r):
    """EXPIRE and friends, GETEX."""
    r.set("t", "v", ex=100)
    check("ttl", r.ttl("t") in (99, 100), True)
    check("pttl", 99000 <= r.pttl("t") <= 100000, True)
    check("expire_nx", r.expire("t", 50, nx=True), False)
    check("expire_gt", r.expire("t", 500, gt=True), True)
    check("expire_lt", r.expire("t", 600, lt=True), False)
    check("pexpire", r.pexpire("t", 200000), True)
    check("ttl_after", r.ttl("t") in (199, 200), True)
    check("persist", r.persist("t"), True)
    check("ttl_persisted", r.ttl("t"), -1)
    check("ttl_missing", r.ttl("missing"), -2)
    check("getex_ex", r.getex("t", ex=30), "v")
    check("getex_ttl", r.ttl("t") in (29, 30), True)
    check("getex_persist", r.getex("t", persist=True), "v")
    check("getex_persisted", r.ttl("t"), -1)
    check("getex_px", r.getex("t", px=1), "v")
    check("expire_past_deletes", r.set("gone", "v", exat=1), True)
    check("expired_gone", r.exists("gone"), 0)
    raises("expire_bad_flags", lambda: r.expire("t", 5, nx=True, xx=True),
           redis.ResponseError, "NX and XX, GT or LT options")


def keys_and_scan(r):
    """KEYS and SCAN (scan_iter) over the same keys."""
    r.mset({f"user:{i}": str(i) for i in range(250)})
    r.mset({f"item:{i}": str(i) for i in range(50)})
    want = {f"user:{i}" for i in range(250)}
    check("keys", set(r.keys("user:*")), want)
    check("scan_iter", set(r.scan_iter(match="user:*", count=20)), want)
    check("scan_iter_all", len(set(r.scan_iter(count=1000))) >= 300, True)
    raises("keys_pattern_too_long", lambda: r.keys("*" * 1025),
           redis.ResponseError, "pattern too long")
    check("dbsize", r.dbsize() >= 300, True)


def pipelines(r):
    """Pipelines: plain (no MULTI) and transaction=True (MULTI/EXEC)."""
    p = r.pipeline(transaction=False)
    for i in range(100):
        p.set(f"p:{i}", i)
    p.incr("p:0").get("p:0")
    res = p.execute()
    check("pipeline_plain", (res[:2], res[-2:]), ([True, True], [1, "1"]))
    p = r.pipeline(transaction=True)
    p.set("tx", 1).incr("tx").incrbyfloat("tx", 0.5).get("tx")
    check("pipeline_transaction", p.execute(), [True, 2, 2.5, "2.5"])
    p = r.pipeline(transaction=True)
    p.set("tx", "x").incr("tx").get("tx")
    res = p.execute(raise_on_error=False)
    check("transaction_runtime_error",
          (res[0], type(res[1]).__name__, res[2]),
          (True, "ResponseError", "x"))
    p = r.pipeline(transaction=True)
    p.set("tx", "y").execute_command("GET")  # wrong arity: EXECABORT
    raises("transaction_aborted", p.execute, redis.ResponseError,
           "wrong number of arguments")
    check("transaction_aborted_unchanged", r.get("tx"), "x")
    one = redis.Redis(port=r.connection_pool.connection_kwargs["port"],
                      single_connection_client=True, decode_responses=True)
    one.execute_command("MULTI")
    check("queued", one.execute_command("INCR", "tx2"), "QUEUED")
    check("discard", one.execute_command("DISCARD"), "OK")
    check("discarded", one.get("tx2"), None)
    one.close()
    raises("exec_without_multi", lambda: r.execute_command("EXEC"),
           redis.ResponseError, "EXEC without MULTI")
    raises("discard_without_multi", lambda: r.execute_command("DISCARD"),
           redis.ResponseError, "DISCARD without MULTI")


def server_and_connection(r):
    """INFO, CLIENT, COMMAND, HELLO, CONFIG, SELECT, ECHO."""
    info = r.info()
    check("info_version", info.get("redis_version"), "7.0.0")
    check("info_weft_version", "weft_version" in info, True)
    check("info_clients", info.get("connected_clients", 0) >= 1, True)
    check("info_stats", "total_commands_processed" in info, True)
    check("info_keyspace", "db0" in info and info["db0"]["keys"] > 0, True)
    server = r.info("server")
    check("info_server_only", ("redis_version" in server,
                               "connected_clients" in server), (True, False))
    check("client_setname", r.client_setname("pytest"), True)
    check("client_getname", r.client_getname(), "pytest")
    cid = r.client_id()
    check("client_id", isinstance(cid, int) and cid > 0, True)
    ci = r.client_info()
    check("client_info", (ci.get("name"), ci.get("id"), ci.get("user")),
          ("pytest", cid, "default"))
    check("command_count", r.command_count(), 72)
    docs = r.execute_command("COMMAND DOCS", "get")  # no COMMAND callback
    check("command_docs", docs[0], "get")
    check("command_docs_summary", docs[1][:2], ["summary",
                                                "Returns the string value of "
                                                "a key."])
    cmds = r.command()
    check("command_info", (cmds["get"]["arity"], cmds["mset"]["step_count"]),
          (2, 2))
    hello = r.execute_command("HELLO", 2)
    check("hello", hello[:6], ["server", "redis", "version", "7.0.0",
                               "proto", 2])
    check("config_get", r.config_get("save"), {"save": ""})
    check("select", r.execute_command("SELECT", 0), True)
    check("echo", r.echo("hi"), "hi")


def auth(port):
    """requirepass and the ACL user: NOAUTH, WRONGPASS, AUTH in redis-py's
    connection setup."""
    anon = redis.Redis(port=port, decode_responses=True)
    raises("noauth", lambda: anon.get("k"), redis.AuthenticationError,
           "Authentication required")
    raises("wrongpass", lambda: redis.Redis(port=port, password="nope").get(
        "k"), redis.RedisError, "WRONGPASS")
    raises("wrongpass_user", lambda: redis.Redis(
        port=port, username="alice", password="s3cret").get("k"),
        redis.RedisError, "WRONGPASS")
    r = redis.Redis(port=port, password="s3cret", decode_responses=True)
    check("auth_default", r.set("k", "v"), True)
    check("auth_default_get", r.get("k"), "v")
    check("auth_user_info", r.client_info().get("user"), "default")
    u = redis.Redis(port=port, username="alice", password="apw",
                    decode_responses=True)
    check("auth_acl_user", u.get("k"), "v")
    check("auth_acl_user_info", u.client_info().get("user"), "alice")
    p = u.pipeline(transaction=True)
    check("auth_transaction", p.incr("n").incr("n").execute(), [1, 2])


def main():
    port, auth_port = int(sys.argv[1]), int(sys.argv[2])
    r = redis.Redis(port=port, decode_responses=True)
    r.flushall()
    for part in (strings_and_counters, ttls, keys_and_scan, pipelines,
                 server_and_connection):
        run(part, r)
    run(auth, auth_port)
    return summary()

if __name__ == "__main__":
    sys.exit(main())
