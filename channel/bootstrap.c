/* SPDX-License-Identifier: Apache-2.0 */
/* Server and client bootstrap: endpoint to transport, listener on loop 0,
 * accepted channels spread over the loops round-robin (at most
 * max_connections open at once), or, for a transport that listens on every
 * loop (WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP), a listener per loop whose
 * connections stay on it; connects with a timeout. */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <weft/clock.h>
#include <weft/error.h>
#include <weft/log.h>

#include "channel/channel_internal.h"

/* Longest URI weft_endpoint_format writes: a scheme of 15, "://", a
 * bracketed host of 255, ':' and 5 digits, and the NUL. */
#define WEFT__URI_MAX (15 + 3 + 257 + 6 + 1)

struct weft_server {
  weft_loop_group *group;
  weft_listener *listeners; /* [0] on loop 0 at `ep`; one per loop for a
                               WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP transport */
  int n_listeners;
  atomic_int n_bound; /* listeners [0, n_bound) listen, address set */
  uint32_t id;        /* random, not 0: weft_listener_server_id */
  weft_endpoint ep;
  int backlog;
  weft_channel_init_cb child_init;
  void *child_init_arg;
  weft_channel_config child_options;
  int max_connections;     /* 0 = none */
  weft__conn_count *count; /* shared with the accepted channels */
};

/* ---- channel options ---- */

void weft_channel_config_init(weft_channel_config *cfg) {
  *cfg = (weft_channel_config){.tcp_nodelay = -1,
                               .so_sndbuf = -1,
                               .so_rcvbuf = -1,
                               .so_keepalive = -1,
                               .write_low_watermark = -1,
                               .write_high_watermark = -1,
                               .connect_timeout_ms = -1,
                               .flow_control = -1,
                               .output_limit = -1,
                               .idle_timeout_ms = -1,
                               .max_messages_per_read = -1,
                               .max_bytes_per_read = -1};
}

static int apply_one(weft_channel *ch, weft_channel_option opt, int64_t v) {
  if (v < 0)
    return 0;
  int rc = weft_channel_set_option(ch, opt, v);
  return rc == WEFT_ENOTSUP ? 0 : rc;
}

int weft_channel_config_apply(const weft_channel_config *cfg,
                              weft_channel *ch) {
  int rc = 0;
  /* Raise the high watermark first so a low one above the old high is
   * accepted (and the reverse order when lowering). */
  int64_t high = cfg->write_high_watermark, low = cfg->write_low_watermark;
  int64_t cur_high = 0;
  weft_channel_get_option(ch, WEFT_OPT_WRITE_HIGH_WATERMARK, &cur_high);
  bool high_first = high >= 0 && high > cur_high;
  if (high_first && (rc = apply_one(ch, WEFT_OPT_WRITE_HIGH_WATERMARK, high)))
    return rc;
  if ((rc = apply_one(ch, WEFT_OPT_WRITE_LOW_WATERMARK, low)) < 0)
    return rc;
  if (!high_first &&
      (rc = apply_one(ch, WEFT_OPT_WRITE_HIGH_WATERMARK, high)) < 0)
    return rc;
  if ((rc = apply_one(ch, WEFT_OPT_TCP_NODELAY, cfg->tcp_nodelay)) < 0 ||
      (rc = apply_one(ch, WEFT_OPT_SO_SNDBUF, cfg->so_sndbuf)) < 0 ||
      (rc = apply_one(ch, WEFT_OPT_SO_RCVBUF, cfg->so_rcvbuf)) < 0 ||
      (rc = apply_one(ch, WEFT_OPT_SO_KEEPALIVE, cfg->so_keepalive)) < 0 ||
      (rc = apply_one(ch, WEFT_OPT_CONNECT_TIMEOUT_MS,
                      cfg->connect_timeout_ms)) < 0 ||
      (rc = apply_one(ch, WEFT_OPT_FLOW_CONTROL, cfg->flow_control)) < 0 ||
      (rc = apply_one(ch, WEFT_OPT_OUTPUT_LIMIT, cfg->output_limit)) < 0 ||
      (rc = apply_one(ch, WEFT_OPT_IDLE_TIMEOUT_MS, cfg->idle_timeout_ms)) <
          0 ||
      (rc = apply_one(ch, WEFT_OPT_MAX_MESSAGES_PER_READ,
                      cfg->max_messages_per_read)) < 0 ||
      (rc = apply_one(ch, WEFT_OPT_MAX_BYTES_PER_READ,
                      cfg->max_bytes_per_read)) < 0)
    return rc;
  return 0;
}

/* ---- endpoint and transport lookup ---- */

