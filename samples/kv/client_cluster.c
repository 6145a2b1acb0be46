/* SPDX-License-Identifier: Apache-2.0 */
/* The KV client for a cluster (client_cluster.h): a slot map, one
 * kv_client per node on one loop, and the redirections followed. */
#include "client_cluster.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/endpoint.h>
#include <weft/error.h>
#include <weft/log.h>

#include "cluster_slot.h"

#define NODES_MAX 64 /* a cluster config's KV_CLUSTER_NODES_MAX */
#define NO_NODE 0xFF /* a slot not in the map: the first node */
#define HOST_MAX 256

/** One node: its RPC address as the cluster names it, and its client. */
typedef struct cluster_node {
  char host[HOST_MAX];
  int port;
  kv_client *client; /* NULL until the first request, or after it broke */
} cluster_node;

struct kv_cluster_client {
  weft_loop_group *group;
  weft_loop *loop;
  char scheme[16];        /* the seed URI's transport */
  kv_client_options opts; /* with our own copies of its strings */
  char *user, *password, *sni;
  pthread_mutex_t lock; /* n_nodes and the clients, against close */
  size_t n_nodes;
  cluster_node nodes[NODES_MAX];
  uint8_t owner[KV_CLUSTER_SLOTS]; /* node index or NO_NODE (loop thread) */
  bool refreshing;                 /* a CLUSTER SLOTS is out (loop) */
  bool closing;                    /* under lock */
};

/** A request being routed: its arguments' copies follow it. */
typedef struct request {
  kv_cluster_client *cc;
  int cmd;
  size_t argc;
  uint64_t timeout_ns;
  kv_reply_cb cb;
  void *arg;
  int redirects;
  uint8_t node;      /* where it went last */
  kv_client *client; /* through which client */
  kv_arg argv[];
} request;

static void on_reply(void *arg, int err, const kv_reply *reply);

/* ---- nodes ---- */

/* The node at host:port, added when new; NO_NODE when the table is full. */
static uint8_t node_index(kv_cluster_client *cc, const char *host, size_t hl,
                          int port) {
  for (size_t i = 0; i < cc->n_nodes; i++)
    if (cc->nodes[i].port == port && strlen(cc->nodes[i].host) == hl &&
        memcmp(cc->nodes[i].host, host, hl) == 0)
      return (uint8_t)i;
  if (cc->n_nodes == NODES_MAX || hl >= HOST_MAX)
    return NO_NODE;
  pthread_mutex_lock(&cc->lock);
  cluster_node *n = &cc->nodes[cc->n_nodes];
  memcpy(n->host, host, hl);
  n->host[hl] = '\0';
  n->port = port;
  n->client = NULL;
  uint8_t i = (uint8_t)cc->n_nodes++;
  pthread_mutex_unlock(&cc->lock);
  return i;
}

/* The node's client, connecting it the first time; NULL when closing or
 * the connect could not start (`*rc` says why). Requests sent before the
 * connection is up wait for it (kv_client_connect). */
static kv_client *node_client(kv_cluster_client *cc, uint8_t i, int *rc) {
  cluster_node *n = &cc->nodes[i];
  pthread_mutex_lock(&cc->lock);
  kv_client *c = cc->closing ? NULL : n->client;
  *rc = cc->closing ? WEFT_ECLOSED : 0;
  if (c == NULL && !cc->closing) {
    char uri[HOST_MAX + 48];
    snprintf(uri, sizeof uri,
             strchr(n->host, ':') ? "%s://[%s]:%d" : "%s://%s:%d", cc->scheme,
             n->host, n->port);
    *rc =
        kv_client_connect(&c, cc->group, cc->loop, uri, &cc->opts, NULL, NULL);
    n->client = *rc == 0 ? c : NULL;
  }
  pthread_mutex_unlock(&cc->lock);
  return c;
}

/* A node's client failed (closed, refused): dropped, so the next request
 * to the node connects again. */
static void node_broken(kv_cluster_client *cc, uint8_t i, kv_client *c) {
  pthread_mutex_lock(&cc->lock);
  bool ours = !cc->closing && cc->nodes[i].client == c;
  if (ours)
    cc->nodes[i].client = NULL;
  pthread_mutex_unlock(&cc->lock);
  if (ours)
    kv_client_close(c, NULL, NULL);
}

/* ---- the slot map ---- */

/* Applies a CLUSTER SLOTS reply: [[first, last, [host, port, ...], ...]].
 * Returns false (the map unchanged) when it is not one. */
