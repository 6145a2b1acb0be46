/* SPDX-License-Identifier: Apache-2.0 */
/* transports/uring/loop.c: the per-loop instance: one ring and its
 * provided buffer ring, made the loop's weft_source (poll, arm, wakeup),
 * its start and stop, and the dispatch of each completion to the file of
 * its request kind. Everything here runs on the loop's thread.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <liburing.h>

#include <weft/error.h>
#include <weft/log.h>
#include <weft/source.h>
#include <weft/transport_plugin.h>

#include "transports/uring/uring_internal.h"

/* ---- per-loop state ---- */

/* An SQE, submitting what is queued when the SQ is full. NULL only when
 * the kernel refuses SQEs for good (or keeps answering EBUSY because the
 * CQ is full, which the next poll resolves). */
struct io_uring_sqe *weft__uring_get_sqe(ur_loop *ul) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ul->ring);
  for (int tries = 0; sqe == NULL && tries < 8; tries++) {
    int rc = io_uring_submit(&ul->ring);
    ul->stats.enters++;
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
      return NULL;
    sqe = io_uring_get_sqe(&ul->ring);
  }
  return sqe;
}

struct io_uring_sqe *weft__uring_cancel_linked(ur_loop *ul, int fd) {
  struct io_uring_sqe *sqe = weft__uring_get_sqe(ul);
  if (sqe != NULL) {
    io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
    request_misc(ul, sqe);
    /* Hard link: the next runs after the cancel whatever it found. */
    sqe->flags |= IOSQE_IO_HARDLINK;
    sqe = weft__uring_get_sqe(ul);
  }
  return sqe;
}

void weft__uring_cancel_and_close(ur_loop *ul, int fd) {
  struct io_uring_sqe *sqe = weft__uring_cancel_linked(ul, fd);
  if (sqe != NULL) {
    io_uring_prep_close(sqe, fd);
    request_misc(ul, sqe);
  } else {
    close(fd);
  }
}

/* ---- the provided buffer ring ---- */

void weft__uring_buf_ring_put(ur_loop *ul, unsigned bid) {
  io_uring_buf_ring_add(ul->br, ul->bufs + (size_t)bid * ul->buf_size,
                        ul->buf_size, (unsigned short)bid, ul->buf_mask, 0);
  io_uring_buf_ring_advance(ul->br, 1);
}

static void loop_free(ur_loop *ul);

/* weft_buf free callback: the slot goes back to the ring. */
void weft__uring_slot_returned(void *base, size_t capacity, void *arg) {
  (void)capacity;
  ur_loop *ul = arg;
  ul->bufs_out--;
  if (ul->orphaned) {
    if (ul->bufs_out == 0)
      loop_free(ul);
    return;
  }
  weft__uring_buf_ring_put(
      ul, (unsigned)(((uint8_t *)base - ul->bufs) / ul->buf_size));
}

/* The slots' memory and the held lists' arrays (buffers_init). */
static void buffers_free(ur_loop *ul) {
  free(ul->held_buf);
  free(ul->held_next);
  free(ul->bufs);
  ul->held_buf = NULL;
  ul->held_next = NULL;
  ul->bufs = NULL;
}

static int buffers_init(ur_loop *ul) {
  ul->buf_count = weft__uring_settings.buf_count;
  ul->buf_size = weft__uring_settings.buf_size;
  ul->buf_mask = (unsigned)io_uring_buf_ring_mask(ul->buf_count);
  void *mem = NULL;
  if (posix_memalign(&mem, (size_t)sysconf(_SC_PAGESIZE),
                     (size_t)ul->buf_count * ul->buf_size) != 0)
    return WEFT_ENOMEM;
  ul->bufs = mem;
  ul->held_buf = calloc(ul->buf_count, sizeof *ul->held_buf);
  ul->held_next = calloc(ul->buf_count, sizeof *ul->held_next);
  int rc = WEFT_ENOMEM;
  if (ul->held_buf != NULL && ul->held_next != NULL)
    rc = weft__uring_buf_ring_setup(&ul->ring, ul->buf_count, UR_BGID, &ul->br);
  if (rc < 0) {
    buffers_free(ul);
    return rc;
  }
  for (unsigned i = 0; i < ul->buf_count; i++)
    io_uring_buf_ring_add(ul->br, ul->bufs + (size_t)i * ul->buf_size,
                          ul->buf_size, (unsigned short)i, ul->buf_mask,
                          (int)i);
  io_uring_buf_ring_advance(ul->br, (int)ul->buf_count);
  ul->stats.buf_count = ul->buf_count;
  ul->stats.buf_size = ul->buf_size;
  return 0;
}

/* ---- the source: poll, arm, wakeup ---- */

/* True when completions wait for this thread to run them (DEFER_TASKRUN or
 * COOP_TASKRUN with TASKRUN_FLAG), or the CQ overflowed into the kernel. */
