/* SPDX-License-Identifier: Apache-2.0 */
/* weft_pool: size classes, reuse, unpooled, slab hooks, cross-thread
 * release, giving slabs back (the retention budget), leak reports. */
#include "harness.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <weft/buf.h>
#include <weft/log.h>

static weft_pool *new_pool_opts(size_t slab_bytes, int leak_detect) {
  weft_pool_options opts;
  weft_pool_options_init(&opts);
  if (slab_bytes != 0)
    opts.slab_bytes = slab_bytes;
  opts.leak_detect = leak_detect;
  weft_pool *pool = NULL;
  ck_assert_int_eq(weft_pool_new(&pool, &opts), 0);
  ck_assert_ptr_nonnull(pool);
  return pool;
}

static weft_pool *new_pool(void) { return new_pool_opts(0, 1); }

/* A pool with leak detection on, `slab_bytes` per slab (0 = default) and a
 * retention budget of `retain_bytes`. */
static weft_pool *new_pool_retain(size_t slab_bytes, size_t retain_bytes) {
  weft_pool_options opts;
  weft_pool_options_init(&opts);
  if (slab_bytes != 0)
    opts.slab_bytes = slab_bytes;
  opts.leak_detect = 1;
  opts.retain_bytes = retain_bytes;
  weft_pool *pool = NULL;
  ck_assert_int_eq(weft_pool_new(&pool, &opts), 0);
  return pool;
}

static weft_pool_stats stats_of(const weft_pool *pool) {
  weft_pool_stats st;
  weft_pool_stats_get(pool, &st);
  return st;
}

/* ------------------------------------------------------------------------ */
/* Creation and arguments                                                    */

START_TEST(pool_new_bad_options_einval) {
  weft_pool_options opts;
  weft_pool_options_init(&opts);
  ck_assert_uint_eq(opts.slab_bytes, 1u << 20);
  ck_assert_int_eq(opts.leak_detect, -1);
  ck_assert_uint_eq(opts.retain_bytes, 4u << 20);
  ck_assert_uint_eq(WEFT_POOL_RETAIN_BYTES_DEFAULT, 4u << 20);
  weft_pool *pool = (weft_pool *)&opts; /* must be overwritten with NULL */
  opts.slab_bytes = WEFT_POOL_MAX_CLASS - 1;
  ck_assert_int_eq(weft_pool_new(&pool, &opts), WEFT_EINVAL);
  ck_assert_ptr_null(pool);
  weft_pool_options_init(&opts);
  opts.leak_detect = 2;
  ck_assert_int_eq(weft_pool_new(&pool, &opts), WEFT_EINVAL);
  ck_assert_int_eq(weft_pool_new(NULL, NULL), WEFT_EINVAL);
  /* NULL options are the defaults. */
  ck_assert_int_eq(weft_pool_new(&pool, NULL), 0);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_null_arguments_harmless) {
  ck_assert_uint_eq(weft_pool_free(NULL), 0);
  ck_assert_uint_eq(weft_pool_drain(NULL), 0);
  ck_assert_ptr_null(weft_buf_alloc(NULL, 64));
  ck_assert(!weft_pool_leak_detect(NULL));
  ck_assert_int_eq(weft_pool_add_slab_hook(NULL, NULL, NULL, NULL),
                   WEFT_EINVAL);
  ck_assert_uint_eq(weft_buf_mem_key(NULL, 0), WEFT_MEM_KEY_NONE);
  weft_pool_set_remote_notify(NULL, NULL, NULL);
  weft_pool_stats st;
  weft_pool_stats_get(NULL, &st);
  ck_assert_uint_eq(st.live, 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Size classes, reuse, unpooled                                             */

START_TEST(pool_size_class_rounding) {
  static const size_t cases[][2] = {
      {0, 64},        {1, 64},       {64, 64},       {65, 256},
      {256, 256},     {257, 1024},   {1024, 1024},   {1025, 4096},
      {4096, 4096},   {4097, 16384}, {16384, 16384}, {16385, 65536},
      {65536, 65536},
  };
  weft_pool *pool = new_pool();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    weft_buf *b = weft_buf_alloc(pool, cases[i][0]);
    ck_assert_ptr_nonnull(b);
    ck_assert_msg(b->capacity == cases[i][1], "alloc(%zu): capacity %zu",
                  cases[i][0], b->capacity);
    /* The whole block is usable (ASan checks the last byte). */
    b->base[b->capacity - 1] = 0xFF;
    weft_buf_release(b);
  }
  /* One slab per class, each empty once released: each is its class's
   * reserve (the most recently emptied slab of the class), kept outside the
   * budget, so nothing went back. */
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs, 6);
  ck_assert_uint_eq(st.slabs_released, 0);
  ck_assert_uint_eq(st.retained_bytes, 0);
  ck_assert_uint_eq(st.reserved_bytes, 6u << 20);
  ck_assert_uint_eq(st.unpooled, 0);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_reuse_same_class_same_memory) {
  weft_pool *pool = new_pool();
  weft_buf *a = weft_buf_alloc(pool, 1000);
  ck_assert_ptr_nonnull(a);
  uint8_t *mem = a->base;
  ck_assert_uint_eq(stats_of(pool).reused, 0);
  weft_buf_release(a);
  weft_buf *b = weft_buf_alloc(pool, 700); /* same 1 KiB class */
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_eq(b->base, mem);
  ck_assert_uint_eq(b->capacity, 1024);
  ck_assert_uint_eq(weft_buf_refcnt(b), 1);
  ck_assert_uint_eq(b->writer_index, 0);
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.reused, 1);
  ck_assert_uint_eq(st.allocs, 2);
  ck_assert_uint_eq(st.slabs, 1);
  ck_assert_uint_eq(st.slab_bytes, 1u << 20);
  /* Another class does not take the 1 KiB block. */
  weft_buf *c = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(c);
  ck_assert_uint_eq(stats_of(pool).reused, 1);
  weft_buf_release(b);
  weft_buf_release(c);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_slab_grows_when_full) {
  /* 64 KiB slabs hold exactly one block of the largest class. */
  weft_pool *pool = new_pool_opts(WEFT_POOL_MAX_CLASS, 1);
  ck_assert_uint_eq(stats_of(pool).slabs, 0); /* nothing until needed */
  weft_buf *a = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS);
  ck_assert_ptr_nonnull(a);
  ck_assert_uint_eq(stats_of(pool).slabs, 1);
  weft_buf *b = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS);
  ck_assert_ptr_nonnull(b);
  ck_assert_ptr_ne(a->base, b->base);
  ck_assert_uint_eq(stats_of(pool).slabs, 2);
  ck_assert_uint_eq(stats_of(pool).slab_bytes, 2 * WEFT_POOL_MAX_CLASS);
  weft_buf_release(a);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_unpooled_above_max_class) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS + 1);
  ck_assert_ptr_nonnull(b);
  ck_assert_uint_eq(b->capacity, WEFT_POOL_MAX_CLASS + 1);
  b->base[0] = 1;
  b->base[b->capacity - 1] = 2;
  ck_assert_uint_eq(weft_buf_mem_key(b, 0), WEFT_MEM_KEY_NONE);
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.unpooled, 1);
  ck_assert_uint_eq(st.slabs, 0);
  ck_assert_uint_eq(st.live, 1);
  weft_buf_release(b);
  ck_assert_uint_eq(stats_of(pool).live, 0);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Slab hooks                                                                */

