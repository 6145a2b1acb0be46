/* SPDX-License-Identifier: Apache-2.0 */
/* The hybrid selector: sleeping when idle, the busy-poll window, arming,
 * failing sources and removal during poll/dispatch. Test sources are backed
 * by an eventfd, a timerfd and a pipe. No tight timing asserts: windows are
 * made huge or waits long so scheduling noise cannot flip a result. */
#include "harness.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <weft/clock.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/source.h>

#include "loop/loop_internal.h"

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif
#ifndef UNDER_TSAN
#define UNDER_TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static weft_loop_group *group;

/* Set by a test before start_group: the loops take no preemption samples,
 * so that a test of the other rules does not depend on the machine's load
 * (a loaded machine preempts a spin of milliseconds nearly every time). */
static bool no_preemption_samples;
static uint64_t sample_period_ns; /* the loops' own, before the above */

/* On the loop's thread: the window's samples begin now, with nothing
 * counted before (a test's subject often starts after the loop does). */
static int start_samples(void *arg) {
  weft_loop *loop = arg;
  weft__poll_window *w = &loop->window;
  w->spin_ns_mark = th_loop_stats(loop).spin_ns;
  w->spins_ended = 0;
  w->spinning = false;
  w->iter_ns = 0;
  w->sample_period_ns = sample_period_ns;
  w->sample_ns = weft_now_ns() + sample_period_ns;
  return 0;
}

/* `adaptive`: false where a test needs the window fixed at busy_poll_us. */
static weft_loop *start_group(int n, int busy_poll_us, int budget,
                              bool adaptive) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = n;
  o.busy_poll_us = busy_poll_us;
  o.busy_poll_adaptive = adaptive;
  if (budget > 0)
    o.poll_budget = budget;
  o.pin = n <= 2; /* loop 0 on CPU 0, where the hog tests put their hogs */
  ck_assert_int_eq(weft_loop_group_new(&group, &o), 0);
  sample_period_ns = weft_loop_group_get(group, 0)->window.sample_period_ns;
  if (no_preemption_samples)
    for (int i = 0; i < n; i++)
      weft_loop_group_get(group, i)->window.sample_period_ns = UINT64_MAX / 4;
  no_preemption_samples = false;
  ck_assert_int_eq(weft_loop_group_start(group), 0);
  return weft_loop_group_get(group, 0);
}

static void finish_group(void) {
  weft_loop_group_stop(group);
  ck_assert_int_eq(weft_loop_group_join(group), 0);
  weft_loop_group_free(group);
}

/* Runs fn on `loop` and waits for it. */
#define run_on(loop, fn, arg) ck_assert_int_eq(weft_loop_call(loop, fn, arg), 0)

/* Waits until `loop` sleeps, however long the machine's load makes that:
 * `sleeping` is set right before the loop's last re-check and its
 * epoll_wait, and the sleep is counted after the re-check, so once both
 * show (more sleeps than `since`) an event wakes it. For a loop with
 * nothing else to do (no task, no timer), which would otherwise stay
 * asleep. */
static void wait_asleep(weft_loop *loop, uint64_t since) {
  WAIT_FOR(atomic_load(&loop->sleeping) && th_loop_stats(loop).sleeps > since);
}

/* ---- Test sources -------------------------------------------------------- */

struct tsrc {
  weft_source src;
  weft_loop *loop;
  int wfd; /* write end (pipe), else == src.fd */
  _Atomic int polls;
  _Atomic int handled;                /* events consumed by poll */
  _Atomic uint64_t sleeps_at_handled; /* loop's sleeps when first handled */
  _Atomic int arms;
  int refuse_arms; /* arm returns 1 this many times */
  int polls_at_last_arm;
  _Atomic int arm_without_poll; /* arm called twice with no poll between */
  _Atomic int wakeups;
  _Atomic uint32_t wake_events;
  int max_per_poll;
  int poll_error;      /* poll returns this if non-zero */
  int remove_self;     /* poll removes its own source */
  struct tsrc *victim; /* poll / wakeup removes this one */
};

static void note_handled(struct tsrc *t, int n) {
  if (atomic_load(&t->handled) == 0)
    atomic_store(&t->sleeps_at_handled, th_loop_stats(t->loop).sleeps);
  atomic_fetch_add(&t->handled, n);
}

static int poison_poll(weft_source *src, int budget);
static void poison_wakeup(weft_source *src, uint32_t events);
static const weft_source_ops poison_ops = {.name = "poison",
                                           .poll = poison_poll,
                                           .arm = NULL,
                                           .wakeup = poison_wakeup};
static _Atomic int poisoned_calls;
static int poison_poll(weft_source *src, int budget) {
  atomic_fetch_add(&poisoned_calls, 1);
  return 0;
}
static void poison_wakeup(weft_source *src, uint32_t events) {
  atomic_fetch_add(&poisoned_calls, 1);
}

/* Removes the victim (once) and poisons its ops, as if its owner freed it. */
static void remove_victim(struct tsrc *t) {
  struct tsrc *v = t->victim;
  if (v == NULL || v->src.loop == NULL)
    return;
  ck_assert_int_eq(weft_loop_remove_source(t->loop, &v->src), 0);
  v->src.ops = &poison_ops;
}

/* Reads an eventfd or timerfd counter: one event when non-zero. */
static int counter_poll(weft_source *src, int budget) {
  struct tsrc *t = src->data;
  atomic_fetch_add(&t->polls, 1);
  remove_victim(t);
  if (t->remove_self)
    ck_assert_int_eq(weft_loop_remove_source(t->loop, src), 0);
  if (t->poll_error)
    return t->poll_error;
  uint64_t v;
  if (read(src->fd, &v, sizeof v) != (ssize_t)sizeof v)
    return 0;
  note_handled(t, 1);
  return 1;
}

/* Reads at most `budget` bytes of a pipe. */
static int pipe_poll(weft_source *src, int budget) {
  struct tsrc *t = src->data;
  atomic_fetch_add(&t->polls, 1);
  char buf[1024];
  ssize_t n = read(src->fd, buf,
                   (size_t)budget < sizeof buf ? (size_t)budget : sizeof buf);
  if (n <= 0)
    return 0;
  if (n > t->max_per_poll)
    t->max_per_poll = (int)n;
  note_handled(t, (int)n);
  return (int)n;
}

static int refusing_arm(weft_source *src) {
  struct tsrc *t = src->data;
  int polls = atomic_load(&t->polls);
  if (atomic_load(&t->arms) > 0 && polls == t->polls_at_last_arm)
    atomic_store(&t->arm_without_poll, 1);
  t->polls_at_last_arm = polls;
  int n = atomic_fetch_add(&t->arms, 1);
  return n < t->refuse_arms ? 1 : 0;
}

static void record_wakeup(weft_source *src, uint32_t events) {
  struct tsrc *t = src->data;
  atomic_fetch_or(&t->wake_events, events);
  atomic_fetch_add(&t->wakeups, 1);
  remove_victim(t);
}

/* Wakeup that consumes the eventfd; its poll does nothing. */
static int idle_poll(weft_source *src, int budget) {
  struct tsrc *t = src->data;
  atomic_fetch_add(&t->polls, 1);
  return 0;
}
static void reading_wakeup(weft_source *src, uint32_t events) {
  uint64_t v;
  ssize_t r = read(src->fd, &v, sizeof v);
  (void)r;
  record_wakeup(src, events);
}

static const weft_source_ops eventfd_ops = {.name = "eventfd-src",
                                            .poll = counter_poll,
                                            .arm = NULL,
                                            .wakeup = record_wakeup};
static const weft_source_ops timerfd_ops = {.name = "timerfd-src",
                                            .poll = counter_poll,
                                            .arm = NULL,
                                            .wakeup = record_wakeup};
static const weft_source_ops pipe_ops = {.name = "pipe-src",
                                         .poll = pipe_poll,
                                         .arm = NULL,
                                         .wakeup = record_wakeup};
