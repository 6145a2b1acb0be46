/* SPDX-License-Identifier: Apache-2.0 */
/* weft-microbench: nanoseconds per operation of the foundation's primitives.
 *
 *   weft-microbench [--quick]
 *
 * Benchmarks (one function each, listed in `benches` below):
 *   buf alloc+release   weft_buf_alloc + weft_buf_release on a standalone pool
 *                       (leak detection off, the production setting), beside
 *   malloc+free         the C library doing the same sizes;
 *   loop execute        another thread queues N tasks with weft_loop_execute;
 *                       time until the loop has run all N (an atomic counter);
 *   mutex queue         the peer of loop execute: the same handoff through
 *                       a mutex-protected list to a thread that polls it;
 *   timer start+stop    on the loop thread, N start+stop pairs with random
 *                       delays among 1024 other active timers, beside
 *   timerfd arm+disarm  the kernel's timer doing the same (two syscalls);
 *   write 16 B merged   what a weft writer pays per small message before
 *                       the kernel (issue 17): weft_buf_alloc, then
 *                       weft_channel_write into an embedded byte-stream
 *                       channel (a pipeline pass, the copy into the
 *                       queue's own buffer, the release), a flush per 1024.
 *   write_bytes 16 B    the same messages with weft_channel_write_bytes:
 *                       copied into the queue's buffer, nothing allocated.
 *
 * Every benchmark runs REPS times, interleaved (run 1 of each, then run 2 of
 * each, ...) so a noisy neighbour hurts all of them alike; the table shows
 * the median and the spread (min..max). Numbers from a shared 2-core machine
 * are indications, not results: compare rows of one run, not runs.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/clock.h>
#include <weft/embedded.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/timer.h>

#define REPS 5

/* Shared state of one program run. */
typedef struct bench_env {
  bool quick;
  weft_pool *pool;        /* standalone pool owned by the main thread */
  weft_loop_group *group; /* one loop; NULL if it could not start */
  weft_loop *loop;
} bench_env;

/* One benchmark: returns ns per operation, or a negative value if it could
 * not run (the loop did not start). */
typedef struct bench {
  const char *name;
  double (*run)(bench_env *env, size_t size, size_t iters);
  size_t size;        /* bytes, for the buffer benchmarks */
  size_t iters;       /* operations per run */
  size_t quick_iters; /* operations per run with --quick */
} bench;

/* Keeps the compiler from optimising a malloc/free (or alloc/release) pair
 * away: the pointer escapes into an empty asm that may read memory. */
static inline void escape(void *p) {
  __asm__ volatile("" : : "g"(p) : "memory");
}

