/* SPDX-License-Identifier: Apache-2.0 */
/* weft/loop.h: event loops and loop groups.
 *
 * A weft_loop is one thread running the hybrid selector (see source.h and
 * docs/architecture.md): it polls every registered source and fd watcher
 * without blocking, runs due timers and queued tasks, keeps polling while
 * anything happens, and after a busy-poll window without an event arms every
 * source and sleeps in epoll until an fd, a task or the next timer deadline
 * wakes it.
 *
 * The busy-poll window adapts (busy_poll_adaptive, on by default) between 0
 * and `busy_poll_us`, starting at busy_poll_us. The gap is the time from
 * the loop's last work to the event that ended a sleep; the horizon is
 * 4 x busy_poll_us (a gap measured across a sleep holds the wake-up it
 * caused, and a blocking peer's):
 *  - it halves when a sleep turns out to have been useless (a gap beyond
 *    the horizon: no window would have caught the event, so the spin
 *    before the sleep was wasted), and when the loop's thread was
 *    contended: it waited on its CPU's run queue for more than 1/8 of the
 *    time it wanted to run (run delay from /proc/thread-self/schedstat)
 *    and was preempted at least once (an involuntary context switch; the
 *    switch alone decides where schedstat cannot be read;
 *    sampled at most once per millisecond, on idle iterations): another
 *    thread wants this CPU, and spinning takes it from that thread (unless
 *    the spins since the last sample were short, at most 5 µs each on
 *    average: then a sleep and wake-up per event would cost that thread
 *    more); below busy_poll_us / 8 (at least 1 µs) it drops to 0, which
 *    is blocking at once;
 *  - it doubles (from 0: to busy_poll_us / 8) after a sleep that ended
 *    with an event within the horizon (a longer spin would have caught it
 *    without a wake-up), but not while contention holds it: 5 ms after a
 *    contended sample, doubling to 100 ms while contention recurs as soon
 *    as the window grows back (as TCP backs off its retransmission timer);
 *  - it drops to 0 after 8 spins in a row ran out (a sleep followed each,
 *    its event beyond the window but within the horizon: a peer slower
 *    than the window, whose gaps the loop would otherwise spin through);
 *    a spin that catches its event starts the count again. Dropped, it
 *    grows again only after an event within busy_poll_us of the last
 *    work, or when a probe sets it back to busy_poll_us for another 8
 *    tries, after 16 sleeps, doubling per drop without a catch up to 1024.
 * So a loop alone on its CPU keeps spinning, a loop whose CPU another
 * thread needs (a load generator, a second loop's client) blocks as if
 * busy_poll_us were 0, and one whose events follow each other within
 * microseconds keeps spinning even then. The selector makes no system call per
 * iteration for this: one clock read, as before, and one getrusage and one
 * pread per millisecond at most. weft_loop_stats shows the window and its
 * changes.
 *
 * A weft_loop_group owns N loops, each on its own thread, by default one per
 * CPU the process may run on less one (weft_loop_default_count), placed by
 * the scheduler unless weft_loop_options.pin pins each to a CPU. Everything
 * that belongs to a loop (sources, timers, channels, the buffer pool) is
 * touched only on that loop's thread; other threads reach a loop only through
 * weft_loop_execute().
 *
 * Lifecycle: weft_loop_group_new -> weft_loop_group_start ->
 * (work) -> weft_loop_group_stop -> weft_loop_group_join ->
 * weft_loop_group_free.
 */
#ifndef WEFT_LOOP_H
#define WEFT_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** An event loop: one thread, the channels on it, its timers (opaque). */
typedef struct weft_loop weft_loop;
/** N loops started and stopped together (opaque). */
typedef struct weft_loop_group weft_loop_group;
/** A loop's buffer pool (buf.h; opaque). */
typedef struct weft_pool weft_pool;

/** A task or timer callback: runs on the loop's thread with `arg`. */
typedef void (*weft_task_cb)(void *arg);

