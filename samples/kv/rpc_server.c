/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/rpc_server.c: the KV server's weft RPC side
 * (server_internal.h): one RPC method per command (proto.h), each running
 * the executor (command.h) for the connection's session and answering
 * with one tagged value built in a growing payload, within the work budget
 * per turn that RESP has (kv_turn). The session lives in a
 * small handler of the pipeline and the channel's user data, so MULTI,
 * AUTH and CLIENT work per connection as on RESP; a client that protected
 * mode refuses gets the DENIED error for its first request, then the
 * close. */
#include "server_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

/* ---- the reply writer, into one growing payload ---- */

typedef struct rpc_writer {
  weft_pool *pool;
  weft_buf *out;
  bool failed; /* ENOMEM on the way: the call fails as a whole */
} rpc_writer;

static weft_buf *rpc_room(rpc_writer *w, size_t n) {
  if (w->failed)
    return NULL;
  if (w->out != NULL && weft_buf_writable(w->out) >= n)
    return w->out;
  size_t have = w->out != NULL ? weft_buf_readable(w->out) : 0;
  size_t cap = w->out != NULL ? w->out->capacity * 2 : 256;
  if (cap < have + n)
    cap = have + n;
  weft_buf *b = weft_buf_alloc(w->pool, cap);
  if (b == NULL) {
    w->failed = true;
    return NULL;
  }
  if (w->out != NULL) {
    weft_buf_write_bytes(b, weft_buf_rptr(w->out), have);
    weft_buf_release(w->out);
  }
  return w->out = b;
}

static void rpc_simple(void *w, const char *s) {
  weft_buf *b = rpc_room(w, kv_proto_bulk_size(strlen(s)));
  if (b != NULL)
    kv_proto_write_simple(b, s);
}

static void rpc_error(void *w, const char *msg) {
  weft_buf *b = rpc_room(w, kv_proto_bulk_size(strlen(msg)));
  if (b != NULL)
    kv_proto_write_error(b, msg);
}

static void rpc_integer(void *w, int64_t v) {
  weft_buf *b = rpc_room(w, 9);
  if (b != NULL)
    kv_proto_write_integer(b, v);
}

static void rpc_bulk(void *w, const void *data, size_t len, kv_blob *blob) {
  (void)blob;
  weft_buf *b = rpc_room(w, kv_proto_bulk_size(len));
  if (b != NULL)
    kv_proto_write_bulk(b, data, len);
}

static void rpc_null(void *w) {
  weft_buf *b = rpc_room(w, 1);
  if (b != NULL)
    kv_proto_write_null(b);
}

static void rpc_array(void *w, size_t n) {
  weft_buf *b = rpc_room(w, 11);
  if (b != NULL)
    kv_proto_write_array(b, n);
}

/* The binary protocol has no map: keys and values as one array. */
static void rpc_map(void *w, size_t pairs) { rpc_array(w, 2 * pairs); }

/* Nor verbatim strings: a bulk string. */
static void rpc_verbatim(void *w, const void *text, size_t len) {
  rpc_bulk(w, text, len, NULL);
}

static const kv_reply_ops rpc_ops = {rpc_simple, rpc_error,   rpc_integer,
                                     rpc_bulk,   rpc_null,    rpc_array,
                                     rpc_map,    rpc_verbatim};

/* Arguments a method may have: before AUTH, Redis' limit less the
 * command's name (the method). */
static size_t rpc_max_args(const kv_session *s) {
  return s->authenticated ? KV_MAX_ARGS : KV_UNAUTH_MAX_ARGS - 1;
}

/* Before AUTH each argument is at most Redis' 16 KiB too (the codec's
 * payload bound keeps the memory down; this keeps Redis' rule). */
static bool rpc_args_fit_unauth(const kv_arg *argv, size_t argc) {
  for (size_t i = 0; i < argc; i++)
    if (argv[i].len > KV_UNAUTH_MAX_BULK)
      return false;
  return true;
}

/* A connection's state: its session, once the channel is active, and its
 * work budget per turn (kv_turn). */
typedef struct rpc_conn {
  kv_server *srv;
  kv_session sess;
  bool started;
  kv_turn turn; /* reset at each read's end and after a yield */
} rpc_conn;

/* Every command's method: the arguments (checked against KV_MAX_ARGS and
 * the payload's bytes), the executor, one reply. */