static const weft_source_ops refusing_ops = {.name = "refusing-src",
                                             .poll = idle_poll,
                                             .arm = refusing_arm,
                                             .wakeup = NULL};
static const weft_source_ops failing_ops = {
    .name = "failing-src", .poll = counter_poll, .arm = NULL, .wakeup = NULL};
static const weft_source_ops wake_only_ops = {.name = "wake-only-src",
                                              .poll = idle_poll,
                                              .arm = NULL,
                                              .wakeup = reading_wakeup};

static void tsrc_init(struct tsrc *t, weft_loop *loop,
                      const weft_source_ops *ops, int fd) {
  memset(t, 0, sizeof *t);
  t->loop = loop;
  t->wfd = fd;
  weft_source_init(&t->src, ops, fd, t);
}

static int new_eventfd(void) {
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  return fd;
}

static void kick(int fd) {
  uint64_t one = 1;
  ck_assert_int_eq(write(fd, &one, sizeof one), (ssize_t)sizeof one);
}

static int add_task(void *arg) {
  struct tsrc *t = arg;
  ck_assert_int_eq(weft_loop_add_source(t->loop, &t->src), 0);
  ck_assert_int_eq(weft_loop_add_source(t->loop, &t->src), WEFT_EALREADY);
  return 0;
}

static int remove_task(void *arg) {
  struct tsrc *t = arg;
  if (t->src.loop != NULL)
    ck_assert_int_eq(weft_loop_remove_source(t->loop, &t->src), 0);
  return 0;
}

/* Adds an eventfd source `t` to `loop`. */
static void eventfd_add(struct tsrc *t, weft_loop *loop) {
  tsrc_init(t, loop, &eventfd_ops, new_eventfd());
  run_on(loop, add_task, t);
}

/* Removes `t` from its loop, closes its eventfd and stops the group. */
static void eventfd_done(struct tsrc *t) {
  run_on(t->loop, remove_task, t);
  close(t->src.fd);
  finish_group();
}

/* ---- Idle ---------------------------------------------------------------- */

/* utime + stime of one thread, in clock ticks. */
static long thread_cpu_ticks(pid_t tid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* The name in parentheses may hold spaces: fields start after the last
   * ')'. Then: state(3) ... utime(14) stime(15). */
  char *p = strrchr(buf, ')');
  ck_assert_ptr_nonnull(p);
  unsigned long utime = 0, stime = 0;
  int got = sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                   &utime, &stime);
  ck_assert_int_eq(got, 2);
  return (long)(utime + stime);
}

START_TEST(selector_idle_group_sleeps_low_cpu) {
  start_group(2, WEFT_BUSY_POLL_US_DEFAULT, 0, true);
  static struct tsrc ev[2], tf[2], pp[2];
  int pfd[2][2];
  pid_t tid[2];
  for (int i = 0; i < 2; i++) {
    weft_loop *loop = weft_loop_group_get(group, i);
    tsrc_init(&ev[i], loop, &eventfd_ops, new_eventfd());
    int t = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    ck_assert_int_ge(t, 0);
    tsrc_init(&tf[i], loop, &timerfd_ops, t);
    ck_assert_int_eq(pipe2(pfd[i], O_NONBLOCK | O_CLOEXEC), 0);
    tsrc_init(&pp[i], loop, &pipe_ops, pfd[i][0]);
    run_on(loop, add_task, &ev[i]);
    run_on(loop, add_task, &tf[i]);
    run_on(loop, add_task, &pp[i]);
    WAIT_FOR(weft__loop_tid(loop) != 0);
    tid[i] = weft__loop_tid(loop);
  }
  usleep(100 * 1000); /* let them settle into their sleep */
  long cpu0 = thread_cpu_ticks(tid[0]) + thread_cpu_ticks(tid[1]);
  weft_loop_stats before[2];
  for (int i = 0; i < 2; i++)
    weft_loop_stats_get(weft_loop_group_get(group, i), &before[i]);
  sleep(2);
  long cpu = thread_cpu_ticks(tid[0]) + thread_cpu_ticks(tid[1]) - cpu0;
  long ticks_per_s = sysconf(_SC_CLK_TCK);
  for (int i = 0; i < 2; i++) {
    weft_loop_stats st;
    weft_loop_stats_get(weft_loop_group_get(group, i), &st);
    ck_assert_uint_gt(st.sleeps, 0);
    /* Asleep the whole time: a busy loop would count millions. */
    ck_assert_uint_lt(st.iterations - before[i].iterations, 100);
    ck_assert_uint_lt(st.iterations, 100000);
  }
  ck_assert_msg(cpu * 10 < 2 * ticks_per_s,
                "idle loops used %ld ticks of CPU in 2 s", cpu);
  for (int i = 0; i < 2; i++) {
    weft_loop *loop = weft_loop_group_get(group, i);
    run_on(loop, remove_task, &ev[i]);
    run_on(loop, remove_task, &tf[i]);
    run_on(loop, remove_task, &pp[i]);
    close(ev[i].src.fd);
    close(tf[i].src.fd);
    close(pfd[i][0]);
    close(pfd[i][1]);
  }
  finish_group();
}
END_TEST

/* ---- The busy-poll window ------------------------------------------------ */

struct window {
  struct tsrc *t;
  uint64_t sleeps;
};
static int add_and_note(void *arg) {
  struct window *w = arg;
  add_task(w->t);
  w->sleeps = th_loop_stats(w->t->loop).sleeps;
  return 0;
}

START_TEST(selector_event_inside_window_no_sleep) {
  /* A 2 s window: the event 10 ms after the last work is surely inside. */
  weft_loop *loop = start_group(1, 2000000, 0, false);
  static struct tsrc t;
  tsrc_init(&t, loop, &eventfd_ops, new_eventfd());
  struct window w = {&t, 0};
  run_on(loop, add_and_note, &w);
  usleep(10 * 1000);
  kick(t.src.fd);
  WAIT_FOR(atomic_load(&t.handled) == 1);
  ck_assert_uint_eq(atomic_load(&t.sleeps_at_handled), w.sleeps);
  eventfd_done(&t);
}
END_TEST

START_TEST(selector_event_after_window_one_sleep) {
  weft_loop *loop = start_group(1, 20, 0, false);
  static struct tsrc t;
  tsrc_init(&t, loop, &eventfd_ops, new_eventfd());
  struct window w = {&t, 0};
  run_on(loop, add_and_note, &w);
  weft_loop_stats before;
  weft_loop_stats_get(loop, &before);
  /* Asleep when the event comes (waited for, not assumed after 50 ms),
   * and nothing else (no timer, no task) can wake it in between. */
  wait_asleep(loop, w.sleeps);
  kick(t.src.fd);
  WAIT_FOR(atomic_load(&t.handled) == 1);
  ck_assert_uint_eq(atomic_load(&t.sleeps_at_handled), w.sleeps + 1);
  ck_assert_int_eq(atomic_load(&t.wakeups), 1);
  ck_assert(atomic_load(&t.wake_events) & EPOLLIN);
  eventfd_done(&t);
}
END_TEST

START_TEST(selector_busy_poll_negative_never_sleeps) {
  weft_loop *loop = start_group(1, -1, 0, false);
  ck_assert_int_eq(weft_loop_busy_poll_us(loop), -1);
  usleep(100 * 1000);
  weft_loop_stats st;
  weft_loop_stats_get(loop, &st);
  ck_assert_uint_eq(st.sleeps, 0);
  ck_assert_uint_eq(st.arms, 0);
  ck_assert_uint_gt(st.iterations, 1000);
  finish_group();
}
END_TEST

