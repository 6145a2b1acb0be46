/* SPDX-License-Identifier: Apache-2.0 */
/* The loop: creation, the thread body with its graceful shutdown, tasks
 * (weft_loop_execute), sources, fd watchers, close hooks and loop-local
 * keys. One
 * selector iteration lives in selector.c, timers in timer.c, threads and
 * groups in loop_group.c.
 */
#include "loop/loop_internal.h"

#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <weft/clock.h>
#include <weft/error.h>
#include <weft/log.h>

/* The loop whose thread this is (NULL elsewhere). */
static _Thread_local weft_loop *current_loop;

/* Keys handed out so far (weft_loop_key_create), process-wide. */
static _Atomic int keys_created;

int weft__loop_new(weft_loop **out, weft_loop_group *group, int index,
                   int busy_poll_us, bool adaptive, int poll_budget) {
  int err;
  weft_loop *loop = calloc(1, sizeof *loop);
  if (loop == NULL)
    return WEFT_ENOMEM;

  loop->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (loop->epfd < 0) {
    err = -errno;
    goto failed_epoll_create;
  }
  /* Non-blocking, so acknowledging a wake-up can never block the loop. */
  loop->wakeup_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (loop->wakeup_fd < 0) {
    err = -errno;
    goto failed_eventfd;
  }
  /* data.ptr == &wakeup_fd tells the selector this is not a source. */
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &loop->wakeup_fd};
  if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->wakeup_fd, &ev) < 0) {
    err = -errno;
    goto failed_epoll_add;
  }

  weft__timer_heap_init(&loop->timers);
  weft__task_queue_init(&loop->tasks);
  loop->poll_budget = poll_budget;
  loop->index = index;
  loop->group = group;
  loop->pin_cpu = -1;
  atomic_init(&loop->pool, NULL);
  loop->pool_retain_bytes = WEFT_POOL_RETAIN_BYTES_DEFAULT;
  atomic_init(&loop->sleeping, false);
  atomic_init(&loop->wakeup_pending, 0);
  atomic_init(&loop->remote_returns, 0);
  atomic_init(&loop->inflight, 0);
  atomic_init(&loop->closed, false);
  atomic_init(&loop->stop_requested, false);
  atomic_init(&loop->busy_poll_us, busy_poll_us);
  weft__window_init(loop, adaptive, busy_poll_us);
  atomic_init(&loop->state, WEFT__LOOP_CREATED);
  atomic_init(&loop->tid, 0);
  *out = loop;
  return 0;

failed_epoll_add:
  close(loop->wakeup_fd);
failed_eventfd:
  close(loop->epfd);
failed_epoll_create:
  free(loop);
  return err;
}

void weft__loop_free(weft_loop *loop) {
  if (loop == NULL)
    return;
  /* Tasks queued to a loop that never ran are dropped unrun. */
  weft__task_queue_fini(&loop->tasks);
  weft__timer_heap_fini(&loop->timers);
  while (loop->close_hooks != NULL) {
    weft__close_hook *h = loop->close_hooks;
    loop->close_hooks = h->next;
    free(h);
  }
  close(loop->wakeup_fd);
  close(loop->epfd);
  free(loop);
}

/* ---- Waking the loop ---------------------------------------------------- */

void weft__loop_signal(weft_loop *loop) {
  uint64_t one = 1;
  ssize_t n;
  do
    n = write(loop->wakeup_fd, &one, sizeof one);
  while (n < 0 && errno == EINTR);
  /* EAGAIN means the counter is saturated: the fd is readable anyway. */
}

void weft__loop_wake(weft_loop *loop) {
  /* seq_cst load after the caller's seq_cst publication (the push exchange
   * or the remote_returns store): the producer half of the Dekker handshake
   * with try_sleep in selector.c, which stores `sleeping` and then re-checks
   * the queue, both seq_cst. At least one side sees the other. */
  if (!atomic_load(&loop->sleeping))
    return;
  /* One write per sleep is enough; the loop clears the flag when it reads
   * the eventfd. */
  if (atomic_exchange(&loop->wakeup_pending, 1) != 0)
    return;
  weft__loop_signal(loop);
}

void weft__loop_request_stop(weft_loop *loop) {
  if (atomic_exchange(&loop->stop_requested, true))
    return;
  /* Unconditional write: stopping is rare, and the loop then needs no
   * stop check between setting `sleeping` and blocking. */
  weft__loop_signal(loop);
}

/* ---- Tasks -------------------------------------------------------------- */

