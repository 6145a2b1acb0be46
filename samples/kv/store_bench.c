/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kv-store-bench: the KV store's two concurrency designs, measured.
 *
 *   weft-kv-store-bench [--quick] [--keys N] [--ops N] [--reps N]
 *
 * Both designs run on the same weft_loop_group of 2 loops (one per core of
 * the machine they were written for), uniform random keys, 16-byte keys,
 * 32-byte values, every key present from the start:
 *
 *   striped   one kv_store with 64 lock stripes shared by both loops; each
 *             loop runs its share of GET/SET calls directly.
 *   sharded   shard per loop with message passing: each loop owns half the
 *             keys in its own kv_store created with `single_thread` (no
 *             locks at all, same table code). A request for a key of the
 *             other shard goes to its owner with weft_loop_execute(); the
 *             owner runs it and sends the reply (the value's blob for a
 *             GET) back the same way; the requester counts completions. At
 *             most WINDOW requests per loop are in flight, like a pipelined
 *             client connection; the driver yields to the loop every BATCH
 *             operations so replies and remote requests are served.
 *
 * Each loop performs `ops` operations (GET or SET by the mix), the
 * throughput is 2 * ops / (last loop done - first loop started). Every
 * configuration runs `reps` times, interleaved (run 1 of each, then run 2
 * of each) so a noisy neighbour hurts all alike; the table shows the
 * median and the spread. /proc/loadavg is printed before and after: the
 * machine is shared.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/clock.h>
#include <weft/error.h>
#include <weft/loop.h>

#include "store.h"

#define KEY_LEN 16
#define VALUE_LEN 32
#define WINDOW 256 /* remote requests in flight per loop */
#define BATCH 64   /* operations per driver task before yielding */
#define N_LOOPS 2

typedef struct bench_cfg {
  size_t n_keys, ops, reps;
} bench_cfg;

static char (*keys)[KEY_LEN]; /* key i = "key:%012zu" */
static const char value[VALUE_LEN] = "0123456789abcdef0123456789abcdef";

/* One GET or SET on `s`; the GET's blob is released at once, as a server
 * releases it after encoding the reply. */
static void do_op(kv_store *s, size_t key, bool set) {
  if (set) {
    kv_set(s, keys[key], KEY_LEN, value, VALUE_LEN, NULL);
  } else {
    kv_blob *b;
    kv_get(s, keys[key], KEY_LEN, &b);
    kv_blob_release(b);
  }
}

/* Both loops spin here until both arrived, so they start together. */
static _Atomic int barrier;

static void barrier_wait(void) {
  atomic_fetch_add(&barrier, 1);
  while (atomic_load(&barrier) < N_LOOPS)
    sched_yield();
}

/* ------------------------------------------------------------------------ */
/* (a) striped store                                                         */

typedef struct striped_job {
  kv_store *store;
  size_t ops, n_keys;
  unsigned set_pct;
  uint64_t seed, start, end;
  _Atomic bool done;
} striped_job;

static void striped_run(void *arg) {
  striped_job *j = arg;
  uint64_t rng = j->seed;
  barrier_wait();
  j->start = weft_now_ns();
  for (size_t i = 0; i < j->ops; i++) {
    uint64_t r = kv_xorshift64(&rng);
    do_op(j->store, (size_t)(r % j->n_keys), (r >> 40) % 100 < j->set_pct);
  }
  j->end = weft_now_ns();
  atomic_store_explicit(&j->done, true, memory_order_release);
}

/* ------------------------------------------------------------------------ */
/* (b) shard per loop with message passing                                   */

typedef struct shard shard;

struct shard {
  kv_store *store; /* only this loop's thread touches it */
  weft_loop *loop;
  shard *peer;
  size_t ops, n_keys, issued, completed, outstanding, remote;
  unsigned set_pct;
  bool parked; /* window full: the next reply restarts the driver */
  uint64_t rng, start, end;
  _Atomic bool done;
};