#define MAX_REGS 16

struct hook_log {
  int regs, unregs;
  int fail_from; /* reg calls with index >= this fail (-1: never) */
  uint64_t key_base;
  void *bases[MAX_REGS];
  size_t lens[MAX_REGS];
  uint64_t unreg_keys[MAX_REGS];
};

static int hook_reg(void *arg, void *base, size_t len, uint64_t *key_out) {
  struct hook_log *h = arg;
  if (h->fail_from >= 0 && h->regs >= h->fail_from)
    return WEFT_ENODEV;
  ck_assert_int_lt(h->regs, MAX_REGS);
  h->bases[h->regs] = base;
  h->lens[h->regs] = len;
  *key_out = h->key_base + (uint64_t)h->regs;
  h->regs++;
  return 0;
}

static void hook_unreg(void *arg, void *base, size_t len, uint64_t key) {
  struct hook_log *h = arg;
  (void)base;
  (void)len;
  ck_assert_int_lt(h->unregs, MAX_REGS);
  h->unreg_keys[h->unregs++] = key;
}

START_TEST(pool_slab_hook_existing_and_new_slabs) {
  weft_pool *pool = new_pool();
  weft_buf *small = weft_buf_alloc(pool, 64); /* slab before the hook */
  ck_assert_ptr_nonnull(small);
  struct hook_log h = {.fail_from = -1, .key_base = 1000};
  ck_assert_int_eq(weft_pool_add_slab_hook(pool, hook_reg, hook_unreg, &h), 0);
  ck_assert_int_eq(h.regs, 1); /* the existing slab, at once */
  ck_assert_uint_eq((uintptr_t)h.bases[0] % 4096, 0);
  ck_assert_uint_eq(h.lens[0], 1u << 20);
  ck_assert_uint_eq(weft_buf_mem_key(small, 0), 1000);

  weft_buf *big = weft_buf_alloc(pool, 16384); /* a new slab */
  ck_assert_ptr_nonnull(big);
  ck_assert_int_eq(h.regs, 2);
  ck_assert_uint_eq(weft_buf_mem_key(big, 0), 1001);
  ck_assert(big->base >= (uint8_t *)h.bases[1] &&
            big->base + big->capacity <= (uint8_t *)h.bases[1] + h.lens[1]);
  ck_assert_uint_eq(weft_buf_mem_key(big, 1), WEFT_MEM_KEY_NONE); /* no hook */
  ck_assert_uint_eq(weft_buf_mem_key(big, -1), WEFT_MEM_KEY_NONE);
  ck_assert_uint_eq(weft_buf_mem_key(big, WEFT_POOL_MAX_HOOKS),
                    WEFT_MEM_KEY_NONE);

  /* Slices resolve to the root's slab, also through a slice of a slice. */
  weft_buf *s1 = weft_buf_slice(big, 100, 1000);
  weft_buf *s2 = weft_buf_slice(s1, 10, 10);
  ck_assert_ptr_nonnull(s2);
  ck_assert_uint_eq(weft_buf_mem_key(s2, 0), 1001);

  /* Memory the pool does not own has no key. */
  weft_buf *unpooled = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS * 2);
  uint8_t ext[32];
  weft_buf *wrapped = weft_buf_wrap(pool, ext, sizeof ext, 0, NULL, NULL);
  ck_assert_ptr_nonnull(unpooled);
  ck_assert_ptr_nonnull(wrapped);
  ck_assert_uint_eq(weft_buf_mem_key(unpooled, 0), WEFT_MEM_KEY_NONE);
  ck_assert_uint_eq(weft_buf_mem_key(wrapped, 0), WEFT_MEM_KEY_NONE);
  ck_assert_int_eq(h.regs, 2);

  weft_buf_release(s1);
  weft_buf_release(s2);
  weft_buf_release(small);
  weft_buf_release(big);
  weft_buf_release(unpooled);
  weft_buf_release(wrapped);
  ck_assert_int_eq(h.unregs, 0);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
  ck_assert_int_eq(h.unregs, 2);
  ck_assert(h.unreg_keys[0] + h.unreg_keys[1] == 1000 + 1001);
}
END_TEST

START_TEST(pool_slab_hook_failure_fails_alloc) {
  weft_pool *pool = new_pool();
  struct hook_log ok = {.fail_from = -1, .key_base = 1};
  struct hook_log bad = {.fail_from = 1, .key_base = 100};
  ck_assert_int_eq(weft_pool_add_slab_hook(pool, hook_reg, hook_unreg, &ok), 0);
  ck_assert_int_eq(weft_pool_add_slab_hook(pool, hook_reg, hook_unreg, &bad),
                   1);
  weft_buf *a = weft_buf_alloc(pool, 64); /* bad's first reg succeeds */
  ck_assert_ptr_nonnull(a);
  ck_assert_uint_eq(weft_buf_mem_key(a, 1), 100);

  /* A new slab: ok registers it, bad fails, so ok's registration is undone
   * and the allocation fails without a slab left behind. */
  ck_assert_ptr_null(weft_buf_alloc(pool, 4096));
  ck_assert_int_eq(ok.regs, 2);
  ck_assert_int_eq(ok.unregs, 1);
  ck_assert_uint_eq(ok.unreg_keys[0], 2);
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs, 1);
  ck_assert_uint_eq(st.live, 1);
  ck_assert_uint_eq(st.allocs, 1);

  /* The existing slab still serves its class. */
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  weft_buf_release(a);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
  ck_assert_int_eq(ok.unregs, 2); /* the remaining slab */
  ck_assert_int_eq(bad.unregs, 1);
}
END_TEST