START_TEST(selector_set_busy_poll_us_changes_window) {
  weft_loop *loop = start_group(1, -1, 0, false);
  ck_assert_int_eq(weft_loop_set_busy_poll_us(loop, -2), WEFT_EINVAL);
  usleep(20 * 1000);
  ck_assert_uint_eq(th_loop_stats(loop).sleeps, 0);
  ck_assert_int_eq(weft_loop_set_busy_poll_us(loop, 0), 0);
  ck_assert_int_eq(weft_loop_busy_poll_us(loop), 0);
  WAIT_FOR(th_loop_stats(loop).sleeps > 0);
  finish_group();
}
END_TEST

/* ---- Arming -------------------------------------------------------------- */

START_TEST(selector_arm_refused_polls_again) {
  weft_loop *loop = start_group(1, 0, 0, true);
  static struct tsrc t;
  tsrc_init(&t, loop, &refusing_ops, -1); /* polled only */
  t.refuse_arms = 3;
  weft_loop_stats before;
  weft_loop_stats_get(loop, &before);
  run_on(loop, add_task, &t);
  WAIT_FOR(atomic_load(&t.arms) >= 4);
  WAIT_FOR(th_loop_stats(loop).sleeps > before.sleeps);
  weft_loop_stats st;
  weft_loop_stats_get(loop, &st);
  ck_assert_uint_eq(st.arms_refused, 3);
  ck_assert_uint_ge(st.arms - before.arms, 4);
  ck_assert_int_eq(atomic_load(&t.arm_without_poll), 0);
  run_on(loop, remove_task, &t);
  finish_group();
}
END_TEST

/* ---- Failing and removed sources ----------------------------------------- */

static int check_gone(void *arg) {
  struct tsrc *t = arg;
  ck_assert_int_eq(weft_loop_remove_source(t->loop, &t->src), WEFT_ENOENT);
  return 0;
}

START_TEST(selector_poll_error_removes_and_logs_source) {
  th_log_capture_start();
  weft_loop *loop = start_group(1, WEFT_BUSY_POLL_US_DEFAULT, 0, true);
  static struct tsrc t;
  tsrc_init(&t, loop, &failing_ops, new_eventfd());
  t.poll_error = WEFT_EIO;
  run_on(loop, add_task, &t);
  WAIT_FOR(atomic_load(&t.polls) >= 1);
  kick(t.src.fd); /* readable: it would be polled and woken if still there */
  usleep(50 * 1000);
  ck_assert_int_eq(atomic_load(&t.polls), 1);
  run_on(loop, check_gone, &t);
  ck_assert_int_eq(th_log_count("failing-src"), 1);
  ck_assert_int_eq(th_log_count(weft_strerror(WEFT_EIO)), 1);
  finish_group();
  th_log_capture_stop();
  close(t.src.fd);
}
END_TEST

START_TEST(selector_remove_self_inside_poll) {
  weft_loop *loop = start_group(1, WEFT_BUSY_POLL_US_DEFAULT, 0, true);
  static struct tsrc t;
  tsrc_init(&t, loop, &eventfd_ops, new_eventfd());
  t.remove_self = 1;
  kick(t.src.fd);
  run_on(loop, add_task, &t);
  WAIT_FOR(atomic_load(&t.polls) >= 1);
  usleep(50 * 1000);
  ck_assert_int_eq(atomic_load(&t.polls), 1);
  run_on(loop, check_gone, &t);
  finish_group();
  close(t.src.fd);
}
END_TEST

static int add_pair(void *arg) {
  struct tsrc *t = arg; /* t[0] then t[1]: polled in this order */
  add_task(&t[0]);
  add_task(&t[1]);
  return 0;
}

START_TEST(selector_remove_next_source_inside_poll) {
  /* Busy polling: many iterations, none of them may reach t[1]. */
  weft_loop *loop = start_group(1, -1, 0, false);
  static struct tsrc t[2];
  tsrc_init(&t[0], loop, &eventfd_ops, new_eventfd());
  tsrc_init(&t[1], loop, &eventfd_ops, new_eventfd());
  t[0].victim = &t[1]; /* the source the selector would poll next */
  run_on(loop, add_pair, t);
  WAIT_FOR(atomic_load(&t[0].polls) >= 3);
  usleep(10 * 1000);
  ck_assert_int_eq(atomic_load(&t[1].polls), 0);
  ck_assert_int_eq(atomic_load(&poisoned_calls), 0);
  run_on(loop, check_gone, &t[1]);
  run_on(loop, remove_task, &t[0]);
  finish_group();
  close(t[0].src.fd);
  close(t[1].src.fd);
}
END_TEST

struct gate {
  _Atomic int open;
  _Atomic int entered;
};
static void gate_task(void *arg) {
  struct gate *g = arg;
  atomic_store(&g->entered, 1);
  while (!atomic_load(&g->open))
    usleep(100);
}

START_TEST(selector_remove_other_source_during_dispatch) {
  weft_loop *loop = start_group(1, 0, 0, true);
  static struct tsrc t[2];
  tsrc_init(&t[0], loop, &wake_only_ops, new_eventfd());
  tsrc_init(&t[1], loop, &wake_only_ops, new_eventfd());
  /* Whichever wakes first removes the other, with both in one epoll batch:
   * the loop is held in a task while both fds become readable. */
  t[0].victim = &t[1];
  t[1].victim = &t[0];
  run_on(loop, add_pair, t);
  static struct gate g;
  ck_assert_int_eq(weft_loop_execute(loop, gate_task, &g), 0);
  WAIT_FOR(atomic_load(&g.entered));
  kick(t[0].src.fd);
  kick(t[1].src.fd);
  atomic_store(&g.open, 1);
  WAIT_FOR(atomic_load(&t[0].wakeups) + atomic_load(&t[1].wakeups) >= 1);
  usleep(20 * 1000);
  ck_assert_int_eq(atomic_load(&t[0].wakeups) + atomic_load(&t[1].wakeups), 1);
  ck_assert_int_eq(atomic_load(&poisoned_calls), 0);
  struct tsrc *survivor = t[0].src.loop != NULL ? &t[0] : &t[1];
  run_on(loop, remove_task, survivor);
  finish_group();
  close(t[0].src.fd);
  close(t[1].src.fd);
}
END_TEST

/* ---- fd kinds and budget ------------------------------------------------- */

/* The timer is armed once the loop is asleep, not a fixed 5 ms after the
 * source was added: on a loaded machine the loop thread could still be
 * off the CPU before its sleep then, and its next poll took the expiry
 * without a wake-up (the TSan stage under stress-ng --cpu 2). */
START_TEST(selector_timerfd_source_wakes_sleeping_loop) {
  weft_loop *loop = start_group(1, 0, 0, true);
  static struct tsrc t;
  int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  tsrc_init(&t, loop, &timerfd_ops, fd);
  struct window w = {&t, 0};
  run_on(loop, add_and_note, &w);
  wait_asleep(loop, w.sleeps);
  struct itimerspec its = {.it_value = {0, 1000 * 1000}};
  ck_assert_int_eq(timerfd_settime(fd, 0, &its, NULL), 0);
  WAIT_FOR(atomic_load(&t.handled) == 1);
  ck_assert_int_eq(atomic_load(&t.wakeups), 1);
  ck_assert(atomic_load(&t.wake_events) & EPOLLIN);
  weft_loop_stats st;
  weft_loop_stats_get(loop, &st);
  ck_assert_uint_ge(st.wakeups, 1);
  run_on(loop, remove_task, &t);
  finish_group();
  close(fd);
}
END_TEST