typedef struct request {
  shard *origin;
  size_t key;
  bool set;
  kv_blob *reply; /* GET's value, owned by the request until released */
} request;

static void shard_driver(void *arg);

static void shard_check_done(shard *sh) {
  if (sh->completed == sh->ops) {
    sh->end = weft_now_ns();
    atomic_store_explicit(&sh->done, true, memory_order_release);
  }
}

/* A task queue never gives ENOMEM for long: retry after yielding. */
static void execute_or_retry(weft_loop *loop, weft_task_cb cb, void *arg) {
  int err;
  while ((err = weft_loop_execute(loop, cb, arg)) == WEFT_ENOMEM)
    sched_yield();
  if (err != 0) {
    fprintf(stderr, "weft_loop_execute: %s\n", weft_strerror(err));
    exit(1);
  }
}

/* On the requester's loop: the reply arrived. */
static void shard_reply(void *arg) {
  request *req = arg;
  shard *sh = req->origin;
  kv_blob_release(req->reply);
  free(req);
  sh->completed++;
  sh->outstanding--;
  if (sh->parked && sh->outstanding <= WINDOW / 2) {
    sh->parked = false;
    shard_driver(sh); /* it checks for the end itself */
    return;
  }
  shard_check_done(sh); /* the last access: main reuses `sh` once done */
}

/* On the owner's loop: run the request on its own table, send the reply. */
static void shard_serve(void *arg) {
  request *req = arg;
  shard *owner = req->origin->peer;
  if (req->set)
    kv_set(owner->store, keys[req->key], KEY_LEN, value, VALUE_LEN, NULL);
  else
    kv_get(owner->store, keys[req->key], KEY_LEN, &req->reply);
  execute_or_retry(req->origin->loop, shard_reply, req);
}

/* Issues up to BATCH operations, then requeues itself behind whatever
 * arrived meanwhile (remote requests, replies). */
static void shard_driver(void *arg) {
  shard *sh = arg;
  for (int b = 0; b < BATCH && sh->issued < sh->ops; b++) {
    uint64_t r = kv_xorshift64(&sh->rng);
    size_t key = (size_t)(r % sh->n_keys);
    bool set = (r >> 40) % 100 < sh->set_pct;
    if ((key & 1) == (size_t)weft_loop_index(sh->loop)) {
      do_op(sh->store, key, set);
      sh->completed++;
    } else {
      if (sh->outstanding == WINDOW) {
        sh->parked = true;
        return;
      }
      request *req = malloc(sizeof(*req));
      if (req == NULL)
        abort();
      *req = (request){sh, key, set, NULL};
      sh->outstanding++;
      sh->remote++;
      execute_or_retry(sh->peer->loop, shard_serve, req);
    }
    sh->issued++;
  }
  if (sh->issued < sh->ops)
    execute_or_retry(sh->loop, shard_driver, sh);
  else
    shard_check_done(sh); /* the last access: main reuses `sh` once done */
}

static void shard_start(void *arg) {
  shard *sh = arg;
  barrier_wait();
  sh->start = weft_now_ns();
  shard_driver(sh);
}

/* ------------------------------------------------------------------------ */
/* Runs                                                                      */

typedef struct env {
  bench_cfg cfg;
  weft_loop_group *group;
  kv_store *striped;
  kv_store *shards[N_LOOPS];
} env;

static void wait_done(_Atomic bool *a, _Atomic bool *b) {
  struct timespec nap = {0, 1000000}; /* 1 ms: leave the cores to the loops */
  while (!atomic_load_explicit(a, memory_order_acquire) ||
         !atomic_load_explicit(b, memory_order_acquire))
    nanosleep(&nap, NULL);
}