static void rpc_method(weft_rpc_call *call, weft_rpc_msg *req, void *arg) {
  (void)arg;
  kv_arg argv[KV_MAX_ARGS];
  size_t argc;
  weft_channel *ch = weft_rpc_call_channel(call);
  kv_session *s = weft_channel_user_data(ch);
  int rc = s != NULL
               ? kv_proto_read_args(req->payload, rpc_max_args(s), argv, &argc)
               : WEFT_ESTATE;
  if (rc == 0 && !s->authenticated && !rpc_args_fit_unauth(argv, argc))
    rc = WEFT_ETOOLONG;
  if (rc < 0) {
    weft_rpc_msg_release(req);
    weft_rpc_reply_error(call, rc, NULL);
    return;
  }
  rpc_conn *c = (rpc_conn *)((char *)s - offsetof(rpc_conn, sess));
  kv_turn_start(&c->turn);
  rpc_writer w = {.pool = weft_loop_pool(weft_channel_loop(ch))};
  kv_exec(s, weft_rpc_call_method(call), argc, argv, &rpc_ops, &w);
  weft_rpc_msg_release(req); /* argv pointed into its payload */
  bool denied = s->denied;
  if (w.failed) {
    weft_buf_release(w.out);
    weft_rpc_reply_error(call, WEFT_ENOMEM, NULL);
  } else {
    weft_rpc_reply(call, 0, w.out);
  }
  if (denied) /* the DENIED error is written and flushed: now the close */
    weft_channel_close(ch, WEFT_PROMISE_NONE);
  else if (kv_turn_spent(&c->turn))
    weft_channel_yield_read(ch); /* the rest at the next turn (kv_turn) */
}

void kv_rpc_methods_init(kv_server *srv) {
  srv->n_methods = 0;
  for (int c = 1; c < KV_CMD_COUNT_; c++)
    if (kv_cmd_rpc(c))
      srv->methods[srv->n_methods++] =
          (weft_rpc_method){(uint16_t)c, rpc_method, srv};
}

/* ---- the session's handler ---- */

/* The connection is up: its session starts, in the channel's user data
 * (where rpc_method finds it). */
static void session_active(weft_ctx *ctx) {
  rpc_conn *c = weft_ctx_state(ctx);
  weft_channel *ch = weft_ctx_channel(ctx);
  kv_session_init(&c->sess, &c->srv->shared, ch, true);
  c->started = true;
  weft_channel_set_user_data(ch, &c->sess);
  weft_ctx_fire_channel_active(ctx);
}

/* A turn ends: the read's messages were all decoded (or, after a yield,
 * reading resumed): the next command starts a new budget. */
static void session_read_complete(weft_ctx *ctx) {
  rpc_conn *c = weft_ctx_state(ctx);
  kv_turn_reset(&c->turn);
  weft_ctx_fire_channel_read_complete(ctx);
}

static void session_user_event(weft_ctx *ctx, void *event) {
  rpc_conn *c = weft_ctx_state(ctx);
  if (event == &weft_event_read_resumed)
    kv_turn_reset(&c->turn);
  weft_ctx_fire_user_event(ctx, event);
}

/* The channel is going: the session ends. */
static void session_removed(weft_ctx *ctx) {
  rpc_conn *c = weft_ctx_state(ctx);
  weft_channel_set_user_data(weft_ctx_channel(ctx), NULL);
  if (c->started)
    kv_session_fini(&c->sess);
  free(c);
}

static const weft_handler session_handler = {
    .name = "kv-session",
    .channel_active = session_active,
    .channel_read_complete = session_read_complete,
    .user_event = session_user_event,
    .handler_removed = session_removed};

void kv_rpc_channel_init(weft_channel *ch, void *arg) {
  kv_server *srv = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  rpc_conn *c = calloc(1, sizeof *c);
  if (c != NULL)
    c->srv = srv;
  const weft_rpc_codec_options *o = srv->shared.auth.default_pass
                                        ? &srv->limits.rpc_unauth
                                        : &srv->limits.rpc;
  if (c == NULL || weft_rpc_codec_add_last(p, "rpc", o) < 0 ||
      kv_conn_limits_watch(&srv->limits, ch, "rpc") < 0 ||
      weft_flush_consolidation_add_last(p, "flush", NULL) < 0 ||
      weft_pipeline_add_last(p, "session", &session_handler, c) < 0) {
    free(c);
    weft_channel_close(ch, WEFT_PROMISE_NONE);
    return;
  }
  /* From here the session handler owns c (handler_removed frees it). */
  if (weft_rpc_server_add_last(p, "kv", srv->methods, srv->n_methods) < 0)
    weft_channel_close(ch, WEFT_PROMISE_NONE);
}