START_TEST(selector_pipe_source_poll_budget_respected) {
  weft_loop *loop = start_group(1, WEFT_BUSY_POLL_US_DEFAULT, 16, true);
  static struct tsrc t;
  int p[2];
  ck_assert_int_eq(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
  tsrc_init(&t, loop, &pipe_ops, p[0]);
  char data[100];
  memset(data, 'x', sizeof data);
  ck_assert_int_eq(write(p[1], data, sizeof data), (ssize_t)sizeof data);
  run_on(loop, add_task, &t);
  WAIT_FOR(atomic_load(&t.handled) == 100);
  ck_assert_int_le(t.max_per_poll, 16);
  ck_assert_int_ge(atomic_load(&t.polls), 7);
  run_on(loop, remove_task, &t);
  finish_group();
  close(p[0]);
  close(p[1]);
}
END_TEST

/* ---- The adaptive window ------------------------------------------------- */

/* Kicks `t`'s eventfd after `gap_ms` of quiet and waits until the loop
 * handled it: the loop's idle gap before that event is about gap_ms. */
static void kick_after(struct tsrc *t, unsigned gap_ms) {
  int before = atomic_load(&t->handled);
  th_sleep_ms(gap_ms);
  kick(t->src.fd);
  WAIT_FOR(atomic_load(&t->handled) > before);
}

/* Kicks `t` `gap_ms` after the loop's last work until its window is 0 (at
 * most 40 times); asserts it is, and returns the loop's statistics. */
static weft_loop_stats shrink_window(struct tsrc *t, unsigned gap_ms) {
  for (int i = 0; i < 40 && th_loop_stats(t->loop).busy_poll_window_ns > 0; i++)
    kick_after(t, gap_ms);
  weft_loop_stats st = th_loop_stats(t->loop);
  ck_assert_uint_eq(st.busy_poll_window_ns, 0);
  return st;
}

/* Kicks `t` `gap_ms` after the loop's last work until its window is back
 * at `ns` (for up to `max_ms`); asserts it is, and returns the loop's
 * statistics. */
static weft_loop_stats grow_window(struct tsrc *t, uint64_t ns, unsigned gap_ms,
                                   unsigned max_ms) {
  uint64_t end = th_now_ms() + max_ms;
  while (th_loop_stats(t->loop).busy_poll_window_ns < ns && th_now_ms() < end)
    kick_after(t, gap_ms);
  weft_loop_stats st = th_loop_stats(t->loop);
  ck_assert_uint_eq(st.busy_poll_window_ns, ns);
  return st;
}

/* Whether a kick `gap_ms` after the loop's last work finds it spinning (no
 * sleep for it) in one of 5 tries: a load spike can delay this thread
 * past the window (a sleep then). */
static bool spins_through(struct tsrc *t, unsigned gap_ms) {
  bool spun = false;
  for (int i = 0; i < 5 && !spun; i++) {
    uint64_t sleeps = th_loop_stats(t->loop).sleeps;
    kick_after(t, gap_ms);
    spun = th_loop_stats(t->loop).sleeps == sleeps;
  }
  return spun;
}

static int noop_call(void *arg) {
  (void)arg;
  return 0;
}

/* weft_loop_stats_format names every counter with its value, in order,
 * and cuts a line that does not fit as snprintf does. */
START_TEST(selector_stats_format_names_every_counter) {
  weft_loop_stats st;
  uint64_t *field = (uint64_t *)&st;
  for (size_t i = 0; i < sizeof st / sizeof *field; i++)
    field[i] = 1000 + i;
  st.busy_poll_window_ns = UINT64_MAX;
  char line[1024];
  int n = weft_loop_stats_format(&st, line, sizeof line);
  ck_assert_int_eq(n, (int)strlen(line));
  ck_assert_ptr_nonnull(strstr(line, "iterations=1000 polls_busy=1001 "));
  ck_assert_ptr_nonnull(strstr(line, " busy_poll_window_ns=-1 "));
  char want[64];
  snprintf(want, sizeof want, " window_hits=%llu spin_ns=%llu",
           (unsigned long long)st.window_hits, (unsigned long long)st.spin_ns);
  ck_assert_str_eq(line + strlen(line) - strlen(want), want);
  /* One pair per field: as many '=' as the struct has counters. */
  int pairs = 0;
  for (const char *c = line; *c != '\0'; c++)
    pairs += *c == '=';
  ck_assert_int_eq(pairs, (int)(sizeof st / sizeof *field));
  char small[16];
  ck_assert_int_eq(weft_loop_stats_format(&st, small, sizeof small), n);
  ck_assert_uint_eq(strlen(small), sizeof small - 1);
}
END_TEST

START_TEST(selector_window_fixed_values_in_stats) {
  weft_loop *loop = start_group(1, 20, 0, false);
  ck_assert_uint_eq(th_loop_stats(loop).busy_poll_window_ns, 20000);
  /* A change takes effect at the next idle check: wake the loop for it. */
  static const struct {
    int us;
    uint64_t ns;
  } steps[] = {{-1, UINT64_MAX}, {0, 0}, {35, 35000}};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    ck_assert_int_eq(weft_loop_set_busy_poll_us(loop, steps[i].us), 0);
    run_on(loop, noop_call, NULL);
    WAIT_FOR(th_loop_stats(loop).busy_poll_window_ns == steps[i].ns);
  }
  weft_loop_stats st = th_loop_stats(loop);
  ck_assert_uint_eq(st.window_shrinks, 0);
  ck_assert_uint_eq(st.window_grows, 0);
  ck_assert_uint_eq(st.preemptions, 0); /* not sampled when fixed */
  finish_group();
}
END_TEST

/* Events 60 ms apart with a 5 ms window: every spin before a sleep was
 * wasted (the next event came after the 20 ms horizon, 4 windows), so the
 * window halves at each wake-up until it is 0: 5 -> 2.5 -> 1.25 -> 0.625
 * -> 0. Preemption samples are off, so that only this rule acts. */
START_TEST(selector_window_shrinks_on_wasted_spins) {
  no_preemption_samples = true; /* only wasted spins shrink it here */
  weft_loop *loop = start_group(1, 5000, 0, true);
  ck_assert_uint_eq(th_loop_stats(loop).busy_poll_window_ns, 5000000u);
  static struct tsrc t;
  tsrc_init(&t, loop, &eventfd_ops, new_eventfd());
  run_on(loop, add_task, &t); /* a wasted spin already if 20 ms late */
  uint64_t prev = UINT64_MAX;
  for (int i = 0; i < 40 && th_loop_stats(loop).busy_poll_window_ns > 0; i++) {
    kick_after(&t, 60);
    uint64_t w = th_loop_stats(loop).busy_poll_window_ns;
    ck_assert_uint_le(w, 5000000u);
    ck_assert_uint_le(w, prev); /* nothing here makes it grow */
    prev = w;
  }
  weft_loop_stats st = th_loop_stats(loop);
  ck_assert_uint_eq(st.busy_poll_window_ns, 0);
  ck_assert_uint_ge(st.window_shrinks, 4);
  ck_assert_uint_eq(st.window_grows, 0);
  /* With the window at 0 the loop sleeps right after each event. */
  uint64_t sleeps = st.sleeps;
  kick_after(&t, 5);
  WAIT_FOR(th_loop_stats(loop).sleeps > sleeps);
  eventfd_done(&t);
}
END_TEST

/* After the window shrank to 0 (events 100 ms apart, beyond the 80 ms
 * horizon), events that come 15 ms after the last work, with the loop
 * asleep (window below 15 ms) but within the 20 ms maximum, double it
 * back: 0 -> 2.5 -> 5 -> 10 -> 20 ms. Preemption samples are off: on a
 * loaded machine spins of milliseconds are preempted (a shrink, and no
 * growth for 100 ms), which the next test covers. A load spike can still
 * stretch a gap past 80 ms (a shrink): the test kicks until the window is
 * back. */
START_TEST(selector_window_grows_when_events_follow_sleep) {
  no_preemption_samples = true;
  weft_loop *loop = start_group(1, 20000, 0, true);
  static struct tsrc t;
  eventfd_add(&t, loop);
  weft_loop_stats st0 = shrink_window(&t, 100);
  weft_loop_stats st = grow_window(&t, 20000000u, 15, 20000);
  ck_assert_uint_ge(st.window_grows - st0.window_grows, 4);
  /* At the maximum a short gap is inside the window: no sleep for it. */
  ck_assert(spins_through(&t, 2));
  eventfd_done(&t);
}
END_TEST

