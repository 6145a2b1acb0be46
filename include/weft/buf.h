/* SPDX-License-Identifier: Apache-2.0 */
/* weft/buf.h: reference-counted buffers and per-loop pools.
 *
 * A weft_buf is a view over bytes with a read index and a write index
 * (Netty's ByteBuf):
 *
 *      +-------------------+------------------+------------------+
 *      | discardable bytes |  readable bytes  |  writable bytes  |
 *      +-------------------+------------------+------------------+
 *      0      <=     reader_index   <=   writer_index    <=    capacity
 *
 * Memory comes from a weft_pool: page-aligned slabs (mmap, 1 MiB by default)
 * per size class (64 B to 64 KiB), carved into equal blocks; each slab keeps
 * its own free list and counts its free blocks. Requests above the largest
 * class are served by malloc ("unpooled") and freed at their last release.
 * Each loop owns one pool (weft_loop_pool()); standalone pools serve tests
 * and tools.
 *
 * Giving memory back: the most recently emptied slab of each size class is
 * its class's "reserve", kept outside the budget (so a steady stream does
 * not unmap and fault in a slab per message when its working set crosses a
 * slab boundary; at most one slab per class). Any other slab none of whose
 * blocks is in use is "retained" for reuse while the pool's retained bytes
 * stay within its retention budget (weft_pool_options.retain_bytes, default
 * 4 MiB). When a slab becomes entirely free and the retained bytes then
 * exceed the budget, the pool releases empty slabs, least recently emptied
 * first, until they fit:
 * for each, every slab hook's `unreg` runs, then the memory is unmapped
 * (never MADV_DONTNEED: a NIC may have pinned the pages). So after a burst
 * (gigabytes of queued replies) the process's memory comes back down to the
 * budget plus the reserves plus what is still in use. Nothing is released while
 * any block of the slab is in use, and only on the owner thread (a remote
 * release counts once the owner has drained it).
 *
 * Ownership: a buffer starts with one reference, held by whoever allocated it.
 * weft_buf_retain() adds one, weft_buf_release() drops one; at zero the memory
 * returns to its pool. Passing a buffer to a function that "takes" it passes
 * one reference: the callee releases it. A slice shares the parent's memory
 * and holds one reference on the parent until the slice itself is freed.
 *
 * Threads: allocate on the pool's owner thread only. retain, release and the
 * accessors work on any thread that holds a reference (the count is atomic);
 * a release that frees a buffer on another thread pushes it onto the pool's
 * lock-free return stack, and the owner takes it back (when it next runs out,
 * on weft_pool_drain(), or each loop iteration for a loop's pool).
 *
 * Leak detection (Netty's ResourceLeakDetector is the model): when enabled,
 * the pool keeps every live buffer in a list with the source location that
 * last touched it (alloc, retain, release, slice, weft_buf_touch), and
 * weft_pool_free() logs each leaked buffer with that location. It is on by
 * default in debug builds (NDEBUG not defined), and the WEFT_LEAK_DETECT
 * environment variable (0 or 1) overrides the default.
 */
#ifndef WEFT_BUF_H
#define WEFT_BUF_H

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/error.h>
#include <weft/msg.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A loop's pool of buffers in size classes (opaque). */
typedef struct weft_pool weft_pool;

#define WEFT__STR2(x) #x
#define WEFT__STR(x) WEFT__STR2(x)
/** The call site, recorded by leak detection ("file.c:123"). */
#define WEFT__HERE __FILE__ ":" WEFT__STR(__LINE__)

/* The *_at functions behind the macros below take the call site for leak
 * reports; call the macros, which pass it for you. */

/** Called when a wrapped buffer's last reference goes (weft_buf_wrap). */
typedef void (*weft_buf_free_cb)(void *base, size_t capacity, void *arg);

