/* SPDX-License-Identifier: Apache-2.0 */
/* transports/verbs/channel.c: how a channel ends, its small ops, and the
 * ops struct. Teardown releases the QP, the rdma_cm id and every buffer a
 * channel holds; close sends FIN behind the data already posted and
 * lingers until it completed; weft__verbs_vc_fail reports a QP or
 * connection failure to the core. Then auto-read and the addresses, and
 * weft__transport_verbs, which names the plugin's entry points from every
 * file of it.
 */
#include <stdarg.h>
#include <stdio.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

#include "transports/verbs/verbs_internal.h"

/* ---- teardown ---- */

static void vc_unlink(verbs_chan *vc) {
  verbs_loop *vl = vc->vl;
  if (vc->prev != NULL)
    vc->prev->next = vc->next;
  else if (vl->chans == vc)
    vl->chans = vc->next;
  if (vc->next != NULL)
    vc->next->prev = vc->prev;
  vc->prev = vc->next = NULL;
}

static void deliver_unlink(verbs_chan *vc) {
  if (!vc->in_deliver)
    return;
  for (verbs_chan **p = &vc->dev->deliver; *p != NULL; p = &(*p)->deliver_next)
    if (*p == vc) {
      *p = vc->deliver_next;
      break;
    }
  vc->in_deliver = false;
}

/* Releases the QP, the id and every buffer the channel holds. */
void weft__verbs_vc_teardown(verbs_chan *vc) {
  if (vc->state == VC_DONE)
    return;
  bool lingering = vc->state == VC_LINGER;
  vc->state = VC_DONE;
  weft_timer_stop(&vc->linger);
  if (vc->id != NULL) {
    if (vc->qp != NULL) {
      rdma_disconnect(vc->id);
      weft__verbs_hash_del(vc->dev, vc);
      rdma_destroy_qp(vc->id);
      vc->qp = NULL;
    }
    rdma_destroy_id(vc->id);
    vc->id = NULL;
    vc_unlink(vc);
  }
  /* The QP is gone: the device touches none of these buffers any more. */
  weft__verbs_retire_sends(vc, UINT64_MAX);
  while (vc->n_held > 0) {
    weft_buf_release(vc->held[vc->held_head]);
    vc->held_head = (vc->held_head + 1) % VERBS_CREDITS;
    vc->n_held--;
  }
  if (vc->dev != NULL) {
    deliver_unlink(vc);
    weft__verbs_group_leave(vc); /* what its handlers hold: orphans */
  }
  if (lingering)
    weft_channel_release(vc->ch); /* taken when the linger began */
}

static void linger_timeout(void *arg) { weft__verbs_vc_teardown(arg); }

/* The core closes the channel: send FIN behind the posted data when the
 * QP works, and tear down once it completed. */
static void verbs_close(weft_channel *ch) {
  verbs_chan *vc = vc_of(ch);
  if (vc->state == VC_DONE || vc->vl == NULL)
    return;
  if (vc->state == VC_ESTABLISHED && vc->grp != NULL)
    weft__verbs_group_refill(vc->grp); /* FIN may carry credits */
  if (vc->state == VC_ESTABLISHED && !vc->errored && sq_room(vc) &&
      weft__verbs_post_control(vc, VERBS_IMM_FIN) == 0) {
    vc->fin_seq = vc->sq_tail - 1;
    vc->state = VC_LINGER;
    weft_channel_retain(ch);
    weft_timer_start(&vc->linger, VERBS_LINGER_NS, 0, linger_timeout, vc);
    return;
  }
  weft__verbs_vc_teardown(vc);
}

/* Reports a failure on a live channel; the core's close tears it down. */
void weft__verbs_vc_fail(verbs_chan *vc, int err, const char *fmt, ...) {
  vc->errored = true;
  if (vc->state == VC_LINGER) {
    weft__verbs_vc_teardown(vc);
    return;
  }
  if (vc->ch == NULL || weft_channel_state_of(vc->ch) >= WEFT_CHANNEL_INACTIVE)
    return;
  char reason[200];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  /* The exception's handlers may close the channel and drop its last
   * reference (an rdma_cm event's caller holds none); the core reads it
   * after them. `vc` is inside the channel: not used after the release. */
  weft_channel *ch = weft_channel_retain(vc->ch);
  if (weft_channel_state_of(ch) == WEFT_CHANNEL_REGISTERED)
    weft_channel_connected(ch, err);
  else
    weft_channel_transport_closed(ch, err, reason);
  weft_channel_release(ch);
}

/* The peer broke the protocol: say so in the log too, as a handler may
 * take the exception without a word, and a connect failure carries none. */
void weft__verbs_vc_violation(verbs_chan *vc, const char *why) {
  char addr[128] = "?";
  if (vc->id != NULL)
    weft_sockaddr_format(rdma_get_peer_addr(vc->id), addr, sizeof addr);
  weft_log(WEFT_LOG_WARN, "%s; closing the channel with %s", why, addr);
  weft__verbs_vc_fail(vc, WEFT_EPROTO, "%s", why);
}

/* ---- options and addresses ---- */

static int verbs_set_read(weft_channel *ch, bool on) {
  verbs_chan *vc = vc_of(ch);
  vc->reading = on;
  if (on && vc->n_held > 0)
    weft__verbs_queue_deliver(vc); /* by the next poll, not in this call */
  return 0;
}

static int verbs_remote_address(const weft_channel *ch, char *buf, size_t len) {
  const verbs_chan *vc = vc_of(ch);
  if (vc->id == NULL)
    return WEFT_ENOTCONN;
  return weft_sockaddr_format(rdma_get_peer_addr(vc->id), buf, len);
}

static int verbs_local_address(const weft_channel *ch, char *buf, size_t len) {
  const verbs_chan *vc = vc_of(ch);
  if (vc->id == NULL)
    return WEFT_ENOTCONN;
  return weft_sockaddr_format(rdma_get_local_addr(vc->id), buf, len);
}

const weft_transport_ops weft__transport_verbs = {
    .name = "verbs",
    .caps = WEFT_TRANSPORT_CAP_REGISTERED_MEM,
    .channel_priv_size = sizeof(verbs_chan),
    .probe = weft__verbs_probe,
    .loop_init = weft__verbs_loop_init,
    .loop_fini = weft__verbs_loop_fini,
    .listen = weft__verbs_listen,
    .listen_close = weft__verbs_listen_close,
    .listen_address = weft__verbs_listen_address,
    .connect = weft__verbs_connect,
    .adopt = weft__verbs_adopt,
    .discard = weft__verbs_discard,
    .flush = weft__verbs_flush,
    .close = verbs_close,
    .set_read = verbs_set_read,
    .remote_address = verbs_remote_address,
    .local_address = verbs_local_address,
};
