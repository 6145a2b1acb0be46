/* SPDX-License-Identifier: Apache-2.0 */
/* The keyspace commands (command_internal.h): DEL (and UNLINK), EXISTS
 * (and TOUCH), TYPE, TTL, PTTL, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT,
 * EXPIRETIME, PEXPIRETIME, PERSIST, RENAME, RENAMENX, COPY, KEYS, SCAN,
 * RANDOMKEY, DBSIZE, FLUSHALL (and FLUSHDB), in Redis 7's words. */
#include "command_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/loop.h>

/* ---- DEL, EXISTS, TYPE, RENAME ---- */

static void del_exists(const kv_call *c,
                       int (*fn)(kv_store *, size_t, const kv_key *)) {
  int rc = fn(c->store, c->argc, c->argv);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, rc);
}

/* DEL key [key ...]: the number deleted. */
void kv_cmd_del(const kv_call *c) { del_exists(c, kv_del); }

/* EXISTS key [key ...]: how many exist (a repeat counts again). */
void kv_cmd_exists(const kv_call *c) { del_exists(c, kv_exists); }

/* Every value is a string: "string" or "none". */
void kv_cmd_type(const kv_call *c) {
  int rc = kv_exists(c->store, 1, c->argv);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->simple(c->w, rc > 0 ? "string" : "none");
}

/* RENAME key newkey: OK, or Redis' "no such key". */
void kv_cmd_rename(const kv_call *c) {
  int rc = kv_rename(c->store, c->argv[0].ptr, c->argv[0].len, c->argv[1].ptr,
                     c->argv[1].len);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  if (rc == 0)
    return c->ops->error(c->w, "ERR no such key");
  c->ops->simple(c->w, "OK");
}

/* RENAMENX key newkey: 1 when renamed, 0 when newkey exists; the check
 * and the move are one step (both keys' stripes held). */
void kv_cmd_renamenx(const kv_call *c) {
  kv_txn t;
  bool own = kv_txn_lock_keys(&t, c->store, 2, c->argv);
  int rc = kv_exists(c->store, 1, &c->argv[0]);
  if (rc == 0) {
    rc = -1; /* no such key */
  } else if (rc > 0) {
    rc = kv_exists(c->store, 1, &c->argv[1]);
    if (rc == 0)
      rc = kv_rename(c->store, c->argv[0].ptr, c->argv[0].len, c->argv[1].ptr,
                     c->argv[1].len);
    else if (rc > 0)
      rc = 0;
  }
  if (own)
    kv_txn_unlock(&t);
  if (rc == -1)
    return c->ops->error(c->w, "ERR no such key");
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, rc);
}

/* COPY's work with both keys' stripes held: 1 copied, 0 not (no source,
 * or a destination without REPLACE), or an error. */
static int copy_locked(const kv_call *c, bool replace) {
  kv_blob *v;
  int64_t ttl;
  /* Value and TTL in one lookup: read apart, a source expiring between
   * the two was copied without a TTL, a key that then never expires. */
  int rc = kv_get_pttl(c->store, c->argv[0].ptr, c->argv[0].len, &v, &ttl);
  if (rc <= 0)
    return rc;
  if (!replace && (rc = kv_exists(c->store, 1, &c->argv[1])) != 0) {
    kv_blob_release(v);
    return rc < 0 ? rc : 0;
  }
  kv_set_options so = {.ttl_ms = ttl > 0 ? ttl : 0};
  rc = kv_set_blob(c->store, c->argv[1].ptr, c->argv[1].len, v, &so);
  return rc < 0 ? rc : 1; /* the value blob is shared: it is immutable */
}

/* COPY source destination [DB 0] [REPLACE]: the value and TTL of source
 * under destination. One database: DB takes 0 only. */
