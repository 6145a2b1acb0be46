/* SPDX-License-Identifier: Apache-2.0 */
/* Loop groups: life cycle, sizes, round-robin, pinning, loop-local keys,
 * close hooks, weft_loop_current, and the join-from-a-loop refusal. */
#include "harness.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <weft/buf.h>
#include <weft/clock.h>
#include <weft/error.h>
#include <weft/loop.h>

static weft_loop_group *new_group(int n, bool pin) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = n;
  o.pin = pin;
  weft_loop_group *g = NULL;
  ck_assert_int_eq(weft_loop_group_new(&g, &o), 0);
  return g;
}

/* Runs fn on `loop` and waits for it. */
#define run_on(loop, fn, arg) ck_assert_int_eq(weft_loop_call(loop, fn, arg), 0)

START_TEST(loop_group_lifecycle_start_stop_join_free) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  ck_assert_int_eq(o.n_loops, 0);
  ck_assert_int_eq(o.busy_poll_us, WEFT_BUSY_POLL_US_DEFAULT);
  ck_assert(!o.pin);
  ck_assert_int_eq(o.poll_budget, 64);
  ck_assert_str_eq(o.name, "weft");
  ck_assert_uint_eq(o.pool_retain_bytes, WEFT_POOL_RETAIN_BYTES_DEFAULT);
  weft_loop_group *g = new_group(2, false);
  ck_assert_int_eq(weft_loop_group_size(g), 2);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  ck_assert_int_eq(weft_loop_group_start(g), WEFT_ESTATE);
  weft_loop_group_stop(g);
  weft_loop_group_stop(g); /* idempotent */
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
  /* A group that never ran frees cleanly too. */
  weft_loop_group_free(new_group(1, false));
}
END_TEST

START_TEST(loop_group_new_bad_options_einval) {
  weft_loop_options o;
  weft_loop_group *g = NULL;
  weft_loop_options_init(&o);
  o.busy_poll_us = -2;
  ck_assert_int_eq(weft_loop_group_new(&g, &o), WEFT_EINVAL);
  weft_loop_options_init(&o);
  o.n_loops = -1;
  ck_assert_int_eq(weft_loop_group_new(&g, &o), WEFT_EINVAL);
  weft_loop_options_init(&o);
  o.poll_budget = 0;
  ck_assert_int_eq(weft_loop_group_new(&g, &o), WEFT_EINVAL);
  weft_loop_options_init(&o);
  o.name = "elevenchars";
  ck_assert_int_eq(weft_loop_group_new(&g, &o), WEFT_EINVAL);
  ck_assert_ptr_null(g);
}
END_TEST

static void stop_from_loop(void *arg) { weft_loop_group_stop(arg); }

START_TEST(loop_group_stop_from_loop_thread) {
  weft_loop_group *g = new_group(2, false);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  ck_assert_int_eq(
      weft_loop_execute(weft_loop_group_get(g, 1), stop_from_loop, g), 0);
  ck_assert_int_eq(weft_loop_group_join(g), 0); /* returns: both stopped */
  weft_loop_group_free(g);
}
END_TEST

/* The default: one loop per allowed CPU less one, at least one. */
START_TEST(loop_group_size_default_leaves_a_cpu) {
  cpu_set_t set;
  ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
  int cpus = CPU_COUNT(&set);
  int expected = cpus > 1 ? cpus - 1 : 1;
  ck_assert_int_eq(weft_loop_default_count(), expected);
  weft_loop_group *g = NULL;
  ck_assert_int_eq(weft_loop_group_new(&g, NULL), 0);
  ck_assert_int_eq(weft_loop_group_size(g), weft_loop_default_count());
  ck_assert_ptr_null(weft_loop_group_get(g, -1));
  ck_assert_ptr_null(weft_loop_group_get(g, weft_loop_group_size(g)));
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
}
END_TEST

/* Allowed CPUs, not online ones: under taskset -c 0 the default is one
 * loop (Check forks each test, so the affinity change stays here). */
START_TEST(loop_group_size_default_follows_affinity) {
  cpu_set_t set;
  ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
  int first = 0;
  while (!CPU_ISSET(first, &set))
    first++;
  CPU_ZERO(&set);
  CPU_SET(first, &set);
  ck_assert_int_eq(sched_setaffinity(0, sizeof set, &set), 0);
  ck_assert_int_eq(weft_loop_default_count(), 1);
}
END_TEST

START_TEST(loop_group_next_round_robin) {
  weft_loop_group *g = new_group(3, false);
  for (int i = 0; i < 9; i++) {
    weft_loop *l = weft_loop_group_next(g);
    ck_assert_ptr_eq(l, weft_loop_group_get(g, i % 3));
    ck_assert_int_eq(weft_loop_index(l), i % 3);
  }
  weft_loop_group_free(g);
}
END_TEST