/* A bootstrap's URI, parsed (the URI-taking entry points). */
static int parse_uri(const char *uri, weft_endpoint *ep) {
  char why[256];
  if (uri == NULL || weft_endpoint_parse(uri, ep, why, sizeof why) < 0) {
    weft_log(WEFT_LOG_ERROR, "bad endpoint \"%s\": %s",
             uri != NULL ? uri : "(null)", why);
    return WEFT_EINVAL;
  }
  return 0;
}

/* The transport that serves `ep` here (the one registry lookup of a bind
 * or a connect). `text` gets `ep` as a URI, for messages. */
static int transport_of(const weft_endpoint *ep, const weft_transport_ops **ops,
                        char *text, size_t text_len) {
  char why[256];
  if (weft_endpoint_format(ep, text, text_len) < 0)
    return WEFT_EINVAL;
  *ops = weft_transport_find(ep->transport, why, sizeof why);
  if (*ops == NULL) {
    weft_log(WEFT_LOG_ERROR, "endpoint \"%s\": %s", text, why);
    return WEFT_ENOTRANSPORT;
  }
  return 0;
}

/* ---- server ---- */

/* Listener `l` (of its server) starts listening: on the server's endpoint
 * for listener 0, on the same host at any free port for the others. Its
 * bound address is recorded for weft_listener_address_of. On `l`'s loop. */
static int listen_on_loop(void *arg) {
  weft_listener *l = arg;
  weft_server *srv = l->server;
  int err = 0;
  if (weft_transport_loop_state(l->transport, l->loop, &err) == NULL)
    return err;
  weft_endpoint ep = srv->ep;
  if (l->index > 0)
    ep.port = 0;
  err = l->transport->listen(l, &ep, srv->backlog);
  if (err < 0)
    return err;
  if (l->transport->listen_address == NULL ||
      l->transport->listen_address(l, l->address, sizeof l->address) < 0)
    snprintf(l->address, sizeof l->address, "%s:%u", ep.host,
             (unsigned)ep.port);
  return 0;
}

static int close_on_loop(void *arg) {
  weft_listener *l = arg;
  if (l->transport->listen_close != NULL)
    l->transport->listen_close(l);
  return 0;
}

/* Closes listeners [0, n) of `srv`, the last first. Not on their loops. */
static void listeners_close(weft_server *srv, int n) {
  while (n-- > 0)
    weft_loop_call(srv->listeners[n].loop, close_on_loop, &srv->listeners[n]);
}

/* Starts the server's listeners, one after the other (each on its loop):
 * one on loop 0, or one per loop for a transport with
 * WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP, whose connections stay on the loop
 * that accepted them. Returns 0 or the first error (logged; the listeners
 * started are closed again). */
static int listeners_start(weft_server *srv, const weft_transport_ops *ops,
                           const char *uri) {
  bool per_loop = (ops->caps & WEFT_TRANSPORT_CAP_LISTEN_PER_LOOP) != 0;
  int n = per_loop ? weft_loop_group_size(srv->group) : 1;
  srv->listeners = calloc((size_t)n, sizeof *srv->listeners);
  if (srv->listeners == NULL)
    return WEFT_ENOMEM;
  srv->n_listeners = n;
  for (int i = 0; i < n; i++) {
    weft_listener *l = &srv->listeners[i];
    *l = (weft_listener){.transport = ops,
                         .loop = weft_loop_group_get(srv->group, i),
                         .server = srv,
                         .index = i,
                         .accept_local = per_loop};
    int rc = weft_loop_call(l->loop, listen_on_loop, l);
    if (rc < 0) {
      if (i == 0)
        weft_log(WEFT_LOG_ERROR, "listen on %s: %s", uri, weft_strerror(rc));
      else
        weft_log(WEFT_LOG_ERROR, "listen on %s: the listener of loop %d: %s",
                 uri, i, weft_strerror(rc));
      listeners_close(srv, i);
      free(srv->listeners);
      srv->listeners = NULL;
      return rc;
    }
    atomic_store_explicit(&srv->n_bound, i + 1, memory_order_release);
  }
  return 0;
}

/* A random server id, not 0 (weft_listener_server_id). */
static uint32_t server_id_new(void) {
  uint32_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
      id = (uint32_t)(weft_now_ns() ^ ((uint64_t)getpid() << 16));
  }
  return id;
}

/* The share of a new server: its count and what refused connections get
 * (`reject_init`, then the `reject` message). */