/** A buffer. Fields are public to read, except where marked. */
typedef struct weft_buf {
  weft_msg msg;        /* read-only: a weft_buf is a pipeline message */
  uint8_t *base;       /* read-only: first byte of this buffer's memory */
  size_t capacity;     /* read-only: bytes usable from base */
  size_t reader_index; /* public: next byte to read, <= writer_index */
  size_t writer_index; /* public: next byte to write, <= capacity */
  /* private */
  _Atomic uint32_t refcnt;
  uint16_t flags;
  uint8_t size_class;
  struct weft_buf *parent; /* slices: the buffer whose memory this views */
  void *slab;              /* pooled: the pool's slab the memory is in */
  weft_pool *pool;
  struct weft_buf *next; /* free list / return stack link */
  weft_buf_free_cb free_cb;
  void *free_arg;
  const char *touched_at; /* leak detection: last call site */
  struct weft_buf *live_prev, *live_next;
} weft_buf;

/**
 * The message type of every weft_buf (msg.type), so a buffer can travel a
 * pipeline: weft_msg_is(msg, &weft_buf_msg_type), and weft_msg_release()
 * drops one reference as weft_buf_release() does.
 */
extern const weft_msg_type weft_buf_msg_type;

/** Smallest and largest pooled block sizes in bytes (powers of 4 between). */
#define WEFT_POOL_MIN_CLASS 64
#define WEFT_POOL_MAX_CLASS 65536
/** Number of size classes: 64, 256, 1 Ki, 4 Ki, 16 Ki, 64 Ki bytes. */
#define WEFT_POOL_CLASSES 6
/** Slab hooks a pool can hold (one per transport that registers memory). */
#define WEFT_POOL_MAX_HOOKS 4
/** weft_buf_mem_key() of memory no hook registered. */
#define WEFT_MEM_KEY_NONE UINT64_MAX

/**
 * Default retention budget in bytes (weft_pool_options.retain_bytes): four
 * default slabs. That keeps a loop's ordinary working set (e.g. 64 channels
 * each at the 64 KiB write watermark) without mapping, faulting in and
 * registering slabs with a NIC again each time traffic resumes, while a
 * burst of gigabytes goes back to the system once it is released.
 */
#define WEFT_POOL_RETAIN_BYTES_DEFAULT ((size_t)4 << 20)

/** Options for weft_pool_new(). Initialise with weft_pool_options_init(). */
typedef struct weft_pool_options {
  size_t slab_bytes;   /* bytes per slab (default 1 MiB; at least one block
                          of the largest class) */
  int leak_detect;     /* 1 = on, 0 = off, -1 = default (see above) */
  size_t retain_bytes; /* retention budget, in bytes: slab memory with no
                          block in use that the pool keeps for reuse; empty
                          slabs beyond it are unregistered (slab hooks) and
                          unmapped, least recently emptied first. Each
                          class's reserve (its most recently emptied slab)
                          is kept beyond it. Default
                          WEFT_POOL_RETAIN_BYTES_DEFAULT (4 MiB); 0 keeps no
                          reserve and releases
                          every slab as soon as it is empty (each allocation
                          after an idle moment then maps and registers a
                          slab); SIZE_MAX never releases one. */
} weft_pool_options;

/** Fills `opts` with the defaults documented on each field. */
void weft_pool_options_init(weft_pool_options *opts);

/**
 * Creates a pool owned by the calling thread. `opts` may be NULL. Returns 0
 * and the pool in `*out`, WEFT_EINVAL, or WEFT_ENOMEM. No slab is allocated
 * until the first allocation of its class.
 */
int weft_pool_new(weft_pool **out, const weft_pool_options *opts);

/**
 * Frees a pool and all its slabs (each hook's `unreg` runs first). Buffers
 * still referenced are leaks: each is logged at WARN with its last touch
 * location (when leak detection is on) and the count is returned (0 = clean).
 * Their memory is freed all the same, so a leaked buffer must not be used
 * afterwards. Owner thread only; no other thread may still hold a buffer from
 * this pool.
 */
size_t weft_pool_free(weft_pool *pool);

/**
 * Takes back buffers released on other threads. Returns how many. Owner
 * thread only; loops call it every iteration, so loop code never needs to.
 */
size_t weft_pool_drain(weft_pool *pool);

/**
 * Sets a function called (on the releasing thread) when a remote release
 * makes the return stack non-empty, so the owner can be woken. The loop sets
 * it for its own pool. Owner thread only, before buffers are shared.
 */