/** Default busy-poll window in microseconds (hadroNIO's 20 µs). */
#define WEFT_BUSY_POLL_US_DEFAULT 20

/** Options for a loop group. Initialise with weft_loop_options_init(). */
typedef struct weft_loop_options {
  int n_loops;      /* number of loops; 0 = weft_loop_default_count() */
  int busy_poll_us; /* in microseconds: poll at most this long after the last
                       event before sleeping; 0 = always block, -1 = never
                       block (neither adapts) */
  bool busy_poll_adaptive; /* adapt the window between 0 and busy_poll_us
                              (default true); false: always busy_poll_us */
  bool pin; /* pin loop i to the (i mod n)-th of the n CPUs the process may
               run on (sched_getaffinity) (default false, as Netty and
               Redis: the scheduler places the threads). Pinning pays only
               where those CPUs are the process' own (a dedicated host, or
               CPUs given by taskset or a cpuset that nothing else uses):
               a pinned loop cannot leave a CPU another task holds, and
               every pinned process puts its loop 0 on the same first CPU
               (four KV servers on one host stalled 300-600 ms at a time).
               On UCX 1.13 a server of several loops hit the async abort
               less often pinned (docs/transports/ucx.md) */
  int poll_budget;  /* max events one source handles per poll (default 64) */
  const char *name; /* thread name prefix, at most 10 chars (default "weft") */
  size_t pool_retain_bytes; /* bytes of empty slab memory each loop's buffer
                               pool keeps for reuse; the rest goes back to
                               the system (weft_pool_options.retain_bytes:
                               default 4 MiB; each size class's most
                               recently emptied slab is kept beyond it; 0 =
                               keep none, SIZE_MAX = keep all) */
} weft_loop_options;

/**
 * The number of loops a group gets when `n_loops` is 0: one per CPU this
 * process may run on (sched_getaffinity, so taskset and cpusets count), less
 * one left to everything else on the host (the kernel's network processing,
 * clients, other services), and at least 1: one loop on a 2-CPU machine
 * (why, measured: docs/benchmarks.md, "Other costs quoted in the code");
 * redis.conf's advice for I/O threads is the same ("leaving at least one
 * spare core"). Set `n_loops` (`[loop] loops`) to use every CPU. Any thread.
 */
int weft_loop_default_count(void);

/** Fills `opts` with the defaults documented on each field. */
void weft_loop_options_init(weft_loop_options *opts);

/**
 * Creates a group of loops (not yet running). `opts` may be NULL for the
 * defaults. On success stores the group in `*out` and returns 0; otherwise
 * WEFT_EINVAL (a bad option), WEFT_ENOMEM, or the error of epoll_create1 /
 * eventfd. The caller owns the group and frees it with weft_loop_group_free().
 * Any thread.
 */
int weft_loop_group_new(weft_loop_group **out, const weft_loop_options *opts);

/**
 * Starts one thread per loop. Returns 0, or the error from pthread_create
 * (loops already started are stopped and joined again). Pinning failures are
 * logged and ignored. Call once, from a thread that is not a loop thread.
 */
int weft_loop_group_start(weft_loop_group *group);

/**
 * Asks every loop to stop gracefully: each loop runs the tasks already queued,
 * then its close hooks (weft_loop_on_close), then the tasks those queued and
 * the hooks those registered, in rounds until none is left, then destroys
 * its buffer pool (reporting leaks) and exits. Returns at once; use
 * weft_loop_group_join() to wait. Idempotent. Any thread, including a loop
 * thread. Tasks executed after a loop has finished are refused (WEFT_ECLOSED).
 */
void weft_loop_group_stop(weft_loop_group *group);

/**
 * Waits for every loop thread to exit. Returns 0, or WEFT_ELEAK if any loop
 * reported leaked buffers at shutdown. Must not be called from a loop thread
 * of this group (it would wait for itself): returns WEFT_EINVAL then.
 */
int weft_loop_group_join(weft_loop_group *group);

/**
 * Frees a group. The group must be joined, or never started. Any thread that
 * is not one of the group's loops.
 */
