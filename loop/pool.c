/* SPDX-License-Identifier: Apache-2.0 */
/* Per-loop buffer pools: size-class slabs with per-slab free lists, the
 * remote return stack, slab hooks for memory registration, giving empty slabs
 * back beyond the retention budget, and the leak report.
 *
 * Allocation for a pooled class takes a block from the slab at the head of
 * the class's partial list: its free list (warm memory, counted as reused),
 * else its next never-used block. Only when no slab of the class has a free
 * block does it drain the return stack (one atomic load when nothing came
 * back), and only then map a new slab.
 *
 * Freeing puts the block back on its own slab's free list. The slab rejoins
 * its partial list when it was full, and when it becomes empty it becomes
 * its class's reserve: the most recently emptied slab of each class is kept
 * outside the retention budget (while the budget is not 0), so that a
 * steady stream whose working set crosses a slab boundary, or touches
 * more classes than the budget holds slabs, does not unmap and fault in a
 * slab per message. The reserve it replaces (still empty) goes to the head
 * of the pool's empty list and counts against the budget; if the counted
 * slabs then exceed it, the least recently emptied ones are released
 * (hooks' unreg, munmap) until they fit. Every step is O(1) apart from the
 * release itself, which is one munmap per slab.
 */
#include "loop/pool_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <weft/log.h>

#define DEFAULT_SLAB_BYTES ((size_t)1 << 20)

__thread char weft__pool_thread_token;

/* ------------------------------------------------------------------------ */
/* Options and configuration                                                 */

void weft_pool_options_init(weft_pool_options *opts) {
  if (opts == NULL)
    return;
  opts->slab_bytes = DEFAULT_SLAB_BYTES;
  opts->leak_detect = -1;
  opts->retain_bytes = WEFT_POOL_RETAIN_BYTES_DEFAULT;
}

/* Debug builds track leaks by default; release builds pay nothing for it. */
static bool leak_detect_default(void) {
#ifdef NDEBUG
  bool on = false;
#else
  bool on = true;
#endif
  const char *env = getenv("WEFT_LEAK_DETECT");
  if (env == NULL)
    return on;
  if (strcmp(env, "0") == 0)
    return false;
  if (strcmp(env, "1") == 0)
    return true;
  weft_log(WEFT_LOG_WARN, "WEFT_LEAK_DETECT=%s ignored: use 0 or 1", env);
  return on;
}

