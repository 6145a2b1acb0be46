/* SPDX-License-Identifier: Apache-2.0 */
/* The KV client (client.h): a kv_client wraps one channel whose pipeline
 * is flush consolidation, the RPC codec, the RPC client and a small handler
 * of its own. Everything about a client is touched on its loop thread only,
 * except the cross-thread queue (under `lock`) and the reference count. */
#include "client.h"
#include "client_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/flush_consolidation.h>
#include <weft/log.h>
#include <weft/rpc.h>
#include <weft/rpc_client.h>
#include <weft/varint.h>

/* Calls the loop makes without malloc: finished calls go back to a free
 * list of at most this many. */
#define FREE_CALLS_MAX 1024
/* Replies with at most this many values are parsed into the stack. */
#define STACK_NODES 16

typedef enum client_state {
  CLIENT_CONNECTING, /* calls wait in `waiting` */
  CLIENT_ACTIVE,     /* calls go out at once */
  CLIENT_DOWN        /* connect failed or channel closed: calls fail */
} client_state;

typedef struct call {
  struct call *next;
  kv_client *client;
  kv_reply_cb cb;
  void *arg;
  uint64_t timeout_ns;
  weft_buf *payload; /* encoded arguments, until handed to the RPC client */
  uint16_t cmd;
  bool pooled; /* from the free list's size class (no inline args) */
  size_t argc; /* cross-thread calls: arguments copied after the struct */
  kv_arg *argv;
} call;

typedef struct call_fifo {
  call *head, *tail;
} call_fifo;

struct kv_client {
  /* immutable after kv_client_connect */
  weft_loop *loop;
  kv_client_options o;
  _Atomic int refs; /* the user's, a scheduled drain task's, the channel's */

  /* cross-thread queue */
  pthread_mutex_t lock;
  call_fifo queued;     /* calls from other threads */
  bool drain_scheduled; /* a drain task is queued on the loop */
  bool closing;         /* kv_client_close was called */

  /* loop thread only */
  client_state state;
  int down_err;     /* what calls fail with once DOWN */
  weft_channel *ch; /* retained while the pipeline exists */
  weft_rpc_client *rpc;
  call_fifo waiting;  /* calls made while CONNECTING */
  size_t outstanding; /* calls accepted whose callback has not run */
  bool channel_done;  /* the pipeline is gone (or was never built) */
  bool user_closed;   /* the close task ran */
  bool finished;      /* the closed callback ran */
  kv_connect_cb connect_cb;
  void *connect_arg;
  kv_closed_cb closed_cb;
  void *closed_arg;
  call *free_calls;
  size_t n_free_calls;
  char *auth_user, *auth_pass; /* copies of the options', or NULL */
  weft_tls_context *tls;       /* a reference, or NULL: plaintext */
  char *tls_name;              /* a copy of tls_server_name, or NULL */
  bool tcp_up;                 /* the connect succeeded */
  bool tls_up;                 /* the TLS handshake completed */
  bool reported;               /* the connect callback ran */
  bool resp_peer;              /* the server's first bytes were RESP */
};

/* ---- small helpers ---- */

static void fifo_push(call_fifo *f, call *c) {
  c->next = NULL;
  if (f->tail != NULL)
    f->tail->next = c;
  else
    f->head = c;
  f->tail = c;
}

static call *fifo_take_all(call_fifo *f) {
  call *head = f->head;
  f->head = f->tail = NULL;
  return head;
}

/* Frees a copy of a password, overwritten first. NULL is ignored. */
static void secret_free(char *p) {
  if (p != NULL) {
    explicit_bzero(p, strlen(p));
    free(p);
  }
}