/* Gaps longer than the window but within the horizon (4 windows) grow it
 * too: a gap measured across a sleep holds the wake-ups it caused, so two
 * loops that both block (ping-pong) would otherwise never spin again.
 * 5 ms window, shrunk to 0 by 60 ms gaps, then 12 ms gaps: back to 5 ms. */
START_TEST(selector_window_grows_within_horizon) {
  no_preemption_samples = true;
  weft_loop *loop = start_group(1, 5000, 0, true);
  static struct tsrc t;
  eventfd_add(&t, loop);
  weft_loop_stats st0 = shrink_window(&t, 60);
  weft_loop_stats st = grow_window(&t, 5000000u, 12, 20000);
  ck_assert_uint_ge(st.window_grows - st0.window_grows, 4);
  eventfd_done(&t);
}
END_TEST

/* A peer slower than the window (the miss rule): each event comes at least
 * 6 ms after the loop's last work, with a 5 ms window (beyond it, within
 * the 20 ms horizon), so every spin runs out. Without the rule the window
 * stays at 5 ms and the loop spins through every gap; with it, 8 misses
 * in a row drop the window to 0, and only the probes (after 16, 32, 64 and
 * 128 sleeps) spin again, 8 windows each: 32 of 240 gaps. The test counts
 * the gaps spun through from the window the loop slept with (published, and
 * unchanged while it sleeps). No time is asserted: the 6 ms is a lower
 * bound, and a kick the load delays is a miss still, or beyond the
 * horizon a halving, which the bound allows for (one more spin each).
 * Preemption samples are off: only this rule acts. */
START_TEST(selector_window_drops_when_spins_run_out) {
  no_preemption_samples = true;
  weft_loop *loop = start_group(1, 5000, 0, true);
  static struct tsrc t;
  eventfd_add(&t, loop);
  enum { EVENTS = 240 };
  int spun = 0;
  /* The loop may be asleep already: its sleep then counted. */
  uint64_t since = th_loop_stats(loop).sleeps;
  since -= since > 0 ? 1 : 0;
  for (int i = 0; i < EVENTS; i++) {
    th_sleep_ms(6);
    wait_asleep(loop, since);
    weft_loop_stats st = th_loop_stats(loop);
    if (st.busy_poll_window_ns > 0)
      spun++;
    since = st.sleeps; /* asleep: the next sleep is the next event's */
    kick_after(&t, 0);
  }
  weft_loop_stats st = th_loop_stats(loop);
  /* A gap a load spike stretched beyond the horizon halves the window
   * (window_shrinks: nothing else shrinks it here) where a miss would have
   * counted towards the drop, so each one delays a drop by one spin. */
  ck_assert_msg(spun <= EVENTS / 4 + (int)st.window_shrinks,
                "the loop spun through %d of %d gaps (%d stretched beyond the "
                "horizon)",
                spun, EVENTS, (int)st.window_shrinks);
  ck_assert_uint_ge(st.window_misses, 2 * 8);
  ck_assert_uint_ge(st.window_drops, 2);
  ck_assert_uint_ge(st.window_probes, 1);
  eventfd_done(&t);
}
END_TEST

/* Kicks `t` `gap_ms` after the loop's last work until its window is
 * dropped (at most 40 times: 8 misses in a row drop it). */
static void drop_window(weft_loop *loop, struct tsrc *t, unsigned gap_ms) {
  for (int i = 0; i < 40 && th_loop_stats(loop).window_drops == 0; i++)
    kick_after(t, gap_ms);
  ck_assert_uint_gt(th_loop_stats(loop).window_drops, 0);
}

/* After a drop, events that come within the maximum window of the loop's
 * last work (10 ms with a 20 ms window: a spin would have caught them,
 * wake-up and all) grow the window back from its floor, 0 -> 2.5 -> 5 ->
 * 10 -> 20 ms, without waiting for a probe; at 20 ms a short gap is
 * inside the window again. The window was dropped by 25 ms gaps (beyond
 * the window, within the 80 ms horizon). */
START_TEST(selector_window_back_when_events_come_within_it) {
  no_preemption_samples = true;
  weft_loop *loop = start_group(1, 20000, 0, true);
  static struct tsrc t;
  eventfd_add(&t, loop);
  drop_window(loop, &t, 25);
  weft_loop_stats st0 = th_loop_stats(loop);
  ck_assert_uint_eq(st0.busy_poll_window_ns, 0);
  weft_loop_stats st = grow_window(&t, 20000000u, 10, 20000);
  ck_assert_uint_ge(st.window_grows - st0.window_grows, 4); /* not a probe */
  ck_assert(spins_through(&t, 2));
  eventfd_done(&t);
}
END_TEST

/* A peer of whose events every other one comes within the window: the
 * spins that catch them (hits) start the count of misses again, so the
 * ones that run out (25 ms gaps, 20 ms window) never reach 8 in a row and
 * the window stays: a fast peer keeps the loop spinning. */
START_TEST(selector_window_kept_when_spins_catch_events) {
  /* A round counts only if every short gap was short: on a loaded machine
   * the kicking thread itself may wake 20 ms late, and 8 such late kicks
   * in a row are 8 true misses, which the rule must drop for. Such a
   * round is run again on a fresh loop, up to 5 times. */
  for (int attempt = 0; attempt < 5; attempt++) {
    no_preemption_samples = true;
    weft_loop *loop = start_group(1, 20000, 0, true);
    static struct tsrc t;
    eventfd_add(&t, loop);
    int late = 0;
    for (int i = 0; i < 20; i++) {
      kick_after(&t, 25); /* a miss */
      uint64_t t0 = th_now_ms();
      kick_after(&t, 2); /* a hit, unless the kick itself comes late */
      late += th_now_ms() - t0 > 12;
    }
    weft_loop_stats st = th_loop_stats(loop);
    eventfd_done(&t);
    if (late > 0)
      continue;
    /* Misses happened (half the gaps, less any a load spike stretched
     * beyond the horizon, which halve the window instead). */
    ck_assert_uint_ge(st.window_misses, 10);
    ck_assert_uint_eq(st.window_drops, 0);
    /* The hits are counted, and so is the time spun: each miss spun its
     * whole window (20 ms, less a spike's cut), so far more than 1 ms. */
    ck_assert_uint_ge(st.window_hits, 10);
    ck_assert_uint_ge(st.spin_ns, 1000000u);
    ck_assert_uint_gt(st.busy_poll_window_ns,
                      0); /* halved by a spike at most */
    return;
  }
  th_skip(__func__, "every round had a kick 12 ms late or more: the machine "
                    "is too loaded to tell a hit from a miss");
}
END_TEST

/* Two threads that spin on the loop's CPU (loop 0 is pinned to CPU 0). */
struct hogs {
  pthread_t th[2];
  _Atomic bool stop;
};

static void *hog_main(void *arg) {
  struct hogs *h = arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  while (!atomic_load_explicit(&h->stop, memory_order_relaxed))
    ;
  return NULL;
}

static void hogs_start(struct hogs *h) {
  atomic_store(&h->stop, false);
  for (int i = 0; i < 2; i++)
    ck_assert_int_eq(pthread_create(&h->th[i], NULL, hog_main, h), 0);
}

static void hogs_stop(struct hogs *h) {
  atomic_store(&h->stop, true);
  for (int i = 0; i < 2; i++)
    pthread_join(h->th[i], NULL);
}

/* A 2 s window: the loop spins the whole time the hogs run, and is
 * preempted by them; the samples see it and halve the window. */
START_TEST(selector_window_shrinks_when_preempted) {
  weft_loop *loop = start_group(1, 2000000, 0, true);
  static struct hogs h;
  hogs_start(&h);
  WAIT_FOR(th_loop_stats(loop).preemptions > 0 &&
           th_loop_stats(loop).busy_poll_window_ns < 2000000000u);
  hogs_stop(&h);
  weft_loop_stats st = th_loop_stats(loop);
  ck_assert_uint_ge(st.window_shrinks, 1);
  ck_assert_uint_eq(st.window_grows, 0);
  finish_group();
}
END_TEST