static bool apply_slots(kv_cluster_client *cc, const kv_reply *r) {
  if (r->tag != KV_TAG_ARRAY)
    return false;
  uint8_t owner[KV_CLUSTER_SLOTS];
  memset(owner, NO_NODE, sizeof owner);
  for (size_t i = 0; i < r->len; i++) {
    const kv_reply *e = &r->elem[i];
    if (e->tag != KV_TAG_ARRAY || e->len < 3 ||
        e->elem[0].tag != KV_TAG_INTEGER || e->elem[1].tag != KV_TAG_INTEGER ||
        e->elem[2].tag != KV_TAG_ARRAY || e->elem[2].len < 2)
      return false;
    const kv_reply *m = e->elem[2].elem;
    int64_t first = e->elem[0].integer, last = e->elem[1].integer;
    if (m[0].tag != KV_TAG_BULK || m[1].tag != KV_TAG_INTEGER || first < 0 ||
        last >= KV_CLUSTER_SLOTS || first > last)
      return false;
    uint8_t n =
        node_index(cc, (const char *)m[0].str, m[0].len, (int)m[1].integer);
    memset(owner + first, n, (size_t)(last - first + 1));
  }
  memcpy(cc->owner, owner, sizeof owner);
  return true;
}

static void on_slots(void *arg, int err, const kv_reply *reply) {
  kv_cluster_client *cc = arg;
  cc->refreshing = false;
  if (err == 0 && !apply_slots(cc, reply))
    weft_log(WEFT_LOG_WARN, "kv cluster client: CLUSTER SLOTS: not a slot map");
}

/* Asks node `i` for the whole map, unless a request for it is out. */
static void refresh(kv_cluster_client *cc, uint8_t i) {
  int rc;
  kv_client *c = cc->refreshing ? NULL : node_client(cc, i, &rc);
  kv_arg sub = {"SLOTS", 5};
  if (c != NULL &&
      kv_client_call(c, KV_CMD_CLUSTER, 1, &sub, 0, on_slots, cc) == 0)
    cc->refreshing = true;
}

/* ---- requests ---- */

static void ignore_reply(void *arg, int err, const kv_reply *reply) {
  (void)arg, (void)err, (void)reply;
}

/* Sends `q` to node `i` (after ASKING when `asking`). Returns 0, or the
 * error with nothing sent. */
static int send_to(request *q, uint8_t i, bool asking) {
  int rc;
  kv_client *c = node_client(q->cc, i, &rc);
  if (c == NULL)
    return rc;
  /* One channel runs its requests in order: ASKING applies to the next. */
  if (asking && (rc = kv_client_call(c, KV_CMD_ASKING, 0, NULL, q->timeout_ns,
                                     ignore_reply, NULL)) < 0)
    return rc;
  q->node = i;
  q->client = c;
  return kv_client_call(c, q->cmd, q->argc, q->argv, q->timeout_ns, on_reply,
                        q);
}

/* The node for `q` by its first key's slot. */
static uint8_t route(const kv_cluster_client *cc, const request *q) {
  if (!kv_cmd_has_key(q->cmd) || q->argc == 0)
    return 0;
  uint8_t n = cc->owner[kv_cluster_keyslot(q->argv[0].ptr, q->argv[0].len)];
  return n == NO_NODE ? 0 : n;
}

/* "MOVED 3999 127.0.0.1:7002" or "ASK ...": the slot and the node (added
 * when new); false when `r` is neither. */
static bool redirection(kv_cluster_client *cc, const kv_reply *r, bool *ask,
                        unsigned *slot, uint8_t *node) {
  char text[HOST_MAX + 32];
  snprintf(text, sizeof text, "%.*s", (int)r->len, (const char *)r->str);
  *ask = strncmp(text, "ASK ", 4) == 0;
  if (!*ask && strncmp(text, "MOVED ", 6) != 0)
    return false;
  char *p = text + (*ask ? 4 : 6), *end;
  unsigned long s = strtoul(p, &end, 10);
  char *addr = end + (*end == ' ');
  char *colon = strrchr(addr, ':');
  if (end == p || *end != ' ' || s >= KV_CLUSTER_SLOTS || colon == NULL)
    return false;
  int port = atoi(colon + 1);
  if (addr[0] == '[' && colon > addr && colon[-1] == ']')
    addr++, colon--; /* "[::1]:7001" */
  *slot = (unsigned)s;
  *node = node_index(cc, addr, (size_t)(colon - addr), port);
  return *node != NO_NODE;
}

