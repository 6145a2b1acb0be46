/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/multi.h: MULTI's queue of one connection (multi.c). Between
 * MULTI and EXEC a command is checked (known, arity, authentication) and
 * copied here instead of run; EXEC runs the queue as one transaction of
 * the store (kv_txn: the stripes of every queued key locked, in order), so
 * no other client sees any of it before all of it. A command refused while
 * queueing marks the transaction, and EXEC then discards it with Redis'
 * EXECABORT. WATCHed keys (watch.h) are checked by EXEC with the queue's
 * stripes locked.
 *
 * Bounds: at most KV_MULTI_MAX_COMMANDS commands and `max_bytes` bytes of
 * arguments (kv_multi_limit); past either, the command is refused with
 * "ERR MULTI queue is full ..." and the transaction is marked as above.
 * At most KV_MULTI_MAX_SCANS KEYS or SCAN commands: EXEC runs its queue
 * with every stripe of a transaction that has one locked, so every other
 * client of every loop waits for it; each is bounded (KV_SCAN_WORK_MAX,
 * KV_KEYS_MAX: about 20 ms for KEYS over a million keys), a queue of
 * them was not (MULTI, 300 KEYS *, EXEC held every stripe 5-7 s: issue
 * 27). One more is refused with "ERR MULTI may queue at most 2 KEYS or
 * SCAN commands ..." and the transaction is marked as above.
 */
#ifndef WEFT_SAMPLES_KV_MULTI_H
#define WEFT_SAMPLES_KV_MULTI_H

#include <stdbool.h>
#include <stddef.h>

#include "proto.h"

/** Commands one transaction may queue. */
#define KV_MULTI_MAX_COMMANDS 10000u
/** KEYS and SCAN commands one transaction may queue (see above). */
#define KV_MULTI_MAX_SCANS 2u
/** Argument bytes one transaction may queue, at least (kv_multi_limit). */
#define KV_MULTI_MIN_BYTES (16u << 20)

/** One queued command: its arguments follow the struct. */
typedef struct kv_queued {
  struct kv_queued *next;
  int cmd;
  size_t argc;
  kv_arg argv[];
} kv_queued;

/** A connection's transaction. Zero-initialised = no MULTI. */
typedef struct kv_multi {
  bool active;           /* between MULTI and EXEC or DISCARD */
  bool dirty;            /* a command was refused while queueing: EXEC aborts */
  unsigned cluster_slot; /* cluster mode: the slot of the queued keys + 1;
                            0 = no key queued yet (cluster.c) */
  size_t count, bytes;
  unsigned scans; /* KEYS and SCAN queued (KV_MULTI_MAX_SCANS) */
  kv_queued *head, *tail;
} kv_multi;

/**
 * The bytes of arguments one transaction may queue for a server whose
 * largest value is `max_value_bytes`: KV_MULTI_MIN_BYTES, or room for one
 * command of the largest size the decoders accept when that is more.
 */
size_t kv_multi_limit(size_t max_value_bytes);

/** Frees the queue and ends the transaction (DISCARD, a closed session). */
void kv_multi_reset(kv_multi *m);

#endif
