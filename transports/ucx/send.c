/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/send.c: the UCX transport's send path: DATA messages
 * made of a channel's flushed bytes within the credit its peer granted
 * (small ones sent immediately from the stack, a large buffer in place,
 * smaller buffers merged into a pool buffer), the control messages (HELLO,
 * HELLO_ACK, REDIRECT, CREDIT, FIN, PING, PONG), the ops' flush, send
 * completions, where a failed send closes its channel. */

#include <assert.h>
#include <string.h>

#include <ucp/api/ucp.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/transport_plugin.h>

#include "transports/ucx/ucx_internal.h"

/* ---- sending ---- */

/* A send UCX ended with an error lost its bytes: the channel closes with
 * that error rather than go on with a hole in its stream (seen with UCX
 * 1.13: a send queued before the ep's wire-up ended can fail with "Invalid
 * am_short_iov length"; and with error_mode=none no error handler reports
 * a vanished peer). A failed ep (weft__ucx_ep_error), a peer that closed first
 * and a connect in progress are reported as before. */
static void send_failed(ucx_channel *uc, ucs_status_t status) {
  if (uc->w.fin_received && !uc->ep_failed && status != UCS_ERR_CANCELED)
    weft_log(WEFT_LOG_WARN,
             "ucx: a send after the peer's FIN failed: %s; the peer may "
             "miss bytes (the channel closes in order with the FIN)",
             ucs_status_string(status));
  if (uc->ep_failed || uc->w.fin_received || uc->connecting ||
      status == UCS_ERR_CANCELED || (uc->pend & PEND_ERROR))
    return;
  uc->err = weft__ucx_status_to_weft(status);
  uc->err_drain = uc->tl->drains;
  weft__ucx_pend_mark(uc, PEND_ERROR);
}

/* Also runs for a request loop_fini gave up on, if UCX ends it while the
 * worker is destroyed: `hold` is NULL then. */
static void send_done(void *request, ucs_status_t status, void *user_data) {
  ucx_send *s = user_data;
  ucx_channel *uc = s->op.epr != NULL ? s->op.epr->uc : NULL;
  if (uc != NULL) {
    if (status != UCS_OK)
      send_failed(uc, status);
    if (weft__ucx_ref_type(s->hdr.to) == UMSG_PONG)
      uc->pong_inflight = false;
  }
  weft__ucx_op_unlink(&s->op);
  if (s->hold != NULL)
    weft_buf_release(s->hold);
  weft__ucx_send_put(s);
  ucp_request_free(request);
}

/* With peer error handling every weft message carries its sender's ep
 * (UCP_AM_SEND_FLAG_REPLY): the receiver takes a message as its ep's
 * channel's and refuses one that names another slot (recv.c). With
 * error_mode = none only HELLO does (docs/transports/ucx.md, "Whose message
 * it is"): UCX 1.13 then resolves the ep id as a pointer, so a message
 * that arrives after the receiver closed that ep would read freed memory. */
static uint32_t send_flags(const ucx_loop *tl) {
  return tl->cfg.err_mode_none ? 0 : UCP_AM_SEND_FLAG_REPLY;
}

/* Sends one AM on the ep of record `r`: `s` (header and held data) is
 * freed when UCX is done with it. Returns 0 (done), 1 (queued in UCX:
 * send_done ends it) or an error (then `s` is freed here). */
static int am_send_on(ucx_loop *tl, ucx_epr *r, ucx_send *s, const void *data,
                      size_t len, uint32_t flags) {
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                               UCP_OP_ATTR_FIELD_USER_DATA |
                                               UCP_OP_ATTR_FIELD_FLAGS,
                               .cb.send = send_done,
                               .user_data = s,
                               .flags = flags | send_flags(tl)};
  ucs_status_ptr_t req = ucp_am_send_nbx(r->ep, UCX_AM_ID, &s->hdr,
                                         sizeof s->hdr, data, len, &param);
  if (req == NULL || UCS_PTR_IS_ERR(req)) {
    if (s->hold != NULL)
      weft_buf_release(s->hold);
    weft__ucx_send_put(s);
    return req == NULL ? 0 : weft__ucx_status_to_weft(UCS_PTR_STATUS(req));
  }
  weft__ucx_op_link(tl, r, &s->op, &s->hold, req);
  return 1; /* send_done frees it */
}