static bool kernel_has_work(const ur_loop *ul) {
  unsigned f = IO_URING_READ_ONCE(*ul->ring.sq.kflags);
  return (f & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) != 0;
}

/* The one io_uring_enter of an iteration: submit and fetch completions. */
static void enter_if_needed(ur_loop *ul) {
  bool submit = io_uring_sq_ready(&ul->ring) > 0;
  if (!submit && !kernel_has_work(ul))
    return;
  int rc = io_uring_submit_and_get_events(&ul->ring);
  ul->stats.enters++;
  /* EBUSY/EAGAIN: the CQ is full; reaping below makes room, and the SQEs
   * still queued go with the next enter. */
  if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
    weft_log(WEFT_LOG_WARN, "uring: io_uring_enter: %s", weft_strerror(rc));
}

static void dispatch(ur_loop *ul, uint64_t user_data, int32_t res,
                     uint32_t flags);

static int reap(ur_loop *ul, int budget) {
  struct {
    uint64_t user_data;
    int32_t res;
    uint32_t flags;
  } batch[UR_REAP_MAX];
  int max = budget < UR_REAP_MAX ? budget : UR_REAP_MAX;
  int n = 0;
  unsigned head;
  struct io_uring_cqe *cqe;
  /* Copy out, then hand the slots back before any handler runs: handlers
   * may queue work that makes more CQEs. */
  io_uring_for_each_cqe(&ul->ring, head, cqe) {
    batch[n].user_data = cqe->user_data;
    batch[n].res = cqe->res;
    batch[n].flags = cqe->flags;
    if (++n == max)
      break;
  }
  io_uring_cq_advance(&ul->ring, (unsigned)n);
  ul->stats.cqes += (uint64_t)n;
  for (int i = 0; i < n; i++)
    dispatch(ul, batch[i].user_data, batch[i].res, batch[i].flags);
  weft__uring_fire_read_completes(ul);
  return n;
}

static void evfd_set(ur_loop *ul, bool on) {
  if (ul->evfd_on == on)
    return;
  io_uring_cq_eventfd_toggle(&ul->ring, on);
  ul->evfd_on = on;
}

static int ur_poll(weft_source *src, int budget) {
  ur_loop *ul = src->data;
  evfd_set(ul, false); /* busy: no eventfd signal per completion */
  int work = weft__uring_recv_yielded(ul);
  enter_if_needed(ul);
  return work + reap(ul, budget);
}

static int ur_arm(weft_source *src) {
  ur_loop *ul = src->data;
  if (io_uring_sq_ready(&ul->ring) > 0 || ul->yield_head != NULL)
    return 1; /* poll submits them, or delivers held reads, first */
  evfd_set(ul, true);
  /* Dekker with the kernel: it publishes work (task-work list, CQ tail;
   * full barrier) and then reads cq_flags to decide whether to signal the
   * eventfd; we store cq_flags and then read its side. One of us sees the
   * other, so no completion is left unsignalled while we sleep. */
  atomic_thread_fence(memory_order_seq_cst);
  return kernel_has_work(ul) || io_uring_cq_ready(&ul->ring) > 0;
}

/* The one-shot poll of the loop's epoll fd (its wake-up eventfd, its
 * watchers) that ends a sleep in the ring; it stays in the kernel from one
 * sleep to the next until it fires. */
static int epoll_poll_arm(ur_loop *ul, int epfd) {
  if (ul->epoll_polled)
    return 0;
  struct io_uring_sqe *sqe = weft__uring_get_sqe(ul);
  if (sqe == NULL)
    return WEFT_EIO;
  io_uring_prep_poll_add(sqe, epfd, POLLIN);
  io_uring_sqe_set_data(sqe, &ul->op_epoll);
  ul->inflight++;
  ul->epoll_polled = true;
  return 0;
}

/* What ended a sleep in the ring, from the CQEs it left (not reaped yet):
 * the epoll fd's poll, else the ring's own completions, else nothing. */
static int sleep_result(ur_loop *ul) {
  unsigned head, seen = 0;
  struct io_uring_cqe *cqe;
  int r = WEFT_SOURCE_SLEPT_NONE;
  io_uring_for_each_cqe(&ul->ring, head, cqe) {
    if (cqe->user_data == (uint64_t)(uintptr_t)&ul->op_epoll)
      return WEFT_SOURCE_SLEPT_FD;
    r = WEFT_SOURCE_SLEPT_WORK;
    if (++seen == UR_REAP_MAX)
      break;
  }
  return r;
}

