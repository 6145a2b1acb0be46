/* The KV client (client.h): a kv_client wraps one channel whose pipeline
 * is flush consolidation, the RPC codec, the RPC client and a small handler
 * of its own. Everything about a client is touched on its loop thread only,
 * except the cross-thread queue (under `lock`) and the reference count. */
#include "client.h"

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

static bool on_loop_thread(void) { return weft_loop_current() != NULL; }

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

static void client_unref(kv_client *c) {
  /* acq_rel: the last owner must see every other owner's writes. */
  if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
    return;
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

static void on_rpc_reply(void *arg, int err, weft_rpc_msg *m) {
  call *k = arg;
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
    go_down(c, WEFT_ECLOSED);
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
    go_down(c, WEFT_ECLOSED);
  weft_ctx_fire_channel_inactive(ctx);
}

static void kv_user_event(weft_ctx *ctx, void *event);

static const weft_handler kv_handler = {.name = "kv_client",
                                        .channel_inactive = kv_inactive,
                                        .user_event = kv_user_event,
                                        .handler_removed = kv_handler_removed};

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
  if (err == 0 && m != NULL && kv_reply_parse(m->payload, &r, 1) < 0)
    err = WEFT_EPROTO;
  if (c->state != CLIENT_CONNECTING) {
    /* closed meanwhile: the calls have failed already */
  } else if (err < 0 || m == NULL) {
    connect_failed(c, err < 0 ? err : WEFT_EPROTO);
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
    pthread_mutex_destroy(&c->lock);
    secret_free(c->auth_pass);
    free(c->auth_user);
    weft_tls_context_release(c->tls);
    free(c->tls_name);
    free(c);
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
  *k = (call){.client = c,
              .cb = cb,
              .arg = arg,
              .timeout_ns = timeout_ns,
              .cmd = (uint16_t)cmd,
              .argc = argc,
              .argv = (kv_arg *)(k + 1)};
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
  *k = (call){.client = c,
              .cb = cb,
              .arg = arg,
              .timeout_ns = timeout_ns,
              .cmd = (uint16_t)cmd,
              .pooled = true};
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

/* Returns what weft_loop_execute said: < 0 when the loop has finished and
 * `cb` will never run. */
static int close_start(kv_client *c, kv_closed_cb cb, void *arg) {
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
    close_start(c, cb, arg);
}

/* ---- replies ---- */

typedef struct parser {
  const uint8_t *p;
  size_t left;
  kv_reply *nodes; /* NULL: only count */
  size_t max, used;
} parser;

static int parse_len(parser *ps, uint64_t *len) {
  int n = weft_varint_decode(ps->p, ps->left, len);
  if (n <= 0)
    return WEFT_EBADFRAME;
  ps->p += n;
  ps->left -= (size_t)n;
  return 0;
}

static int parse_array(parser *ps, kv_reply *r, int depth);

/* One value into `r` (NULL when counting). */
static int parse_value(parser *ps, kv_reply *r, int depth) {
  if (ps->left < 1)
    return WEFT_EBADFRAME;
  kv_reply v = {.tag = *ps->p};
  ps->p++, ps->left--;
  uint64_t len;
  switch (v.tag) {
  case KV_TAG_NULL:
    break;
  case KV_TAG_INTEGER:
    if (ps->left < 8)
      return WEFT_EBADFRAME;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
      u = u << 8 | ps->p[i];
    v.integer = (int64_t)u;
    ps->p += 8, ps->left -= 8;
    break;
  case KV_TAG_SIMPLE:
  case KV_TAG_ERROR:
  case KV_TAG_BULK:
    if (parse_len(ps, &len) < 0 || len > ps->left)
      return WEFT_EBADFRAME;
    v.str = ps->p;
    v.len = (size_t)len;
    ps->p += len, ps->left -= (size_t)len;
    break;
  case KV_TAG_ARRAY:
    return parse_array(ps, r, depth);
  default:
    return WEFT_EBADFRAME;
  }
  if (r != NULL)
    *r = v;
  return 0;
}

/* An array's elements take the next `count` nodes, so they are contiguous;
 * nested arrays take theirs after. */
static int parse_array(parser *ps, kv_reply *r, int depth) {
  uint64_t count;
  /* Every element takes at least its tag byte: a larger count is a lie. */
  if (depth >= KV_REPLY_MAX_DEPTH || parse_len(ps, &count) < 0 ||
      count > ps->left)
    return WEFT_EBADFRAME;
  kv_reply *elem = NULL;
  if (ps->nodes != NULL) {
    if (count > ps->max - ps->used)
      return WEFT_ENOSPC;
    elem = ps->nodes + ps->used;
  }
  ps->used += (size_t)count;
  for (uint64_t i = 0; i < count; i++) {
    int rc = parse_value(ps, elem != NULL ? &elem[i] : NULL, depth + 1);
    if (rc < 0)
      return rc;
  }
  if (r != NULL)
    *r = (kv_reply){.tag = KV_TAG_ARRAY,
                    .len = (size_t)count,
                    .elem = count > 0 ? elem : NULL};
  return 0;
}

static int parse_root(const weft_buf *payload, kv_reply *nodes, size_t max) {
  if (payload == NULL)
    return WEFT_EBADFRAME;
  parser ps = {.p = weft_buf_rptr(payload),
               .left = weft_buf_readable(payload),
               .nodes = nodes,
               .max = max,
               .used = 1};
  if (nodes != NULL && max < 1)
    return WEFT_ENOSPC;
  int rc = parse_value(&ps, nodes, 0);
  if (rc < 0)
    return rc;
  if (ps.left != 0)
    return WEFT_EBADFRAME; /* one value per reply */
  /* A count is bounded by the payload's bytes, which the codec bounds. */
  return ps.used > INT32_MAX ? WEFT_EBADFRAME : (int)ps.used;
}

int kv_reply_count(const weft_buf *payload) {
  return parse_root(payload, NULL, 0);
}

int kv_reply_parse(const weft_buf *payload, kv_reply *nodes, size_t max_nodes) {
  return parse_root(payload, nodes, max_nodes);
}

static void dup_size(const kv_reply *r, size_t *nodes, size_t *bytes) {
  if (r->tag == KV_TAG_ARRAY) {
    *nodes += r->len;
    for (size_t i = 0; i < r->len; i++)
      dup_size(&r->elem[i], nodes, bytes);
  } else {
    *bytes += r->len;
  }
}

typedef struct dup_state {
  kv_reply *nodes; /* next free node */
  uint8_t *bytes;  /* next free byte */
} dup_state;

static void dup_into(const kv_reply *r, kv_reply *to, dup_state *d) {
  *to = *r;
  if (r->tag == KV_TAG_ARRAY) {
    kv_reply *elem = d->nodes;
    d->nodes += r->len;
    to->elem = r->len > 0 ? elem : NULL;
    for (size_t i = 0; i < r->len; i++)
      dup_into(&r->elem[i], &elem[i], d);
  } else if (r->str != NULL) {
    if (r->len > 0)
      memcpy(d->bytes, r->str, r->len);
    to->str = d->bytes;
    d->bytes += r->len;
  }
}

kv_reply *kv_reply_dup(const kv_reply *r) {
  size_t nodes = 1, bytes = 0;
  dup_size(r, &nodes, &bytes);
  kv_reply *copy = malloc(nodes * sizeof *copy + bytes + 1);
  if (copy == NULL)
    return NULL;
  dup_state d = {.nodes = copy + 1, .bytes = (uint8_t *)(copy + nodes)};
  dup_into(r, copy, &d);
  return copy;
}

void kv_reply_free(kv_reply *r) { free(r); }

static bool reply_says(const kv_reply *r, const char *text) {
  size_t n = strlen(text);
  for (size_t i = 0; i + n <= r->len; i++)
    if (memcmp(r->str + i, text, n) == 0)
      return true;
  return false;
}

int kv_reply_error_code(const kv_reply *r) {
  if (!kv_reply_is_error(r))
    return 0;
  static const char *const denied[] = {"NOAUTH ", "WRONGPASS ", "DENIED "};
  for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++)
    if (r->len >= strlen(denied[i]) &&
        memcmp(r->str, denied[i], strlen(denied[i])) == 0)
      return WEFT_EACCES;
  static const int codes[] = {WEFT_EINVAL, WEFT_ERANGE, WEFT_EMSGSIZE};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    if (reply_says(r, kv_error_message(codes[i])))
      return codes[i];
  return reply_says(r, "syntax error") ? WEFT_EINVAL : WEFT_EPROTO;
}

/* ---- blocking wrappers ---- */

typedef struct waiter {
  pthread_mutex_t m;
  pthread_cond_t cv;
  bool done;
  int err;
  kv_reply *reply;
} waiter;

static void waiter_init(waiter *w) {
  *w = (waiter){.done = false};
  pthread_mutex_init(&w->m, NULL);
  pthread_cond_init(&w->cv, NULL);
}

/* The signal is sent under the mutex, so the waiter cannot destroy the
 * condition variable while signal() still uses it. */
static void waiter_wake(waiter *w, int err) {
  pthread_mutex_lock(&w->m);
  w->err = err;
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->m);
}

