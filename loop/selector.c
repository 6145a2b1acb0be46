/* SPDX-License-Identifier: Apache-2.0 */
/* The hybrid selector: one iteration of a loop (docs/architecture.md, "The
 * hybrid selector"), split into its phases:
 *
 *   poll_watchers one non-blocking epoll_wait on the loop's set, only while
 *                 fd watchers are registered; dispatch what it found (or,
 *                 spinning on one busy socket, its busy read: below)
 *   poll_sources  poll every source without blocking (budget per source)
 *   drain_pool    take back buffers released on other threads
 *   run_timers    fire due timers
 *   run_tasks     run the tasks queued before this phase began
 *   try_sleep     after the busy-poll window without work: arm every
 *                 source, set `sleeping`, re-check the queue, block in epoll
 *                 until an fd, the wakeup eventfd or the next timer
 *                 deadline; dispatch what woke us to the sources' wakeup ops
 *                 and the watchers' callbacks; adapt the window
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/resource.h>
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

static void dispatch(weft_loop *loop, int n);

/* ---- The busy read --------------------------------------------------------
 *
 * A spinning loop finds a socket's data in two system calls: the
 * epoll_wait that reports it ready, then the read. A raw client spinning
 * in recv() needs one, and over loopback in this VM the other costs
 * 0.4-0.6 µs per message at each end of a round trip (weft-bench
 * ping-pong: 1.16x raw-busy's p50 with it,
 * docs/journal/2026-11-24-issue-17.md). So when the last epoll batch held one
 * watcher alone, reported EPOLLIN alone, and that watcher can read without
 * readiness (busy_read), the following spins call busy_read instead of
 * epoll_wait, as Linux's busy read spins in recv() (net.core.busy_read), while
 * the loop watches at most WEFT_BUSY_READ_MAX_WATCHERS fds (one connection and
 * a listener: with more, the spins kept from epoll delay the others). Every
 * WEFT_BUSY_READ_EPOLL_EVERY-th spin is still an epoll_wait, so other
 * watchers wait a few spins at most; a
 * batch of two or more watchers ends it (epoll finds many ready fds more
 * cheaply than reads of each would); an empty interest, or removal, ends
 * it too (loop.c), and an interest beyond reading pauses it. A busy read
 * that found a lot (WEFT_BUSY_READ_MORE) makes the next spin an epoll_wait
 * (busy_read, below). The loop still sleeps after the window as before: a
 * busy read that finds nothing is no work.
 */

/* Picks the watcher to busy-read from an epoll batch, before any of its
 * callbacks runs (a callback may remove it, which clears the pick): the
 * watcher of a batch that held it alone, if it was reported EPOLLIN alone
 * and can busy-read, else none. A batch with no watcher (the wake-up fd, a
 * source's fd), or with the picked one alone (reported EPOLLOUT, say: its
 * interest pauses the busy read, busy_read_due), keeps the pick. So the pick
 * follows the socket last found alone: the other watcher of the loop, once it
 * is the active one, is not left to every WEFT_BUSY_READ_EPOLL_EVERY-th spin.
 */
static void busy_read_pick(weft_loop *loop, int n) {
  weft_watcher *alone = NULL, *only = NULL;
  int watched = 0;
  for (int i = 0; i < n; i++) {
    uint64_t u = loop->ready[i].data.u64;
    if ((u & WEFT__WATCHER_TAG) == 0)
      continue;
    if (++watched > 1) {
      loop->busy_read = NULL;
      return;
    }
    alone = (weft_watcher *)(uintptr_t)(u & ~WEFT__WATCHER_TAG);
    if (loop->ready[i].events == EPOLLIN && alone->busy_read != NULL)
      only = alone;
  }
  if (alone != NULL && alone != loop->busy_read)
    loop->busy_read = only;
}

