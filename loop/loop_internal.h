/* SPDX-License-Identifier: Apache-2.0 */
/* struct weft_loop and the pieces of the loop that its files share:
 * loop.c (life cycle, tasks, sources, hooks, keys), selector.c (one
 * selector iteration), timer.c (the heap) and loop_group.c (threads).
 */
#ifndef WEFT_LOOP_LOOP_INTERNAL_H
#define WEFT_LOOP_LOOP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/types.h>

#include <weft/buf.h>
#include <weft/loop.h>
#include <weft/source.h>

#include "loop/task_queue.h"
#include "loop/timer_internal.h"

/** Events one epoll call can return. */
#define WEFT__MAX_EVENTS 64

/** Default events one source may handle per poll (weft_loop_options). */
#define WEFT__DEFAULT_POLL_BUDGET 64

/** The counters of weft_loop_stats, written by the loop thread only. */
typedef struct weft__loop_counters {
  _Atomic uint64_t iterations;
  _Atomic uint64_t polls_busy;
  _Atomic uint64_t arms;
  _Atomic uint64_t arms_refused;
  _Atomic uint64_t sleeps;
  _Atomic uint64_t wakeups;
  _Atomic uint64_t tasks_run;
  _Atomic uint64_t timers_fired;
  _Atomic uint64_t watcher_polls;
  _Atomic uint64_t watcher_events;
  _Atomic uint64_t busy_reads;
  _Atomic uint64_t busy_read_hits;
  _Atomic uint64_t window_ns; /* a value, not a count: the window now */
  _Atomic uint64_t window_shrinks;
  _Atomic uint64_t window_grows;
  _Atomic uint64_t preemptions;
  _Atomic uint64_t window_contended;
  _Atomic uint64_t window_misses;
  _Atomic uint64_t window_drops;
  _Atomic uint64_t window_probes;
  _Atomic uint64_t window_hits;
  _Atomic uint64_t spin_ns;
} weft__loop_counters;

/**
 * The busy-poll window (selector.c, "The adaptive busy-poll window").
 * Loop thread only; the window's value is published in the counters.
 */
typedef struct weft__poll_window {
  bool adaptive;      /* weft_loop_options.busy_poll_adaptive */
  int max_us;         /* busy_poll_us the window was last sized from */
  uint64_t max_ns;    /* max_us in ns (0 when max_us <= 0) */
  uint64_t ns;        /* the window now, 0..max_ns */
  uint64_t sample_ns; /* next preemption sample, at the earliest */
  uint64_t hold_ns;   /* no growth before (set by a contended sample) */
  long nivcsw;        /* ru_nivcsw at the last sample */
  int schedstat_fd;   /* /proc/thread-self/schedstat, or -1 */
  uint64_t on_cpu_ns; /* its time on the CPU at the last sample */
  uint64_t delay_ns;  /* its time waiting on a run queue, likewise */
  /* The cost of spinning since the last sample: time in iterations that
   * found no work (the counters' spin_ns, less its value at the last
   * sample), and how many spins ended (in work or in a sleep). */
  uint64_t iter_ns;        /* the last iteration's clock; 0 after a sleep */
  bool spinning;           /* the last iteration found no work */
  uint64_t spin_ns_mark;   /* stats.spin_ns at the last sample */
  uint64_t spins_ended;    /* runs of such iterations that ended */
  uint64_t hold_period_ns; /* the hold's length now, min..max (backs off) */
  /* The miss rule (selector.c, "The miss rule"). */
  unsigned misses;      /* spins in a row that ran out the window */
  bool dropped;         /* the rule set the window to 0 */
  unsigned probe_wait;  /* sleeps left before the next probe (dropped) */
  unsigned probe_every; /* sleeps between probes now (backs off) */
  /* Tuning, set at creation (selector.c's WINDOW_SAMPLE_NS and
   * WINDOW_HOLD_*_NS); a test may change them before the loop starts. */
  uint64_t sample_period_ns; /* between preemption samples, at least */
  uint64_t hold_min_ns;      /* the hold period's start and floor */
  uint64_t hold_max_ns;      /* its ceiling */
} weft__poll_window;

