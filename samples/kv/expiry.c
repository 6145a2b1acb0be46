/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/expiry.c: keys with a time to live. The store's clock, each
 * stripe's array of entries with a TTL, lazy expiry (a lookup that finds an
 * expired key deletes it), SET's deadlines, PTTL, EXPIRE, PERSIST, GETEX,
 * and active expiry (random sampling with bounded work, Redis'
 * activeExpireCycle). Kept apart from
 * table.c so the table knows nothing about time, and from commands.c so
 * every rule about deadlines is in one place.
 */
#include "store_internal.h"

#include <stdlib.h>

#include <weft/clock.h>
#include <weft/error.h>

#define EXPIRE_SAMPLE 20u /* keys per sampling round, as Redis */

/* ------------------------------------------------------------------------ */
/* Time                                                                      */

static inline uint64_t store_now(const kv_store *s) {
  return s->clock ? s->clock(s->clock_arg) : weft_now_ns();
}

void kv_store_set_clock(kv_store *store, kv_clock_fn fn, void *arg) {
  store->clock = fn;
  store->clock_arg = arg;
}

/* ------------------------------------------------------------------------ */
/* TTL array, lazy expiry (all under the stripe lock)                        */

int kv__expires_reserve(kv_stripe *st) {
  kv_entry **a =
      kv_array_reserve(st->expires, st->n_expires, &st->cap_expires, sizeof *a);
  if (a == NULL)
    return WEFT_ENOMEM;
  st->expires = a;
  return 0;
}

void kv__expire_set(kv_stripe *st, kv_entry *e, uint64_t at) {
  if (e->exp_idx == NO_EXPIRE_IDX) {
    e->exp_idx = (uint32_t)st->n_expires;
    st->expires[st->n_expires++] = e;
    kv__counter_add(&st->n_ttl, 1);
  }
  e->expire_at = at;
  kv__entry_touch(st, e);
}

void kv__expire_clear(kv_stripe *st, kv_entry *e) {
  if (e->exp_idx == NO_EXPIRE_IDX)
    return;
  kv_entry *last = st->expires[--st->n_expires];
  st->expires[e->exp_idx] = last;
  last->exp_idx = e->exp_idx;
  e->exp_idx = NO_EXPIRE_IDX;
  e->expire_at = 0;
  kv__counter_sub(&st->n_ttl, 1);
  kv__entry_touch(st, e);
}

bool kv__entry_expired(const kv_store *s, const kv_entry *e) {
  return e->expire_at != 0 && e->expire_at <= store_now(s);
}

kv_entry *kv__lookup_live(kv_store *s, kv_stripe *st, uint64_t hash,
                          const void *key, size_t klen, garbage *g) {
  kv_entry **link = kv__table_find(&st->table, hash, key, klen);
  if (link == NULL)
    return NULL;
  if (kv__entry_expired(s, *link)) {
    kv__entry_unlink(st, link, g);
    kv__counter_add(&st->expired, 1);
    return NULL;
  }
  return *link;
}

/* ------------------------------------------------------------------------ */
/* SET deadlines, PTTL                                                       */

int kv_ttl_ms_from_seconds(int64_t seconds, int64_t *ttl_ms) {
  if (seconds <= 0 || seconds > INT64_MAX / 1000)
    return WEFT_EINVAL;
  *ttl_ms = seconds * 1000;
  return 0;
}

int kv__set_deadline(const kv_store *s, const kv_set_options *o, uint64_t *at) {
  *at = 0;
  if (o == NULL)
    return 0;
  if ((o->flags & KV_SET_NX) && (o->flags & KV_SET_XX))
    return WEFT_EINVAL;
  if (o->ttl_ms < 0 || (o->ttl_ms > 0 && (o->flags & KV_SET_KEEPTTL)))
    return WEFT_EINVAL;
  if ((o->flags & KV_SET_EXPIRED) &&
      (o->ttl_ms != 0 || (o->flags & KV_SET_KEEPTTL)))
    return WEFT_EINVAL;
  if (o->ttl_ms == 0)
    return 0;
  uint64_t now = store_now(s);
  if ((uint64_t)o->ttl_ms > (UINT64_MAX - now) / 1000000u)
    return WEFT_EINVAL;
  *at = now + (uint64_t)o->ttl_ms * 1000000u;
  return 0;
}

