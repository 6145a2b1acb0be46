/* SPDX-License-Identifier: Apache-2.0 */
/* weft_buf: allocation, reference counting, slices, wrapping and the
 * bounds-checked byte copies. Where the memory comes from and goes back to
 * is pool.c's business (see pool_internal.h). */
#include "loop/pool_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <weft/log.h>

/* Unpooled data starts after the header, rounded so it is as aligned as
 * malloc's own result. */
#define UNPOOLED_DATA_OFFSET                                                   \
  ((sizeof(weft_buf) + _Alignof(max_align_t) - 1) &                            \
   ~(_Alignof(max_align_t) - 1))

/* weft_msg_release() on a buffer: the inline helper in msg.h cannot pass
 * its call site, so leak reports name the helper instead. */
static void buf_msg_release(void *msg) {
  weft_buf_release_at(msg, "weft_msg_release");
}

const weft_msg_type weft_buf_msg_type = {"weft_buf", buf_msg_release};

/* Free lists, slabs and spare headers are owner-only state: a wrong-thread
 * allocation would corrupt them silently, so it fails loudly instead (one
 * thread-local address and a compare, also in release builds). */
static bool on_owner(const weft_pool *pool, const char *what, const char *at) {
  if (weft__pool_on_owner(pool))
    return true;
  weft_log(WEFT_LOG_ERROR, "%s at %s: not on the pool's owner thread", what,
           at != NULL ? at : "(unknown)");
  return false;
}

/* The size class serving `capacity` (<= WEFT_POOL_MAX_CLASS): the smallest
 * c with 64 << 2c >= capacity. Capacity 0 gets the smallest class, so every
 * buffer has real memory behind base. */
static unsigned size_class_of(size_t capacity) {
  if (capacity <= WEFT_POOL_MIN_CLASS)
    return 0;
  /* bits = ceil(log2(capacity)); classes step by two bits from 2^6. */
  unsigned bits =
      64u - (unsigned)__builtin_clzll((unsigned long long)capacity - 1);
  return (bits - 6 + 1) / 2;
}

/* Unpooled buffers of at least this many bytes are mapped on their own:
 * munmap gives their memory back when they are released. From malloc they
 * would not be: glibc raises its mmap threshold to the size of each mapped
 * block freed (up to 32 MiB), so after the first 1 MiB cumulation is freed
 * the next ones come from the heap, which glibc keeps. Measured: two
 * waves of 60 clients each holding a 1 MiB partial SET left a KV server's
 * RSS 61.7 MiB above its base, 0.3 MiB mapped (samples/kv/docs/benchmarks.md).
 */
#define UNPOOLED_MAP_MIN (256 * 1024)

/* Memory for an unpooled buffer of `bytes` (header and data); *mapped says
 * where it came from. */