/* am_send_on on channel `uc`'s ep; 0 or an error. */
static int am_send(ucx_channel *uc, ucx_send *s, const void *data, size_t len,
                   uint32_t flags) {
  int rc = am_send_on(uc->tl, uc->epr, s, data, len, flags);
  return rc > 0 ? 0 : rc;
}

int weft__ucx_send_redirect(ucx_loop *tl, ucx_epr *r, uint32_t to, uint32_t id,
                            uint32_t index, uint32_t n, const uint32_t *ports) {
  size_t len = UCX_REDIRECT_HEAD + 4u * (size_t)n;
  ucx_send *s = weft__ucx_send_get(tl);
  if (s == NULL)
    return WEFT_ENOMEM;
  s->hold = weft_buf_alloc(weft_loop_pool(tl->loop), len);
  if (s->hold == NULL) {
    weft__ucx_send_put(s);
    return WEFT_ENOMEM;
  }
  uint32_t head[3] = {id, index, n};
  weft_buf_write_bytes(s->hold, head, sizeof head);
  weft_buf_write_bytes(s->hold, ports, 4u * (size_t)n);
  s->hdr =
      (ucx_hdr){.to = weft__ucx_slot_ref(UMSG_REDIRECT, weft__ucx_ref_id(to),
                                         weft__ucx_ref_gen(to)),
                .seq = weft__ucx_slot_ref(UCX_WIRE_VERSION, 0, 0)};
  int rc =
      am_send_on(tl, r, s, weft_buf_rptr(s->hold), len, UCP_AM_SEND_FLAG_EAGER);
  return rc > 0 ? 0 : rc;
}

int weft__ucx_send_ctrl(ucx_channel *uc, uint32_t type, uint32_t flags) {
  if (type == UMSG_PONG && uc->pong_inflight)
    return 0; /* one at a time: a flood of PINGs is not answered in kind */
  ucx_send *s = weft__ucx_send_get(uc->tl);
  if (s == NULL)
    return WEFT_ENOMEM;
  s->hdr =
      (ucx_hdr){.to = weft__ucx_slot_ref(type, uc->w.peer_id, uc->w.peer_gen)};
  const void *data = NULL;
  size_t len = 0;
  if (type == UMSG_HELLO || type == UMSG_HELLO_ACK) {
    s->hdr.seq = weft__ucx_slot_ref(UCX_WIRE_VERSION, uc->id, uc->gen);
    s->hdr.credit = uc->w.window; /* counted at weft__ucx_wire_init */
    s->ctrl_data[0] = uc->w.max_message;
    if (type == UMSG_HELLO)
      s->ctrl_data[1] =
          uc->dial != NULL && uc->dial->routed ? UCX_HELLO_ROUTED : 0;
    else
      s->ctrl_data[1] = uc->server_id;
    s->ctrl_data[2] = uc->send_seq; /* nothing was sent before */
    data = s->ctrl_data;
    len = sizeof s->ctrl_data;
  } else if (type == UMSG_CREDIT) {
    s->hdr.seq = uc->send_seq; /* not taken: says who sends it */
    s->hdr.credit = (uint32_t)uc->credit_owed;
    weft__ucx_wire_granted(&uc->w, s->hdr.credit);
    uc->credit_owed = 0;
  } else if (type == UMSG_FIN) {
    s->hdr.seq = uc->send_seq++;
  } else {
    s->hdr.seq = uc->send_seq; /* PING, PONG: not taken */
  }
  int rc =
      am_send_on(uc->tl, uc->epr, s, data, len, flags | UCP_AM_SEND_FLAG_EAGER);
  if (rc > 0 && type == UMSG_PONG)
    uc->pong_inflight = true;
  return rc > 0 ? 0 : rc;
}

/* The first flushed buffer with bytes left, if it starts at `base`: it can
 * be sent in place. */
