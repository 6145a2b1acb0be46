/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/proto.h: the KV service's binary protocol over weft RPC.
 *
 * A request is one RPC REQUEST (include/weft/rpc.h) whose method id is the
 * command (kv_cmd) and whose payload is the arguments after the command
 * name, each a varint (LEB128) length followed by that many bytes:
 *
 *     payload = varint argc, { varint len, len bytes } * argc
 *
 * The reply is one RPC RESPONSE whose payload is one value, mirroring RESP's
 * types in a binary form (tag byte, then):
 *
 *     '+' simple string   varint len, bytes
 *     '-' error           varint len, bytes (e.g. "ERR value is not ...")
 *     ':' integer         8 bytes, big-endian, two's complement
 *     '$' bulk string     varint len, bytes
 *     '_' null            nothing
 *     '*' array           varint count, then count values
 *
 * An unknown method gets an RPC ERROR with WEFT_ENOSYS (the RPC server's
 * rule). docs/protocol.md has the RPC framing underneath.
 *
 * Threads: all functions are pure (no state) and safe on any thread.
 */
#ifndef WEFT_SAMPLES_KV_PROTO_H
#define WEFT_SAMPLES_KV_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/buf.h>

#include "store.h"

/** The commands; the value is the RPC method id. */
typedef enum kv_cmd {
  KV_CMD_PING = 1,
  KV_CMD_GET = 2,
  KV_CMD_SET = 3,
  KV_CMD_DEL = 4,
  KV_CMD_EXISTS = 5,
  KV_CMD_INCR = 6,
  KV_CMD_INCRBY = 7,
  KV_CMD_DECR = 8,
  KV_CMD_MGET = 9,
  KV_CMD_MSET = 10,
  KV_CMD_SCAN = 11,
  KV_CMD_DBSIZE = 12,
  KV_CMD_FLUSHALL = 13,
  KV_CMD_INFO = 14,
  KV_CMD_DECRBY = 15,
  KV_CMD_TTL = 16,
  KV_CMD_PTTL = 17,
  KV_CMD_EXPIRE = 18,
  KV_CMD_PEXPIRE = 19,
  KV_CMD_PERSIST = 20,
  KV_CMD_TYPE = 21,
  KV_CMD_KEYS = 22,
  KV_CMD_APPEND = 23,
  KV_CMD_STRLEN = 24,
  KV_CMD_GETDEL = 25,
  KV_CMD_GETEX = 26,
  KV_CMD_SETNX = 27,
  KV_CMD_GETSET = 28,
  KV_CMD_INCRBYFLOAT = 29,
  KV_CMD_RENAME = 30,
  KV_CMD_MULTI = 31,
  KV_CMD_EXEC = 32,
  KV_CMD_DISCARD = 33,
  KV_CMD_AUTH = 34,   /* the binary protocol's authenticate method too */
  KV_CMD_HELLO = 35,  /* RESP only */
  KV_CMD_CLIENT = 36, /* SETNAME, GETNAME, ID, INFO, ... */
  KV_CMD_COMMAND = 37,
  KV_CMD_ECHO = 38,
  KV_CMD_SELECT = 39,
  KV_CMD_CONFIG = 40,
  KV_CMD_QUIT = 41, /* RESP only */
  /* Redis Cluster (cluster.h): */
  KV_CMD_CLUSTER = 42,   /* SLOTS, SHARDS, NODES, SETSLOT, ... */
  KV_CMD_ASKING = 43,    /* the next command may use an importing slot */
  KV_CMD_READONLY = 44,  /* accepted (no replicas here) */
  KV_CMD_READWRITE = 45, /* accepted */
  KV_CMD_DUMP = 46,      /* a value in weft's payload (cluster_migrate.c) */
  KV_CMD_RESTORE = 47,   /* a DUMP payload back into a key */
  KV_CMD_RESTORE_ASKING = 48, /* RESTORE that MIGRATE sends (implies ASKING) */
  KV_CMD_MIGRATE = 49,        /* moves keys to another server */
  KV_CMD_WATCH = 50,
  KV_CMD_UNWATCH = 51,
  KV_CMD_FLUSHDB = 52,
  KV_CMD_SETEX = 53,
  KV_CMD_PSETEX = 54,
  KV_CMD_UNLINK = 55,
  KV_CMD_MSETNX = 56,
  KV_CMD_GETRANGE = 57,
  KV_CMD_SETRANGE = 58,
  KV_CMD_EXPIREAT = 59,
  KV_CMD_PEXPIREAT = 60,
  KV_CMD_RENAMENX = 61,
  KV_CMD_COPY = 62,
  KV_CMD_TOUCH = 63,
  KV_CMD_RANDOMKEY = 64,
  KV_CMD_EXPIRETIME = 65,
  KV_CMD_PEXPIRETIME = 66,
  KV_CMD_SUBSTR = 67,
  KV_CMD_TIME = 68,
  KV_CMD_SETBIT = 69,
  KV_CMD_GETBIT = 70,
  KV_CMD_LCS = 71,
  KV_CMD_SHUTDOWN = 72, /* stops the server ([kv] shutdown_command) */
  KV_CMD_COUNT_         /* one past the last */
} kv_cmd;