static uint64_t xorshift64(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

/* ------------------------------------------------------------------------ */
/* Buffers against malloc                                                    */

static double bench_buf_alloc_release(bench_env *env, size_t size,
                                      size_t iters) {
  uint64_t t0 = weft_now_ns();
  for (size_t i = 0; i < iters; i++) {
    weft_buf *b = weft_buf_alloc(env->pool, size);
    escape(b);
    weft_buf_release(b);
  }
  return (double)(weft_now_ns() - t0) / (double)iters;
}

static double bench_malloc_free(bench_env *env, size_t size, size_t iters) {
  (void)env;
  uint64_t t0 = weft_now_ns();
  for (size_t i = 0; i < iters; i++) {
    void *p = malloc(size);
    escape(p);
    free(p);
  }
  return (double)(weft_now_ns() - t0) / (double)iters;
}

/* ------------------------------------------------------------------------ */
/* Small writes merged into the outbound queue                               */

/* Hands what the channel flushed back to the pool, as a socket's send
 * completion would. */
static void drain_outbound(weft_embedded *e) {
  void *m;
  while ((m = weft_embedded_read_outbound(e)) != NULL)
    weft_msg_release(m);
}

/* One message per write; the flush every 1024 writes fills the queue's
 * 16 KiB buffer once. As a buffer: weft_buf_alloc then weft_channel_write
 * (what weft-bench's client did before weft_channel_write_bytes); as bytes:
 * weft_channel_write_bytes from a message in place. */
static double small_writes(size_t size, size_t iters, bool as_bytes) {
  static const uint8_t msg[WEFT_WRITE_COALESCE_MAX];
  weft_embedded *e;
  if (size > sizeof msg || weft_embedded_new(&e, NULL, NULL) < 0)
    return -1;
  weft_embedded_set_stream(e, true);
  weft_channel *ch = weft_embedded_channel(e);
  weft_pool *pool = weft_embedded_pool(e);
  double ns = -1;
  uint64_t t0 = weft_now_ns();
  size_t i;
  for (i = 0; i < iters; i++) {
    if (as_bytes) {
      weft_channel_write_bytes(ch, msg, size, WEFT_PROMISE_NONE);
    } else {
      weft_buf *b = weft_buf_alloc(pool, size);
      if (b == NULL)
        break;
      b->writer_index = size;
      weft_channel_write(ch, b, WEFT_PROMISE_NONE);
    }
    if (i % 1024 == 1023) {
      weft_channel_flush(ch);
      drain_outbound(e);
    }
  }
  if (i == iters)
    ns = (double)(weft_now_ns() - t0) / (double)iters;
  weft_channel_flush(ch);
  drain_outbound(e);
  weft_embedded_free(e);
  return ns;
}

static double bench_small_write(bench_env *env, size_t size, size_t iters) {
  (void)env;
  return small_writes(size, iters, false);
}

static double bench_small_write_bytes(bench_env *env, size_t size,
                                      size_t iters) {
  (void)env;
  return small_writes(size, iters, true);
}

/* ------------------------------------------------------------------------ */
/* Loop: execute from another thread                                         */

static _Atomic size_t tasks_run;

static void count_task(void *arg) {
  (void)arg;
  atomic_fetch_add_explicit(&tasks_run, 1, memory_order_relaxed);
}

/* The main thread is the producer; the loop thread consumes. The time runs
 * until the last task has run, so it covers queueing, wake-ups and
 * running, i.e. the producer-to-loop throughput. */
static double bench_loop_execute(bench_env *env, size_t size, size_t iters) {
  (void)size;
  if (env->loop == NULL)
    return -1;
  atomic_store(&tasks_run, 0);
  uint64_t t0 = weft_now_ns();
  for (size_t i = 0; i < iters; i++) {
    int err;
    /* ENOMEM is the only transient failure; back off and retry. */
    while ((err = weft_loop_execute(env->loop, count_task, NULL)) ==
           WEFT_ENOMEM)
      sched_yield();
    if (err != 0) {
      fprintf(stderr, "weft_loop_execute: %s\n", weft_strerror(err));
      return -1;
    }
  }
  while (atomic_load_explicit(&tasks_run, memory_order_relaxed) < iters)
    sched_yield();
  return (double)(weft_now_ns() - t0) / (double)iters;
}

/* ------------------------------------------------------------------------ */
/* Loop: timer start+stop on the loop thread                                 */

#define BACKGROUND_TIMERS 1024

struct timer_job {
  weft_loop *loop;
  size_t iters;
  double ns_per_op;  /* result, written on the loop thread */
  _Atomic bool done; /* release-stored after ns_per_op */
};

static void never_fires(void *arg) { (void)arg; }

/* Runs on the loop thread: timers may only be touched there. The background
 * timers give the heap a realistic size (an idle timeout per channel); their
 * delays (1..10 s) keep them from firing during the measurement. */
static void timer_job_run(void *arg) {
  struct timer_job *job = arg;
  static weft_timer background[BACKGROUND_TIMERS];
  static weft_timer t;
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < BACKGROUND_TIMERS; i++) {
    weft_timer_init(job->loop, &background[i]);
    weft_timer_start(&background[i],
                     1000000000ull + xorshift64(&rng) % 9000000000ull, 0,
                     never_fires, NULL);
  }
  weft_timer_init(job->loop, &t);
  uint64_t t0 = weft_now_ns();
  for (size_t i = 0; i < job->iters; i++) {
    /* 1 µs .. 1 s: lands anywhere in the heap. */
    weft_timer_start(&t, 1000 + xorshift64(&rng) % 1000000000ull, 0,
                     never_fires, NULL);
    weft_timer_stop(&t);
  }
  job->ns_per_op = (double)(weft_now_ns() - t0) / (double)job->iters;
  for (size_t i = 0; i < BACKGROUND_TIMERS; i++)
    weft_timer_stop(&background[i]);
  atomic_store_explicit(&job->done, true, memory_order_release);
}