START_TEST(pool_slab_hook_add_fails_cleanly) {
  weft_pool *pool = new_pool();
  weft_buf *a = weft_buf_alloc(pool, 64);
  weft_buf *b = weft_buf_alloc(pool, 256);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  /* Registers the first slab, fails on the second: the first is undone and
   * the hook is not added. */
  struct hook_log bad = {.fail_from = 1, .key_base = 7};
  ck_assert_int_eq(weft_pool_add_slab_hook(pool, hook_reg, hook_unreg, &bad),
                   WEFT_ENODEV);
  ck_assert_int_eq(bad.regs, 1);
  ck_assert_int_eq(bad.unregs, 1);
  ck_assert_uint_eq(weft_buf_mem_key(a, 0), WEFT_MEM_KEY_NONE);
  ck_assert_uint_eq(weft_buf_mem_key(b, 0), WEFT_MEM_KEY_NONE);
  /* All hooks: the fifth is refused. */
  struct hook_log ok[WEFT_POOL_MAX_HOOKS] = {0};
  for (int i = 0; i < WEFT_POOL_MAX_HOOKS; i++) {
    ok[i].fail_from = -1;
    ck_assert_int_eq(weft_pool_add_slab_hook(pool, hook_reg, NULL, &ok[i]), i);
  }
  ck_assert_int_eq(weft_pool_add_slab_hook(pool, hook_reg, NULL, &bad),
                   WEFT_ENOSPC);
  weft_buf_release(a);
  weft_buf_release(b);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
  ck_assert_int_eq(bad.unregs, 1); /* not called again at destroy */
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Cross-thread release                                                      */

static _Atomic int notify_calls;

/* Plain int reads keep Check's failure messages readable. */
static int notifies(void) { return atomic_load(&notify_calls); }

static void count_notify(void *arg) {
  ck_assert_ptr_eq(arg, &notify_calls);
  atomic_fetch_add(&notify_calls, 1);
}

struct release_job {
  weft_buf **bufs;
  size_t n;
  size_t start; /* index to begin at, so threads release in other orders */
  uint64_t sum; /* of the bytes read before each release */
};

/* Reads each buffer (header and memory) before releasing it, as a consumer
 * would: the owner's later reuse of the memory must not race with that. */
static void *release_all(void *arg) {
  struct release_job *job = arg;
  for (size_t i = 0; i < job->n; i++) {
    weft_buf *b = job->bufs[(job->start + i) % job->n];
    if (b->capacity >= 4)
      job->sum += weft_buf_get_u32be(b, 0);
    weft_buf_release(b);
  }
  return NULL;
}

static void release_on_thread(weft_buf **bufs, size_t n) {
  struct release_job job = {bufs, n, 0, 0};
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, release_all, &job), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
}

START_TEST(pool_remote_release_notify_and_drain) {
  weft_pool *pool = new_pool();
  atomic_store(&notify_calls, 0);
  weft_pool_set_remote_notify(pool, count_notify, &notify_calls);
  enum { N = 8 };
  weft_buf *bufs[N];
  uint8_t *mems[N];
  for (int i = 0; i < N; i++) {
    bufs[i] = weft_buf_alloc(pool, 256);
    ck_assert_ptr_nonnull(bufs[i]);
    mems[i] = bufs[i]->base;
  }
  release_on_thread(bufs, N);
  /* One empty -> non-empty transition, however many pushes. */
  ck_assert_int_eq(notifies(), 1);
  ck_assert_uint_eq(stats_of(pool).live, N); /* until drained */
  ck_assert_uint_eq(weft_pool_drain(pool), N);
  ck_assert_uint_eq(weft_pool_drain(pool), 0);
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.live, 0);
  ck_assert_uint_eq(st.remote_frees, N);

  /* Drained blocks are reused. */
  weft_buf *again = weft_buf_alloc(pool, 256);
  ck_assert_ptr_nonnull(again);
  bool found = false;
  for (int i = 0; i < N; i++)
    found |= again->base == mems[i];
  ck_assert(found);
  ck_assert_uint_eq(stats_of(pool).reused, 1);

  /* The stack is empty again, so the next remote release notifies again. */
  release_on_thread(&again, 1);
  ck_assert_int_eq(notifies(), 2);
  ck_assert_uint_eq(weft_pool_drain(pool), 1);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_remote_release_drained_by_alloc) {
  /* An empty free list drains the return stack before carving new memory. */
  weft_pool *pool = new_pool_opts(WEFT_POOL_MAX_CLASS, 1);
  weft_buf *b = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS);
  ck_assert_ptr_nonnull(b);
  uint8_t *mem = b->base;
  release_on_thread(&b, 1);
  weft_buf *again = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS);
  ck_assert_ptr_nonnull(again);
  ck_assert_ptr_eq(again->base, mem);
  ck_assert_uint_eq(stats_of(pool).slabs, 1);
  ck_assert_uint_eq(stats_of(pool).remote_frees, 1);
  weft_buf_release(again);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

static pthread_t wrap_owner;
static _Atomic int wrap_frees_on_owner;

static void wrap_free_on_owner(void *base, size_t capacity, void *arg) {
  (void)base;
  (void)capacity;
  (void)arg;
  if (pthread_equal(pthread_self(), wrap_owner))
    atomic_fetch_add(&wrap_frees_on_owner, 1);
}

static int owner_frees(void) { return atomic_load(&wrap_frees_on_owner); }

