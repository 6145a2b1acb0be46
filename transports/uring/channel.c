/* SPDX-License-Identifier: Apache-2.0 */
/* transports/uring/channel.c: a channel's socket: its options,
 * connecting, adopting an accepted socket, closing through the ring and
 * pausing reads; and the transport's ops struct, which names the entry
 * points of every file of the plugin. Loop thread.
 */
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <liburing.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/transport_plugin.h>

#include "transports/uring/uring_internal.h"

/* ---- socket options ---- */

static int channel_fd(const ur_channel *uc) { return uc->has_fd ? uc->fd : -1; }

static int ur_set_option(weft_channel *ch, weft_channel_option opt, int64_t v) {
  ur_channel *uc = ur_of(ch);
  return weft_sockopts_set(&uc->opts, channel_fd(uc), opt, v);
}

static int ur_get_option(const weft_channel *ch, weft_channel_option opt,
                         int64_t *v) {
  const ur_channel *uc = ur_of(ch);
  return weft_sockopts_get(&uc->opts, channel_fd(uc), opt, v);
}

/* ---- helpers for channel requests ---- */

void weft__uring_channel_failed(ur_channel *uc, const char *what, int err) {
  if (!channel_open(uc))
    return;
  char reason[96];
  snprintf(reason, sizeof reason, "%s: %s", what, weft_strerror(err));
  weft_channel_transport_closed(uc->ch, err, reason);
}

/* ---- connecting ---- */

void weft__uring_connect_done(ur_channel *uc, int32_t res) {
  ur_loop *ul = uc->ul;
  weft_channel *ch = uc->ch;
  uc->connecting = false;
  if (weft_channel_state_of(ch) == WEFT_CHANNEL_REGISTERED) {
    if (res == 0) {
      /* auto-read may have changed while connecting */
      uc->reading = weft_channel_auto_read(ch);
      weft__uring_recv_arm(uc);
    }
    weft_channel_connected(ch, res);
  }
  request_ended(ul, ch);
}

/* ---- channel lifecycle ---- */

static int channel_take_fd(weft_channel *ch, int fd) {
  ur_channel *uc = ur_of(ch);
  int err = 0;
  ur_loop *ul = loop_state_of(weft_channel_loop(ch), &err);
  if (ul == NULL)
    return err;
  uc->ch = ch;
  uc->ul = ul;
  uc->fd = fd;
  uc->has_fd = true;
  uc->reading = weft_channel_auto_read(ch);
  uc->op_recv.kind = UR_OP_RECV;
  uc->op_plain.kind = UR_OP_PLAIN_RECV;
  uc->op_connect.kind = UR_OP_CONNECT;
  return weft_sockopts_apply(&uc->opts, uc->fd);
}

static int ur_adopt(weft_channel *ch, intptr_t handle) {
  int fd = (int)handle;
  int err = channel_take_fd(ch, fd);
  ur_channel *uc = ur_of(ch);
  if (err < 0) {
    close(fd);
    uc->fd = -1; /* the core's close then finds nothing to do */
    return err;
  }
  weft__uring_recv_arm(uc);
  return 0;
}

static void ur_discard(intptr_t handle) { close((int)handle); }

static int connect_start(weft_channel *ch, const struct addrinfo *ai) {
  if (ai->ai_addrlen > sizeof(struct sockaddr_storage))
    return WEFT_EINVAL;
  int fd =
      socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0)
    return neg_errno();
  int err = channel_take_fd(ch, fd);
  ur_channel *uc = ur_of(ch);
  if (err < 0) {
    close(fd);
    uc->fd = -1;
    return err;
  }
  struct io_uring_sqe *sqe = weft__uring_get_sqe(uc->ul);
  if (sqe == NULL) {
    close(fd);
    uc->fd = -1;
    return WEFT_EIO;
  }
  memcpy(&uc->peer, ai->ai_addr, ai->ai_addrlen);
  uc->peer_len = ai->ai_addrlen;
  io_uring_prep_connect(sqe, fd, (struct sockaddr *)&uc->peer, uc->peer_len);
  io_uring_sqe_set_data(sqe, &uc->op_connect);
  uc->connecting = true;
  request_started(uc);
  return 0;
}

static int ur_connect(weft_channel *ch, const weft_endpoint *ep) {
  struct addrinfo *res;
  int err = weft_endpoint_resolve(ep, false, &res);
  if (err < 0)
    return err;
  err = res != NULL ? connect_start(ch, res) : WEFT_EADDRNOTAVAIL;
  freeaddrinfo(res);
  return err;
}

/* ---- lingering: closed with zero-copy sends in the kernel ---- */

/* The kernel still reads buffers of `uc`'s zero-copy sends from the
 * socket's write queue (the peer has not acknowledged the bytes). Closed
 * now, the socket would live on as an orphan holding them, which the loop
 * could not reach at stop. So it keeps the socket: cancels its requests and
 * shuts its output down after the queued bytes (the FIN the close would
 * send), and closes it after the last notification. TCP_USER_TIMEOUT ends
 * a peer that never acknowledges, as the kernel ends an orphan. */
