/* SPDX-License-Identifier: Apache-2.0 */
/* The task queue and weft_loop_execute: order, exactly-once, refusal after
 * the loop finished, graceful stop. */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include <weft/clock.h>
#include <weft/error.h>
#include <weft/loop.h>

#include "loop/loop_internal.h"
#include "loop/task_queue.h"

static void finish_group(weft_loop_group *g) {
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
}

/* ---- The queue on its own ------------------------------------------------ */

START_TEST(task_queue_pop_fifo_single_thread) {
  weft__task_queue q;
  weft__task_queue_init(&q);
  weft__task t[5], *out;
  for (int i = 0; i < 5; i++)
    weft__task_queue_push(&q, &t[i]);
  for (int i = 0; i < 5; i++) {
    ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_TASK);
    ck_assert_ptr_eq(out, &t[i]);
  }
  ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_EMPTY);
  ck_assert(!weft__task_queue_busy(&q));
}
END_TEST

START_TEST(task_queue_pop_pending_half_linked) {
  weft__task_queue q;
  weft__task_queue_init(&q);
  weft__task a, b, *out;
  weft__task_queue_push(&q, &a);
  /* A producer preempted between its exchange and its link store. */
  atomic_store(&b.next, NULL);
  weft__task *prev = atomic_exchange(&q.head, &b);
  ck_assert_ptr_eq(prev, &a);
  /* a cannot be handed out yet: the consumer cannot tell it is not the
   * newest node without b linked behind it. */
  ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_PENDING);
  ck_assert(weft__task_queue_busy(&q));
  atomic_store(&prev->next, &b);
  ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_TASK);
  ck_assert_ptr_eq(out, &a);
  ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_TASK);
  ck_assert_ptr_eq(out, &b);
  ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_EMPTY);
  /* Half linked behind the stub (the queue looked empty): still pending,
   * not empty, or the loop would go to sleep on a task. */
  weft__task c;
  atomic_store(&c.next, NULL);
  prev = atomic_exchange(&q.head, &c);
  ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_PENDING);
  atomic_store(&prev->next, &c);
  ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_TASK);
  ck_assert_ptr_eq(out, &c);
}
END_TEST

START_TEST(task_queue_mark_bounds_batch) {
  weft__task_queue q;
  weft__task_queue_init(&q);
  weft__task t[4], *out;
  ck_assert_int_eq(weft__task_queue_pop(&q, weft__task_queue_mark(&q), &out),
                   WEFT__TQ_EMPTY);
  weft__task_queue_push(&q, &t[0]);
  weft__task_queue_push(&q, &t[1]);
  weft__task *mark = weft__task_queue_mark(&q);
  weft__task_queue_push(&q, &t[2]);
  ck_assert_int_eq(weft__task_queue_pop(&q, mark, &out), WEFT__TQ_TASK);
  ck_assert_ptr_eq(out, &t[0]);
  ck_assert_int_eq(weft__task_queue_pop(&q, mark, &out), WEFT__TQ_TASK);
  ck_assert_ptr_eq(out, &t[1]);
  ck_assert_ptr_eq(out, mark); /* the caller stops here */
  /* Drained to the stub, then a new batch whose mark is the stub. */
  ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_TASK);
  ck_assert_ptr_eq(out, &t[2]);
  mark = weft__task_queue_mark(&q);
  weft__task_queue_push(&q, &t[3]);
  ck_assert_int_eq(weft__task_queue_pop(&q, mark, &out), WEFT__TQ_EMPTY);
  ck_assert_int_eq(weft__task_queue_pop(&q, NULL, &out), WEFT__TQ_TASK);
  ck_assert_ptr_eq(out, &t[3]);
}
END_TEST

/* ---- Many producers ------------------------------------------------------ */

#define PRODUCERS 4
#define PER_PRODUCER 100000

struct order_state {
  uint64_t next[PRODUCERS]; /* written by the one loop each producer feeds */
  uint64_t errors[PRODUCERS];
};
static struct order_state order;
static weft_loop_group *order_group;