START_TEST(pool_remote_release_slice_and_wrap_on_owner) {
  weft_pool *pool = new_pool();
  wrap_owner = pthread_self();
  atomic_store(&wrap_frees_on_owner, 0);
  uint8_t ext[64];
  weft_buf *w =
      weft_buf_wrap(pool, ext, sizeof ext, 64, wrap_free_on_owner, NULL);
  ck_assert_ptr_nonnull(w);
  weft_buf *root = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(root);
  weft_buf *s = weft_buf_slice(root, 0, 10);
  ck_assert_ptr_nonnull(s);
  weft_buf_release(root); /* only the slice holds it now */
  weft_buf *remote[2] = {w, s};
  release_on_thread(remote, 2);
  ck_assert_int_eq(owner_frees(), 0); /* not yet */
  ck_assert_uint_eq(stats_of(pool).live, 3);
  ck_assert_uint_eq(weft_pool_drain(pool), 2);
  ck_assert_int_eq(owner_frees(), 1);
  ck_assert_uint_eq(stats_of(pool).live, 0); /* the slice freed its root */
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

enum { THREADS = 4, PER_THREAD_BUFS = 2000 };

static void overwrite_reused(weft_pool *pool, size_t size) {
  weft_buf *b = weft_buf_alloc(pool, size);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(weft_buf_write_u32be(b, 0xFFFFFFFFu), 0);
  weft_buf *s = weft_buf_slice(b, 0, 4);
  ck_assert_ptr_nonnull(s);
  weft_buf_release(s);
  weft_buf_release(b);
}

START_TEST(pool_remote_release_many_threads) {
  weft_pool *pool = new_pool();
  atomic_store(&notify_calls, 0);
  weft_pool_set_remote_notify(pool, count_notify, &notify_calls);
  static weft_buf *bufs[PER_THREAD_BUFS];
  /* Every buffer is released once by every thread, so each one's last
   * reference races between threads; sizes cover several classes and an
   * unpooled one, and a slice of each so roots are released at drain. */
  static const size_t sizes[] = {64, 200, 1000, 4000, 70000};
  for (size_t i = 0; i < PER_THREAD_BUFS; i++) {
    weft_buf *root = weft_buf_alloc(pool, sizes[i % 5]);
    ck_assert_ptr_nonnull(root);
    weft_buf_write_u32be(root, (uint32_t)i);
    bufs[i] = weft_buf_slice(root, 0, 4);
    ck_assert_ptr_nonnull(bufs[i]);
    weft_buf_release(root);
    for (int t = 1; t < THREADS; t++)
      weft_buf_retain(bufs[i]);
  }
  pthread_t tids[THREADS];
  struct release_job jobs[THREADS];
  for (int t = 0; t < THREADS; t++) {
    jobs[t] = (struct release_job){bufs, PER_THREAD_BUFS,
                                   (size_t)t * PER_THREAD_BUFS / THREADS, 0};
    ck_assert_int_eq(pthread_create(&tids[t], NULL, release_all, &jobs[t]), 0);
  }
  /* The owner drains while the threads push, as a loop would, and reuses
   * the memory (and slice headers) it got back at once: under TSan, a
   * missing happens-before from any releasing thread to the owner shows as
   * a race on the block or the header. */
  /* Allocations drain too when a free list runs dry, so the count to wait
   * for is the pool's, not the sum of what weft_pool_drain returned. */
  while (stats_of(pool).remote_frees < PER_THREAD_BUFS) {
    size_t n = weft_pool_drain(pool);
    for (size_t i = 0; n > 0 && i < 5; i++)
      overwrite_reused(pool, sizes[i]);
  }
  for (int t = 0; t < THREADS; t++)
    ck_assert_int_eq(pthread_join(tids[t], NULL), 0);
  /* Every thread read every value intact: no block was reused early. */
  for (int t = 0; t < THREADS; t++)
    ck_assert_uint_eq(jobs[t].sum,
                      (uint64_t)PER_THREAD_BUFS * (PER_THREAD_BUFS - 1) / 2);
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.live, 0);
  ck_assert_uint_eq(st.remote_frees, PER_THREAD_BUFS);
  ck_assert_int_ge(notifies(), 1);
  ck_assert_int_le(notifies(), PER_THREAD_BUFS);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

static void *alloc_on_thread(void *arg) { return weft_buf_alloc(arg, 64); }

START_TEST(pool_alloc_wrong_thread_null) {
  weft_pool *pool = new_pool();
  th_log_capture_start();
  pthread_t t;
  void *result = &t;
  ck_assert_int_eq(pthread_create(&t, NULL, alloc_on_thread, pool), 0);
  ck_assert_int_eq(pthread_join(t, &result), 0);
  th_log_capture_stop();
  ck_assert_ptr_null(result);
  ck_assert_int_eq(th_log_count("owner thread"), 1);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Giving slabs back: the retention budget                                   */

#define MIB ((size_t)1 << 20)

/* Allocates `n` buffers of `size` into `bufs`, each starting with its index
 * so that a block handed out twice shows as a wrong value. */
static void alloc_marked(weft_pool *pool, weft_buf **bufs, size_t n,
                         size_t size) {
  for (size_t i = 0; i < n; i++) {
    bufs[i] = weft_buf_alloc(pool, size);
    ck_assert_ptr_nonnull(bufs[i]);
    ck_assert_int_eq(weft_buf_write_u32be(bufs[i], (uint32_t)i), 0);
    bufs[i]->base[bufs[i]->capacity - 1] = (uint8_t)i;
  }
}

static void release_marked(weft_buf **bufs, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ck_assert_uint_eq(weft_buf_get_u32be(bufs[i], 0), (uint32_t)i);
    ck_assert_uint_eq(bufs[i]->base[bufs[i]->capacity - 1], (uint8_t)i);
    weft_buf_release(bufs[i]);
  }
}

/* True when [base, base+len) is mapped in this process. */
static bool mapped(void *base, size_t len) {
  unsigned char vec[64];
  size_t ps = (size_t)sysconf(_SC_PAGESIZE);
  ck_assert_uint_le((len + ps - 1) / ps, sizeof vec);
  if (mincore(base, len, vec) == 0)
    return true;
  ck_assert_int_eq(errno, ENOMEM);
  return false;
}

START_TEST(pool_release_burst_keeps_budget) {
  /* 4 KiB buffers fill a 1 MiB slab with 256; a burst of ten slabs. */
  enum { PER_SLAB = 256, SLABS = 10, N = PER_SLAB * SLABS };
  static weft_buf *bufs[N];
  weft_pool *pool = new_pool_retain(0, 3 * MIB);
  for (int round = 1; round <= 2; round++) {
    alloc_marked(pool, bufs, N, 4096);
    weft_pool_stats st = stats_of(pool);
    ck_assert_uint_eq(st.slabs, SLABS);
    ck_assert_uint_eq(st.slab_bytes, SLABS * MIB);
    ck_assert_uint_eq(st.retained_bytes, 0); /* all full */
    ck_assert_uint_eq(st.reserved_bytes, 0);
    ck_assert_uint_eq(st.slabs_released, (size_t)(round - 1) * (SLABS - 4));
    release_marked(bufs, N);
    /* The budget's worth of empty slabs stays, and the class's reserve (the
     * slab emptied last); the rest went back. */
    st = stats_of(pool);
    ck_assert_uint_eq(st.live, 0);
    ck_assert_uint_eq(st.slabs, 4);
    ck_assert_uint_eq(st.slab_bytes, 4 * MIB);
    ck_assert_uint_eq(st.retained_bytes, 3 * MIB);
    ck_assert_uint_eq(st.reserved_bytes, MIB);
    ck_assert_uint_eq(st.slabs_released, (size_t)round * (SLABS - 4));
  }
  /* The list of slabs is intact: a new hook registers exactly the four. */
  struct hook_log h = {.fail_from = -1, .key_base = 1};
  ck_assert_int_eq(weft_pool_add_slab_hook(pool, hook_reg, hook_unreg, &h), 0);
  ck_assert_int_eq(h.regs, 4);
  /* Kept slabs serve the next allocations before any new one. */
  alloc_marked(pool, bufs, 4 * PER_SLAB, 4096);
  ck_assert_uint_eq(stats_of(pool).slabs, 4);
  ck_assert_uint_eq(stats_of(pool).retained_bytes, 0);
  ck_assert_uint_eq(stats_of(pool).reserved_bytes, 0);
  release_marked(bufs, 4 * PER_SLAB);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
  ck_assert_int_eq(h.unregs, 4);
}
END_TEST

START_TEST(pool_release_budget_not_a_slab_multiple) {
  /* 2.5 slabs of budget keep two empty slabs (beside the reserve): a third
   * would exceed it. */
  enum { PER_SLAB = 16, N = PER_SLAB * 5 }; /* 64 KiB blocks */
  weft_buf *bufs[N];
  weft_pool *pool = new_pool_retain(0, 5 * MIB / 2);
  alloc_marked(pool, bufs, N, WEFT_POOL_MAX_CLASS);
  release_marked(bufs, N);
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs, 3);
  ck_assert_uint_eq(st.retained_bytes, 2 * MIB);
  ck_assert_uint_eq(st.reserved_bytes, MIB);
  ck_assert_uint_eq(st.slabs_released, 2);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* Checks, at each unreg, that the slab's memory is still there. */
struct order_log {
  struct hook_log log;
  int unmapped_at_unreg;
};

static void hook_unreg_check_mapped(void *arg, void *base, size_t len,
                                    uint64_t key) {
  struct order_log *o = arg;
  if (!mapped(base, len))
    o->unmapped_at_unreg++;
  hook_unreg(&o->log, base, len, key);
}

START_TEST(pool_release_unregisters_before_unmap) {
  /* Budget 0: the slab goes as soon as its last block is released. */
  weft_pool *pool = new_pool_retain(WEFT_POOL_MAX_CLASS, 0);
  struct order_log o = {.log = {.fail_from = -1, .key_base = 500}};
  ck_assert_int_eq(
      weft_pool_add_slab_hook(pool, hook_reg, hook_unreg_check_mapped, &o), 0);
  weft_buf *a = weft_buf_alloc(pool, 4096);
  weft_buf *b = weft_buf_alloc(pool, 4096);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_nonnull(b);
  ck_assert_int_eq(o.log.regs, 1);
  ck_assert_uint_eq(weft_buf_mem_key(a, 0), 500);
  void *base = o.log.bases[0];
  size_t len = o.log.lens[0];
  ck_assert_uint_eq(len, WEFT_POOL_MAX_CLASS);
  weft_buf_release(a);
  ck_assert_int_eq(o.log.unregs, 0); /* b still uses the slab */
  ck_assert_uint_eq(stats_of(pool).slabs_released, 0);
  weft_buf_release(b);
  /* Unregistered with its own key while still mapped, then unmapped. */
  ck_assert_int_eq(o.log.unregs, 1);
  ck_assert_uint_eq(o.log.unreg_keys[0], 500);
  ck_assert_int_eq(o.unmapped_at_unreg, 0);
  ck_assert(!mapped(base, len));
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs, 0);
  ck_assert_uint_eq(st.slab_bytes, 0);
  ck_assert_uint_eq(st.retained_bytes, 0);
  ck_assert_uint_eq(st.slabs_released, 1);
  /* The next allocation maps and registers a new slab. */
  weft_buf *c = weft_buf_alloc(pool, 4096);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(o.log.regs, 2);
  ck_assert_uint_eq(weft_buf_mem_key(c, 0), 501);
  weft_buf_release(c);
  ck_assert_int_eq(o.log.unregs, 2);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
  ck_assert_int_eq(o.log.unregs, 2); /* nothing left at destroy */
  ck_assert_int_eq(o.unmapped_at_unreg, 0);
}
END_TEST

