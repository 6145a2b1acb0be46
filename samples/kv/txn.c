/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/txn.c: transactions (store.h, kv_txn): the stripes of every
 * key a sequence of commands touches, locked together in index order, so
 * the sequence is applied atomically (the server's MULTI/EXEC). While a
 * transaction is locked, the thread-local kv__txn_active names it and the
 * store's lock helpers (store_internal.h) skip the stripes it holds, so the
 * ordinary commands run inside it unchanged. */
#include "store_internal.h"

#include <string.h>

#include <weft/error.h>

_Thread_local const kv_txn *kv__txn_active;

void kv_txn_init(kv_txn *t, kv_store *store) {
  memset(t, 0, sizeof *t);
  t->store = store;
}

void kv_txn_add_key(kv_txn *t, const void *key, size_t klen) {
  if (klen > t->store->max_key_len)
    return; /* refused by every command before it locks anything */
  size_t si = kv__stripe_index(t->store, kv__key_hash(t->store, key, klen));
  t->bits[si / 64] |= 1ull << (si % 64);
}

void kv_txn_add_all(kv_txn *t) {
  for (unsigned i = 0; i < t->store->n_stripes; i++)
    t->bits[i / 64] |= 1ull << (i % 64);
}

/* The transaction's stripes as a lock set. */
static lock_set txn_set(const kv_txn *t) {
  lock_set ls;
  memcpy(ls.bits, t->bits, sizeof ls.bits);
  return ls;
}

void kv_txn_lock(kv_txn *t) {
  assert(kv__txn_active == NULL && !t->locked);
  lock_set ls = txn_set(t);
  kv__lock_set_lock(t->store, &ls); /* not active yet: really locks */
  t->locked = true;
  kv__txn_active = t;
}

bool kv_txn_lock_all(kv_txn *t, kv_store *store) {
  const kv_txn *held = kv__txn_active;
  if (held != NULL && held->store == store) {
    /* EXEC of a KV_CF_ALLKEYS command: its transaction holds every stripe
     * (kv__txn_holds asserts it on each one the caller then touches). */
    return false;
  }
  kv_txn_init(t, store);
  kv_txn_add_all(t);
  kv_txn_lock(t);
  return true;
}

bool kv_txn_lock_keys(kv_txn *t, kv_store *store, size_t n,
                      const kv_key *keys) {
  const kv_txn *held = kv__txn_active;
  if (held != NULL && held->store == store)
    return false; /* kv__txn_holds asserts it holds each one touched */
  kv_txn_init(t, store);
  for (size_t i = 0; i < n; i++)
    kv_txn_add_key(t, keys[i].ptr, keys[i].len);
  kv_txn_lock(t);
  return true;
}

void kv_txn_unlock(kv_txn *t) {
  assert(kv__txn_active == t && t->locked);
  kv__txn_active = NULL; /* inactive first: the unlocks below are real */
  lock_set ls = txn_set(t);
  kv__lock_set_unlock(t->store, &ls);
  t->locked = false;
}

int kv_watch_version(kv_store *store, const void *key, size_t klen,
                     uint64_t *version) {
  *version = 0;
  if (klen > store->max_key_len)
    return WEFT_EMSGSIZE;
  key_lock k;
  kv_entry *e = kv__key_lock(store, &k, key, klen);
  if (e != NULL)
    *version = e->version;
  kv__key_unlock(store, &k);
  return e != NULL;
}
