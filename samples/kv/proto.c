/* SPDX-License-Identifier: Apache-2.0 */
/* The KV binary protocol: argument lists and reply values (proto.h). */
#include "proto.h"

#include <string.h>
#include <strings.h>

#include <weft/error.h>
#include <weft/varint.h>

static const char *const cmd_names[KV_CMD_COUNT_] = {
    [KV_CMD_PING] = "PING",
    [KV_CMD_GET] = "GET",
    [KV_CMD_SET] = "SET",
    [KV_CMD_DEL] = "DEL",
    [KV_CMD_EXISTS] = "EXISTS",
    [KV_CMD_INCR] = "INCR",
    [KV_CMD_INCRBY] = "INCRBY",
    [KV_CMD_DECR] = "DECR",
    [KV_CMD_MGET] = "MGET",
    [KV_CMD_MSET] = "MSET",
    [KV_CMD_SCAN] = "SCAN",
    [KV_CMD_DBSIZE] = "DBSIZE",
    [KV_CMD_FLUSHALL] = "FLUSHALL",
    [KV_CMD_INFO] = "INFO",
    [KV_CMD_DECRBY] = "DECRBY",
    [KV_CMD_TTL] = "TTL",
    [KV_CMD_PTTL] = "PTTL",
    [KV_CMD_EXPIRE] = "EXPIRE",
    [KV_CMD_PEXPIRE] = "PEXPIRE",
    [KV_CMD_PERSIST] = "PERSIST",
    [KV_CMD_TYPE] = "TYPE",
    [KV_CMD_KEYS] = "KEYS",
    [KV_CMD_APPEND] = "APPEND",
    [KV_CMD_STRLEN] = "STRLEN",
    [KV_CMD_GETDEL] = "GETDEL",
    [KV_CMD_GETEX] = "GETEX",
    [KV_CMD_SETNX] = "SETNX",
    [KV_CMD_GETSET] = "GETSET",
    [KV_CMD_INCRBYFLOAT] = "INCRBYFLOAT",
    [KV_CMD_RENAME] = "RENAME",
    [KV_CMD_MULTI] = "MULTI",
    [KV_CMD_EXEC] = "EXEC",
    [KV_CMD_DISCARD] = "DISCARD",
    [KV_CMD_AUTH] = "AUTH",
    [KV_CMD_HELLO] = "HELLO",
    [KV_CMD_CLIENT] = "CLIENT",
    [KV_CMD_COMMAND] = "COMMAND",
    [KV_CMD_ECHO] = "ECHO",
    [KV_CMD_SELECT] = "SELECT",
    [KV_CMD_CONFIG] = "CONFIG",
    [KV_CMD_QUIT] = "QUIT",
    [KV_CMD_CLUSTER] = "CLUSTER",
    [KV_CMD_ASKING] = "ASKING",
    [KV_CMD_READONLY] = "READONLY",
    [KV_CMD_READWRITE] = "READWRITE",
    [KV_CMD_DUMP] = "DUMP",
    [KV_CMD_RESTORE] = "RESTORE",
    [KV_CMD_RESTORE_ASKING] = "RESTORE-ASKING",
    [KV_CMD_MIGRATE] = "MIGRATE",
    [KV_CMD_WATCH] = "WATCH",
    [KV_CMD_UNWATCH] = "UNWATCH",
    [KV_CMD_FLUSHDB] = "FLUSHDB",
    [KV_CMD_SETEX] = "SETEX",
    [KV_CMD_PSETEX] = "PSETEX",
    [KV_CMD_UNLINK] = "UNLINK",
    [KV_CMD_MSETNX] = "MSETNX",
    [KV_CMD_GETRANGE] = "GETRANGE",
    [KV_CMD_SETRANGE] = "SETRANGE",
    [KV_CMD_EXPIREAT] = "EXPIREAT",
    [KV_CMD_PEXPIREAT] = "PEXPIREAT",
    [KV_CMD_RENAMENX] = "RENAMENX",
    [KV_CMD_COPY] = "COPY",
    [KV_CMD_TOUCH] = "TOUCH",
    [KV_CMD_RANDOMKEY] = "RANDOMKEY",
    [KV_CMD_EXPIRETIME] = "EXPIRETIME",
    [KV_CMD_PEXPIRETIME] = "PEXPIRETIME",
    [KV_CMD_SUBSTR] = "SUBSTR",
    [KV_CMD_TIME] = "TIME",
    [KV_CMD_SETBIT] = "SETBIT",
    [KV_CMD_GETBIT] = "GETBIT",
    [KV_CMD_LCS] = "LCS",
    [KV_CMD_SHUTDOWN] = "SHUTDOWN",
};

const char *kv_cmd_name(int cmd) {
  return cmd > 0 && cmd < KV_CMD_COUNT_ ? cmd_names[cmd] : NULL;
}

int kv_cmd_from_name(const void *name, size_t len) {
  for (int c = 1; c < KV_CMD_COUNT_; c++)
    if (strlen(cmd_names[c]) == len &&
        strncasecmp(cmd_names[c], name, len) == 0)
      return c;
  return 0;
}