/* Work on every other poll: the loop's spins end in work after one empty
 * iteration (about a microsecond, where a sleep and a wake-up cost the
 * loop more), as a server's do when its client on another CPU answers at
 * once. */
static int alternating_poll(weft_source *src, int budget) {
  (void)budget;
  struct tsrc *t = src->data;
  return atomic_fetch_add(&t->polls, 1) % 2;
}
static const weft_source_ops alternating_ops = {.name = "alternating-src",
                                                .poll = alternating_poll,
                                                .arm = NULL,
                                                .wakeup = NULL};

/* The hogs contend the loop's CPU as in the test above, but its spins
 * are short: the window stays (sleeping per event would cost more CPU
 * than the spins take from the hogs). */
START_TEST(selector_window_keeps_short_spins_when_preempted) {
  /* The subject is how long the loop's iterations take; a sanitizer
   * makes each one longer, so its "short" spins are not short (the rule's
   * 5 µs): TSan several times, ASan enough that a sample whose one spin
   * was preempted reads as costly (under ASan once last session and in
   * a clean-clone CI run this session). Run in the default build. */
  if (UNDER_TSAN || UNDER_ASAN) {
    th_skip(__func__, "iteration times under a sanitizer are not the "
                      "short spins this test needs");
    return;
  }
  /* No sample until the source is there: the loop's idle spin before it
   * is one long spin, which a sample on a loaded machine (stress-ng
   * beside the suite) read as costly and contended, and shrank the
   * window before the short spins began (seen in a run under load). */
  no_preemption_samples = true;
  weft_loop *loop = start_group(1, 2000000, 0, true);
  static struct tsrc t;
  tsrc_init(&t, loop, &alternating_ops, -1);
  run_on(loop, add_task, &t);
  run_on(loop, start_samples, loop);
  static struct hogs h;
  hogs_start(&h);
  /* (a shrink ends the wait too: at 0 the loop would sleep, and with no
   * fd to wake it, take no more samples) */
  WAIT_FOR(th_loop_stats(loop).preemptions > 20 ||
           th_loop_stats(loop).window_shrinks > 0);
  th_sleep_ms(100); /* more samples, each of them contended */
  hogs_stop(&h);
  weft_loop_stats st = th_loop_stats(loop);
  ck_assert_uint_eq(st.window_shrinks, 0);
  ck_assert_uint_eq(st.busy_poll_window_ns, 2000000000u);
  run_on(loop, remove_task, &t);
  finish_group();
}
END_TEST

#define MS UINT64_C(1000000)

/* The hold after a contended sample backs off: 5 ms for a first burst,
 * doubling while contention comes back within one period of the hold's
 * end, capped at 100 ms, and the minimum again after a quiet stretch. */
START_TEST(selector_window_hold_backs_off) {
  weft__poll_window w = {.hold_min_ns = 5 * MS, .hold_max_ns = 100 * MS};
  w.hold_period_ns = w.hold_min_ns;
  uint64_t t = 1000 * MS;
  weft__window_hold(&w, t); /* a first burst */
  ck_assert_uint_eq(w.hold_period_ns, 5 * MS);
  ck_assert_uint_eq(w.hold_ns, t + 5 * MS);
  weft__window_hold(&w, t + 2 * MS); /* still holding: extended */
  ck_assert_uint_eq(w.hold_period_ns, 5 * MS);
  ck_assert_uint_eq(w.hold_ns, t + 7 * MS);
  const uint64_t periods[] = {10, 20, 40, 80, 100, 100};
  for (size_t i = 0; i < sizeof periods / sizeof periods[0]; i++) {
    t = w.hold_ns + 3 * MS; /* back soon after the hold ended */
    weft__window_hold(&w, t);
    ck_assert_uint_eq(w.hold_period_ns, periods[i] * MS);
    ck_assert_uint_eq(w.hold_ns, t + periods[i] * MS);
  }
  t = w.hold_ns + 100 * MS; /* a quiet stretch as long as the period */
  weft__window_hold(&w, t);
  ck_assert_uint_eq(w.hold_period_ns, 5 * MS);
  ck_assert_uint_eq(w.hold_ns, t + 5 * MS);
}
END_TEST

static int stop_samples(void *arg) {
  weft_loop *loop = arg;
  loop->window.sample_ns = UINT64_MAX;
  return 0;
}

/* A short burst of contention (hogs on the loop's CPU until one contended
 * sample) holds the window down for the hold's minimum (50 ms here), not
 * its maximum (60 s here): then events within the horizon grow it back.
 * The samples stop after the burst, so that the machine's own load cannot
 * hold the window longer. */
START_TEST(selector_window_grows_back_after_a_short_burst) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = 1;
  o.busy_poll_us = 2000;
  o.pin = true; /* on CPU 0, with the hogs */
  ck_assert_int_eq(weft_loop_group_new(&group, &o), 0);
  weft_loop *loop = weft_loop_group_get(group, 0);
  loop->window.hold_min_ns = 50 * MS;
  loop->window.hold_max_ns = 60000 * MS;
  loop->window.hold_period_ns = 50 * MS;
  ck_assert_int_eq(weft_loop_group_start(group), 0);
  static struct tsrc t;
  eventfd_add(&t, loop);
  static struct hogs h;
  hogs_start(&h);
  /* events keep the loop spinning its window, where the samples run */
  uint64_t end = th_now_ms() + 10000;
  while (th_loop_stats(loop).window_contended == 0 && th_now_ms() < end)
    kick_after(&t, 1);
  run_on(loop, stop_samples, loop);
  hogs_stop(&h);
  ck_assert_uint_gt(th_loop_stats(loop).window_contended, 0);
  ck_assert_uint_lt(th_loop_stats(loop).busy_poll_window_ns, 2000000u);
  /* beyond the shrunk window, within the horizon */
  grow_window(&t, 2000000u, 3, 5000);
  eventfd_done(&t);
}
END_TEST

/* The same with adaptation off: the window stays, and nothing samples. */
START_TEST(selector_window_fixed_ignores_preemption) {
  weft_loop *loop = start_group(1, 2000000, 0, false);
  static struct hogs h;
  hogs_start(&h);
  th_sleep_ms(300);
  hogs_stop(&h);
  weft_loop_stats st = th_loop_stats(loop);
  ck_assert_uint_eq(st.busy_poll_window_ns, 2000000000u);
  ck_assert_uint_eq(st.window_shrinks, 0);
  ck_assert_uint_eq(st.preemptions, 0);
  ck_assert_uint_eq(st.sleeps, 0); /* still inside its 2 s window */
  finish_group();
}
END_TEST

/* ---- fd watchers --------------------------------------------------------- */

struct twatch {
  weft_watcher w;
  weft_loop *loop;
  bool consume;          /* read the eventfd in the callback */
  bool remove_self;      /* the callback removes its own watcher */
  bool quiet_on_hup;     /* the callback drops all interest on EPOLLHUP */
  struct twatch *victim; /* the callback removes this one (once) */
  _Atomic int calls;
  _Atomic uint32_t events;
  _Atomic uint64_t sleeps_at_last; /* the loop's sleeps at the last call */
  _Atomic unsigned work_ms;        /* the callback works this long */
};

static void poison_watch_cb(weft_watcher *w, uint32_t events) {
  (void)w;
  (void)events;
  atomic_fetch_add(&poisoned_calls, 1);
}