static weft__conn_count *count_new(const char *reject,
                                   weft_channel_init_cb reject_init) {
  size_t len = reject != NULL ? strlen(reject) : 0;
  weft__conn_count *c = calloc(1, sizeof *c + len);
  if (c == NULL)
    return NULL;
  atomic_init(&c->refs, 1);
  c->reject_init = reject_init;
  c->reject_len = len;
  if (len > 0)
    memcpy(c->reject, reject, len);
  return c;
}

int weft_server_bind(weft_server **out, const weft_server_bootstrap *b) {
  if (b == NULL || b->group == NULL || b->child_init == NULL ||
      b->max_connections < 0)
    return WEFT_EINVAL;
  weft_endpoint ep;
  int rc = parse_uri(b->listen, &ep);
  return rc < 0 ? rc : weft_server_bind_endpoint(out, b, &ep);
}

int weft_server_bind_endpoint(weft_server **out, const weft_server_bootstrap *b,
                              const weft_endpoint *ep) {
  if (b == NULL || ep == NULL || b->group == NULL || b->child_init == NULL ||
      b->max_connections < 0)
    return WEFT_EINVAL;
  weft_server *srv = calloc(1, sizeof *srv);
  weft__conn_count *count = count_new(b->reject_message, b->reject_init);
  if (srv == NULL || count == NULL) {
    free(srv);
    free(count);
    return WEFT_ENOMEM;
  }
  const weft_transport_ops *ops;
  char uri[WEFT__URI_MAX];
  int rc = transport_of(ep, &ops, uri, sizeof uri);
  if (rc < 0)
    goto failed_resolve;
  if (ops->listen == NULL) {
    weft_log(WEFT_LOG_ERROR, "listen on %s: transport %s cannot listen", uri,
             ops->name);
    rc = WEFT_ENOTSUP;
    goto failed_resolve;
  }
  *srv = (weft_server){.group = b->group,
                       .ep = *ep,
                       .backlog = b->backlog > 0 ? b->backlog : 511,
                       .child_init = b->child_init,
                       .child_init_arg = b->child_init_arg,
                       .child_options = b->child_options,
                       .max_connections = b->max_connections,
                       .count = count,
                       .id = server_id_new()};
  /* A server's channels stop reading while their replies cannot leave,
   * and are closed past the output limit, unless the application said
   * otherwise (docs/architecture.md, "Safe by default"). */
  if (srv->child_options.flow_control < 0)
    srv->child_options.flow_control = 1;
  if (srv->child_options.output_limit < 0)
    srv->child_options.output_limit = WEFT_SERVER_OUTPUT_LIMIT;
  rc = listeners_start(srv, ops, uri);
  if (rc < 0)
    goto failed_resolve;
  *out = srv;
  return 0;
failed_resolve:
  free(count);
  free(srv);
  return rc;
}

int weft_server_connections(const weft_server *srv) {
  return atomic_load_explicit(&srv->count->live, memory_order_relaxed);
}

int weft_server_address(const weft_server *srv, char *buf, size_t len) {
  weft_listener *l = &srv->listeners[0];
  char addr[280];
  if (l->transport->listen_address == NULL)
    return weft_endpoint_format(&srv->ep, buf, len);
  int rc = l->transport->listen_address(l, addr, sizeof addr);
  if (rc < 0)
    return rc;
  int n = snprintf(buf, len, "%s://%s", l->transport->name, addr);
  return n < 0 || (size_t)n >= len ? WEFT_ENOSPC : 0;
}

void weft_server_close(weft_server *srv) {
  if (srv == NULL)
    return;
  listeners_close(srv, srv->n_listeners);
  weft__conn_count_release(srv->count, false);
  free(srv->listeners);
  free(srv);
}

/* What an accepted connection needs on its loop: copied, so the server may
 * close while the task is queued. */
typedef struct adopt_task {
  const weft_transport_ops *ops;
  weft_loop *loop;
  intptr_t handle;
  weft_channel_init_cb init;
  void *init_arg;
  weft_channel_config options;
  weft__conn_count *count; /* one reference, handed to the channel */
  bool counted;            /* counted in count->live */
} adopt_task;

/* A channel of `ops` on `loop` for an accept or a connect (`what`), or NULL
 * with the error in `*err` and a warning logged. */
static weft_channel *channel_new_logged(const weft_transport_ops *ops,
                                        weft_loop *loop, const char *what,
                                        int *err) {
  weft_channel *ch = weft__channel_new(ops, loop, err);
  if (ch == NULL)
    weft_log(WEFT_LOG_WARN, "%s: cannot create a channel: %s", what,
             weft_strerror(*err));
  return ch;
}