void weft_loop_group_free(weft_loop_group *group);

/** Number of loops in the group. Any thread. */
int weft_loop_group_size(const weft_loop_group *group);

/** Loop number `i` (0 <= i < size), or NULL if out of range. Any thread. */
weft_loop *weft_loop_group_get(weft_loop_group *group, int i);

/**
 * The next loop in round-robin order (an atomic counter), used to spread
 * channels over loops. Any thread.
 */
weft_loop *weft_loop_group_next(weft_loop_group *group);

/**
 * Queues `cb(arg)` to run on `loop`'s thread. Tasks from one producer thread
 * run in the order they were queued; each runs exactly once. Wait-free for the
 * producer apart from one malloc: the queue is an intrusive MPSC list
 * (Vyukov), and the loop is woken through its eventfd only when it sleeps or
 * is about to (a flag checked by the producer), so feeding a busy loop takes
 * no system call. Returns 0, WEFT_ENOMEM, or WEFT_ECLOSED once the loop has
 * finished. Any thread, including the loop's own (the task then runs on a
 * later iteration, never inside this call).
 */
int weft_loop_execute(weft_loop *loop, weft_task_cb cb, void *arg);

/**
 * Runs `fn(arg)` on `loop`'s thread and waits for it: returns what `fn`
 * returned. Called on the loop's own thread, it runs `fn` at once (inline);
 * from any other thread it queues a task (weft_loop_execute) and blocks on
 * a condition variable until the task has run. For setup and teardown from
 * the main thread (bind a listener, start a timer, read state a loop
 * owns); not for the data path. Returns fn's result, or WEFT_ENOMEM /
 * WEFT_ECLOSED (the loop has finished) without running `fn`.
 *
 * Threads: never call it from one loop for another loop of a group while
 * that loop may call back the same way: both would wait forever.
 */
int weft_loop_call(weft_loop *loop, int (*fn)(void *arg), void *arg);

/** True when called on `loop`'s own thread. Any thread. */
bool weft_loop_in_loop(const weft_loop *loop);

/** The loop whose thread is calling, or NULL on other threads. */
weft_loop *weft_loop_current(void);

/** The loop's index in its group (0-based). Any thread. */
int weft_loop_index(const weft_loop *loop);

/**
 * The loop's buffer pool. Exists while the loop thread runs (created at
 * thread start, freed at shutdown after the close hooks). Allocate from
 * it on the loop thread only; release from any thread.
 */
weft_pool *weft_loop_pool(weft_loop *loop);

/**
 * The loop's configured busy-poll window in microseconds (see
 * weft_loop_options): the maximum the adaptive window moves under; the
 * current window is weft_loop_stats.busy_poll_window_ns. Any thread.
 */
int weft_loop_busy_poll_us(const weft_loop *loop);

/**
 * Changes the busy-poll window (the maximum, when it adapts); takes effect
 * at the next idle check, where the current window restarts at the new
 * value. Values below -1 give WEFT_EINVAL. Any thread (the field is atomic).
 */
int weft_loop_set_busy_poll_us(weft_loop *loop, int busy_poll_us);

/**
 * Registers `cb(arg)` to run on the loop thread when the loop stops, after
 * the tasks queued before the stop. Hooks run in reverse order of
 * registration (last registered first), each once. A hook registered while
 * hooks run (by a hook, or by a task a hook queued) runs in the next round,
 * after the tasks queued meanwhile: free state that queued work may still
 * use from such a second hook. Transports use this to close channels and
 * free per-loop state. Returns 0 or WEFT_ENOMEM. Loop thread only.
 */
int weft_loop_on_close(weft_loop *loop, weft_task_cb cb, void *arg);

/** Maximum number of loop-local keys (see weft_loop_key_create). */
#define WEFT_LOOP_MAX_KEYS 16

/**
 * Reserves a process-wide key for one pointer of per-loop state (like
 * pthread_key_create): layers above the loop, such as a transport plugin,
 * keep their per-loop instance under it without the loop knowing them.
 * Returns the key (>= 0) or WEFT_ENOSPC when all are taken. Any thread.
 */