/* ---- Pinning and thread names -------------------------------------------- */

struct affinity {
  cpu_set_t set;
  int n_cpus;
  int cpu;
  char name[16];
};
static int read_affinity(void *arg) {
  struct affinity *a = arg;
  cpu_set_t set;
  ck_assert_int_eq(pthread_getaffinity_np(pthread_self(), sizeof set, &set), 0);
  a->set = set;
  a->n_cpus = CPU_COUNT(&set);
  a->cpu = -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) {
      a->cpu = c;
      break;
    }
  pthread_getname_np(pthread_self(), a->name, sizeof a->name);
  return 0;
}

/* The i-th CPU this process may use. */
static int nth_allowed_cpu(int i, int *count) {
  cpu_set_t set;
  ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
  *count = CPU_COUNT(&set);
  i %= *count;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set) && i-- == 0)
      return c;
  return -1;
}

START_TEST(loop_group_pin_on_one_cpu_each) {
  weft_loop_group *g = new_group(2, true);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  for (int i = 0; i < 2; i++) {
    struct affinity a;
    run_on(weft_loop_group_get(g, i), read_affinity, &a);
    int count;
    ck_assert_int_eq(a.n_cpus, 1);
    ck_assert_int_eq(a.cpu, nth_allowed_cpu(i, &count));
    char want[16];
    snprintf(want, sizeof want, "weft-%d", i);
    ck_assert_str_eq(a.name, want);
  }
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
}
END_TEST

START_TEST(loop_group_pin_off_keeps_process_affinity) {
  weft_loop_group *g = new_group(2, false);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  int count;
  nth_allowed_cpu(0, &count);
  for (int i = 0; i < 2; i++) {
    struct affinity a;
    run_on(weft_loop_group_get(g, i), read_affinity, &a);
    ck_assert_int_eq(a.n_cpus, count);
  }
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
}
END_TEST

/* The default places nothing: each loop thread may run on every CPU the
 * process may (its mask equals the process's), as Netty's and Redis'
 * threads do; pinned processes on a shared host queued on one CPU. Check
 * forks each test, so a narrower mask is made here too (taskset's case):
 * still the process's, not one CPU of it. */
START_TEST(loop_group_default_does_not_pin) {
  cpu_set_t process;
  ck_assert_int_eq(sched_getaffinity(0, sizeof process, &process), 0);
  for (int round = 0; round < 2; round++) {
    weft_loop_options o;
    weft_loop_options_init(&o);
    o.n_loops = 2;
    weft_loop_group *g = NULL;
    ck_assert_int_eq(weft_loop_group_new(&g, &o), 0);
    ck_assert_int_eq(weft_loop_group_start(g), 0);
    for (int i = 0; i < 2; i++) {
      struct affinity a;
      run_on(weft_loop_group_get(g, i), read_affinity, &a);
      ck_assert_msg(CPU_EQUAL(&a.set, &process),
                    "loop %d: %d CPUs, the process %d", i, a.n_cpus,
                    CPU_COUNT(&process));
    }
    weft_loop_group_stop(g);
    ck_assert_int_eq(weft_loop_group_join(g), 0);
    weft_loop_group_free(g);
    if (CPU_COUNT(&process) < 2)
      break; /* one CPU: no narrower mask to try */
    int first = nth_allowed_cpu(0, &(int){0});
    int second = nth_allowed_cpu(1, &(int){0});
    CPU_ZERO(&process);
    CPU_SET(first, &process);
    CPU_SET(second, &process);
    ck_assert_int_eq(sched_setaffinity(0, sizeof process, &process), 0);
  }
}
END_TEST

/* ---- Keys and locals ----------------------------------------------------- */

struct locals {
  int key;
  void *value;
  void *got;
};
static int set_local(void *arg) {
  struct locals *l = arg;
  weft_loop *loop = weft_loop_current();
  ck_assert_ptr_null(weft_loop_get_local(loop, l->key));
  weft_loop_set_local(loop, l->key, l->value);
  return 0;
}
static int get_local(void *arg) {
  struct locals *l = arg;
  l->got = weft_loop_get_local(weft_loop_current(), l->key);
  return 0;
}

START_TEST(loop_group_keys_locals_per_loop) {
  int k1 = weft_loop_key_create();
  int k2 = weft_loop_key_create();
  ck_assert_int_ge(k1, 0);
  ck_assert_int_ne(k1, k2);
  weft_loop_group *g = new_group(2, false);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  static int a, b;
  struct locals l0 = {k1, &a, NULL}, l1 = {k1, &b, NULL};
  run_on(weft_loop_group_get(g, 0), set_local, &l0);
  run_on(weft_loop_group_get(g, 1), set_local, &l1);
  run_on(weft_loop_group_get(g, 0), get_local, &l0);
  run_on(weft_loop_group_get(g, 1), get_local, &l1);
  ck_assert_ptr_eq(l0.got, &a);
  ck_assert_ptr_eq(l1.got, &b);
  struct locals other = {k2, NULL, &a};
  run_on(weft_loop_group_get(g, 0), get_local, &other);
  ck_assert_ptr_null(other.got);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
}
END_TEST