/* A task that never became a channel gives back what it held. */
static void adopt_drop(adopt_task *t) {
  t->ops->discard(t->handle);
  weft__conn_count_release(t->count, t->counted);
  free(t);
}

static void adopt_on_loop(void *arg) {
  adopt_task *t = arg;
  int err = 0;
  weft_channel *ch = channel_new_logged(t->ops, t->loop, "accept", &err);
  if (ch == NULL) {
    adopt_drop(t);
    return;
  }
  ch->limits.count = t->count;
  ch->limits.counted = t->counted;
  weft_channel_config_apply(&t->options, ch);
  t->init(ch, t->init_arg);
  err = t->ops->adopt(ch, t->handle);
  if (err < 0) {
    weft_log(WEFT_LOG_WARN, "accept: %s", weft_strerror(err));
    weft__channel_close(ch, WEFT_PROMISE_NONE);
  } else {
    weft__channel_activate(ch);
  }
  free(t);
}

/* ---- refusing connections past max_connections ---- */

/* The refused channel's one handler: it writes the server's reject
 * message and closes the channel once the bytes left (or failed). */
static void reject_close(void *arg) {
  weft_channel *ch = arg;
  weft_channel_close(ch, WEFT_PROMISE_NONE);
  weft_channel_release(ch);
}

/* The close is a task: a promise may complete inside a transport's own
 * progress (UCX runs send completions there), where a close must not
 * start. */
static void reject_written(void *arg, int status) {
  (void)status;
  weft_channel *ch = arg;
  if (weft_loop_execute(weft_channel_loop(ch), reject_close, ch) < 0)
    weft_channel_release(ch); /* the loop is finishing: it closes it */
}

static void reject_active(weft_ctx *ctx) {
  weft_channel *ch = weft_ctx_channel(ctx);
  const weft__conn_count *c = ch->limits.count;
  weft_buf *b = weft_buf_alloc(weft_loop_pool(ch->loop), c->reject_len);
  if (b == NULL || weft_buf_write_bytes(b, c->reject, c->reject_len) < 0) {
    weft_buf_release(b);
    weft_channel_close(ch, WEFT_PROMISE_NONE);
    return;
  }
  weft_channel_retain(ch);
  weft_ctx_write_and_flush(ctx, b,
                           (weft_promise){.cb = reject_written, .arg = ch});
}

static const weft_handler reject_handler = {.name = "reject",
                                            .channel_active = reject_active};

/* A refused channel's pipeline: the bootstrap's reject_init (a TLS
 * handler, say), then the reject handler last. `arg` is child_init_arg. */
static void reject_init(weft_channel *ch, void *arg) {
  const weft__conn_count *c = ch->limits.count;
  if (c->reject_init != NULL) {
    c->reject_init(ch, arg);
    if (weft_channel_state_of(ch) >= WEFT_CHANNEL_INACTIVE)
      return; /* it gave up on the channel */
  }
  weft_pipeline_add_last(weft_channel_pipeline(ch), "reject", &reject_handler,
                         NULL);
}

/* One log line a second at most per listener, however fast clients
 * arrive. On the listener's loop. */
static void log_refused(weft_listener *l) {
  weft_server *srv = l->server;
  l->refused++;
  uint64_t now = weft_now_ns();
  if (l->refused_log_ns != 0 && now - l->refused_log_ns < 1000000000u)
    return;
  weft_log(WEFT_LOG_WARN,
           "server %s: max_connections (%d) reached; refused %" PRIu64
           " connection(s) since the last such line",
           l->transport->name, srv->max_connections, l->refused);
  l->refused = 0;
  l->refused_log_ns = now;
}

/* Counts a connection listener `l` accepted in; false when it is over the
 * server's limit. */
static bool admit(weft_listener *l) {
  weft_server *srv = l->server;
  int live =
      atomic_fetch_add_explicit(&srv->count->live, 1, memory_order_relaxed);
  if (srv->max_connections == 0 || live < srv->max_connections)
    return true;
  atomic_fetch_sub_explicit(&srv->count->live, 1, memory_order_relaxed);
  log_refused(l);
  return false;
}

