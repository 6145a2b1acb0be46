/* The KV commands (command.h): argument checks in Redis' words, then the
 * store. One function per command, chosen from a table by command id. */
#include "command.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <weft/error.h>

typedef struct call {
  const kv_exec_env *env;
  const char *name; /* lower case, for error messages */
  size_t argc;
  const kv_arg *argv;
  const kv_reply_ops *ops;
  void *w;
} call;

static void reply_error(const call *c, const char *fmt, const char *arg) {
  char msg[160];
  snprintf(msg, sizeof msg, fmt, arg);
  c->ops->error(c->w, msg);
}

static void wrong_arity(const call *c) {
  reply_error(c, "ERR wrong number of arguments for '%s' command", c->name);
}

static void store_error(const call *c, int err) {
  reply_error(c, "ERR %s", kv_error_message(err));
}

/* Parses a decimal int64 the way Redis does: no spaces, no '+', no
 * leading zeros ("0" itself is fine), no overflow. */
static bool parse_i64(const kv_arg *a, int64_t *out) {
  char buf[24];
  if (a->len == 0 || a->len >= sizeof buf)
    return false;
  memcpy(buf, a->ptr, a->len);
  buf[a->len] = '\0';
  const char *digits = buf[0] == '-' ? buf + 1 : buf;
  if (digits[0] < '1' || digits[0] > '9')
    if (strcmp(buf, "0") != 0)
      return false;
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  *out = v;
  return true;
}

static bool arg_is(const kv_arg *a, const char *s) {
  return a->len == strlen(s) && strncasecmp(a->ptr, s, a->len) == 0;
}

/* ---- commands ---- */

static void cmd_ping(const call *c) {
  if (c->argc > 1)
    wrong_arity(c);
  else if (c->argc == 1)
    c->ops->bulk(c->w, c->argv[0].ptr, c->argv[0].len, NULL);
  else
    c->ops->simple(c->w, "PONG");
}

static void cmd_get(const call *c) {
  if (c->argc != 1)
    return wrong_arity(c);
  kv_blob *blob;
  int rc = kv_get(c->env->store, c->argv[0].ptr, c->argv[0].len, &blob);
  if (rc < 0)
    return store_error(c, rc);
  if (rc == 0)
    return c->ops->null(c->w);
  c->ops->bulk(c->w, blob->data, blob->len, blob);
  kv_blob_release(blob);
}

/* SET key value [NX|XX] [EX s|PX ms|KEEPTTL] */
static int parse_set_options(const call *c, kv_set_options *o) {
  *o = (kv_set_options){0};
  for (size_t i = 2; i < c->argc; i++) {
    const kv_arg *a = &c->argv[i];
    int64_t n;
    if (arg_is(a, "NX")) {
      o->flags |= KV_SET_NX;
    } else if (arg_is(a, "XX")) {
      o->flags |= KV_SET_XX;
    } else if (arg_is(a, "KEEPTTL")) {
      o->flags |= KV_SET_KEEPTTL;
    } else if ((arg_is(a, "EX") || arg_is(a, "PX")) && i + 1 < c->argc &&
               o->ttl_ms == 0) {
      bool ex = arg_is(a, "EX");
      if (!parse_i64(&c->argv[++i], &n)) {
        c->ops->error(c->w, "ERR value is not an integer or out of range");
        return -1;
      }
      if (n <= 0 || (ex && kv_ttl_ms_from_seconds(n, &o->ttl_ms) < 0)) {
        c->ops->error(c->w, "ERR invalid expire time in 'set' command");
        return -1;
      }
      if (!ex)
        o->ttl_ms = n;
    } else {
      c->ops->error(c->w, "ERR syntax error");
      return -1;
    }
  }
  return 0;
}

static void cmd_set(const call *c) {
  if (c->argc < 2)
    return wrong_arity(c);
  kv_set_options o;
  if (parse_set_options(c, &o) < 0)
    return;
  int rc = kv_set(c->env->store, c->argv[0].ptr, c->argv[0].len, c->argv[1].ptr,
                  c->argv[1].len, &o);
  if (rc == WEFT_EINVAL)
    return c->ops->error(c->w, "ERR syntax error");
  if (rc < 0)
    return store_error(c, rc);
  if (rc == 0)
    return c->ops->null(c->w); /* NX/XX not met */
  c->ops->simple(c->w, "OK");
}

