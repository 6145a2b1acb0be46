/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/table.c: the store's striped hash tables (see store_internal.h
 * for the layout) and what is built right on them: the keyed hash that picks
 * a key's stripe and bucket, the reference-counted value blobs, entries,
 * lookup, insert, delete and resize, and the store as a whole: its life
 * cycle, DBSIZE and FLUSHALL (which swap or count whole tables, not keys)
 * and the stats counters. Kept apart from expiry.c (TTLs) and commands.c
 * (the per-key commands) so the data structure can be read on its own:
 * nothing here reads the store's clock.
 */
#include "store_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <weft/clock.h>
#include <weft/error.h>

#define TABLE_MIN_SIZE 4u
#define FLUSH_INLINE_MAX                                                       \
  4096u /* keys FLUSHALL frees on the caller's thread (a fraction of a         \
           millisecond); more go to the store's lazy-free thread */

/* ------------------------------------------------------------------------ */
/* Hashing: SipHash-1-3 (Redis' choice for the same reason: keys come from  */
/* clients, and a seeded keyed hash keeps them from colliding on purpose).  */

static inline uint64_t rotl64(uint64_t x, int b) {
  return (x << b) | (x >> (64 - b));
}

#define SIPROUND                                                               \
  do {                                                                         \
    v0 += v1;                                                                  \
    v1 = rotl64(v1, 13);                                                       \
    v1 ^= v0;                                                                  \
    v0 = rotl64(v0, 32);                                                       \
    v2 += v3;                                                                  \
    v3 = rotl64(v3, 16);                                                       \
    v3 ^= v2;                                                                  \
    v0 += v3;                                                                  \
    v3 = rotl64(v3, 21);                                                       \
    v3 ^= v0;                                                                  \
    v2 += v1;                                                                  \
    v1 = rotl64(v1, 17);                                                       \
    v1 ^= v2;                                                                  \
    v2 = rotl64(v2, 32);                                                       \
  } while (0)