void weft_pool_set_remote_notify(weft_pool *pool, void (*notify)(void *arg),
                                 void *arg);

/**
 * Registers memory with a device: `reg` is called for every slab the pool
 * has now and every slab it allocates later, and stores a key (an lkey, a
 * memory handle pointer) that weft_buf_mem_key(buf, hook) returns in O(1) for
 * any buffer in that slab. `unreg` (may be NULL) is called for each slab
 * before its memory goes: when the pool releases an empty slab beyond its
 * retention budget, and when the pool is freed. A failing `reg` (negative weft
 * error) fails the allocation that needed the slab, or this call. Returns the
 * hook id (0 .. WEFT_POOL_MAX_HOOKS-1), WEFT_ENOSPC when all hooks are taken,
 * or the error of `reg`. `arg` must stay valid until the pool is freed
 * (weft_pool_set_slab_hook_fini says when). Owner thread only.
 */
typedef int (*weft_slab_reg_cb)(void *arg, void *base, size_t len,
                                uint64_t *key_out);
typedef void (*weft_slab_unreg_cb)(void *arg, void *base, size_t len,
                                   uint64_t key);
int weft_pool_add_slab_hook(weft_pool *pool, weft_slab_reg_cb reg,
                            weft_slab_unreg_cb unreg, void *arg);

/**
 * Sets `fini(arg)` (arg as given to weft_pool_add_slab_hook) to run once
 * when the pool is freed, after the hook's last `unreg`: from then on the
 * pool no longer uses `arg`. A hook stays installed for the pool's whole
 * life and may register a new slab whenever the pool maps one, even when
 * none is registered at the moment (slabs come and go with the retention
 * budget), so whatever `arg` needs (a device, a protection domain) must live
 * until `fini`, not merely while slabs are registered. NULL clears it.
 * Returns 0, or WEFT_EINVAL for a NULL pool or a hook id that was not
 * returned by weft_pool_add_slab_hook. Owner thread only.
 */
typedef void (*weft_slab_hook_fini_cb)(void *arg);
int weft_pool_set_slab_hook_fini(weft_pool *pool, int hook,
                                 weft_slab_hook_fini_cb fini);

/** Pool counters. Owner thread only. */
typedef struct weft_pool_stats {
  size_t slabs;          /* slabs the pool holds now (in use or retained) */
  size_t slab_bytes;     /* bytes of block memory in those slabs */
  size_t retained_bytes; /* bytes now in slabs with no block in use, kept
                            for reuse; at most weft_pool_options.retain_bytes
                            (a block freed remotely counts once drained);
                            the reserves are not included */
  size_t reserved_bytes; /* bytes now in the classes' reserves: each class's
                            most recently emptied slab while it stays empty,
                            kept beyond retain_bytes (0 when it is 0) */
  size_t slabs_released; /* slabs given back to the system (hooks' unreg,
                            then unmapped) since the pool was created; the
                            pool freeing its slabs at the end is not counted */
  size_t live;           /* buffers (pooled, unpooled, slices) not yet freed */
  size_t allocs;         /* weft_buf_alloc calls that succeeded */
  size_t reused;         /* pooled allocations served from a free list */
  size_t unpooled;       /* allocations above WEFT_POOL_MAX_CLASS (malloc) */
  size_t remote_frees;   /* buffers freed on another thread */
} weft_pool_stats;
/** Copies the pool's counters into `out`. Pool owner thread. */
void weft_pool_stats_get(const weft_pool *pool, weft_pool_stats *out);

/** True when `pool` tracks live buffers for leak reports. Any thread. */
bool weft_pool_leak_detect(const weft_pool *pool);

/**
 * Allocates a buffer of at least `capacity` bytes (capacity is rounded up to
 * the size class; read `buf->capacity`), reader and writer index 0, one
 * reference. Returns NULL when memory (or a slab hook) fails. Pool owner
 * thread only. The memory is not zeroed.
 */
#define weft_buf_alloc(pool, capacity)                                         \
  weft_buf_alloc_at((pool), (capacity), WEFT__HERE)
weft_buf *weft_buf_alloc_at(weft_pool *pool, size_t capacity, const char *at);

