/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/watch.h: WATCH's keys of one connection (watch.c), for the
 * optimistic locking of Redis' transactions: WATCH records each key's
 * version (kv_watch_version: whether it exists, and its change count), and
 * EXEC, with the stripes of its queued and watched keys locked, runs the
 * queue only when none of them changed since; else it answers a null and
 * runs nothing. EXEC, DISCARD, UNWATCH and the connection's end forget the
 * keys. The store's versions are shared by every loop, so a change made
 * through any connection counts.
 *
 * Bounds: at most KV_WATCH_MAX_KEYS keys and the MULTI queue's byte limit
 * (kv_multi_limit) of key bytes per connection; past either WATCH is
 * refused and nothing of it is recorded. */
#ifndef WEFT_SAMPLES_KV_WATCH_H
#define WEFT_SAMPLES_KV_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/** Keys one connection may watch at once. */
#define KV_WATCH_MAX_KEYS 100000u

/** One watched key: its version at WATCH, then its bytes. */
typedef struct kv_watched {
  uint64_t version; /* kv_watch_version's; 0 when it did not exist */
  bool exists;
  size_t klen;
  unsigned char key[];
} kv_watched;

/** A connection's watched keys. Zero-initialised = none. */
typedef struct kv_watch {
  kv_watched **keys;
  size_t n, cap;
  size_t bytes; /* key bytes held */
} kv_watch;

/** Forgets every key and frees the list (EXEC, DISCARD, UNWATCH, the
 *  session's end). */
void kv_watch_reset(kv_watch *w);

/** Adds the stripes of every watched key to `t`, before EXEC locks it. */
void kv_watch_add_keys(const kv_watch *w, kv_txn *t);

/**
 * True when a watched key changed since WATCH: it exists now and did not,
 * or not and did, or has another version. Call with the keys' stripes
 * locked (kv_watch_add_keys, kv_txn_lock), so nothing changes between the
 * check and the queue's run. The session's loop thread.
 */
bool kv_watch_changed(const kv_watch *w, kv_store *store);

#endif
