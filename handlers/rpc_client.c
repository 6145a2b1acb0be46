/* SPDX-License-Identifier: Apache-2.0 */
/* The RPC client handler: request ids, a pending table, timeouts. */
#include <stdlib.h>

#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/rpc_client.h>
#include <weft/timer.h>

#define INITIAL_BUCKETS 16

typedef struct pending {
  struct pending *next;    /* bucket chain */
  weft_rpc_client *client; /* NULL once the client is gone */
  uint64_t id;
  weft_timer timer;
  weft_rpc_reply_cb cb;
  void *arg;
  bool answered;   /* cb has run */
  bool write_done; /* the write's promise has completed */
} pending;

struct weft_rpc_client {
  weft_ctx *ctx;
  weft_rpc_client_options o;
  uint64_t next_id;
  pending **buckets; /* power-of-two count, chained */
  size_t n_buckets, n_pending;
  bool closed;  /* channel inactive or handler removed: no new calls */
  bool removed; /* handler_removed ran while `depth` > 0 */
  int depth;    /* callbacks of this client on the stack */
};

/* ---- the pending table ---- */

static size_t bucket_of(const weft_rpc_client *c, uint64_t id) {
  return (size_t)(id * 0x9E3779B97F4A7C15ull >> 32) & (c->n_buckets - 1);
}

static int grow(weft_rpc_client *c) {
  size_t n = c->n_buckets * 2;
  pending **b = calloc(n, sizeof *b);
  if (b == NULL)
    return WEFT_ENOMEM;
  pending **old = c->buckets;
  size_t old_n = c->n_buckets;
  c->buckets = b;
  c->n_buckets = n;
  for (size_t i = 0; i < old_n; i++)
    for (pending *p = old[i], *next; p != NULL; p = next) {
      next = p->next;
      size_t k = bucket_of(c, p->id);
      p->next = b[k];
      b[k] = p;
    }
  free(old);
  return 0;
}

static void insert(weft_rpc_client *c, pending *p) {
  size_t k = bucket_of(c, p->id);
  p->next = c->buckets[k];
  c->buckets[k] = p;
  c->n_pending++;
}

static pending *take(weft_rpc_client *c, uint64_t id) {
  for (pending **pp = &c->buckets[bucket_of(c, id)]; *pp; pp = &(*pp)->next)
    if ((*pp)->id == id) {
      pending *p = *pp;
      *pp = p->next;
      c->n_pending--;
      return p;
    }
  return NULL;
}

static pending *take_any(weft_rpc_client *c) {
  for (size_t i = 0; i < c->n_buckets && c->n_pending > 0; i++)
    if (c->buckets[i] != NULL)
      return take(c, c->buckets[i]->id);
  return NULL;
}

/* ---- outcomes ---- */

static void client_free(weft_rpc_client *c) {
  free(c->buckets);
  free(c);
}

/* An entry lives until it was answered and its write completed (the
 * write's promise points at it). */
static void maybe_free(pending *p) {
  if (p->answered && p->write_done)
    free(p);
}

/* Runs the callback of an entry already taken out of the table. */
static void complete(weft_rpc_client *c, pending *p, int err,
                     weft_rpc_msg *reply) {
  weft_timer_stop(&p->timer);
  p->answered = true;
  c->depth++;
  p->cb(p->arg, err, reply);
  c->depth--;
  maybe_free(p);
}

/* Returns false when the client was freed (removed inside a callback). */
static bool leave(weft_rpc_client *c) {
  if (c->depth > 0 || !c->removed)
    return true;
  client_free(c);
  return false;
}

static void fail_all(weft_rpc_client *c, int err) {
  c->closed = true;
  c->depth++;
  pending *p;
  while ((p = take_any(c)) != NULL)
    complete(c, p, err, NULL);
  c->depth--;
}

static void on_timeout(void *arg) {
  pending *p = arg;
  weft_rpc_client *c = p->client;
  take(c, p->id);
  c->depth++;
  complete(c, p, WEFT_ETIMEDOUT, NULL);
  c->depth--;
  leave(c);
}

static void on_written(void *arg, int status) {
  pending *p = arg;
  p->write_done = true;
  weft_rpc_client *c = p->client;
  if (status < 0 && !p->answered && c != NULL) {
    take(c, p->id);
    c->depth++;
    complete(c, p, status, NULL);
    c->depth--;
    leave(c);
    return;
  }
  maybe_free(p);
}

/* ---- handler ops ---- */

