/* SPDX-License-Identifier: Apache-2.0 */
/* transports/ucx/listen.c: the UCX transport's listeners: a UCP listener
 * for each weft listener (one per loop of a server: the transport has
 * WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP), the loop's accept queue, which keeps
 * the connection requests UCX hands to the listener's handler (inside
 * progress) until poll passes them to the core, and the connections the
 * listener on the server's address holds until their HELLO (ucx_preconn):
 * it keeps one in N on its loop (round-robin over the server's loops, and
 * every client that says it was routed there) and answers the others with
 * REDIRECT to loop j's listener, on an ep that never becomes a channel. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include <weft/error.h>
#include <weft/log.h>
#include <weft/transport_plugin.h>

#include "transports/ucx/ucx_internal.h"

/* ---- listeners ---- */

/* A connection request, inside ucp_worker_progress: only queued. poll
 * hands it to the core (weft__ucx_accept_pending), which adopts it on the
 * listener's loop at once (the adopt and the new channel's channel_active
 * run there, outside UCX), or holds it until its HELLO. A request is
 * always accepted on the worker whose listener took it: before the fix
 * (openucx/ucx#9942, after 1.17) UCX aborts when a request's socket moves
 * to another worker while the listener's worker holds a missed event for
 * it (async.c "Assertion `handler->async == async'"). */
static void conn_handler(ucp_conn_request_h req, void *arg) {
  ucx_listener *uln = arg;
  ucx_loop *tl = uln->tl;
  if (tl->n_accepts == tl->cap_accepts) {
    size_t cap = tl->cap_accepts ? tl->cap_accepts * 2 : 16;
    ucx_accept *a = realloc(tl->accepts, cap * sizeof *a);
    if (a == NULL) {
      weft_log(WEFT_LOG_WARN, "ucx: no memory to queue a connection "
                              "request: rejected");
      ucp_listener_reject(uln->ul, req);
      return;
    }
    tl->accepts = a;
    tl->cap_accepts = cap;
  }
  tl->accepts[tl->n_accepts++] = (ucx_accept){.uln = uln, .req = req};
}

/* Whether `uln`'s connections are held until their HELLO: it listens on
 * the server's address, the server has several loops, and spread is on. */
static bool holds(const ucx_listener *uln) {
  return uln->tl->cfg.spread && weft_listener_index(uln->l) == 0 &&
         weft_listener_count(uln->l) > 1;
}

/* Hands a connection (a request, or a held connection `pc`) of listener
 * `uln` to the core, which adopts it on this loop. */
static void hand_over(ucx_listener *uln, ucp_conn_request_h req,
                      ucx_preconn *pc) {
  ucx_handle *h = malloc(sizeof *h);
  if (h == NULL) {
    weft_log(WEFT_LOG_WARN, "ucx: no memory to accept a connection");
    if (pc != NULL)
      weft__ucx_preconn_drop(pc);
    else
      ucp_listener_reject(uln->ul, req);
    return;
  }
  *h = (ucx_handle){
      .req = req, .pc = pc, .server_id = weft_listener_server_id(uln->l)};
  weft_listener_accepted(uln->l, (intptr_t)h);
}

/* Whether listener `uln` may hold one more connection: held connections
 * count against the server's max_connections as its channels do (they
 * become channels at their HELLO), and at most UCX_HELD_MAX wait at once.
 * A refusal is logged once a second at most, with the count since. */
static bool may_hold(ucx_listener *uln) {
  if (uln->n_held < UCX_HELD_MAX &&
      (int64_t)uln->n_held < (int64_t)weft_listener_room(uln->l))
    return true;
  uln->refused++;
  uint64_t now = weft__ucx_now_ns();
  if (uln->refused_log_ns == 0 || now - uln->refused_log_ns >= 1000000000u) {
    weft_log(WEFT_LOG_WARN,
             "ucx: %u connections wait for their HELLO and the server's "
             "max_connections leaves no room (at most %u wait); refused %llu "
             "connection(s) since the last such line",
             uln->n_held, UCX_HELD_MAX, (unsigned long long)uln->refused);
    uln->refused = 0;
    uln->refused_log_ns = now;
  }
  return false;
}