static int check_options(const weft_pool_options *opts) {
  /* A slab must hold at least one block of the largest class, or that class
   * could never be served. */
  if (opts->slab_bytes < WEFT_POOL_MAX_CLASS)
    return WEFT_EINVAL;
  if (opts->leak_detect < -1 || opts->leak_detect > 1)
    return WEFT_EINVAL;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Pool lifecycle                                                            */

int weft_pool_new(weft_pool **out, const weft_pool_options *opts) {
  if (out == NULL)
    return WEFT_EINVAL;
  *out = NULL;
  weft_pool_options defaults;
  weft_pool_options_init(&defaults);
  if (opts == NULL)
    opts = &defaults;
  int err = check_options(opts);
  if (err != 0)
    return err;

  weft_pool *pool = calloc(1, sizeof *pool);
  if (pool == NULL)
    return WEFT_ENOMEM;
  pool->owner = &weft__pool_thread_token;
  pool->slab_bytes = opts->slab_bytes;
  pool->retain_bytes = opts->retain_bytes;
  pool->leak_detect =
      opts->leak_detect == -1 ? leak_detect_default() : opts->leak_detect == 1;
  atomic_init(&pool->returned, NULL);
  *out = pool;
  return 0;
}

static void slab_unmap(weft_pool *pool, weft__slab *slab);

static void free_slabs(weft_pool *pool) {
  weft__slab *slab = pool->slabs;
  while (slab != NULL) {
    weft__slab *next = slab->next;
    slab_unmap(pool, slab);
    slab = next;
  }
  pool->slabs = NULL;
}

static void free_header_chunks(weft_pool *pool) {
  struct weft__header_chunk *chunk = pool->chunks;
  while (chunk != NULL) {
    struct weft__header_chunk *next = chunk->next;
    free(chunk);
    chunk = next;
  }
  pool->chunks = NULL;
}

/* Logs each tracked leak (when detection is on) and frees leaked unpooled
 * buffers, which are always tracked because nothing else could find them.
 * Leaked wrapped buffers do not get their free_cb: the memory's owner (a
 * transport) has usually gone by the time its pool is destroyed. */
static void report_and_free_leaks(weft_pool *pool) {
  weft_buf *buf = pool->live;
  while (buf != NULL) {
    weft_buf *next = buf->live_next;
    if (pool->leak_detect) {
      const char *at = __atomic_load_n(&buf->touched_at, __ATOMIC_RELAXED);
      weft_log(WEFT_LOG_WARN,
               "LEAK: weft_buf %zu bytes, refcnt %u, last touched at %s",
               buf->capacity, (unsigned)weft_buf_refcnt(buf),
               at != NULL ? at : "(unknown)");
    }
    if ((buf->flags & WEFT__BUF_KIND_MASK) == WEFT__BUF_UNPOOLED)
      weft__unpooled_free(buf);
    buf = next;
  }
  pool->live = NULL;
}

size_t weft_pool_free(weft_pool *pool) {
  if (pool == NULL)
    return 0;
  /* Buffers released remotely are not leaks: take them back first. */
  weft_pool_drain(pool);
  size_t leaks = pool->stats.live;
  report_and_free_leaks(pool);
  /* The summary avoids the word "LEAK" so that a log search for it counts
   * leaked buffers, one line each. */
  if (leaks > 0)
    weft_log(WEFT_LOG_WARN, "buffer pool destroyed with %zu leaked buffer%s%s",
             leaks, leaks == 1 ? "" : "s",
             pool->leak_detect ? "" : " (leak detection is off: no locations)");
  free_slabs(pool);
  for (int h = 0; h < pool->nhooks; h++)
    if (pool->hooks[h].fini != NULL)
      pool->hooks[h].fini(pool->hooks[h].arg);
  free_header_chunks(pool);
  free(pool);
  return leaks;
}

void weft_pool_set_remote_notify(weft_pool *pool, void (*notify)(void *arg),
                                 void *arg) {
  if (pool == NULL)
    return;
  pool->notify = notify;
  pool->notify_arg = arg;
}

bool weft_pool_leak_detect(const weft_pool *pool) {
  return pool != NULL && pool->leak_detect;
}

void weft_pool_stats_get(const weft_pool *pool, weft_pool_stats *out) {
  if (out == NULL)
    return;
  if (pool == NULL) {
    memset(out, 0, sizeof *out);
    return;
  }
  *out = pool->stats;
}

/* ------------------------------------------------------------------------ */
/* Slab hooks                                                                */

/* Registers `slab` with every hook; on failure undoes the ones that
 * succeeded so the slab can be freed as if it never existed. */
static int register_slab(weft_pool *pool, weft__slab *slab) {
  for (int h = 0; h < pool->nhooks; h++) {
    const struct weft__slab_hook *hook = &pool->hooks[h];
    int err =
        hook->reg(hook->arg, slab->data, slab->data_bytes, &slab->keys[h]);
    if (err < 0) {
      slab->keys[h] = WEFT_MEM_KEY_NONE;
      for (int u = h - 1; u >= 0; u--) {
        if (pool->hooks[u].unreg != NULL)
          pool->hooks[u].unreg(pool->hooks[u].arg, slab->data, slab->data_bytes,
                               slab->keys[u]);
        slab->keys[u] = WEFT_MEM_KEY_NONE;
      }
      return err;
    }
  }
  return 0;
}

/* Unregisters hook `h` from the slabs before `stop` (those it registered). */
static void unregister_hook_until(weft_pool *pool, int h, weft__slab *stop) {
  const struct weft__slab_hook *hook = &pool->hooks[h];
  for (weft__slab *s = pool->slabs; s != stop; s = s->next) {
    if (hook->unreg != NULL)
      hook->unreg(hook->arg, s->data, s->data_bytes, s->keys[h]);
    s->keys[h] = WEFT_MEM_KEY_NONE;
  }
}

int weft_pool_add_slab_hook(weft_pool *pool, weft_slab_reg_cb reg,
                            weft_slab_unreg_cb unreg, void *arg) {
  if (pool == NULL || reg == NULL)
    return WEFT_EINVAL;
  if (pool->nhooks == WEFT_POOL_MAX_HOOKS)
    return WEFT_ENOSPC;
  int h = pool->nhooks;
  pool->hooks[h] = (struct weft__slab_hook){reg, unreg, arg, NULL};
  for (weft__slab *s = pool->slabs; s != NULL; s = s->next) {
    int err = reg(arg, s->data, s->data_bytes, &s->keys[h]);
    if (err < 0) {
      s->keys[h] = WEFT_MEM_KEY_NONE;
      unregister_hook_until(pool, h, s);
      return err;
    }
  }
  /* Published last: a failed add leaves no trace. */
  pool->nhooks = h + 1;
  return h;
}

int weft_pool_set_slab_hook_fini(weft_pool *pool, int hook,
                                 weft_slab_hook_fini_cb fini) {
  if (pool == NULL || hook < 0 || hook >= pool->nhooks)
    return WEFT_EINVAL;
  pool->hooks[hook].fini = fini;
  return 0;
}

/* ------------------------------------------------------------------------ */
/* Slabs and blocks                                                          */

/* Pools of several loops may ask at once: the cache is atomic (racing
 * first calls store the same value). */
static size_t page_size(void) {
  static _Atomic size_t cached;
  size_t ps = atomic_load_explicit(&cached, memory_order_relaxed);
  if (ps == 0) {
    long n = sysconf(_SC_PAGESIZE);
    ps = n > 0 ? (size_t)n : 4096;
    atomic_store_explicit(&cached, ps, memory_order_relaxed);
  }
  return ps;
}

/* `n` rounded up to a multiple of the power of two `to`, or 0 on overflow. */
static size_t round_up(size_t n, size_t to) {
  return n > SIZE_MAX - (to - 1) ? 0 : (n + to - 1) & ~(to - 1);
}

/* Doubly linked lists without sentinels; each takes the head by address. */
static void partial_push(weft_pool *pool, weft__slab *slab) {
  weft__slab **head = &pool->partial[slab->size_class];
  slab->pprev = NULL;
  slab->pnext = *head;
  if (*head != NULL)
    (*head)->pprev = slab;
  *head = slab;
}

static void partial_unlink(weft_pool *pool, weft__slab *slab) {
  if (slab->pprev != NULL)
    slab->pprev->pnext = slab->pnext;
  else
    pool->partial[slab->size_class] = slab->pnext;
  if (slab->pnext != NULL)
    slab->pnext->pprev = slab->pprev;
}

/* The empty list holds every empty slab that is not a class's reserve,
 * most recently emptied (or displaced as reserve) first. It may also hold
 * a reserve, and slabs taken back into use since they emptied ("stale"):
 * taking them off at once would cost a buffer allocated and released in
 * turn two list updates per round, where a counter suffices. A reserve
 * that is displaced moves to the head; the release scan drops the stale
 * entries and reserves it meets at the tail. So the order among counted
 * empty slabs is the order in which they last left the reserve (or were
 * mapped), and each list step is O(1) (a dropped entry was pushed once). */
static void empty_push(weft_pool *pool, weft__slab *slab) {
  slab->eprev = NULL;
  slab->enext = pool->empty;
  if (pool->empty != NULL)
    pool->empty->eprev = slab;
  else
    pool->empty_tail = slab;
  pool->empty = slab;
  slab->on_empty_list = true;
}

static void empty_unlink(weft_pool *pool, weft__slab *slab) {
  if (slab->eprev != NULL)
    slab->eprev->enext = slab->enext;
  else
    pool->empty = slab->enext;
  if (slab->enext != NULL)
    slab->enext->eprev = slab->eprev;
  else
    pool->empty_tail = slab->eprev;
  slab->on_empty_list = false;
}

/* Unregisters the slab from every hook, then unmaps it. Lists are the
 * caller's business. */
static void slab_unmap(weft_pool *pool, weft__slab *slab) {
  for (int h = 0; h < pool->nhooks; h++) {
    const struct weft__slab_hook *hook = &pool->hooks[h];
    if (hook->unreg != NULL)
      hook->unreg(hook->arg, slab->data, slab->data_bytes, slab->keys[h]);
  }
  munmap(slab, slab->map_bytes);
}

/* Gives an empty slab back to the system. */
static void slab_release(weft_pool *pool, weft__slab *slab) {
  empty_unlink(pool, slab);
  partial_unlink(pool, slab);
  if (slab->prev != NULL)
    slab->prev->next = slab->next;
  else
    pool->slabs = slab->next;
  if (slab->next != NULL)
    slab->next->prev = slab->prev;
  pool->stats.retained_bytes -= slab->data_bytes;
  pool->stats.slabs--;
  pool->stats.slab_bytes -= slab->data_bytes;
  pool->stats.slabs_released++;
  slab_unmap(pool, slab);
}

/* The rare slab transitions are kept out of line (noinline, cold), so that
 * the common alloc and release paths need no callee-saved registers. */
#define SLOW_PATH __attribute__((noinline, cold))

/* Makes the empty `slab` its class's reserve (the caller has dealt with
 * the reserve it replaces, if any). */
static inline void reserve_set(weft_pool *pool, weft__slab *slab) {
  pool->reserve[slab->size_class] = slab;
  pool->stats.reserved_bytes += slab->data_bytes;
}

/* Releases the least recently emptied counted slabs while the retained
 * bytes exceed the budget. Every counted empty slab is on the empty list,
 * so the scan finds one while retained_bytes > 0. */
static void trim_to_budget(weft_pool *pool) {
  while (pool->stats.retained_bytes > pool->retain_bytes) {
    weft__slab *oldest = pool->empty_tail;
    if (oldest->nused == 0 && pool->reserve[oldest->size_class] != oldest)
      slab_release(pool, oldest);
    else
      empty_unlink(pool, oldest); /* stale (in use again), or a reserve */
  }
}

/* A slab just became empty and put_block could not simply make it its
 * class's reserve: the class has a reserve already, the slab has one block
 * (it was full, so off the partial list), or the budget is 0 (no
 * reserves). With a budget, the slab becomes the reserve and the one it
 * displaces is counted: to the head of the empty list, then the budget is
 * enforced. A displaced reserve is empty (taking a block clears it). */
static SLOW_PATH void slab_emptied(weft_pool *pool, weft__slab *slab) {
  if (slab->nblocks == 1)
    partial_push(pool, slab); /* it was full, so off the partial list */
  weft__slab *counted = slab;
  if (pool->retain_bytes != 0) {
    counted = pool->reserve[slab->size_class];
    reserve_set(pool, slab);
    if (counted == NULL)
      return;
    pool->stats.reserved_bytes -= counted->data_bytes;
  }
  pool->stats.retained_bytes += counted->data_bytes;
  if (pool->empty != counted) {
    if (counted->on_empty_list)
      empty_unlink(pool, counted);
    empty_push(pool, counted);
  }
  trim_to_budget(pool);
}

/* A slab with no block in use gives one: it is no longer retained or the
 * class's reserve. It stays on the empty list if it was there (stale). */
static inline void slab_taken(weft_pool *pool, weft__slab *slab) {
  weft__slab **reserve = &pool->reserve[slab->size_class];
  if (*reserve == slab) {
    *reserve = NULL;
    pool->stats.reserved_bytes -= slab->data_bytes;
  } else {
    pool->stats.retained_bytes -= slab->data_bytes;
  }
}

/* One anonymous mapping per slab: this struct and the headers, then the
 * data from the next page boundary. Page alignment: NIC registration
 * (ibv_reg_mr, ucp_mem_map) pins whole pages, and aligned slabs never share
 * a page with other data. mmap rather than malloc so that munmap really
 * returns the memory: glibc keeps freed heap memory, and its dynamic mmap
 * threshold would soon serve 1 MiB requests from the heap. */
static weft__slab *slab_new(weft_pool *pool, unsigned cls) {
  size_t block = WEFT__CLASS_BYTES(cls);
  size_t nblocks = pool->slab_bytes / block;
  size_t ps = page_size();
  size_t headers, head, data_bytes = nblocks * block, map_bytes;
  if (__builtin_mul_overflow(nblocks, sizeof(weft_buf), &headers) ||
      (head = round_up(sizeof(weft__slab) + headers, ps)) == 0 ||
      __builtin_add_overflow(head, round_up(data_bytes, ps), &map_bytes))
    return NULL;
  void *map = mmap(NULL, map_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED)
    return NULL;
  weft__slab *slab = map; /* zero-filled: lists NULL, nothing carved */
  slab->data = (uint8_t *)map + head;
  slab->data_bytes = data_bytes;
  slab->map_bytes = map_bytes;
  slab->nblocks = nblocks; /* nused 0: empty */
  slab->size_class = (uint8_t)cls;
  for (int h = 0; h < WEFT_POOL_MAX_HOOKS; h++)
    slab->keys[h] = WEFT_MEM_KEY_NONE;
  if (register_slab(pool, slab) < 0) {
    munmap(map, map_bytes);
    return NULL;
  }
  slab->next = pool->slabs;
  if (pool->slabs != NULL)
    pool->slabs->prev = slab;
  pool->slabs = slab;
  pool->stats.slabs++;
  pool->stats.slab_bytes += data_bytes;
  /* Empty and retained, as every slab with no block in use is, until the
   * allocation that asked for it takes its first block. */
  partial_push(pool, slab);
  empty_push(pool, slab);
  pool->stats.retained_bytes += data_bytes;
  return slab;
}

/* A slab of the class with a free block: the partial list's head, else one
 * that remote releases freed (drained now), else a new one. */
static SLOW_PATH weft__slab *slab_with_free_block(weft_pool *pool,
                                                  unsigned cls) {
  if (weft_pool_drain(pool) > 0 && pool->partial[cls] != NULL)
    return pool->partial[cls];
  return slab_new(pool, cls);
}

/* The slab's next never-used block, with its header set up for good. */
static weft_buf *carve_block(weft_pool *pool, weft__slab *slab) {
  size_t i = slab->carved++;
  unsigned cls = slab->size_class;
  weft_buf *buf = &slab->headers[i];
  memset(buf, 0, sizeof *buf);
  buf->msg.type = &weft_buf_msg_type;
  buf->base = slab->data + i * WEFT__CLASS_BYTES(cls);
  buf->capacity = WEFT__CLASS_BYTES(cls);
  buf->size_class = (uint8_t)cls;
  buf->slab = slab;
  buf->pool = pool;
  return buf;
}

/* A block handed out: indices 0, one reference. msg, base, capacity,
 * size_class, slab and pool are fixed for the block: set when carved. */
static inline weft_buf *init_block(weft_buf *buf) {
  buf->reader_index = 0;
  buf->writer_index = 0;
  buf->next = NULL;
  buf->flags = WEFT__BUF_POOLED;
  atomic_store_explicit(&buf->refcnt, 1, memory_order_relaxed);
  return buf;
}

/* Every allocation the fast path leaves: no slab of the class has a free
 * block, the block must be carved, or it is the slab's last free one. Out
 * of line but not cold: a burst carves many. */
static __attribute__((noinline)) weft_buf *get_block_slow(weft_pool *pool,
                                                          unsigned cls) {
  weft__slab *slab = pool->partial[cls];
  if (slab == NULL && (slab = slab_with_free_block(pool, cls)) == NULL)
    return NULL;
  weft_buf *buf = slab->free;
  if (buf != NULL) {
    slab->free = buf->next;
    pool->stats.reused++;
  } else {
    /* A free block and none on the free list: blocks remain uncarved. */
    buf = carve_block(pool, slab);
  }
  if (slab->nused++ == 0)
    slab_taken(pool, slab);
  if (slab->nused == slab->nblocks) {
    /* Full: not a place to allocate from, and off the empty list even as
     * a stale entry, so that put_block sees it empty again as not the
     * head and relinks it (one-block slabs go from full to empty). */
    partial_unlink(pool, slab);
    if (slab->on_empty_list)
      empty_unlink(pool, slab);
  }
  return init_block(buf);
}

weft_buf *weft__pool_get_block(weft_pool *pool, unsigned cls) {
  /* The common case: the head slab of the class has a block on its free
   * list, and not its last free one. */
  weft__slab *slab = pool->partial[cls];
  weft_buf *buf;
  if (__builtin_expect(slab == NULL || (buf = slab->free) == NULL ||
                           slab->nused + 1 == slab->nblocks,
                       0))
    return get_block_slow(pool, cls);
  slab->free = buf->next;
  pool->stats.reused++;
  if (slab->nused++ == 0)
    slab_taken(pool, slab);
  return init_block(buf);
}

/* A full slab got a block back: it rejoins the head of its partial list
 * (warm memory, allocated from next). */
static SLOW_PATH void slab_not_full(weft_pool *pool, weft__slab *slab) {
  partial_push(pool, slab);
}

/* A pooled block goes back to its own slab. Owner thread only. A buffer
 * allocated and released in turn empties its slab each time: the slab then
 * becomes its class's reserve again, and only the counts change. */
static inline void put_block(weft_pool *pool, weft_buf *buf) {
  weft__slab *slab = buf->slab;
  buf->next = slab->free;
  slab->free = buf;
  if (--slab->nused == 0) {
    if (pool->reserve[slab->size_class] == NULL && slab->nblocks > 1 &&
        pool->retain_bytes != 0)
      reserve_set(pool, slab);
    else
      slab_emptied(pool, slab);
  } else if (__builtin_expect(slab->nused + 1 == slab->nblocks, 0)) {
    slab_not_full(pool, slab);
  }
}

/* ------------------------------------------------------------------------ */
/* Spare headers                                                             */

static int grow_headers(weft_pool *pool) {
  struct weft__header_chunk *chunk = malloc(sizeof *chunk);
  if (chunk == NULL)
    return WEFT_ENOMEM;
  chunk->next = pool->chunks;
  pool->chunks = chunk;
  for (int i = 0; i < WEFT__HEADER_CHUNK; i++) {
    chunk->headers[i].next = pool->spare_headers;
    pool->spare_headers = &chunk->headers[i];
  }
  return 0;
}

weft_buf *weft__pool_get_header(weft_pool *pool) {
  /* Slices released remotely return their headers on drain: try that
   * before allocating another chunk. */
  if (pool->spare_headers == NULL)
    weft_pool_drain(pool);
  if (pool->spare_headers == NULL && grow_headers(pool) < 0)
    return NULL;
  weft_buf *buf = pool->spare_headers;
  pool->spare_headers = buf->next;
  memset(buf, 0, sizeof *buf);
  buf->msg.type = &weft_buf_msg_type; /* every weft_buf is a message */
  buf->pool = pool;
  atomic_store_explicit(&buf->refcnt, 1, memory_order_relaxed);
  return buf;
}

static void put_header(weft_pool *pool, weft_buf *buf) {
  buf->next = pool->spare_headers;
  pool->spare_headers = buf;
}

/* ------------------------------------------------------------------------ */
/* Live list (leak detection)                                                */

void weft__pool_link_live(weft_pool *pool, weft_buf *buf, const char *at) {
  buf->flags |= WEFT__BUF_TRACKED;
  __atomic_store_n(&buf->touched_at, at, __ATOMIC_RELAXED);
  buf->live_prev = NULL;
  buf->live_next = pool->live;
  if (pool->live != NULL)
    pool->live->live_prev = buf;
  pool->live = buf;
}

static void untrack(weft_pool *pool, weft_buf *buf) {
  pool->stats.live--;
  if ((buf->flags & WEFT__BUF_TRACKED) == 0)
    return;
  if (buf->live_prev != NULL)
    buf->live_prev->live_next = buf->live_next;
  else
    pool->live = buf->live_next;
  if (buf->live_next != NULL)
    buf->live_next->live_prev = buf->live_prev;
  buf->live_prev = buf->live_next = NULL;
  buf->flags &= (uint16_t)~WEFT__BUF_TRACKED;
}

/* ------------------------------------------------------------------------ */
/* Freeing: on the owner, or via the return stack                            */

/* Returns a buffer's memory and header. Owner thread only. */
static void free_local(weft_pool *pool, weft_buf *buf) {
  untrack(pool, buf);
  switch (buf->flags & WEFT__BUF_KIND_MASK) {
  case WEFT__BUF_POOLED:
    put_block(pool, buf);
    break;
  case WEFT__BUF_UNPOOLED:
    weft__unpooled_free(buf);
    break;
  case WEFT__BUF_WRAPPED:
    if (buf->free_cb != NULL)
      buf->free_cb(buf->base, buf->capacity, buf->free_arg);
    put_header(pool, buf);
    break;
  case WEFT__BUF_SLICE: {
    weft_buf *root = buf->parent;
    const char *at = __atomic_load_n(&buf->touched_at, __ATOMIC_RELAXED);
    put_header(pool, buf);
    /* The slice's reference on the root goes last: the root may be freed
     * here, which is fine now that the slice's header is back. */
    weft_buf_release_at(root, at != NULL ? at : WEFT__HERE);
    break;
  }
  }
}

/* Treiber push. Release ordering publishes everything this thread (and,
 * through the acq_rel decrement, every thread that held a reference) did to
 * the buffer before the owner's acquiring exchange in drain sees it. */
static void push_remote(weft_pool *pool, weft_buf *buf) {
  weft_buf *top = atomic_load_explicit(&pool->returned, memory_order_relaxed);
  do {
    buf->next = top;
  } while (!atomic_compare_exchange_weak_explicit(
      &pool->returned, &top, buf, memory_order_release, memory_order_relaxed));
  /* Only the empty -> non-empty transition wakes the owner: it drains the
   * whole stack at once, so later pushes ride on the same wake-up. */
  if (top == NULL && pool->notify != NULL)
    pool->notify(pool->notify_arg);
}

void weft__pool_free(weft_buf *buf) {
  weft_pool *pool = buf->pool;
  if (weft__pool_on_owner(pool))
    free_local(pool, buf);
  else
    push_remote(pool, buf);
}

size_t weft_pool_drain(weft_pool *pool) {
  if (pool == NULL)
    return 0;
  /* The common case, every loop iteration: nothing came back. A relaxed
   * load suffices because the exchange below does the synchronising. */
  if (atomic_load_explicit(&pool->returned, memory_order_relaxed) == NULL)
    return 0;
  /* Acquire pairs with the release CAS in push_remote. */
  weft_buf *buf =
      atomic_exchange_explicit(&pool->returned, NULL, memory_order_acquire);
  size_t n = 0;
  while (buf != NULL) {
    weft_buf *next = buf->next; /* free_local reuses buf->next */
    free_local(pool, buf);
    buf = next;
    n++;
  }
  pool->stats.remote_frees += n;
  return n;
}