/* fini: counts calls and records how many unregs had run by then. */
struct fini_log {
  struct hook_log *log;
  int calls;
  int unregs_before;
};

static struct fini_log fini_seen;

static void hook_fini(void *arg) {
  ck_assert_ptr_eq(arg, fini_seen.log);
  fini_seen.calls++;
  fini_seen.unregs_before = fini_seen.log->unregs;
}

START_TEST(pool_slab_hook_fini_once_at_pool_free) {
  /* Slabs come and go; the hook's fini runs once, at the pool's end, after
   * its last unreg: with two slabs still registered then (a budget of one
   * slab, and the class's reserve) and with none (budget 0). */
  for (int keep_one = 0; keep_one <= 1; keep_one++) {
    weft_pool *pool = new_pool_retain(WEFT_POOL_MAX_CLASS,
                                      keep_one ? WEFT_POOL_MAX_CLASS : 0);
    struct hook_log h = {.fail_from = -1, .key_base = 1};
    fini_seen = (struct fini_log){.log = &h};
    int id = weft_pool_add_slab_hook(pool, hook_reg, hook_unreg, &h);
    ck_assert_int_eq(id, 0);
    ck_assert_int_eq(weft_pool_set_slab_hook_fini(pool, id, hook_fini), 0);
    ck_assert_int_eq(weft_pool_set_slab_hook_fini(pool, 1, hook_fini),
                     WEFT_EINVAL); /* no such hook */
    ck_assert_int_eq(weft_pool_set_slab_hook_fini(pool, -1, hook_fini),
                     WEFT_EINVAL);
    ck_assert_int_eq(weft_pool_set_slab_hook_fini(NULL, 0, hook_fini),
                     WEFT_EINVAL);
    weft_buf *big[3]; /* three slabs of one 64 KiB block */
    alloc_marked(pool, big, 3, WEFT_POOL_MAX_CLASS);
    release_marked(big, 3);
    ck_assert_int_eq(h.regs, 3);
    ck_assert_int_eq(h.unregs, keep_one ? 1 : 3);
    ck_assert_int_eq(fini_seen.calls, 0); /* releasing slabs is not the end */
    ck_assert_uint_eq(weft_pool_free(pool), 0);
    ck_assert_int_eq(fini_seen.calls, 1);
    ck_assert_int_eq(fini_seen.unregs_before, 3);
    ck_assert_int_eq(h.unregs, 3);
  }
}
END_TEST