void weft_listener_accepted(weft_listener *l, intptr_t handle) {
  weft_server *srv = l->server;
  bool admitted = admit(l);
  if (!admitted && srv->count->reject_len == 0) {
    l->transport->discard(handle);
    return;
  }
  adopt_task *t = malloc(sizeof *t);
  if (t == NULL) {
    l->transport->discard(handle);
    if (admitted)
      atomic_fetch_sub_explicit(&srv->count->live, 1, memory_order_relaxed);
    return;
  }
  atomic_fetch_add_explicit(&srv->count->refs, 1, memory_order_relaxed);
  /* A refused connection stays on the listener's loop: it lives for one
   * write. */
  *t = (adopt_task){.ops = l->transport,
                    .loop = l->accept_local || !admitted
                                ? l->loop
                                : weft_loop_group_next(srv->group),
                    .handle = handle,
                    .init = admitted ? srv->child_init : reject_init,
                    .init_arg = srv->child_init_arg,
                    .options = srv->child_options,
                    .count = srv->count,
                    .counted = admitted};
  if (weft_loop_in_loop(t->loop)) {
    adopt_on_loop(t);
    return;
  }
  if (weft_loop_execute(t->loop, adopt_on_loop, t) < 0)
    adopt_drop(t);
}

weft_loop *weft_listener_loop(const weft_listener *l) { return l->loop; }
void *weft_listener_priv(const weft_listener *l) { return l->priv; }
void weft_listener_set_priv(weft_listener *l, void *priv) { l->priv = priv; }
int weft_listener_index(const weft_listener *l) { return l->index; }
uint32_t weft_listener_server_id(const weft_listener *l) {
  return l->server->id;
}
int weft_listener_count(const weft_listener *l) {
  return l->server->n_listeners;
}

int weft_listener_room(const weft_listener *l) {
  const weft_server *srv = l->server;
  if (srv->max_connections == 0)
    return INT_MAX;
  int live = atomic_load_explicit(&srv->count->live, memory_order_relaxed);
  return live < srv->max_connections ? srv->max_connections - live : 0;
}

int weft_listener_address_of(const weft_listener *l, int i, char *buf,
                             size_t len) {
  const weft_server *srv = l->server;
  if (i < 0 || i >= srv->n_listeners)
    return WEFT_EINVAL;
  if (i >= atomic_load_explicit(&srv->n_bound, memory_order_acquire))
    return WEFT_EAGAIN;
  int n = snprintf(buf, len, "%s", srv->listeners[i].address);
  return n < 0 || (size_t)n >= len ? WEFT_ENOSPC : 0;
}

/* ---- client ---- */

typedef struct connect_task {
  const weft_transport_ops *ops;
  weft_loop *loop;
  weft_endpoint ep;
  weft_channel_init_cb init;
  void *init_arg;
  weft_channel_config options;
  weft_connect_cb on_connect;
  void *connect_arg;
} connect_task;

static void connect_on_loop(void *arg) {
  connect_task *t = arg;
  int err = 0;
  weft_channel *ch = channel_new_logged(t->ops, t->loop, "connect", &err);
  if (ch == NULL) {
    if (t->on_connect != NULL)
      t->on_connect(NULL, err, t->connect_arg);
    free(t);
    return;
  }
  ch->on_connect = t->on_connect;
  ch->connect_arg = t->connect_arg;
  weft_channel_config_apply(&t->options, ch);
  t->init(ch, t->init_arg);
  err = weft__channel_start_connect_timer(ch);
  if (err == 0)
    err = t->ops->connect(ch, &t->ep);
  if (err < 0)
    weft_channel_connected(ch, err);
  free(t);
}

int weft_bootstrap_connect(const weft_bootstrap *b) {
  if (b == NULL || b->init == NULL || (b->group == NULL && b->loop == NULL))
    return WEFT_EINVAL;
  weft_endpoint ep;
  int rc = parse_uri(b->connect, &ep);
  return rc < 0 ? rc : weft_bootstrap_connect_endpoint(b, &ep);
}

int weft_bootstrap_connect_endpoint(const weft_bootstrap *b,
                                    const weft_endpoint *ep) {
  if (b == NULL || ep == NULL || b->init == NULL ||
      (b->group == NULL && b->loop == NULL))
    return WEFT_EINVAL;
  connect_task *t = calloc(1, sizeof *t);
  if (t == NULL)
    return WEFT_ENOMEM;
  char uri[WEFT__URI_MAX];
  t->ep = *ep;
  int rc = transport_of(ep, &t->ops, uri, sizeof uri);
  if (rc == 0 && t->ops->connect == NULL)
    rc = WEFT_ENOTSUP;
  if (rc < 0) {
    free(t);
    return rc;
  }
  t->loop = b->loop != NULL ? b->loop : weft_loop_group_next(b->group);
  t->init = b->init;
  t->init_arg = b->init_arg;
  t->options = b->options;
  t->on_connect = b->on_connect;
  t->connect_arg = b->connect_arg;
  rc = weft_loop_execute(t->loop, connect_on_loop, t);
  if (rc < 0)
    free(t);
  return rc;
}