/* Accepts `req` on this worker and holds it until its HELLO. */
static void preconn_start(ucx_listener *uln, ucp_conn_request_h req) {
  ucx_loop *tl = uln->tl;
  if (!may_hold(uln)) {
    ucp_listener_reject(uln->ul, req);
    return;
  }
  ucx_preconn *pc = calloc(1, sizeof *pc);
  ucx_epr *r = calloc(1, sizeof *r);
  if (pc == NULL || r == NULL) {
    free(pc);
    free(r);
    hand_over(uln, req, NULL); /* accepted as a channel instead */
    return;
  }
  ucp_ep_params_t params = {
      .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER,
      .conn_request = req,
      .err_mode = tl->cfg.err_mode_none ? UCP_ERR_HANDLING_MODE_NONE
                                        : UCP_ERR_HANDLING_MODE_PEER,
      .err_handler = {.cb = weft__ucx_ep_error, .arg = tl}};
  ucs_status_t st = ucp_ep_create(tl->worker, &params, &r->ep);
  if (st != UCS_OK) {
    /* UCX consumed the request: the client's connect fails. */
    weft_log(WEFT_LOG_WARN, "ucx: accepting a connection: %s",
             ucs_status_string(st));
    free(pc);
    free(r);
    return;
  }
  r->pc = pc;
  weft__ucx_ep_index(tl, r);
  *pc = (ucx_preconn){.tl = tl,
                      .uln = uln,
                      .epr = r,
                      .hello_by = weft__ucx_now_ns() +
                                  tl->cfg.hello_timeout_ms * 1000000ull,
                      .next = tl->preconns};
  tl->preconns = pc;
  tl->n_preconns++;
  uln->n_held++;
  weft__ucx_tick_start(tl);
}

/* Hands queued connection requests to the core, oldest first, or holds
 * them until their HELLO (the listener on a server's address with several
 * loops). One at a time: an adopt on this loop runs user code, which may
 * close a listener (weft__ucx_listener_free then rejects its queued
 * requests and clears them here). */
int weft__ucx_accept_pending(ucx_loop *tl) {
  int n = 0;
  while (tl->accept_head < tl->n_accepts) {
    ucx_accept a = tl->accepts[tl->accept_head++];
    if (a.uln == NULL)
      continue;
    if (holds(a.uln))
      preconn_start(a.uln, a.req);
    else
      hand_over(a.uln, a.req, NULL);
    n++;
  }
  tl->accept_head = tl->n_accepts = 0;
  return n;
}

/* ---- connections held until their HELLO ---- */

/* Takes `pc` off its loop's list. */
static void preconn_unlink(ucx_preconn *pc) {
  ucx_loop *tl = pc->tl;
  ucx_preconn **pp = &tl->preconns;
  while (*pp != pc)
    pp = &(*pp)->next;
  *pp = pc->next;
  tl->n_preconns--;
  if (pc->uln != NULL)
    pc->uln->n_held--;
}

/* Closes `pc`'s ep (lingering while requests are in flight: a REDIRECT),
 * in flush mode so that a REDIRECT leaves first, by force if `force` and
 * UCX allows it; frees `pc` (already unlinked). */
static void preconn_close(ucx_preconn *pc, bool force, bool in_progress) {
  ucx_loop *tl = pc->tl;
  ucx_epr *r = pc->epr;
  r->pc = NULL;
  r->force = (force || r->peer_left) && !tl->cfg.err_mode_none;
  weft__ucx_epr_close(tl, r, in_progress);
  free(pc);
}

void weft__ucx_preconn_drop(ucx_preconn *pc) { preconn_close(pc, true, false); }