START_TEST(pool_release_budget_zero_every_empty_slab) {
  /* 64 KiB slabs: 16 blocks of 4 KiB, 4 of 16 KiB, 1 of 64 KiB. */
  weft_pool *pool = new_pool_retain(WEFT_POOL_MAX_CLASS, 0);
  weft_buf *small[48], *mid[8], *big[3];
  alloc_marked(pool, small, 48, 4096); /* 3 slabs */
  alloc_marked(pool, mid, 8, 16384);   /* 2 slabs */
  alloc_marked(pool, big, 3, 65536);   /* 3 slabs */
  ck_assert_uint_eq(stats_of(pool).slabs, 8);
  /* Emptying one slab at a time gives exactly that slab back. */
  release_marked(small, 16);
  ck_assert_uint_eq(stats_of(pool).slabs, 7);
  ck_assert_uint_eq(stats_of(pool).slabs_released, 1);
  release_marked(big, 3);
  ck_assert_uint_eq(stats_of(pool).slabs, 4);
  ck_assert_uint_eq(stats_of(pool).slabs_released, 4);
  for (int i = 16; i < 48; i++) /* every other block of two slabs */
    if (i % 2 == 0)
      weft_buf_release(small[i]);
  ck_assert_uint_eq(stats_of(pool).slabs, 4); /* half full: kept */
  for (int i = 16; i < 48; i++)
    if (i % 2 == 1)
      weft_buf_release(small[i]);
  release_marked(mid, 8);
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs, 0);
  ck_assert_uint_eq(st.slab_bytes, 0);
  ck_assert_uint_eq(st.retained_bytes, 0);
  ck_assert_uint_eq(st.slabs_released, 8);
  ck_assert_uint_eq(st.live, 0);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_release_mixed_sizes) {
  /* Every class at once, released in a scrambled order: no block is handed
   * out twice, slabs in use stay, and only empty ones beyond 2 MiB go. */
  enum { N = 6000 };
  static weft_buf *bufs[N];
  static const size_t sizes[] = {64, 200, 1000, 4000, 16000, 65536};
  weft_pool *pool = new_pool_retain(256 * 1024, 2 * MIB);
  for (size_t i = 0; i < N; i++) {
    bufs[i] = weft_buf_alloc(pool, sizes[i % 6]);
    ck_assert_ptr_nonnull(bufs[i]);
    ck_assert_int_eq(weft_buf_write_u32be(bufs[i], (uint32_t)i), 0);
  }
  size_t peak = stats_of(pool).slabs;
  /* Release all but every 97th, in an order that jumps between slabs (7919
   * is prime, so i*7919 mod N visits each index once). */
  for (size_t k = 0; k < N; k++) {
    size_t i = k * 7919 % N;
    ck_assert_uint_eq(weft_buf_get_u32be(bufs[i], 0), (uint32_t)i);
    if (i % 97 != 0) {
      weft_buf_release(bufs[i]);
      bufs[i] = NULL;
    }
  }
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_le(st.retained_bytes, 2 * MIB);
  ck_assert_uint_gt(st.slabs_released, 0);
  ck_assert_uint_eq(st.slabs + st.slabs_released, peak);
  ck_assert_uint_eq(st.live, (N + 96) / 97);
  /* The survivors' memory is intact, and new buffers do not overlap them. */
  weft_buf *more[600];
  for (size_t i = 0; i < 600; i++) {
    more[i] = weft_buf_alloc(pool, sizes[i % 6]);
    ck_assert_ptr_nonnull(more[i]);
    memset(more[i]->base, 0xAB, more[i]->capacity);
  }
  for (size_t i = 0; i < N; i += 97)
    ck_assert_uint_eq(weft_buf_get_u32be(bufs[i], 0), (uint32_t)i);
  for (size_t i = 0; i < 600; i++)
    weft_buf_release(more[i]);
  for (size_t i = 0; i < N; i += 97)
    weft_buf_release(bufs[i]);
  st = stats_of(pool);
  ck_assert_uint_eq(st.live, 0);
  ck_assert_uint_le(st.retained_bytes, 2 * MIB);
  /* At most one reserve slab per class. */
  ck_assert_uint_le(st.reserved_bytes, WEFT_POOL_CLASSES * 256 * 1024);
  /* Nothing is in use, so every slab left is a retained one or a reserve. */
  ck_assert_uint_eq(st.retained_bytes + st.reserved_bytes, st.slab_bytes);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_release_least_recently_emptied_first) {
  /* A class that keeps allocating is not starved by slabs other classes
   * emptied earlier: those go first (beyond each class's reserve). */
  weft_pool *pool = new_pool_retain(WEFT_POOL_MAX_CLASS, 2 * MIB);
  enum { BIG = 40 }; /* 40 slabs of one 64 KiB block */
  weft_buf *big[BIG], *mid[8];
  alloc_marked(pool, big, BIG, 65536);
  alloc_marked(pool, mid, 8, 16384); /* two slabs of four 16 KiB blocks */
  uint8_t *mid_first = mid[0]->base, *mid_last = mid[7]->base;
  /* The first 16 KiB slab is displaced as reserve by the second: it is
   * the oldest counted empty slab. */
  release_marked(mid, 8);
  release_marked(big, BIG);
  /* 2 MiB keeps 32 of the 40 counted empty slabs (39 big, the first mid
   * one) beside the two reserves: the mid one and 7 big ones went. */
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs, 34);
  ck_assert_uint_eq(st.slabs_released, 8);
  ck_assert_uint_eq(st.reserved_bytes, 2 * WEFT_POOL_MAX_CLASS);
  ck_assert(!mapped(mid_first, 16384));
  ck_assert(mapped(mid_last, 16384));
  /* Ping-pong on the 16 KiB class: its reserve serves it, nothing moves. */
  for (int i = 0; i < 100; i++) {
    weft_buf *b = weft_buf_alloc(pool, 16384);
    ck_assert_ptr_nonnull(b);
    weft_buf_release(b);
  }
  st = stats_of(pool);
  ck_assert_uint_eq(st.slabs_released, 8);
  ck_assert_uint_eq(st.slabs, 34);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_release_order_is_last_emptying) {
  /* A slab emptied, then used again, is not released while in use, and
   * when it empties again it is the newest: its class's reserve, and the
   * reserve it displaces counts as newer than slabs emptied before. */
  weft_pool *pool = new_pool_retain(WEFT_POOL_MAX_CLASS, WEFT_POOL_MAX_CLASS);
  weft_buf *s1[16], *s2[16], *s3[16], *s4[16]; /* one 64 KiB slab each */
  alloc_marked(pool, s1, 16, 4096);
  alloc_marked(pool, s2, 16, 4096);
  alloc_marked(pool, s3, 16, 4096);
  alloc_marked(pool, s4, 16, 4096);
  uint8_t *m1 = s1[0]->base, *m2 = s2[0]->base, *m3 = s3[0]->base;
  uint8_t *m4 = s4[0]->base;
  release_marked(s1, 16); /* slab 1 empty: the reserve */
  ck_assert_uint_eq(stats_of(pool).reserved_bytes, WEFT_POOL_MAX_CLASS);
  weft_buf *x = weft_buf_alloc(pool, 4096);
  ck_assert_ptr_nonnull(x);
  ck_assert(x->base >= m1 && x->base < m1 + WEFT_POOL_MAX_CLASS);
  ck_assert_uint_eq(stats_of(pool).retained_bytes, 0);
  ck_assert_uint_eq(stats_of(pool).reserved_bytes, 0);
  release_marked(s2, 16); /* slab 2: the reserve */
  release_marked(s3, 16); /* slab 3 the reserve, slab 2 within the budget */
  ck_assert_uint_eq(stats_of(pool).slabs_released, 0);
  release_marked(s4, 16); /* over: slab 2 goes, slab 1 is in use */
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs_released, 1);
  ck_assert_uint_eq(st.slabs, 3);
  ck_assert_uint_eq(st.retained_bytes, WEFT_POOL_MAX_CLASS);
  ck_assert_uint_eq(st.reserved_bytes, WEFT_POOL_MAX_CLASS);
  ck_assert(!mapped(m2, 4096));
  ck_assert(mapped(m1, 4096) && mapped(m3, 4096) && mapped(m4, 4096));
  ck_assert_int_eq(weft_buf_write_u32be(x, 7), 0);
  weft_buf_release(x); /* slab 1 empty again: the reserve; slab 4 counted,
                          newer than slab 3, which goes */
  st = stats_of(pool);
  ck_assert_uint_eq(st.slabs_released, 2);
  ck_assert_uint_eq(st.slabs, 2);
  ck_assert(!mapped(m3, 4096));
  ck_assert(mapped(m1, 4096) && mapped(m4, 4096));
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_release_steady_stream_keeps_its_slabs) {
  /* A stream's message that spans two slabs of one class (17 blocks of
   * 4 KiB, 16 per slab) and touches a second class, emptied after each
   * message, with a budget of one slab: three slabs empty at once. The
   * reserves (one per class) keep them all, so no message unmaps a slab
   * and maps it again (the page faults of a TLS stream, issue 15). */
  weft_pool *pool = new_pool_retain(WEFT_POOL_MAX_CLASS, WEFT_POOL_MAX_CLASS);
  weft_buf *msg[17];
  for (int round = 0; round < 100; round++) {
    alloc_marked(pool, msg, 17, 4096);
    weft_buf *small = weft_buf_alloc(pool, 64);
    ck_assert_ptr_nonnull(small);
    release_marked(msg, 17);
    weft_buf_release(small);
  }
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs_released, 0);
  ck_assert_uint_eq(st.slabs, 3);
  ck_assert_uint_le(st.retained_bytes, WEFT_POOL_MAX_CLASS);
  ck_assert_uint_eq(st.reserved_bytes, 2 * WEFT_POOL_MAX_CLASS);
  /* A burst still goes back: to the budget's one slab and the reserves. */
  enum { BURST = 16 * 20 };
  static weft_buf *burst[BURST];
  alloc_marked(pool, burst, BURST, 4096);
  ck_assert_uint_eq(stats_of(pool).slabs, 21); /* 20 and the 64 B one */
  release_marked(burst, BURST);
  st = stats_of(pool);
  ck_assert_uint_eq(st.slabs, 3);
  ck_assert_uint_eq(st.slabs_released, 18);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_release_skips_reserve_on_empty_list) {
  /* A counted slab taken back into use stays on the empty list (stale);
   * when it empties again it becomes its class's reserve there. The trim
   * passes over it and releases the oldest counted slab instead. */
  weft_pool *pool = new_pool_retain(WEFT_POOL_MAX_CLASS, WEFT_POOL_MAX_CLASS);
  weft_buf *a[16], *b[16], *e[8]; /* 4 KiB: a slab each; 16 KiB: two */
  alloc_marked(pool, a, 16, 4096);
  alloc_marked(pool, b, 16, 4096);
  alloc_marked(pool, e, 8, 16384);
  uint8_t *mb = b[0]->base, *me1 = e[0]->base, *me2 = e[4]->base;
  weft_buf_release(a[0]); /* A not full: on the partial list */
  release_marked(b, 16);  /* B not full after A: the head; empty */
  for (int i = 1; i < 16; i++)
    weft_buf_release(a[i]); /* A the reserve, B counted */
  weft_buf *x = weft_buf_alloc(pool, 4096);
  ck_assert_ptr_nonnull(x);
  ck_assert(x->base >= mb && x->base < mb + WEFT_POOL_MAX_CLASS);
  release_marked(e, 8); /* E2 the 16 KiB reserve, E1 counted */
  ck_assert_uint_eq(stats_of(pool).slabs_released, 0);
  weft_buf_release(x); /* B the reserve, A counted: over budget */
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs_released, 1);
  ck_assert(!mapped(me1, 16384));
  ck_assert(mapped(mb, 4096) && mapped(me2, 16384));
  ck_assert_uint_eq(st.reserved_bytes, 2 * WEFT_POOL_MAX_CLASS);
  ck_assert_uint_eq(st.retained_bytes, WEFT_POOL_MAX_CLASS);
  /* The reserve serves the class's next allocation. */
  x = weft_buf_alloc(pool, 4096);
  ck_assert_ptr_nonnull(x);
  ck_assert(x->base >= mb && x->base < mb + WEFT_POOL_MAX_CLASS);
  weft_buf_release(x);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

