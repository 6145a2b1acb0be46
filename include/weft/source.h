/* SPDX-License-Identifier: Apache-2.0 */
/* weft/source.h: event sources and fd watchers, what the hybrid selector
 * polls.
 *
 * A source is anything that produces events for a loop and is polled by
 * its own code: a transport's per-loop instance (an io_uring ring, a verbs
 * CQ, a UCX worker), or a test source over an eventfd. The loop knows
 * sources only through these three operations; it never knows a transport.
 *
 * An fd watcher (weft_watcher, below) is the other kind: one fd in the
 * loop's own epoll set with a callback, for plugins whose readiness is an
 * fd's (the tcp transport's sockets), as libuv's uv__io. The loop polls all
 * watchers with one epoll_wait, and only while some are registered.
 *
 * Each selector iteration polls every source without blocking. When nothing
 * happened for the busy-poll window, the loop asks every source to arm; a
 * source that answers "pending" keeps the loop polling. When all agree, the
 * loop sleeps in epoll_wait on the sources' fds (level-triggered unless a
 * source asks for EPOLLET in `events`), the
 * watchers' fds, its wake-up eventfd and the next timer deadline
 * (epoll_pwait2, nanosecond timeout), level-triggered unless a watcher asks
 * for EPOLLET. A source whose fd was reported ready
 * gets its `wakeup` op, then the loop polls again; a watcher's callback runs
 * at once. A loop with watchers also reports a ready source fd it finds in
 * its non-blocking epoll_wait to the source's `wakeup` op, outside a sleep.
 */
#ifndef WEFT_SOURCE_H
#define WEFT_SOURCE_H

#include <stdint.h>
#include <time.h>

#include <weft/loop.h>

