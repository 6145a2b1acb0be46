/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/store_internal.h: the store's layout and the helpers its
 * files share: table.c (hashing, blobs, the striped tables, life cycle),
 * expiry.c (TTLs, lazy and active expiry), commands.c (the per-key
 * commands), update.c (APPEND and INCRBYFLOAT) and txn.c (transactions).
 * Not for users of the store: they include store.h.
 *
 * Layout: the store is an array of stripes; a key's 64-bit SipHash picks the
 * stripe with its top bits and the bucket inside the stripe's chained hash
 * table with its low bits, so the two choices are independent. Each stripe
 * has its own mutex, table, array of keys with a TTL (for sampling in active
 * expiry) and counters. Counters are atomics written only under the stripe
 * lock (a relaxed load and store, no locked instruction) and read without
 * it by kv_store_stats_get.
 *
 * Rule for every command: allocate before locking, free after unlocking.
 * Entries deleted under the lock go onto a local garbage list; replaced
 * values are remembered and released after the unlock. The exceptions,
 * allocations that only happen under the lock, are a new entry for a key
 * that did not exist (SET, INCR; MSET preallocates them), growing the TTL
 * array, and resizing a stripe's table (its failure is harmless: the table
 * just stays fuller).
 */
#ifndef WEFT_SAMPLES_KV_STORE_INTERNAL_H
#define WEFT_SAMPLES_KV_STORE_INTERNAL_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

#define NO_EXPIRE_IDX UINT32_MAX

typedef struct kv_entry {
  struct kv_entry *next; /* bucket chain, or the garbage list */
  kv_blob *val;          /* the store's reference */
  uint64_t hash;
  uint64_t expire_at; /* in ns on the store's clock; 0 = no TTL */
  uint64_t version;   /* the stripe's version at its last change: WATCH
                         (kv_watch_version) */
  uint32_t exp_idx;   /* index in the stripe's expires array */
  uint32_t klen;      /* bytes; fits since max_key_len is checked */
  unsigned char key[];
} kv_entry;

typedef struct kv_table {
  kv_entry **buckets;
  uint64_t mask; /* size - 1; size is a power of two */
  uint64_t used;
} kv_table;

typedef struct kv_stripe {
  /* One stripe per cache line (or more), so two loops working on different
   * stripes never share a line. */
  _Alignas(64) pthread_mutex_t lock;
  kv_table table;
  kv_entry **expires; /* entries with a TTL, for random sampling */
  size_t n_expires, cap_expires;
  uint64_t rng;     /* xorshift state for sampling, under the lock */
  uint64_t version; /* counts the changes of its entries, under the lock:
                       each changed entry takes the next (kv__entry_touch),
                       so a key's version differs after any change, even
                       when it is deleted and made again */
  /* Written under the lock, read by stats without it. */
  _Atomic uint64_t keys, n_ttl, expired, mem, hits, misses;
} kv_stripe;

struct kv_store {
  kv_stripe *stripes;
  unsigned n_stripes;
  unsigned stripe_bits; /* log2(n_stripes) */
  size_t max_key_len, max_value_len;
  bool single_thread;
  uint64_t sip_k0, sip_k1; /* random per store: hash flooding resistance */
  kv_clock_fn clock;
  void *clock_arg;
  _Atomic unsigned expire_next; /* stripe where active expiry resumes */
  /* FLUSHALL's lazy freeing (table.c): what a flush of many keys detached
   * is freed by one background thread per store, started at the first
   * such flush and joined by kv_store_free, as Redis' lazyfree does. */
  pthread_mutex_t lazy_lock;
  pthread_cond_t lazy_cond;
  struct kv_flush_job *lazy_jobs; /* waiting, under lazy_lock */
  bool lazy_started, lazy_stop;
  pthread_t lazy_thread;
};

/* A command's deferred frees: entries deleted under a lock. */
typedef struct garbage {
  kv_entry *entries;
} garbage;

/* ------------------------------------------------------------------------ */
/* Stripes, locks, counters                                                  */