void kv_cmd_copy(const kv_call *c) {
  bool replace = false;
  for (size_t i = 2; i < c->argc; i++) {
    int64_t db;
    if (kv_arg_is(&c->argv[i], "REPLACE"))
      replace = true;
    else if (kv_arg_is(&c->argv[i], "DB") && i + 1 < c->argc) {
      if (!kv_parse_i64(&c->argv[++i], &db))
        return kv_reply_not_integer(c);
      if (db != 0)
        return c->ops->error(c->w, "ERR DB index is out of range");
    } else
      return kv_reply_syntax(c);
  }
  if (c->argv[0].len == c->argv[1].len &&
      memcmp(c->argv[0].ptr, c->argv[1].ptr, c->argv[0].len) == 0)
    return c->ops->error(c->w,
                         "ERR source and destination objects are the same");
  kv_txn t;
  bool own = kv_txn_lock_keys(&t, c->store, 2, c->argv);
  int rc = copy_locked(c, replace);
  if (own)
    kv_txn_unlock(&t);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, rc);
}

/* ---- TTLs ---- */

/* TTL and PTTL: -2 for a missing key, -1 without a TTL; TTL rounds to the
 * nearest second, as Redis. */
static void ttl_reply(const kv_call *c, bool ms) {
  int64_t ttl;
  int rc = kv_pttl(c->store, c->argv[0].ptr, c->argv[0].len, &ttl);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  if (rc == 0)
    return c->ops->integer(c->w, -2);
  c->ops->integer(c->w, ttl < 0 || ms ? ttl : (ttl + 500) / 1000);
}

/* TTL key: seconds left, rounded. */
void kv_cmd_ttl(const kv_call *c) { ttl_reply(c, false); }

/* PTTL key: milliseconds left. */
void kv_cmd_pttl(const kv_call *c) { ttl_reply(c, true); }

/* EXPIRE's NX, XX, GT, LT after the key and the time, checked as Redis 7
 * does (before the time). False after an error reply. */
static bool expire_flags(const kv_call *c, unsigned *flags) {
  static const struct {
    const char *name;
    unsigned flag;
  } opts[] = {{"NX", KV_EXPIRE_NX},
              {"XX", KV_EXPIRE_XX},
              {"GT", KV_EXPIRE_GT},
              {"LT", KV_EXPIRE_LT}};
  *flags = 0;
  for (size_t j = 2; j < c->argc; j++) {
    size_t i = 0;
    while (i < 4 && !kv_arg_is(&c->argv[j], opts[i].name))
      i++;
    if (i == 4) {
      char opt[128];
      size_t n =
          c->argv[j].len < sizeof opt - 1 ? c->argv[j].len : sizeof opt - 1;
      memcpy(opt, c->argv[j].ptr, n);
      opt[n] = '\0';
      kv_reply_errorf(c, "ERR Unsupported option %s", opt);
      return false;
    }
    *flags |= opts[i].flag;
  }
  if ((*flags & KV_EXPIRE_NX) &&
      (*flags & (KV_EXPIRE_XX | KV_EXPIRE_GT | KV_EXPIRE_LT))) {
    c->ops->error(c->w, "ERR NX and XX, GT or LT options at the same time "
                        "are not compatible");
    return false;
  }
  if ((*flags & KV_EXPIRE_GT) && (*flags & KV_EXPIRE_LT)) {
    c->ops->error(c->w,
                  "ERR GT and LT options at the same time are not compatible");
    return false;
  }
  return true;
}

/* EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT key time [NX|XX|GT|LT]: Redis'
 * overflow checks on the time as Unix milliseconds, then a TTL relative
 * to now (<= 0 deletes the key). `at`: the time is a Unix time. */
static void expire_cmd(const kv_call *c, bool seconds, bool at) {
  unsigned flags;
  int64_t v;
  if (!expire_flags(c, &flags))
    return;
  if (!kv_parse_i64(&c->argv[1], &v))
    return kv_reply_not_integer(c);
  int64_t now = kv_unix_ms();
  if ((seconds && (v > INT64_MAX / 1000 || v < INT64_MIN / 1000)) ||
      (!at && (seconds ? v * 1000 : v) > INT64_MAX - now))
    return kv_reply_errorf(c, "ERR invalid expire time in '%s' command",
                           c->name);
  v = seconds ? v * 1000 : v;
  if (at) /* v - now cannot overflow past the checks: clamp the past */
    v = v < now - KV_TTL_MAX_MS ? -1 : v - now;
  if (v > KV_TTL_MAX_MS)
    v = KV_TTL_MAX_MS;
  int rc = kv_expire(c->store, c->argv[0].ptr, c->argv[0].len, v, flags);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, rc);
}