int kv_pttl(kv_store *s, const void *key, size_t klen, int64_t *ttl_ms) {
  *ttl_ms = -1;
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  key_lock k;
  kv_entry *e = kv__key_lock(s, &k, key, klen);
  if (e && e->expire_at) {
    uint64_t now = store_now(s),
             left = e->expire_at > now ? e->expire_at - now : 0;
    *ttl_ms = (int64_t)((left + 999999u) / 1000000u);
  }
  kv__key_unlock(s, &k);
  return e != NULL;
}

int kv_get_pttl(kv_store *s, const void *key, size_t klen, kv_blob **out,
                int64_t *ttl_ms) {
  *out = NULL;
  *ttl_ms = -1;
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  uint64_t h = kv__key_hash(s, key, klen);
  key_lock k = {.st = kv__stripe_of(s, h), .g = {NULL}};
  kv__stripe_lock(s, k.st);
  kv_entry **link = kv__table_find(&k.st->table, h, key, klen);
  kv_entry *e = link != NULL ? *link : NULL;
  /* The clock is read once: whether the key is live and how long it has
   * left are answers for the same instant. */
  uint64_t now = e != NULL && e->expire_at != 0 ? store_now(s) : 0;
  if (e != NULL && e->expire_at != 0 && e->expire_at <= now) {
    kv__entry_unlink(k.st, link, &k.g); /* lazy expiry, as kv__lookup_live */
    kv__counter_add(&k.st->expired, 1);
    e = NULL;
  }
  kv__counter_add(e ? &k.st->hits : &k.st->misses, 1);
  if (e != NULL) {
    *out = kv_blob_retain(e->val);
    if (e->expire_at != 0)
      *ttl_ms = (int64_t)((e->expire_at - now + 999999u) / 1000000u);
  }
  kv__key_unlock(s, &k);
  return e != NULL;
}

/* The deadline `ttl_ms` (> 0) from now, clamped to the clock's range. */
static uint64_t deadline_clamped(const kv_store *s, int64_t ttl_ms) {
  uint64_t now = store_now(s);
  if ((uint64_t)ttl_ms > (UINT64_MAX - now) / 1000000u)
    return UINT64_MAX;
  return now + (uint64_t)ttl_ms * 1000000u;
}

/* Whether EXPIRE's conditions let deadline `at` replace `e`'s (Redis 7:
 * no TTL counts as an infinite one for GT and LT). */
static bool expire_allowed(const kv_entry *e, uint64_t at, unsigned flags) {
  bool has = e->expire_at != 0;
  if ((flags & KV_EXPIRE_NX) && has)
    return false;
  if ((flags & KV_EXPIRE_XX) && !has)
    return false;
  if ((flags & KV_EXPIRE_GT) && (!has || at <= e->expire_at))
    return false;
  if ((flags & KV_EXPIRE_LT) && has && at >= e->expire_at)
    return false;
  return true;
}

/* Sets `e`'s deadline to `at`, 0 deleting it. Returns 0 or WEFT_ENOMEM
 * (nothing changed). Under k's lock. */
static int expire_apply(key_lock *k, kv_entry *e, uint64_t at) {
  if (at == 0) {
    kv__key_delete(k, e);
    return 0;
  }
  if (e->exp_idx == NO_EXPIRE_IDX && kv__expires_reserve(k->st) != 0)
    return WEFT_ENOMEM;
  kv__expire_set(k->st, e, at);
  return 0;
}