/* Whether this spin busy-reads instead of asking epoll. */
static bool busy_read_due(weft_loop *loop) {
  const weft_watcher *w = loop->busy_read;
  if (w == NULL || loop->n_watching > WEFT_BUSY_READ_MAX_WATCHERS)
    return false;
  if (++loop->busy_read_spins >= WEFT_BUSY_READ_EPOLL_EVERY) {
    loop->busy_read_spins = 0;
    return false;
  }
  return (w->events & EPOLLIN) &&
         (w->events & ~(EPOLLIN | EPOLLRDHUP | EPOLLET)) == 0;
}

/* A busy read that found a lot (WEFT_BUSY_READ_MORE: a bulk read) makes
 * the next spin an epoll_wait: a socket that never runs dry would
 * otherwise keep the other watchers behind WEFT_BUSY_READ_EPOLL_EVERY of
 * its reads (each up to the transport's bound of bytes and handler work)
 * where epoll every spin keeps them behind one. */
static int busy_read(weft_loop *loop) {
  weft__stat_add(&loop->stats.busy_reads, 1);
  int n = loop->busy_read->busy_read(loop->busy_read); /* may free it */
  if (n <= 0)
    return 0;
  weft__stat_add(&loop->stats.busy_read_hits, 1);
  if (n == WEFT_BUSY_READ_MORE)
    loop->busy_read_spins = WEFT_BUSY_READ_EPOLL_EVERY - 1;
  return n;
}

/* Phase 1a: the fd watchers, all in the loop's own epoll set. Only while
 * some are registered with events, so a loop without any (uring, ucx or
 * verbs only) makes no system call here. Up to poll_budget events. */
static int poll_watchers(weft_loop *loop) {
  /* The sleep just handed over every ready watcher; whatever became ready
   * since is reported by the next wait, non-blocking or not. Cleared even
   * with no watcher watching, so that it cannot skip the first poll of a
   * watcher added later. */
  bool skip = loop->skip_watchers;
  loop->skip_watchers = false;
  if (loop->n_watching == 0 || skip)
    return 0;
  if (busy_read_due(loop))
    return busy_read(loop);
  int max = loop->poll_budget < WEFT__MAX_EVENTS ? loop->poll_budget
                                                 : WEFT__MAX_EVENTS;
  weft__stat_add(&loop->stats.watcher_polls, 1);
  int n = epoll_wait(loop->epfd, loop->ready, max, 0);
  if (n <= 0) {
    if (n < 0 && errno != EINTR)
      weft_log(WEFT_LOG_ERROR, "loop %d: epoll_wait: %s", loop->index,
               weft_strerror(-errno));
    return 0;
  }
  dispatch(loop, n);
  return n;
}

/* Phase 1b. Iterates through poll_cursor so that a poll may remove any
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

/* The relative timeout to `deadline` (ns, UINT64_MAX = none) in `*ts`;
 * `*timeout` is ts, or NULL for none. False when the deadline has passed. */
static bool timeout_until(uint64_t deadline, struct timespec *ts,
                          struct timespec **timeout) {
  *timeout = NULL;
  if (deadline == UINT64_MAX)
    return true;
  uint64_t now = weft_now_ns();
  if (deadline <= now)
    return false;
  uint64_t left = deadline - now;
  ts->tv_sec = (time_t)(left / 1000000000u);
  ts->tv_nsec = (long)(left % 1000000000u);
  *timeout = ts;
  return true;
}

/* Blocks until an event or `deadline` (ns, UINT64_MAX = none). Returns the
 * number of events in loop->ready, or -1 if the deadline has already
 * passed (no sleep then). */