/* EXPIRE key seconds [NX|XX|GT|LT]. */
void kv_cmd_expire(const kv_call *c) { expire_cmd(c, true, false); }

/* PEXPIRE key milliseconds [NX|XX|GT|LT]. */
void kv_cmd_pexpire(const kv_call *c) { expire_cmd(c, false, false); }

/* EXPIREAT key unix-seconds [NX|XX|GT|LT]. */
void kv_cmd_expireat(const kv_call *c) { expire_cmd(c, true, true); }

/* PEXPIREAT key unix-ms [NX|XX|GT|LT]. */
void kv_cmd_pexpireat(const kv_call *c) { expire_cmd(c, false, true); }

/* EXPIRETIME and PEXPIRETIME key: the Unix time of the deadline (seconds
 * rounded, or ms), -1 without a TTL, -2 for a missing key. */
static void expiretime_reply(const kv_call *c, bool ms) {
  int64_t ttl;
  int rc = kv_pttl(c->store, c->argv[0].ptr, c->argv[0].len, &ttl);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  if (rc == 0 || ttl < 0)
    return c->ops->integer(c->w, rc == 0 ? -2 : -1);
  int64_t at = kv_unix_ms() + ttl;
  c->ops->integer(c->w, ms ? at : (at + 500) / 1000);
}

/* EXPIRETIME key. */
void kv_cmd_expiretime(const kv_call *c) { expiretime_reply(c, false); }

/* PEXPIRETIME key. */
void kv_cmd_pexpiretime(const kv_call *c) { expiretime_reply(c, true); }

/* PERSIST key: 1 when a TTL was removed. */
void kv_cmd_persist(const kv_call *c) {
  int rc = kv_persist(c->store, c->argv[0].ptr, c->argv[0].len);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->integer(c->w, rc);
}

/* ---- KEYS, SCAN ---- */

/* Replies with the keys of `res` as an array, and clears it. */
static void reply_keys(const kv_call *c, kv_scan_result *res) {
  c->ops->array(c->w, res->n);
  for (size_t i = 0; i < res->n; i++)
    c->ops->bulk(c->w, res->keys[i]->data, res->keys[i]->len, res->keys[i]);
  kv_scan_result_clear(res);
}

/* KEYS' answer: the keys of `res` (cleared), or for `rc` < 0 the error
 * (past the bound one that says to use SCAN, rather than a partial
 * answer). */
static void keys_reply(const kv_call *c, int rc, kv_scan_result *res) {
  if (rc < 0)
    kv_scan_result_clear(res);
  if (rc == WEFT_ETOOLONG) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "ERR KEYS would examine more than %u keys or %u units of work "
             "(key bytes times pattern words); use SCAN",
             KV_KEYS_MAX, KV_SCAN_WORK_MAX);
    return c->ops->error(c->w, msg);
  }
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  reply_keys(c, res);
}

/* ---- a KEYS in steps, the loop yielded between them ----
 *
 * One KEYS walks every key (up to KV_KEYS_MAX): tens of milliseconds on a
 * loaded machine, and the turn's budget (resp_server.c) cannot split a
 * command, so every other client of the loop waited a whole KEYS per
 * turn of a client pipelining them (issue 27). So KEYS walks
 * KV_KEYS_STEP keys (whole stripes), then, with more to do, the session
 * is blocked as for MIGRATE (its next commands wait, its reading stops)
 * and the walk goes on in a task of its loop, a step per task: the loop
 * polls its other channels between two (weft_loop_execute runs a task
 * queued by a task at a later iteration). Its answer and the session's
 * resume come after the last step. */

#define KV_KEYS_STEP                                                           \
  4096 /* keys a KEYS examines before it yields its loop: 1-2 ms here,         \
          a few stripes of a large store */