static double ops_per_sec(size_t ops, uint64_t s0, uint64_t s1, uint64_t e0,
                          uint64_t e1) {
  uint64_t start = s0 < s1 ? s0 : s1, end = e0 > e1 ? e0 : e1;
  return (double)ops / ((double)(end - start) / 1e9);
}

static double run_striped(env *e, unsigned set_pct, uint64_t seed) {
  static striped_job j[N_LOOPS];
  atomic_store(&barrier, 0);
  for (int i = 0; i < N_LOOPS; i++) {
    j[i] = (striped_job){e->striped,
                         e->cfg.ops,
                         e->cfg.n_keys,
                         set_pct,
                         seed * (uint64_t)(i + 7) | 1,
                         0,
                         0,
                         false};
    execute_or_retry(weft_loop_group_get(e->group, i), striped_run, &j[i]);
  }
  wait_done(&j[0].done, &j[1].done);
  return ops_per_sec(N_LOOPS * e->cfg.ops, j[0].start, j[1].start, j[0].end,
                     j[1].end);
}

static double run_sharded(env *e, unsigned set_pct, uint64_t seed,
                          double *remote_frac) {
  static shard sh[N_LOOPS];
  atomic_store(&barrier, 0);
  for (int i = 0; i < N_LOOPS; i++) {
    sh[i] = (shard){.store = e->shards[i],
                    .loop = weft_loop_group_get(e->group, i),
                    .peer = &sh[1 - i],
                    .ops = e->cfg.ops,
                    .n_keys = e->cfg.n_keys,
                    .set_pct = set_pct,
                    .rng = seed * (uint64_t)(i + 7) | 1};
  }
  for (int i = 0; i < N_LOOPS; i++)
    execute_or_retry(sh[i].loop, shard_start, &sh[i]);
  wait_done(&sh[0].done, &sh[1].done);
  /* Replies for the other loop may still be in flight to it; they were
   * counted by the time both are done, so nothing is outstanding now. */
  *remote_frac =
      (double)(sh[0].remote + sh[1].remote) / (double)(N_LOOPS * e->cfg.ops);
  return ops_per_sec(N_LOOPS * e->cfg.ops, sh[0].start, sh[1].start, sh[0].end,
                     sh[1].end);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void print_load(const char *when) {
  char buf[128] = "?";
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fgets(buf, sizeof(buf), f) == NULL)
      strcpy(buf, "?\n");
    fclose(f);
  }
  printf("load average %s: %s", when, buf);
}

static int env_init(env *e) {
  keys = malloc(e->cfg.n_keys * KEY_LEN);
  if (keys == NULL)
    return WEFT_ENOMEM;
  for (size_t i = 0; i < e->cfg.n_keys; i++) {
    char tmp[32]; /* "key:" + 12 digits: n_keys stays below 10^12 */
    snprintf(tmp, sizeof(tmp), "key:%012zu", i);
    memcpy(keys[i], tmp, KEY_LEN);
  }
  int err = kv_store_new(&e->striped, NULL);
  kv_store_options o;
  kv_store_options_init(&o);
  o.single_thread = true;
  for (int i = 0; err == 0 && i < N_LOOPS; i++)
    err = kv_store_new(&e->shards[i], &o);
  if (err != 0)
    return err;
  /* Every key present from the start, in both designs. */
  for (size_t i = 0; i < e->cfg.n_keys; i++) {
    kv_set(e->striped, keys[i], KEY_LEN, value, VALUE_LEN, NULL);
    kv_set(e->shards[i & 1], keys[i], KEY_LEN, value, VALUE_LEN, NULL);
  }
  weft_loop_options lo;
  weft_loop_options_init(&lo);
  lo.n_loops = N_LOOPS;
  lo.name = "kvbench";
  err = weft_loop_group_new(&e->group, &lo);
  if (err == 0)
    err = weft_loop_group_start(e->group);
  return err;
}

