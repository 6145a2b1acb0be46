/* SPDX-License-Identifier: Apache-2.0 */
/* transports/verbs/connect.c: how connections come to be, driven by the
 * rdma_cm events of the loop's event channel. Connect resolves the address
 * and the route, creates the QP (on the device rdma_cm chose, device.c) and
 * sends the handshake; the handshake's private data carries each side's
 * credits and receive size; ESTABLISHED makes the channel active and
 * DISCONNECTED ends it. A listener hands a connect request to the core as
 * a pending handle, which adopt accepts on the channel's loop. The design
 * is in verbs_internal.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/source.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

#include "transports/verbs/verbs_internal.h"

/* ---- conversions at the edge ---- */

/* rdma_cm calls return -1 and set errno; some providers leave errno 0. */
static int cm_err(void) { return errno > 0 ? -errno : WEFT_EIO; }

/* An accepted connection on its way to its loop (weft_listener_accepted). */
typedef struct verbs_pending {
  struct rdma_cm_id *id;
  verbs_peer peer; /* its hello, checked */
} verbs_pending;

/* ---- connection setup ---- */

static struct rdma_conn_param conn_param(verbs_hello *h) {
  weft__verbs_hello_fill(h);
  return (struct rdma_conn_param){.private_data = h,
                                  .private_data_len = sizeof *h,
                                  .retry_count = 7,
                                  /* credits keep RNR away; retry forever
                                   * if it happens (the counters show it) */
                                  .rnr_retry_count = 7};
}

/* Creates the channel's QP on the device rdma_cm chose, in a group with
 * room for its share (group.c). */
static int vc_setup_qp(verbs_chan *vc) {
  verbs_dev *d;
  int err = weft__verbs_dev_get(vc->vl, vc->id->verbs, &d);
  if (err < 0)
    return err;
  verbs_group *g;
  err = weft__verbs_group_join(d, &g);
  if (err < 0)
    return err;
  vc->dev = d;
  vc->grp = g;
  struct ibv_qp_init_attr qa = {.send_cq = g->cq,
                                .recv_cq = g->cq,
                                .srq = g->srq,
                                .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = VERBS_SQ_DEPTH,
                                        .max_send_sge = (uint32_t)d->max_sge,
                                        .max_inline_data = VERBS_INLINE_WANT}};
  if (rdma_create_qp(vc->id, d->pd, &qa) != 0) {
    qa.cap.max_inline_data = 0; /* a device without inline sends */
    if (rdma_create_qp(vc->id, d->pd, &qa) != 0) {
      err = cm_err();
      weft__verbs_group_leave(vc);
      return err;
    }
  }
  d->max_inline = qa.cap.max_inline_data;
  vc->qp = vc->id->qp;
  vc->qp_num = vc->qp->qp_num;
  weft__verbs_hash_add(d, vc);
  vc->flow.granted = VERBS_CREDITS;
  return 0;
}

static void vc_link(verbs_chan *vc) {
  verbs_loop *vl = vc->vl;
  vc->next = vl->chans;
  if (vl->chans != NULL)
    vl->chans->prev = vc;
  vl->chans = vc;
}

static verbs_loop *loop_state_of(weft_loop *loop, int *err) {
  return weft_transport_loop_state(&weft__transport_verbs, loop, err);
}

/* The verbs state of `loop` and the first address of `ep` (rdma_cm takes
 * one; `passive` to listen), or NULL with `*err` set. */
static verbs_loop *loop_and_address(weft_loop *loop, const weft_endpoint *ep,
                                    bool passive, struct sockaddr_storage *addr,
                                    int *err) {
  verbs_loop *vl = loop_state_of(loop, err);
  if (vl != NULL &&
      (*err = weft_endpoint_resolve_first(ep, passive, addr, NULL)) < 0)
    return NULL;
  return vl;
}

static void vc_init(verbs_chan *vc, weft_channel *ch, verbs_loop *vl) {
  vc->kind = KIND_CHANNEL;
  vc->ch = ch;
  vc->vl = vl;
  vc->reading = weft_channel_auto_read(ch);
  weft_timer_init(vl->loop, &vc->linger);
}