int weft_loop_execute(weft_loop *loop, weft_task_cb cb, void *arg) {
  if (cb == NULL)
    return WEFT_EINVAL;
  weft__task *task = malloc(sizeof *task);
  if (task == NULL)
    return WEFT_ENOMEM;
  task->cb = cb;
  task->arg = arg;

  /* In-flight count, seq_cst, against the loop's seq_cst store of `closed`
   * followed by its load of `inflight` (loop_finish): either we see closed
   * and refuse, or the loop sees us and waits for our push before its final
   * drain. So an accepted task always runs. */
  atomic_fetch_add(&loop->inflight, 1);
  if (atomic_load(&loop->closed)) {
    atomic_fetch_sub(&loop->inflight, 1);
    free(task);
    return WEFT_ECLOSED;
  }
  weft__task_queue_push(&loop->tasks, task);
  /* Wake before leaving the in-flight section: once inflight drops to 0 an
   * exiting loop may be joined and freed. */
  weft__loop_wake(loop);
  /* Release: the loop's acquire load of 0 sees the push complete. */
  atomic_fetch_sub_explicit(&loop->inflight, 1, memory_order_release);
  return 0;
}

int weft__loop_run_tasks(weft_loop *loop, weft__task *mark, bool *pending) {
  int ran = 0;
  *pending = false;
  for (;;) {
    weft__task *task;
    weft__tq_status st = weft__task_queue_pop(&loop->tasks, mark, &task);
    if (st == WEFT__TQ_PENDING)
      *pending = true;
    if (st != WEFT__TQ_TASK)
      break;
    bool last = task == mark; /* compare before the node is freed */
    weft_task_cb cb = task->cb;
    void *arg = task->arg;
    free(task);
    cb(arg);
    ran++;
    if (last)
      break;
  }
  if (ran > 0)
    weft__stat_add(&loop->stats.tasks_run, (uint64_t)ran);
  return ran;
}

/* Runs the tasks queued up to `mark` (NULL: until the queue is empty),
 * waiting out half-linked pushes: a producer preempted mid-push finishes
 * its one store as soon as it runs again. */
static void drain_tasks(weft_loop *loop, weft__task *mark) {
  bool pending;
  for (;;) {
    weft__loop_run_tasks(loop, mark, &pending);
    if (!pending)
      return;
    sched_yield();
  }
}

/* Runs the close hooks registered so far, newest first: one round. A hook
 * that a hook registers waits for the next round, which comes after the
 * tasks queued meanwhile have run (loop_finish). That is how an owner of
 * per-loop state frees it after the work its closes queued: the channel
 * book closes its channels, which may queue tasks that still use a
 * transport's loop state (uring's delivery of held reads), and registers
 * the transports' teardown for the next round. */
static void run_close_hooks(weft_loop *loop) {
  weft__close_hook *h = loop->close_hooks;
  loop->close_hooks = NULL;
  while (h != NULL) {
    weft__close_hook *next = h->next;
    weft_task_cb cb = h->cb;
    void *arg = h->arg;
    free(h);
    cb(arg);
    h = next;
  }
}

/* The graceful stop documented in loop.h. */
static void loop_finish(weft_loop *loop) {
  /* Only the tasks queued so far: producers still run, and draining until
   * empty could chase a fast producer forever. */
  drain_tasks(loop, weft__task_queue_mark(&loop->tasks));
  run_close_hooks(loop);

  /* Refuse new tasks, then wait for producers that passed the closed check
   * (see weft_loop_execute): their tasks are in the queue afterwards. */
  atomic_store(&loop->closed, true);
  while (atomic_load(&loop->inflight) != 0)
    sched_yield();
  /* Now the queue is finite: what the hooks queued, what producers queued
   * before the close, and hooks those tasks register, until none is left. */
  do {
    drain_tasks(loop, NULL);
    run_close_hooks(loop);
  } while (loop->close_hooks != NULL || weft__task_queue_busy(&loop->tasks));

  weft_pool *pool = atomic_load_explicit(&loop->pool, memory_order_relaxed);
  if (pool != NULL) {
    atomic_store_explicit(&loop->pool, NULL, memory_order_release);
    loop->leaks = weft_pool_free(pool);
    if (loop->leaks > 0)
      weft_log(WEFT_LOG_WARN, "loop %d: %zu buffer(s) leaked at shutdown",
               loop->index, loop->leaks);
  }
  weft__timer_heap_fini(&loop->timers);
}