static void env_fini(env *e) {
  if (e->group) {
    weft_loop_group_stop(e->group);
    weft_loop_group_join(e->group);
    weft_loop_group_free(e->group);
  }
  kv_store_free(e->striped);
  for (int i = 0; i < N_LOOPS; i++)
    kv_store_free(e->shards[i]);
  free(keys);
}

/* Returns 0 to run, 1 when --help was answered, -1 on bad usage. */
static int parse_args(int argc, char **argv, bench_cfg *cfg) {
  *cfg = (bench_cfg){100000, 2000000, 5};
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--quick") == 0) {
      cfg->ops = 200000;
      cfg->reps = 3;
    } else if (i + 1 < argc && strcmp(argv[i], "--keys") == 0) {
      cfg->n_keys = strtoull(argv[++i], NULL, 10);
    } else if (i + 1 < argc && strcmp(argv[i], "--ops") == 0) {
      cfg->ops = strtoull(argv[++i], NULL, 10);
    } else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) {
      cfg->reps = strtoull(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: %s [--quick] [--keys N] [--ops N] [--reps N]\n\n"
             "The KV store with striped locks beside one shard per loop "
             "(messages between\nloops), on the same operations. Reads no "
             "configuration.\n\nExamples:\n  %s --quick\n"
             "  %s --keys 1000000 --ops 4000000 --reps 7\n",
             argv[0], argv[0], argv[0]);
      return 1;
    } else {
      fprintf(stderr, "usage: %s [--quick] [--keys N] [--ops N] [--reps N]\n",
              argv[0]);
      return -1;
    }
  }
  if (cfg->n_keys < 2 || cfg->n_keys >= 1000000000000ull || cfg->ops == 0 ||
      cfg->reps == 0 || cfg->reps > 99) {
    fprintf(stderr, "2 <= keys < 10^12, ops >= 1, 1 <= reps <= 99\n");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  env e = {0};
  int rc = parse_args(argc, argv, &e.cfg);
  if (rc != 0)
    return rc > 0 ? 0 : 2; /* 1: --help was answered */
  int err = env_init(&e);
  if (err != 0) {
    fprintf(stderr, "setup: %s\n", weft_strerror(err));
    env_fini(&e);
    return 1;
  }
  static const unsigned mixes[] = {10, 50}; /* % SET */
  enum { N_MIX = 2 };
  double res[N_MIX][2][99], remote = 0;
  print_load("before");
  for (size_t r = 0; r < e.cfg.reps; r++)
    for (int m = 0; m < N_MIX; m++) {
      uint64_t seed = 0x9E3779B97F4A7C15ull ^ (r * 131 + (uint64_t)m);
      res[m][0][r] = run_striped(&e, mixes[m], seed);
      res[m][1][r] = run_sharded(&e, mixes[m], seed, &remote);
    }
  print_load("after");
  printf("\n%zu keys, %zu ops per loop, 2 loops, median of %zu interleaved "
         "runs (min..max); remote share in sharded: %.0f%%\n\n",
         e.cfg.n_keys, e.cfg.ops, e.cfg.reps, remote * 100);
  printf("| mix | striped locks, Mops/s | shard per loop, Mops/s | "
         "ratio striped/sharded |\n|---|---:|---:|---:|\n");
  for (int m = 0; m < N_MIX; m++) {
    double med[2];
    char spread[2][48];
    for (int d = 0; d < 2; d++) {
      qsort(res[m][d], e.cfg.reps, sizeof(double), cmp_double);
      med[d] = res[m][d][e.cfg.reps / 2];
      snprintf(spread[d], sizeof(spread[d]), "%.2f (%.2f..%.2f)", med[d] / 1e6,
               res[m][d][0] / 1e6, res[m][d][e.cfg.reps - 1] / 1e6);
    }
    printf("| %u/%u GET/SET | %s | %s | %.2f |\n", 100 - mixes[m], mixes[m],
           spread[0], spread[1], med[0] / med[1]);
  }
  env_fini(&e);
  return 0;
}
