/* SPDX-License-Identifier: Apache-2.0 */
/* transports/uring/send.c: sending. At most one send in flight per
 * channel (send, sendmsg, or SENDMSG_ZC from send_zc_min bytes) gathers the
 * flushed buffers and holds them until the kernel no longer reads them; a
 * shutdown of the output waits for the last queued byte. Loop thread.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <liburing.h>

#include <weft/buf.h>
#include <weft/error.h>
#include <weft/transport_plugin.h>

#include "transports/uring/uring_internal.h"

/* ---- sending ---- */

/* Half-closes now, with shutdown(2): every queued byte is in the socket's
 * write queue (no send in flight), so the FIN goes after them. Not through
 * the ring: IORING_OP_SHUTDOWN always runs in io-wq, which looks its fd up
 * by number when a worker gets to it, and the close's cancel by fd does not
 * catch it there. On a loaded machine the close then ran first, and the
 * half-close landed on the next socket given that number: a connection
 * just accepted saw its FIN before its first byte (test_kv_uring's
 * protected-mode case got EOF, not DENIED; test_uring_half_close makes
 * that order certain). A TCP shutdown does not block. */
static void shutdown_now(ur_channel *uc) {
  uc->shutdown_pending = false;
  if (uc->output_shut || uc->fd < 0)
    return;
  uc->output_shut = true;
  shutdown(uc->fd, SHUT_WR);
}

/* A send context of class `cls` from the loop's cache, malloc'ed (iov and
 * bufs after the struct) when that cache is empty. */
static ur_send *send_get(ur_loop *ul, int cls) {
  ur_send *s = ul->send_free[cls];
  if (s != NULL) {
    ul->send_free[cls] = s->next_free;
    ul->send_free_n[cls]--;
    return s;
  }
  int cap = ur_send_cap(cls);
  s = malloc(sizeof *s + (size_t)cap * (sizeof *s->iov + sizeof *s->bufs));
  if (s == NULL)
    return NULL;
  s->cls = cls;
  s->iov = (struct iovec *)(s + 1);
  s->bufs = (weft_buf **)(s->iov + cap);
  return s;
}

/* Releases the buffers the kernel no longer reads and caches the context,
 * up to its class's cache size. */
static void send_put(ur_loop *ul, ur_send *s) {
  for (int i = 0; i < s->n; i++)
    weft_buf_release(s->bufs[i]);
  unsigned max = s->cls == UR_SEND_SMALL ? UR_SEND_CACHE_SMALL : UR_SEND_CACHE;
  if (ul->send_free_n[s->cls] >= max) {
    free(s);
    return;
  }
  s->next_free = ul->send_free[s->cls];
  ul->send_free[s->cls] = s;
  ul->send_free_n[s->cls]++;
}

/* Collects up to ur_send_cap(s->cls) flushed buffers into `s`, retaining
 * each. */
static size_t gather(ur_channel *uc, ur_send *s) {
  size_t count = weft_outbound_count(uc->ch), total = 0;
  int n = 0;
  int cap = ur_send_cap(s->cls);
  for (size_t i = 0; i < count && n < cap; i++) {
    weft_buf *b = weft_outbound_buf(uc->ch, i);
    size_t len = weft_buf_readable(b);
    if (len == 0)
      continue; /* completed by the next consume */
    s->iov[n] = (struct iovec){.iov_base = weft_buf_rptr(b), .iov_len = len};
    s->bufs[n++] = weft_buf_retain(b);
    total += len;
  }
  s->n = n;
  return total;
}

/* Queues the SQE of `s`: SENDMSG_ZC, or send for one buffer, else sendmsg. */
static void send_prep(ur_channel *uc, ur_send *s, struct io_uring_sqe *sqe,
                      bool zc) {
  s->op.kind = zc ? UR_OP_SEND_ZC : UR_OP_SEND;
  s->ch = uc->ch;
  s->pinned = 0;
  s->msg = (struct msghdr){.msg_iov = s->iov, .msg_iovlen = (size_t)s->n};
  if (zc) {
    io_uring_prep_sendmsg_zc(sqe, uc->fd, &s->msg, MSG_NOSIGNAL);
    sqe->ioprio |= IORING_SEND_ZC_REPORT_USAGE;
    uc->ul->stats.zc_sends++;
    uc->zc_pending++; /* until the notification, or a CQE that has none */
  } else if (s->n == 1) {
    io_uring_prep_send(sqe, uc->fd, s->iov[0].iov_base, s->iov[0].iov_len,
                       MSG_NOSIGNAL);
    uc->ul->stats.sends++;
  } else {
    io_uring_prep_sendmsg(sqe, uc->fd, &s->msg, MSG_NOSIGNAL);
    uc->ul->stats.sends++;
  }
  io_uring_sqe_set_data(sqe, s);
}