/* The loop's sleep when the ring is its only source (weft_source_ops
 * sleep): one io_uring_enter submits what is queued, runs the deferred
 * completions and waits for the next one, the loop's epoll fd or the
 * timeout. Where the loop slept in epoll on the ring's eventfd, a blocking
 * request/response made three calls per message (epoll_pwait2, an enter
 * that ran the recv completion, an enter that submitted the reply); here
 * it makes two (the reply's enter, this one). The reply cannot share this
 * enter: its send completes inline and its CQE would end the wait at once.
 * The eventfd stays off: nothing waits on it. */
static int ur_sleep(weft_source *src, int epfd,
                    const struct timespec *timeout) {
  ur_loop *ul = src->data;
  if (ul->yield_head != NULL || io_uring_cq_ready(&ul->ring) > 0)
    return WEFT_SOURCE_PENDING; /* held reads, completions to reap */
  evfd_set(ul, false);
  int rc = epoll_poll_arm(ul, epfd);
  if (rc < 0) /* no SQE for the poll now: no sleep (removing the ring as */
    return WEFT_SOURCE_PENDING; /* a failed source would strand it) */
  struct io_uring_cqe *cqe;
  if (timeout != NULL) {
    struct __kernel_timespec ts = {.tv_sec = timeout->tv_sec,
                                   .tv_nsec = timeout->tv_nsec};
    rc = io_uring_submit_and_wait_timeout(&ul->ring, &cqe, 1, &ts, NULL);
  } else {
    rc = io_uring_submit_and_wait(&ul->ring, 1);
  }
  ul->stats.enters++;
  ul->stats.sleeps++;
  /* ETIME: the timer's deadline; EINTR: a signal; EBUSY/EAGAIN: the CQ
   * is full, which the next reap resolves. */
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
    weft_log(WEFT_LOG_WARN, "uring: io_uring_enter (sleep): %s",
             weft_strerror(rc));
  return sleep_result(ul);
}

static const weft_source_ops ur_source_ops = {
    .name = "uring", .poll = ur_poll, .arm = ur_arm, .wakeup = NULL};

/* Where the kernel takes a timeout with the wait (IORING_FEAT_EXT_ARG,
 * 5.11): the loop may sleep in the ring. */
static const weft_source_ops ur_source_ops_sleep = {.name = "uring",
                                                    .poll = ur_poll,
                                                    .arm = ur_arm,
                                                    .wakeup = NULL,
                                                    .sleep = ur_sleep};

/* ---- loop lifecycle ---- */

int weft__uring_loop_init(weft_loop *loop, void **loop_state) {
  int err;
  ur_loop *ul = calloc(1, sizeof *ul);
  if (ul == NULL)
    return WEFT_ENOMEM;
  ul->loop = loop;
  ul->efd = -1;
  ul->op_misc.kind = UR_OP_MISC;
  ul->op_epoll.kind = UR_OP_EPOLL;
  ul->send_zc_min = weft__uring_settings.send_zc_min;
  err = weft__uring_ring_create(&ul->ring, UR_SQ_ENTRIES, UR_CQ_ENTRIES,
                                &ul->setup_flags);
  if (err < 0)
    goto failed_ring;
  ul->stats.setup_flags = ul->setup_flags;
  /* A registered ring fd saves a file lookup per enter (5.18); optional. */
  io_uring_register_ring_fd(&ul->ring);
  ul->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (ul->efd < 0) {
    err = neg_errno();
    goto failed_eventfd;
  }
  err = io_uring_register_eventfd(&ul->ring, ul->efd);
  if (err < 0)
    goto failed_register_eventfd;
  ul->evfd_on = true;
  evfd_set(ul, false);
  err = buffers_init(ul);
  if (err < 0)
    goto failed_buffers;
  weft_source_init(&ul->source,
                   (ul->ring.features & IORING_FEAT_EXT_ARG)
                       ? &ur_source_ops_sleep
                       : &ur_source_ops,
                   ul->efd, ul);
  /* Edge-triggered, so a wake-up costs no read(2) of the eventfd: the
   * kernel writes the eventfd for each completion it signals (eventfd
   * write -> ep_poll_callback), and each write is a new edge whatever the
   * counter holds, which a 64-bit counter never fills. ur_arm's check
   * covers what completed before the eventfd was switched on. One system
   * call fewer per sleep (docs/transports/uring.md). */
  ul->source.events = EPOLLIN | EPOLLET;
  err = weft_loop_add_source(loop, &ul->source);
  if (err < 0)
    goto failed_add_source;
  *loop_state = ul;
  return 0;

failed_add_source:
  io_uring_unregister_buf_ring(&ul->ring, UR_BGID);
  free(ul->br);
  buffers_free(ul);
failed_buffers:
failed_register_eventfd:
  close(ul->efd);
failed_eventfd:
  weft__uring_ring_exit(&ul->ring);
failed_ring:
  weft_log(WEFT_LOG_ERROR,
           "uring: cannot start on loop %d: %s; use transport=tcp",
           weft_loop_index(loop), weft_strerror(err));
  free(ul);
  return err;
}

