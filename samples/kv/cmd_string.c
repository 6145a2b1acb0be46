/* SPDX-License-Identifier: Apache-2.0 */
/* The string commands (command_internal.h): GET, SET, SETNX, SETEX,
 * PSETEX, GETSET, GETDEL, GETEX, GETRANGE (and SUBSTR), SETRANGE, APPEND,
 * STRLEN, INCR, INCRBY, DECR, DECRBY, INCRBYFLOAT, MGET, MSET, MSETNX, SETBIT,
 * GETBIT. Arguments are checked in Redis 7's order with its error texts, then
 * the store does the work. */
#include "command_internal.h"

#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

/* ---- SET's and GETEX's options (Redis' parseExtendedStringArguments) ---- */

enum {
  OPT_NX = 1u << 0,
  OPT_XX = 1u << 1,
  OPT_GET = 1u << 2,
  OPT_KEEPTTL = 1u << 3,
  OPT_PERSIST = 1u << 4,
  OPT_EX = 1u << 5,
  OPT_PX = 1u << 6,
  OPT_EXAT = 1u << 7,
  OPT_PXAT = 1u << 8,
};
#define OPT_TTL (OPT_EX | OPT_PX | OPT_EXAT | OPT_PXAT)

/* The options after the first `from` arguments. */
typedef struct ext_opts {
  unsigned flags;
  const kv_arg *expire; /* EX, PX, EXAT or PXAT's argument */
} ext_opts;

/* Parses SET's (`set`) or GETEX's options as Redis 7 does: each option at
 * most once with the ones it conflicts with, a later EX/PX/... of the same
 * kind replacing the earlier. False after a syntax error reply. */
static bool parse_ext(const kv_call *c, size_t from, bool set, ext_opts *o) {
  static const struct {
    const char *name;
    unsigned flag, conflicts;
    bool set_only, get_only, arg;
  } opts[] = {
      {"NX", OPT_NX, OPT_XX, true, false, false},
      {"XX", OPT_XX, OPT_NX, true, false, false},
      {"GET", OPT_GET, 0, true, false, false},
      {"KEEPTTL", OPT_KEEPTTL, OPT_PERSIST | OPT_TTL, true, false, false},
      {"PERSIST", OPT_PERSIST, OPT_TTL, false, true, false},
      {"EX", OPT_EX, OPT_KEEPTTL | OPT_PERSIST | (OPT_TTL & ~OPT_EX), false,
       false, true},
      {"PX", OPT_PX, OPT_KEEPTTL | OPT_PERSIST | (OPT_TTL & ~OPT_PX), false,
       false, true},
      {"EXAT", OPT_EXAT, OPT_KEEPTTL | OPT_PERSIST | (OPT_TTL & ~OPT_EXAT),
       false, false, true},
      {"PXAT", OPT_PXAT, OPT_KEEPTTL | OPT_PERSIST | (OPT_TTL & ~OPT_PXAT),
       false, false, true},
  };
  *o = (ext_opts){0};
  for (size_t j = from; j < c->argc; j++) {
    size_t i = 0;
    for (; i < sizeof opts / sizeof opts[0]; i++)
      if (kv_arg_is(&c->argv[j], opts[i].name) &&
          !(o->flags & opts[i].conflicts) && !(opts[i].set_only && !set) &&
          !(opts[i].get_only && set) && !(opts[i].arg && j + 1 >= c->argc))
        break;
    if (i == sizeof opts / sizeof opts[0]) {
      kv_reply_syntax(c);
      return false;
    }
    o->flags |= opts[i].flag;
    if (opts[i].arg)
      o->expire = &c->argv[++j];
  }
  return true;
}

/* The TTL the options ask for, Redis' getExpireMillisecondsOrReply: into
 * *ttl_ms relative to now (<= 0 when EXAT or PXAT is past, > 0 else;
 * clamped to KV_TTL_MAX_MS). False after an error reply. */
static bool ext_ttl(const kv_call *c, const ext_opts *o, int64_t *ttl_ms) {
  int64_t v;
  if (!kv_parse_i64(o->expire, &v)) {
    kv_reply_not_integer(c);
    return false;
  }
  bool seconds = o->flags & (OPT_EX | OPT_EXAT);
  bool absolute = o->flags & (OPT_EXAT | OPT_PXAT);
  int64_t now = kv_unix_ms();
  if (v <= 0 || (seconds && v > INT64_MAX / 1000) ||
      (!absolute && (seconds ? v * 1000 : v) > INT64_MAX - now)) {
    kv_reply_errorf(c, "ERR invalid expire time in '%s' command", c->name);
    return false;
  }
  v = seconds ? v * 1000 : v;
  *ttl_ms = absolute ? v - now : v;
  if (*ttl_ms > KV_TTL_MAX_MS)
    *ttl_ms = KV_TTL_MAX_MS;
  return true;
}