static weft_buf *first_buf_at(weft_channel *ch, const void *base) {
  size_t n = weft_outbound_count(ch);
  for (size_t i = 0; i < n; i++) {
    weft_buf *b = weft_outbound_buf(ch, i);
    if (weft_buf_readable(b) == 0)
      continue;
    return weft_buf_rptr(b) == base ? b : NULL;
  }
  return NULL;
}

/* The header of the next DATA message: it carries the credit owed. */
static ucx_hdr data_hdr(const ucx_channel *uc) {
  return (ucx_hdr){
      .to = weft__ucx_slot_ref(UMSG_DATA, uc->w.peer_id, uc->w.peer_gen),
      .seq = uc->send_seq,
      .credit = (uint32_t)uc->credit_owed};
}

/* Accounts for a DATA message of `len` bytes sent with header `hdr`
 * (data_hdr's). */
static void data_sent(ucx_channel *uc, size_t len, const ucx_hdr *hdr) {
  uc->send_seq++;
  uc->credit_owed -= hdr->credit;
  weft__ucx_wire_sent_data(&uc->w, len, hdr->credit);
}

/* Merges the first `len` bytes of `iov` into `dst`. */
static void iov_gather(void *dst, const struct iovec *iov, int n, size_t len) {
  size_t off = 0;
  for (int i = 0; i < n && off < len; i++) {
    size_t k = iov[i].iov_len < len - off ? iov[i].iov_len : len - off;
    memcpy((char *)dst + off, iov[i].iov_base, k);
    off += k;
  }
}

/* Sends `len` flushed bytes as one DATA message only if UCX can complete
 * it before returning (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL: UCX 1.13 then
 * tries its short protocol alone, which copies the bytes out): header and
 * bytes then live on the stack, no send context or pool buffer is taken,
 * and a single buffer is read in place. Returns `len`, an error, or
 * WEFT_EAGAIN when UCX would need a request (a full FIFO, sends pending,
 * more than the lane's short limit), and send_one takes the general path. */
static ssize_t send_imm(ucx_channel *uc, const struct iovec *iov, int n,
                        size_t len) {
  uint8_t merged[UCX_IMM_MAX];
  const void *data = iov[0].iov_base;
  if (iov[0].iov_len < len) {
    iov_gather(merged, iov, n, len);
    data = merged;
  }
  ucx_hdr hdr = data_hdr(uc);
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS |
                                               UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL,
                               .flags = send_flags(uc->tl)};
  ucs_status_ptr_t req =
      ucp_am_send_nbx(uc->ep, UCX_AM_ID, &hdr, sizeof hdr, data, len, &param);
  if (UCS_PTR_STATUS(req) == UCS_ERR_NO_RESOURCE)
    return WEFT_EAGAIN;
  if (UCS_PTR_IS_ERR(req))
    return weft__ucx_status_to_weft(UCS_PTR_STATUS(req));
  assert(req == NULL); /* FORCE_IMM_CMPL: done, or an error */
  data_sent(uc, len, &hdr);
  return (ssize_t)len;
}

/* How many of the `len` bytes one message takes: a buffer of `whole`
 * bytes or more (max_message: a message by itself) goes alone (in place
 * from UCX_ZCOPY_MIN on, so with any max_message of 16 KiB or more);
 * smaller buffers are merged up to the next such one. Merging a whole one
 * would copy it: once a credit limit split one buffer, every later message
 * straddled two and copied max_message bytes (a 64 KiB stream over shared
 * memory spent 18% of its time in that memcpy and ran at 0.4x of the
 * in-place rate). Smaller buffers are still merged: over UCX's tcp lanes
 * 32 KiB buffers streamed at 0.75x when each went alone (weft-bench -p
 * stream, 5 runs), while over shared memory they gained. */
static size_t merge_len(const struct iovec *iov, int n, size_t len,
                        size_t whole) {
  size_t m = iov[0].iov_len;
  if (m < whole)
    for (int i = 1; i < n && iov[i].iov_len < whole && m < len; i++)
      m += iov[i].iov_len;
  return len < m ? len : m;
}

/* The largest DATA message either side takes. */
static size_t message_max(const ucx_channel *uc) {
  return uc->w.max_message < uc->w.peer_max_message ? uc->w.max_message
                                                    : uc->w.peer_max_message;
}