/** An argument: bytes that stay owned by whoever holds the message. */
typedef kv_key kv_arg;

/** The command's name in upper case ("GET"), or NULL if out of range. */
const char *kv_cmd_name(int cmd);

/**
 * The command named `name` (case-insensitive, as Redis), or 0 when the
 * name is not one of kv_cmd.
 */
int kv_cmd_from_name(const void *name, size_t len);

/**
 * True when the binary protocol serves `cmd` as a method: every command
 * but HELLO and QUIT, which are about the RESP connection (its protocol
 * version, its close).
 */
bool kv_cmd_rpc(int cmd);

/** Reply value tags. */
enum kv_tag {
  KV_TAG_SIMPLE = '+',
  KV_TAG_ERROR = '-',
  KV_TAG_INTEGER = ':',
  KV_TAG_BULK = '$',
  KV_TAG_NULL = '_',
  KV_TAG_ARRAY = '*'
};

/** Bytes kv_proto_write_args() needs for these arguments. */
size_t kv_proto_args_size(size_t argc, const kv_arg *argv);

/**
 * Appends the argument list to `b`. Returns 0 or WEFT_ENOSPC (then `b` may
 * hold part of it: size it with kv_proto_args_size first).
 */
int kv_proto_write_args(weft_buf *b, size_t argc, const kv_arg *argv);

/**
 * Parses an argument list from the readable bytes of `payload` without
 * copying: argv[i].ptr points into `payload`, valid while the caller holds
 * it. At most `max_args` are accepted. Returns 0 with `*argc` set,
 * WEFT_ERANGE when there are more than `max_args`, or
 * WEFT_EBADFRAME when the payload is malformed (truncated, trailing bytes).
 * NULL payload means no arguments.
 */
int kv_proto_read_args(const weft_buf *payload, size_t max_args, kv_arg *argv,
                       size_t *argc);

/* Reply writers: each appends one value (or an array header) to `b` and
 * returns 0, or WEFT_ENOSPC with nothing written. */
int kv_proto_write_simple(weft_buf *b, const char *s);
int kv_proto_write_error(weft_buf *b, const char *msg);
int kv_proto_write_integer(weft_buf *b, int64_t v);
int kv_proto_write_bulk(weft_buf *b, const void *data, size_t len);
int kv_proto_write_null(weft_buf *b);
int kv_proto_write_array(weft_buf *b, size_t count);

/** Bytes a bulk value of `len` bytes takes (tag, length, data). */
size_t kv_proto_bulk_size(size_t len);

/** One parsed reply value. For arrays, `len` is the element count and the
 *  elements follow as separate values. */
typedef struct kv_value {
  uint8_t tag;        /* enum kv_tag */
  int64_t integer;    /* KV_TAG_INTEGER */
  const uint8_t *ptr; /* SIMPLE, ERROR, BULK: the bytes, inside the buffer */
  size_t len;         /* SIMPLE, ERROR, BULK: bytes; ARRAY: count */
} kv_value;

/**
 * Reads the next value from the readable bytes of `b` and advances its
 * reader index past it. Returns 0, or WEFT_EBADFRAME (unknown tag,
 * truncated) with the reader index unchanged.
 */
int kv_proto_read_value(weft_buf *b, kv_value *out);

#endif