bool kv_cmd_rpc(int cmd) {
  return kv_cmd_name(cmd) != NULL && cmd != KV_CMD_HELLO && cmd != KV_CMD_QUIT;
}

size_t kv_proto_args_size(size_t argc, const kv_arg *argv) {
  size_t n = weft_varint_size(argc);
  for (size_t i = 0; i < argc; i++)
    n += weft_varint_size(argv[i].len) + argv[i].len;
  return n;
}

int kv_proto_write_args(weft_buf *b, size_t argc, const kv_arg *argv) {
  if (weft_buf_writable(b) < kv_proto_args_size(argc, argv))
    return WEFT_ENOSPC;
  weft_buf_write_varint(b, argc);
  for (size_t i = 0; i < argc; i++) {
    weft_buf_write_varint(b, argv[i].len);
    weft_buf_write_bytes(b, argv[i].ptr, argv[i].len);
  }
  return 0;
}

int kv_proto_read_args(const weft_buf *payload, size_t max_args, kv_arg *argv,
                       size_t *argc) {
  *argc = 0;
  if (payload == NULL)
    return 0;
  const uint8_t *p = weft_buf_rptr(payload);
  size_t left = weft_buf_readable(payload);
  uint64_t n, len;
  int used = weft_varint_decode(p, left, &n);
  if (used <= 0)
    return WEFT_EBADFRAME;
  if (n > max_args)
    return WEFT_ERANGE;
  p += used, left -= (size_t)used;
  for (uint64_t i = 0; i < n; i++) {
    used = weft_varint_decode(p, left, &len);
    if (used <= 0 || len > left - (size_t)used)
      return WEFT_EBADFRAME;
    p += used, left -= (size_t)used;
    argv[i] = (kv_arg){.ptr = p, .len = (size_t)len};
    p += len, left -= (size_t)len;
  }
  if (left != 0)
    return WEFT_EBADFRAME; /* trailing bytes: not what the client meant */
  *argc = (size_t)n;
  return 0;
}

/* tag + varint length + bytes, all or nothing */
static int write_tagged(weft_buf *b, uint8_t tag, const void *data,
                        size_t len) {
  if (weft_buf_writable(b) < 1 + weft_varint_size(len) + len)
    return WEFT_ENOSPC;
  weft_buf_write_u8(b, tag);
  weft_buf_write_varint(b, len);
  weft_buf_write_bytes(b, data, len);
  return 0;
}

int kv_proto_write_simple(weft_buf *b, const char *s) {
  return write_tagged(b, KV_TAG_SIMPLE, s, strlen(s));
}

int kv_proto_write_error(weft_buf *b, const char *msg) {
  return write_tagged(b, KV_TAG_ERROR, msg, strlen(msg));
}

int kv_proto_write_integer(weft_buf *b, int64_t v) {
  if (weft_buf_writable(b) < 9)
    return WEFT_ENOSPC;
  weft_buf_write_u8(b, KV_TAG_INTEGER);
  weft_buf_write_u64be(b, (uint64_t)v);
  return 0;
}

int kv_proto_write_bulk(weft_buf *b, const void *data, size_t len) {
  return write_tagged(b, KV_TAG_BULK, data, len);
}

int kv_proto_write_null(weft_buf *b) {
  return weft_buf_write_u8(b, KV_TAG_NULL);
}

int kv_proto_write_array(weft_buf *b, size_t count) {
  if (weft_buf_writable(b) < 1 + weft_varint_size(count))
    return WEFT_ENOSPC;
  weft_buf_write_u8(b, KV_TAG_ARRAY);
  weft_buf_write_varint(b, count);
  return 0;
}

size_t kv_proto_bulk_size(size_t len) {
  return 1 + weft_varint_size(len) + len;
}

int kv_proto_read_value(weft_buf *b, kv_value *out) {
  const uint8_t *p = weft_buf_rptr(b);
  size_t left = weft_buf_readable(b);
  if (left < 1)
    return WEFT_EBADFRAME;
  *out = (kv_value){.tag = p[0]};
  size_t used = 1;
  uint64_t len = 0;
  int n;
  switch (p[0]) {
  case KV_TAG_NULL:
    break;
  case KV_TAG_INTEGER:
    if (left < 9)
      return WEFT_EBADFRAME;
    out->integer = (int64_t)weft_buf_get_u64be(b, b->reader_index + 1);
    used = 9;
    break;
  case KV_TAG_ARRAY:
    if ((n = weft_varint_decode(p + 1, left - 1, &len)) <= 0)
      return WEFT_EBADFRAME;
    out->len = (size_t)len;
    used += (size_t)n;
    break;
  case KV_TAG_SIMPLE:
  case KV_TAG_ERROR:
  case KV_TAG_BULK:
    if ((n = weft_varint_decode(p + 1, left - 1, &len)) <= 0 ||
        len > left - 1 - (size_t)n)
      return WEFT_EBADFRAME;
    used += (size_t)n;
    out->ptr = p + used;
    out->len = (size_t)len;
    used += (size_t)len;
    break;
  default:
    return WEFT_EBADFRAME;
  }
  b->reader_index += used;
  return 0;
}