START_TEST(pool_release_keeps_slab_of_live_buffer) {
  /* A buffer still referenced (here: leaked) pins its slab; destroy then
   * reports it and frees the slab. Slices hold their root's block. */
  weft_pool *pool = new_pool_retain(WEFT_POOL_MAX_CLASS, 0);
  weft_buf *root = weft_buf_alloc(pool, 4096);
  weft_buf *other = weft_buf_alloc(pool, 4096);
  ck_assert_ptr_nonnull(root);
  ck_assert_ptr_nonnull(other);
  weft_buf *slice = weft_buf_slice(root, 8, 16);
  ck_assert_ptr_nonnull(slice);
  weft_buf_release(root);
  weft_buf_release(other);
  ck_assert_uint_eq(stats_of(pool).slabs, 1); /* the slice holds it */
  memset(weft_buf_wptr(slice) - 16, 0x5A, 16);
  weft_buf_release(slice);
  ck_assert_uint_eq(stats_of(pool).slabs, 0);
  ck_assert_uint_eq(stats_of(pool).slabs_released, 1);

  /* A leak is still reported (and its slab freed) by destroy. */
  ck_assert_ptr_nonnull(weft_buf_alloc(pool, 256));
  th_log_capture_start();
  ck_assert_uint_eq(weft_pool_free(pool), 1);
  th_log_capture_stop();
  ck_assert_int_eq(th_log_count("LEAK: weft_buf 256 bytes"), 1);
}
END_TEST

START_TEST(pool_release_remote_then_drain) {
  /* Blocks released on another thread go back to their slabs (and slabs to
   * the system) only when the owner drains them. */
  enum { PER_SLAB = 64, SLABS = 6, N = PER_SLAB * SLABS }; /* 16 KiB */
  static weft_buf *bufs[N];
  weft_pool *pool = new_pool_retain(0, 2 * MIB);
  atomic_store(&notify_calls, 0);
  weft_pool_set_remote_notify(pool, count_notify, &notify_calls);
  alloc_marked(pool, bufs, N, 16384);
  ck_assert_uint_eq(stats_of(pool).slabs, SLABS);
  release_on_thread(bufs, N);
  ck_assert_int_eq(notifies(), 1);
  weft_pool_stats st = stats_of(pool);
  ck_assert_uint_eq(st.slabs, SLABS); /* nothing moves before the drain */
  ck_assert_uint_eq(st.retained_bytes, 0);
  ck_assert_uint_eq(st.slabs_released, 0);
  ck_assert_uint_eq(weft_pool_drain(pool), N);
  st = stats_of(pool);
  ck_assert_uint_eq(st.live, 0);
  ck_assert_uint_eq(st.slabs, 3); /* the budget's two and the reserve */
  ck_assert_uint_eq(st.retained_bytes, 2 * MIB);
  ck_assert_uint_eq(st.reserved_bytes, MIB);
  ck_assert_uint_eq(st.slabs_released, SLABS - 3);
  /* Allocation works on, from the kept slabs first. */
  alloc_marked(pool, bufs, 3 * PER_SLAB, 16384);
  ck_assert_uint_eq(stats_of(pool).slabs, 3);
  release_on_thread(bufs, 3 * PER_SLAB);
  ck_assert_uint_eq(weft_pool_free(pool), 0); /* drains, no leak */
}
END_TEST

/* Resident set size in bytes, from /proc/self/statm. */
static size_t rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  ck_assert_ptr_nonnull(f);
  unsigned long size = 0, resident = 0;
  ck_assert_int_eq(fscanf(f, "%lu %lu", &size, &resident), 2);
  fclose(f);
  return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