static inline kv_stripe *kv__stripe_of(kv_store *s, uint64_t hash) {
  return s->stripe_bits == 0 ? &s->stripes[0]
                             : &s->stripes[hash >> (64 - s->stripe_bits)];
}

static inline size_t kv__stripe_index(const kv_store *s, uint64_t hash) {
  return s->stripe_bits == 0 ? 0 : (size_t)(hash >> (64 - s->stripe_bits));
}

/* txn.c: the transaction (kv_txn_lock) this thread holds, or NULL. While
 * one is held, the stripes it locked are this thread's already: the
 * commands it runs skip locking and unlocking them. */
extern _Thread_local const kv_txn *kv__txn_active;

/* True when this thread's transaction holds stripe `st` of `s`. A
 * transaction locks every stripe its commands can touch (kv_txn_add_key,
 * kv_txn_add_all), so locking any other one would be a bug: it could
 * deadlock against a thread locking in stripe order (asserted). */
static inline bool kv__txn_holds(const kv_store *s, const kv_stripe *st) {
  const kv_txn *t = kv__txn_active;
  if (t == NULL || t->store != s)
    return false;
  size_t i = (size_t)(st - s->stripes);
  bool held = (t->bits[i / 64] >> (i % 64)) & 1;
  assert(held && "a transaction touched a stripe it did not lock");
  return held;
}

static inline void kv__stripe_lock(kv_store *s, kv_stripe *st) {
  if (!s->single_thread && !kv__txn_holds(s, st))
    pthread_mutex_lock(&st->lock);
}

static inline void kv__stripe_unlock(kv_store *s, kv_stripe *st) {
  if (!s->single_thread && !kv__txn_holds(s, st))
    pthread_mutex_unlock(&st->lock);
}

/* A set of stripes, one bit each: what a multi-key command locks, in
 * index order (so two of them never deadlock). */
typedef struct lock_set {
  uint64_t bits[KV_STRIPES_MAX / 64];
} lock_set;

/* Adds the stripe of `hash` to `ls`. */
static inline void kv__lock_set_add(const kv_store *s, lock_set *ls,
                                    uint64_t hash) {
  size_t si = kv__stripe_index(s, hash);
  ls->bits[si / 64] |= 1ull << (si % 64);
}

/* Adds every stripe of `s` to `ls`. */
static inline void kv__lock_set_all(const kv_store *s, lock_set *ls) {
  for (unsigned i = 0; i < s->n_stripes; i++)
    ls->bits[i / 64] |= 1ull << (i % 64);
}

/* Locks the stripes of `ls` in index order. */
static inline void kv__lock_set_lock(kv_store *s, const lock_set *ls) {
  for (unsigned w = 0; w < (s->n_stripes + 63) / 64; w++)
    for (uint64_t m = ls->bits[w]; m; m &= m - 1)
      kv__stripe_lock(s, &s->stripes[w * 64 + (unsigned)__builtin_ctzll(m)]);
}

/* Unlocks the stripes of `ls`. */
static inline void kv__lock_set_unlock(kv_store *s, const lock_set *ls) {
  for (unsigned w = 0; w < (s->n_stripes + 63) / 64; w++)
    for (uint64_t m = ls->bits[w]; m; m &= m - 1)
      kv__stripe_unlock(s, &s->stripes[w * 64 + (unsigned)__builtin_ctzll(m)]);
}

/* The entry `e` of `st` changed (value or TTL): a new version, which
 * fails the EXEC of every client that WATCHes it. Under the lock. */
static inline void kv__entry_touch(kv_stripe *st, kv_entry *e) {
  e->version = ++st->version;
}

/* Only the lock holder writes a stripe counter, so load + store is exact;
 * the atomics are for readers that take no lock. */
static inline void kv__counter_add(_Atomic uint64_t *c, uint64_t delta) {
  atomic_store_explicit(c,
                        atomic_load_explicit(c, memory_order_relaxed) + delta,
                        memory_order_relaxed);
}