static int wait_events(weft_loop *loop, uint64_t deadline) {
  int n;
  bool counted = false;
  do {
    /* Recomputed on every try so that EINTR does not stretch the wait. */
    struct timespec ts, *timeout;
    if (!timeout_until(deadline, &ts, &timeout))
      return counted ? 0 : -1;
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

/* Hands each event to its watcher or source. A callback or wakeup op may
 * remove any watcher or source: the removal clears its entries in
 * loop->ready. */
static void dispatch(weft_loop *loop, int n) {
  int watched = 0;
  busy_read_pick(loop, n);
  loop->n_ready = n;
  for (int i = 0; i < n; i++) {
    uint64_t u = loop->ready[i].data.u64;
    if (u == 0)
      continue; /* removed during this dispatch */
    if (u & WEFT__WATCHER_TAG) {
      weft_watcher *w = (weft_watcher *)(uintptr_t)(u & ~WEFT__WATCHER_TAG);
      w->cb(w, loop->ready[i].events);
      watched++;
      continue;
    }
    void *ptr = loop->ready[i].data.ptr;
    if (ptr == &loop->wakeup_fd) {
      ack_wakeup_fd(loop);
      continue;
    }
    weft_source *src = ptr;
    if (src->ops->wakeup != NULL)
      src->ops->wakeup(src, loop->ready[i].events);
  }
  loop->n_ready = 0;
  if (watched > 0)
    weft__stat_add(&loop->stats.watcher_events, (uint64_t)watched);
}

/* ---- The adaptive busy-poll window --------------------------------------
 *
 * The window moves between 0 and max_ns (busy_poll_us) in halvings and
 * doublings, KVM's halt-polling rule (virt/kvm/kvm_main.c, grow_halt_poll_ns
 * and shrink_halt_poll_ns) plus a preemption check. The gap is the time
 * from the loop's last work to the event that ended a sleep:
 *
 *   shrink  the gap was longer than the horizon (WINDOW_HORIZON x max_ns):
 *           no allowed window would have caught the event, so the spin
 *           before the sleep was wasted;
 *           or the loop's thread was contended since the last sample: it
 *           waited on its CPU's run queue for more than 1/8 of the time it
 *           wanted to run (run delay from /proc/thread-self/schedstat),
 *           and was preempted at least once (wake-up latency alone is run
 *           delay too, and is no contention):
 *           a thread that spins while another wants its CPU takes the CPU
 *           from that thread (a client of this very server, often) --
 *           unless its spins were short: at most WINDOW_WAKE_NS per spin
 *           on average since the last sample (see below);
 *   grow    the gap was within the horizon: a longer spin would have
 *           caught the event without the wake-up, unless the thread was
 *           found contended within the hold period (below).
 *
 * Why a horizon beyond max_ns: a gap measured across a sleep contains the
 * wake-up it caused, and in a request/response exchange the peer's
 * wake-up too, if the peer sleeps as well (in this VM about 15 µs each:
 * raw-block's round trip is 38 µs, raw-busy's 6 µs). Two loops that both
 * block see each other's answers 40-50 µs apart where spinning ones see
 * them 10 µs apart; compared with max_ns (20 µs) alone, blocking would
 * look right forever once both windows were 0, and a ping-pong that lost
 * its windows (to a pause, a preemption) would never get them back.
 *
 * Why run delay and not every preemption: a spinning thread is switched
 * out involuntarily for a few microseconds whenever a softirq thread or a
 * kworker runs on its CPU (loopback TCP's ksoftirqd, often). Shrinking at
 * each such switch kept a ping-pong's windows at 0 on an idle machine
 * (p50 70 µs against 11 µs with a fixed window, weft-bench tcp 16 B).
 * Sharing the CPU with a thread that wants it shows as run delay instead:
 * about half the runnable time with one busy thread beside the loop. The
 * preemption count (ru_nivcsw) is still kept in the counters, and decides
 * where schedstat cannot be read.
 *
 * Why short spins are kept under contention: a spin that ends in work
 * within a few microseconds (a client on another CPU that answers at
 * once, W messages in flight) costs the CPU's other threads less than the
 * sleep and wake-up it saves (a context switch each way; 43% of an echo
 * server's samples in finish_task_switch once it slept per batch), and
 * sleeping per batch cut that echo to 0.4-0.5x of the spinning rate
 * (docs/journal/2026-11-23-issue-17.md, "Echo: one client, W messages
 * in flight"). Spins
 * that last their window (the client shares the loop's CPU and cannot
 * answer until the loop yields, the 2-loop KV case) are long and still
 * shrink the window.
 *
 * The miss rule: a gap beyond the window but within the horizon grows the
 * window, or keeps it at max_ns, because a spin might have caught it; when
 * the peer is simply slower than the window (a client whose requests come
 * 50-100 µs apart, beyond the 20 µs default), every such spin runs out and
 * the loop sleeps anyway: at redis-benchmark -P 1 -c 1 that cost the KV
 * server 1.11x redis-server's CPU per request (issue 32). So:
 *
 *   miss    a spin ran out a window above 0 and the loop slept, the event
 *           coming within the horizon (beyond it the window halves
 *           instead, above); WINDOW_MISS_LIMIT misses in a row drop the
 *           window to 0 (`dropped`): the loop blocks at once;
 *   hit     a spin that ended in work (the window caught the event) starts
 *           the count again, and makes the next drop probe soon;
 *   back    while dropped, the window grows again (from its floor, as
 *           above) only when a sleep ended with an event within max_ns of
 *           the last work -- a spin of the whole window would surely have
 *           caught it, wake-up included -- not within the horizon, which
 *           is what a slow peer's gaps are; or
 *   probe   after probe_every sleeps while dropped, the window is set back
 *           to max_ns for another WINDOW_MISS_LIMIT tries: two loops that
 *           both dropped (a ping-pong after a pause) see each other's
 *           messages 40-50 µs apart, and only one that spins again finds
 *           out that they would come within the window. Each drop without
 *           a hit since doubles probe_every, from WINDOW_PROBE_MIN up to
 *           WINDOW_PROBE_MAX sleeps; a hit resets it. Neither returns the
 *           window while a contention hold (below) lasts.
 *
 * A fast peer (events back to back, or a mix where some spins catch the
 * next event) keeps spinning: only misses in a row drop the window.
 *
 * Nothing here costs a system call per iteration: the clock is read by
 * the iteration anyway, and getrusage and one pread of schedstat run at
 * most once per WINDOW_SAMPLE_NS, on an iteration that found no work
 * (never while the loop sleeps, never while it is busy with work). */

/* Preemption samples at most this often (ns). 1 ms bounds the cost to
 * about 0.1% of a CPU (a getrusage is 0.4 to 2 µs here) and notices a
 * preempting thread within about one scheduler slice. */
#define WINDOW_SAMPLE_NS 1000000u
/* No growth for the hold period after a contended sample: a CPU that
 * another thread needed a moment ago is likely needed again. The period
 * backs off as TCP's retransmission timer does (RFC 6298, 5.5): it starts
 * at WINDOW_HOLD_MIN_NS, doubles up to WINDOW_HOLD_MAX_NS each time the
 * window grew back and met contention again within one period of the
 * hold's end (the contention lasted: the 2-loop KV server whose client
 * shares its CPU, where short holds let the window grow back and spin
 * away the CPU again), and starts at the minimum again after a longer
 * quiet stretch. A fixed 100 ms hold made one short burst (a kworker, the
 * benchmark's own main thread) hold a ping-pong's window down for a whole
 * 5000-round-trip repetition: p50 28 µs against 10 µs, weft-bench tcp. */
#define WINDOW_HOLD_MIN_NS 5000000u
#define WINDOW_HOLD_MAX_NS 100000000u
/* Gaps up to this many windows (max_ns) count as caught by a spin. */
#define WINDOW_HORIZON 4u
/* The smallest window above 0 is max / WINDOW_STEPS_DIV (and at least
 * WINDOW_MIN_NS): three doublings from it reach the maximum. */
#define WINDOW_STEPS_DIV 8u
#define WINDOW_MIN_NS 1000u
/* A sleep and its wake-up cost the loop's thread about this much CPU (ns;
 * two context switches in this VM, 4-6 µs measured per sleeping batch):
 * spins shorter than this on average free no CPU by sleeping instead. */
#define WINDOW_WAKE_NS 5000u
/* Spins in a row that run out their window before the window drops to 0.
 * More than the three misses a regrowth from the floor makes on its way
 * to max_ns (an event that needs the whole window is missed at 1/8, 1/4
 * and 1/2 of it), so that a window still growing is not dropped; few
 * enough that a slow peer wastes 8 windows per drop, and 8 per probe. */
#define WINDOW_MISS_LIMIT 8u
/* Sleeps while dropped before the window is tried again: from 16,
 * doubling at each drop without a hit up to 1024. At the maximum a slow
 * peer pays 8 wasted windows per 1024 sleeps (at 20 µs, 0.16 µs per
 * event, against 20 µs per event without the rule); two loops that
 * dropped in a ping-pong (40-50 µs round trips) try again within 50 ms. */
#define WINDOW_PROBE_MIN 16u
#define WINDOW_PROBE_MAX 1024u

static void window_publish(weft_loop *loop) {
  atomic_store_explicit(&loop->stats.window_ns, loop->window.ns,
                        memory_order_relaxed);
}

void weft__window_init(weft_loop *loop, bool adaptive, int busy_poll_us) {
  loop->window.adaptive = adaptive;
  loop->window.sample_period_ns = WINDOW_SAMPLE_NS;
  loop->window.hold_min_ns = WINDOW_HOLD_MIN_NS;
  loop->window.hold_max_ns = WINDOW_HOLD_MAX_NS;
  loop->window.hold_period_ns = WINDOW_HOLD_MIN_NS;
  loop->window.schedstat_fd = -1; /* opened by weft__selector_start */
  weft__window_reset(loop, busy_poll_us);
}

void weft__window_reset(weft_loop *loop, int busy_poll_us) {
  weft__poll_window *w = &loop->window;
  w->max_us = busy_poll_us;
  w->max_ns = busy_poll_us > 0 ? (uint64_t)busy_poll_us * 1000u : 0;
  w->ns = w->max_ns;
  w->misses = 0;
  w->dropped = false;
  w->probe_wait = 0;
  w->probe_every = WINDOW_PROBE_MIN;
  atomic_store_explicit(&loop->stats.window_ns,
                        busy_poll_us < 0 ? UINT64_MAX : w->ns,
                        memory_order_relaxed);
}

static uint64_t window_floor(const weft__poll_window *w) {
  uint64_t f = w->max_ns / WINDOW_STEPS_DIV;
  if (f < WINDOW_MIN_NS)
    f = WINDOW_MIN_NS;
  return f < w->max_ns ? f : w->max_ns;
}

static void window_shrink(weft_loop *loop) {
  weft__poll_window *w = &loop->window;
  if (w->ns == 0)
    return;
  w->ns /= 2;
  if (w->ns < window_floor(w))
    w->ns = 0;
  weft__stat_add(&loop->stats.window_shrinks, 1);
  window_publish(loop);
}

static void window_grow(weft_loop *loop) {
  weft__poll_window *w = &loop->window;
  if (w->ns >= w->max_ns)
    return;
  w->ns = w->ns == 0 ? window_floor(w) : w->ns * 2;
  if (w->ns > w->max_ns)
    w->ns = w->max_ns;
  weft__stat_add(&loop->stats.window_grows, 1);
  window_publish(loop);
}

/* Involuntary context switches of this thread so far, or -1. */
static long thread_nivcsw(void) {
  struct rusage ru;
  return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : -1;
}

/* The thread's time on the CPU and waiting on a run queue (ns), from
 * schedstat's first two fields; false where it cannot be read. */
static bool thread_sched_times(int fd, uint64_t *on_cpu, uint64_t *delay) {
  char buf[96];
  ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
  if (n <= 0)
    return false;
  buf[n] = '\0';
  unsigned long long a, b;
  if (sscanf(buf, "%llu %llu", &a, &b) != 2)
    return false;
  *on_cpu = a;
  *delay = b;
  return true;
}

/* Did the thread wait for its CPU more than 1/8 of the time it wanted to
 * run since the last sample? Where schedstat cannot be read, a preemption
 * (`preempted`) decides. */
static bool window_contended(weft__poll_window *w, bool preempted) {
  uint64_t on_cpu, delay;
  if (!thread_sched_times(w->schedstat_fd, &on_cpu, &delay))
    return preempted;
  uint64_t ran = on_cpu - w->on_cpu_ns, waited = delay - w->delay_ns;
  w->on_cpu_ns = on_cpu;
  w->delay_ns = delay;
  return waited > (ran + waited) / 8;
}

/* Whether the spins since the last sample took more CPU than sleeping
 * instead would have (WINDOW_WAKE_NS each); starts the next count. A spin
 * still going at the sample counts as one: its iterations are in spin_ns
 * already (without it, a slow build whose every iteration hits the cap,
 * as under TSan, read one short spin per sample as costly). */
static bool window_spins_costly(weft_loop *loop) {
  weft__poll_window *w = &loop->window;
  uint64_t spins = w->spins_ended + (w->spinning ? 1u : 0u);
  uint64_t total =
      atomic_load_explicit(&loop->stats.spin_ns, memory_order_relaxed);
  bool costly = total - w->spin_ns_mark > spins * WINDOW_WAKE_NS;
  w->spin_ns_mark = total;
  w->spins_ended = 0;
  return costly;
}

void weft__window_hold(weft__poll_window *w, uint64_t now) {
  if (now >= w->hold_ns) { /* not holding: the window may have grown */
    uint64_t twice = w->hold_period_ns * 2;
    if (now - w->hold_ns >= w->hold_period_ns)
      w->hold_period_ns = w->hold_min_ns;
    else
      w->hold_period_ns = twice < w->hold_max_ns ? twice : w->hold_max_ns;
  }
  w->hold_ns = now + w->hold_period_ns; /* holding: from this sample on */
}

/* Counts preemptions; shrinks the window if the thread was contended
 * since the last sample and its spins were not short. */
static void window_sample(weft_loop *loop, uint64_t now) {
  weft__poll_window *w = &loop->window;
  w->sample_ns = now + w->sample_period_ns;
  bool costly = window_spins_costly(loop);
  long n = thread_nivcsw();
  bool preempted = n >= 0 && n > w->nivcsw;
  if (preempted)
    weft__stat_add(&loop->stats.preemptions, (uint64_t)(n - w->nivcsw));
  if (n >= 0)
    w->nivcsw = n;
  /* Run delay alone is not contention: a loop that sleeps and wakes per
   * event waits on its run queue at every wake-up (in a VM, for its vCPU
   * to be scheduled again), which kept a ping-pong that had once blocked
   * at the blocking round trip (27 µs against 9.8 µs). Preemption while
   * running is the other half of the evidence. */
  bool contended = window_contended(w, preempted);
  if (!contended || !preempted || !costly)
    return;
  weft__stat_add(&loop->stats.window_contended, 1);
  weft__window_hold(w, now);
  window_shrink(loop);
}

/* Accounts an iteration at `now` that found work or not (`idle`): the
 * time of iterations without work is spin, and a run of them that ends
 * in work is one spin ended. An iteration counts for at most
 * WINDOW_WAKE_NS: one that took longer (an iteration is a microsecond or
 * two) was preempted, and the time the thread waited for its CPU took
 * nothing from the thread that had it. */
static void window_account(weft_loop *loop, bool idle, uint64_t now) {
  weft__poll_window *w = &loop->window;
  if (idle) {
    uint64_t dt = w->iter_ns != 0 ? now - w->iter_ns : 0;
    weft__stat_add(&loop->stats.spin_ns,
                   dt < WINDOW_WAKE_NS ? dt : WINDOW_WAKE_NS);
    w->spinning = true;
  } else if (w->spinning) {
    w->spins_ended++;
    w->spinning = false;
    if (w->ns > 0) { /* a hit: the window caught the event */
      w->misses = 0;
      w->probe_every = WINDOW_PROBE_MIN;
      weft__stat_add(&loop->stats.window_hits, 1);
    }
  }
  w->iter_ns = now;
}

/* A spin that ran out a window above 0 before a sleep whose event came
 * within the horizon. Returns true when it was the WINDOW_MISS_LIMIT-th in
 * a row: the window is 0 now, until an event within max_ns or a probe. */
static bool window_miss(weft_loop *loop) {
  weft__poll_window *w = &loop->window;
  weft__stat_add(&loop->stats.window_misses, 1);
  if (++w->misses < WINDOW_MISS_LIMIT)
    return false;
  w->misses = 0;
  w->dropped = true;
  w->probe_wait = w->probe_every;
  w->probe_every = w->probe_every * 2 < WINDOW_PROBE_MAX ? w->probe_every * 2
                                                         : WINDOW_PROBE_MAX;
  w->ns = 0;
  weft__stat_add(&loop->stats.window_drops, 1);
  window_publish(loop);
  return true;
}

/* A sleep of a dropped window that ended at `now`, `gap` after the last
 * work, with `n` events: back from the floor when the event came within
 * max_ns, at max_ns when the probe is due, never while holding. */
static void window_dropped_sleep(weft_loop *loop, int n, uint64_t gap,
                                 uint64_t now) {
  weft__poll_window *w = &loop->window;
  if (w->probe_wait > 0)
    w->probe_wait--;
  if (now < w->hold_ns)
    return;
  if (n > 0 && gap <= w->max_ns) {
    w->dropped = false;
    window_grow(loop);
  } else if (w->probe_wait == 0) {
    w->dropped = false;
    w->ns = w->max_ns;
    weft__stat_add(&loop->stats.window_probes, 1);
    window_publish(loop);
  }
}

/* After a sleep that ended at `now` with `n` events. */
static void window_after_sleep(weft_loop *loop, int n, uint64_t now) {
  weft__poll_window *w = &loop->window;
  if (w->spinning) /* the spin before the sleep ended in the sleep */
    w->spins_ended++;
  w->spinning = false;
  w->iter_ns = 0; /* the time asleep is no spin */
  if (!w->adaptive || w->max_ns == 0)
    return;
  uint64_t gap = now - loop->last_active_ns;
  if (w->dropped)
    window_dropped_sleep(loop, n, gap, now);
  else if (gap > WINDOW_HORIZON * w->max_ns)
    window_shrink(loop); /* the spin before this sleep was wasted */
  else if (w->ns > 0 && window_miss(loop))
    return; /* the spins keep running out: dropped */
  else if (n > 0 && now >= w->hold_ns)
    window_grow(loop); /* a longer spin would have caught the event */
}

void weft__selector_start(weft_loop *loop) {
  uint64_t now = weft_now_ns();
  loop->last_active_ns = now;
  loop->window.nivcsw = thread_nivcsw();
  /* Per thread, so opened here, on the loop's thread. */
  loop->window.schedstat_fd =
      loop->window.adaptive
          ? open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)
          : -1;
  thread_sched_times(loop->window.schedstat_fd, &loop->window.on_cpu_ns,
                     &loop->window.delay_ns);
  loop->window.sample_ns = now + loop->window.sample_period_ns;
  weft__window_reset(
      loop, atomic_load_explicit(&loop->busy_poll_us, memory_order_relaxed));
}

void weft__selector_finish(weft_loop *loop) {
  if (loop->window.schedstat_fd >= 0)
    close(loop->window.schedstat_fd);
  loop->window.schedstat_fd = -1;
}

/* ---- Sleeping ------------------------------------------------------------ */

/* The loop's only source, when it can hold the whole sleep (its `sleep`
 * op: io_uring submits the queued sends and waits in one io_uring_enter,
 * where arm, epoll_pwait2 and the enter that collects the completions
 * made three system calls per blocking round trip). */
static weft_source *sleeping_source(const weft_loop *loop) {
  weft_source *src = loop->sources;
  if (src == NULL || src->next != NULL || src->ops->sleep == NULL)
    return NULL;
  return src;
}

/* Sleeps in `src` until its work, the epoll fd or `deadline` (ns,
 * UINT64_MAX = none). Returns how many events ended the sleep (the
 * source's own work counts one), of which `*n_ready` are in loop->ready,
 * or -1 if no sleep happened (a deadline passed, or the source had work
 * pending). */
static int wait_in_source(weft_loop *loop, weft_source *src, uint64_t deadline,
                          int *n_ready) {
  *n_ready = 0;
  struct timespec ts, *timeout;
  if (!timeout_until(deadline, &ts, &timeout))
    return -1;
  /* Counted before, as wait_events does: a loop blocked in the source is
   * seen asleep (tests wait for that); taken back when it did not sleep. */
  weft__stat_add(&loop->stats.sleeps, 1);
  int r = src->ops->sleep(src, loop->epfd, timeout);
  if (r == WEFT_SOURCE_PENDING) {
    weft__stat_add(&loop->stats.sleeps, UINT64_MAX); /* minus one */
    weft__stat_add(&loop->stats.arms_refused, 1);
    return -1;
  }
  if (r < 0) {
    source_failed(loop, src, "sleep", r);
    return 0;
  }
  if (r == WEFT_SOURCE_SLEPT_WORK)
    return 1;
  if (r != WEFT_SOURCE_SLEPT_FD)
    return 0;
  int n = epoll_wait(loop->epfd, loop->ready, WEFT__MAX_EVENTS, 0);
  *n_ready = n > 0 ? n : 0;
  return *n_ready;
}

/* Phase 5: arm, announce the sleep, re-check, sleep, dispatch. */
static void try_sleep(weft_loop *loop) {
  weft_source *in_src = sleeping_source(loop);
  if (in_src != NULL)
    weft__stat_add(&loop->stats.arms, 1); /* its sleep arms */
  else if (!arm_sources(loop))
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
  uint64_t deadline = weft__timer_heap_next(&loop->timers);
  int n_ready;
  int n = in_src != NULL ? wait_in_source(loop, in_src, deadline, &n_ready)
                         : (n_ready = wait_events(loop, deadline));
  /* Relaxed: producers that still see true only write the eventfd once
   * more, which the next sleep consumes. */
  atomic_store_explicit(&loop->sleeping, false, memory_order_relaxed);
  if (n < 0)
    return; /* a timer was due: no sleep */
  uint64_t now = weft_now_ns();
  window_after_sleep(loop, n, now);
  if (n == 0)
    return;
  weft__stat_add(&loop->stats.wakeups, 1);
  if (n_ready > 0) { /* not for a source's own work: its poll has it */
    loop->skip_watchers = n_ready < WEFT__MAX_EVENTS;
    dispatch(loop, n_ready);
  }
  /* The window starts again after the work the watchers' callbacks just
   * did (a read, a reply), as it does after a poll that found work. From
   * the wake-up instead, the callbacks' time came off the spin: a
   * ping-pong whose two loops had started to block (a round trip longer
   * than the window) never caught the reply spinning again, and stayed at
   * the blocking round trip (45 µs against 11 µs, weft-bench under load). */
  loop->last_active_ns = weft_now_ns();
}

static bool idle_long_enough(weft_loop *loop, uint64_t now) {
  int us = atomic_load_explicit(&loop->busy_poll_us, memory_order_relaxed);
  weft__poll_window *w = &loop->window;
  if (us != w->max_us)
    weft__window_reset(loop, us); /* weft_loop_set_busy_poll_us */
  if (us <= 0)
    return us == 0; /* always block, or pure busy polling */
  if (w->adaptive && now >= w->sample_ns)
    window_sample(loop, now);
  return now - loop->last_active_ns >= w->ns;
}

void weft__selector_iteration(weft_loop *loop) {
  int work = poll_watchers(loop);
  work += poll_sources(loop);
  work += drain_pool(loop);
  uint64_t now = weft_now_ns();
  work += run_timers(loop, now);
  bool pending;
  work += run_tasks(loop, &pending);
  weft__stat_add(&loop->stats.iterations, 1);

  if (loop->window.adaptive)
    window_account(loop, work == 0 && !pending, now);
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