/**
 * Adds `n` to a counter. Only the loop thread writes counters, so a relaxed
 * load and store (no locked instruction) is exact; readers on other threads
 * see each value whole because the field is atomic.
 */
static inline void weft__stat_add(_Atomic uint64_t *c, uint64_t n) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                        memory_order_relaxed);
}

/** A close hook (weft_loop_on_close), in a LIFO list. */
typedef struct weft__close_hook {
  struct weft__close_hook *next;
  weft_task_cb cb;
  void *arg;
} weft__close_hook;

/** Where a loop is in its life. */
typedef enum weft__loop_state {
  WEFT__LOOP_CREATED = 0, /* thread not started */
  WEFT__LOOP_RUNNING,     /* selector running */
  WEFT__LOOP_FINISHED,    /* thread returned (or never started, at free) */
} weft__loop_state;

struct weft_loop {
  /* Loop thread only. */
  int epfd;             /* sources' and watchers' fds, wakeup_fd */
  weft_source *sources; /* registration order */
  weft_source *sources_tail;
  weft_source *poll_cursor; /* next source to poll: removal moves it */
  struct epoll_event ready[WEFT__MAX_EVENTS]; /* last epoll batch */
  int n_ready;    /* entries in `ready` being dispatched */
  int n_watching; /* watchers with events (their fd in the epoll set) */
  weft_watcher *busy_read;  /* the watcher busy-read while spinning, or NULL
                               (selector.c, "The busy read") */
  unsigned busy_read_spins; /* spins since the last epoll_wait among them */
  bool skip_watchers;       /* the last sleep's batch held every ready watcher:
                               the next poll phase need not ask epoll again */
  weft__timer_heap timers;
  uint64_t last_active_ns; /* when an iteration last found work */
  weft__poll_window window;
  int poll_budget; /* events per source poll */
  void *locals[WEFT_LOOP_MAX_KEYS];
  weft__close_hook *close_hooks; /* newest first */
  _Atomic(weft_pool *) pool;     /* exists while the thread runs; atomic
                                    because weft_loop_pool() reads it from
                                    any thread */
  size_t leaks;                  /* buffers the pool reported at destroy */
  size_t pool_retain_bytes;      /* the pool's retention budget (set at
                                    creation, read when the pool is made) */

  /* Shared with producers (weft_loop_execute, pool remote notify, stop). */
  int wakeup_fd; /* eventfd, EFD_NONBLOCK */
  weft__task_queue tasks;
  _Atomic bool sleeping;      /* the loop is in (or about to enter) epoll */
  _Atomic int wakeup_pending; /* 1 = wakeup_fd written and not yet read */
  _Atomic int remote_returns; /* 1 = the pool's return stack was filled
                                 since the loop last drained it */
  _Atomic int inflight;       /* producers between closed check and push */
  _Atomic bool closed;        /* execute refuses from now on */
  _Atomic bool stop_requested;
  _Atomic int busy_poll_us; /* in microseconds, -1 = never block */
  _Atomic int state;        /* weft__loop_state */
  _Atomic pid_t tid;        /* the loop thread's kernel id, 0 until set */
  weft__loop_counters stats;

  /* Set at creation, then read-only. */
  int index;
  weft_loop_group *group;
  pthread_t thread;
  bool thread_started; /* creator's view: pthread_create succeeded */
  int pin_cpu;         /* CPU to pin to, -1 = do not pin */
  char thread_name[16];
  weft_loop *attached_prev; /* weft__loop_attach: the thread's previous
                               current loop, restored by detach */
};

/**
 * Creates loop `index` of `group` (epoll set, wakeup eventfd, empty queues).
 * Returns 0 and the loop in `*out`, or a negative weft error.
 */
int weft__loop_new(weft_loop **out, weft_loop_group *group, int index,
                   int busy_poll_us, bool adaptive, int poll_budget);

/** Frees a loop whose thread has exited or never started. */
void weft__loop_free(weft_loop *loop);