static void order_task(void *arg) {
  uintptr_t v = (uintptr_t)arg;
  int p = (int)(v >> 24);
  uint64_t seq = v & 0xffffff;
  if (seq != order.next[p])
    order.errors[p]++;
  order.next[p] = seq + 1;
}

static void *producer(void *arg) {
  int p = (int)(intptr_t)arg;
  weft_loop *loop = weft_loop_group_get(order_group, p % 2);
  for (uintptr_t i = 0; i < PER_PRODUCER; i++) {
    int err;
    /* ENOMEM is not expected; anything but 0 fails the test below. */
    err =
        weft_loop_execute(loop, order_task, (void *)(((uintptr_t)p << 24) | i));
    if (err != 0)
      order.errors[p] += 1000000;
  }
  return NULL;
}

START_TEST(task_queue_execute_per_producer_fifo_four_threads) {
  order_group = th_group_start(NULL, 2);
  pthread_t th[PRODUCERS];
  for (int p = 0; p < PRODUCERS; p++)
    ck_assert_int_eq(
        pthread_create(&th[p], NULL, producer, (void *)(intptr_t)p), 0);
  for (int p = 0; p < PRODUCERS; p++)
    pthread_join(th[p], NULL);
  /* The graceful stop runs everything queued; join orders the loops'
   * writes before our reads. */
  weft_loop_group_stop(order_group);
  ck_assert_int_eq(weft_loop_group_join(order_group), 0);
  uint64_t ran = 0;
  for (int i = 0; i < 2; i++) {
    weft_loop_stats st;
    weft_loop_stats_get(weft_loop_group_get(order_group, i), &st);
    ran += st.tasks_run;
  }
  weft_loop_group_free(order_group);
  for (int p = 0; p < PRODUCERS; p++) {
    ck_assert_uint_eq(order.errors[p], 0);
    ck_assert_uint_eq(order.next[p], PER_PRODUCER);
  }
  ck_assert_uint_eq(ran, (uint64_t)PRODUCERS * PER_PRODUCER);
}
END_TEST

/* ---- Execute from the loop itself ---------------------------------------- */

struct self_exec {
  weft_loop *loop;
  _Atomic int second_ran;
  int second_ran_inline;    /* second_ran as seen right after execute */
  uint64_t first_iteration; /* stats.iterations seen by each task */
  uint64_t second_iteration;
  int execute_result;
  _Atomic int done;
};

static void second_task(void *arg) {
  struct self_exec *s = arg;
  weft_loop_stats st;
  weft_loop_stats_get(s->loop, &st);
  s->second_iteration = st.iterations;
  atomic_store(&s->second_ran, 1);
  atomic_store(&s->done, 1);
}

static void first_task(void *arg) {
  struct self_exec *s = arg;
  weft_loop_stats st;
  weft_loop_stats_get(s->loop, &st);
  s->first_iteration = st.iterations;
  s->execute_result = weft_loop_execute(s->loop, second_task, s);
  s->second_ran_inline = atomic_load(&s->second_ran);
}

START_TEST(task_queue_execute_from_loop_runs_later) {
  weft_loop_group *g = th_group_start(NULL, 1);
  static struct self_exec s;
  s.loop = weft_loop_group_get(g, 0);
  ck_assert_int_eq(weft_loop_execute(s.loop, first_task, &s), 0);
  WAIT_FOR(atomic_load(&s.done));
  ck_assert_int_eq(s.execute_result, 0);
  ck_assert_int_eq(s.second_ran_inline, 0);
  /* Not even in the same batch: a later iteration. */
  ck_assert_uint_gt(s.second_iteration, s.first_iteration);
  finish_group(g);
}
END_TEST

/* ---- Refusal and graceful stop ------------------------------------------- */

static void nop_task(void *arg) { (void)arg; }

START_TEST(task_queue_execute_after_finish_closed) {
  weft_loop_group *g = th_group_start(NULL, 1);
  weft_loop *loop = weft_loop_group_get(g, 0);
  ck_assert_int_eq(weft_loop_execute(loop, NULL, NULL), WEFT_EINVAL);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  ck_assert_int_eq(weft_loop_execute(loop, nop_task, NULL), WEFT_ECLOSED);
  weft_loop_group_free(g);
}
END_TEST