START_TEST(pool_release_rss_drops_after_burst) {
  /* 256 MiB of 64 KiB buffers, every page touched, then released: with a
   * 1 MiB budget the resident set comes back down. RSS is this process's
   * own figure, so other work on the machine does not move it; the margins
   * are wide (a quarter of the burst) for allocator and test noise. */
  enum { N = 4096 };
  static weft_buf *bufs[N];
  weft_pool *pool = new_pool_retain(0, MIB);
  size_t before = rss_bytes();
  for (size_t i = 0; i < N; i++) {
    bufs[i] = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS);
    ck_assert_ptr_nonnull(bufs[i]);
    memset(bufs[i]->base, (int)i, bufs[i]->capacity);
  }
  size_t burst = (size_t)N * WEFT_POOL_MAX_CLASS;
  size_t peak = rss_bytes();
  ck_assert_msg(peak >= before + burst * 3 / 4,
                "RSS %zu MiB before, %zu MiB at the peak", before >> 20,
                peak >> 20);
  for (size_t i = 0; i < N; i++)
    weft_buf_release(bufs[i]);
  size_t after = rss_bytes();
  ck_assert_msg(after <= before + burst / 4,
                "RSS %zu MiB before, %zu at the peak, %zu after the release",
                before >> 20, peak >> 20, after >> 20);
  /* All but the budget's one slab and the class's reserve went back. */
  ck_assert_uint_eq(stats_of(pool).slabs_released, burst / MIB - 2);
  ck_assert_uint_eq(weft_pool_free(pool), 0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Leak reports                                                              */

START_TEST(pool_leak_reported_with_location) {
  weft_pool *pool = new_pool();
  ck_assert(weft_pool_leak_detect(pool));
  weft_buf *fine = weft_buf_alloc(pool, 64);
  weft_buf *leaked = weft_buf_alloc(pool, 300);
  ck_assert_ptr_nonnull(fine);
  ck_assert_ptr_nonnull(leaked);
  weft_buf_release(fine);
  weft_buf_touch(leaked);
  char where[32];
  snprintf(where, sizeof where, "test_pool.c:%d", __LINE__ - 2);
  th_log_capture_start();
  ck_assert_uint_eq(weft_pool_free(pool), 1);
  th_log_capture_stop();
  ck_assert_int_eq(th_log_count("LEAK"), 1);
  ck_assert_int_eq(th_log_count(where), 1);
  ck_assert_int_eq(th_log_count("weft_buf 1024 bytes, refcnt 1"), 1);
  ck_assert_int_eq(th_log_count("1 leaked buffer"), 1); /* the summary */
}
END_TEST

START_TEST(pool_leak_location_is_last_touch) {
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  weft_buf_retain(b);
  weft_buf_retain(b);
  weft_buf_release(b);
  int line = __LINE__ - 1;
  char where[32];
  snprintf(where, sizeof where, "test_pool.c:%d", line);
  th_log_capture_start();
  ck_assert_uint_eq(weft_pool_free(pool), 1);
  th_log_capture_stop();
  ck_assert_int_eq(th_log_count(where), 1);
  ck_assert_int_eq(th_log_count("refcnt 2"), 1);
}
END_TEST

START_TEST(pool_leak_detect_off_still_counts) {
  weft_pool *pool = new_pool_opts(0, 0);
  ck_assert(!weft_pool_leak_detect(pool));
  weft_buf *pooled = weft_buf_alloc(pool, 64);
  weft_buf *unpooled = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS + 10);
  uint8_t ext[8];
  weft_buf *wrapped = weft_buf_wrap(pool, ext, sizeof ext, 0, NULL, NULL);
  ck_assert_ptr_nonnull(pooled);
  ck_assert_ptr_nonnull(unpooled);
  ck_assert_ptr_nonnull(wrapped);
  th_log_capture_start();
  /* Leaked memory is freed all the same (ASan would report the unpooled
   * one otherwise). */
  ck_assert_uint_eq(weft_pool_free(pool), 3);
  th_log_capture_stop();
  ck_assert_int_eq(th_log_count("LEAK"), 0);
  ck_assert_int_eq(th_log_count("3 leaked buffers"), 1);
  ck_assert_int_eq(th_log_count("leak detection is off"), 1);
}
END_TEST

START_TEST(pool_leak_detect_env_and_option_precedence) {
  const char *saved = getenv("WEFT_LEAK_DETECT");
  char *copy = saved != NULL ? strdup(saved) : NULL;
  weft_pool *pool;

  setenv("WEFT_LEAK_DETECT", "0", 1);
  pool = new_pool_opts(0, -1);
  ck_assert(!weft_pool_leak_detect(pool));
  ck_assert_uint_eq(weft_pool_free(pool), 0);
  pool = new_pool_opts(0, 1); /* the option beats the environment */
  ck_assert(weft_pool_leak_detect(pool));
  ck_assert_uint_eq(weft_pool_free(pool), 0);

  setenv("WEFT_LEAK_DETECT", "1", 1);
  pool = new_pool_opts(0, -1);
  ck_assert(weft_pool_leak_detect(pool));
  ck_assert_uint_eq(weft_pool_free(pool), 0);
  pool = new_pool_opts(0, 0);
  ck_assert(!weft_pool_leak_detect(pool));
  ck_assert_uint_eq(weft_pool_free(pool), 0);

  if (copy != NULL) {
    setenv("WEFT_LEAK_DETECT", copy, 1);
    free(copy);
  } else {
    unsetenv("WEFT_LEAK_DETECT");
  }
}
END_TEST

START_TEST(pool_remote_released_buffers_not_leaks) {
  /* Released on another thread and never drained by hand: destroy drains
   * them, so they are not reported. */
  weft_pool *pool = new_pool();
  weft_buf *b = weft_buf_alloc(pool, 64);
  ck_assert_ptr_nonnull(b);
  release_on_thread(&b, 1);
  th_log_capture_start();
  ck_assert_uint_eq(weft_pool_free(pool), 0);
  th_log_capture_stop();
  ck_assert_int_eq(th_log_count("LEAK"), 0);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("pool");
  th_add_case(s, "classes", 0, pool_new_bad_options_einval,
              pool_null_arguments_harmless, pool_size_class_rounding,
              pool_reuse_same_class_same_memory, pool_slab_grows_when_full,
              pool_unpooled_above_max_class, NULL);

  th_add_case(s, "hooks", 0, pool_slab_hook_existing_and_new_slabs,
              pool_slab_hook_failure_fails_alloc,
              pool_slab_hook_add_fails_cleanly, NULL);

  th_add_case(s, "threads", 0, pool_remote_release_notify_and_drain,
              pool_remote_release_drained_by_alloc,
              pool_remote_release_slice_and_wrap_on_owner,
              pool_remote_release_many_threads, pool_alloc_wrong_thread_null,
              NULL);

  th_add_case(
      s, "release", 0, pool_release_burst_keeps_budget,
      pool_release_budget_not_a_slab_multiple,
      pool_release_unregisters_before_unmap,
      pool_slab_hook_fini_once_at_pool_free,
      pool_release_budget_zero_every_empty_slab, pool_release_mixed_sizes,
      pool_release_least_recently_emptied_first,
      pool_release_order_is_last_emptying,
      pool_release_steady_stream_keeps_its_slabs,
      pool_release_skips_reserve_on_empty_list,
      pool_release_keeps_slab_of_live_buffer, pool_release_remote_then_drain,
      pool_release_rss_drops_after_burst, NULL);

  th_add_case(s, "leaks", 0, pool_leak_reported_with_location,
              pool_leak_location_is_last_touch,
              pool_leak_detect_off_still_counts,
              pool_leak_detect_env_and_option_precedence,
              pool_remote_released_buffers_not_leaks, NULL);
  return s;
}