/* Called by the pool on a releasing thread when its return stack became
 * non-empty. The flag, stored seq_cst after the pool's push, is what
 * try_sleep re-checks, so the handshake does not depend on the pool's own
 * memory orders. */
static void pool_notify(void *arg) {
  weft_loop *loop = arg;
  atomic_store(&loop->remote_returns, 1);
  weft__loop_wake(loop);
}

static void create_pool(weft_loop *loop) {
  weft_pool_options opts;
  weft_pool_options_init(&opts);
  opts.retain_bytes = loop->pool_retain_bytes;
  weft_pool *pool;
  int err = weft_pool_new(&pool, &opts);
  if (err != 0) {
    /* The loop still runs tasks, timers and sources; only buffer
     * allocation on it fails (weft_loop_pool() returns NULL). */
    weft_log(WEFT_LOG_ERROR, "loop %d: cannot create its buffer pool: %s",
             loop->index, weft_strerror(err));
    return;
  }
  weft_pool_set_remote_notify(pool, pool_notify, loop);
  atomic_store_explicit(&loop->pool, pool, memory_order_release);
}

static void setup_thread(weft_loop *loop) {
  atomic_store(&loop->tid, gettid());
  int err = pthread_setname_np(pthread_self(), loop->thread_name);
  if (err != 0)
    weft_log(WEFT_LOG_DEBUG, "loop %d: pthread_setname_np: %s", loop->index,
             weft_strerror(-err));
  if (loop->pin_cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(loop->pin_cpu, &set);
    err = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (err != 0)
      weft_log(WEFT_LOG_WARN,
               "loop %d: cannot pin to CPU %d: %s; running "
               "unpinned",
               loop->index, loop->pin_cpu, weft_strerror(-err));
  }
}

int weft__loop_attach(weft_loop *loop) {
  /* An attached loop has no thread of its own, so no tid: tests that read
   * per-thread CPU time only use group loops. */
  loop->attached_prev = current_loop;
  current_loop = loop;
  create_pool(loop);
  if (atomic_load_explicit(&loop->pool, memory_order_relaxed) == NULL) {
    current_loop = loop->attached_prev;
    return WEFT_ENOMEM;
  }
  loop->last_active_ns = weft_now_ns();
  atomic_store(&loop->state, WEFT__LOOP_RUNNING);
  return 0;
}

int weft__loop_run_pending(weft_loop *loop) {
  assert(current_loop == loop); /* attached on this thread */
  bool pending;
  int ran = (int)weft_pool_drain(
      atomic_load_explicit(&loop->pool, memory_order_relaxed));
  ran += weft__loop_run_tasks(loop, NULL, &pending);
  int fired = 0;
  if (weft__timer_heap_next(&loop->timers) <= weft_now_ns())
    fired = weft__timers_run(loop, weft_now_ns());
  ran += fired;
  /* Tasks the timer callbacks queued. */
  if (fired > 0)
    ran += weft__loop_run_tasks(loop, NULL, &pending);
  return ran;
}

size_t weft__loop_detach(weft_loop *loop) {
  assert(current_loop == loop); /* attached on this thread */
  loop_finish(loop);
  atomic_store(&loop->state, WEFT__LOOP_FINISHED);
  current_loop = loop->attached_prev;
  return loop->leaks;
}

void *weft__loop_thread(void *arg) {
  weft_loop *loop = arg;
  current_loop = loop;
  setup_thread(loop);
  create_pool(loop);
  weft__selector_start(loop);
  atomic_store(&loop->state, WEFT__LOOP_RUNNING);

  /* Acquire: what the stopping thread did before weft_loop_group_stop
   * happens before the loop's finish (close hooks, the last tasks). A stale
   * read costs at most one more iteration: the eventfd wakes the loop. */
  while (!atomic_load_explicit(&loop->stop_requested, memory_order_acquire))
    weft__selector_iteration(loop);

  loop_finish(loop);
  weft__selector_finish(loop);
  atomic_store(&loop->state, WEFT__LOOP_FINISHED);
  current_loop = NULL;
  return NULL;
}

/* ---- Queries ------------------------------------------------------------ */

bool weft_loop_in_loop(const weft_loop *loop) {
  return loop != NULL && current_loop == loop;
}

weft_loop *weft_loop_current(void) { return current_loop; }

int weft_loop_index(const weft_loop *loop) { return loop->index; }

weft_pool *weft_loop_pool(weft_loop *loop) {
  return atomic_load_explicit(&loop->pool, memory_order_acquire);
}