static void twatch_cb(weft_watcher *w, uint32_t events) {
  struct twatch *t = w->data;
  /* Consume and record before counting the call: the test kicks again as
   * soon as it sees the count, and that kick must not be read here. */
  if (t->consume) {
    uint64_t v;
    ssize_t r = read(w->fd, &v, sizeof v);
    (void)r;
  }
  unsigned work_ms = atomic_load(&t->work_ms);
  if (work_ms > 0) { /* a slow handler: spins, as real work would */
    uint64_t until = th_now_ms() + work_ms;
    while (th_now_ms() < until)
      ;
  }
  atomic_fetch_or(&t->events, events);
  atomic_store(&t->sleeps_at_last, th_loop_stats(t->loop).sleeps);
  atomic_fetch_add(&t->calls, 1);
  struct twatch *v = t->victim;
  if (v != NULL && v->w.loop != NULL) {
    ck_assert_int_eq(weft_loop_remove_watcher(t->loop, &v->w), 0);
    v->w.cb = poison_watch_cb; /* as if its owner freed it */
  }
  if (t->quiet_on_hup && (events & EPOLLHUP))
    ck_assert_int_eq(weft_loop_modify_watcher(t->loop, w, 0), 0);
  if (t->remove_self)
    ck_assert_int_eq(weft_loop_remove_watcher(t->loop, w), 0);
}

static void twatch_init(struct twatch *t, weft_loop *loop, int fd) {
  memset(t, 0, sizeof *t);
  t->loop = loop;
  weft_watcher_init(&t->w, fd, twatch_cb, t);
}

struct watch_add {
  struct twatch *t;
  uint32_t events;
};
static int watch_add_task(void *arg) {
  struct watch_add *a = arg;
  ck_assert_int_eq(weft_loop_add_watcher(a->t->loop, &a->t->w, a->events), 0);
  return 0;
}
static int watch_modify_task(void *arg) {
  struct watch_add *a = arg;
  ck_assert_int_eq(weft_loop_modify_watcher(a->t->loop, &a->t->w, a->events),
                   0);
  return 0;
}
static int watch_remove_task(void *arg) {
  struct twatch *t = arg;
  if (t->w.loop != NULL)
    ck_assert_int_eq(weft_loop_remove_watcher(t->loop, &t->w), 0);
  return 0;
}
#define WATCH(t, ev) (&(struct watch_add){(t), (ev)})

static int watch_errors_task(void *arg) {
  weft_loop *loop = arg;
  struct twatch a, b, f;
  int efd = new_eventfd();
  twatch_init(&a, loop, efd);
  twatch_init(&b, loop, efd);
  ck_assert_int_eq(weft_loop_add_watcher(loop, &a.w, EPOLLIN | EPOLLEXCLUSIVE),
                   WEFT_EINVAL);
  ck_assert_ptr_null(a.w.loop);
  ck_assert_int_eq(weft_loop_add_watcher(loop, &a.w, EPOLLIN), 0);
  ck_assert_int_eq(weft_loop_add_watcher(loop, &a.w, EPOLLIN), WEFT_EALREADY);
  ck_assert_uint_eq(weft_watcher_events(&a.w), EPOLLIN);
  /* The same fd twice in one epoll set: epoll's EEXIST. */
  ck_assert_int_eq(weft_loop_add_watcher(loop, &b.w, EPOLLIN), WEFT_EEXIST);
  ck_assert_ptr_null(b.w.loop);
  ck_assert_int_eq(weft_loop_modify_watcher(loop, &a.w, EPOLLONESHOT),
                   WEFT_EINVAL);
  ck_assert_uint_eq(weft_watcher_events(&a.w), EPOLLIN);
  ck_assert_int_eq(weft_loop_modify_watcher(loop, &b.w, EPOLLIN), WEFT_ENOENT);
  ck_assert_int_eq(weft_loop_remove_watcher(loop, &b.w), WEFT_ENOENT);
  ck_assert_int_eq(weft_loop_modify_watcher(loop, &a.w, 0), 0);
  ck_assert_int_eq(weft_loop_modify_watcher(loop, &a.w, EPOLLIN | EPOLLOUT), 0);
  ck_assert_int_eq(weft_loop_remove_watcher(loop, &a.w), 0);
  ck_assert_int_eq(weft_loop_remove_watcher(loop, &a.w), WEFT_ENOENT);
  ck_assert_int_eq(loop->n_watching, 0);
  /* A regular file cannot be watched. */
  char path[] = "/tmp/weft-watch-XXXXXX";
  int file = mkstemp(path);
  ck_assert_int_ge(file, 0);
  unlink(path);
  twatch_init(&f, loop, file);
  ck_assert_int_eq(weft_loop_add_watcher(loop, &f.w, EPOLLIN), WEFT_EPERM);
  ck_assert_ptr_null(f.w.loop);
  close(file);
  close(efd);
  return 0;
}

START_TEST(selector_watcher_errors) {
  weft_loop *loop = start_group(1, WEFT_BUSY_POLL_US_DEFAULT, 0, true);
  run_on(loop, watch_errors_task, loop);
  finish_group();
}
END_TEST

/* A loop without watchers makes no epoll_wait for them; one with a watcher
 * makes one per iteration while the watcher has events, none without. */
START_TEST(selector_watcher_polls_only_while_watching) {
  weft_loop *loop = start_group(1, -1, 0, false); /* spins: many polls */
  usleep(20 * 1000);
  ck_assert_uint_eq(th_loop_stats(loop).watcher_polls, 0);
  static struct twatch t;
  twatch_init(&t, loop, new_eventfd());
  run_on(loop, watch_add_task, WATCH(&t, 0));
  usleep(20 * 1000);
  ck_assert_uint_eq(th_loop_stats(loop).watcher_polls, 0);
  run_on(loop, watch_modify_task, WATCH(&t, EPOLLIN));
  WAIT_FOR(th_loop_stats(loop).watcher_polls > 100);
  run_on(loop, watch_modify_task, WATCH(&t, 0));
  uint64_t polls = th_loop_stats(loop).watcher_polls;
  usleep(20 * 1000);
  ck_assert_uint_eq(th_loop_stats(loop).watcher_polls, polls);
  /* With no interest a ready fd is not reported. */
  kick(t.w.fd);
  usleep(20 * 1000);
  ck_assert_int_eq(atomic_load(&t.calls), 0);
  run_on(loop, watch_remove_task, &t);
  ck_assert_uint_eq(th_loop_stats(loop).watcher_polls, polls);
  finish_group();
  close(t.w.fd);
}
END_TEST

/* Busy: the poll phase finds the event, the loop does not sleep. */
START_TEST(selector_watcher_fires_while_spinning) {
  weft_loop *loop = start_group(1, 2000000, 0, false);
  static struct twatch t;
  twatch_init(&t, loop, new_eventfd());
  t.consume = true;
  run_on(loop, watch_add_task, WATCH(&t, EPOLLIN));
  uint64_t sleeps = th_loop_stats(loop).sleeps;
  for (int i = 1; i <= 5; i++) {
    kick(t.w.fd);
    WAIT_UNTIL(atomic_load(&t.calls) >= i, 10000);
    ck_assert_int_eq(atomic_load(&t.calls), i);
  }
  ck_assert_uint_eq(th_loop_stats(loop).sleeps, sleeps);
  ck_assert(atomic_load(&t.events) & EPOLLIN);
  weft_loop_stats st = th_loop_stats(loop);
  ck_assert_uint_eq(st.watcher_events, 5);
  ck_assert_uint_gt(st.watcher_polls, 5);
  run_on(loop, watch_remove_task, &t);
  finish_group();
  close(t.w.fd);
}
END_TEST

/* Asleep (window 0): the loop's own epoll_pwait2 returns the watcher's
 * event and the callback runs from it: one epoll call per readiness, no
 * non-blocking epoll_wait besides (before, the tcp transport's inner set
 * cost one more wait per wake-up and one per idle poll). */
