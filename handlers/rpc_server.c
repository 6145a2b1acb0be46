/* SPDX-License-Identifier: Apache-2.0 */
/* The RPC server handler: method table, calls answered now or later. */
#include <stdlib.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/rpc_server.h>

struct weft_rpc_call {
  weft_channel *ch; /* one reference, dropped when answered */
  weft_loop *loop;
  uint64_t request_id;
  uint16_t method;
  uint8_t type;
};

typedef struct rpc_server {
  const weft_rpc_method *methods;
  size_t n;
} rpc_server;

static const weft_rpc_method *find_method(const rpc_server *s, uint16_t id) {
  for (size_t i = 0; i < s->n; i++)
    if (s->methods[i].id == id)
      return &s->methods[i];
  return NULL;
}

static void server_read(weft_ctx *ctx, void *msg) {
  weft_rpc_msg *req = msg;
  if (!weft_msg_is(msg, &weft_rpc_msg_type) ||
      (req->type != WEFT_RPC_REQUEST && req->type != WEFT_RPC_ONEWAY)) {
    weft_ctx_fire_channel_read(ctx, msg);
    return;
  }
  weft_rpc_call *call = malloc(sizeof *call);
  if (call == NULL) {
    weft_rpc_msg_release(req);
    weft_ctx_fire_exception_caught(ctx, WEFT_ENOMEM, "rpc server: call");
    return;
  }
  weft_channel *ch = weft_ctx_channel(ctx);
  *call = (weft_rpc_call){.ch = weft_channel_retain(ch),
                          .loop = weft_channel_loop(ch),
                          .request_id = req->request_id,
                          .method = req->method,
                          .type = req->type};
  const weft_rpc_method *m = find_method(weft_ctx_state(ctx), req->method);
  if (m == NULL) {
    weft_channel_log(ch, WEFT_LOG_DEBUG, "rpc method %u not found",
                     req->method);
    weft_rpc_msg_release(req);
    weft_rpc_reply_error(call, WEFT_ENOSYS, NULL);
    return;
  }
  m->cb(call, req, m->arg);
}

static void server_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler server_handler = {.name = "rpc_server",
                                            .channel_read = server_read,
                                            .handler_removed = server_removed};

int weft_rpc_server_add_last(weft_pipeline *p, const char *name,
                             const weft_rpc_method *methods, size_t n) {
  if (methods == NULL && n > 0)
    return WEFT_EINVAL;
  for (size_t i = 0; i < n; i++)
    if (methods[i].cb == NULL)
      return WEFT_EINVAL;
  rpc_server *s = malloc(sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  *s = (rpc_server){methods, n};
  int rc = weft_pipeline_add_last(p, name, &server_handler, s);
  if (rc < 0)
    free(s);
  return rc;
}

static void call_free(weft_rpc_call *call) {
  weft_channel_release(call->ch);
  free(call);
}

static int answer(weft_rpc_call *call, weft_rpc_type type, int32_t status,
                  weft_buf *payload) {
  int rc = 0;
  if (call->type == WEFT_RPC_ONEWAY) {
    weft_buf_release(payload); /* nobody waits for it */
  } else if (!weft_channel_is_active(call->ch)) {
    weft_buf_release(payload);
    rc = WEFT_ECLOSED;
  } else {
    weft_rpc_msg *m =
        weft_rpc_msg_new(type, call->method, call->request_id, status, payload);
    if (m == NULL)
      rc = WEFT_ENOMEM;
    else
      weft_channel_write_and_flush(call->ch, m, WEFT_PROMISE_NONE);
  }
  call_free(call);
  return rc;
}

int weft_rpc_reply(weft_rpc_call *call, int32_t status, weft_buf *payload) {
  return answer(call, WEFT_RPC_RESPONSE, status, payload);
}

int weft_rpc_reply_error(weft_rpc_call *call, int32_t status,
                         weft_buf *payload) {
  return answer(call, WEFT_RPC_ERROR, status, payload);
}

weft_loop *weft_rpc_call_loop(const weft_rpc_call *call) { return call->loop; }

weft_channel *weft_rpc_call_channel(const weft_rpc_call *call) {
  return call->ch;
}

uint16_t weft_rpc_call_method(const weft_rpc_call *call) {
  return call->method;
}

uint64_t weft_rpc_call_request_id(const weft_rpc_call *call) {
  return call->request_id;
}

int weft_rpc_call_type(const weft_rpc_call *call) { return call->type; }