void weft__ucx_preconn_hello(ucx_preconn *pc, const void *header,
                             size_t header_len, const void *data, size_t len,
                             bool rndv) {
  if (pc->hello)
    return; /* a second one: the first decides */
  pc->hello = true;
  pc->tl->preconn_hello = true;
  if (header_len == sizeof pc->hdr)
    memcpy(&pc->hdr, header, sizeof pc->hdr);
  else
    pc->hdr.to = 0; /* not weft's: the check refuses type 0 */
  pc->rndv = rndv;
  pc->len = len > sizeof pc->data ? sizeof pc->data + 1 : len;
  if (!rndv && len <= sizeof pc->data)
    memcpy(pc->data, data, len);
}

void weft__ucx_preconn_error(ucx_preconn *pc) {
  pc->epr->peer_left = true;
  preconn_unlink(pc);
  preconn_close(pc, true, true);
}

/* The HELLO `pc` holds, checked as a channel's would be, into `w`: 0 or
 * the rule broken (in `why`). */
static int preconn_check(const ucx_preconn *pc, ucx_wire *w, char *why,
                         size_t why_len) {
  ucx_loop *tl = pc->tl;
  weft__ucx_wire_init(w, (uint32_t)tl->cfg.window,
                      (uint32_t)tl->cfg.max_message, false);
  return weft__ucx_hdr_check(w, &pc->hdr, sizeof pc->hdr,
                             pc->rndv ? NULL : pc->data, pc->len, pc->rndv, why,
                             why_len);
}

/* The listener the next connection of `uln` goes to (round-robin over the
 * server's loops) and every listener's port, in `ports` (n of them);
 * returns the index, 0 to keep it here (its turn, or a listener's port not
 * known yet). */
static uint32_t next_listener(ucx_listener *uln, uint32_t *ports, uint32_t *n) {
  weft_listener *l = uln->l;
  int count = weft_listener_count(l);
  if (count > (int)UCX_MAX_LISTENERS)
    count = (int)UCX_MAX_LISTENERS;
  int j = uln->next_loop;
  uln->next_loop = (j + 1) % count;
  if (j == 0)
    return 0;
  for (int i = 0; i < count; i++) {
    char addr[280];
    if (weft_listener_address_of(l, i, addr, sizeof addr) < 0)
      return 0;
    const char *colon = strrchr(addr, ':');
    unsigned long port = colon != NULL ? strtoul(colon + 1, NULL, 10) : 0;
    if (port == 0 || port > 65535)
      return 0;
    ports[i] = (uint32_t)port;
  }
  *n = (uint32_t)count;
  return (uint32_t)j;
}

/* Decides held connection `pc`, whose HELLO came (unlinked already). */
static void preconn_decide(ucx_preconn *pc) {
  ucx_loop *tl = pc->tl;
  ucx_wire w;
  char why[120];
  if (pc->uln == NULL) {
    preconn_close(pc, true, false); /* the listener closed */
    return;
  }
  if (preconn_check(pc, &w, why, sizeof why) < 0) {
    weft_log(WEFT_LOG_WARN, "ucx: %s; refusing the connection", why);
    preconn_close(pc, true, false);
    return;
  }
  uint32_t ports[UCX_MAX_LISTENERS], n = 0;
  uint32_t j =
      (w.peer_flags & UCX_HELLO_ROUTED) ? 0 : next_listener(pc->uln, ports, &n);
  if (j == 0) {
    hand_over(pc->uln, NULL, pc); /* adopted here: HELLO_ACK */
    return;
  }
  int err = weft__ucx_send_redirect(
      tl, pc->epr, weft__ucx_slot_ref(0, w.peer_id, w.peer_gen),
      weft_listener_server_id(pc->uln->l), j, n, ports);
  if (err < 0)
    weft_log(WEFT_LOG_WARN, "ucx: sending a REDIRECT: %s", weft_strerror(err));
  preconn_close(pc, err < 0, false);
}

int weft__ucx_preconn_dispatch(ucx_loop *tl, bool all) {
  uint64_t now = weft__ucx_now_ns();
  int done = 0;
  tl->preconn_hello = false;
  ucx_preconn *pc = tl->preconns;
  while (pc != NULL) {
    ucx_preconn *next = pc->next;
    if (pc->hello || all || now >= pc->hello_by) {
      preconn_unlink(pc);
      if (pc->hello && !all)
        preconn_decide(pc); /* may run user code: `next` stays valid */
      else
        preconn_close(pc, true, false);
      done++;
      next = tl->preconns; /* the list may have changed: start over */
    }
    pc = next;
  }
  return done;
}