static void client_read(weft_ctx *ctx, void *msg) {
  weft_rpc_client *c = weft_ctx_state(ctx);
  weft_rpc_msg *m = msg;
  if (!weft_msg_is(msg, &weft_rpc_msg_type) ||
      (m->type != WEFT_RPC_RESPONSE && m->type != WEFT_RPC_ERROR)) {
    weft_ctx_fire_channel_read(ctx, msg);
    return;
  }
  pending *p = take(c, m->request_id);
  if (p == NULL) { /* timed out already, or a confused peer */
    weft_log(WEFT_LOG_DEBUG, "rpc client: answer to unknown request %llu",
             (unsigned long long)m->request_id);
    weft_rpc_msg_release(m);
    return;
  }
  int err = 0;
  if (m->type == WEFT_RPC_ERROR)
    err = m->status < 0 ? m->status : WEFT_EPROTO;
  c->depth++;
  complete(c, p, err, m);
  c->depth--;
  leave(c);
}

static void client_inactive(weft_ctx *ctx) {
  weft_rpc_client *c = weft_ctx_state(ctx);
  c->depth++;
  fail_all(c, WEFT_ECLOSED);
  c->depth--;
  if (leave(c))
    weft_ctx_fire_channel_inactive(ctx);
}

/* Orphans entries whose write is still queued: their promise frees them. */
static void client_removed(weft_ctx *ctx) {
  weft_rpc_client *c = weft_ctx_state(ctx);
  fail_all(c, WEFT_ECLOSED);
  c->removed = true;
  leave(c);
}

static const weft_handler client_handler = {.name = "rpc_client",
                                            .channel_read = client_read,
                                            .channel_inactive = client_inactive,
                                            .handler_removed = client_removed};

/* ---- public ---- */

int weft_rpc_client_add_last(weft_pipeline *p, const char *name,
                             const weft_rpc_client_options *opts,
                             weft_rpc_client **out) {
  weft_rpc_client *c = calloc(1, sizeof *c);
  if (c == NULL)
    return WEFT_ENOMEM;
  c->buckets = calloc(INITIAL_BUCKETS, sizeof *c->buckets);
  if (c->buckets == NULL) {
    free(c);
    return WEFT_ENOMEM;
  }
  c->n_buckets = INITIAL_BUCKETS;
  c->next_id = 1;
  if (opts != NULL)
    c->o = *opts;
  int rc = weft_pipeline_add_last(p, name, &client_handler, c);
  if (rc < 0) {
    client_free(c);
    return rc;
  }
  c->ctx = weft_pipeline_context(p, name);
  if (out != NULL)
    *out = c;
  return 0;
}

weft_rpc_client *weft_rpc_client_get(weft_channel *ch, const char *name) {
  weft_ctx *ctx = weft_pipeline_context(weft_channel_pipeline(ch), name);
  return ctx != NULL ? weft_ctx_state(ctx) : NULL;
}

static bool can_send(const weft_rpc_client *c) {
  return !c->closed && weft_channel_is_active(weft_ctx_channel(c->ctx));
}

int64_t weft_rpc_client_call(weft_rpc_client *c, uint16_t method,
                             weft_buf *payload, uint64_t timeout_ns,
                             weft_rpc_reply_cb cb, void *arg) {
  int rc = WEFT_ECLOSED;
  if (!can_send(c))
    goto failed_state;
  rc = WEFT_ENOMEM;
  if (c->n_pending >= c->n_buckets && grow(c) < 0)
    goto failed_state;
  pending *p = calloc(1, sizeof *p);
  if (p == NULL)
    goto failed_state;
  uint64_t id = c->next_id++;
  weft_rpc_msg *m = weft_rpc_msg_new(WEFT_RPC_REQUEST, method, id, 0, payload);
  payload = NULL; /* taken, also on failure */
  if (m == NULL)
    goto failed_msg;
  *p = (pending){.client = c, .id = id, .cb = cb, .arg = arg};
  weft_timer_init(weft_channel_loop(weft_ctx_channel(c->ctx)), &p->timer);
  if (timeout_ns == 0)
    timeout_ns = c->o.default_timeout_ns;
  if (timeout_ns > 0 &&
      weft_timer_start(&p->timer, timeout_ns, 0, on_timeout, p) < 0) {
    weft_rpc_msg_release(m);
    goto failed_msg;
  }
  insert(c, p);
  weft_ctx_write_and_flush(c->ctx, m, (weft_promise){on_written, p});
  return (int64_t)id;
failed_msg:
  free(p);
failed_state:
  weft_buf_release(payload);
  return rc;
}

int weft_rpc_client_send(weft_rpc_client *c, uint16_t method,
                         weft_buf *payload) {
  if (!can_send(c)) {
    weft_buf_release(payload);
    return WEFT_ECLOSED;
  }
  weft_rpc_msg *m = weft_rpc_msg_new(WEFT_RPC_ONEWAY, method, 0, 0, payload);
  if (m == NULL)
    return WEFT_ENOMEM;
  weft_ctx_write_and_flush(c->ctx, m, WEFT_PROMISE_NONE);
  return 0;
}

size_t weft_rpc_client_pending(const weft_rpc_client *c) {
  return c->n_pending;
}