static void loop_free(ur_loop *ul) {
  for (int cls = UR_SEND_SMALL; cls <= UR_SEND_FULL; cls++) {
    while (ul->send_free[cls] != NULL) {
      ur_send *s = ul->send_free[cls];
      ul->send_free[cls] = s->next_free;
      free(s);
    }
  }
  buffers_free(ul);
  free(ul);
}

/* Cancels everything still in the kernel and reaps until every request
 * has completed (the ones that hold a channel or buffers, and the closes),
 * so nothing the kernel may still touch is freed under it and no socket is
 * left open. The closes queued before go in first, so the cancel cannot
 * catch them. Every request ends at a cancel, or at the reset of its
 * socket (abort_lingering): the wait is a safety net, not a timeout that
 * a stop runs into. */
static void drain(ur_loop *ul) {
  io_uring_submit(&ul->ring);
  ul->stats.enters++;
  struct io_uring_sqe *sqe = weft__uring_get_sqe(ul);
  if (sqe != NULL) {
    io_uring_prep_cancel64(sqe, 0,
                           IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL);
    request_misc(ul, sqe);
  }
  uint64_t waited = 0;
  while (ul->inflight > 0 && waited < UR_FINI_WAIT_NS) {
    weft__uring_abort_lingering(ul); /* none, unless a CQE closed one */
    struct __kernel_timespec ts = {.tv_nsec = 10 * 1000 * 1000};
    struct io_uring_cqe *cqe;
    io_uring_submit_and_wait_timeout(&ul->ring, &cqe, 1, &ts, NULL);
    if (reap(ul, UR_REAP_MAX) == 0)
      waited += 10u * 1000u * 1000u;
  }
  if (ul->inflight > 0)
    weft_log(WEFT_LOG_WARN, "uring: loop stop: %llu requests did not complete",
             (unsigned long long)ul->inflight);
}

/* The core closed every channel of this loop before. */
void weft__uring_loop_fini(weft_loop *loop, void *loop_state) {
  ur_loop *ul = loop_state;
  ul->stopping = true;
  while (ul->listeners != NULL) {
    ur_listener *ln = ul->listeners;
    weft_listener_set_priv(ln->l, NULL);
    weft__uring_listener_close(ln);
  }
  weft__uring_abort_lingering(ul);
  drain(ul);
  weft__uring_recv_fini(ul); /* the channels are closed: nothing yields */
  weft_loop_remove_source(loop, &ul->source);
  io_uring_unregister_buf_ring(&ul->ring, UR_BGID);
  weft__uring_ring_exit(&ul->ring);
  close(ul->efd);
  free(ul->br);
  ul->br = NULL;
  if (ul->bufs_out > 0) {
    /* Pipelines still hold slots (the pool reports them as leaks); the
     * memory stays until the last comes back. */
    ul->orphaned = true;
    return;
  }
  loop_free(ul);
}

int weft__uring_stats_get(weft_loop *loop, weft__uring_stats *out) {
  int err = 0;
  ur_loop *ul = loop_state_of(loop, &err);
  if (ul == NULL)
    return err < 0 ? err : WEFT_ENOENT;
  *out = ul->stats;
  out->bufs_out = ul->bufs_out;
  return 0;
}

/* ---- completions ---- */

static void dispatch(ur_loop *ul, uint64_t user_data, int32_t res,
                     uint32_t flags) {
  ur_op *op = (ur_op *)(uintptr_t)user_data;
  if (op == NULL)
    return;
  switch (op->kind) {
  case UR_OP_MISC:
    ul->inflight--; /* cancel, close, nop: nothing else to do */
    break;
  case UR_OP_EPOLL:
    ul->inflight--; /* the loop collects the epoll fd's events itself */
    ul->epoll_polled = false;
    break;
  case UR_OP_ACCEPT:
    weft__uring_accept_done((ur_listener *)op, res, flags);
    break;
  case UR_OP_ACCEPT_POLL:
    weft__uring_accept_poll_done(container_of(op, ur_listener, op_poll), res);
    break;
  case UR_OP_RECV:
    weft__uring_recv_done(container_of(op, ur_channel, op_recv), res, flags);
    break;
  case UR_OP_PLAIN_RECV:
    weft__uring_plain_recv_done(container_of(op, ur_channel, op_plain), res);
    break;
  case UR_OP_SEND:
    weft__uring_send_done(ul, (ur_send *)op, res);
    break;
  case UR_OP_SEND_ZC:
    weft__uring_send_zc_done(ul, (ur_send *)op, res, flags);
    break;
  case UR_OP_CONNECT:
    weft__uring_connect_done(container_of(op, ur_channel, op_connect), res);
    break;
  default:
    weft_log(WEFT_LOG_ERROR, "uring: CQE with unknown request kind %u",
             (unsigned)op->kind);
  }
}
