/* transports/ucx/channel.c: a UCX channel's lifecycle: its slot and ep at
 * connect or adopt; its close, which sends FIN and closes the ep at once
 * or leaves it to linger until the requests in flight on it ended; its
 * options and addresses; and the plugin's probe and ops table,
 * weft__transport_ucx. */

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
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
 * still in flight on it (a lingering ep past its deadline) forget it. */
static void ep_close(ucx_loop *tl, ucx_epr *r) {
  if (r->n_ops > 0)
    for (ucx_op *op = tl->ops; op != NULL; op = op->next)
      if (op->epr == r)
        op->epr = NULL;
  if (r->keep) {
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

/* Closes the lingering eps whose requests ended or whose time is up (or
 * all of them: `all`). Runs from poll, not from a UCX callback. */
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
    if (r->n_ops > 0)
      weft_log(WEFT_LOG_WARN,
               "ucx: closing an endpoint with %zu requests still in flight",
               r->n_ops);
    ep_close(tl, r);
  }
}

/* ---- channel lifecycle ---- */

/* Common to connect (`client`) and adopt: a slot, the read and wire
 * state, the ep. */
static int channel_start(weft_channel *ch, ucp_ep_params_t *params,
                         bool client) {
  ucx_channel *uc = weft__ucx_of(ch);
  int err = 0;
  ucx_loop *tl = weft__ucx_loop_state_of(weft_channel_loop(ch), &err);
  if (tl == NULL)
    return err;
  int64_t auto_read = 1;
  weft_channel_get_option(ch, WEFT_OPT_AUTO_READ, &auto_read);
  uc->ch = ch;
  uc->tl = tl;
  uc->reading = auto_read != 0;
  weft__ucx_wire_init(&uc->w, (uint32_t)tl->cfg.window,
                      (uint32_t)tl->cfg.max_message, client);
  uc->epr = calloc(1, sizeof *uc->epr);
  if (uc->epr == NULL)
    return WEFT_ENOMEM;
  err = weft__ucx_slot_take(tl, uc);
  if (err < 0)
    goto failed_slot;
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
  return 0;

failed_ep:
  uc->ep = NULL;
  weft__ucx_slot_free(tl, uc);
failed_slot:
  free(uc->epr);
  uc->epr = NULL;
  return err;
}

static int ucx_adopt(weft_channel *ch, intptr_t handle) {
  assert(
      !weft__ucx_loop_state_of(weft_channel_loop(ch), &(int){0})->in_progress);
  ucp_ep_params_t params = {.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST,
                            .conn_request = (ucp_conn_request_h)handle};
  return channel_start(ch, &params, false);
}

/* A request nobody adopts: UCX frees it with the listener's worker, and the
 * client's connect fails then. Rejecting needs the listener's worker, which
 * belongs to another loop's thread. */
static void ucx_discard(intptr_t handle) { (void)handle; }

static int ucx_connect(weft_channel *ch, const weft_endpoint *ep) {
  struct sockaddr_storage ss;
  socklen_t sl;
  int err = weft_endpoint_resolve_first(ep, false, &ss, &sl);
  if (err < 0)
    return err;
  ucp_ep_params_t params = {
      .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR,
      .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
      .sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = sl}};
  err = channel_start(ch, &params, true);
  if (err < 0)
    return err;
  ucx_channel *uc = weft__ucx_of(ch);
  uc->connecting = true;
  /* Queued by UCX until the connection is up. */
  return weft__ucx_send_ctrl(uc, UMSG_HELLO, UCP_AM_SEND_FLAG_REPLY);
}

/* Releases the ep; called once by the core when the channel closes. An
 * orderly close sends FIN after the last byte and closes the ep in flush
 * mode; a failed ep, or one whose peer broke the protocol (no FIN then),
 * is closed by force, where UCX allows it. Sends and rendezvous receives
 * still in flight keep their buffers until UCX ends them (their callbacks
 * release them), at the latest in loop_fini. */
static void ucx_close(weft_channel *ch) {
  ucx_channel *uc = weft__ucx_of(ch);
  if (!uc->has_slot)
    return;
  ucx_loop *tl = uc->tl;
  assert(!tl->in_progress);
  if (weft__ucx_pend_unlink(uc))
    weft_channel_release(ch);
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
   * therefore kept until the worker is destroyed, as before. A peer that
   * broke the protocol is cut off by force too; without peer error
   * handling its ep, whose peer is still there, closes in flush mode. */
  bool peer_gone = uc->ep_failed || uc->w.fin_received;
  r->force = (peer_gone || violated) && !tl->cfg.err_mode_none;
  r->keep = peer_gone && tl->cfg.err_mode_none;
  if (r->n_ops == 0) {
    ep_close(tl, r);
    return;
  }
  r->close_by = weft__ucx_now_ns() + UCX_CLOSE_WAIT_NS;
  r->next = tl->lingering;
  tl->lingering = r;
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
    .caps = WEFT_TRANSPORT_CAP_STREAM,
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