int weft_loop_key_create(void);

/** The pointer stored under `key` on `loop` (NULL if none). Loop thread. */
void *weft_loop_get_local(weft_loop *loop, int key);

/** Stores `value` under `key` on `loop`. Loop thread. */
void weft_loop_set_local(weft_loop *loop, int key, void *value);

/**
 * Per-loop counters: the evidence that the selector behaves. The loop thread
 * updates them with relaxed atomic stores; weft_loop_stats_get() reads them
 * from any thread (each counter is exact, the set is not one snapshot).
 */
typedef struct weft_loop_stats {
  uint64_t iterations;     /* selector iterations (one poll of every source) */
  uint64_t polls_busy;     /* iterations in which something happened (the
                              callbacks a sleep's wake-up runs count in
                              wakeups and watcher_events) */
  uint64_t arms;           /* attempts to arm all sources before sleeping */
  uint64_t arms_refused;   /* arms a source refused (work pending) */
  uint64_t sleeps;         /* calls to epoll_wait that could block, or to the
                              only source's sleep (weft_source_ops.sleep) */
  uint64_t wakeups;        /* sleeps that ended with an fd or eventfd event, or
                              the sleeping source's own */
  uint64_t tasks_run;      /* tasks from weft_loop_execute that ran */
  uint64_t timers_fired;   /* timer callbacks run */
  uint64_t watcher_polls;  /* non-blocking epoll_waits for fd watchers */
  uint64_t watcher_events; /* watcher callbacks run (both phases) */
  uint64_t busy_reads;     /* watcher busy_read calls made in place of a
                              non-blocking epoll_wait (weft_watcher) */
  uint64_t busy_read_hits; /* those that found something */
  /* The adaptive busy-poll window (weft_loop_options.busy_poll_adaptive). */
  uint64_t busy_poll_window_ns; /* the window now, in nanoseconds (fixed:
                                   busy_poll_us * 1000; -1: UINT64_MAX) */
  uint64_t window_shrinks;      /* halvings: wasted spins and preemptions */
  uint64_t window_grows;        /* doublings: events just after a sleep began */
  uint64_t preemptions;         /* involuntary context switches of the loop's
                                   thread seen by the samples (adaptive only) */
  uint64_t window_contended;    /* samples that found the thread contended
                                   (each halves the window and holds it
                                   there: no growth for 5 to 100 ms) */
  uint64_t window_misses;       /* spins that ran out a window above 0 before a
                                   sleep whose event came within the horizon
                                   (the miss rule's count) */
  uint64_t window_drops;  /* times 8 misses in a row set the window to 0 */
  uint64_t window_probes; /* times a dropped window was set back to
                             busy_poll_us to try spinning again */
  uint64_t window_hits;   /* spins with a window above 0 that ended in work:
                             the window caught the event, saving a sleep */
  uint64_t spin_ns; /* time spent spinning: in iterations that found no work
                       (adaptive only; each iteration counts for at most
                       5000 ns, as a longer one was preempted), ns. Against
                       window_hits, the CPU the window paid per sleep saved */
} weft_loop_stats;

/** Copies `loop`'s counters into `*out`. Any thread. */
void weft_loop_stats_get(const weft_loop *loop, weft_loop_stats *out);

/**
 * Writes `st` as one line of `name=value` pairs, the field names of
 * weft_loop_stats in their order, separated by single spaces, without a
 * newline (busy_poll_window_ns is -1 for UINT64_MAX), into `buf` of `len`
 * bytes, always NUL-terminated when `len` > 0, as snprintf does. For logs
 * and benchmark reports: the pairs may grow in later versions, so a reader
 * should look names up, not count positions.
 *
 * Returns the length of the whole line (bytes, without the NUL): at least
 * `len` means it was cut short. Any thread; `st` is the caller's copy.
 */
int weft_loop_stats_format(const weft_loop_stats *st, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_LOOP_H */