/**
 * Wraps memory the pool does not own (a provided receive buffer, an SRQ
 * slot) in a weft_buf with one reference; when the last reference goes,
 * `free_cb(base, capacity, arg)` runs on the pool's owner thread (a remote
 * release is routed there). reader_index 0, writer_index `len`. Returns NULL
 * on ENOMEM. Pool owner thread only.
 */
#define weft_buf_wrap(pool, base, capacity, len, free_cb, arg)                 \
  weft_buf_wrap_at((pool), (base), (capacity), (len), (free_cb), (arg),        \
                   WEFT__HERE)
weft_buf *weft_buf_wrap_at(weft_pool *pool, void *base, size_t capacity,
                           size_t len, weft_buf_free_cb free_cb, void *arg,
                           const char *at);

/** Adds a reference and returns `buf`. Any thread holding a reference. */
#define weft_buf_retain(buf) weft_buf_retain_at((buf), WEFT__HERE)
weft_buf *weft_buf_retain_at(weft_buf *buf, const char *at);

/**
 * Drops a reference; the last one frees the buffer (and drops the slice's
 * reference on its parent). NULL is ignored. Any thread holding a reference.
 */
#define weft_buf_release(buf) weft_buf_release_at((buf), WEFT__HERE)
void weft_buf_release_at(weft_buf *buf, const char *at);

/**
 * A new buffer viewing bytes [offset, offset+len) of `buf`'s memory (offsets
 * from base): capacity `len`, reader 0, writer `len`, one reference of its
 * own, and it holds a reference on the root buffer. Returns NULL if the range
 * is outside `buf` or on ENOMEM. Pool owner thread only.
 */
#define weft_buf_slice(buf, offset, len)                                       \
  weft_buf_slice_at((buf), (offset), (len), WEFT__HERE)
weft_buf *weft_buf_slice_at(weft_buf *buf, size_t offset, size_t len,
                            const char *at);

/**
 * Slices the next `len` readable bytes and advances the reader index past
 * them (Netty's readRetainedSlice). NULL if fewer than `len` are readable or
 * on ENOMEM (the index is then unchanged). Pool owner thread only.
 */
#define weft_buf_read_slice(buf, len)                                          \
  weft_buf_read_slice_at((buf), (len), WEFT__HERE)
weft_buf *weft_buf_read_slice_at(weft_buf *buf, size_t len, const char *at);

/** Records the call site as the last touch (leak reports). Any thread. */
#define weft_buf_touch(buf) weft_buf_touch_at((buf), WEFT__HERE)
void weft_buf_touch_at(weft_buf *buf, const char *at);

/** The current reference count (for tests and assertions). */
static inline uint32_t weft_buf_refcnt(const weft_buf *buf) {
  return atomic_load_explicit(&buf->refcnt, memory_order_acquire);
}

/**
 * The key hook `hook` stored for the slab holding `buf`'s memory (slices
 * resolve to their root), or WEFT_MEM_KEY_NONE for unpooled or wrapped
 * memory. O(1). Any thread holding a reference.
 */
uint64_t weft_buf_mem_key(const weft_buf *buf, int hook);

/** Bytes between reader and writer index. */
static inline size_t weft_buf_readable(const weft_buf *b) {
  return b->writer_index - b->reader_index;
}
/** Bytes between writer index and capacity. */
static inline size_t weft_buf_writable(const weft_buf *b) {
  return b->capacity - b->writer_index;
}
/** Pointer to the first readable byte. */
static inline uint8_t *weft_buf_rptr(const weft_buf *b) {
  return b->base + b->reader_index;
}
/** Pointer to the first writable byte. */
static inline uint8_t *weft_buf_wptr(const weft_buf *b) {
  return b->base + b->writer_index;
}
/** Resets both indices to 0 (the bytes stay). */
static inline void weft_buf_clear(weft_buf *b) {
  b->reader_index = b->writer_index = 0;
}

/**
 * Appends `n` bytes from `src`. Returns 0, or WEFT_ENOSPC (nothing written)
 * if fewer than `n` bytes are writable.
 */