static void finish(request *q, int err, const kv_reply *reply) {
  q->cb(q->arg, err, reply);
  free(q);
}

static void on_reply(void *arg, int err, const kv_reply *reply) {
  request *q = arg;
  kv_cluster_client *cc = q->cc;
  if (err < 0) {
    node_broken(cc, q->node, q->client);
    return finish(q, err, NULL);
  }
  bool ask;
  unsigned slot;
  uint8_t to;
  if (!kv_reply_is_error(reply) || q->redirects >= KV_CLUSTER_CLIENT_REDIRECTS)
    return finish(q, 0, reply);
  q->redirects++;
  int rc;
  if (redirection(cc, reply, &ask, &slot, &to)) {
    if (!ask) { /* the slot moved for good: the map is stale */
      cc->owner[slot] = to;
      refresh(cc, to);
    }
    rc = send_to(q, to, ask);
  } else if (reply->len >= 8 && memcmp(reply->str, "TRYAGAIN", 8) == 0) {
    rc = send_to(q, q->node, false);
  } else {
    return finish(q, 0, reply);
  }
  if (rc < 0)
    finish(q, rc, NULL);
}

int kv_cluster_client_call(kv_cluster_client *cc, int cmd, size_t argc,
                           const kv_arg *argv, uint64_t timeout_ns,
                           kv_reply_cb cb, void *arg) {
  if (cb == NULL || kv_cmd_name(cmd) == NULL || !weft_loop_in_loop(cc->loop))
    return WEFT_EINVAL;
  size_t bytes = 0;
  for (size_t i = 0; i < argc; i++)
    bytes += argv[i].len;
  request *q = malloc(sizeof *q + argc * sizeof(kv_arg) + bytes);
  if (q == NULL)
    return WEFT_ENOMEM;
  *q = (request){.cc = cc,
                 .cmd = cmd,
                 .argc = argc,
                 .timeout_ns = timeout_ns,
                 .cb = cb,
                 .arg = arg};
  uint8_t *data = (uint8_t *)(q->argv + argc);
  for (size_t i = 0; i < argc; i++) {
    if (argv[i].len > 0)
      memcpy(data, argv[i].ptr, argv[i].len);
    q->argv[i] = (kv_arg){data, argv[i].len};
    data += argv[i].len;
  }
  int rc = send_to(q, route(cc, q), false);
  if (rc < 0)
    free(q);
  return rc;
}

/* ---- the blocking call ---- */

/** A blocking call: what the loop's task needs, and the wait. */
typedef struct sync_call {
  kv_cluster_client *cc;
  int cmd;
  size_t argc;
  const kv_arg *argv; /* the caller's, valid while it waits */
  uint64_t timeout_ns;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  int err;
  kv_reply *reply;
} sync_call;