/** The thread body: runs `arg` (a weft_loop) until it is stopped. */
void *weft__loop_thread(void *arg);

/**
 * Makes the calling thread act as `loop`'s thread without starting one
 * (embedded channels, tests): weft_loop_current() returns `loop` there and
 * the loop's pool is created. `group` may be NULL for such loops. Returns 0
 * or WEFT_ENOMEM. Drive it with weft__loop_run_pending(); end it with
 * weft__loop_detach() on the same thread, then weft__loop_free().
 */
int weft__loop_attach(weft_loop *loop);

/**
 * Runs an attached loop's work once without blocking: buffers returned by
 * other threads, queued tasks, due timers, and the tasks those queued.
 * Sources are not polled. Returns how many things ran. Attached thread.
 */
int weft__loop_run_pending(weft_loop *loop);

/**
 * Stops an attached loop as a loop thread stops (tasks, close hooks, tasks,
 * pool destroyed) and restores the thread's previous current loop. Returns
 * the number of leaked buffers. Attached thread.
 */
size_t weft__loop_detach(weft_loop *loop);

/** Asks the loop to stop gracefully and wakes it. Any thread. Idempotent. */
void weft__loop_request_stop(weft_loop *loop);

/**
 * Wakes the loop if it sleeps or is about to: the producer half of the
 * Dekker handshake. Call after publishing work (a task, a returned buffer).
 * Any thread.
 */
void weft__loop_wake(weft_loop *loop);

/** Unconditionally writes the wakeup eventfd. Any thread. */
void weft__loop_signal(weft_loop *loop);

/**
 * Runs queued tasks: with a `mark` from weft__task_queue_mark() only those
 * queued before it was taken (tasks they queue wait for the next
 * iteration), with NULL until the queue is empty. Returns how many ran;
 * sets `*pending` when a half-linked push stopped it early. Loop thread.
 */
int weft__loop_run_tasks(weft_loop *loop, weft__task *mark, bool *pending);

/**
 * One selector iteration (poll, pool returns, timers, tasks, maybe sleep).
 * Loop thread only.
 */
void weft__selector_iteration(weft_loop *loop);

/**
 * Prepares the selector's per-thread state (the preemption count the
 * adaptive window compares with) and sizes the window. On the loop's
 * thread, before its first iteration.
 */
void weft__selector_start(weft_loop *loop);
/** Releases what weft__selector_start took; on the loop's thread. */
void weft__selector_finish(weft_loop *loop);

/**
 * Sets up the busy-poll window of a new loop: adaptive or fixed, the
 * default tuning, sized from `busy_poll_us`. Before the loop starts.
 */
void weft__window_init(weft_loop *loop, bool adaptive, int busy_poll_us);

/**
 * Sizes the busy-poll window from `busy_poll_us` (the maximum) and starts it
 * there. The loop thread, or before it starts.
 */
void weft__window_reset(weft_loop *loop, int busy_poll_us);

/**
 * A contended sample at `now` (ns, weft_now_ns): no growth of the window
 * before w->hold_ns, set to now + the hold period. The period doubles (up
 * to hold_max_ns) when this sample came within one period after the last
 * hold ended (the window grew back too soon), starts at hold_min_ns again
 * after a longer quiet stretch, and stays while still holding. Loop
 * thread (a test may call it on a window of its own).
 */
void weft__window_hold(weft__poll_window *w, uint64_t now);

/** Tags an epoll entry as a watcher's (sources and wakeup_fd: untagged). */
#define WEFT__WATCHER_TAG ((uint64_t)1)

/** The loop thread's kernel thread id (gettid), 0 until it started. */
pid_t weft__loop_tid(const weft_loop *loop);

/** Leaked buffers the loop's pool reported at shutdown. After join. */
size_t weft__loop_leaks(const weft_loop *loop);

/** The group a loop belongs to. */
static inline weft_loop_group *weft__loop_group(const weft_loop *loop) {
  return loop->group;
}

#endif /* WEFT_LOOP_LOOP_INTERNAL_H */
