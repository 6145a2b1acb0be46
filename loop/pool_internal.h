/* SPDX-License-Identifier: Apache-2.0 */
/* Internals shared by pool.c (slabs, free lists, return stack, leak list)
 * and buf.c (reference counting, slices, wrapping, accessors).
 *
 * Threading model, in one place:
 * - Everything in struct weft_pool except `returned` is touched by the owner
 *   thread only (the thread that called weft_pool_new). The exceptions are
 *   fields written once before any buffer is shared and only read afterwards
 *   (owner, leak_detect, notify, hook keys).
 * - Slab bookkeeping (a slab's free list and count, the partial and empty
 *   lists, the retained bytes) is owner-only too: a remote release only
 *   pushes the buffer onto `returned`, and the block goes back to its slab
 *   when the owner drains it. So a slab is released (unmapped) only by the
 *   owner, and only when no block of it is referenced or on the stack.
 * - `returned` is a Treiber stack: other threads push buffers whose last
 *   reference they dropped; the owner takes the whole stack at once with
 *   atomic_exchange(NULL). Nobody pops single nodes, so there is no ABA.
 * - The live list (leak detection) is owner-only: a buffer freed remotely is
 *   unlinked when the owner drains it. touched_at is written from any thread
 *   that touches the buffer, always with a relaxed __atomic store, and read
 *   with a relaxed __atomic load (on the owner, at destroy), so the benign
 *   race is also a well-defined one that TSan does not report.
 */
#ifndef WEFT_LOOP_POOL_INTERNAL_H
#define WEFT_LOOP_POOL_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/buf.h>

/* weft_buf.flags: the low two bits say where the memory came from. */
#define WEFT__BUF_POOLED 0u   /* a block of a slab; header in the slab */
#define WEFT__BUF_UNPOOLED 1u /* header and data in one malloc */
#define WEFT__BUF_WRAPPED 2u  /* caller's memory; header from the spares */
#define WEFT__BUF_SLICE 3u    /* a view of a root; header from the spares */
#define WEFT__BUF_KIND_MASK 3u
/* The buffer is linked into pool->live (leak detection on, or unpooled). */
#define WEFT__BUF_TRACKED 4u
/* Unpooled and mapped on its own (mmap), not malloc'd: see buf.c. */
#define WEFT__BUF_MAPPED 8u

/** Frees an unpooled buffer's memory, header included (buf.c). */
void weft__unpooled_free(weft_buf *buf);

/* Block size of size class `c`: 64 << 2c (64, 256, 1 Ki, ... 64 Ki). */
#define WEFT__CLASS_BYTES(c) ((size_t)WEFT_POOL_MIN_CLASS << (2 * (c)))

/* Spare headers (slices, wrapped buffers) are allocated this many at once. */
#define WEFT__HEADER_CHUNK 64

typedef struct weft__slab weft__slab;

/**
 * A slab: one anonymous mapping holding this struct, the headers, and then
 * `data`: nblocks page-aligned blocks of one size class (what slab hooks
 * register). headers[i] is the weft_buf of block i for the slab's whole life,
 * so allocating a pooled buffer never allocates a header and
 * buf->slab->keys[] is one load away.
 *
 * Every slab is on the pool's list of all slabs. A slab with a free block
 * (nused < nblocks) is on its class's partial list, where allocations take
 * blocks from; an empty one (nused == 0) is also on the
 * pool's empty list, most recently emptied first, and its bytes count as
 * retained, unless it is its class's reserve (the most recently emptied
 * slab of the class, reserved_bytes, outside the budget). The empty list
 * may also hold slabs taken back into use since, and reserves (see
 * pool.c); they do not count. A full slab is only on the list of all
 * slabs (not even a stale entry of the empty list).
 */
struct weft__slab {
  struct weft__slab *next, *prev;   /* pool->slabs (all classes) */
  struct weft__slab *pnext, *pprev; /* pool->partial[size_class] */
  struct weft__slab *enext, *eprev; /* pool->empty / empty_tail */
  weft_buf *free;                   /* free blocks, linked through buf->next */
  size_t nused;      /* blocks in use: handed out, not yet back */
  size_t nblocks;    /* blocks in the slab */
  size_t carved;     /* blocks handed out at least once; headers[carved..]
                        are untouched, so a new slab costs no O(nblocks)
                        setup */
  uint8_t *data;     /* page-aligned, nblocks * block bytes */
  size_t data_bytes; /* registered length */
  size_t map_bytes;  /* length of the mapping that starts at the slab */
  uint8_t size_class;
  bool on_empty_list;
  uint64_t keys[WEFT_POOL_MAX_HOOKS]; /* WEFT_MEM_KEY_NONE if unregistered */
  weft_buf headers[];
};