static void sync_done(void *arg, int err, const kv_reply *reply) {
  sync_call *s = arg;
  pthread_mutex_lock(&s->mu);
  if (err == 0 && (s->reply = kv_reply_dup(reply)) == NULL)
    err = WEFT_ENOMEM;
  s->err = err;
  s->done = true;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void sync_start(void *arg) {
  sync_call *s = arg;
  int rc = kv_cluster_client_call(s->cc, s->cmd, s->argc, s->argv,
                                  s->timeout_ns, sync_done, s);
  if (rc < 0)
    sync_done(s, rc, NULL);
}

int kv_cluster_sync_call(kv_cluster_client *cc, int cmd, size_t argc,
                         const kv_arg *argv, uint64_t timeout_ns,
                         kv_reply **out) {
  if (weft_loop_current() != NULL)
    return WEFT_EINVAL;
  sync_call s = {.cc = cc,
                 .cmd = cmd,
                 .argc = argc,
                 .argv = argv,
                 .timeout_ns = timeout_ns};
  pthread_mutex_init(&s.mu, NULL);
  pthread_cond_init(&s.cv, NULL);
  int rc = weft_loop_execute(cc->loop, sync_start, &s);
  pthread_mutex_lock(&s.mu);
  while (rc == 0 && !s.done)
    pthread_cond_wait(&s.cv, &s.mu);
  pthread_mutex_unlock(&s.mu);
  pthread_cond_destroy(&s.cv);
  pthread_mutex_destroy(&s.mu);
  if (rc == 0)
    rc = s.err;
  *out = rc == 0 ? s.reply : NULL;
  return rc;
}

/* ---- setup and teardown ---- */

weft_loop *kv_cluster_client_loop(const kv_cluster_client *cc) {
  return cc->loop;
}

size_t kv_cluster_client_nodes(kv_cluster_client *cc) {
  pthread_mutex_lock(&cc->lock);
  size_t n = cc->n_nodes;
  pthread_mutex_unlock(&cc->lock);
  return n;
}

static char *dup_or_null(const char *s) { return s != NULL ? strdup(s) : NULL; }

/* Copies `opts` with strings and TLS context of our own. */
static int copy_options(kv_cluster_client *cc, const kv_client_options *opts) {
  if (opts == NULL)
    kv_client_options_init(&cc->opts);
  else
    cc->opts = *opts;
  cc->user = dup_or_null(cc->opts.user);
  cc->password = dup_or_null(cc->opts.password);
  cc->sni = dup_or_null(cc->opts.tls_server_name);
  if ((cc->opts.user && !cc->user) || (cc->opts.password && !cc->password) ||
      (cc->opts.tls_server_name && !cc->sni))
    return WEFT_ENOMEM;
  cc->opts.user = cc->user;
  cc->opts.password = cc->password;
  cc->opts.tls_server_name = cc->sni;
  if (cc->opts.tls != NULL)
    weft_tls_context_retain(cc->opts.tls);
  return 0;
}

static void free_client(kv_cluster_client *cc) {
  if (cc->password != NULL)
    explicit_bzero(cc->password, strlen(cc->password));
  free(cc->user);
  free(cc->password);
  free(cc->sni);
  weft_tls_context_release(cc->opts.tls);
  pthread_mutex_destroy(&cc->lock);
  free(cc);
}

/* Reads the map from the seed (node 0). A server without cluster mode
 * leaves it empty: everything goes to the seed. */
static int load_map(kv_cluster_client *cc, kv_client *seed) {
  kv_arg sub = {"SLOTS", 5};
  kv_reply *r;
  int rc = kv_sync_call(seed, KV_CMD_CLUSTER, 1, &sub, 0, &r);
  if (rc < 0)
    return rc;
  bool standalone = kv_reply_is_error(r) && r->len >= 20 &&
                    memmem(r->str, r->len, "cluster support disabled", 24);
  if (!standalone && !apply_slots(cc, r)) {
    weft_log(WEFT_LOG_ERROR,
             "kv cluster client: CLUSTER SLOTS answered "
             "%.*s, not a slot map",
             r->tag == KV_TAG_ERROR ? (int)r->len : 10,
             r->tag == KV_TAG_ERROR ? (const char *)r->str : "something");
    rc = WEFT_EPROTO;
  }
  kv_reply_free(r);
  return rc;
}

int kv_cluster_client_connect(kv_cluster_client **out, weft_loop_group *group,
                              const char *uri, const kv_client_options *opts) {
  weft_endpoint ep;
  if (weft_loop_current() != NULL || weft_endpoint_parse(uri, &ep, NULL, 0) < 0)
    return WEFT_EINVAL;
  kv_cluster_client *cc = calloc(1, sizeof *cc);
  if (cc == NULL)
    return WEFT_ENOMEM;
  pthread_mutex_init(&cc->lock, NULL);
  cc->group = group;
  memset(cc->owner, NO_NODE, sizeof cc->owner);
  snprintf(cc->scheme, sizeof cc->scheme, "%s", ep.transport);
  int rc = copy_options(cc, opts);
  kv_client *seed = NULL;
  if (rc == 0)
    rc = kv_sync_connect(&seed, group, uri, &cc->opts);
  if (rc == 0) {
    cc->loop = kv_client_loop(seed);
    node_index(cc, ep.host, strlen(ep.host), ep.port);
    cc->nodes[0].client = seed;
    rc = load_map(cc, seed);
  }
  if (rc < 0) {
    if (seed != NULL)
      kv_sync_close(seed);
    free_client(cc);
    return rc;
  }
  *out = cc;
  return 0;
}

void kv_cluster_client_close(kv_cluster_client *cc) {
  kv_client *clients[NODES_MAX];
  pthread_mutex_lock(&cc->lock);
  cc->closing = true;
  size_t n = cc->n_nodes;
  for (size_t i = 0; i < n; i++) {
    clients[i] = cc->nodes[i].client;
    cc->nodes[i].client = NULL;
  }
  pthread_mutex_unlock(&cc->lock);
  /* The loop may still run callbacks of these clients (they see closing
   * and send nothing new); kv_sync_close waits for each one's last. */
  for (size_t i = 0; i < n; i++)
    if (clients[i] != NULL)
      kv_sync_close(clients[i]);
  free_client(cc);
}