int weft_loop_busy_poll_us(const weft_loop *loop) {
  return atomic_load_explicit(&loop->busy_poll_us, memory_order_relaxed);
}

int weft_loop_set_busy_poll_us(weft_loop *loop, int busy_poll_us) {
  if (busy_poll_us < -1)
    return WEFT_EINVAL;
  /* Relaxed: a window size carries no other data with it. */
  atomic_store_explicit(&loop->busy_poll_us, busy_poll_us,
                        memory_order_relaxed);
  return 0;
}

pid_t weft__loop_tid(const weft_loop *loop) { return atomic_load(&loop->tid); }

size_t weft__loop_leaks(const weft_loop *loop) { return loop->leaks; }

/* ---- Close hooks and loop-local keys ------------------------------------ */

int weft_loop_on_close(weft_loop *loop, weft_task_cb cb, void *arg) {
  assert(cb != NULL); /* a NULL hook would crash the loop at shutdown */
  weft__close_hook *h = malloc(sizeof *h);
  if (h == NULL)
    return WEFT_ENOMEM;
  h->cb = cb;
  h->arg = arg;
  h->next = loop->close_hooks;
  loop->close_hooks = h;
  return 0;
}

int weft_loop_key_create(void) {
  int key = atomic_load_explicit(&keys_created, memory_order_relaxed);
  do {
    if (key >= WEFT_LOOP_MAX_KEYS)
      return WEFT_ENOSPC;
  } while (!atomic_compare_exchange_weak_explicit(&keys_created, &key, key + 1,
                                                  memory_order_relaxed,
                                                  memory_order_relaxed));
  return key;
}

void *weft_loop_get_local(weft_loop *loop, int key) {
  assert(key >= 0 && key < WEFT_LOOP_MAX_KEYS); /* keys come from key_create */
  if (key < 0 || key >= WEFT_LOOP_MAX_KEYS)
    return NULL;
  return loop->locals[key];
}

void weft_loop_set_local(weft_loop *loop, int key, void *value) {
  assert(key >= 0 && key < WEFT_LOOP_MAX_KEYS); /* keys come from key_create */
  if (key < 0 || key >= WEFT_LOOP_MAX_KEYS)
    return;
  loop->locals[key] = value;
}

/* ---- Sources ------------------------------------------------------------ */

void weft_source_init(weft_source *src, const weft_source_ops *ops, int fd,
                      void *data) {
  *src = (weft_source){.ops = ops, .fd = fd, .events = EPOLLIN, .data = data};
}

int weft_loop_add_source(weft_loop *loop, weft_source *src) {
  assert(src->ops != NULL && src->ops->poll != NULL); /* poll is required */
  if (src->loop != NULL)
    return WEFT_EALREADY;
  if (src->fd >= 0) {
    /* Level-triggered: an fd that stays ready keeps waking the loop until
     * the source's poll has drained it. */
    struct epoll_event ev = {.events = src->events, .data.ptr = src};
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, src->fd, &ev) < 0)
      return -errno;
  }
  src->loop = loop;
  src->next = NULL;
  src->prev = loop->sources_tail;
  if (loop->sources_tail != NULL)
    loop->sources_tail->next = src;
  else
    loop->sources = src;
  loop->sources_tail = src;
  return 0;
}

int weft_loop_remove_source(weft_loop *loop, weft_source *src) {
  if (src->loop != loop)
    return WEFT_ENOENT;
  /* The selector may be iterating over the list right now (this is called
   * from inside a poll, an arm or a wakeup): step its cursor past us. */
  if (loop->poll_cursor == src)
    loop->poll_cursor = src->next;
  if (src->prev != NULL)
    src->prev->next = src->next;
  else
    loop->sources = src->next;
  if (src->next != NULL)
    src->next->prev = src->prev;
  else
    loop->sources_tail = src->prev;

  if (src->fd >= 0) {
    /* Failure is harmless: if the owner already closed the fd, the kernel
     * dropped it from the epoll set with its last reference. */
    if (epoll_ctl(loop->epfd, EPOLL_CTL_DEL, src->fd, NULL) < 0)
      weft_log(WEFT_LOG_DEBUG, "source %s: epoll_ctl(DEL): %s", src->ops->name,
               weft_strerror(-errno));
    /* Events of this epoll batch not dispatched yet must not reach a
     * source its owner may free as soon as we return. */
    for (int i = 0; i < loop->n_ready; i++)
      if (loop->ready[i].data.ptr == src)
        loop->ready[i].data.ptr = NULL;
  }
  src->loop = NULL;
  src->next = NULL;
  src->prev = NULL;
  return 0;
}

