/* weft/source.h: event sources, what the hybrid selector polls.
 *
 * A source is anything that produces events for a loop: a transport's
 * per-loop instance (an io_uring ring, a verbs CQ, a UCX worker, an inner
 * epoll set of TCP sockets), or a test source over an eventfd. The loop knows
 * sources only through these three operations; it never knows a transport.
 *
 * Each selector iteration polls every source without blocking. When nothing
 * happened for busy_poll_us, the loop asks every source to arm; a source that
 * answers "pending" keeps the loop polling. When all agree, the loop sleeps in
 * epoll_wait on the sources' fds (level-triggered), its wake-up eventfd and
 * the next timer deadline (epoll_pwait2, nanosecond timeout). A source whose
 * fd was reported ready gets its `wakeup` op, then the loop polls again.
 */
#ifndef WEFT_SOURCE_H
#define WEFT_SOURCE_H

#include <stdint.h>

#include <weft/loop.h>

#ifdef __cplusplus
extern "C" {
#endif

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
   * ibv_get_cq_event). May be NULL.
   */
  void (*wakeup)(weft_source *src, uint32_t events);
} weft_source_ops;

/**
 * A registered source. The caller owns the memory and keeps it alive until
 * weft_loop_remove_source(). Fields marked public may be set before adding.
 */
struct weft_source {
  const weft_source_ops *ops; /* public: the operations */
  int fd;          /* public: fd epoll waits on, -1 = none (polled only) */
  uint32_t events; /* public: epoll events to wait for (default EPOLLIN) */
  void *data;      /* public: the owner's pointer */
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

#ifdef __cplusplus
}
#endif
#endif /* WEFT_SOURCE_H */