/* Builds and sends one DATA message of up to min(credit - UCX_MSG_COST,
 * max_message of either side) flushed bytes. Returns bytes handed to UCX
 * (0: nothing to send) or an error. */
static ssize_t send_one(ucx_channel *uc) {
  struct iovec iov[UCX_MAX_IOV];
  size_t bytes = 0;
  int n = weft_outbound_iov(uc->ch, iov, UCX_MAX_IOV, &bytes);
  size_t len = weft__ucx_wire_sendable(&uc->w);
  if (len > bytes)
    len = bytes;
  if (n == 0 || len == 0)
    return 0;
  len = merge_len(iov, n, len, message_max(uc));
  if (len <= UCX_IMM_MAX) {
    ssize_t sent = send_imm(uc, iov, n, len);
    if (sent != WEFT_EAGAIN)
      return sent;
  }
  ucx_send *s = weft__ucx_send_get(uc->tl);
  if (s == NULL)
    return WEFT_ENOMEM;
  const void *data;
  weft_buf *in_place = NULL;
  if (len >= UCX_ZCOPY_MIN && iov[0].iov_len >= len)
    in_place = first_buf_at(uc->ch, iov[0].iov_base);
  if (in_place != NULL) {
    s->hold = weft_buf_retain(in_place);
    data = iov[0].iov_base;
  } else {
    s->hold = weft_buf_alloc(weft_loop_pool(weft_channel_loop(uc->ch)), len);
    if (s->hold == NULL) {
      weft__ucx_send_put(s);
      return WEFT_ENOMEM;
    }
    iov_gather(weft_buf_wptr(s->hold), iov, n, len);
    s->hold->writer_index += len;
    data = weft_buf_rptr(s->hold);
  }
  s->hdr = data_hdr(uc);
  data_sent(uc, len, &s->hdr);
  int err = am_send(uc, s, data, len, 0);
  return err < 0 ? err : (ssize_t)len;
}

/* Sends flushed bytes while credit lasts. Promise callbacks (inside
 * weft_outbound_consumed) may write, flush or close: a nested flush returns
 * at once (this loop picks its bytes up), a close ends the loop. The caller
 * holds a channel reference. */
int weft__ucx_flush_now(ucx_channel *uc) {
  if (uc->in_flush)
    return 0;
  uc->in_flush = true;
  int err = 0;
  for (int i = 0; i < UCX_SENDS_PER_FLUSH; i++) {
    if (!weft__ucx_channel_active(uc) || !uc->w.peer_known || uc->ep_failed ||
        weft_outbound_is_empty(uc->ch))
      break;
    ssize_t sent = send_one(uc);
    if (sent < 0) {
      err = (int)sent;
      break;
    }
    weft_outbound_consumed(uc->ch, (size_t)sent);
    if (sent == 0 && weft__ucx_wire_sendable(&uc->w) == 0)
      break; /* waiting for credit; empty buffers were completed above */
  }
  uc->in_flush = false;
  if (err == 0 && weft__ucx_channel_active(uc) &&
      !weft_outbound_is_empty(uc->ch) && weft__ucx_wire_sendable(&uc->w) > 0)
    weft__ucx_pend_mark(uc,
                        PEND_FLUSH); /* the batch limit hit: go on next poll */
  return err;
}

int weft__ucx_flush(weft_channel *ch) {
  ucx_channel *uc = weft__ucx_of(ch);
  assert(!uc->has_slot || !uc->tl->in_progress);
  weft_channel_retain(ch); /* a promise may close and free the channel */
  int err = weft__ucx_flush_now(uc);
  weft_channel_release(ch);
  return err;
}

/* Grants delivered bytes back once a quarter window is owed (DATA carries
 * it for free when there is data). */
void weft__ucx_return_credit(ucx_channel *uc) {
  if (uc->credit_owed < uc->w.window / 4 || !weft__ucx_channel_active(uc) ||
      !uc->w.peer_known || uc->ep_failed)
    return;
  int err = weft__ucx_send_ctrl(uc, UMSG_CREDIT, 0);
  if (err < 0) {
    uc->err = err;
    weft__ucx_pend_mark(uc, PEND_ERROR);
  }
}