int weft__verbs_connect(weft_channel *ch, const weft_endpoint *ep) {
  verbs_chan *vc = vc_of(ch);
  int err = 0;
  struct sockaddr_storage dst;
  verbs_loop *vl =
      loop_and_address(weft_channel_loop(ch), ep, false, &dst, &err);
  if (vl == NULL)
    return err;
  vc_init(vc, ch, vl);
  if (rdma_create_id(vl->ec, &vc->id, vc, RDMA_PS_TCP) != 0)
    return cm_err();
  vc_link(vc);
  vc->state = VC_RESOLVING;
  if (rdma_resolve_addr(vc->id, NULL, (struct sockaddr *)&dst,
                        VERBS_RESOLVE_MS) != 0) {
    err = cm_err();
    weft__verbs_vc_teardown(vc);
    return err;
  }
  return 0;
}

static void on_route_resolved(verbs_chan *vc) {
  int err = vc_setup_qp(vc);
  if (err < 0) {
    weft__verbs_vc_fail(vc, err, "verbs: QP setup failed");
    return;
  }
  verbs_hello h;
  struct rdma_conn_param p = conn_param(&h);
  if (rdma_connect(vc->id, &p) != 0) {
    err = cm_err();
    weft__verbs_vc_fail(vc, err, "verbs: rdma_connect failed");
    return;
  }
  vc->state = VC_CONNECTING;
}

/* The active side learns the peer's credits and receive size here (the
 * REP's hello); the passive side learnt them from the REQ. */
static void on_established(verbs_chan *vc, const void *pdata, uint8_t plen) {
  if (vc->state != VC_CONNECTING &&
      !(vc->passive && vc->state == VC_ESTABLISHED))
    return; /* closing, or established twice: nothing to start */
  if (!vc->passive) {
    verbs_peer peer;
    char why[160];
    if (weft__verbs_hello_parse(pdata, plen, &peer, why, sizeof why) < 0) {
      weft__verbs_vc_violation(vc, why);
      return;
    }
    vc->flow.window = peer.credits;
    vc->flow.credits = peer.credits; /* none spent or returned before */
    vc->peer_recv_size = peer.recv_size;
  }
  vc->state = VC_ESTABLISHED;
  weft_channel *ch = vc->ch;
  weft_channel_retain(ch);
  if (!vc->passive)
    weft_channel_connected(ch, 0);
  if (vc_active(vc)) {
    weft__verbs_deliver_held(vc);
    int err = weft__verbs_send_pending(vc);
    if (err < 0)
      weft__verbs_vc_fail(vc, err, "verbs: send: %s", weft_strerror(err));
  }
  weft_channel_release(ch);
}

/* The peer disconnected: orderly if its FIN came first. What the CQs hold
 * is taken in, not delivered: the messages before the FIN go up from the
 * next polls on, within the read budget, then the EOF. Without a FIN the
 * channel fails at once, and the messages it holds are dropped (as they
 * always were while it did not read). */
static void on_disconnected(verbs_chan *vc) {
  weft_channel *ch = vc->ch;
  weft_channel_retain(ch);
  if (vc->dev != NULL && vc->state != VC_DONE)
    weft__verbs_dev_take_in(vc->dev); /* the FIN may wait in the CQ */
  if (vc->state == VC_LINGER) {
    weft__verbs_vc_teardown(vc);
  } else if (vc->state != VC_DONE && !vc->flow.fin) {
    weft__verbs_vc_fail(vc, WEFT_ECONNRESET,
                        "verbs: the peer disconnected without closing (rdma_cm "
                        "DISCONNECTED)");
  }
  weft_channel_release(ch);
}