int weft__ucx_preconn_adopt(ucx_preconn *pc, ucx_channel *uc) {
  char why[120];
  uc->ep = pc->epr->ep;
  uc->epr = pc->epr;
  uc->epr->uc = uc;
  uc->epr->pc = NULL;
  /* its HELLO again, now into the channel's wire state (it passed once) */
  int err = weft__ucx_hdr_check(&uc->w, &pc->hdr, sizeof pc->hdr,
                                pc->rndv ? NULL : pc->data, pc->len, pc->rndv,
                                why, sizeof why);
  free(pc);
  if (err != 0)
    return WEFT_EPROTO;
  uc->heard = true;
  return weft__ucx_send_ctrl(uc, UMSG_HELLO_ACK, 0);
}

/* ---- listener lifecycle ---- */

int weft__ucx_listen(weft_listener *l, const weft_endpoint *ep, int backlog) {
  (void)backlog; /* UCX 1.13 has no backlog parameter */
  int err = 0;
  ucx_loop *tl = weft__ucx_loop_state_of(weft_listener_loop(l), &err);
  if (tl == NULL)
    return err;
  if (weft_listener_index(l) > 0 && !tl->cfg.spread)
    return 0; /* spread = off: loop 0's listener takes every connection */
  struct sockaddr_storage ss;
  socklen_t sl;
  err = weft_endpoint_resolve_first(ep, true, &ss, &sl);
  if (err < 0)
    return err;
  ucx_listener *uln = calloc(1, sizeof *uln);
  if (uln == NULL)
    return WEFT_ENOMEM;
  uln->l = l;
  uln->tl = tl;
  ucp_listener_params_t lp = {
      .field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR |
                    UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
      .sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sl},
      .conn_handler = {.cb = conn_handler, .arg = uln}};
  ucs_status_t st = ucp_listener_create(tl->worker, &lp, &uln->ul);
  if (st != UCS_OK) {
    free(uln);
    return weft__ucx_status_to_weft(st);
  }
  uln->next = tl->listeners;
  if (tl->listeners != NULL)
    tl->listeners->prev = uln;
  tl->listeners = uln;
  weft_listener_set_priv(l, uln);
  return 0;
}

void weft__ucx_listener_free(ucx_listener *uln) {
  ucx_loop *tl = uln->tl;
  for (size_t i = tl->accept_head; i < tl->n_accepts; i++) {
    if (tl->accepts[i].uln != uln)
      continue;
    ucp_listener_reject(uln->ul, tl->accepts[i].req);
    tl->accepts[i].uln = NULL;
  }
  for (ucx_preconn *pc = tl->preconns; pc != NULL; pc = pc->next)
    if (pc->uln == uln)
      pc->uln = NULL; /* closed at its HELLO or its deadline */
  ucp_listener_destroy(uln->ul);
  if (uln->prev != NULL)
    uln->prev->next = uln->next;
  else
    tl->listeners = uln->next;
  if (uln->next != NULL)
    uln->next->prev = uln->prev;
  free(uln);
}

void weft__ucx_listen_close(weft_listener *l) {
  ucx_listener *uln = weft_listener_priv(l);
  if (uln == NULL)
    return;
  weft_listener_set_priv(l, NULL);
  weft__ucx_listener_free(uln);
}

int weft__ucx_listen_address(weft_listener *l, char *buf, size_t len) {
  ucx_listener *uln = weft_listener_priv(l);
  if (uln == NULL)
    return WEFT_ECLOSED;
  ucp_listener_attr_t attr = {.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR};
  ucs_status_t st = ucp_listener_query(uln->ul, &attr);
  if (st != UCS_OK)
    return weft__ucx_status_to_weft(st);
  return weft_sockaddr_format((struct sockaddr *)&attr.sockaddr, buf, len);
}