struct kv_keys_job {
  kv_call call; /* sess NULL once the client has gone (kv_keys_detach) */
  weft_loop *loop;
  kv_keys_iter it;
  kv_scan_result res;
};

static void keys_job_free(struct kv_keys_job *j) {
  kv_keys_end(&j->it);
  kv_scan_result_clear(&j->res);
  free(j);
}

/* The last step was taken (`rc` 0 or an error): the answer, and the
 * session goes on. */
static void keys_job_done(struct kv_keys_job *j, int rc) {
  kv_session *s = j->call.sess;
  s->keys_job = NULL;
  s->blocked = false;
  keys_reply(&j->call, rc, &j->res);
  keys_job_free(j);
  if (s->resume != NULL)
    s->resume(s); /* its next commands, and the flush */
}

static void keys_job_step(void *arg) {
  struct kv_keys_job *j = arg;
  if (j->call.sess == NULL) { /* the client went: nobody to answer */
    keys_job_free(j);
    return;
  }
  int rc = kv_keys_step(j->call.store, &j->it, KV_KEYS_STEP, &j->res);
  /* No later task (the loop is ending): the rest now. */
  while (rc == 1 && weft_loop_execute(j->loop, keys_job_step, j) != 0)
    rc = kv_keys_step(j->call.store, &j->it, KV_KEYS_STEP, &j->res);
  if (rc != 1)
    keys_job_done(j, rc);
}

void kv_keys_detach(kv_session *s) {
  if (s->keys_job != NULL)
    s->keys_job->call.sess = NULL; /* its task frees it */
  s->keys_job = NULL;
}

/* True when a KEYS of this call may take steps: on an open connection
 * whose protocol resumes a blocked session (RESP), outside EXEC (which
 * holds every stripe: one walk, as bounded by multi.h). A closed one runs
 * what it had read at once, for its effect (resp_inactive). */
static bool keys_in_steps(const kv_call *c) {
  return c->sess != NULL && c->sess->resume != NULL && !c->sess->in_exec &&
         c->sess->channel != NULL && weft_channel_is_active(c->sess->channel);
}

/* KEYS pattern: bounded as SCAN (kv_keys_step); a large store's walk in
 * steps, the loop yielded between them (above). */
void kv_cmd_keys(const kv_call *c) {
  if (c->argv[0].len > KV_SCAN_PATTERN_MAX) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "ERR KEYS pattern too long, must be at most %u bytes",
             KV_SCAN_PATTERN_MAX);
    return c->ops->error(c->w, msg);
  }
  if (!keys_in_steps(c)) {
    kv_scan_result res = {0};
    int rc = kv_keys(c->store, c->argv[0].ptr, c->argv[0].len, &res);
    return keys_reply(c, rc, &res);
  }
  struct kv_keys_job *j = calloc(1, sizeof *j);
  if (j == NULL)
    return kv_reply_store_error(c, WEFT_ENOMEM);
  int rc = kv_keys_begin(&j->it, c->argv[0].ptr, c->argv[0].len, &j->res);
  if (rc == 0)
    rc = kv_keys_step(c->store, &j->it, KV_KEYS_STEP, &j->res);
  j->call = *c;
  j->loop = weft_channel_loop(c->sess->channel);
  if (rc == 1 && weft_loop_execute(j->loop, keys_job_step, j) == 0) {
    c->sess->blocked = true; /* keys_job_done answers */
    c->sess->keys_job = j;
    return;
  }
  while (rc == 1)
    rc = kv_keys_step(c->store, &j->it, KV_KEYS_STEP, &j->res);
  keys_reply(c, rc, &j->res);
  keys_job_free(j);
}

/* SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]: COUNT above
 * KV_SCAN_COUNT_MAX is taken as that (a hint, as in Redis), a pattern
 * longer than KV_SCAN_PATTERN_MAX is refused; kv_scan bounds the rest of
 * the work. Every key is a string: a TYPE other than "string" filters
 * every key out (the cursor still advances, as in Redis). */