/* Replies with a stored value (NULL: nil) and releases it. */
static void reply_blob(const kv_call *c, kv_blob *b) {
  if (b == NULL)
    return c->ops->null(c->w);
  c->ops->bulk(c->w, b->data, b->len, b);
  kv_blob_release(b);
}

/* ---- GET, SET and their variants ---- */

/* GET, or GETDEL with kv_getdel as `get`: the value, or nil. */
static void get_with(const kv_call *c,
                     int (*get)(kv_store *, const void *, size_t, kv_blob **)) {
  kv_blob *blob;
  int rc = get(c->store, c->argv[0].ptr, c->argv[0].len, &blob);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  reply_blob(c, blob);
}

void kv_cmd_get(const kv_call *c) { get_with(c, kv_get); }

/* SET key value with store options; `get` asks for the old value. Replies
 * as SET does (OK / nil, or the old value with GET), or with 1 / 0 when
 * `as_int` (SETNX). */
static void set_with(const kv_call *c, const kv_set_options *o, bool get,
                     bool as_int) {
  kv_blob *blob, *old = NULL;
  int rc = kv_blob_new(c->store, c->argv[1].len, &blob);
  if (rc == 0) {
    if (c->argv[1].len > 0)
      memcpy(blob->data, c->argv[1].ptr, c->argv[1].len);
    rc = get ? kv_set_get(c->store, c->argv[0].ptr, c->argv[0].len, blob, o,
                          &old)
             : kv_set_blob(c->store, c->argv[0].ptr, c->argv[0].len, blob, o);
  }
  if (rc == WEFT_EINVAL)
    return kv_reply_syntax(c);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  if (as_int)
    return c->ops->integer(c->w, rc);
  if (get)
    return reply_blob(c, old);
  if (rc == 0)
    return c->ops->null(c->w); /* NX/XX not met */
  c->ops->simple(c->w, "OK");
}

/* SET key value [NX|XX] [GET] [EX s|PX ms|EXAT t|PXAT t|KEEPTTL] */
void kv_cmd_set(const kv_call *c) {
  ext_opts o;
  if (!parse_ext(c, 2, true, &o))
    return;
  kv_set_options so = {0};
  so.flags |= (o.flags & OPT_NX) ? KV_SET_NX : 0;
  so.flags |= (o.flags & OPT_XX) ? KV_SET_XX : 0;
  so.flags |= (o.flags & OPT_KEEPTTL) ? KV_SET_KEEPTTL : 0;
  if (o.expire != NULL) {
    int64_t ttl;
    if (!ext_ttl(c, &o, &ttl))
      return;
    if (ttl <= 0)
      so.flags |= KV_SET_EXPIRED;
    else
      so.ttl_ms = ttl;
  }
  set_with(c, &so, o.flags & OPT_GET, false);
}

/* SETNX key value: 1 when set, 0 when the key existed. */
void kv_cmd_setnx(const kv_call *c) {
  kv_set_options so = {.flags = KV_SET_NX};
  set_with(c, &so, false, true);
}

/* GETSET key value: the old value, or nil. */
void kv_cmd_getset(const kv_call *c) { set_with(c, NULL, true, false); }

/* GETDEL key: the value (or nil), and the key deleted. */
void kv_cmd_getdel(const kv_call *c) { get_with(c, kv_getdel); }

/* GETEX key [EX s|PX ms|EXAT t|PXAT t|PERSIST]. As Redis: a missing key is
 * nil even when the expire time is invalid. */
void kv_cmd_getex(const kv_call *c) {
  ext_opts o;
  if (!parse_ext(c, 1, false, &o))
    return;
  kv_getex_mode mode = o.flags & OPT_PERSIST ? KV_GETEX_PERSIST
                       : o.expire != NULL    ? KV_GETEX_SET
                                             : KV_GETEX_KEEP;
  int64_t ttl = 0;
  kv_blob *blob;
  int rc;
  if (o.expire != NULL) {
    /* Checked (with its error reply) only once the key is known. */
    rc = kv_get(c->store, c->argv[0].ptr, c->argv[0].len, &blob);
    if (rc <= 0)
      return rc < 0 ? kv_reply_store_error(c, rc) : c->ops->null(c->w);
    kv_blob_release(blob);
    if (!ext_ttl(c, &o, &ttl))
      return;
  }
  rc = kv_getex(c->store, c->argv[0].ptr, c->argv[0].len, mode, ttl, &blob);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  reply_blob(c, blob);
}

/* APPEND key value: the new length. */
void kv_cmd_append(const kv_call *c) {
  size_t n;
  int rc = kv_append(c->store, c->argv[0].ptr, c->argv[0].len, c->argv[1].ptr,
                     c->argv[1].len, &n);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, (int64_t)n);
}