static int event_error(const struct rdma_cm_event *ev) {
  switch (ev->event) {
  case RDMA_CM_EVENT_REJECTED:
    return WEFT_ECONNREFUSED;
  case RDMA_CM_EVENT_UNREACHABLE:
    return ev->status == -ETIMEDOUT ? WEFT_ETIMEDOUT : WEFT_EHOSTUNREACH;
  case RDMA_CM_EVENT_ADDR_ERROR:
    return WEFT_EADDRNOTAVAIL;
  case RDMA_CM_EVENT_ROUTE_ERROR:
    return WEFT_ENETUNREACH;
  case RDMA_CM_EVENT_DEVICE_REMOVAL:
    return WEFT_ENODEV;
  default:
    return ev->status < 0 ? ev->status : WEFT_ECONNABORTED;
  }
}

static void channel_event(verbs_chan *vc, const struct rdma_cm_event *ev,
                          const void *pdata, uint8_t plen) {
  switch (ev->event) {
  case RDMA_CM_EVENT_ADDR_RESOLVED:
    if (rdma_resolve_route(vc->id, VERBS_RESOLVE_MS) != 0)
      weft__verbs_vc_fail(vc, cm_err(), "verbs: rdma_resolve_route failed");
    break;
  case RDMA_CM_EVENT_ROUTE_RESOLVED:
    on_route_resolved(vc);
    break;
  case RDMA_CM_EVENT_ESTABLISHED:
    on_established(vc, pdata, plen);
    break;
  case RDMA_CM_EVENT_DISCONNECTED:
  case RDMA_CM_EVENT_TIMEWAIT_EXIT:
    on_disconnected(vc);
    break;
  case RDMA_CM_EVENT_ADDR_ERROR:
  case RDMA_CM_EVENT_ROUTE_ERROR:
  case RDMA_CM_EVENT_CONNECT_ERROR:
  case RDMA_CM_EVENT_UNREACHABLE:
  case RDMA_CM_EVENT_REJECTED:
  case RDMA_CM_EVENT_DEVICE_REMOVAL:
    weft__verbs_vc_fail(vc, event_error(ev), "verbs: %s (status %d)",
                        rdma_event_str(ev->event), ev->status);
    break;
  default:
    break;
  }
}

/* Refuses a connect request, saying why (a peer whose hello is not weft's
 * is worth a line: it may be a misconfigured client or an attack). */
static void reject(struct rdma_cm_id *id, const char *why) {
  char addr[128] = "?";
  weft_sockaddr_format(rdma_get_peer_addr(id), addr, sizeof addr);
  weft_log(WEFT_LOG_WARN, "verbs: rejected a connection request from %s: %s",
           addr, why);
  rdma_reject(id, NULL, 0);
  rdma_destroy_id(id);
}

static void listener_event(verbs_listener *vls, const struct rdma_cm_event *ev,
                           const void *pdata, uint8_t plen) {
  if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
    return;
  verbs_peer peer;
  char why[160];
  if (weft__verbs_hello_parse(pdata, plen, &peer, why, sizeof why) < 0) {
    reject(ev->id, why);
    return;
  }
  verbs_pending *p = malloc(sizeof *p);
  if (p == NULL) {
    reject(ev->id, "no memory");
    return;
  }
  *p = (verbs_pending){.id = ev->id, .peer = peer};
  weft_listener_accepted(vls->l, (intptr_t)p);
}

/* rdma_cm events, taken off the non-blocking event channel. Each event is
 * copied and acknowledged before it is handled: rdma_destroy_id waits for
 * the acknowledgement of every event of its id. */
int weft__verbs_cm_poll(weft_source *src, int budget) {
  verbs_loop *vl = src->data;
  int n = 0;
  struct rdma_cm_event *e;
  while (n < budget && rdma_get_cm_event(vl->ec, &e) == 0) {
    struct rdma_cm_event ev = *e;
    uint8_t pdata[256];
    uint8_t plen = e->param.conn.private_data_len;
    if (e->param.conn.private_data == NULL)
      plen = 0;
    memcpy(pdata,
           e->param.conn.private_data != NULL ? e->param.conn.private_data
                                              : pdata,
           plen);
    rdma_ack_cm_event(e);
    n++;
    void *ctx = ev.event == RDMA_CM_EVENT_CONNECT_REQUEST
                    ? ev.listen_id->context
                    : ev.id->context;
    if (ctx == NULL)
      continue;
    if (*(enum verbs_kind *)ctx == KIND_LISTENER)
      listener_event(ctx, &ev, pdata, plen);
    else
      channel_event(ctx, &ev, pdata, plen);
  }
  return n;
}

