/* The hybrid selector: one iteration of a loop (docs/architecture.md, "The
 * hybrid selector"), split into its phases:
 *
 *   poll_sources  poll every source without blocking (budget per source)
 *   drain_pool    take back buffers released on other threads
 *   run_timers    fire due timers
 *   run_tasks     run the tasks queued before this phase began
 *   try_sleep     after busy_poll_us without work: arm every source, set
 *                 `sleeping`, re-check the queue, block in epoll until an fd,
 *                 the wakeup eventfd or the next timer deadline; dispatch
 *                 what woke us to the sources' wakeup ops
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include <weft/clock.h>
#include <weft/error.h>
#include <weft/log.h>

#include "loop/loop_internal.h"

/* Whether epoll_pwait2 works here, probed on first use and cached for the
 * process: 0 = not probed or works, 1 = missing (kernel before 5.11, or a
 * seccomp profile that does not know it and answers ENOSYS or EPERM). */
static _Atomic int no_epoll_pwait2;

/* Logs a source that failed and removes it; the loop goes on without it. */
static void source_failed(weft_loop *loop, weft_source *src, const char *op,
                          int err) {
  weft_log(WEFT_LOG_WARN, "source %s: %s failed: %s; removing it",
           src->ops->name, op, weft_strerror(err));
  weft_loop_remove_source(loop, src);
}

/* Phase 1. Iterates through poll_cursor so that a poll may remove any
 * source, itself included (weft_loop_remove_source moves the cursor). */
static int poll_sources(weft_loop *loop) {
  int work = 0;
  weft_source *src = loop->sources;
  while (src != NULL) {
    loop->poll_cursor = src->next;
    int n = src->ops->poll(src, loop->poll_budget);
    if (n < 0)
      source_failed(loop, src, "poll", n);
    else
      work += n;
    src = loop->poll_cursor;
  }
  return work;
}

/* Phase 2. */
static int drain_pool(weft_loop *loop) {
  weft_pool *pool = atomic_load_explicit(&loop->pool, memory_order_relaxed);
  if (pool == NULL)
    return 0;
  /* Clear the notify flag before draining (acquire: what the notifier
   * pushed before setting it is visible to the drain); a return that lands
   * after the drain sets it again. The load first keeps the common case
   * free of a locked instruction. */
  if (atomic_load_explicit(&loop->remote_returns, memory_order_relaxed))
    atomic_exchange_explicit(&loop->remote_returns, 0, memory_order_acquire);
  return (int)weft_pool_drain(pool);
}

/* Phase 3. */
static int run_timers(weft_loop *loop, uint64_t now) {
  if (weft__timer_heap_next(&loop->timers) > now)
    return 0;
  return weft__timers_run(loop, now);
}

/* Phase 4: only what was queued before it began, so a task that queues a
 * task (or itself) lets the sources be polled in between. */
static int run_tasks(weft_loop *loop, bool *pending) {
  return weft__loop_run_tasks(loop, weft__task_queue_mark(&loop->tasks),
                              pending);
}

/* Asks every source to arm. Returns true when all agreed to sleep. */
static bool arm_sources(weft_loop *loop) {
  weft__stat_add(&loop->stats.arms, 1);
  weft_source *src = loop->sources;
  while (src != NULL) {
    loop->poll_cursor = src->next;
    int r = src->ops->arm != NULL ? src->ops->arm(src) : 0;
    if (r > 0) {
      /* Work is pending: poll again, and try to arm again once idle. */
      weft__stat_add(&loop->stats.arms_refused, 1);
      return false;
    }
    if (r < 0)
      source_failed(loop, src, "arm", r);
    src = loop->poll_cursor;
  }
  return true;
}

/* epoll with a nanosecond timeout (NULL = forever). */
static int epoll_wait_ns(weft_loop *loop, const struct timespec *timeout) {
  if (!atomic_load_explicit(&no_epoll_pwait2, memory_order_relaxed)) {
    int n =
        epoll_pwait2(loop->epfd, loop->ready, WEFT__MAX_EVENTS, timeout, NULL);
    if (n >= 0 || (errno != ENOSYS && errno != EPERM))
      return n;
    atomic_store_explicit(&no_epoll_pwait2, 1, memory_order_relaxed);
    weft_log(WEFT_LOG_DEBUG,
             "epoll_pwait2 unavailable (%s); timer deadlines "
             "round up to milliseconds",
             weft_strerror(-errno));
  }
  int ms = -1;
  if (timeout != NULL) {
    /* Round up: waking early would only spin until the deadline. */
    uint64_t ns =
        (uint64_t)timeout->tv_sec * 1000000000u + (uint64_t)timeout->tv_nsec;
    uint64_t up = (ns + 999999u) / 1000000u;
    ms = up > INT_MAX ? INT_MAX : (int)up;
  }
  return epoll_wait(loop->epfd, loop->ready, WEFT__MAX_EVENTS, ms);
}