#ifdef __cplusplus
extern "C" {
#endif

/** An event source a loop polls (defined below). */
typedef struct weft_source weft_source;

/** What a source does for the selector. `name` first, then the ops. */
typedef struct weft_source_ops {
  const char *name; /* for logs and errors */

  /**
   * Handles up to `budget` ready events without blocking and returns how
   * many it handled (0 = nothing was ready), or a negative weft error, which
   * the loop logs and then removes the source. Required.
   */
  int (*poll)(weft_source *src, int budget);

  /**
   * Prepares to sleep: requests a notification on the fd for the next event
   * (ibv_req_notify_cq, ucp_worker_arm, ...) and checks once more that
   * nothing arrived meanwhile. Returns 0 when it is safe to sleep, > 0 when
   * work is pending (the loop polls again instead of sleeping). May be NULL:
   * always safe to sleep.
   */
  int (*arm)(weft_source *src);

  /**
   * Called after epoll reported `events` (EPOLLIN, ...) on the fd, before the
   * next poll: acknowledge what must be acknowledged (read an eventfd,
   * ibv_get_cq_event). Mostly after a sleep; on a loop with fd watchers also
   * when the watchers' non-blocking epoll_wait found the fd ready. May be
   * NULL.
   */
  void (*wakeup)(weft_source *src, uint32_t events);
  /**
   * Optional: the loop's whole sleep, inside the source, in place of `arm`
   * and the epoll_wait, for a source that can submit its queued work and
   * wait for its own events and a file descriptor in one system call
   * (io_uring_enter with a poll on `epfd`). The loop calls it instead only
   * while this source is its only one. `epfd` is the loop's epoll fd (its
   * watchers, its wake-up eventfd): the call must return when it may be
   * readable, when the source has work, or after `timeout` (relative; NULL
   * = none). Returns WEFT_SOURCE_SLEPT_FD (the loop then collects `epfd`'s
   * events without blocking), WEFT_SOURCE_SLEPT_WORK (own events came),
   * WEFT_SOURCE_SLEPT_NONE (timeout or interrupted), WEFT_SOURCE_PENDING
   * (work was pending: it did not sleep, as `arm` > 0), or a negative weft
   * error, which the loop logs, and then removes the source. Loop thread.
   */
  int (*sleep)(weft_source *src, int epfd, const struct timespec *timeout);
} weft_source_ops;

/** weft_source_ops.sleep results (see there). */
enum {
  WEFT_SOURCE_SLEPT_NONE = 0,
  WEFT_SOURCE_SLEPT_WORK = 1,
  WEFT_SOURCE_SLEPT_FD = 2,
  WEFT_SOURCE_PENDING = 3,
};

/**
 * A registered source. The caller owns the memory and keeps it alive until
 * weft_loop_remove_source(). Fields marked public may be set before adding.
 */
struct weft_source {
  const weft_source_ops *ops; /* public: the operations */
  int fd; /* public: fd epoll waits on, -1 = none (polled only) */
  /** public: epoll events to wait for (default EPOLLIN). A source whose fd
   * gets a new event for each notification (an eventfd the kernel writes
   * once per signal) may add EPOLLET: its wakeup then need not drain the
   * fd, and its arm must still see work that came before it armed. */
  uint32_t events;
  void *data; /* public: the owner's pointer */
  /* private */
  weft_loop *loop;
  weft_source *next;
  weft_source *prev;
};

/** Initialises `src` with `ops`, `fd` (or -1), EPOLLIN and `data`. */
void weft_source_init(weft_source *src, const weft_source_ops *ops, int fd,
                      void *data);

/**
 * Adds `src` to `loop`'s selector (and its fd, if any, to the loop's epoll
 * set). Returns 0, WEFT_EALREADY if `src` is registered, or the epoll_ctl
 * error. Loop thread only (or before the group starts).
 */
int weft_loop_add_source(weft_loop *loop, weft_source *src);

/**
 * Removes `src`; it is not polled again, also when called from inside its
 * own poll. Returns 0 or WEFT_ENOENT if `src` is not registered on `loop`.
 * Loop thread only.
 */
int weft_loop_remove_source(weft_loop *loop, weft_source *src);

/* ---- fd watchers --------------------------------------------------------- */

typedef struct weft_watcher weft_watcher;

/**
 * Called on the loop's thread with the epoll events reported for the
 * watcher's fd: some of those it asked for (EPOLLIN, EPOLLOUT, EPOLLRDHUP,
 * EPOLLPRI) and EPOLLERR / EPOLLHUP, which epoll reports unasked. The
 * callback may add, modify or remove any watcher or source, itself
 * included, and free a watcher it removed. Events already reported for a
 * watcher whose interest changed since may still arrive once: check state.
 */
typedef void (*weft_watcher_cb)(weft_watcher *w, uint32_t events);

/**
 * Optional: does what the callback does for EPOLLIN, without epoll having
 * reported the fd ready, so a spinning loop can read its one active socket
 * directly, as Linux's busy read (net.core.busy_read) spins in recv(). It
 * must tolerate finding nothing (a read that meets EAGAIN), and returns
 * how much it found: > 0 when it read data or met the end of the stream
 * or an error (WEFT_BUSY_READ_MORE when that was a lot), 0 when nothing
 * was there. Loop thread; it may remove or free its own watcher, as the
 * callback may.
 *
 * When the loop calls it: while it busy-polls and has at most
 * WEFT_BUSY_READ_MAX_WATCHERS watchers with interest, on the watcher that
 * was the only one of its last epoll batch and was reported EPOLLIN alone,
 * while that watcher's interest is EPOLLIN (with or without EPOLLRDHUP)
 * and nothing else. It still makes the epoll_wait on every
 * WEFT_BUSY_READ_EPOLL_EVERY-th spin; a batch of two or more watchers
 * ends it, and one that held another watcher alone moves or ends it. So a loop
 * serving one busy connection saves the epoll_wait that would announce each
 * message (its cost: docs/benchmarks.md), and one serving several keeps
 * asking epoll.
 */
typedef int (*weft_watcher_busy_read_fn)(weft_watcher *w);

/**
 * What a busy_read returns when it found a lot (the tcp transport: 64 KiB
 * or more; a flood, a bulk transfer), so the socket's next bytes are
 * likely there already. The loop then asks epoll on the next spin: a
 * socket that never runs dry keeps the other watchers waiting behind one
 * or two of its reads (each up to the transport's bound of bytes and
 * handler work), as without busy reads, not WEFT_BUSY_READ_EPOLL_EVERY of
 * them; beside that many bytes the epoll_wait costs little. Any other hit
 * returns 1.
 */
#define WEFT_BUSY_READ_MORE 2

/**
 * While a loop busy-reads one watcher, every this-many spins it makes the
 * epoll_wait for all of them instead, so the other watchers' events wait
 * at most this many spins (a few µs).
 */
#define WEFT_BUSY_READ_EPOLL_EVERY 8

/**
 * The most watchers with interest a loop may have and still busy-read:
 * one connection and one other fd, a server's listener say. With more,
 * the spins a busy read keeps from epoll delay the others' events: 4
 * connections per loop in weft-bench's rate pattern lost 8% of their
 * message rate to it.
 */
#define WEFT_BUSY_READ_MAX_WATCHERS 2

/**
 * An fd in the loop's epoll set, level-triggered unless its interest has
 * EPOLLET. The caller owns the memory and keeps it alive until
 * weft_loop_remove_watcher(). Fields marked public may be read at any time
 * and set before adding.
 *
 * Edge-triggered (EPOLLET): epoll reports the fd once per change of its
 * state (new bytes, new room, a hang-up), and `cb` must then read until
 * EAGAIN or a short read of a stream socket, or call
 * weft_loop_rearm_watcher() for what it leaves (a read budget spent),
 * else the fd is not reported again until the peer sends more. What it
 * buys: a level-triggered fd that was just reported goes back on epoll's
 * ready list at once, ahead of the fds that become ready after it, so a
 * connection that sends again soon is served before connections whose
 * requests came earlier (the tcp transport's keep-alive p99 beside
 * nginx's, samples/http/docs/benchmarks.md). Edge-triggered fds are
 * reported in the order their events came, as nginx's are.
 */
struct weft_watcher {
  int fd;             /* public: the fd (any kind epoll accepts) */
  weft_watcher_cb cb; /* public: the callback */
  void *data;         /* public: the owner's pointer */
  weft_watcher_busy_read_fn busy_read; /* public, optional (NULL: none) */
  /* private */
  uint32_t events; /* interest now; 0 = registered, not in the epoll set */
  weft_loop *loop; /* the loop it is registered on, NULL if none */
};

/** Initialises `w` with `fd`, `cb` and `data`; not registered, no events,
 *  no busy_read (set it after this call to allow busy reads). */
void weft_watcher_init(weft_watcher *w, int fd, weft_watcher_cb cb, void *data);

/**
 * Registers `w` with `loop`, asking for `events` (a combination of
 * EPOLLIN, EPOLLOUT, EPOLLRDHUP, EPOLLPRI and EPOLLET; 0 registers it without
 * putting the fd in the epoll set). From then on each selector iteration
 * polls it (one non-blocking epoll_wait for all the loop's watchers, made
 * only while at least one has events), a sleeping loop wakes for it, and
 * `cb` runs on the loop's thread for each readiness. Returns 0,
 * WEFT_EALREADY if `w` is registered, WEFT_EINVAL for other event bits
 * (EPOLLONESHOT, EPOLLEXCLUSIVE; EPOLLET is allowed, see weft_watcher), or
 * the epoll_ctl
 * error (WEFT_EPERM for a regular file, WEFT_EEXIST if the fd is in the
 * set already). Loop thread only (or before the group starts).
 */
int weft_loop_add_watcher(weft_loop *loop, weft_watcher *w, uint32_t events);

/**
 * Changes what `w` waits for, with one epoll_ctl, none if `events` equals
 * the current interest. 0 takes the fd out of the epoll set, since epoll
 * reports EPOLLERR and EPOLLHUP even unasked (a socket nobody reads would
 * report its hang-up on every poll); non-zero puts it back. Returns 0,
 * WEFT_ENOENT if `w` is not registered on `loop`, WEFT_EINVAL for other
 * event bits, or the epoll_ctl error (the interest is then unchanged).
 * Loop thread only.
 */
int weft_loop_modify_watcher(weft_loop *loop, weft_watcher *w, uint32_t events);

/**
 * For an edge-triggered watcher whose callback left bytes unread (its read
 * budget spent): asks epoll to look at the fd again (EPOLL_CTL_MOD with
 * the same interest), which puts it at the back of the ready list if it
 * is still ready, so the loop's next poll reports it after the fds
 * already waiting. One system call. Returns 0, WEFT_ENOENT if `w` is not
 * registered on `loop`, 0 without a call when `w` has no interest, or the
 * epoll_ctl error. Loop thread only.
 */
int weft_loop_rearm_watcher(weft_loop *loop, weft_watcher *w);

/**
 * Unregisters `w` and takes its fd out of the epoll set: `cb` is not
 * called again, also not for events of the batch being dispatched, and
 * also when called from inside a callback. Call it before closing the fd.
 * Returns 0 or WEFT_ENOENT if `w` is not registered on `loop`. Loop thread
 * only.
 */
int weft_loop_remove_watcher(weft_loop *loop, weft_watcher *w);

/**
 * The events `w` waits for now (0 when none or not registered). Loop thread
 * only (the loop changes it).
 */
static inline uint32_t weft_watcher_events(const weft_watcher *w) {
  return w->events;
}

#ifdef __cplusplus
}
#endif
#endif /* WEFT_SOURCE_H */