/* ---- accept ---- */

void weft__verbs_discard(intptr_t handle) {
  verbs_pending *p = (verbs_pending *)handle;
  rdma_reject(p->id, NULL, 0);
  rdma_destroy_id(p->id);
  free(p);
}

int weft__verbs_adopt(weft_channel *ch, intptr_t handle) {
  verbs_pending *p = (verbs_pending *)handle;
  verbs_chan *vc = vc_of(ch);
  int err = 0;
  verbs_loop *vl = loop_state_of(weft_channel_loop(ch), &err);
  if (vl == NULL) {
    weft__verbs_discard(handle);
    return err;
  }
  vc_init(vc, ch, vl);
  vc->passive = true;
  vc->flow.window = p->peer.credits;
  vc->flow.credits = p->peer.credits;
  vc->peer_recv_size = p->peer.recv_size;
  /* Events of this id now come to this loop. */
  p->id->context = vc;
  if (p->id->channel != vl->ec && rdma_migrate_id(p->id, vl->ec) != 0) {
    err = cm_err();
    weft__verbs_discard(handle);
    return err;
  }
  vc->id = p->id;
  free(p);
  vc_link(vc);
  err = vc_setup_qp(vc);
  if (err < 0) {
    rdma_reject(vc->id, NULL, 0);
    weft__verbs_vc_teardown(vc);
    return err;
  }
  verbs_hello h;
  struct rdma_conn_param cp = conn_param(&h);
  if (rdma_accept(vc->id, &cp) != 0) {
    err = cm_err();
    weft__verbs_vc_teardown(vc);
    return err;
  }
  vc->state = VC_CONNECTING;
  return 0;
}

/* ---- listeners ---- */

int weft__verbs_listen(weft_listener *l, const weft_endpoint *ep, int backlog) {
  int err = 0;
  struct sockaddr_storage addr;
  verbs_loop *vl =
      loop_and_address(weft_listener_loop(l), ep, true, &addr, &err);
  if (vl == NULL)
    return err;
  verbs_listener *vls = calloc(1, sizeof *vls);
  if (vls == NULL)
    return WEFT_ENOMEM;
  *vls = (verbs_listener){.kind = KIND_LISTENER, .l = l, .vl = vl};
  if (rdma_create_id(vl->ec, &vls->id, vls, RDMA_PS_TCP) != 0) {
    err = cm_err();
    goto failed_id;
  }
  if (rdma_bind_addr(vls->id, (struct sockaddr *)&addr) != 0 ||
      rdma_listen(vls->id, backlog) != 0) {
    err = cm_err();
    goto failed_bind;
  }
  vls->next = vl->listeners;
  if (vl->listeners != NULL)
    vl->listeners->prev = vls;
  vl->listeners = vls;
  weft_listener_set_priv(l, vls);
  return 0;

failed_bind:
  rdma_destroy_id(vls->id);
failed_id:
  free(vls);
  return err;
}

void weft__verbs_listener_free(verbs_listener *vls) {
  verbs_loop *vl = vls->vl;
  rdma_destroy_id(vls->id);
  if (vls->prev != NULL)
    vls->prev->next = vls->next;
  else
    vl->listeners = vls->next;
  if (vls->next != NULL)
    vls->next->prev = vls->prev;
  free(vls);
}

void weft__verbs_listen_close(weft_listener *l) {
  verbs_listener *vls = weft_listener_priv(l);
  if (vls == NULL)
    return;
  weft_listener_set_priv(l, NULL);
  weft__verbs_listener_free(vls);
}

int weft__verbs_listen_address(weft_listener *l, char *buf, size_t len) {
  verbs_listener *vls = weft_listener_priv(l);
  if (vls == NULL)
    return WEFT_ECLOSED;
  return weft_sockaddr_format(rdma_get_local_addr(vls->id), buf, len);
}