/* Starts the channel's one send, if none is in flight and bytes wait. */
static void send_start(ur_channel *uc) {
  if (uc->send_inflight || uc->in_consume || !channel_open(uc))
    return;
  if (weft_outbound_is_empty(uc->ch)) {
    if (uc->shutdown_pending)
      shutdown_now(uc);
    return;
  }
  ur_loop *ul = uc->ul;
  /* The queue's entry count bounds the buffers gathered (empty ones are
   * skipped): a queue this short fits a small context. */
  ur_send *s =
      send_get(ul, weft_outbound_count(uc->ch) <= UR_SMALL_IOV ? UR_SEND_SMALL
                                                               : UR_SEND_FULL);
  if (s == NULL) {
    weft__uring_channel_failed(uc, "write", WEFT_ENOMEM);
    return;
  }
  size_t bytes = gather(uc, s);
  if (s->n == 0) {
    /* Only empty buffers: complete them. */
    send_put(ul, s);
    uc->in_consume = true;
    weft_outbound_consumed(uc->ch, 0);
    uc->in_consume = false;
    send_start(uc);
    return;
  }
  struct io_uring_sqe *sqe = weft__uring_get_sqe(ul);
  if (sqe == NULL) {
    send_put(ul, s);
    weft__uring_channel_failed(uc, "write", WEFT_EIO);
    return;
  }
  bool zc = bytes >= ul->send_zc_min && ul->send_zc_min > 0 &&
            weft__uring_probed_send_zc && !uc->zc_off;
  send_prep(uc, s, sqe, zc);
  uc->send_inflight = true;
  request_started(uc);
}

/* The bytes of the send in flight left (or it failed). */
static void send_finished(ur_channel *uc, int32_t res) {
  uc->send_inflight = false;
  if (!channel_open(uc))
    return;
  if (res < 0) {
    weft__uring_channel_failed(uc, "write", res);
    return;
  }
  uc->in_consume = true; /* promises may flush: they must not send twice */
  weft_outbound_consumed(uc->ch, (size_t)res);
  uc->in_consume = false;
  send_start(uc);
}

void weft__uring_send_done(ur_loop *ul, ur_send *s, int32_t res) {
  weft_channel *ch = s->ch;
  send_put(ul, s);
  send_finished(ur_of(ch), res);
  request_ended(ul, ch);
}

/* SENDMSG_ZC: first the bytes (F_MORE when a notification follows), then
 * the notification, after which the kernel no longer reads the buffers.
 * Between the two the bytes sent are pinned (weft_outbound_pinned): they
 * left the outbound queue but still count against the channel's
 * watermarks and output limit. */
void weft__uring_send_zc_done(ur_loop *ul, ur_send *s, int32_t res,
                              uint32_t flags) {
  weft_channel *ch = s->ch;
  ur_channel *uc = ur_of(ch);
  if (flags & IORING_CQE_F_NOTIF) {
    if ((uint32_t)res & IORING_NOTIF_USAGE_ZC_COPIED) {
      uc->zc_off = true; /* the kernel copied anyway: plain sends from now */
      ul->stats.zc_copied++;
    }
  } else {
    s->pinned = 0;
    if ((flags & IORING_CQE_F_MORE) && res > 0) {
      /* Sent, but the buffers stay pinned until the notification: they
       * count as pending, or a peer that never reads would pin up to the
       * socket's send buffer past the watermarks and the output limit. */
      s->pinned = (size_t)res;
      weft_outbound_pinned(ch, s->pinned);
    }
    send_finished(uc, res);
    if (flags & IORING_CQE_F_MORE)
      return; /* the notification holds the buffers */
  }
  size_t pinned = s->pinned;
  send_put(ul, s);
  if (pinned > 0)
    weft_outbound_unpinned(ch, pinned); /* may run handlers: after put */
  weft__uring_zc_released(uc);
  request_ended(ul, ch);
}

int weft__uring_flush(weft_channel *ch) {
  ur_channel *uc = ur_of(ch);
  send_start(uc); /* a send in flight picks the rest up when it ends */
  return 0;
}

int weft__uring_shutdown_output(weft_channel *ch) {
  ur_channel *uc = ur_of(ch);
  if (!uc->has_fd || uc->fd < 0)
    return WEFT_ENOTCONN;
  if (uc->send_inflight || !weft_outbound_is_empty(ch)) {
    uc->shutdown_pending = true; /* after the last queued byte */
    return 0;
  }
  shutdown_now(uc);
  return 0;
}
