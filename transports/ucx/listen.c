/* transports/ucx/listen.c: the UCX transport's listeners: a UCP listener
 * for each weft listener, and the loop's accept queue, which keeps the
 * connection requests UCX hands to the listener's handler (inside
 * progress) until poll passes them to the core. */

#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include <weft/error.h>
#include <weft/log.h>
#include <weft/transport_plugin.h>

#include "transports/ucx/ucx_internal.h"

/* ---- listeners ---- */

/* Whether this UCX can accept a listener's connection request on another
 * worker safely. UCX lets a request be accepted on any worker, but before
 * the fix (openucx/ucx#9942, merged in June 2024 after 1.17 had branched,
 * so taken as 1.18)
 * moving the request's socket to another worker's async context while the
 * listener's worker still holds a missed event for it aborts the process
 * (async.c "Assertion `handler->async == async'"); docs/transports/ucx.md. */
static bool moves_conn_requests(void) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return major > 1 || (major == 1 && minor >= 18);
}

/* A connection request, inside ucp_worker_progress: only queued. poll
 * hands it to the core (weft__ucx_accept_pending), which adopts it on the next
 * loop (or, on an older UCX, on the listener's loop, at once: the adopt and the
 * new channel's weft__ucx_channel_active then run there, outside UCX). */
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

/* Hands queued connection requests to the core, oldest first. One at a
 * time: an adopt on this loop runs user code, which may close a listener
 * (weft__ucx_listener_free then rejects its queued requests and clears them
 * here). */
int weft__ucx_accept_pending(ucx_loop *tl) {
  int n = 0;
  while (tl->accept_head < tl->n_accepts) {
    ucx_accept a = tl->accepts[tl->accept_head++];
    if (a.uln == NULL)
      continue;
    weft_listener_accepted(a.uln->l, (intptr_t)a.req);
    n++;
  }
  tl->accept_head = tl->n_accepts = 0;
  return n;
}

int weft__ucx_listen(weft_listener *l, const weft_endpoint *ep, int backlog) {
  (void)backlog; /* UCX 1.13 has no backlog parameter */
  int err = 0;
  ucx_loop *tl = weft__ucx_loop_state_of(weft_listener_loop(l), &err);
  if (tl == NULL)
    return err;
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
  weft_listener_set_accept_local(l, !moves_conn_requests());
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