static void linger_start(ur_channel *uc) {
  ur_loop *ul = uc->ul;
  int fd = uc->fd;
  unsigned timeout = UR_LINGER_TIMEOUT_MS;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof timeout);
  /* The sends the handlers flushed before the close may still sit in the
   * submission queue: submitted first, each goes out before the FIN if
   * the socket has room (as when the shutdown was an SQE behind them);
   * one that waits for room is cancelled below either way. Then
   * shutdown(2), not the ring's: see shutdown_now (send.c). */
  io_uring_submit(&ul->ring);
  ul->stats.enters++;
  shutdown(fd, SHUT_WR);
  struct io_uring_sqe *sqe = weft__uring_get_sqe(ul);
  if (sqe != NULL) {
    io_uring_prep_cancel_fd(sqe, fd, IORING_ASYNC_CANCEL_ALL);
    request_misc(ul, sqe);
  }
  uc->lingering = true;
  uc->linger_fd = fd;
  uc->linger_prev = NULL;
  uc->linger_next = ul->lingering;
  if (ul->lingering != NULL)
    ul->lingering->linger_prev = uc;
  ul->lingering = uc;
}

/* Takes `uc` off the lingering list; its socket is the caller's to close. */
static void linger_end(ur_channel *uc) {
  ur_loop *ul = uc->ul;
  if (uc->linger_prev != NULL)
    uc->linger_prev->linger_next = uc->linger_next;
  else
    ul->lingering = uc->linger_next;
  if (uc->linger_next != NULL)
    uc->linger_next->linger_prev = uc->linger_prev;
  uc->linger_prev = uc->linger_next = NULL;
  uc->lingering = false;
}

void weft__uring_zc_released(ur_channel *uc) {
  if (--uc->zc_pending > 0 || !uc->lingering)
    return;
  int fd = uc->linger_fd;
  linger_end(uc);
  weft__uring_cancel_and_close(uc->ul, fd);
}

void weft__uring_abort_lingering(ur_loop *ul) {
  while (ul->lingering != NULL) {
    ur_channel *uc = ul->lingering;
    int fd = uc->linger_fd;
    linger_end(uc);
    /* Reset: the kernel drops the write queue, and with it the buffers. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    weft__uring_cancel_and_close(ul, fd);
  }
}

/* Cancels every request on the socket, then closes it, both through the
 * ring; the requests' CQEs release their channel references. With
 * zero-copy sends in the kernel, the socket lingers instead. */
static void ur_close(weft_channel *ch) {
  ur_channel *uc = ur_of(ch);
  weft__uring_recv_drop_held(uc);
  if (!uc->has_fd || uc->fd < 0)
    return;
  if (uc->zc_pending > 0)
    linger_start(uc);
  else
    weft__uring_cancel_and_close(uc->ul, uc->fd);
  uc->fd = -1;
  uc->reading = false;
  uc->shutdown_pending = false;
}

static int ur_set_read(weft_channel *ch, bool on) {
  ur_channel *uc = ur_of(ch);
  if (!uc->has_fd || uc->fd < 0)
    return 0; /* applied at adopt / connect from the channel's option */
  uc->reading = on;
  if (on) {
    /* what arrived meanwhile first; the arm is a no-op while a recv (or
     * its cancel) is in the kernel */
    weft__uring_recv_resume(uc);
    return 0;
  }
  return weft__uring_recv_cancel(uc);
}

static int peer_or_local(const weft_channel *ch, char *buf, size_t len,
                         bool peer) {
  const ur_channel *uc = ur_of(ch);
  if (!uc->has_fd || uc->fd < 0)
    return WEFT_ENOTCONN;
  return weft_socket_address(uc->fd, peer, buf, len);
}

static int ur_remote_address(const weft_channel *ch, char *buf, size_t len) {
  return peer_or_local(ch, buf, len, true);
}

static int ur_local_address(const weft_channel *ch, char *buf, size_t len) {
  return peer_or_local(ch, buf, len, false);
}

const weft_transport_ops weft__transport_uring = {
    .name = "uring",
    .caps = WEFT_TRANSPORT_CAP_STREAM | WEFT_TRANSPORT_CAP_HALF_CLOSE |
            WEFT_TRANSPORT_CAP_SOCKET_OPTS | WEFT_TRANSPORT_CAP_TCP,
    .channel_priv_size = sizeof(ur_channel),
    .probe = weft__uring_probe,
    .config_keys = weft__uring_keys,
    .config_set = weft__uring_config_set,
    .loop_init = weft__uring_loop_init,
    .loop_fini = weft__uring_loop_fini,
    .listen = weft__uring_listen,
    .listen_close = weft__uring_listen_close,
    .listen_address = weft__uring_listen_address,
    .connect = ur_connect,
    .adopt = ur_adopt,
    .discard = ur_discard,
    .flush = weft__uring_flush,
    .close = ur_close,
    .shutdown_output = weft__uring_shutdown_output,
    .set_option = ur_set_option,
    .get_option = ur_get_option,
    .set_read = ur_set_read,
    .remote_address = ur_remote_address,
    .local_address = ur_local_address,
};