int kv_expire(kv_store *s, const void *key, size_t klen, int64_t ttl_ms,
              unsigned flags) {
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  int ret = 0;
  key_lock k;
  kv_entry *e = kv__key_lock(s, &k, key, klen);
  /* A deadline in the past counts as the earliest for GT and LT. */
  uint64_t at = ttl_ms > 0 ? deadline_clamped(s, ttl_ms) : store_now(s);
  if (e != NULL && expire_allowed(e, at, flags))
    ret = expire_apply(&k, e, ttl_ms > 0 ? at : 0) == 0 ? 1 : WEFT_ENOMEM;
  kv__key_unlock(s, &k);
  return ret;
}

int kv_persist(kv_store *s, const void *key, size_t klen) {
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  key_lock k;
  kv_entry *e = kv__key_lock(s, &k, key, klen);
  bool had = e != NULL && e->expire_at != 0;
  if (had)
    kv__expire_clear(k.st, e);
  kv__key_unlock(s, &k);
  return had;
}

int kv_getex(kv_store *s, const void *key, size_t klen, kv_getex_mode mode,
             int64_t ttl_ms, kv_blob **out) {
  *out = NULL;
  if (klen > s->max_key_len)
    return WEFT_EMSGSIZE;
  int ret = 0;
  key_lock k;
  kv_entry *e = kv__key_lock(s, &k, key, klen);
  kv__counter_add(e ? &k.st->hits : &k.st->misses, 1);
  if (e != NULL && mode == KV_GETEX_SET)
    ret = expire_apply(&k, e, ttl_ms > 0 ? deadline_clamped(s, ttl_ms) : 0);
  else if (e != NULL && mode == KV_GETEX_PERSIST)
    kv__expire_clear(k.st, e);
  if (e != NULL && ret == 0) {
    /* The value outlives a deletion above: the reference is taken before
     * the garbage is freed. */
    *out = kv_blob_retain(e->val);
    ret = 1;
  }
  kv__key_unlock(s, &k);
  return ret;
}

/* ------------------------------------------------------------------------ */
/* Active expiry                                                             */

/* Samples one stripe; returns keys deleted, takes samples from *budget. */
static size_t expire_stripe(kv_store *s, kv_stripe *st, size_t *budget,
                            garbage *g) {
  size_t deleted = 0;
  kv__stripe_lock(s, st);
  uint64_t now = store_now(s);
  for (;;) {
    size_t sample = EXPIRE_SAMPLE;
    if (sample > *budget)
      sample = *budget;
    if (sample > st->n_expires)
      sample = st->n_expires;
    if (sample == 0)
      break;
    size_t round = 0;
    for (size_t k = 0; k < sample && st->n_expires; k++) {
      kv_entry *e = st->expires[kv_xorshift64(&st->rng) % st->n_expires];
      if (e->expire_at <= now) {
        kv__entry_unlink(st, kv__table_link_of(&st->table, e), g);
        kv__counter_add(&st->expired, 1);
        round++;
      }
    }
    *budget -= sample;
    deleted += round;
    if (round * 4 <= sample) /* few expired here: move on */
      break;
  }
  kv__table_maybe_resize(&st->table);
  kv__stripe_unlock(s, st);
  return deleted;
}

size_t kv_store_expire_some(kv_store *s, size_t budget) {
  unsigned start = atomic_load_explicit(&s->expire_next, memory_order_relaxed);
  size_t deleted = 0;
  unsigned k;
  for (k = 0; k < s->n_stripes && budget > 0; k++) {
    garbage g = {NULL};
    deleted += expire_stripe(s, &s->stripes[(start + k) & (s->n_stripes - 1)],
                             &budget, &g);
    kv__garbage_free(&g);
  }
  /* Concurrent callers may both resume at the same stripe: harmless. */
  atomic_store_explicit(&s->expire_next, start + k, memory_order_relaxed);
  return deleted;
}