START_TEST(loop_group_key_create_exhausted_enospc) {
  /* Each test runs in its own process, so the counter starts at 0. */
  int last = -1;
  for (int i = 0; i < WEFT_LOOP_MAX_KEYS; i++) {
    int k = weft_loop_key_create();
    ck_assert_int_eq(k, last + 1);
    last = k;
  }
  ck_assert_int_eq(weft_loop_key_create(), WEFT_ENOSPC);
  ck_assert_int_eq(weft_loop_key_create(), WEFT_ENOSPC);
}
END_TEST

/* ---- Close hooks --------------------------------------------------------- */

struct hooks {
  weft_loop *loop;
  int order[3];
  int n;
  int on_loop_thread;
};
static struct hooks hk;
static void hook(void *arg) {
  int id = (int)(intptr_t)arg;
  hk.order[hk.n++] = id;
  if (weft_loop_in_loop(hk.loop) && weft_loop_current() == hk.loop)
    hk.on_loop_thread++;
}
static int register_hooks(void *arg) {
  (void)arg;
  for (intptr_t i = 1; i <= 3; i++)
    ck_assert_int_eq(weft_loop_on_close(hk.loop, hook, (void *)i), 0);
  return 0;
}

START_TEST(loop_group_on_close_hooks_lifo_on_loop_thread) {
  weft_loop_group *g = new_group(1, false);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  hk.loop = weft_loop_group_get(g, 0);
  run_on(hk.loop, register_hooks, NULL);
  ck_assert_int_eq(hk.n, 0); /* not before the stop */
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  ck_assert_int_eq(hk.n, 3);
  ck_assert_int_eq(hk.order[0], 3);
  ck_assert_int_eq(hk.order[1], 2);
  ck_assert_int_eq(hk.order[2], 1);
  ck_assert_int_eq(hk.on_loop_thread, 3);
  weft_loop_group_free(g);
}
END_TEST

/* A hook that a hook registers runs in the next round, after the tasks
 * queued in between: how the channel book frees the transports' loop state
 * only after the work its channels' closes queued (issue 28: a uring
 * delivery task ran on freed loop state at shutdown). */
static struct {
  weft_loop *loop;
  int step;               /* counts what ran, in order */
  int task_at, second_at; /* the step at which each ran */
} rounds;
static void rounds_task(void *arg) {
  (void)arg;
  rounds.task_at = ++rounds.step;
}
static void rounds_second_hook(void *arg) {
  (void)arg;
  rounds.second_at = ++rounds.step;
}
static void rounds_first_hook(void *arg) {
  (void)arg;
  ck_assert_int_eq(weft_loop_execute(rounds.loop, rounds_task, NULL), 0);
  ck_assert_int_eq(weft_loop_on_close(rounds.loop, rounds_second_hook, NULL),
                   0);
}
static int register_rounds(void *arg) {
  (void)arg;
  ck_assert_int_eq(weft_loop_on_close(rounds.loop, rounds_first_hook, NULL), 0);
  return 0;
}

START_TEST(loop_group_hook_of_a_hook_runs_after_its_tasks) {
  weft_loop_group *g = new_group(1, false);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  rounds.loop = weft_loop_group_get(g, 0);
  run_on(rounds.loop, register_rounds, NULL);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  ck_assert_int_eq(rounds.task_at, 1);
  ck_assert_int_eq(rounds.second_at, 2);
  weft_loop_group_free(g);
}
END_TEST

/* ---- weft_loop_call ------------------------------------------------------*/

struct nested {
  weft_loop *loop;
  bool inner_on_loop;
  int inner_rc;
};
static int answer(void *arg) {
  struct nested *n = arg;
  n->inner_on_loop = weft_loop_in_loop(n->loop);
  return 42;
}
static int call_from_loop(void *arg) {
  struct nested *n = arg;
  n->inner_rc = weft_loop_call(n->loop, answer, n); /* inline: no deadlock */
  return -7;
}

START_TEST(loop_call_returns_result_inline_on_loop_refused_after_finish) {
  weft_loop_group *g = new_group(1, false);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  struct nested n = {.loop = weft_loop_group_get(g, 0)};
  ck_assert_int_eq(weft_loop_call(n.loop, call_from_loop, &n), -7);
  ck_assert_int_eq(n.inner_rc, 42);
  ck_assert(n.inner_on_loop);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  n.inner_on_loop = false;
  ck_assert_int_eq(weft_loop_call(n.loop, answer, &n), WEFT_ECLOSED);
  ck_assert(!n.inner_on_loop);
  weft_loop_group_free(g);
}
END_TEST