struct stop_state {
  weft_loop *loop;
  _Atomic int gate;     /* the blocker waits until this is 1 */
  _Atomic int blocking; /* the blocker is running */
  int counted;          /* tasks run (loop thread only) */
  int counted_at_hook;  /* `counted` when the close hook ran */
  int hook_task_ran;
};

static void hook_task(void *arg) {
  struct stop_state *s = arg;
  s->hook_task_ran++;
}

static void close_hook(void *arg) {
  struct stop_state *s = arg;
  s->counted_at_hook = s->counted;
  /* Tasks a close hook queues still run. */
  ck_assert_int_eq(weft_loop_execute(s->loop, hook_task, s), 0);
}

static void blocker(void *arg) {
  struct stop_state *s = arg;
  ck_assert_int_eq(weft_loop_on_close(s->loop, close_hook, s), 0);
  atomic_store(&s->blocking, 1);
  while (!atomic_load(&s->gate))
    usleep(100);
}

static void count_task(void *arg) {
  struct stop_state *s = arg;
  s->counted++;
}

START_TEST(task_queue_stop_runs_queued_tasks) {
  weft_loop_group *g = th_group_start(NULL, 1);
  static struct stop_state s;
  s.loop = weft_loop_group_get(g, 0);
  ck_assert_int_eq(weft_loop_execute(s.loop, blocker, &s), 0);
  WAIT_FOR(atomic_load(&s.blocking));
  /* The loop is stuck in the blocker: these wait in the queue. */
  for (int i = 0; i < 1000; i++)
    ck_assert_int_eq(weft_loop_execute(s.loop, count_task, &s), 0);
  weft_loop_group_stop(g);
  atomic_store(&s.gate, 1);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  ck_assert_int_eq(s.counted, 1000);
  ck_assert_int_eq(s.counted_at_hook, 1000); /* hooks after the tasks */
  ck_assert_int_eq(s.hook_task_ran, 1);
  weft_loop_group_free(g);
}
END_TEST

struct race_state {
  weft_loop *loop;
  uint64_t accepted;
  _Atomic uint64_t ran;
};

static void race_task(void *arg) {
  struct race_state *s = arg;
  atomic_fetch_add_explicit(&s->ran, 1, memory_order_relaxed);
}

static void *race_producer(void *arg) {
  struct race_state *s = arg;
  for (;;) {
    int err = weft_loop_execute(s->loop, race_task, s);
    if (err == WEFT_ECLOSED)
      return NULL;
    ck_assert_int_eq(err, 0);
    s->accepted++;
  }
}

START_TEST(task_queue_accepted_tasks_run_racing_stop) {
  weft_loop_group *g = th_group_start(NULL, 1);
  static struct race_state s;
  s.loop = weft_loop_group_get(g, 0);
  pthread_t th[2];
  static struct race_state s2;
  s2.loop = s.loop;
  ck_assert_int_eq(pthread_create(&th[0], NULL, race_producer, &s), 0);
  ck_assert_int_eq(pthread_create(&th[1], NULL, race_producer, &s2), 0);
  usleep(20000);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  pthread_join(th[0], NULL);
  pthread_join(th[1], NULL);
  /* Every task execute accepted ran, whatever the interleaving with the
   * loop's close; both counters live in s (s2 counts its own). */
  ck_assert_uint_gt(s.accepted, 0);
  ck_assert_uint_eq(atomic_load(&s.ran), s.accepted);
  ck_assert_uint_eq(atomic_load(&s2.ran), s2.accepted);
  weft_loop_group_free(g);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "task_queue", "core", 60, task_queue_pop_fifo_single_thread,
      task_queue_pop_pending_half_linked, task_queue_mark_bounds_batch,
      task_queue_execute_per_producer_fifo_four_threads,
      task_queue_execute_from_loop_runs_later,
      task_queue_execute_after_finish_closed, task_queue_stop_runs_queued_tasks,
      task_queue_accepted_tasks_run_racing_stop, NULL);
}