static inline void kv__counter_sub(_Atomic uint64_t *c, uint64_t delta) {
  atomic_store_explicit(c,
                        atomic_load_explicit(c, memory_order_relaxed) - delta,
                        memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* table.c: hashing, blobs, entries, tables                                  */

/** The key's SipHash-1-3 with the store's random keys. */
uint64_t kv__key_hash(const kv_store *s, const void *key, size_t klen);

/** A blob of `len` bytes (one reference), unchecked against max_value_len;
 * NULL when out of memory. */
kv_blob *kv__blob_alloc(size_t len);

/** A new unlinked entry holding a copy of `key`, no value and no TTL; NULL
 * when out of memory. */
kv_entry *kv__entry_new(uint64_t hash, const void *key, size_t klen);

/** Frees every entry on `g` (after the unlock). */
void kv__garbage_free(garbage *g);

/** The link that points at the entry for `key`, or NULL. */
kv_entry **kv__table_find(kv_table *t, uint64_t hash, const void *key,
                          size_t klen);

/** The link that points at `e` (which is in the table). */
kv_entry **kv__table_link_of(kv_table *t, const kv_entry *e);

/** Load factor 1 to grow (Redis' threshold), 1/8 to shrink. Shrinking
 * matters for SCAN's cost and memory after mass deletes. */
void kv__table_maybe_resize(kv_table *t);

/** Links the new entry `e` with the value `val` (the store's reference)
 * into its stripe, counts it and resizes the table if due. */
void kv__entry_link(kv_stripe *st, kv_entry *e, kv_blob *val);

/** Unlinks the entry at `link` onto the garbage list (freed after unlock). */
void kv__entry_unlink(kv_stripe *st, kv_entry **link, garbage *g);

/* ------------------------------------------------------------------------ */
/* expiry.c: TTLs and lazy expiry                                            */

/** Makes room for one more entry in the stripe's TTL array: 0 or
 * WEFT_ENOMEM. */
int kv__expires_reserve(kv_stripe *st);

/** Gives `e` the deadline `at`; the caller reserved room in the array. */
void kv__expire_set(kv_stripe *st, kv_entry *e, uint64_t at);

/** Removes `e`'s TTL, if it has one. */
void kv__expire_clear(kv_stripe *st, kv_entry *e);

/** True if `e` has a TTL and its deadline has passed on the store's clock. */
bool kv__entry_expired(const kv_store *s, const kv_entry *e);

/** The live entry for `key`, or NULL; an expired one is deleted on the way
 * (lazy expiry). Resizing is left to the caller's next insert. */
kv_entry *kv__lookup_live(kv_store *s, kv_stripe *st, uint64_t hash,
                          const void *key, size_t klen, garbage *g);

/** Validates SET options and computes the absolute deadline (0 = none). */
int kv__set_deadline(const kv_store *s, const kv_set_options *o, uint64_t *at);

/* ------------------------------------------------------------------------ */
/* One key's command                                                         */

/* The state of a command on one key while its stripe is locked. */
typedef struct key_lock {
  kv_stripe *st;
  garbage g; /* entries deleted under the lock: freed by kv__key_unlock */
} key_lock;

/* Hashes `key` (its length checked by the caller), locks its stripe and
 * returns its live entry, or NULL (an expired one is deleted on the way). */
static inline kv_entry *kv__key_lock(kv_store *s, key_lock *k, const void *key,
                                     size_t klen) {
  uint64_t h = kv__key_hash(s, key, klen);
  k->st = kv__stripe_of(s, h);
  k->g.entries = NULL;
  kv__stripe_lock(s, k->st);
  return kv__lookup_live(s, k->st, h, key, klen, &k->g);
}

/* Deletes `e`, an entry of k's stripe, under the lock. */
static inline void kv__key_delete(key_lock *k, kv_entry *e) {
  kv__entry_unlink(k->st, kv__table_link_of(&k->st->table, e), &k->g);
  kv__table_maybe_resize(&k->st->table);
}

/* Unlocks the stripe, then frees what the command deleted. */
static inline void kv__key_unlock(kv_store *s, key_lock *k) {
  kv__stripe_unlock(s, k->st);
  kv__garbage_free(&k->g);
}

#endif /* WEFT_SAMPLES_KV_STORE_INTERNAL_H */