void kv_cmd_scan(const kv_call *c) {
  int64_t cursor, count = 10;
  const kv_arg *match = NULL;
  bool none = false; /* TYPE names another type */
  if (!kv_parse_i64(&c->argv[0], &cursor) || cursor < 0)
    return c->ops->error(c->w, "ERR invalid cursor");
  for (size_t i = 1; i < c->argc; i += 2) {
    if (i + 1 >= c->argc)
      return kv_reply_syntax(c);
    if (kv_arg_is(&c->argv[i], "MATCH"))
      match = &c->argv[i + 1];
    else if (kv_arg_is(&c->argv[i], "TYPE"))
      none = !kv_arg_is(&c->argv[i + 1], "string");
    else if (!kv_arg_is(&c->argv[i], "COUNT"))
      return kv_reply_syntax(c);
    else if (!kv_parse_i64(&c->argv[i + 1], &count) || count < 1)
      return c->ops->error(c->w, "ERR value is out of range, must be "
                                 "positive");
  }
  if (match != NULL && match->len > KV_SCAN_PATTERN_MAX) {
    char msg[80];
    snprintf(msg, sizeof msg,
             "ERR MATCH pattern too long, must be at most %u bytes",
             KV_SCAN_PATTERN_MAX);
    return c->ops->error(c->w, msg);
  }
  kv_scan_result res = {0};
  uint64_t next;
  int rc =
      kv_scan(c->store, (uint64_t)cursor, (size_t)count,
              match ? match->ptr : NULL, match ? match->len : 0, &res, &next);
  if (rc < 0) {
    kv_scan_result_clear(&res);
    return kv_reply_store_error(c, rc);
  }
  if (none)
    kv_scan_result_clear(&res);
  char cur[24];
  int len = snprintf(cur, sizeof cur, "%" PRIu64, next);
  c->ops->array(c->w, 2);
  c->ops->bulk(c->w, cur, (size_t)len, NULL);
  reply_keys(c, &res);
}

/* ---- DBSIZE, FLUSHALL ---- */

void kv_cmd_dbsize(const kv_call *c) {
  c->ops->integer(c->w, (int64_t)kv_dbsize(c->store));
}

/* FLUSHALL and FLUSHDB [ASYNC|SYNC] (one database): both flush now, and free a
 * large store on the store's lazy-free thread (kv_flushall). */
void kv_cmd_flushall(const kv_call *c) {
  if (c->argc > 1 || (c->argc == 1 && !kv_arg_is(&c->argv[0], "ASYNC") &&
                      !kv_arg_is(&c->argv[0], "SYNC")))
    return kv_reply_syntax(c);
  int rc = kv_flushall(c->store);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  c->ops->simple(c->w, "OK");
}

/* Scans a RANDOMKEY may make before it answers nil: each visits about 100
 * buckets (kv_scan's bound for COUNT 10), so a sparse table is still
 * found, and the time stays bounded. */
#define RANDOMKEY_SCANS 64

/* xorshift64 for RANDOMKEY's cursor and pick: per thread, no lock. */
static uint64_t random_u64(void) {
  static _Thread_local uint64_t state;
  if (state == 0)
    state = (uint64_t)kv_unix_ms() * 0x9E3779B97F4A7C15ull | 1;
  return kv_xorshift64(&state);
}

/* RANDOMKEY: a key picked at random (a SCAN from a random cursor, then a
 * random one of what it returned), or nil when the store is empty. */
void kv_cmd_randomkey(const kv_call *c) {
  uint64_t cursor = random_u64();
  kv_scan_result res = {0};
  for (int i = 0; i < RANDOMKEY_SCANS && kv_dbsize(c->store) > 0; i++) {
    uint64_t next;
    int rc = kv_scan(c->store, cursor, 10, NULL, 0, &res, &next);
    if (rc < 0) {
      kv_scan_result_clear(&res);
      return kv_reply_store_error(c, rc);
    }
    if (res.n > 0) {
      kv_blob *k = res.keys[random_u64() % res.n];
      c->ops->bulk(c->w, k->data, k->len, k);
      kv_scan_result_clear(&res);
      return;
    }
    cursor = next;
  }
  c->ops->null(c->w);
}
