/* Server and client bootstrap: endpoint to transport, listener on loop 0,
 * accepted channels spread over the loops round-robin, connects with a
 * timeout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/log.h>

#include "channel/channel_internal.h"

struct weft_server {
  weft_loop_group *group;
  weft_listener listener;
  weft_endpoint ep;
  int backlog;
  weft_channel_init_cb child_init;
  void *child_init_arg;
  weft_channel_config child_options;
};

/* ---- channel options ---- */

void weft_channel_config_init(weft_channel_config *cfg) {
  *cfg = (weft_channel_config){.tcp_nodelay = -1,
                               .so_sndbuf = -1,
                               .so_rcvbuf = -1,
                               .so_keepalive = -1,
                               .write_low_watermark = -1,
                               .write_high_watermark = -1,
                               .connect_timeout_ms = -1};
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
                      cfg->connect_timeout_ms)) < 0)
    return rc;
  return 0;
}

/* ---- endpoint and transport lookup ---- */

static int resolve(const char *uri, weft_endpoint *ep,
                   const weft_transport_ops **ops) {
  char why[256];
  if (uri == NULL || weft_endpoint_parse(uri, ep, why, sizeof why) < 0) {
    weft_log(WEFT_LOG_ERROR, "bad endpoint \"%s\": %s",
             uri != NULL ? uri : "(null)", why);
    return WEFT_EINVAL;
  }
  *ops = weft_transport_find(ep->transport, why, sizeof why);
  if (*ops == NULL) {
    weft_log(WEFT_LOG_ERROR, "endpoint \"%s\": %s", uri, why);
    return WEFT_ENOTRANSPORT;
  }
  return 0;
}

/* ---- server ---- */

static int listen_on_loop(void *arg) {
  weft_server *srv = arg;
  weft_listener *l = &srv->listener;
  int err = 0;
  if (weft_transport_loop_state(l->transport, l->loop, &err) == NULL)
    return err;
  return l->transport->listen(l, &srv->ep, srv->backlog);
}

int weft_server_bind(weft_server **out, const weft_server_bootstrap *b) {
  if (b == NULL || b->group == NULL || b->child_init == NULL)
    return WEFT_EINVAL;
  weft_server *srv = calloc(1, sizeof *srv);
  if (srv == NULL)
    return WEFT_ENOMEM;
  const weft_transport_ops *ops;
  int rc = resolve(b->listen, &srv->ep, &ops);
  if (rc < 0)
    goto failed_resolve;
  if (ops->listen == NULL) {
    rc = WEFT_ENOTSUP;
    goto failed_resolve;
  }
  *srv = (weft_server){.group = b->group,
                       .ep = srv->ep,
                       .backlog = b->backlog > 0 ? b->backlog : 511,
                       .child_init = b->child_init,
                       .child_init_arg = b->child_init_arg,
                       .child_options = b->child_options};
  srv->listener = (weft_listener){.transport = ops,
                                  .loop = weft_loop_group_get(b->group, 0),
                                  .server = srv};
  rc = weft_loop_call(srv->listener.loop, listen_on_loop, srv);
  if (rc < 0) {
    weft_log(WEFT_LOG_ERROR, "listen on %s: %s", b->listen, weft_strerror(rc));
    goto failed_resolve;
  }
  *out = srv;
  return 0;
failed_resolve:
  free(srv);
  return rc;
}

int weft_server_address(const weft_server *srv, char *buf, size_t len) {
  weft_listener *l = (weft_listener *)&srv->listener;
  char addr[280];
  if (l->transport->listen_address == NULL)
    return weft_endpoint_format(&srv->ep, buf, len);
  int rc = l->transport->listen_address(l, addr, sizeof addr);
  if (rc < 0)
    return rc;
  int n = snprintf(buf, len, "%s://%s", l->transport->name, addr);
  return n < 0 || (size_t)n >= len ? WEFT_ENOSPC : 0;
}

static int close_on_loop(void *arg) {
  weft_server *srv = arg;
  if (srv->listener.transport->listen_close != NULL)
    srv->listener.transport->listen_close(&srv->listener);
  return 0;
}

void weft_server_close(weft_server *srv) {
  if (srv == NULL)
    return;
  weft_loop_call(srv->listener.loop, close_on_loop, srv);
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
} adopt_task;

static void adopt_on_loop(void *arg) {
  adopt_task *t = arg;
  int err = 0;
  weft_channel *ch = weft__channel_new(t->ops, t->loop, &err);
  if (ch == NULL) {
    weft_log(WEFT_LOG_WARN, "accept: cannot create a channel: %s",
             weft_strerror(err));
    t->ops->discard(t->handle);
    free(t);
    return;
  }
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

void weft_listener_accepted(weft_listener *l, intptr_t handle) {
  weft_server *srv = l->server;
  adopt_task *t = malloc(sizeof *t);
  if (t == NULL) {
    l->transport->discard(handle);
    return;
  }
  *t = (adopt_task){.ops = l->transport,
                    .loop = l->accept_local ? l->loop
                                            : weft_loop_group_next(srv->group),
                    .handle = handle,
                    .init = srv->child_init,
                    .init_arg = srv->child_init_arg,
                    .options = srv->child_options};
  if (weft_loop_in_loop(t->loop)) {
    adopt_on_loop(t);
    return;
  }
  if (weft_loop_execute(t->loop, adopt_on_loop, t) < 0) {
    l->transport->discard(handle);
    free(t);
  }
}

weft_loop *weft_listener_loop(const weft_listener *l) { return l->loop; }
void *weft_listener_priv(const weft_listener *l) { return l->priv; }
void weft_listener_set_accept_local(weft_listener *l, bool on) {
  l->accept_local = on;
}
void weft_listener_set_priv(weft_listener *l, void *priv) { l->priv = priv; }

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
  weft_channel *ch = weft__channel_new(t->ops, t->loop, &err);
  if (ch == NULL) {
    weft_log(WEFT_LOG_WARN, "connect: cannot create a channel: %s",
             weft_strerror(err));
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
  connect_task *t = calloc(1, sizeof *t);
  if (t == NULL)
    return WEFT_ENOMEM;
  int rc = resolve(b->connect, &t->ep, &t->ops);
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