/* STRLEN key: the value's length, 0 for a missing key. */
void kv_cmd_strlen(const kv_call *c) {
  kv_blob *blob;
  int rc = kv_get(c->store, c->argv[0].ptr, c->argv[0].len, &blob);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, blob != NULL ? (int64_t)blob->len : 0);
  kv_blob_release(blob);
}

/* ---- counters ---- */

static void incr_by(const kv_call *c, int64_t delta) {
  int64_t result;
  int rc = kv_incrby(c->store, c->argv[0].ptr, c->argv[0].len, delta, &result);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, result);
}

/* INCR key. */
void kv_cmd_incr(const kv_call *c) { incr_by(c, 1); }

/* DECR key. */
void kv_cmd_decr(const kv_call *c) { incr_by(c, -1); }

/* INCRBY key increment. */
void kv_cmd_incrby(const kv_call *c) {
  int64_t delta;
  if (!kv_parse_i64(&c->argv[1], &delta))
    return kv_reply_not_integer(c);
  incr_by(c, delta);
}

/* DECRBY key decrement (Redis refuses the one it cannot negate). */
void kv_cmd_decrby(const kv_call *c) {
  int64_t delta;
  if (!kv_parse_i64(&c->argv[1], &delta))
    return kv_reply_not_integer(c);
  if (delta == INT64_MIN) /* cannot be negated */
    return c->ops->error(c->w, "ERR decrement would overflow");
  incr_by(c, -delta);
}

/* INCRBYFLOAT key increment: the new value as a bulk string. */
void kv_cmd_incrbyfloat(const kv_call *c) {
  long double incr;
  if (!kv_parse_long_double(c->argv[1].ptr, c->argv[1].len, &incr))
    return c->ops->error(c->w, "ERR value is not a valid float");
  kv_blob *v;
  int rc = kv_incrbyfloat(c->store, c->argv[0].ptr, c->argv[0].len, incr, &v);
  if (rc == WEFT_EINVAL)
    return c->ops->error(c->w, "ERR value is not a valid float");
  if (rc == WEFT_ERANGE)
    return c->ops->error(c->w, "ERR increment would produce NaN or Infinity");
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  reply_blob(c, v);
}

/* ---- several keys ---- */

void kv_cmd_mget(const kv_call *c) {
  kv_blob **blobs = calloc(c->argc, sizeof *blobs);
  if (blobs == NULL)
    return kv_reply_store_error(c, WEFT_ENOMEM);
  int rc = kv_mget(c->store, c->argc, c->argv, blobs);
  if (rc < 0) {
    free(blobs);
    return kv_reply_store_error(c, rc);
  }
  c->ops->array(c->w, c->argc);
  for (size_t i = 0; i < c->argc; i++)
    reply_blob(c, blobs[i]);
  free(blobs);
}

/* MSET's and MSETNX's pairs as keys and values (the caller frees both),
 * false after an error reply (an odd count, out of memory). */
static bool split_pairs(const kv_call *c, kv_key **keys, kv_key **vals) {
  *keys = *vals = NULL;
  if (c->argc % 2 != 0) {
    kv_reply_arity(c);
    return false;
  }
  size_t n = c->argc / 2;
  *keys = malloc(n * sizeof **keys);
  *vals = malloc(n * sizeof **vals);
  if (*keys == NULL || *vals == NULL) {
    free(*keys), free(*vals);
    kv_reply_store_error(c, WEFT_ENOMEM);
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    (*keys)[i] = c->argv[2 * i];
    (*vals)[i] = c->argv[2 * i + 1];
  }
  return true;
}

/* MSET key value [key value ...]: atomic. */
void kv_cmd_mset(const kv_call *c) {
  kv_key *keys, *vals;
  if (!split_pairs(c, &keys, &vals))
    return;
  int rc = kv_mset(c->store, c->argc / 2, keys, vals);
  free(keys);
  free(vals);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->simple(c->w, "OK");
}

/* MSETNX key value [key value ...]: 1 and every pair set when none of the
 * keys exists, else 0 and nothing set; one step (the keys' stripes held
 * over the check and the MSET). */
void kv_cmd_msetnx(const kv_call *c) {
  kv_key *keys, *vals;
  if (!split_pairs(c, &keys, &vals))
    return;
  size_t n = c->argc / 2;
  kv_txn t;
  bool own = kv_txn_lock_keys(&t, c->store, n, keys);
  int rc = kv_exists(c->store, n, keys);
  if (rc == 0) {
    int err = kv_mset(c->store, n, keys, vals); /* EMSGSIZE, ENOMEM */
    rc = err == 0 ? 1 : err;
  } else if (rc > 0)
    rc = 0;
  if (own)
    kv_txn_unlock(&t);
  free(keys);
  free(vals);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, rc);
}