/* Blocks until an event or `deadline` (ns, UINT64_MAX = none). Returns the
 * number of events in loop->ready, or 0 if the deadline has already
 * passed (no sleep then). */
static int wait_events(weft_loop *loop, uint64_t deadline) {
  int n;
  bool counted = false;
  do {
    struct timespec ts, *timeout = NULL;
    if (deadline != UINT64_MAX) {
      /* Recomputed on every try so that EINTR does not stretch the wait. */
      uint64_t now = weft_now_ns();
      if (deadline <= now)
        return 0;
      uint64_t left = deadline - now;
      ts.tv_sec = (time_t)(left / 1000000000u);
      ts.tv_nsec = (long)(left % 1000000000u);
      timeout = &ts;
    }
    if (!counted) {
      weft__stat_add(&loop->stats.sleeps, 1);
      counted = true;
    }
    n = epoll_wait_ns(loop, timeout);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    /* Only a broken epoll fd gets here; report it and keep iterating. */
    weft_log(WEFT_LOG_ERROR, "loop %d: epoll_wait: %s", loop->index,
             weft_strerror(-errno));
    return 0;
  }
  return n;
}

static void ack_wakeup_fd(weft_loop *loop) {
  uint64_t count;
  ssize_t r;
  do
    r = read(loop->wakeup_fd, &count, sizeof count);
  while (r < 0 && errno == EINTR);
  /* After the read: a producer that sees 0 writes again, and its write
   * leaves the fd readable for the next sleep. */
  atomic_store(&loop->wakeup_pending, 0);
}

/* Hands each event to its source. A wakeup op may remove any source:
 * weft_loop_remove_source clears that source's entries in loop->ready. */
static void dispatch(weft_loop *loop, int n) {
  loop->n_ready = n;
  for (int i = 0; i < n; i++) {
    void *ptr = loop->ready[i].data.ptr;
    if (ptr == NULL)
      continue; /* removed during this dispatch */
    if (ptr == &loop->wakeup_fd) {
      ack_wakeup_fd(loop);
      continue;
    }
    weft_source *src = ptr;
    if (src->ops->wakeup != NULL)
      src->ops->wakeup(src, loop->ready[i].events);
  }
  loop->n_ready = 0;
  if (n > 0)
    weft__stat_add(&loop->stats.wakeups, 1);
}

/* Phase 5: arm, announce the sleep, re-check, sleep, dispatch. */
static void try_sleep(weft_loop *loop) {
  if (!arm_sources(loop))
    return;
  /* Dekker with producers (weft__loop_wake): store `sleeping`, then load
   * the queue and the remote-returns flag, all seq_cst. A producer that
   * published before our loads is seen here; one that publishes after them
   * sees `sleeping` and writes the eventfd. */
  atomic_store(&loop->sleeping, true);
  if (weft__task_queue_busy(&loop->tasks) ||
      atomic_load(&loop->remote_returns) != 0) {
    atomic_store_explicit(&loop->sleeping, false, memory_order_relaxed);
    return;
  }
  int n = wait_events(loop, weft__timer_heap_next(&loop->timers));
  /* Relaxed: producers that still see true only write the eventfd once
   * more, which the next sleep consumes. */
  atomic_store_explicit(&loop->sleeping, false, memory_order_relaxed);
  dispatch(loop, n);
}

static bool idle_long_enough(weft_loop *loop, uint64_t now) {
  int window_us =
      atomic_load_explicit(&loop->busy_poll_us, memory_order_relaxed);
  if (window_us < 0)
    return false; /* pure busy polling */
  return now - loop->last_active_ns >= (uint64_t)window_us * 1000u;
}

void weft__selector_iteration(weft_loop *loop) {
  int work = poll_sources(loop);
  work += drain_pool(loop);
  uint64_t now = weft_now_ns();
  work += run_timers(loop, now);
  bool pending;
  work += run_tasks(loop, &pending);
  weft__stat_add(&loop->stats.iterations, 1);

  /* A half-linked push counts as work: the task is nearly there, and the
   * producer will not wake us because it saw us awake. */
  if (work > 0 || pending) {
    weft__stat_add(&loop->stats.polls_busy, 1);
    loop->last_active_ns = now;
    return;
  }
  if (idle_long_enough(loop, now))
    try_sleep(loop);
}
