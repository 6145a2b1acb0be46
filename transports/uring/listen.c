/* transports/uring/listen.c: listeners. One multishot accept per
 * listening socket hands each connection to the core; when the kernel ends
 * it, it is re-armed or, when the process is out of descriptors or memory,
 * paused for a while. Loop thread.
 */
#include <errno.h>
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

static void accept_arm(ur_listener *ln) {
  struct io_uring_sqe *sqe = weft__uring_get_sqe(ln->ul);
  if (sqe == NULL)
    return;
  io_uring_prep_multishot_accept(sqe, ln->fd, NULL, NULL, SOCK_CLOEXEC);
  io_uring_sqe_set_data(sqe, &ln->op);
  ln->armed = true;
  ln->ul->inflight++;
}

static void accept_resume(void *arg) {
  ur_listener *ln = arg;
  if (!ln->armed && !ln->closing)
    accept_arm(ln);
}

void weft__uring_accept_done(ur_listener *ln, int32_t res, uint32_t flags) {
  if (res >= 0) {
    if (ln->closing)
      close(res);
    else
      weft_listener_accepted(ln->l, res);
  }
  if (flags & IORING_CQE_F_MORE)
    return;
  ln->armed = false;
  ln->ul->inflight--;
  if (ln->closing) {
    free(ln);
    return;
  }
  switch (res) {
  case -EMFILE:
  case -ENFILE:
  case -ENOBUFS:
  case -ENOMEM:
    weft_log(WEFT_LOG_WARN,
             "uring: accept: %s; not accepting for %u ms (raise the fd limit "
             "with ulimit -n?)",
             weft_strerror(res), (unsigned)(UR_ACCEPT_BACKOFF_NS / 1000000u));
    weft_timer_start(&ln->backoff, UR_ACCEPT_BACKOFF_NS, 0, accept_resume, ln);
    return;
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
             weft_strerror(res), (unsigned)(UR_ACCEPT_BACKOFF_NS / 1000000u));
    weft_timer_start(&ln->backoff, UR_ACCEPT_BACKOFF_NS, 0, accept_resume, ln);
  }
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
  *ln = (ur_listener){.op = {UR_OP_ACCEPT}, .l = l, .ul = ul, .fd = fd};
  weft_timer_init(ul->loop, &ln->backoff);
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

static void listener_free(ur_listener *ln) { free(ln); }

/* Cancels the accept and closes the socket through the ring; the memory
 * goes with the accept's last CQE (or now, if it was not armed). */
void weft__uring_listener_close(ur_listener *ln) {
  listener_unlink(ln);
  weft_timer_stop(&ln->backoff);
  ln->closing = true;
  struct io_uring_sqe *sqe;
  if (ln->armed && (sqe = weft__uring_get_sqe(ln->ul)) != NULL) {
    io_uring_prep_cancel(sqe, &ln->op, 0);
    io_uring_sqe_set_data64(sqe, 0);
  }
  if ((sqe = weft__uring_get_sqe(ln->ul)) != NULL) {
    io_uring_prep_close(sqe, ln->fd);
    io_uring_sqe_set_data64(sqe, 0);
  } else {
    close(ln->fd);
  }
  ln->fd = -1;
  if (!ln->armed)
    listener_free(ln);
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