/* ---- Current loop and join refusal ----------------------------------------*/

struct whoami {
  weft_loop *self;
  weft_loop *other;
  weft_loop *current;
  bool in_self;
  bool in_other;
  int join_result;
  weft_loop_group *group;
};
static int whoami_task(void *arg) {
  struct whoami *w = arg;
  w->current = weft_loop_current();
  w->in_self = weft_loop_in_loop(w->self);
  w->in_other = weft_loop_in_loop(w->other);
  w->join_result = weft_loop_group_join(w->group);
  return 0;
}

START_TEST(loop_group_current_and_in_loop) {
  weft_loop_group *g = new_group(2, false);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  ck_assert_ptr_null(weft_loop_current());
  ck_assert(!weft_loop_in_loop(weft_loop_group_get(g, 0)));
  struct whoami w = {weft_loop_group_get(g, 0),
                     weft_loop_group_get(g, 1),
                     NULL,
                     false,
                     true,
                     0,
                     g};
  run_on(w.self, whoami_task, &w);
  ck_assert_ptr_eq(w.current, w.self);
  ck_assert(w.in_self);
  ck_assert(!w.in_other);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
}
END_TEST

START_TEST(loop_group_join_from_loop_thread_einval) {
  weft_loop_group *g = new_group(1, false);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  struct whoami w = {weft_loop_group_get(g, 0), NULL, NULL, false, false, 0, g};
  run_on(w.self, whoami_task, &w);
  ck_assert_int_eq(w.join_result, WEFT_EINVAL);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
}
END_TEST

/* ---- The loop's pool ----------------------------------------------------- */

static weft_buf *leaked;
static int leak_buffer(void *arg) {
  weft_pool *pool = weft_loop_pool(weft_loop_current());
  ck_assert_ptr_nonnull(pool);
  leaked = weft_buf_alloc(pool, 100);
  ck_assert_ptr_nonnull(leaked);
  return 0;
}

START_TEST(loop_group_join_reports_leaked_buffers_eleak) {
  th_log_capture_start(); /* keep the expected leak report off stderr */
  weft_loop_group *g = new_group(1, false);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  run_on(weft_loop_group_get(g, 0), leak_buffer, NULL);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), WEFT_ELEAK);
  ck_assert_ptr_null(weft_loop_pool(weft_loop_group_get(g, 0)));
  weft_loop_group_free(g);
  th_log_capture_stop();
}
END_TEST

/* On the loop: a buffer allocated and released; returns the slabs its pool
 * released (the budget given to the group is 0). */
static int alloc_release_count_released(void *arg) {
  weft_pool *pool = weft_loop_pool(weft_loop_current());
  ck_assert_ptr_nonnull(pool);
  weft_buf *b = weft_buf_alloc(pool, 100);
  ck_assert_ptr_nonnull(b);
  weft_buf_release(b);
  weft_pool_stats st;
  weft_pool_stats_get(pool, &st);
  *(size_t *)arg = st.slabs;
  return (int)st.slabs_released;
}

START_TEST(loop_group_pool_retain_bytes_reaches_loop_pools) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = 1;
  o.pin = false;
  o.pool_retain_bytes = 0;
  weft_loop_group *g = NULL;
  ck_assert_int_eq(weft_loop_group_new(&g, &o), 0);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  size_t slabs = 99;
  /* Budget 0: the slab went back as soon as its only buffer did. */
  ck_assert_int_eq(weft_loop_call(weft_loop_group_get(g, 0),
                                  alloc_release_count_released, &slabs),
                   1);
  ck_assert_uint_eq(slabs, 0);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "loop_group", "core", 60, loop_group_lifecycle_start_stop_join_free,
      loop_group_new_bad_options_einval, loop_group_stop_from_loop_thread,
      loop_group_size_default_leaves_a_cpu,
      loop_group_size_default_follows_affinity, loop_group_next_round_robin,
      loop_group_pin_on_one_cpu_each, loop_group_pin_off_keeps_process_affinity,
      loop_group_default_does_not_pin, loop_group_keys_locals_per_loop,
      loop_group_key_create_exhausted_enospc,
      loop_group_on_close_hooks_lifo_on_loop_thread,
      loop_group_hook_of_a_hook_runs_after_its_tasks,
      loop_call_returns_result_inline_on_loop_refused_after_finish,
      loop_group_current_and_in_loop, loop_group_join_from_loop_thread_einval,
      loop_group_join_reports_leaked_buffers_eleak,
      loop_group_pool_retain_bytes_reaches_loop_pools, NULL);
}
