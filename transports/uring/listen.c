/* SPDX-License-Identifier: Apache-2.0 */
/* transports/uring/listen.c: listeners. One multishot accept per
 * listening socket hands each connection to the core; when the kernel ends
 * it, it is re-armed. At the fd limit the accept guard closes each waiting
 * connection (the client sees it closed, not a hang) and a poll waits for
 * the next before the accept is armed again; when the kernel is short of
 * memory, accepting pauses for a while. Loop thread.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <liburing.h>

#include <weft/error.h>
#include <weft/log.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

#include "transports/uring/uring_internal.h"

/* ---- listeners ---- */

static void accept_resume(void *arg);

/* Accepting pauses for a while: the kernel is short of memory, or no SQE. */
static void backoff_start(ur_listener *ln) {
  weft_timer_start(&ln->backoff, WEFT_ACCEPT_BACKOFF_NS, 0, accept_resume, ln);
}

/* Arms the multishot accept; without an SQE, tries again after a backoff. */
static void accept_arm(ur_listener *ln) {
  struct io_uring_sqe *sqe = weft__uring_get_sqe(ln->ul);
  if (sqe == NULL) {
    backoff_start(ln);
    return;
  }
  io_uring_prep_multishot_accept(sqe, ln->fd, NULL, NULL, SOCK_CLOEXEC);
  io_uring_sqe_set_data(sqe, &ln->op);
  ln->armed = true;
  ln->ul->inflight++;
}

/* At the fd limit with no connection waiting: waits for one before the
 * accept is armed again, since the accept would fail at once. */
static void accept_poll(ur_listener *ln) {
  struct io_uring_sqe *sqe = weft__uring_get_sqe(ln->ul);
  if (sqe == NULL) {
    backoff_start(ln);
    return;
  }
  io_uring_prep_poll_add(sqe, ln->fd, POLLIN);
  io_uring_sqe_set_data(sqe, &ln->op_poll);
  ln->polling = true;
  ln->ul->inflight++;
}

/* The backoff timer: accepting goes on unless something else is armed. */
static void accept_resume(void *arg) {
  ur_listener *ln = arg;
  if (!ln->armed && !ln->polling && !ln->closing)
    accept_arm(ln);
}

/* Frees a closing listener once the kernel holds none of its requests. */
static void listener_release(ur_listener *ln) {
  if (ln->closing && !ln->armed && !ln->polling)
    free(ln);
}

void weft__uring_accept_done(ur_listener *ln, int32_t res, uint32_t flags) {
  if (res >= 0) {
    if (ln->closing) {
      close(res);
    } else {
      weft_accept_guard_accepted(&ln->guard);
      weft_listener_accepted(ln->l, res);
    }
  }
  if (flags & IORING_CQE_F_MORE)
    return;
  ln->armed = false;
  ln->ul->inflight--;
  if (ln->closing) {
    listener_release(ln);
    return;
  }
  switch (res) {
  case -EMFILE:
  case -ENFILE:
  case -ENOBUFS:
  case -ENOMEM: {
    int rc = weft_accept_guard_refuse(&ln->guard, ln->fd, res);
    if (rc > 0)
      accept_arm(ln); /* one closed; the next, or descriptors are back */
    else if (rc == 0)
      accept_poll(ln);
    else
      backoff_start(ln);
    return;
  }
  case -ECANCELED:
  case -ECONNABORTED: /* the peer gave up while in the backlog */
  case -EINTR:
  case -EPROTO:
  case -EPERM: /* a firewall said no to this one */
    accept_arm(ln);
    return;
  default:
    if (res >= 0) {
      accept_arm(ln); /* the kernel ended the multishot (CQ overflow) */
      return;
    }
    weft_log(WEFT_LOG_ERROR, "uring: accept: %s; retrying in %u ms",
             weft_strerror(res), (unsigned)(WEFT_ACCEPT_BACKOFF_NS / 1000000u));
    backoff_start(ln);
  }
}

void weft__uring_accept_poll_done(ur_listener *ln, int32_t res) {
  ln->polling = false;
  ln->ul->inflight--;
  if (ln->closing) {
    listener_release(ln);
    return;
  }
  if (res < 0 && res != -ECANCELED) {
    weft_log(WEFT_LOG_ERROR, "uring: accept: poll: %s; retrying in %u ms",
             weft_strerror(res), (unsigned)(WEFT_ACCEPT_BACKOFF_NS / 1000000u));
    backoff_start(ln);
    return;
  }
  accept_arm(ln);
}

int weft__uring_listen(weft_listener *l, const weft_endpoint *ep, int backlog) {
  int err = 0;
  ur_loop *ul = loop_state_of(weft_listener_loop(l), &err);
  if (ul == NULL)
    return err;
  int fd;
  err = weft_socket_listen(ep, backlog, SOCK_CLOEXEC, &fd);
  if (err < 0)
    return err;
  ur_listener *ln = calloc(1, sizeof *ln);
  if (ln == NULL) {
    close(fd);
    return WEFT_ENOMEM;
  }
  *ln = (ur_listener){.op = {UR_OP_ACCEPT},
                      .op_poll = {UR_OP_ACCEPT_POLL},
                      .l = l,
                      .ul = ul,
                      .fd = fd};
  weft_timer_init(ul->loop, &ln->backoff);
  weft_accept_guard_init(&ln->guard, ul->loop, "uring");
  ln->next = ul->listeners;
  if (ul->listeners != NULL)
    ul->listeners->prev = ln;
  ul->listeners = ln;
  weft_listener_set_priv(l, ln);
  accept_arm(ln);
  return 0;
}

static void listener_unlink(ur_listener *ln) {
  ur_loop *ul = ln->ul;
  if (ln->prev != NULL)
    ln->prev->next = ln->next;
  else
    ul->listeners = ln->next;
  if (ln->next != NULL)
    ln->next->prev = ln->prev;
  ln->prev = ln->next = NULL;
}

/* Cancels the accept (or the poll) and closes the socket through the ring;
 * the memory goes with the last CQE of the two (or now, if neither is in
 * the kernel). */
void weft__uring_listener_close(ur_listener *ln) {
  listener_unlink(ln);
  weft_timer_stop(&ln->backoff);
  weft_accept_guard_fini(&ln->guard);
  ln->closing = true;
  weft__uring_cancel_and_close(ln->ul, ln->fd);
  ln->fd = -1;
  listener_release(ln);
}

void weft__uring_listen_close(weft_listener *l) {
  ur_listener *ln = weft_listener_priv(l);
  if (ln == NULL)
    return; /* the loop stopped first and closed it */
  weft_listener_set_priv(l, NULL);
  weft__uring_listener_close(ln);
}

int weft__uring_listen_address(weft_listener *l, char *buf, size_t len) {
  ur_listener *ln = weft_listener_priv(l);
  if (ln == NULL || ln->fd < 0)
    return WEFT_ECLOSED;
  return weft_socket_address(ln->fd, false, buf, len);
}