/* ---- fd watchers -------------------------------------------------------- */

/* What a watcher may ask for: everything else (EPOLLONESHOT,
 * EPOLLEXCLUSIVE, ...) would break the contract of weft/source.h (an fd in
 * the set is reported while it has events asked for, or, with EPOLLET,
 * each time it gets new ones). */
#define WATCHER_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET)

void weft_watcher_init(weft_watcher *w, int fd, weft_watcher_cb cb,
                       void *data) {
  w->fd = fd;
  w->cb = cb;
  w->data = data;
  w->busy_read = NULL;
  w->events = 0;
  w->loop = NULL;
}

/* Moves `w`'s interest from w->events to `events` with one epoll_ctl. */
/* One epoll_ctl of `w`'s fd, its events tagged as a watcher's (dispatch
 * tells watchers from sources by the tag). Returns 0 or -errno. */
static int watcher_epoll_ctl(weft_loop *loop, weft_watcher *w, int op,
                             uint32_t events) {
  struct epoll_event ev = {
      .events = events, .data.u64 = (uint64_t)(uintptr_t)w | WEFT__WATCHER_TAG};
  return epoll_ctl(loop->epfd, op, w->fd, &ev) < 0 ? -errno : 0;
}

static int watcher_ctl(weft_loop *loop, weft_watcher *w, uint32_t events) {
  if (events == w->events)
    return 0;
  int op = w->events == 0 ? EPOLL_CTL_ADD
           : events == 0  ? EPOLL_CTL_DEL
                          : EPOLL_CTL_MOD;
  int err = watcher_epoll_ctl(loop, w, op, events);
  if (err < 0) {
    /* DEL of an fd the owner closed already: the kernel dropped it with
     * its last reference, so the fd is out of the set either way. */
    if (op != EPOLL_CTL_DEL || (err != WEFT_EBADF && err != WEFT_ENOENT))
      return err;
  }
  if (w->events == 0)
    loop->n_watching++;
  else if (events == 0)
    loop->n_watching--;
  w->events = events;
  if (events == 0 && loop->busy_read == w)
    loop->busy_read = NULL; /* out of the set: nothing to spin on */
  return 0;
}

int weft_loop_add_watcher(weft_loop *loop, weft_watcher *w, uint32_t events) {
  assert(w->cb != NULL); /* a NULL callback would crash the loop */
  if (w->loop != NULL)
    return WEFT_EALREADY;
  if ((events & ~(uint32_t)WATCHER_EVENTS) != 0)
    return WEFT_EINVAL;
  w->events = 0;
  int err = watcher_ctl(loop, w, events);
  if (err < 0)
    return err;
  w->loop = loop;
  return 0;
}

int weft_loop_modify_watcher(weft_loop *loop, weft_watcher *w,
                             uint32_t events) {
  if (w->loop != loop)
    return WEFT_ENOENT;
  if ((events & ~(uint32_t)WATCHER_EVENTS) != 0)
    return WEFT_EINVAL;
  return watcher_ctl(loop, w, events);
}

int weft_loop_rearm_watcher(weft_loop *loop, weft_watcher *w) {
  if (w->loop != loop)
    return WEFT_ENOENT;
  if (w->events == 0)
    return 0;
  return watcher_epoll_ctl(loop, w, EPOLL_CTL_MOD, w->events);
}

int weft_loop_remove_watcher(weft_loop *loop, weft_watcher *w) {
  if (w->loop != loop)
    return WEFT_ENOENT;
  int err = watcher_ctl(loop, w, 0);
  if (err < 0) {
    /* The fd stays in the set, but nothing may reach `w` any more: its
     * owner frees it as soon as we return. Count it out anyway. */
    weft_log(WEFT_LOG_WARN, "fd watcher %d: epoll_ctl(DEL): %s", w->fd,
             weft_strerror(err));
    loop->n_watching--;
    w->events = 0;
  }
  if (loop->busy_read == w)
    loop->busy_read = NULL;
  /* Events of the epoll batch being dispatched must not reach it. */
  uint64_t tagged = (uint64_t)(uintptr_t)w | WEFT__WATCHER_TAG;
  for (int i = 0; i < loop->n_ready; i++)
    if (loop->ready[i].data.u64 == tagged)
      loop->ready[i].data.u64 = 0;
  w->loop = NULL;
  return 0;
}