/* SETEX and PSETEX key time value: SET with a TTL in seconds or ms,
 * Redis' "invalid expire time" for one <= 0 or past int64 in ms. */
static void setex_cmd(const kv_call *c, bool seconds) {
  int64_t v;
  if (!kv_parse_i64(&c->argv[1], &v))
    return kv_reply_not_integer(c);
  if (v <= 0 || (seconds && v > INT64_MAX / 1000) ||
      (seconds ? v * 1000 : v) > INT64_MAX - kv_unix_ms())
    return kv_reply_errorf(c, "ERR invalid expire time in '%s' command",
                           c->name);
  v = seconds ? v * 1000 : v;
  kv_set_options so = {.ttl_ms = v > KV_TTL_MAX_MS ? KV_TTL_MAX_MS : v};
  kv_call set = *c; /* SET key value: the value comes third here */
  kv_arg args[2] = {c->argv[0], c->argv[2]};
  set.argv = args;
  set.argc = 2;
  set_with(&set, &so, false, false);
}

/* SETEX key seconds value. */
void kv_cmd_setex(const kv_call *c) { setex_cmd(c, true); }

/* PSETEX key milliseconds value. */
void kv_cmd_psetex(const kv_call *c) { setex_cmd(c, false); }

/* GETRANGE (and SUBSTR) key start end: the bytes from start to end
 * inclusive, negative counting from the end, clamped, as Redis 7. */
void kv_cmd_getrange(const kv_call *c) {
  int64_t start, end;
  if (!kv_parse_i64(&c->argv[1], &start) || !kv_parse_i64(&c->argv[2], &end))
    return kv_reply_not_integer(c);
  kv_blob *b;
  int rc = kv_get(c->store, c->argv[0].ptr, c->argv[0].len, &b);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  int64_t len = b != NULL ? (int64_t)b->len : 0;
  if (start < 0 && end < 0 && start > end)
    len = 0; /* Redis: an empty range however long the value */
  if (start < 0)
    start += len;
  if (end < 0)
    end += len;
  if (start < 0)
    start = 0;
  if (end < 0)
    end = 0;
  if (end >= len)
    end = len - 1;
  if (len == 0 || start > end)
    c->ops->bulk(c->w, "", 0, NULL);
  else
    c->ops->bulk(c->w, b->data + start, (size_t)(end - start + 1), b);
  kv_blob_release(b);
}

/* SETRANGE key offset value: the new length. */
void kv_cmd_setrange(const kv_call *c) {
  int64_t offset;
  if (!kv_parse_i64(&c->argv[1], &offset))
    return kv_reply_not_integer(c);
  if (offset < 0)
    return c->ops->error(c->w, "ERR offset is out of range");
  size_t n;
  int rc = kv_setrange(c->store, c->argv[0].ptr, c->argv[0].len,
                       (uint64_t)offset, c->argv[2].ptr, c->argv[2].len, &n);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, (int64_t)n);
}

/* SETBIT's and GETBIT's offset: 0 to 2^32 - 1 bits (Redis' 512 MB); the
 * store bounds it further by max_value_bytes. False after the error. */
static bool bit_offset(const kv_call *c, uint64_t *out) {
  int64_t v;
  if (!kv_parse_i64(&c->argv[1], &v) || v < 0 || v >= (int64_t)1 << 32) {
    c->ops->error(c->w, "ERR bit offset is not an integer or out of range");
    return false;
  }
  *out = (uint64_t)v;
  return true;
}

/* SETBIT key offset 0|1: the bit before. */
void kv_cmd_setbit(const kv_call *c) {
  uint64_t offset;
  if (!bit_offset(c, &offset))
    return;
  if (!kv_arg_is(&c->argv[2], "0") && !kv_arg_is(&c->argv[2], "1"))
    return c->ops->error(c->w, "ERR bit is not an integer or out of range");
  bool old;
  int rc = kv_setbit(c->store, c->argv[0].ptr, c->argv[0].len, offset,
                     kv_arg_is(&c->argv[2], "1"), &old);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, old);
}

/* GETBIT key offset: the bit, 0 past the value's end or for a missing
 * key. */
void kv_cmd_getbit(const kv_call *c) {
  uint64_t offset;
  if (!bit_offset(c, &offset))
    return;
  kv_blob *b;
  int rc = kv_get(c->store, c->argv[0].ptr, c->argv[0].len, &b);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  uint64_t byte = offset >> 3;
  int bit = b != NULL && byte < b->len &&
            (b->data[byte] & (0x80u >> (offset & 7))) != 0;
  kv_blob_release(b);
  c->ops->integer(c->w, bit);
}