static uint64_t siphash13(uint64_t k0, uint64_t k1, const unsigned char *p,
                          size_t len) {
  uint64_t v0 = 0x736f6d6570736575ull ^ k0, v1 = 0x646f72616e646f6dull ^ k1;
  uint64_t v2 = 0x6c7967656e657261ull ^ k0, v3 = 0x7465646279746573ull ^ k1;
  const unsigned char *end = p + (len & ~(size_t)7);
  for (; p != end; p += 8) {
    uint64_t m;
    memcpy(&m, p, 8); /* little-endian host (x86-64, aarch64 Linux) */
    v3 ^= m;
    SIPROUND;
    v0 ^= m;
  }
  uint64_t b = (uint64_t)len << 56;
  for (size_t i = 0; i < (len & 7); i++)
    b |= (uint64_t)p[i] << (8 * i);
  v3 ^= b;
  SIPROUND;
  v0 ^= b;
  v2 ^= 0xff;
  SIPROUND;
  SIPROUND;
  SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t kv__key_hash(const kv_store *s, const void *key, size_t klen) {
  return siphash13(s->sip_k0, s->sip_k1, key, klen);
}

/* ------------------------------------------------------------------------ */
/* Blobs                                                                     */

kv_blob *kv__blob_alloc(size_t len) {
  kv_blob *b = malloc(sizeof(*b) + len);
  if (b == NULL)
    return NULL;
  atomic_init(&b->refs, 1);
  b->len = len;
  return b;
}

int kv_blob_new(const kv_store *store, size_t len, kv_blob **out) {
  *out = NULL;
  if (len > store->max_value_len)
    return WEFT_EMSGSIZE;
  *out = kv__blob_alloc(len);
  return *out ? 0 : WEFT_ENOMEM;
}

kv_blob *kv_blob_retain(kv_blob *blob) {
  /* Relaxed: the caller already holds a reference, so the blob is alive. */
  atomic_fetch_add_explicit(&blob->refs, 1, memory_order_relaxed);
  return blob;
}

void kv_blob_release(kv_blob *blob) {
  if (blob == NULL)
    return;
  /* acq_rel: every holder's reads happen before the free by the last one. */
  if (atomic_fetch_sub_explicit(&blob->refs, 1, memory_order_acq_rel) == 1)
    free(blob);
}

/* ------------------------------------------------------------------------ */
/* Entries, tables (all under the stripe lock)                              */

kv_entry *kv__entry_new(uint64_t hash, const void *key, size_t klen) {
  kv_entry *e = malloc(sizeof(*e) + klen);
  if (e == NULL)
    return NULL;
  e->next = NULL;
  e->val = NULL;
  e->hash = hash;
  e->expire_at = 0;
  e->exp_idx = NO_EXPIRE_IDX;
  e->klen = (uint32_t)klen;
  if (klen)
    memcpy(e->key, key, klen);
  return e;
}

static void entry_free(kv_entry *e) {
  kv_blob_release(e->val);
  free(e);
}

void kv__garbage_free(garbage *g) {
  while (g->entries) {
    kv_entry *e = g->entries;
    g->entries = e->next;
    entry_free(e);
  }
}

/* Installs `buckets` of `size` in `t` (under the stripe lock once the
 * store is shared). Relaxed atomic stores: kv_store_prefetch reads the two
 * fields without the lock. */
static void table_set_buckets(kv_table *t, kv_entry **buckets, uint64_t size) {
  __atomic_store_n(&t->buckets, buckets, __ATOMIC_RELAXED);
  __atomic_store_n(&t->mask, size - 1, __ATOMIC_RELAXED);
}

static int table_init(kv_table *t, uint64_t size) {
  table_set_buckets(t, calloc(size, sizeof(*t->buckets)), size);
  t->used = 0;
  return t->buckets ? 0 : WEFT_ENOMEM;
}

kv_entry **kv__table_find(kv_table *t, uint64_t hash, const void *key,
                          size_t klen) {
  kv_entry **link = &t->buckets[hash & t->mask];
  for (; *link; link = &(*link)->next) {
    kv_entry *e = *link;
    if (e->hash == hash && e->klen == klen && memcmp(e->key, key, klen) == 0)
      return link;
  }
  return NULL;
}

/* Round one of kv_store_prefetch: starts loading the bucket of `hash`.
 * Without the lock, so relaxed atomic loads (table_set_buckets): during a
 * resize the pair may not match, and the hint then loads a line to no use
 * (a prefetch never faults). The address is an integer, so no pointer
 * outside the array is formed. */
static void prefetch_bucket(kv_store *s, uint64_t hash) {
  kv_stripe *st = kv__stripe_of(s, hash);
  uintptr_t buckets =
      (uintptr_t)__atomic_load_n(&st->table.buckets, __ATOMIC_RELAXED);
  uint64_t mask = __atomic_load_n(&st->table.mask, __ATOMIC_RELAXED);
  __builtin_prefetch(
      (const void *)(buckets + (uintptr_t)(hash & mask) * sizeof(kv_entry *)));
}

/* Rounds two and three take the stripe's lock only if it is free: a hint
 * never waits, not behind another loop's command or transaction, or this
 * thread's own transaction (a held lock is busy to trylock, so its stripes
 * are skipped). */
static bool hint_lock(kv_store *s, kv_stripe *st) {
  return s->single_thread || pthread_mutex_trylock(&st->lock) == 0;
}

static void hint_unlock(kv_store *s, kv_stripe *st) {
  if (!s->single_thread)
    pthread_mutex_unlock(&st->lock);
}

/* Round two: under the lock (the bucket's pointer may change), starts
 * loading the first entry of the chain. */
static void prefetch_entry(kv_store *s, uint64_t hash) {
  kv_stripe *st = kv__stripe_of(s, hash);
  if (!hint_lock(s, st))
    return;
  kv_entry *e = st->table.buckets[hash & st->table.mask];
  if (e != NULL)
    __builtin_prefetch(e);
  hint_unlock(s, st);
}

/* Round three: under the lock, finds the key's entry and starts loading
 * its value (what GET retains and SET replaces). An expired entry is
 * hinted like any other: unlinking it is the lookup's job. */
static void prefetch_value(kv_store *s, uint64_t hash, const kv_key *key) {
  kv_stripe *st = kv__stripe_of(s, hash);
  if (!hint_lock(s, st))
    return;
  kv_entry **link = kv__table_find(&st->table, hash, key->ptr, key->len);
  if (link != NULL)
    __builtin_prefetch((*link)->val);
  hint_unlock(s, st);
}

void kv_store_prefetch(kv_store *s, size_t n, const kv_key *keys) {
  kv_key key[KV_PREFETCH_MAX];
  uint64_t hash[KV_PREFETCH_MAX];
  size_t m = 0;
  for (size_t i = 0; i < n && m < KV_PREFETCH_MAX; i++) {
    if (keys[i].len > s->max_key_len)
      continue;
    key[m] = keys[i];
    hash[m] = kv__key_hash(s, keys[i].ptr, keys[i].len);
    prefetch_bucket(s, hash[m++]);
  }
  for (size_t i = 0; i < m; i++)
    prefetch_entry(s, hash[i]);
  for (size_t i = 0; i < m; i++)
    prefetch_value(s, hash[i], &key[i]);
}

kv_entry **kv__table_link_of(kv_table *t, const kv_entry *e) {
  kv_entry **link = &t->buckets[e->hash & t->mask];
  while (*link != e)
    link = &(*link)->next;
  return link;
}

/* Rehashes into `size` buckets; on ENOMEM keeps the old table (a fuller or
 * emptier table is slower, not wrong). */
static void table_resize(kv_table *t, uint64_t size) {
  kv_entry **nb = calloc(size, sizeof(*nb));
  if (nb == NULL)
    return;
  for (uint64_t i = 0; i <= t->mask; i++) {
    kv_entry *e = t->buckets[i];
    while (e) {
      kv_entry *next = e->next;
      kv_entry **head = &nb[e->hash & (size - 1)];
      e->next = *head;
      *head = e;
      e = next;
    }
  }
  free(t->buckets);
  table_set_buckets(t, nb, size);
}

void kv__table_maybe_resize(kv_table *t) {
  uint64_t size = t->mask + 1;
  if (t->used > size)
    table_resize(t, size * 2);
  else if (size > TABLE_MIN_SIZE && t->used < size / 8)
    table_resize(t, size / 2);
}

void kv__entry_link(kv_stripe *st, kv_entry *e, kv_blob *val) {
  kv_entry **head = &st->table.buckets[e->hash & st->table.mask];
  e->val = val;
  kv__entry_touch(st, e);
  e->next = *head;
  *head = e;
  st->table.used++;
  kv__counter_add(&st->keys, 1);
  kv__counter_add(&st->mem, e->klen + val->len);
  kv__table_maybe_resize(&st->table);
}

void kv__entry_unlink(kv_stripe *st, kv_entry **link, garbage *g) {
  kv_entry *e = *link;
  *link = e->next;
  st->table.used--;
  kv__expire_clear(st, e);
  kv__counter_sub(&st->keys, 1);
  kv__counter_sub(&st->mem, e->klen + e->val->len);
  e->next = g->entries;
  g->entries = e;
}

/* ------------------------------------------------------------------------ */
/* Store life cycle                                                          */

void kv_store_options_init(kv_store_options *opts) {
  opts->n_stripes = KV_STRIPES_DEFAULT;
  opts->max_key_len = KV_MAX_KEY_LEN_DEFAULT;
  opts->max_value_len = KV_MAX_VALUE_LEN_DEFAULT;
  opts->single_thread = false;
}

static int stripe_init(kv_stripe *st, bool single_thread, uint64_t seed) {
  memset(st, 0, sizeof(*st));
  st->rng = seed | 1; /* xorshift must not start at 0 */
  if (table_init(&st->table, TABLE_MIN_SIZE) != 0)
    return WEFT_ENOMEM;
  if (single_thread)
    return 0;
  /* Adaptive: spin briefly before sleeping; critical sections here are a
   * few dozen nanoseconds, far shorter than a futex sleep and wake-up. */
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
  int err = pthread_mutex_init(&st->lock, &attr);
  pthread_mutexattr_destroy(&attr);
  if (err != 0) {
    free(st->table.buckets);
    return -err;
  }
  return 0;
}

static void stripe_fini(kv_stripe *st, bool single_thread) {
  for (uint64_t i = 0; i <= st->table.mask; i++) {
    kv_entry *e = st->table.buckets[i];
    while (e) {
      kv_entry *next = e->next;
      entry_free(e);
      e = next;
    }
  }
  free(st->table.buckets);
  free(st->expires);
  if (!single_thread)
    pthread_mutex_destroy(&st->lock);
}

static bool options_valid(const kv_store_options *o) {
  unsigned n = o->n_stripes;
  return n >= 1 && n <= KV_STRIPES_MAX && (n & (n - 1)) == 0 &&
         o->max_key_len >= 1 && o->max_key_len <= UINT32_MAX &&
         o->max_value_len <= SIZE_MAX - sizeof(kv_blob);
}

static void random_seed(uint64_t out[2]) {
  /* getrandom on a urandom-backed pool; if it fails (very old kernel, a
   * seccomp filter), fall back to the clock and an address: weaker against
   * hash flooding but still working. */
  if (getrandom(out, 2 * sizeof(uint64_t), GRND_NONBLOCK) ==
      (ssize_t)(2 * sizeof(uint64_t)))
    return;
  out[0] = weft_now_ns() ^ 0x9E3779B97F4A7C15ull;
  out[1] = (uint64_t)(uintptr_t)out * 0xBF58476D1CE4E5B9ull;
}

int kv_store_new(kv_store **out, const kv_store_options *opts) {
  kv_store_options defaults;
  if (opts == NULL) {
    kv_store_options_init(&defaults);
    opts = &defaults;
  }
  *out = NULL;
  if (!options_valid(opts))
    return WEFT_EINVAL;
  kv_store *s = calloc(1, sizeof(*s));
  if (s == NULL)
    return WEFT_ENOMEM;
  s->n_stripes = opts->single_thread ? 1 : opts->n_stripes;
  s->stripe_bits = (unsigned)__builtin_ctz(s->n_stripes);
  s->max_key_len = opts->max_key_len;
  s->max_value_len = opts->max_value_len;
  s->single_thread = opts->single_thread;
  uint64_t seed[2];
  random_seed(seed);
  s->sip_k0 = seed[0];
  s->sip_k1 = seed[1];
  atomic_init(&s->expire_next, 0);
  int err;
  s->stripes =
      aligned_alloc(_Alignof(kv_stripe), s->n_stripes * sizeof(kv_stripe));
  if (s->stripes == NULL) {
    err = WEFT_ENOMEM;
    goto failed_stripes_alloc;
  }
  unsigned i;
  for (i = 0; i < s->n_stripes; i++) {
    err = stripe_init(&s->stripes[i], s->single_thread,
                      seed[0] ^ (0x9E3779B97F4A7C15ull * (i + 1)));
    if (err != 0)
      goto failed_stripe_init;
  }
  pthread_mutex_init(&s->lazy_lock, NULL);
  pthread_cond_init(&s->lazy_cond, NULL);
  *out = s;
  return 0;

failed_stripe_init:
  while (i-- > 0)
    stripe_fini(&s->stripes[i], s->single_thread);
  free(s->stripes);
failed_stripes_alloc:
  free(s);
  return err;
}

/* Stops the lazy-free thread, if it ever started, once it has freed every
 * flush handed to it. */
static void lazy_stop(kv_store *s) {
  pthread_mutex_lock(&s->lazy_lock);
  bool started = s->lazy_started;
  s->lazy_stop = true;
  pthread_cond_signal(&s->lazy_cond);
  pthread_mutex_unlock(&s->lazy_lock);
  if (started)
    pthread_join(s->lazy_thread, NULL);
  pthread_cond_destroy(&s->lazy_cond);
  pthread_mutex_destroy(&s->lazy_lock);
}

void kv_store_free(kv_store *store) {
  if (store == NULL)
    return;
  lazy_stop(store);
  for (unsigned i = 0; i < store->n_stripes; i++)
    stripe_fini(&store->stripes[i], store->single_thread);
  free(store->stripes);
  free(store);
}

/* ------------------------------------------------------------------------ */
/* DBSIZE, FLUSHALL, stats                                                   */

uint64_t kv_dbsize(kv_store *s) {
  lock_set all = {{0}};
  kv__lock_set_all(s, &all);
  uint64_t n = 0;
  kv__lock_set_lock(s, &all); /* exact, and never half a transaction */
  for (unsigned i = 0; i < s->n_stripes; i++)
    n += atomic_load_explicit(&s->stripes[i].keys, memory_order_relaxed);
  kv__lock_set_unlock(s, &all);
  return n;
}

/* Frees what FLUSHALL detached from one stripe (nothing if the table was
 * never filled in). */
static void detached_free(kv_table *t, kv_entry **expires) {
  for (uint64_t i = 0; t->buckets != NULL && i <= t->mask; i++) {
    kv_entry *e = t->buckets[i];
    while (e) {
      kv_entry *next = e->next;
      entry_free(e);
      e = next;
    }
  }
  free(t->buckets);
  free(expires);
}

/* What one FLUSHALL detached: every stripe's old table and TTL array. */
typedef struct kv_flush_job {
  struct kv_flush_job *next;
  unsigned n;          /* stripes */
  kv_table *tables;    /* n old tables */
  kv_entry ***expires; /* n old TTL arrays */
} kv_flush_job;

/* Allocates a job for `n` stripes, tables and arrays zeroed; NULL when out
 * of memory. */
static kv_flush_job *flush_job_new(unsigned n) {
  kv_flush_job *j = calloc(1, sizeof(*j));
  if (j == NULL)
    return NULL;
  j->n = n;
  j->tables = calloc(n, sizeof(*j->tables));
  j->expires = calloc(n, sizeof(*j->expires));
  if (j->tables == NULL || j->expires == NULL) {
    free(j->tables);
    free(j->expires);
    free(j);
    return NULL;
  }
  return j;
}

/* Frees a job and everything it holds. */
static void flush_job_free(kv_flush_job *j) {
  for (unsigned i = 0; i < j->n; i++)
    detached_free(&j->tables[i], j->expires[i]);
  free(j->tables);
  free(j->expires);
  free(j);
}

/* The lazy-free thread: frees the jobs handed to it until kv_store_free
 * asks it to stop and none is left. */
static void *lazy_main(void *arg) {
  kv_store *s = arg;
  pthread_mutex_lock(&s->lazy_lock);
  for (;;) {
    kv_flush_job *j = s->lazy_jobs;
    if (j == NULL && s->lazy_stop)
      break;
    if (j == NULL) {
      pthread_cond_wait(&s->lazy_cond, &s->lazy_lock);
      continue;
    }
    s->lazy_jobs = j->next;
    pthread_mutex_unlock(&s->lazy_lock);
    flush_job_free(j);
    pthread_mutex_lock(&s->lazy_lock);
  }
  pthread_mutex_unlock(&s->lazy_lock);
  return NULL;
}

/* Frees a flush of `keys` keys: here when they are few, else on the
 * store's lazy-free thread (started now if need be), so a FLUSHALL of
 * millions of keys does not hold the caller's loop for the seconds the
 * frees take. Here too when the thread cannot start. */
static void flush_job_dispose(kv_store *s, kv_flush_job *j, uint64_t keys) {
  if (keys > FLUSH_INLINE_MAX) {
    pthread_mutex_lock(&s->lazy_lock);
    if (!s->lazy_started && !s->lazy_stop &&
        pthread_create(&s->lazy_thread, NULL, lazy_main, s) == 0)
      s->lazy_started = true;
    if (s->lazy_started) {
      j->next = s->lazy_jobs;
      s->lazy_jobs = j;
      pthread_cond_signal(&s->lazy_cond);
      pthread_mutex_unlock(&s->lazy_lock);
      return;
    }
    pthread_mutex_unlock(&s->lazy_lock);
  }
  flush_job_free(j);
}

int kv_flushall(kv_store *s) {
  unsigned n = s->n_stripes, i;
  kv_table *fresh = calloc(n, sizeof(*fresh));
  kv_flush_job *j = flush_job_new(n);
  int err = WEFT_ENOMEM;
  if (fresh == NULL || j == NULL)
    goto failed_alloc;
  for (i = 0; i < n; i++)
    if (table_init(&fresh[i], TABLE_MIN_SIZE) != 0)
      goto failed_tables;
  uint64_t keys = 0;
  for (i = 0; i < n; i++) /* all stripes, in order: atomic */
    kv__stripe_lock(s, &s->stripes[i]);
  for (i = 0; i < n; i++) {
    kv_stripe *st = &s->stripes[i];
    j->tables[i] = st->table; /* the old table, freed below */
    keys += st->table.used;
    table_set_buckets(&st->table, fresh[i].buckets, fresh[i].mask + 1);
    st->table.used = fresh[i].used;
    j->expires[i] = st->expires;
    st->expires = NULL;
    st->n_expires = st->cap_expires = 0;
    atomic_store_explicit(&st->keys, 0, memory_order_relaxed);
    atomic_store_explicit(&st->n_ttl, 0, memory_order_relaxed);
    atomic_store_explicit(&st->mem, 0, memory_order_relaxed);
  }
  for (i = n; i-- > 0;)
    kv__stripe_unlock(s, &s->stripes[i]);
  free(fresh);
  flush_job_dispose(s, j, keys);
  return 0;

failed_tables:
  while (i-- > 0)
    free(fresh[i].buckets);
failed_alloc:
  free(fresh);
  if (j != NULL)
    flush_job_free(j);
  return err;
}

void kv_store_stats_get(kv_store *s, kv_store_stats *out) {
  memset(out, 0, sizeof(*out));
  for (unsigned i = 0; i < s->n_stripes; i++) {
    kv_stripe *st = &s->stripes[i];
    out->keys += atomic_load_explicit(&st->keys, memory_order_relaxed);
    out->expires += atomic_load_explicit(&st->n_ttl, memory_order_relaxed);
    out->expired_keys +=
        atomic_load_explicit(&st->expired, memory_order_relaxed);
    out->mem_bytes += atomic_load_explicit(&st->mem, memory_order_relaxed);
    out->hits += atomic_load_explicit(&st->hits, memory_order_relaxed);
    out->misses += atomic_load_explicit(&st->misses, memory_order_relaxed);
  }
}
