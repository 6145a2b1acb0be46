/* Per-loop buffer pools: size-class slabs, free lists, the remote return
 * stack, slab hooks for memory registration, and the leak report.
 *
 * Allocation order for a pooled class: the class's free list (warm memory,
 * counted as reused), then the return stack if the free list is empty (one
 * atomic load when nothing came back), then the next never-used block of the
 * class's newest slab, and only then a new slab.
 */
#include "loop/pool_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/log.h>

#define DEFAULT_SLAB_BYTES ((size_t)1 << 20)

/* ------------------------------------------------------------------------ */
/* Options and configuration                                                 */

void weft_pool_options_init(weft_pool_options *opts) {
  if (opts == NULL)
    return;
  opts->slab_bytes = DEFAULT_SLAB_BYTES;
  opts->leak_detect = -1;
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
  pool->owner = pthread_self();
  pool->slab_bytes = opts->slab_bytes;
  pool->leak_detect =
      opts->leak_detect == -1 ? leak_detect_default() : opts->leak_detect == 1;
  atomic_init(&pool->returned, NULL);
  *out = pool;
  return 0;
}

static void free_slabs(weft_pool *pool) {
  weft__slab *slab = pool->slabs;
  while (slab != NULL) {
    weft__slab *next = slab->next;
    for (int h = 0; h < pool->nhooks; h++) {
      const struct weft__slab_hook *hook = &pool->hooks[h];
      if (hook->unreg != NULL)
        hook->unreg(hook->arg, slab->data, slab->data_bytes, slab->keys[h]);
    }
    free(slab->data);
    free(slab);
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
      free(buf);
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
  pool->hooks[h] = (struct weft__slab_hook){reg, unreg, arg};
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

static weft__slab *slab_new(weft_pool *pool, unsigned cls) {
  size_t block = WEFT__CLASS_BYTES(cls);
  size_t nblocks = pool->slab_bytes / block;
  weft__slab *slab = malloc(sizeof *slab + nblocks * sizeof(weft_buf));
  if (slab == NULL)
    goto failed_slab_alloc;
  /* Page alignment: NIC registration (ibv_reg_mr, ucp_mem_map) pins whole
   * pages, and aligned slabs never share a page with other data. */
  void *data;
  if (posix_memalign(&data, page_size(), nblocks * block) != 0)
    goto failed_data_alloc;
  slab->data = data;
  slab->data_bytes = nblocks * block;
  slab->nblocks = nblocks;
  slab->carved = 0;
  slab->size_class = (uint8_t)cls;
  for (int h = 0; h < WEFT_POOL_MAX_HOOKS; h++)
    slab->keys[h] = WEFT_MEM_KEY_NONE;
  if (register_slab(pool, slab) < 0)
    goto failed_register;
  slab->next = pool->slabs;
  pool->slabs = slab;
  pool->stats.slabs++;
  pool->stats.slab_bytes += slab->data_bytes;
  return slab;

failed_register:
  free(data);
failed_data_alloc:
  free(slab);
failed_slab_alloc:
  return NULL;
}

/* The next never-used block of the class, from a new slab if needed. */
static weft_buf *carve_block(weft_pool *pool, unsigned cls) {
  weft__slab *slab = pool->current[cls];
  if (slab == NULL || slab->carved == slab->nblocks) {
    slab = slab_new(pool, cls);
    if (slab == NULL)
      return NULL;
    pool->current[cls] = slab;
  }
  size_t i = slab->carved++;
  weft_buf *buf = &slab->headers[i];
  memset(buf, 0, sizeof *buf);
  buf->msg.type = &weft_buf_msg_type;
  buf->base = slab->data + i * WEFT__CLASS_BYTES(cls);
  buf->capacity = WEFT__CLASS_BYTES(cls);
  buf->flags = WEFT__BUF_POOLED;
  buf->size_class = (uint8_t)cls;
  buf->slab = slab;
  buf->pool = pool;
  return buf;
}

static weft_buf *pop_free(weft_pool *pool, unsigned cls) {
  weft_buf *buf = pool->free_list[cls];
  if (buf != NULL) {
    pool->free_list[cls] = buf->next;
    pool->stats.reused++;
  }
  return buf;
}

weft_buf *weft__pool_get_block(weft_pool *pool, unsigned cls) {
  weft_buf *buf = pop_free(pool, cls);
  if (buf == NULL && weft_pool_drain(pool) > 0)
    buf = pop_free(pool, cls);
  if (buf == NULL)
    buf = carve_block(pool, cls);
  if (buf == NULL)
    return NULL;
  /* msg, base, capacity, size_class, slab and pool are fixed for the
   * block: set when it was carved. */
  buf->reader_index = 0;
  buf->writer_index = 0;
  buf->next = NULL;
  buf->flags = WEFT__BUF_POOLED;
  atomic_store_explicit(&buf->refcnt, 1, memory_order_relaxed);
  return buf;
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

void weft__pool_track(weft_pool *pool, weft_buf *buf, const char *at) {
  pool->stats.live++;
  /* Unpooled buffers are always listed so destroy can free leaked ones. */
  bool unpooled = (buf->flags & WEFT__BUF_KIND_MASK) == WEFT__BUF_UNPOOLED;
  if (!pool->leak_detect && !unpooled)
    return;
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
    buf->next = pool->free_list[buf->size_class];
    pool->free_list[buf->size_class] = buf;
    break;
  case WEFT__BUF_UNPOOLED:
    free(buf);
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