static void cmd_del_exists(const call *c,
                           int (*fn)(kv_store *, size_t, const kv_key *)) {
  if (c->argc < 1)
    return wrong_arity(c);
  int rc = fn(c->env->store, c->argc, c->argv);
  if (rc < 0)
    return store_error(c, rc);
  c->ops->integer(c->w, rc);
}

static void cmd_del(const call *c) { cmd_del_exists(c, kv_del); }
static void cmd_exists(const call *c) { cmd_del_exists(c, kv_exists); }

static void incr_by(const call *c, int64_t delta) {
  int64_t result;
  int rc =
      kv_incrby(c->env->store, c->argv[0].ptr, c->argv[0].len, delta, &result);
  if (rc < 0)
    return store_error(c, rc);
  c->ops->integer(c->w, result);
}

static void cmd_incr(const call *c) {
  if (c->argc != 1)
    return wrong_arity(c);
  incr_by(c, 1);
}

static void cmd_decr(const call *c) {
  if (c->argc != 1)
    return wrong_arity(c);
  incr_by(c, -1);
}

static void cmd_incrby(const call *c) {
  int64_t delta;
  if (c->argc != 2)
    return wrong_arity(c);
  if (!parse_i64(&c->argv[1], &delta))
    return c->ops->error(c->w, "ERR value is not an integer or out of range");
  incr_by(c, delta);
}

static void cmd_mget(const call *c) {
  if (c->argc < 1)
    return wrong_arity(c);
  kv_blob **blobs = calloc(c->argc, sizeof *blobs);
  if (blobs == NULL)
    return store_error(c, WEFT_ENOMEM);
  int rc = kv_mget(c->env->store, c->argc, c->argv, blobs);
  if (rc < 0) {
    free(blobs);
    return store_error(c, rc);
  }
  c->ops->array(c->w, c->argc);
  for (size_t i = 0; i < c->argc; i++) {
    if (blobs[i] == NULL) {
      c->ops->null(c->w);
      continue;
    }
    c->ops->bulk(c->w, blobs[i]->data, blobs[i]->len, blobs[i]);
    kv_blob_release(blobs[i]);
  }
  free(blobs);
}

static void cmd_mset(const call *c) {
  if (c->argc < 2 || c->argc % 2 != 0)
    return wrong_arity(c);
  size_t n = c->argc / 2;
  kv_key *keys = malloc(n * sizeof *keys), *vals = malloc(n * sizeof *vals);
  int rc = WEFT_ENOMEM;
  if (keys != NULL && vals != NULL) {
    for (size_t i = 0; i < n; i++) {
      keys[i] = c->argv[2 * i];
      vals[i] = c->argv[2 * i + 1];
    }
    rc = kv_mset(c->env->store, n, keys, vals);
  }
  free(keys);
  free(vals);
  if (rc < 0)
    return store_error(c, rc);
  c->ops->simple(c->w, "OK");
}

/* SCAN cursor [MATCH pattern] [COUNT count]: COUNT above KV_SCAN_COUNT_MAX
 * is taken as that (a hint, as in Redis), a pattern longer than
 * KV_SCAN_PATTERN_MAX is refused; kv_scan bounds the rest of the work. */