int weft_buf_write_bytes(weft_buf *b, const void *src, size_t n);

/**
 * Copies `n` readable bytes to `dst` and advances the reader index. Returns
 * 0, or WEFT_ERANGE (nothing read) if fewer than `n` are readable.
 */
int weft_buf_read_bytes(weft_buf *b, void *dst, size_t n);

/* Typed big- and little-endian access (network order is big-endian).
 *
 *   weft_buf_get_<T><E>(b, index)       value at absolute index (from base)
 *   weft_buf_set_<T><E>(b, index, v)    store at absolute index
 *   weft_buf_read_<T><E>(b)             value at reader_index, then advance
 *   weft_buf_write_<T><E>(b, v)         store at writer_index, then advance
 *
 * T is u16, u32 or u64 with E = be or le, and u8 without E. get/set/read
 * require the bytes to be inside the buffer (capacity for get/set, readable
 * bytes for read): the caller checks, an assert guards debug builds. write
 * returns 0, or WEFT_ENOSPC (nothing written) when it does not fit. All are
 * inline and use memcpy, so any alignment is fine.
 */
#define WEFT__BUF_ACCESSORS(T, BITS, SFX, TO, FROM)                            \
  static inline T weft_buf_get_##SFX(const weft_buf *b, size_t i) {            \
    assert(i + sizeof(T) <= b->capacity);                                      \
    T v;                                                                       \
    __builtin_memcpy(&v, b->base + i, sizeof v);                               \
    return FROM(v);                                                            \
  }                                                                            \
  static inline void weft_buf_set_##SFX(weft_buf *b, size_t i, T v) {          \
    assert(i + sizeof(T) <= b->capacity);                                      \
    v = TO(v);                                                                 \
    __builtin_memcpy(b->base + i, &v, sizeof v);                               \
  }                                                                            \
  static inline T weft_buf_read_##SFX(weft_buf *b) {                           \
    assert(weft_buf_readable(b) >= sizeof(T));                                 \
    T v = weft_buf_get_##SFX(b, b->reader_index);                              \
    b->reader_index += sizeof(T);                                              \
    return v;                                                                  \
  }                                                                            \
  static inline int weft_buf_write_##SFX(weft_buf *b, T v) {                   \
    if (weft_buf_writable(b) < sizeof(T))                                      \
      return WEFT_ENOSPC;                                                      \
    weft_buf_set_##SFX(b, b->writer_index, v);                                 \
    b->writer_index += sizeof(T);                                              \
    return 0;                                                                  \
  }

#define WEFT__ID(v) (v)
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WEFT__BE16(v) __builtin_bswap16(v)
#define WEFT__BE32(v) __builtin_bswap32(v)
#define WEFT__BE64(v) __builtin_bswap64(v)
#define WEFT__LE16(v) (v)
#define WEFT__LE32(v) (v)
#define WEFT__LE64(v) (v)
#else
#define WEFT__BE16(v) (v)
#define WEFT__BE32(v) (v)
#define WEFT__BE64(v) (v)
#define WEFT__LE16(v) __builtin_bswap16(v)
#define WEFT__LE32(v) __builtin_bswap32(v)
#define WEFT__LE64(v) __builtin_bswap64(v)
#endif

WEFT__BUF_ACCESSORS(uint8_t, 8, u8, WEFT__ID, WEFT__ID)
WEFT__BUF_ACCESSORS(uint16_t, 16, u16be, WEFT__BE16, WEFT__BE16)
WEFT__BUF_ACCESSORS(uint32_t, 32, u32be, WEFT__BE32, WEFT__BE32)
WEFT__BUF_ACCESSORS(uint64_t, 64, u64be, WEFT__BE64, WEFT__BE64)
WEFT__BUF_ACCESSORS(uint16_t, 16, u16le, WEFT__LE16, WEFT__LE16)
WEFT__BUF_ACCESSORS(uint32_t, 32, u32le, WEFT__LE32, WEFT__LE32)
WEFT__BUF_ACCESSORS(uint64_t, 64, u64le, WEFT__LE64, WEFT__LE64)

#ifdef __cplusplus
}
#endif
#endif /* WEFT_BUF_H */