static double bench_timer_start_stop(bench_env *env, size_t size,
                                     size_t iters) {
  (void)size;
  if (env->loop == NULL)
    return -1;
  struct timer_job job = {.loop = env->loop, .iters = iters};
  atomic_init(&job.done, false);
  if (weft_loop_execute(env->loop, timer_job_run, &job) != 0)
    return -1;
  struct timespec nap = {0, 100000}; /* 100 µs: do not steal the loop's CPU */
  while (!atomic_load_explicit(&job.done, memory_order_acquire))
    nanosleep(&nap, NULL);
  return job.ns_per_op;
}

/* ------------------------------------------------------------------------ */
/* Peer of execute: a mutex-protected FIFO drained by a polling thread       */

typedef struct mq_node {
  struct mq_node *next;
} mq_node;

static struct {
  pthread_mutex_t lock;
  mq_node *head, *tail;
  _Atomic bool stop;
  _Atomic size_t consumed;
} mq = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Takes the whole list under the lock, then frees it outside, as a loop
 * would run its tasks; yields when empty, as a busy loop polls. */
static void *mq_consumer(void *arg) {
  (void)arg;
  while (!atomic_load_explicit(&mq.stop, memory_order_relaxed)) {
    pthread_mutex_lock(&mq.lock);
    mq_node *n = mq.head;
    mq.head = mq.tail = NULL;
    pthread_mutex_unlock(&mq.lock);
    if (n == NULL) {
      sched_yield();
      continue;
    }
    size_t count = 0;
    while (n != NULL) {
      mq_node *next = n->next;
      free(n);
      n = next;
      count++;
    }
    atomic_fetch_add_explicit(&mq.consumed, count, memory_order_relaxed);
  }
  return NULL;
}

static double bench_mutex_queue(bench_env *env, size_t size, size_t iters) {
  (void)env, (void)size;
  pthread_t consumer;
  atomic_store(&mq.stop, false);
  atomic_store(&mq.consumed, 0);
  if (pthread_create(&consumer, NULL, mq_consumer, NULL) != 0)
    return -1;
  uint64_t t0 = weft_now_ns();
  for (size_t i = 0; i < iters; i++) {
    mq_node *n = malloc(sizeof *n);
    n->next = NULL;
    pthread_mutex_lock(&mq.lock);
    if (mq.tail != NULL)
      mq.tail->next = n;
    else
      mq.head = n;
    mq.tail = n;
    pthread_mutex_unlock(&mq.lock);
  }
  while (atomic_load_explicit(&mq.consumed, memory_order_relaxed) < iters)
    sched_yield();
  double ns = (double)(weft_now_ns() - t0) / (double)iters;
  atomic_store(&mq.stop, true);
  pthread_join(consumer, NULL);
  return ns;
}

/* ------------------------------------------------------------------------ */
/* Peer of the timer heap: a timerfd armed and disarmed                      */

static double bench_timerfd(bench_env *env, size_t size, size_t iters) {
  (void)env, (void)size;
  int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0)
    return -1;
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  struct itimerspec off = {0};
  uint64_t t0 = weft_now_ns();
  for (size_t i = 0; i < iters; i++) {
    uint64_t ns = 1000 + xorshift64(&rng) % 1000000000ull;
    struct itimerspec on = {
        .it_value = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)}};
    timerfd_settime(fd, 0, &on, NULL);
    timerfd_settime(fd, 0, &off, NULL);
  }
  double r = (double)(weft_now_ns() - t0) / (double)iters;
  close(fd);
  return r;
}

/* ------------------------------------------------------------------------ */
/* Table of benchmarks, setup, statistics, output                            */