static void cmd_scan(const call *c) {
  if (c->argc < 1)
    return wrong_arity(c);
  int64_t cursor, count = 10;
  const kv_arg *match = NULL;
  if (!parse_i64(&c->argv[0], &cursor) || cursor < 0)
    return c->ops->error(c->w, "ERR invalid cursor");
  for (size_t i = 1; i < c->argc; i += 2) {
    if (i + 1 >= c->argc)
      return c->ops->error(c->w, "ERR syntax error");
    if (arg_is(&c->argv[i], "MATCH"))
      match = &c->argv[i + 1];
    else if (!arg_is(&c->argv[i], "COUNT"))
      return c->ops->error(c->w, "ERR syntax error");
    else if (!parse_i64(&c->argv[i + 1], &count) || count < 1)
      return c->ops->error(c->w, "ERR value is out of range, must be "
                                 "positive");
  }
  if (match != NULL && match->len > KV_SCAN_PATTERN_MAX) {
    char msg[80];
    snprintf(msg, sizeof msg,
             "ERR MATCH pattern too long, must be at most %u "
             "bytes",
             KV_SCAN_PATTERN_MAX);
    return c->ops->error(c->w, msg);
  }
  kv_scan_result res = {0};
  uint64_t next;
  int rc =
      kv_scan(c->env->store, (uint64_t)cursor, (size_t)count,
              match ? match->ptr : NULL, match ? match->len : 0, &res, &next);
  if (rc < 0) {
    kv_scan_result_clear(&res);
    return store_error(c, rc);
  }
  char cur[24];
  int len = snprintf(cur, sizeof cur, "%" PRIu64, next);
  c->ops->array(c->w, 2);
  c->ops->bulk(c->w, cur, (size_t)len, NULL);
  c->ops->array(c->w, res.n);
  for (size_t i = 0; i < res.n; i++)
    c->ops->bulk(c->w, res.keys[i]->data, res.keys[i]->len, res.keys[i]);
  kv_scan_result_clear(&res);
}

static void cmd_dbsize(const call *c) {
  if (c->argc != 0)
    return wrong_arity(c);
  c->ops->integer(c->w, (int64_t)kv_dbsize(c->env->store));
}

static void cmd_flushall(const call *c) {
  /* FLUSHALL [ASYNC|SYNC]: both flush now, and free a large store on the
   * store's lazy-free thread (kv_flushall). */
  if (c->argc > 1 || (c->argc == 1 && !arg_is(&c->argv[0], "ASYNC") &&
                      !arg_is(&c->argv[0], "SYNC")))
    return c->ops->error(c->w, "ERR syntax error");
  int rc = kv_flushall(c->env->store);
  if (rc < 0)
    return store_error(c, rc);
  c->ops->simple(c->w, "OK");
}

static void cmd_info(const call *c) {
  kv_store_stats st;
  kv_store_stats_get(c->env->store, &st);
  char text[1024];
  int n = snprintf(
      text, sizeof text,
      "# Server\r\nweft_kv:1\r\n%s"
      "# Stats\r\nkeyspace_hits:%" PRIu64 "\r\nkeyspace_misses:%" PRIu64
      "\r\nexpired_keys:%" PRIu64 "\r\n# Memory\r\nused_memory_payload:%" PRIu64
      "\r\n# Keyspace\r\ndb0:keys=%" PRIu64 ",expires=%" PRIu64 "\r\n",
      c->env->server_info ? c->env->server_info : "", st.hits, st.misses,
      st.expired_keys, st.mem_bytes, st.keys, st.expires);
  c->ops->bulk(c->w, text, n < (int)sizeof text ? (size_t)n : sizeof text - 1,
               NULL);
}

static void (*const commands[KV_CMD_COUNT_])(const call *) = {
    [KV_CMD_PING] = cmd_ping,         [KV_CMD_GET] = cmd_get,
    [KV_CMD_SET] = cmd_set,           [KV_CMD_DEL] = cmd_del,
    [KV_CMD_EXISTS] = cmd_exists,     [KV_CMD_INCR] = cmd_incr,
    [KV_CMD_INCRBY] = cmd_incrby,     [KV_CMD_DECR] = cmd_decr,
    [KV_CMD_MGET] = cmd_mget,         [KV_CMD_MSET] = cmd_mset,
    [KV_CMD_SCAN] = cmd_scan,         [KV_CMD_DBSIZE] = cmd_dbsize,
    [KV_CMD_FLUSHALL] = cmd_flushall, [KV_CMD_INFO] = cmd_info,
};

void kv_exec(const kv_exec_env *env, int cmd, size_t argc, const kv_arg *argv,
             const kv_reply_ops *ops, void *w) {
  const char *upper = kv_cmd_name(cmd);
  if (upper == NULL) {
    ops->error(w, "ERR unknown command");
    return;
  }
  char name[16];
  size_t i = 0;
  for (; upper[i] != '\0' && i + 1 < sizeof name; i++)
    name[i] = (char)(upper[i] | 0x20); /* ASCII letters to lower case */
  name[i] = '\0';
  call c = {
      .env = env, .name = name, .argc = argc, .argv = argv, .ops = ops, .w = w};
  commands[cmd](&c);
}