/* A block of spare headers; chunks are freed only by weft_pool_free. */
struct weft__header_chunk {
  struct weft__header_chunk *next;
  weft_buf headers[WEFT__HEADER_CHUNK];
};

struct weft__slab_hook {
  weft_slab_reg_cb reg;
  weft_slab_unreg_cb unreg;
  void *arg;
  weft_slab_hook_fini_cb fini; /* at weft_pool_free, after the unregs */
};

struct weft_pool {
  const char *owner;   /* &weft__pool_thread_token of the thread that
                          called weft_pool_new (see weft__pool_on_owner) */
  size_t slab_bytes;   /* bytes per slab as configured */
  size_t retain_bytes; /* retention budget (weft_pool_options) */
  bool leak_detect;
  weft__slab *partial[WEFT_POOL_CLASSES]; /* slabs with a free block; the
                                             head serves allocations */
  weft__slab *reserve[WEFT_POOL_CLASSES]; /* each class's most recently
                                             emptied slab while it stays
                                             empty, kept outside the budget
                                             (none when the budget is 0) */
  weft__slab *empty;       /* counted empty slabs, most recently emptied
                              first (and stale ones, see pool.c) */
  weft__slab *empty_tail;  /* the least recently emptied: released first */
  weft__slab *slabs;       /* every slab, newest first */
  weft_buf *spare_headers; /* linked through buf->next */
  struct weft__header_chunk *chunks;
  weft_buf *live; /* head of the live list (TRACKED buffers) */
  struct weft__slab_hook hooks[WEFT_POOL_MAX_HOOKS];
  int nhooks;
  void (*notify)(
      void *arg); /* remote notify, see weft_pool_set_remote_notify */
  void *notify_arg;
  weft_pool_stats stats; /* owner-only counters */
  /* Buffers released on other threads; the only field they write. */
  _Atomic(weft_buf *) returned;
};

/* One byte per thread whose address names the thread: every allocation
 * and release asks "is this the owner?", and the address of an
 * initial-exec thread-local is two instructions, where pthread_self() is a
 * call through the PLT. Like a pthread_t, an address may be reused by a
 * thread started after its first one exited. */
extern __thread char weft__pool_thread_token
    __attribute__((tls_model("initial-exec"), visibility("hidden")));

/** True on the pool's owner thread. */
static inline bool weft__pool_on_owner(const weft_pool *pool) {
  return pool->owner == &weft__pool_thread_token;
}

/** Records `at` as the buffer's last touch when leak detection is on. */
static inline void weft__buf_touch(weft_buf *buf, const char *at) {
  if (buf->pool->leak_detect)
    __atomic_store_n(&buf->touched_at, at, __ATOMIC_RELAXED);
}

/**
 * A pooled block of size class `cls` with its header initialised (indices
 * 0, one reference), or NULL when memory or a slab hook fails. Owner only.
 */
weft_buf *weft__pool_get_block(weft_pool *pool, unsigned cls);

/** A zeroed spare header for a slice or wrapped buffer, or NULL. Owner. */
weft_buf *weft__pool_get_header(weft_pool *pool);

/** Links a new buffer into the live list (weft__pool_track's slow part).
 * Owner only. */
void weft__pool_link_live(weft_pool *pool, weft_buf *buf, const char *at);

/** Counts a new buffer as live and links it into the live list if tracked:
 * with leak detection on, and always when unpooled, so destroy can free
 * leaked ones. Inline: with detection off (release builds) a pooled
 * allocation pays one increment for it. Owner only. */
static inline void weft__pool_track(weft_pool *pool, weft_buf *buf,
                                    const char *at) {
  pool->stats.live++;
  if (pool->leak_detect ||
      (buf->flags & WEFT__BUF_KIND_MASK) == WEFT__BUF_UNPOOLED)
    weft__pool_link_live(pool, buf, at);
}

/**
 * Frees a buffer whose count just reached zero: directly on the owner
 * thread, otherwise via the return stack. Any thread.
 */
void weft__pool_free(weft_buf *buf);

#endif /* WEFT_LOOP_POOL_INTERNAL_H */
