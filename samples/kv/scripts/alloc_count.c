/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/scripts/alloc_count.c: an LD_PRELOAD shim that counts a process's
 * heap calls, for samples/kv/scripts/bench-kv-counts.sh. It sits in front of
 * whatever allocator the process links (glibc's malloc for weft, jemalloc for
 * Debian's redis-server: both are reached through the unprefixed symbols),
 * forwards every call to it and adds one to a counter.
 *
 * The counters are nine 64-bit words in the file named by ALLOC_COUNT_FILE
 * (created, shared-mapped), so a script reads them while the process runs,
 * before and after a workload (`od -An -t u8`): malloc, calloc, realloc,
 * free (non-NULL pointers only), posix_memalign/aligned_alloc/memalign/
 * valloc, then the bytes asked for by malloc, calloc and realloc and the
 * aligned calls, then the free(NULL) calls. Without ALLOC_COUNT_FILE the
 * counts stay in the process. Relaxed atomic adds: a few ns per call.
 *
 * Build: cc -O2 -shared -fPIC -o alloc_count.so
 * samples/kv/scripts/alloc_count.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

enum {
  C_MALLOC,
  C_CALLOC,
  C_REALLOC,
  C_FREE,
  C_ALIGNED,
  C_BYTES,
  C_FREE_NULL,
  C_SPARE1,
  C_SPARE2,
  C_N
};

static uint64_t local_counts[C_N];
static uint64_t *counts = local_counts;

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);

/* dlsym itself may call calloc before real_calloc is known: those few
 * early calls are served from this static arena and never freed. */
static _Alignas(16) char boot[4096];
static size_t boot_used;
static int resolving;

static void *boot_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (boot_used + n > sizeof boot)
    return NULL;
  void *p = boot + boot_used;
  boot_used += n;
  return p;
}

static int is_boot(const void *p) {
  return (const char *)p >= boot && (const char *)p < boot + sizeof boot;
}

static void resolve(void) {
  if (real_malloc != NULL || resolving)
    return;
  resolving = 1;
  real_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  real_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  real_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  real_posix_memalign =
      (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc =
      (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
  real_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
  real_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  resolving = 0;
}

static void count(int what, uint64_t bytes) {
  __atomic_fetch_add(&counts[what], 1, __ATOMIC_RELAXED);
  if (bytes != 0)
    __atomic_fetch_add(&counts[C_BYTES], bytes, __ATOMIC_RELAXED);
}

/* Maps ALLOC_COUNT_FILE and carries over what was counted before. */
__attribute__((constructor)) static void alloc_count_init(void) {
  resolve();
  const char *path = getenv("ALLOC_COUNT_FILE");
  if (path == NULL || *path == '\0')
    return;
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  if (ftruncate(fd, sizeof local_counts) == 0) {
    void *m = mmap(NULL, sizeof local_counts, PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) {
      uint64_t *shared = m;
      for (int i = 0; i < C_N; i++)
        shared[i] = __atomic_load_n(&local_counts[i], __ATOMIC_RELAXED);
      counts = shared;
    }
  }
  close(fd);
}

void *malloc(size_t n) {
  resolve();
  if (real_malloc == NULL)
    return boot_alloc(n);
  count(C_MALLOC, n);
  return real_malloc(n);
}

void *calloc(size_t k, size_t n) {
  resolve();
  if (real_calloc == NULL)
    return boot_alloc(k * n); /* zeroed: static storage */
  count(C_CALLOC, k * n);
  return real_calloc(k, n);
}

void *realloc(void *p, size_t n) {
  resolve();
  if (is_boot(p) || real_realloc == NULL)
    return NULL; /* not reached: dlsym does not realloc */
  count(C_REALLOC, n);
  return real_realloc(p, n);
}

void free(void *p) {
  if (p == NULL) {
    __atomic_fetch_add(&counts[C_FREE_NULL], 1, __ATOMIC_RELAXED);
    return;
  }
  if (is_boot(p))
    return;
  resolve();
  count(C_FREE, 0);
  real_free(p);
}

int posix_memalign(void **out, size_t align, size_t n) {
  resolve();
  count(C_ALIGNED, n);
  return real_posix_memalign(out, align, n);
}

void *aligned_alloc(size_t align, size_t n) {
  resolve();
  count(C_ALIGNED, n);
  return real_aligned_alloc(align, n);
}

void *memalign(size_t align, size_t n) {
  resolve();
  count(C_ALIGNED, n);
  return real_memalign(align, n);
}