START_TEST(selector_watcher_wakes_sleeping_loop) {
  weft_loop *loop = start_group(1, 0, 0, false);
  static struct twatch t;
  twatch_init(&t, loop, new_eventfd());
  t.consume = true;
  run_on(loop, watch_add_task, WATCH(&t, EPOLLIN));
  usleep(20 * 1000);
  weft_loop_stats before = th_loop_stats(loop);
  for (int i = 1; i <= 10; i++) {
    uint64_t sleeps = th_loop_stats(loop).sleeps;
    kick(t.w.fd);
    WAIT_FOR(atomic_load(&t.calls) == i);
    /* The callback ran inside the sleep that the kick ended. */
    ck_assert_uint_eq(atomic_load(&t.sleeps_at_last), sleeps);
    WAIT_FOR(th_loop_stats(loop).sleeps >
             sleeps); /* and the loop sleeps again */
  }
  weft_loop_stats st = th_loop_stats(loop);
  ck_assert_uint_eq(st.wakeups - before.wakeups, 10);
  ck_assert_uint_le(st.watcher_polls - before.watcher_polls, 1);
  run_on(loop, watch_remove_task, &t);
  finish_group();
  close(t.w.fd);
}
END_TEST

/* After a wake-up the window starts when the callbacks' work ends, as
 * after a poll that found work: a 40 ms window, a callback that works
 * 30 ms, the next event 15 ms after the callback returned is caught
 * spinning. Counted from the wake-up, 45 ms would be past the window (a
 * sleep). A few tries: a load spike can delay the kick past the window. */
START_TEST(selector_window_starts_after_wakeup_work) {
  weft_loop *loop = start_group(1, 40000, 0, false);
  static struct twatch t;
  twatch_init(&t, loop, new_eventfd());
  t.consume = true;
  run_on(loop, watch_add_task, WATCH(&t, EPOLLIN));
  bool spun = false;
  for (int i = 0; i < 5 && !spun; i++) {
    /* Asleep: the kick wakes it. (Waiting for the next sleep instead
     * hung when the loop had gone to sleep before the test looked.) */
    wait_asleep(loop, 0);
    int calls = atomic_load(&t.calls);
    atomic_store(&t.work_ms, 30);
    kick(t.w.fd);
    WAIT_FOR(atomic_load(&t.calls) == calls + 1);
    uint64_t woke = atomic_load(&t.sleeps_at_last); /* the sleep it ended */
    atomic_store(&t.work_ms, 0);
    th_sleep_ms(15);
    kick(t.w.fd);
    WAIT_FOR(atomic_load(&t.calls) == calls + 2);
    spun = atomic_load(&t.sleeps_at_last) == woke;
  }
  ck_assert(spun);
  run_on(loop, watch_remove_task, &t);
  finish_group();
  close(t.w.fd);
}
END_TEST

/* Interest 0 takes the fd out of the set: a hang-up is not reported again
 * on every poll. */
START_TEST(selector_watcher_no_interest_silences_hangup) {
  weft_loop *loop = start_group(1, -1, 0, false);
  static struct twatch t;
  int p[2];
  ck_assert_int_eq(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
  twatch_init(&t, loop, p[0]);
  t.quiet_on_hup = true;
  run_on(loop, watch_add_task, WATCH(&t, EPOLLIN));
  close(p[1]);
  WAIT_FOR(atomic_load(&t.calls) == 1);
  usleep(20 * 1000);
  ck_assert_int_eq(atomic_load(&t.calls), 1);
  ck_assert(atomic_load(&t.events) & EPOLLHUP);
  run_on(loop, watch_remove_task, &t);
  finish_group();
  close(p[0]);
}
END_TEST

/* Two watchers on one eventfd (two fds, dup): one write makes both ready
 * in the same epoll batch; whichever runs first removes the other and
 * itself, so exactly one callback runs. In the poll phase (spinning) and
 * in the sleep's dispatch (window 0). */
static void watcher_remove_during_dispatch(int busy_poll_us) {
  weft_loop *loop = start_group(1, busy_poll_us, 0, false);
  static struct twatch t[2];
  int efd = new_eventfd();
  int efd2 = dup(efd);
  ck_assert_int_ge(efd2, 0);
  twatch_init(&t[0], loop, efd);
  twatch_init(&t[1], loop, efd2);
  t[0].victim = &t[1];
  t[1].victim = &t[0];
  t[0].remove_self = t[1].remove_self = true;
  run_on(loop, watch_add_task, WATCH(&t[0], EPOLLIN));
  run_on(loop, watch_add_task, WATCH(&t[1], EPOLLIN));
  usleep(10 * 1000);
  kick(efd);
  WAIT_FOR(atomic_load(&t[0].calls) + atomic_load(&t[1].calls) >= 1);
  usleep(20 * 1000);
  ck_assert_int_eq(atomic_load(&t[0].calls) + atomic_load(&t[1].calls), 1);
  ck_assert_int_eq(atomic_load(&poisoned_calls), 0);
  ck_assert_ptr_null(t[0].w.loop);
  ck_assert_ptr_null(t[1].w.loop);
  ck_assert_int_eq(loop->n_watching, 0);
  finish_group();
  close(efd);
  close(efd2);
}

START_TEST(selector_watcher_remove_during_poll_dispatch) {
  watcher_remove_during_dispatch(-1);
}
END_TEST

START_TEST(selector_watcher_remove_during_sleep_dispatch) {
  watcher_remove_during_dispatch(0);
}
END_TEST

/* With a watcher, the non-blocking epoll_wait of the poll phase also sees a
 * source's fd; the source's wakeup op acknowledges it although the loop
 * never sleeps. */
START_TEST(selector_watcher_poll_reports_source_fd) {
  weft_loop *loop = start_group(1, -1, 0, false);
  static struct twatch w;
  static struct tsrc t;
  twatch_init(&w, loop, new_eventfd()); /* never ready */
  run_on(loop, watch_add_task, WATCH(&w, EPOLLIN));
  tsrc_init(&t, loop, &wake_only_ops, new_eventfd());
  run_on(loop, add_task, &t);
  kick(t.src.fd);
  WAIT_FOR(atomic_load(&t.wakeups) == 1);
  usleep(10 * 1000);
  ck_assert_int_eq(atomic_load(&t.wakeups), 1); /* acknowledged once */
  ck_assert_uint_eq(th_loop_stats(loop).sleeps, 0);
  ck_assert_int_eq(atomic_load(&w.calls), 0);
  run_on(loop, remove_task, &t);
  run_on(loop, watch_remove_task, &w);
  finish_group();
  close(t.src.fd);
  close(w.w.fd);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "selector", "core", 60, selector_idle_group_sleeps_low_cpu,
      selector_event_inside_window_no_sleep,
      selector_event_after_window_one_sleep,
      selector_busy_poll_negative_never_sleeps,
      selector_set_busy_poll_us_changes_window,
      selector_arm_refused_polls_again,
      selector_poll_error_removes_and_logs_source,
      selector_remove_self_inside_poll, selector_remove_next_source_inside_poll,
      selector_remove_other_source_during_dispatch,
      selector_timerfd_source_wakes_sleeping_loop,
      selector_pipe_source_poll_budget_respected,
      selector_stats_format_names_every_counter,
      selector_window_fixed_values_in_stats,
      selector_window_shrinks_on_wasted_spins,
      selector_window_grows_when_events_follow_sleep,
      selector_window_grows_within_horizon,
      selector_window_drops_when_spins_run_out,
      selector_window_back_when_events_come_within_it,
      selector_window_kept_when_spins_catch_events,
      selector_window_shrinks_when_preempted,
      selector_window_keeps_short_spins_when_preempted,
      selector_window_fixed_ignores_preemption, selector_window_hold_backs_off,
      selector_window_grows_back_after_a_short_burst, selector_watcher_errors,
      selector_watcher_polls_only_while_watching,
      selector_watcher_fires_while_spinning,
      selector_watcher_wakes_sleeping_loop,
      selector_watcher_no_interest_silences_hangup,
      selector_watcher_remove_during_poll_dispatch,
      selector_watcher_remove_during_sleep_dispatch,
      selector_watcher_poll_reports_source_fd,
      selector_window_starts_after_wakeup_work, NULL);
}