static int waiter_wait(waiter *w) {
  pthread_mutex_lock(&w->m);
  while (!w->done)
    pthread_cond_wait(&w->cv, &w->m);
  pthread_mutex_unlock(&w->m);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->m);
  return w->err;
}

static void sync_connected(void *arg, kv_client *c, int status) {
  (void)c;
  waiter_wake(arg, status);
}

int kv_sync_connect(kv_client **out, weft_loop_group *group, const char *uri,
                    const kv_client_options *opts) {
  if (on_loop_thread())
    return WEFT_EINVAL;
  waiter w;
  waiter_init(&w);
  kv_client *c;
  int rc = kv_client_connect(&c, group, NULL, uri, opts, sync_connected, &w);
  if (rc < 0) {
    waiter_wake(&w, rc);
    waiter_wait(&w);
    return rc;
  }
  rc = waiter_wait(&w);
  if (rc < 0) {
    kv_sync_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

static void sync_replied(void *arg, int err, const kv_reply *reply) {
  waiter *w = arg;
  if (err == 0 && (w->reply = kv_reply_dup(reply)) == NULL)
    err = WEFT_ENOMEM;
  waiter_wake(w, err);
}

int kv_sync_call(kv_client *c, int cmd, size_t argc, const kv_arg *argv,
                 uint64_t timeout_ns, kv_reply **out) {
  if (on_loop_thread() || out == NULL)
    return WEFT_EINVAL;
  waiter w;
  waiter_init(&w);
  int rc = kv_client_call(c, cmd, argc, argv, timeout_ns, sync_replied, &w);
  if (rc < 0)
    waiter_wake(&w, rc);
  rc = waiter_wait(&w);
  *out = rc == 0 ? w.reply : NULL;
  return rc;
}

/* A sync call whose reply must have tag `want` (or NULL for GET/SET). */
static int sync_expect(kv_client *c, int cmd, size_t argc, const kv_arg *argv,
                       uint8_t want, kv_reply **out) {
  kv_reply *r;
  int rc = kv_sync_call(c, cmd, argc, argv, 0, &r);
  if (rc < 0)
    return rc;
  if (r->tag == KV_TAG_ERROR)
    rc = kv_reply_error_code(r);
  else if (r->tag != want && r->tag != KV_TAG_NULL)
    rc = WEFT_EPROTO;
  if (rc < 0 || out == NULL) {
    kv_reply_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

int kv_sync_get(kv_client *c, const void *key, size_t klen, char **val,
                size_t *len) {
  kv_arg a[] = {{key, klen}};
  kv_reply *r;
  int rc = sync_expect(c, KV_CMD_GET, 1, a, KV_TAG_BULK, &r);
  if (rc < 0)
    return rc;
  if (r->tag == KV_TAG_NULL) {
    kv_reply_free(r);
    return WEFT_ENOENT;
  }
  char *copy = malloc(r->len + 1);
  if (copy != NULL) {
    memcpy(copy, r->str, r->len);
    copy[r->len] = '\0';
    *val = copy;
    if (len != NULL)
      *len = r->len;
  }
  kv_reply_free(r);
  return copy != NULL ? 0 : WEFT_ENOMEM;
}

int kv_sync_set(kv_client *c, const void *key, size_t klen, const void *val,
                size_t vlen) {
  kv_arg a[] = {{key, klen}, {val, vlen}};
  return sync_expect(c, KV_CMD_SET, 2, a, KV_TAG_SIMPLE, NULL);
}

static int sync_integer(kv_client *c, int cmd, const void *key, size_t klen,
                        int64_t *value) {
  kv_arg a[] = {{key, klen}};
  kv_reply *r;
  int rc = sync_expect(c, cmd, 1, a, KV_TAG_INTEGER, &r);
  if (rc < 0)
    return rc;
  if (r->tag != KV_TAG_INTEGER)
    rc = WEFT_EPROTO;
  else if (value != NULL)
    *value = r->integer;
  kv_reply_free(r);
  return rc;
}

int kv_sync_del(kv_client *c, const void *key, size_t klen, int64_t *n) {
  return sync_integer(c, KV_CMD_DEL, key, klen, n);
}

int kv_sync_incr(kv_client *c, const void *key, size_t klen, int64_t *value) {
  return sync_integer(c, KV_CMD_INCR, key, klen, value);
}

static void sync_closed(void *arg) { waiter_wake(arg, 0); }

void kv_sync_close(kv_client *c) {
  if (c == NULL)
    return;
  if (on_loop_thread()) {
    kv_client_close(c, NULL, NULL);
    return;
  }
  waiter w;
  waiter_init(&w);
  if (close_start(c, sync_closed, &w) < 0)
    waiter_wake(&w, 0);
  waiter_wait(&w);
}