static const bench benches[] = {
    {"buf alloc+release 64 B", bench_buf_alloc_release, 64, 4000000, 400000},
    {"malloc+free 64 B", bench_malloc_free, 64, 4000000, 400000},
    {"buf alloc+release 1 KiB", bench_buf_alloc_release, 1024, 4000000, 400000},
    {"malloc+free 1 KiB", bench_malloc_free, 1024, 4000000, 400000},
    {"buf alloc+release 16 KiB", bench_buf_alloc_release, 16384, 4000000,
     400000},
    {"malloc+free 16 KiB", bench_malloc_free, 16384, 4000000, 400000},
    {"loop execute (other thread)", bench_loop_execute, 0, 1000000, 100000},
    {"mutex queue (other thread)", bench_mutex_queue, 0, 1000000, 100000},
    {"timer start+stop (1024 active)", bench_timer_start_stop, 0, 1000000,
     100000},
    {"timerfd arm+disarm", bench_timerfd, 0, 1000000, 100000},
    {"write 16 B, merged (embedded)", bench_small_write, 16, 4000000, 400000},
    {"write_bytes 16 B (embedded)", bench_small_write_bytes, 16, 4000000,
     400000},
};
#define NBENCH (sizeof benches / sizeof benches[0])

static int setup(bench_env *env) {
  weft_pool_options popts;
  weft_pool_options_init(&popts);
  popts.leak_detect = 0; /* measure the production path */
  int err = weft_pool_new(&env->pool, &popts);
  if (err != 0) {
    fprintf(stderr, "weft_pool_new: %s\n", weft_strerror(err));
    return err;
  }
  weft_loop_options lopts;
  weft_loop_options_init(&lopts);
  lopts.n_loops = 1;
  lopts.pin = false; /* a shared machine: let the scheduler place it */
  lopts.name = "bench";
  err = weft_loop_group_new(&env->group, &lopts);
  if (err == 0)
    err = weft_loop_group_start(env->group);
  if (err != 0) {
    /* The buffer benchmarks still run; the loop rows say n/a. */
    fprintf(stderr, "loop group: %s (loop benchmarks skipped)\n",
            weft_strerror(err));
    weft_loop_group_free(env->group);
    env->group = NULL;
    return 0;
  }
  env->loop = weft_loop_group_get(env->group, 0);
  return 0;
}

static void teardown(bench_env *env) {
  if (env->group != NULL) {
    weft_loop_group_stop(env->group);
    weft_loop_group_join(env->group);
    weft_loop_group_free(env->group);
  }
  weft_pool_free(env->pool);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void print_row(const char *name, const double ns[REPS]) {
  double sorted[REPS];
  memcpy(sorted, ns, sizeof sorted);
  qsort(sorted, REPS, sizeof sorted[0], cmp_double);
  if (sorted[0] < 0) {
    printf("%-32s %10s  %s\n", name, "n/a", "");
    return;
  }
  printf("%-32s %10.1f  %.1f..%.1f\n", name, sorted[REPS / 2], sorted[0],
         sorted[REPS - 1]);
}

static void usage(const char *prog, FILE *out) {
  fprintf(out,
          "usage: %s [--quick]\n\n"
          "Microbenchmarks of the loop layer, each beside its peer: buffer "
          "alloc+release\nagainst malloc+free, execute() against a "
          "mutex-protected list, timers against\ntimerfd. Median of 5 "
          "interleaved runs, ns per operation. Reads no\nconfiguration.\n\n"
          "  --quick     fewer iterations\n  -h, --help  this text\n\n"
          "Examples:\n  %s\n  %s --quick\n",
          prog, prog, prog);
}

int main(int argc, char **argv) {
  bench_env env = {0};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      env.quick = true;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(argv[0], stdout);
      return 0;
    } else {
      fprintf(stderr, "%s: unknown option '%s'\n", argv[0], argv[i]);
      usage(argv[0], stderr);
      return 2;
    }
  }
  if (setup(&env) != 0)
    return 1;

  /* One untimed pass warms caches and carves the slabs. */
  for (size_t b = 0; b < NBENCH; b++)
    benches[b].run(&env, benches[b].size, 10000);

  static double ns[NBENCH][REPS];
  for (int rep = 0; rep < REPS; rep++)
    for (size_t b = 0; b < NBENCH; b++)
      ns[b][rep] =
          benches[b].run(&env, benches[b].size,
                         env.quick ? benches[b].quick_iters : benches[b].iters);

  printf("weft microbench: median of %d interleaved runs%s\n", REPS,
         env.quick ? " (--quick)" : "");
  printf("%-32s %10s  %s\n", "benchmark", "ns/op", "spread (min..max)");
  for (size_t b = 0; b < NBENCH; b++)
    print_row(benches[b].name, ns[b]);
  teardown(&env);
  return 0;
}