static void *unpooled_memory(size_t bytes, bool *mapped) {
  *mapped = bytes >= UNPOOLED_MAP_MIN;
  if (!*mapped)
    return malloc(bytes);
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

void weft__unpooled_free(weft_buf *buf) {
  if (buf->flags & WEFT__BUF_MAPPED)
    munmap(buf, UNPOOLED_DATA_OFFSET + buf->capacity);
  else
    free(buf);
}

static weft_buf *alloc_unpooled(weft_pool *pool, size_t capacity) {
  if (capacity > SIZE_MAX - UNPOOLED_DATA_OFFSET)
    return NULL;
  bool mapped;
  weft_buf *buf = unpooled_memory(UNPOOLED_DATA_OFFSET + capacity, &mapped);
  if (buf == NULL)
    return NULL;
  memset(buf, 0, sizeof *buf);
  buf->base = (uint8_t *)buf + UNPOOLED_DATA_OFFSET;
  buf->capacity = capacity;
  buf->msg.type = &weft_buf_msg_type;
  buf->flags = WEFT__BUF_UNPOOLED | (mapped ? WEFT__BUF_MAPPED : 0);
  buf->pool = pool;
  atomic_store_explicit(&buf->refcnt, 1, memory_order_relaxed);
  pool->stats.unpooled++;
  return buf;
}

weft_buf *weft_buf_alloc_at(weft_pool *pool, size_t capacity, const char *at) {
  if (pool == NULL || !on_owner(pool, "weft_buf_alloc", at))
    return NULL;
  weft_buf *buf = capacity > WEFT_POOL_MAX_CLASS
                      ? alloc_unpooled(pool, capacity)
                      : weft__pool_get_block(pool, size_class_of(capacity));
  if (buf == NULL)
    return NULL;
  weft__pool_track(pool, buf, at);
  pool->stats.allocs++;
  return buf;
}

weft_buf *weft_buf_wrap_at(weft_pool *pool, void *base, size_t capacity,
                           size_t len, weft_buf_free_cb free_cb, void *arg,
                           const char *at) {
  if (pool == NULL || (base == NULL && capacity > 0) || len > capacity)
    return NULL;
  if (!on_owner(pool, "weft_buf_wrap", at))
    return NULL;
  weft_buf *buf = weft__pool_get_header(pool);
  if (buf == NULL)
    return NULL;
  buf->base = base;
  buf->capacity = capacity;
  buf->writer_index = len;
  buf->flags = WEFT__BUF_WRAPPED;
  buf->free_cb = free_cb;
  buf->free_arg = arg;
  weft__pool_track(pool, buf, at);
  return buf;
}

weft_buf *weft_buf_retain_at(weft_buf *buf, const char *at) {
  if (buf == NULL)
    return NULL;
  weft__buf_touch(buf, at);
  /* Relaxed: the caller already holds a reference, so the buffer cannot be
   * freed concurrently, and nothing is published by taking another one. */
  uint32_t old =
      atomic_fetch_add_explicit(&buf->refcnt, 1, memory_order_relaxed);
  assert(old > 0 && "retain of a freed buffer");
  (void)old;
  return buf;
}

void weft_buf_release_at(weft_buf *buf, const char *at) {
  if (buf == NULL)
    return;
  /* Touch before the decrement: afterwards another thread may free it. */
  weft__buf_touch(buf, at);
  /* Fast path, the common alloc -> release case: a count of 1 while we
   * hold a reference means ours is the only one, so no other thread can
   * change it and the locked read-modify-write can be skipped. Acquire
   * pairs with the release decrements (a release sequence) of the threads
   * that held it before, as the acq_rel below does. */
  uint32_t old = atomic_load_explicit(&buf->refcnt, memory_order_acquire);
  if (old == 1) {
    atomic_store_explicit(&buf->refcnt, 0, memory_order_relaxed);
  } else {
    /* Release: our accesses happen before whoever frees the buffer.
     * Acquire: the thread that frees sees every other holder's accesses. */
    old = atomic_fetch_sub_explicit(&buf->refcnt, 1, memory_order_acq_rel);
  }
  if (old == 1) {
    weft__pool_free(buf);
    return;
  }
  if (old == 0) {
    /* A double release. The header is on a free list (or reused); its
     * count is reset on the next allocation, so only report it. (Had its
     * slab gone back to the system meanwhile, the load above would already
     * have faulted: a double release is a use after free.) */
    weft_log(WEFT_LOG_ERROR, "weft_buf_release of a freed buffer at %s",
             at != NULL ? at : "(unknown)");
    assert(!"double release");
  }
}

void weft_buf_touch_at(weft_buf *buf, const char *at) {
  if (buf != NULL)
    weft__buf_touch(buf, at);
}

weft_buf *weft_buf_slice_at(weft_buf *buf, size_t offset, size_t len,
                            const char *at) {
  /* Written so that offset + len cannot overflow. */
  if (buf == NULL || offset > buf->capacity || len > buf->capacity - offset)
    return NULL;
  weft_pool *pool = buf->pool;
  if (!on_owner(pool, "weft_buf_slice", at))
    return NULL;
  weft_buf *slice = weft__pool_get_header(pool);
  if (slice == NULL)
    return NULL;
  /* A slice of a slice holds the root, so chains never grow and freeing a
   * slice releases exactly one other buffer. */
  weft_buf *root = buf->parent != NULL ? buf->parent : buf;
  slice->base = buf->base + offset;
  slice->capacity = len;
  slice->writer_index = len;
  slice->flags = WEFT__BUF_SLICE;
  slice->parent = weft_buf_retain_at(root, at);
  weft__pool_track(pool, slice, at);
  return slice;
}

weft_buf *weft_buf_read_slice_at(weft_buf *buf, size_t len, const char *at) {
  if (buf == NULL || weft_buf_readable(buf) < len)
    return NULL;
  weft_buf *slice = weft_buf_slice_at(buf, buf->reader_index, len, at);
  if (slice != NULL)
    buf->reader_index += len;
  return slice;
}

uint64_t weft_buf_mem_key(const weft_buf *buf, int hook) {
  if (buf == NULL || hook < 0 || hook >= WEFT_POOL_MAX_HOOKS)
    return WEFT_MEM_KEY_NONE;
  const weft_buf *root = buf->parent != NULL ? buf->parent : buf;
  /* Unpooled and wrapped buffers have no slab; unregistered hooks hold
   * WEFT_MEM_KEY_NONE in every slab. */
  if (root->slab == NULL)
    return WEFT_MEM_KEY_NONE;
  return ((const weft__slab *)root->slab)->keys[hook];
}

int weft_buf_write_bytes(weft_buf *b, const void *src, size_t n) {
  if (b == NULL || (src == NULL && n > 0))
    return WEFT_EINVAL;
  if (weft_buf_writable(b) < n)
    return WEFT_ENOSPC;
  if (n > 0)
    memcpy(weft_buf_wptr(b), src, n);
  b->writer_index += n;
  return 0;
}

int weft_buf_read_bytes(weft_buf *b, void *dst, size_t n) {
  if (b == NULL || (dst == NULL && n > 0))
    return WEFT_EINVAL;
  if (weft_buf_readable(b) < n)
    return WEFT_ERANGE;
  if (n > 0)
    memcpy(dst, weft_buf_rptr(b), n);
  b->reader_index += n;
  return 0;
}
