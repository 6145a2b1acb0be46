/* SPDX-License-Identifier: Apache-2.0 */
/* Loop groups: N loops, each on its own (optionally pinned) thread. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/buf.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/loop.h>

#include "loop/loop_internal.h"

/* Longest thread name prefix: "<name>-<i>" must fit pthread's 16 bytes. */
#define NAME_MAX_CHARS 10

struct weft_loop_group {
  weft_loop **loops;
  int n;
  bool pin;
  char name[NAME_MAX_CHARS + 1];
  _Atomic unsigned next; /* round-robin counter (weft_loop_group_next) */
  bool started;          /* start succeeded: threads to join */
  bool joined;
  int join_result;
};

void weft_loop_options_init(weft_loop_options *opts) {
  opts->n_loops = 0;
  opts->busy_poll_us = WEFT_BUSY_POLL_US_DEFAULT;
  opts->busy_poll_adaptive = true;
  opts->pin = false; /* see weft_loop_options.pin */
  opts->poll_budget = WEFT__DEFAULT_POLL_BUDGET;
  opts->name = "weft";
  opts->pool_retain_bytes = WEFT_POOL_RETAIN_BYTES_DEFAULT;
}

static int check_options(const weft_loop_options *o) {
  if (o->n_loops < 0 || o->busy_poll_us < -1 || o->poll_budget <= 0)
    return WEFT_EINVAL;
  if (o->name == NULL || o->name[0] == '\0' || strlen(o->name) > NAME_MAX_CHARS)
    return WEFT_EINVAL;
  return 0;
}

int weft_loop_group_new(weft_loop_group **out, const weft_loop_options *opts) {
  weft_loop_options defaults;
  if (opts == NULL) {
    weft_loop_options_init(&defaults);
    opts = &defaults;
  }
  int err = check_options(opts);
  if (err != 0)
    return err;
  int n = opts->n_loops == 0 ? weft_loop_default_count() : opts->n_loops;

  weft_loop_group *group = calloc(1, sizeof *group);
  if (group == NULL)
    return WEFT_ENOMEM;
  group->loops = calloc((size_t)n, sizeof *group->loops);
  if (group->loops == NULL) {
    err = WEFT_ENOMEM;
    goto failed_loops_array;
  }
  group->n = n;
  group->pin = opts->pin;
  snprintf(group->name, sizeof group->name, "%s", opts->name);
  atomic_init(&group->next, 0);

  int created;
  for (created = 0; created < n; created++) {
    err = weft__loop_new(&group->loops[created], group, created,
                         opts->busy_poll_us, opts->busy_poll_adaptive,
                         opts->poll_budget);
    if (err != 0)
      goto failed_loop_new;
    /* Read by the loop thread when it creates its pool, after start. */
    group->loops[created]->pool_retain_bytes = opts->pool_retain_bytes;
  }
  *out = group;
  return 0;

failed_loop_new:
  while (created-- > 0)
    weft__loop_free(group->loops[created]);
  free(group->loops);
failed_loops_array:
  free(group);
  return err;
}

/* Why one CPU is left over: measured on a 2-core machine with the client on
 * the same host (docs/journal/2026-11-23-issue-17.md,
 * "The default loop count"), one loop
 * beat two at every redis-benchmark setting (0.71x at -P 1 -c 50 with two
 * loops); the second loop's wake-ups take the CPU the rest of the machine
 * needs. Redis' redis.conf gives the same advice for its I/O threads
 * ("leaving at least one spare core"). */
int weft_loop_default_count(void) {
  cpu_set_t set;
  int cpus = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    cpus = CPU_COUNT(&set);
  else
    cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
  return cpus > 1 ? cpus - 1 : 1;
}

/* The CPUs this process may run on, in order. "Online CPU i" in the docs
 * means the i-th of these: in a container or under taskset the allowed set
 * is what can actually be pinned to. Returns the count (0 on failure). */
static int allowed_cpus(int *cpus, int max) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return 0;
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && n < max; c++)
    if (CPU_ISSET(c, &set))
      cpus[n++] = c;
  return n;
}

static void stop_and_join(weft_loop_group *group, int started) {
  for (int i = 0; i < started; i++)
    weft__loop_request_stop(group->loops[i]);
  for (int i = 0; i < started; i++)
    pthread_join(group->loops[i]->thread, NULL);
}

int weft_loop_group_start(weft_loop_group *group) {
  weft_loop *self = weft_loop_current();
  if (self != NULL && self->group == group)
    return WEFT_EINVAL;
  if (group->started)
    return WEFT_ESTATE;

  int cpus[CPU_SETSIZE]; /* 4 KiB of stack, once per start */
  int n_cpus = 0;
  if (group->pin) {
    n_cpus = allowed_cpus(cpus, CPU_SETSIZE);
    if (n_cpus == 0)
      weft_log(WEFT_LOG_WARN, "sched_getaffinity: %s; loops run unpinned",
               weft_strerror(-errno));
  }
  int i;
  for (i = 0; i < group->n; i++) {
    weft_loop *loop = group->loops[i];
    /* Written before pthread_create, which orders them before the thread
     * reads them. */
    loop->pin_cpu = n_cpus > 0 ? cpus[i % n_cpus] : -1;
    /* Linux thread names hold 15 bytes: a huge group gets cut names. */
    char name[32];
    snprintf(name, sizeof name, "%s-%d", group->name, i);
    snprintf(loop->thread_name, sizeof loop->thread_name, "%.15s", name);
    int err = pthread_create(&loop->thread, NULL, weft__loop_thread, loop);
    if (err != 0) {
      weft_log(WEFT_LOG_ERROR, "loop %d: pthread_create: %s", i,
               weft_strerror(-err));
      stop_and_join(group, i);
      return -err;
    }
  }
  group->started = true;
  return 0;
}

void weft_loop_group_stop(weft_loop_group *group) {
  for (int i = 0; i < group->n; i++)
    weft__loop_request_stop(group->loops[i]);
}

int weft_loop_group_join(weft_loop_group *group) {
  weft_loop *self = weft_loop_current();
  if (self != NULL && self->group == group)
    return WEFT_EINVAL; /* it would wait for itself */
  if (!group->started || group->joined)
    return group->joined ? group->join_result : 0;
  size_t leaks = 0;
  for (int i = 0; i < group->n; i++) {
    pthread_join(group->loops[i]->thread, NULL);
    leaks += weft__loop_leaks(group->loops[i]);
  }
  group->joined = true;
  group->join_result = leaks > 0 ? WEFT_ELEAK : 0;
  return group->join_result;
}

void weft_loop_group_free(weft_loop_group *group) {
  if (group == NULL)
    return;
  if (group->started && !group->joined) {
    /* A contract breach (free before join), but stopping and joining here
     * beats freeing memory that running threads use. */
    weft_log(WEFT_LOG_WARN, "weft_loop_group_free: group not joined; "
                            "stopping it first");
    weft_loop_group_stop(group);
    weft_loop_group_join(group);
  }
  for (int i = 0; i < group->n; i++)
    weft__loop_free(group->loops[i]);
  free(group->loops);
  free(group);
}

int weft_loop_group_size(const weft_loop_group *group) { return group->n; }

weft_loop *weft_loop_group_get(weft_loop_group *group, int i) {
  if (i < 0 || i >= group->n)
    return NULL;
  return group->loops[i];
}

weft_loop *weft_loop_group_next(weft_loop_group *group) {
  /* Relaxed: only the spread matters, not an order with other memory. */
  unsigned i = atomic_fetch_add_explicit(&group->next, 1, memory_order_relaxed);
  return group->loops[i % (unsigned)group->n];
}