static void client_ref(kv_client *c) {
  atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

/* Frees `c` and what it owns: at its last reference, or when its
 * connect could not start. */
static void client_free(kv_client *c) {
  for (call *k = c->free_calls, *next; k != NULL; k = next) {
    next = k->next;
    free(k);
  }
  pthread_mutex_destroy(&c->lock);
  secret_free(c->auth_pass);
  free(c->auth_user);
  weft_tls_context_release(c->tls);
  free(c->tls_name);
  free(c);
}

static void client_unref(kv_client *c) {
  /* acq_rel: the last owner must see every other owner's writes. */
  if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
    client_free(c);
}

static call *call_get(kv_client *c) {
  call *k = c->free_calls;
  if (k != NULL) {
    c->free_calls = k->next;
    c->n_free_calls--;
    return k;
  }
  k = malloc(sizeof *k);
  if (k != NULL)
    k->pooled = true;
  return k;
}

static void call_put(kv_client *c, call *k) {
  weft_buf_release(k->payload);
  if (k->pooled && c->n_free_calls < FREE_CALLS_MAX) {
    k->next = c->free_calls;
    c->free_calls = k;
    c->n_free_calls++;
    return;
  }
  free(k);
}

/* Encodes the argument list into a buffer of the loop's pool. Loop thread. */
static int encode(kv_client *c, size_t argc, const kv_arg *argv,
                  weft_buf **out) {
  size_t need = kv_proto_args_size(argc, argv);
  if (need > UINT32_MAX)
    return WEFT_EMSGSIZE;
  weft_buf *b = weft_buf_alloc(weft_loop_pool(c->loop), need);
  if (b == NULL)
    return WEFT_ENOMEM;
  kv_proto_write_args(b, argc, argv); /* sized above: cannot fail */
  *out = b;
  return 0;
}

/* ---- finishing ---- */

/* Runs the closed callback and drops the user's reference once the user
 * closed the client, the channel is gone and no callback is left. */
static void maybe_finish(kv_client *c) {
  if (!c->user_closed || !c->channel_done || c->outstanding > 0 || c->finished)
    return;
  c->finished = true;
  if (c->closed_cb != NULL)
    c->closed_cb(c->closed_arg);
  client_unref(c);
}

/* Runs a call's callback with `err` or `reply` and retires the call. */
static void call_complete(call *k, int err, const kv_reply *reply) {
  kv_client *c = k->client;
  kv_reply_cb cb = k->cb;
  void *arg = k->arg;
  call_put(c, k);
  client_ref(c); /* the callback may close the client */
  cb(arg, err, reply);
  c->outstanding--;
  maybe_finish(c);
  client_unref(c);
}

/* ---- replies ---- */

/* What a call or the connect fails with when the channel closed: RESP's
 * answer to weft RPC closes it too, and says so (client.h). */
static int closed_err(const kv_client *c, int err) {
  return err == WEFT_ECLOSED && c->resp_peer ? WEFT_EPROTO : err;
}

static void on_rpc_reply(void *arg, int err, weft_rpc_msg *m) {
  call *k = arg;
  err = closed_err(k->client, err);
  if (err < 0 || m == NULL) {
    weft_rpc_msg_release(m);
    call_complete(k, err < 0 ? err : WEFT_EPROTO, NULL);
    return;
  }
  kv_reply stack[STACK_NODES], *nodes = stack;
  int n = kv_reply_count(m->payload);
  if (n > STACK_NODES && (nodes = malloc((size_t)n * sizeof *nodes)) == NULL)
    n = WEFT_ENOMEM;
  if (n > 0)
    n = kv_reply_parse(m->payload, nodes, (size_t)n);
  if (n < 0)
    weft_log(WEFT_LOG_WARN, "kv client: bad reply to %s: %s",
             kv_cmd_name(k->cmd), weft_strerror(n));
  call_complete(k, n < 0 ? n : 0, n < 0 ? NULL : nodes);
  if (nodes != stack)
    free(nodes);
  weft_rpc_msg_release(m);
}

/* Hands an encoded call to the RPC client; failures go to its callback. */
static void send_call(kv_client *c, call *k) {
  weft_buf *payload = k->payload;
  k->payload = NULL; /* the RPC client takes it, also on failure */
  int64_t id = weft_rpc_client_call(c->rpc, k->cmd, payload, k->timeout_ns,
                                    on_rpc_reply, k);
  if (id < 0)
    call_complete(k, (int)id, NULL);
}

/* Where a call accepted on the loop thread goes, by state. */
static void route_call(kv_client *c, call *k) {
  switch (c->state) {
  case CLIENT_CONNECTING:
    fifo_push(&c->waiting, k);
    break;
  case CLIENT_ACTIVE:
    send_call(c, k);
    break;
  case CLIENT_DOWN:
    call_complete(k, c->down_err, NULL);
    break;
  }
}

static void fail_calls(call *head, int err) {
  for (call *k = head, *next; k != NULL; k = next) {
    next = k->next;
    call_complete(k, err, NULL);
  }
}

static void go_down(kv_client *c, int err) {
  c->state = CLIENT_DOWN;
  c->down_err = err;
  fail_calls(fifo_take_all(&c->waiting), err);
}

/* Our handler drops the client's channel reference while the close
 * unwinds, so hold one of our own across the call. */
static void close_channel(weft_channel *ch) {
  weft_channel_retain(ch);
  weft_channel_close(ch, WEFT_PROMISE_NONE);
  weft_channel_release(ch);
}

/* ---- the channel ---- */

static void kv_handler_removed(weft_ctx *ctx) {
  kv_client *c = weft_ctx_state(ctx);
  if (c->state != CLIENT_DOWN)
    go_down(c, closed_err(c, WEFT_ECLOSED));
  weft_channel_release(c->ch);
  c->ch = NULL;
  c->rpc = NULL;
  c->channel_done = true;
  maybe_finish(c);
  client_unref(c); /* the channel's reference */
}

static void kv_inactive(weft_ctx *ctx) {
  kv_client *c = weft_ctx_state(ctx);
  if (c->state != CLIENT_DOWN)
    go_down(c, closed_err(c, WEFT_ECLOSED));
  weft_ctx_fire_channel_inactive(ctx);
}

static void kv_user_event(weft_ctx *ctx, void *event);

static const weft_handler kv_handler = {.name = "kv_client",
                                        .channel_inactive = kv_inactive,
                                        .user_event = kv_user_event,
                                        .handler_removed = kv_handler_removed};

static void connect_failed(kv_client *c, int err);

/* The first bytes the server sends, before the RPC codec sees them: a
 * reply of weft RPC starts with its version byte (WEFT_RPC_VERSION), a
 * RESP one with a type byte ('-' for the error a Redis port answers to
 * weft RPC's bytes). RESP's bytes close the connection with the calls
 * failing WEFT_EPROTO, instead of the codec's "unknown protocol version";
 * the handler leaves after the first read either way. */
static void first_bytes_read(weft_ctx *ctx, void *msg) {
  kv_client *c = weft_ctx_state(ctx);
  weft_buf *b = weft_msg_is(msg, &weft_buf_msg_type) ? msg : NULL;
  if (b == NULL || weft_buf_readable(b) == 0) {
    weft_ctx_fire_channel_read(ctx, msg);
    return;
  }
  uint8_t first = weft_buf_get_u8(b, b->reader_index);
  weft_pipeline_remove(weft_channel_pipeline(weft_ctx_channel(ctx)),
                       "kv_first_bytes");
  if (strchr("+-:$*_,#!=%~>(|", first) == NULL || first == '\0') {
    weft_ctx_fire_channel_read(ctx, msg);
    return;
  }
  weft_msg_release(msg);
  c->resp_peer = true;
  client_ref(c); /* closing the channel below may drop the others */
  if (c->state == CLIENT_CONNECTING)
    connect_failed(c, WEFT_EPROTO); /* the AUTH sent on connect */
  else if (c->ch != NULL)
    close_channel(c->ch);
  client_unref(c);
}

static const weft_handler first_bytes_handler = {
    .name = "kv_first_bytes", .channel_read = first_bytes_read};

static void init_channel(weft_channel *ch, void *arg) {
  kv_client *c = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  weft_flush_consolidation_options fo;
  weft_flush_consolidation_options_init(&fo);
  if (c->o.explicit_flush_after > 0)
    fo.explicit_flush_after_flushes = c->o.explicit_flush_after;
  weft_rpc_codec_options co;
  weft_rpc_codec_options_init(&co);
  co.max_payload = c->o.max_reply_bytes;
  weft_rpc_client_options ro = {.default_timeout_ns = c->o.default_timeout_ns};
  int rc = c->tls != NULL ? weft_tls_add_first(p, c->tls, c->tls_name) : 0;
  if (rc == 0)
    rc = weft_pipeline_add_last(p, "kv_first_bytes", &first_bytes_handler, c);
  if (rc == 0)
    rc = weft_flush_consolidation_add_last(p, "flush", &fo);
  if (rc == 0)
    rc = weft_rpc_codec_add_last(p, "rpc", &co);
  if (rc == 0)
    rc = weft_rpc_client_add_last(p, "rpc_client", &ro, &c->rpc);
  if (rc == 0) {
    /* The handler owns the channel's reference from here on. */
    c->ch = weft_channel_retain(ch);
    rc = weft_pipeline_add_last(p, "kv_client", &kv_handler, c);
    if (rc < 0)
      weft_channel_release(ch);
  }
  if (rc < 0) {
    /* Without our handler nothing would tell us the channel went away:
     * fail now and let the connect report it. */
    weft_log(WEFT_LOG_ERROR, "kv client: cannot build the pipeline: %s",
             weft_strerror(rc));
    c->ch = NULL;
    c->rpc = NULL;
    close_channel(ch);
  }
}

/* Runs the connect callback with `status`, once. */
static void report_connect(kv_client *c, int status) {
  if (c->reported)
    return;
  c->reported = true;
  if (c->connect_cb != NULL)
    c->connect_cb(c->connect_arg, c, status);
}

/* The connection is usable: waiting calls go out, the connect callback
 * hears 0. */
static void activate(kv_client *c) {
  c->state = CLIENT_ACTIVE;
  for (call *k = fifo_take_all(&c->waiting), *next; k != NULL; k = next) {
    next = k->next;
    send_call(c, k);
  }
  report_connect(c, 0);
}

/* The connection failed before it was usable (connect or AUTH): waiting
 * calls and the connect callback hear `err`; the channel, if any, closes. */
static void connect_failed(kv_client *c, int err) {
  go_down(c, err);
  report_connect(c, err);
  if (c->ch != NULL)
    close_channel(c->ch);
}

/* The answer to the AUTH sent on connect (auth_start). Redis' error for a
 * server without passwords lets the connection go on, as redis-cli does;
 * any other error reply fails the connect with WEFT_EACCES. */
static void on_auth_reply(void *arg, int err, weft_rpc_msg *m) {
  kv_client *c = arg;
  kv_reply r = {.tag = KV_TAG_NULL};
  int parsed = 0;
  err = closed_err(c, err);
  if (err == 0 && m != NULL && (parsed = kv_reply_parse(m->payload, &r, 1)) < 0)
    err = parsed; /* not WEFT_EPROTO, which says RESP */
  if (c->state != CLIENT_CONNECTING) {
    /* closed meanwhile: the calls have failed already */
  } else if (err < 0 || m == NULL) {
    connect_failed(c, err < 0 ? err : WEFT_EBADFRAME);
  } else if (r.tag == KV_TAG_ERROR &&
             !(r.len >= 26 &&
               memcmp(r.str, "ERR AUTH <password> called", 26) == 0)) {
    weft_log(WEFT_LOG_WARN, "kv client: AUTH refused: %.*s", (int)r.len,
             (const char *)r.str);
    connect_failed(c, WEFT_EACCES);
  } else {
    if (r.tag == KV_TAG_ERROR)
      weft_log(WEFT_LOG_WARN, "kv client: the server has no password set: "
                              "AUTH not needed");
    activate(c);
  }
  weft_rpc_msg_release(m);
  client_unref(c); /* auth_start's reference */
}

/* Sends AUTH [user] password ahead of every call. Returns 0, or the error
 * that fails the connect. */
static int auth_start(kv_client *c) {
  kv_arg argv[2];
  size_t argc = 0;
  if (c->auth_user != NULL)
    argv[argc++] = (kv_arg){c->auth_user, strlen(c->auth_user)};
  argv[argc++] = (kv_arg){c->auth_pass, strlen(c->auth_pass)};
  weft_buf *payload;
  int rc = encode(c, argc, argv, &payload);
  if (rc < 0)
    return rc;
  client_ref(c); /* until on_auth_reply */
  int64_t id = weft_rpc_client_call(c->rpc, KV_CMD_AUTH, payload,
                                    c->o.default_timeout_ns, on_auth_reply, c);
  if (id < 0) {
    client_unref(c);
    return (int)id;
  }
  return 0;
}

/* The connection is up (and secure, with TLS): AUTH first when there is
 * a password, else the calls go. */
static void connection_ready(kv_client *c) {
  if (c->auth_pass != NULL && c->rpc != NULL) {
    int rc = auth_start(c); /* calls wait in `waiting` until it answers */
    if (rc < 0)
      connect_failed(c, rc);
  } else {
    activate(c);
  }
}

/* TLS: the handshake's outcome completes the connect. A failure's reason
 * is logged here: the close that follows removes the handlers before the
 * exception would reach the tail. */
static void kv_user_event(weft_ctx *ctx, void *event) {
  kv_client *c = weft_ctx_state(ctx);
  if (weft_msg_is(event, &weft_tls_event_type) &&
      c->state == CLIENT_CONNECTING && !c->user_closed) {
    const weft_tls_event *ev = event;
    client_ref(c); /* closing the channel below may drop the others */
    if (ev->kind == WEFT_TLS_HANDSHAKE_DONE) {
      c->tls_up = true;
      if (c->tcp_up)
        connection_ready(c);
    } else if (ev->kind == WEFT_TLS_HANDSHAKE_FAILED) {
      weft_log(WEFT_LOG_WARN, "kv client: %s",
               ev->reason != NULL ? ev->reason : "TLS handshake failed");
      connect_failed(c, ev->status < 0 ? ev->status : WEFT_EPROTO);
    }
    client_unref(c);
  }
  weft_ctx_fire_user_event(ctx, event);
}

static void on_connect(weft_channel *ch, int status, void *arg) {
  kv_client *c = arg;
  client_ref(c); /* closing the channel below may drop the others */
  if (status == 0 && c->user_closed) {
    /* Closed while connecting: the calls have failed already. */
    close_channel(ch);
  } else if (status < 0) {
    go_down(c, status);
    report_connect(c, status);
  } else if (c->state == CLIENT_CONNECTING) {
    c->tcp_up = true;
    /* With TLS, the handshake's event goes on (kv_user_event). */
    if (c->tls == NULL || c->tls_up)
      connection_ready(c);
  } else {
    report_connect(c, c->down_err); /* it closed on the way up */
  }
  if (ch == NULL || c->ch == NULL) {
    /* No pipeline of ours exists, so no handler_removed will come. */
    if (!c->channel_done) {
      c->channel_done = true;
      maybe_finish(c);
      client_unref(c);
    }
  }
  client_unref(c);
}

/* ---- public: connect, call, close ---- */

void kv_client_options_init(kv_client_options *o) {
  weft_channel_config_init(&o->channel);
  o->default_timeout_ns = 0;
  o->max_reply_bytes = WEFT_RPC_MAX_PAYLOAD_DEFAULT + 64 * 1024;
  o->explicit_flush_after = 256;
  o->user = NULL;
  o->password = NULL;
  o->tls = NULL;
  o->tls_server_name = NULL;
}

int kv_client_connect(kv_client **out, weft_loop_group *group, weft_loop *loop,
                      const char *uri, const kv_client_options *opts,
                      kv_connect_cb cb, void *arg) {
  if (out == NULL || uri == NULL || (group == NULL && loop == NULL))
    return WEFT_EINVAL;
  kv_client *c = calloc(1, sizeof *c);
  if (c == NULL)
    return WEFT_ENOMEM;
  if (opts != NULL)
    c->o = *opts;
  else
    kv_client_options_init(&c->o);
  if (c->o.password != NULL &&
      ((c->auth_pass = strdup(c->o.password)) == NULL ||
       (c->o.user != NULL && (c->auth_user = strdup(c->o.user)) == NULL))) {
    secret_free(c->auth_pass);
    free(c);
    return WEFT_ENOMEM;
  }
  if (c->o.tls_server_name != NULL &&
      (c->tls_name = strdup(c->o.tls_server_name)) == NULL) {
    secret_free(c->auth_pass);
    free(c->auth_user);
    free(c);
    return WEFT_ENOMEM;
  }
  c->o.user = c->o.password = NULL; /* the copies above are the client's */
  c->o.tls_server_name = NULL;
  if (c->o.tls != NULL)
    c->tls = weft_tls_context_retain(c->o.tls);
  c->o.tls = NULL;
  c->loop = loop != NULL ? loop : weft_loop_group_next(group);
  c->connect_cb = cb;
  c->connect_arg = arg;
  c->state = CLIENT_CONNECTING;
  pthread_mutex_init(&c->lock, NULL);
  /* One reference for the user, one for the channel (dropped when its
   * pipeline goes, or at once when no channel could be made). */
  atomic_init(&c->refs, 2);
  weft_bootstrap b = {.loop = c->loop,
                      .connect = uri,
                      .init = init_channel,
                      .init_arg = c,
                      .options = c->o.channel,
                      .on_connect = on_connect,
                      .connect_arg = c};
  int rc = weft_bootstrap_connect(&b);
  if (rc < 0) {
    client_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

weft_loop *kv_client_loop(const kv_client *c) { return c->loop; }

/* Counts a cross-thread call as outstanding once the loop holds it. */
static void count_queued(call *head, kv_client *c) {
  for (call *k = head; k != NULL; k = k->next)
    c->outstanding++;
}

/* The loop's side of the cross-thread queue. */
static void drain_task(void *arg) {
  kv_client *c = arg;
  pthread_mutex_lock(&c->lock);
  call *head = fifo_take_all(&c->queued);
  c->drain_scheduled = false;
  pthread_mutex_unlock(&c->lock);
  count_queued(head, c);
  for (call *k = head, *next; k != NULL; k = next) {
    next = k->next;
    int rc = encode(c, k->argc, k->argv, &k->payload);
    if (rc < 0)
      call_complete(k, rc, NULL);
    else
      route_call(c, k);
  }
  client_unref(c); /* the task's reference */
}

/* A call of `cmd` on `c` answered to cb(arg); the other fields zero. */
static call call_of(kv_client *c, int cmd, uint64_t timeout_ns, kv_reply_cb cb,
                    void *arg) {
  return (call){.client = c,
                .cb = cb,
                .arg = arg,
                .timeout_ns = timeout_ns,
                .cmd = (uint16_t)cmd};
}

/* From another thread: copy the arguments, queue, wake the loop once. */
static int call_from_afar(kv_client *c, int cmd, size_t argc,
                          const kv_arg *argv, uint64_t timeout_ns,
                          kv_reply_cb cb, void *arg) {
  size_t bytes = sizeof(call) + argc * sizeof(kv_arg);
  for (size_t i = 0; i < argc; i++)
    bytes += argv[i].len;
  call *k = malloc(bytes);
  if (k == NULL)
    return WEFT_ENOMEM;
  *k = call_of(c, cmd, timeout_ns, cb, arg);
  k->argc = argc;
  k->argv = (kv_arg *)(k + 1);
  uint8_t *data = (uint8_t *)(k->argv + argc);
  for (size_t i = 0; i < argc; i++) {
    if (argv[i].len > 0)
      memcpy(data, argv[i].ptr, argv[i].len);
    k->argv[i] = (kv_arg){.ptr = data, .len = argv[i].len};
    data += argv[i].len;
  }
  int rc = 0;
  pthread_mutex_lock(&c->lock);
  if (c->closing) {
    rc = WEFT_ECLOSED;
  } else {
    fifo_push(&c->queued, k);
    if (!c->drain_scheduled) {
      client_ref(c);
      rc = weft_loop_execute(c->loop, drain_task, c);
      if (rc < 0) {
        c->queued.head = c->queued.tail = NULL; /* only k was queued */
        atomic_fetch_sub_explicit(&c->refs, 1, memory_order_relaxed);
      } else {
        c->drain_scheduled = true;
      }
    }
  }
  pthread_mutex_unlock(&c->lock);
  if (rc < 0)
    free(k);
  return rc;
}

int kv_client_call(kv_client *c, int cmd, size_t argc, const kv_arg *argv,
                   uint64_t timeout_ns, kv_reply_cb cb, void *arg) {
  if (c == NULL || cb == NULL || kv_cmd_name(cmd) == NULL ||
      (argc > 0 && argv == NULL))
    return WEFT_EINVAL;
  if (!weft_loop_in_loop(c->loop))
    return call_from_afar(c, cmd, argc, argv, timeout_ns, cb, arg);
  if (c->user_closed || c->state == CLIENT_DOWN)
    return WEFT_ECLOSED;
  call *k = call_get(c);
  if (k == NULL)
    return WEFT_ENOMEM;
  *k = call_of(c, cmd, timeout_ns, cb, arg);
  k->pooled = true;
  int rc = encode(c, argc, argv, &k->payload);
  if (rc < 0) {
    call_put(c, k);
    return rc;
  }
  c->outstanding++;
  if (c->state == CLIENT_CONNECTING) {
    fifo_push(&c->waiting, k);
    return 0;
  }
  weft_buf *payload = k->payload;
  k->payload = NULL;
  int64_t id = weft_rpc_client_call(c->rpc, k->cmd, payload, timeout_ns,
                                    on_rpc_reply, k);
  if (id < 0) {
    c->outstanding--;
    call_put(c, k);
    return (int)id;
  }
  return 0;
}

static void close_task(void *arg) {
  kv_client *c = arg;
  pthread_mutex_lock(&c->lock);
  call *head = fifo_take_all(&c->queued);
  pthread_mutex_unlock(&c->lock);
  c->user_closed = true;
  count_queued(head, c);
  fail_calls(head, WEFT_ECLOSED);
  if (c->state != CLIENT_DOWN)
    go_down(c, WEFT_ECLOSED);
  if (c->ch != NULL)
    close_channel(c->ch);
  maybe_finish(c);
  client_unref(c); /* the task's reference */
}

int kv__client_close_start(kv_client *c, kv_closed_cb cb, void *arg) {
  pthread_mutex_lock(&c->lock);
  c->closing = true;
  pthread_mutex_unlock(&c->lock);
  /* Written before the task is queued; read only by the loop after. */
  c->closed_cb = cb;
  c->closed_arg = arg;
  client_ref(c); /* the task's: closing the channel drops the others */
  int rc = weft_loop_execute(c->loop, close_task, c);
  if (rc < 0) {
    /* The loop has finished: its channels are gone, nothing can run. */
    weft_log(WEFT_LOG_WARN, "kv client: closed after its loop stopped");
  }
  return rc;
}

void kv_client_close(kv_client *c, kv_closed_cb cb, void *arg) {
  if (c != NULL)
    kv__client_close_start(c, cb, arg);
}
