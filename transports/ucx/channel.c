/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/channel.c: a UCX channel's lifecycle: its slot and ep at
 * connect (to the server's address, or to the listener a route names) or
 * adopt, and again at a REDIRECT or a stale route; its close, which sends
 * FIN and closes the ep at once or leaves it to linger until the requests
 * in flight on it ended; the loop's tick (keepalive, lingering eps, held
 * connections); its options and addresses; and the plugin's probe and ops
 * table, weft__transport_ucx. */

#include <assert.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include <ucp/api/ucp.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/transport_plugin.h>

#include "transports/ucx/ucx.h"
#include "transports/ucx/ucx_internal.h"

/* ---- closing eps ---- */

uint64_t weft__ucx_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Closes a channel's ep (unless it is kept) and frees its record; requests
 * still in flight on it (a lingering ep past its deadline) forget it.
 * Without peer error handling an ep whose peer left first is kept: UCX
 * 1.13 refuses to close it by force, and its flush fails noisily ("error
 * during flush: Endpoint timeout" for every lane); ucp_worker_destroy
 * releases it. */
static void ep_close(ucx_loop *tl, ucx_epr *r) {
  weft__ucx_ep_unindex(tl, r); /* nothing it brings from now on is ours */
  if (r->n_ops > 0)
    for (ucx_op *op = tl->ops; op != NULL; op = op->next)
      if (op->epr == r)
        op->epr = NULL;
  if (r->keep || (tl->cfg.err_mode_none && r->peer_left)) {
    free(r);
    return;
  }
  ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = r->force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
  ucs_status_ptr_t req = ucp_ep_close_nbx(r->ep, &param);
  free(r);
  if (req == NULL)
    return;
  if (UCS_PTR_IS_ERR(req)) {
    /* UCX released the ep anyway. */
    weft_log(WEFT_LOG_DEBUG, "ucx: ucp_ep_close_nbx: %s",
             ucs_status_string(UCS_PTR_STATUS(req)));
    return;
  }
  if (tl->n_closing == tl->cap_closing) {
    size_t cap = tl->cap_closing ? tl->cap_closing * 2 : 16;
    void **c = realloc(tl->closing, cap * sizeof *c);
    if (c == NULL) {
      ucp_request_free(req); /* UCX finishes the close on its own */
      return;
    }
    tl->closing = c;
    tl->cap_closing = cap;
  }
  tl->closing[tl->n_closing++] = req;
}

void weft__ucx_epr_close(ucx_loop *tl, ucx_epr *r, bool in_progress) {
  if (!in_progress && r->n_ops == 0) {
    ep_close(tl, r);
    return;
  }
  r->close_by = weft__ucx_now_ns() + UCX_CLOSE_WAIT_NS;
  r->next = tl->lingering;
  tl->lingering = r;
  weft__ucx_tick_start(tl);
}

/* Closes the lingering eps whose requests ended or whose time is up (or
 * all of them: `all`). Runs from poll or the tick, not from a UCX
 * callback. */
void weft__ucx_linger_check(ucx_loop *tl, bool all) {
  uint64_t now = weft__ucx_now_ns();
  ucx_epr **pp = &tl->lingering;
  while (*pp != NULL) {
    ucx_epr *r = *pp;
    if (r->n_ops > 0 && now < r->close_by && !all) {
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    if (r->n_ops > 0) {
      weft_log(WEFT_LOG_WARN,
               "ucx: closing an endpoint with %zu requests still in flight",
               r->n_ops);
      /* By force where UCX allows it, which ends them (UCS_ERR_CANCELED):
       * a flush-mode close waits for them forever (a rendezvous receive
       * whose sender stopped), and UCX 1.13 aborts when the worker then
       * destroys the ep ("ucp_ep.c:437 ... proto_reqs"). */
      r->force = !tl->cfg.err_mode_none;
    }
    ep_close(tl, r);
  }
}

/* ---- channel lifecycle ---- */

/* A slot, an ep record and the ep (`params`, with the error handling
 * added) for channel `uc`: at connect and adopt, and again for a
 * REDIRECT. Returns 0 or an error (nothing of the three left). */
static int ep_start(ucx_channel *uc, ucp_ep_params_t *params) {
  ucx_loop *tl = uc->tl;
  uc->epr = calloc(1, sizeof *uc->epr);
  if (uc->epr == NULL)
    return WEFT_ENOMEM;
  int err = weft__ucx_slot_take(tl, uc);
  if (err < 0)
    goto failed_slot;
  weft__ucx_tick_start(tl);
  params->field_mask |=
      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params->err_mode = tl->cfg.err_mode_none ? UCP_ERR_HANDLING_MODE_NONE
                                           : UCP_ERR_HANDLING_MODE_PEER;
  params->err_handler =
      (ucp_err_handler_t){.cb = weft__ucx_ep_error, .arg = tl};
  ucs_status_t st = ucp_ep_create(tl->worker, params, &uc->ep);
  if (st != UCS_OK) {
    err = weft__ucx_status_to_weft(st);
    goto failed_ep;
  }
  uc->epr->ep = uc->ep;
  uc->epr->uc = uc;
  weft__ucx_ep_index(tl, uc->epr);
  return 0;

failed_ep:
  uc->ep = NULL;
  weft__ucx_slot_free(tl, uc);
failed_slot:
  free(uc->epr);
  uc->epr = NULL;
  return err;
}

/* The first sequence number of a channel's DATA and FIN: random, so that
 * only its peer, told in the handshake, knows what the channel's next
 * message must carry (ucx_wire.h, UCX_WIRE_VERSION 4). getrandom; the
 * clock mixed with the channel's address should it fail (a kernel
 * without it), which still keeps a guess from being a constant. */
static uint32_t first_seq(const ucx_channel *uc) {
  uint32_t x;
  if (getrandom(&x, sizeof x, GRND_NONBLOCK) == (ssize_t)sizeof x)
    return x;
  uint64_t m =
      (weft__ucx_now_ns() ^ (uint64_t)(uintptr_t)uc) * 0x9e3779b97f4a7c15ull;
  return (uint32_t)(m >> 32);
}

/* The read and wire state of channel `ch` (`client`: it connects).
 * Returns its loop's instance, or NULL with the error in `*err`. */
static ucx_loop *channel_init(weft_channel *ch, bool client, int *err) {
  ucx_channel *uc = weft__ucx_of(ch);
  ucx_loop *tl = weft__ucx_loop_state_of(weft_channel_loop(ch), err);
  if (tl == NULL)
    return NULL;
  uc->ch = ch;
  uc->tl = tl;
  uc->reading = weft_channel_auto_read(ch);
  weft__ucx_wire_init(&uc->w, (uint32_t)tl->cfg.window,
                      (uint32_t)tl->cfg.max_message, client);
  uc->send_seq = first_seq(uc);
  return tl;
}

/* Adopts a connection request, or a connection the listener on the
 * server's address held until its HELLO (listen.c): that one keeps its ep,
 * takes a slot and answers the HELLO it had. */
static int ucx_adopt(weft_channel *ch, intptr_t handle) {
  ucx_handle h = *(ucx_handle *)handle;
  free((ucx_handle *)handle);
  int err = 0;
  ucx_loop *tl = channel_init(ch, false, &err);
  if (tl == NULL) {
    if (h.pc != NULL)
      weft__ucx_preconn_drop(h.pc);
    return err;
  }
  assert(!tl->in_progress);
  ucx_channel *uc = weft__ucx_of(ch);
  uc->server_id = h.server_id;
  if (h.pc == NULL) {
    ucp_ep_params_t params = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST,
                              .conn_request = h.req};
    err = ep_start(uc, &params);
    if (err == 0) {
      /* a connection that never says HELLO is closed (tick) */
      uc->hello_by = weft__ucx_now_ns() + tl->cfg.hello_timeout_ms * 1000000ull;
      tl->n_awaiting++;
    }
    return err;
  }
  err = weft__ucx_slot_take(tl, uc);
  if (err < 0) {
    weft__ucx_preconn_drop(h.pc);
    return err;
  }
  weft__ucx_tick_start(tl);
  return weft__ucx_preconn_adopt(h.pc, uc);
}

/* A connection nobody adopts (the core refused it, or could not create
 * its channel). A request is left to UCX, which frees it with the
 * listener's worker (the client's connect fails then); a held connection
 * is closed (the core discards on the listener's loop, where it lives). */
static void ucx_discard(intptr_t handle) {
  ucx_handle *h = (ucx_handle *)handle;
  if (h->pc != NULL)
    weft__ucx_preconn_drop(h->pc);
  free(h);
}

/* Client-server ep params for address `ss`. */
static ucp_ep_params_t client_params(struct sockaddr_storage *ss) {
  socklen_t sl = ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                           : sizeof(struct sockaddr_in);
  return (ucp_ep_params_t){
      .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR,
      .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
      .sockaddr = {.addr = (struct sockaddr *)ss, .addrlen = sl}};
}

/* Sets the port of socket address `ss`. */
static void set_port(struct sockaddr_storage *ss, uint16_t port) {
  if (ss->ss_family == AF_INET6)
    ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
  else
    ((struct sockaddr_in *)ss)->sin_port = htons(port);
}

/* The port of socket address `ss`. */
static uint16_t get_port(const struct sockaddr_storage *ss) {
  return ntohs(ss->ss_family == AF_INET6
                   ? ((const struct sockaddr_in6 *)ss)->sin6_port
                   : ((const struct sockaddr_in *)ss)->sin_port);
}

/* Connects to the server at `ep`, or, when a REDIRECT taught this process
 * the server's listeners (route.c), straight to the next of them. */
static int ucx_connect(weft_channel *ch, const weft_endpoint *ep) {
  ucx_channel *uc = weft__ucx_of(ch);
  socklen_t sl;
  uc->dial = calloc(1, sizeof *uc->dial);
  if (uc->dial == NULL)
    return WEFT_ENOMEM;
  ucx_dial *d = uc->dial;
  int err = weft_endpoint_resolve_first(ep, false, &d->primary, &sl);
  if (err < 0)
    return err; /* ucx_close frees the dial */
  d->dest = d->primary;
  uint16_t port;
  if (weft__ucx_route_pick(&d->primary, &port, &d->expect_id)) {
    set_port(&d->dest, port);
    d->routed = true;
  }
  ucx_loop *tl = channel_init(ch, true, &err);
  if (tl == NULL)
    return err;
  ucp_ep_params_t params = client_params(&d->dest);
  err = ep_start(uc, &params);
  if (err < 0)
    return err;
  uc->connecting = true;
  /* Queued by UCX until the connection is up. */
  return weft__ucx_send_ctrl(uc, UMSG_HELLO, UCP_AM_SEND_FLAG_REPLY);
}

/* Connects again, to `port` of the same host: the old ep is closed (by
 * force with peer error handling: nothing of ours is on it but HELLO), the
 * slot changes (anything the old ep still brings is dropped), and the
 * client says HELLO there. After a REDIRECT (`redirected`) the HELLO says
 * ROUTED and a second REDIRECT is refused (weft__ucx_hdr_check). */
int weft__ucx_reconnect(ucx_channel *uc, uint16_t port, bool redirected) {
  ucx_loop *tl = uc->tl;
  assert(!tl->in_progress);
  ucx_dial *d = uc->dial;
  if (d == NULL)
    return WEFT_EPROTO;
  uint32_t expect_id = redirected ? uc->w.peer_server_id : 0;
  ucx_epr *r = uc->epr;
  r->uc = NULL;
  r->force = !tl->cfg.err_mode_none;
  weft__ucx_epr_close(tl, r, false);
  uc->epr = NULL;
  uc->ep = NULL;
  uc->ep_failed = false; /* the old ep's */
  uc->err = 0;
  uc->pend &= ~PEND_ERROR;
  weft__ucx_slot_free(tl, uc);
  d->dest = d->primary;
  set_port(&d->dest, port);
  d->routed = redirected;
  d->expect_id = expect_id;
  weft__ucx_wire_init(&uc->w, (uint32_t)tl->cfg.window,
                      (uint32_t)tl->cfg.max_message, true);
  uc->w.redirected = redirected;
  ucp_ep_params_t params = client_params(&d->dest);
  int err = ep_start(uc, &params);
  if (err < 0)
    return err;
  return weft__ucx_send_ctrl(uc, UMSG_HELLO, UCP_AM_SEND_FLAG_REPLY);
}

bool weft__ucx_dial_retry(ucx_channel *uc) {
  ucx_dial *d = uc->dial;
  if (d == NULL || !d->routed || d->retried)
    return false;
  weft__ucx_route_forget(&d->primary, 0);
  d->retried = true;
  int err = weft__ucx_reconnect(uc, get_port(&d->primary), false);
  if (err < 0) {
    uc->err = err;
    return false;
  }
  return true;
}

bool weft__ucx_dial_check(ucx_channel *uc) {
  ucx_dial *d = uc->dial;
  if (d == NULL)
    return false;
  if (d->expect_id == 0) {
    /* the server's own address: a route to another server there is stale */
    weft__ucx_route_forget(&d->primary, uc->w.peer_server_id);
    return false;
  }
  if (uc->w.peer_server_id == d->expect_id)
    return false;
  return weft__ucx_dial_retry(uc); /* another server answered */
}

/* Releases the ep; called once by the core when the channel closes. An
 * orderly close sends FIN after the last byte and closes the ep in flush
 * mode; a failed ep, or one whose peer broke the protocol (no FIN then),
 * is closed by force, where UCX allows it. Sends and rendezvous receives
 * still in flight keep their buffers until UCX ends them (their callbacks
 * release them), at the latest in loop_fini. */
static void ucx_close(weft_channel *ch) {
  ucx_channel *uc = weft__ucx_of(ch);
  free(uc->dial);
  uc->dial = NULL;
  if (!uc->has_slot)
    return;
  ucx_loop *tl = uc->tl;
  assert(!tl->in_progress);
  if (weft__ucx_pend_unlink(uc))
    weft_channel_release(ch);
  weft__ucx_hello_came(uc); /* no longer awaited */
  weft__ucx_rq_free(uc);
  bool violated = uc->violation[0] != '\0';
  if (uc->ep != NULL && !uc->ep_failed && uc->w.peer_known &&
      !uc->w.fin_received && !violated)
    weft__ucx_send_ctrl(uc, UMSG_FIN, 0);
  weft__ucx_slot_free(tl, uc);
  if (uc->ep == NULL)
    return;
  ucx_epr *r = uc->epr;
  r->uc = NULL;
  uc->epr = NULL;
  uc->ep = NULL;
  /* A peer that closed first (or failed) wants a forced close, which UCX
   * 1.13 refuses (UCS_ERR_INVALID_PARAM) without peer error handling; a
   * flush-mode close instead fails noisily (UCX logs "error during flush:
   * Endpoint timeout" for every lane). With error_mode=none such an ep is
   * therefore kept until the worker is destroyed, as before; without peer
   * error handling an ep whose peer is still there closes in flush mode. */
  bool peer_gone = uc->ep_failed || uc->w.fin_received;
  /* A peer that never answered our HELLO (a connect that timed out, a
   * listener that is not a UCX server) has our HELLO still pending on the
   * ep's wire-up lane: a flush-mode close never ends, and UCX 1.13 aborted
   * the process when it destroyed that ep with the worker ("pending
   * request ... should have been flushed", ucp_ep.c:1185). A forced close
   * purges the request (send_done: UCS_ERR_CANCELED). */
  bool unanswered = !uc->w.peer_known && uc->w.client;
  r->force = (peer_gone || violated || unanswered) && !tl->cfg.err_mode_none;
  r->keep = (peer_gone || unanswered) && tl->cfg.err_mode_none;
  /* Without peer error handling UCX 1.13 can neither force that close nor
   * destroy the ep with the worker: the worker is kept (loop_fini). */
  if (unanswered && tl->cfg.err_mode_none)
    tl->n_unanswered++;
  weft__ucx_epr_close(tl, r, false);
}

/* ---- the loop's tick: keepalive, lingering eps, held connections ---- */

/* Closes channel `uc`, which heard nothing from its peer for `probes`
 * intervals after its first PING. From the tick. */
static void keepalive_expired(ucx_channel *uc, unsigned probes) {
  unsigned ms = (probes + 1) * uc->tl->cfg.keepalive_ms;
  char peer[64] = "?", reason[160];
  if (weft_channel_remote_address(uc->ch, peer, sizeof peer) < 0)
    snprintf(peer, sizeof peer, "?");
  snprintf(reason, sizeof reason,
           "ucx: no message from the peer for %u ms (keepalive: %u PINGs "
           "unanswered)",
           ms, probes);
  weft_log(WEFT_LOG_WARN, "%s; closing the channel to %s", reason, peer);
  weft_channel *ch = uc->ch;
  weft_channel_retain(ch);
  weft_channel_transport_closed(ch, WEFT_ETIMEDOUT, reason);
  weft_channel_release(ch);
}

void weft__ucx_hello_came(ucx_channel *uc) {
  if (uc->hello_by == 0)
    return;
  uc->hello_by = 0;
  uc->tl->n_awaiting--;
}

/* Closes accepted channel `uc`, whose peer said no HELLO within
 * hello_timeout_ms: not a weft client, or one that holds a connection
 * (and a place under max_connections) without using it. From the tick. */
static void hello_expired(ucx_channel *uc) {
  char peer[64] = "?", reason[160];
  if (weft_channel_remote_address(uc->ch, peer, sizeof peer) < 0)
    snprintf(peer, sizeof peer, "?");
  snprintf(reason, sizeof reason, "ucx: no HELLO from the peer within %u ms",
           uc->tl->cfg.hello_timeout_ms);
  weft_log(WEFT_LOG_WARN, "%s; closing the channel to %s", reason, peer);
  weft_channel *ch = uc->ch;
  weft_channel_retain(ch);
  weft__ucx_hello_came(uc);
  weft_channel_transport_closed(ch, WEFT_ETIMEDOUT, reason);
  weft_channel_release(ch);
}

/* One keepalive tick over the loop's channels: a channel that heard
 * something since the last tick starts over; one that did not sends PING,
 * and closes after UCX_KEEPALIVE_PROBES silent ticks more
 * (UCX_KEEPALIVE_BUSY_PROBES while data it sent is not credited back). So
 * a peer that died or hangs is noticed within UCX_KEEPALIVE_PROBES + 2
 * intervals of its last message (idle) or BUSY_PROBES + 2. The table is read
 * afresh each step: a close runs user handlers, which may open or close
 * channels. */
static void keepalive(ucx_loop *tl, bool probe) {
  uint64_t now = tl->n_awaiting > 0 ? weft__ucx_now_ns() : 0;
  for (uint32_t i = 0; i < tl->n_slots; i++) {
    ucx_channel *uc = tl->slots[i].uc;
    if (uc != NULL && uc->hello_by != 0 && now >= uc->hello_by &&
        weft__ucx_channel_active(uc)) {
      hello_expired(uc);
      continue;
    }
    if (!probe || uc == NULL || !weft__ucx_channel_active(uc) ||
        !uc->w.peer_known || uc->w.fin_received || uc->ep_failed ||
        uc->violation[0] != '\0')
      continue;
    if (uc->heard) {
      uc->heard = false;
      uc->silent = 0;
      continue;
    }
    /* With our data in flight the peer's answer may wait behind its own
     * data in UCX: a longer allowance before a busy channel is judged. */
    unsigned probes = uc->w.send_unacked > 0 ? UCX_KEEPALIVE_BUSY_PROBES
                                             : UCX_KEEPALIVE_PROBES;
    if (++uc->silent > probes) {
      keepalive_expired(uc, probes);
      continue;
    }
    int err = weft__ucx_send_ctrl(uc, UMSG_PING, 0);
    if (err < 0) {
      uc->err = err;
      weft__ucx_pend_mark(uc, PEND_ERROR);
    }
  }
}

/* The loop's periodic tick: keepalive, held connections that waited too
 * long for their HELLO, lingering eps (a loop that sleeps does not poll
 * them). Stops itself when there is nothing to watch. */
static void tick(void *arg) {
  ucx_loop *tl = arg;
  bool channels = tl->n_free < tl->n_slots;
  bool probe = tl->cfg.keepalive_ms > 0 && channels;
  if (probe || tl->n_awaiting > 0)
    keepalive(tl, probe);
  if (tl->preconns != NULL)
    weft__ucx_preconn_dispatch(tl, false);
  if (tl->lingering != NULL)
    weft__ucx_linger_check(tl, false);
  if (!probe && tl->n_awaiting == 0 && tl->preconns == NULL &&
      tl->lingering == NULL)
    weft_timer_stop(&tl->tick);
}

void weft__ucx_tick_start(ucx_loop *tl) {
  if (weft_timer_active(&tl->tick))
    return;
  uint64_t ns =
      (uint64_t)(tl->cfg.keepalive_ms ? tl->cfg.keepalive_ms : UCX_TICK_MS) *
      1000000u;
  if (weft_timer_start(&tl->tick, ns, ns, tick, tl) < 0)
    weft_log(WEFT_LOG_WARN, "ucx: no memory for the loop's tick");
}

static int ucx_set_read(weft_channel *ch, bool on) {
  ucx_channel *uc = weft__ucx_of(ch);
  if (!uc->has_slot)
    return 0; /* applied at adopt / connect from the channel's option */
  uc->reading = on;
  if (on)
    weft__ucx_rq_check_head(uc);
  return 0;
}

static int ucx_set_option(weft_channel *ch, weft_channel_option opt,
                          int64_t v) {
  (void)ch, (void)opt, (void)v;
  return WEFT_ENOTSUP; /* no socket options: UCX settings are per process */
}

static int ucx_get_option(const weft_channel *ch, weft_channel_option opt,
                          int64_t *v) {
  (void)ch, (void)opt, (void)v;
  return WEFT_ENOTSUP;
}

static int ep_address(const weft_channel *ch, char *buf, size_t len,
                      bool remote) {
  const ucx_channel *uc = weft__ucx_of(ch);
  if (!uc->has_slot || uc->ep == NULL)
    return WEFT_ENOTCONN;
  ucp_ep_attr_t attr = {.field_mask = remote
                                          ? UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR
                                          : UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR};
  ucs_status_t st = ucp_ep_query(uc->ep, &attr);
  if (st != UCS_OK)
    return weft__ucx_status_to_weft(st);
  const struct sockaddr_storage *ss =
      remote ? &attr.remote_sockaddr : &attr.local_sockaddr;
  return weft_sockaddr_format((const struct sockaddr *)ss, buf, len);
}

static int ucx_remote_address(const weft_channel *ch, char *buf, size_t len) {
  return ep_address(ch, buf, len, true);
}

static int ucx_local_address(const weft_channel *ch, char *buf, size_t len) {
  return ep_address(ch, buf, len, false);
}

/* Creates (and drops) the context: UCX loads, and some transport is
 * usable with the current UCX_* settings. */
static int ucx_probe(char *why, size_t why_len) {
  int err = weft__ucx_ctx_acquire(NULL, why, why_len);
  if (err == 0)
    weft__ucx_ctx_release();
  return err;
}

const weft_transport_ops weft__transport_ucx = {
    .name = "ucx",
    .caps = WEFT_TRANSPORT_CAP_STREAM | WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP,
    .channel_priv_size = sizeof(ucx_channel),
    .probe = ucx_probe,
    .config_keys = weft__ucx_keys,
    .config_set = weft__ucx_config_set,
    .loop_init = weft__ucx_loop_init,
    .loop_fini = weft__ucx_loop_fini,
    .listen = weft__ucx_listen,
    .listen_close = weft__ucx_listen_close,
    .listen_address = weft__ucx_listen_address,
    .connect = ucx_connect,
    .adopt = ucx_adopt,
    .discard = ucx_discard,
    .flush = weft__ucx_flush,
    .close = ucx_close,
    .set_option = ucx_set_option,
    .get_option = ucx_get_option,
    .set_read = ucx_set_read,
    .remote_address = ucx_remote_address,
    .local_address = ucx_local_address,
};
