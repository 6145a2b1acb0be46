/* SPDX-License-Identifier: Apache-2.0 */
/* DUMP, RESTORE (and RESTORE-ASKING) and MIGRATE: moving keys between
 * servers, for Redis Cluster's slot migration (cluster.h) and on their own.
 *
 * The payload DUMP writes and RESTORE reads is weft's, not Redis' RDB
 * encoding: the 4 bytes "WKV" 0x01, then the value's bytes (every value
 * here is a string). RESTORE refuses anything else with Redis' own error,
 * so a redis-server's DUMP is never stored as garbage, and weft and
 * redis-server cannot MIGRATE to each other.
 *
 * MIGRATE (with migrate.h and migrate_conn.c) never holds a lock or a
 * loop thread across the network: under the keys' stripe locks it takes a
 * reference to each value (blobs are immutable) and its TTL, and lets the
 * locks go; the loop then connects to the target, sends AUTH and one
 * RESTORE-ASKING per key and reads the replies without blocking, while the
 * client's connection runs nothing more (its next commands wait, in
 * order, and it reads no more); at the end, under the locks again, it
 * deletes (unless COPY) each key the target answered +OK for whose value
 * is still the blob sent, and answers the client. A key written meanwhile
 * stays here (the target has the older value: the next MIGRATE with
 * REPLACE moves it again, as a resharding loop does), and the cluster gate
 * (cluster.c) still sees every key here until it is deleted. In cluster
 * mode, while the slot is marked migrating, a write to a key in flight
 * gets TRYAGAIN instead (a DEL here would otherwise be undone by the
 * target's copy): see "keys in flight" below.
 *
 * What it may reach (README "MIGRATE"): numeric addresses only (no DNS on
 * a loop thread); by default only the node lines of the [cluster] config
 * ([kv] migrate_any_host = yes opens it); TLS when this server serves TLS
 * ([kv] tls_listen), with its CAs and certificate; AUTH never in clear
 * (refused over plaintext to a non-loopback target); the timeout clamped
 * to [kv] migrate_timeout_max_ms. Refused inside MULTI (the gate,
 * KV_CF_NOMULTI: EXEC would hold every stripe for the round trip) and on
 * the RPC port (which answers every call at once). A reply other than
 * "+OK" or "-..." (an HTTP server's "HTTP/1.1 400") fails it, keeping
 * every key not yet answered.
 */
#include "command_internal.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <weft/error.h>

#include "cluster.h"
#include "migrate.h"

static const char payload_magic[4] = {'W', 'K', 'V', 1};

/* DUMP key: the value in weft's payload, or nil. */
void kv_cmd_dump(const kv_call *c) {
  kv_blob *v = NULL;
  int rc = kv_get(c->store, c->argv[0].ptr, c->argv[0].len, &v);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  if (rc == 0)
    return c->ops->null(c->w);
  char *p = malloc(sizeof payload_magic + v->len);
  if (p == NULL) {
    kv_blob_release(v);
    return kv_reply_store_error(c, WEFT_ENOMEM);
  }
  memcpy(p, payload_magic, sizeof payload_magic);
  memcpy(p + sizeof payload_magic, v->data, v->len);
  c->ops->bulk(c->w, p, sizeof payload_magic + v->len, NULL);
  free(p);
  kv_blob_release(v);
}

/* Redis' reply to RESTORE onto an existing key without REPLACE. */
#define KV_BUSYKEY_TEXT "BUSYKEY Target key name already exists."

/* RESTORE key ttl payload [REPLACE] [ABSTTL], and RESTORE-ASKING (the
 * same; the gate lets it into a slot being imported). ttl in ms, 0 = no
 * TTL; ABSTTL: a Unix time in ms. */
void kv_cmd_restore(const kv_call *c) {
  bool replace = false, abs = false;
  for (size_t i = 3; i < c->argc; i++) {
    if (kv_arg_is(&c->argv[i], "REPLACE"))
      replace = true;
    else if (kv_arg_is(&c->argv[i], "ABSTTL"))
      abs = true;
    else
      return kv_reply_syntax(c);
  }
  /* Redis' order: an existing key is refused before the TTL and the
   * payload are looked at (a payload from elsewhere would otherwise get
   * the checksum error). The store's NX below still decides a race. */
  int exists = replace ? 0 : kv_exists(c->store, 1, &c->argv[0]);
  if (exists < 0)
    return kv_reply_store_error(c, exists);
  if (exists > 0)
    return c->ops->error(c->w, KV_BUSYKEY_TEXT);
  int64_t ttl;
  if (!kv_parse_i64(&c->argv[1], &ttl))
    return kv_reply_not_integer(c);
  if (ttl < 0)
    return c->ops->error(c->w, "ERR Invalid TTL value, must be >= 0");
  const kv_arg *p = &c->argv[2];
  if (p->len < sizeof payload_magic ||
      memcmp(p->ptr, payload_magic, sizeof payload_magic) != 0)
    return c->ops->error(c->w,
                         "ERR DUMP payload version or checksum are wrong");
  const kv_arg *key = &c->argv[0];
  if (abs && ttl != 0) {
    ttl -= kv_unix_ms();
    if (ttl <= 0) { /* expired already: Redis creates nothing */
      int rc = replace ? kv_del(c->store, 1, key) : 0;
      return rc < 0 ? kv_reply_store_error(c, rc) : c->ops->simple(c->w, "OK");
    }
  }
  kv_set_options o = {.flags = replace ? 0 : KV_SET_NX,
                      .ttl_ms = ttl > KV_TTL_MAX_MS ? KV_TTL_MAX_MS : ttl};
  int rc = kv_set(c->store, key->ptr, key->len,
                  (const char *)p->ptr + sizeof payload_magic,
                  p->len - sizeof payload_magic, &o);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  if (rc == 0)
    return c->ops->error(c->w, KV_BUSYKEY_TEXT);
  c->ops->simple(c->w, "OK");
}

/* ---- MIGRATE ---- */

/** MIGRATE's parsed arguments. */
typedef struct migrate_args {
  char host[KV_CLUSTER_HOST_MAX];
  int port;
  int64_t timeout_ms;
  bool copy, replace;
  const kv_arg *user, *password; /* AUTH / AUTH2, or NULL */
  const kv_arg *keys;            /* into the call's argv */
  size_t n_keys;
} migrate_args;

/* Parses MIGRATE host port key|"" db timeout [options] into `a`; NULL, or
 * the error reply's text. */
static const char *migrate_parse(const kv_call *c, migrate_args *a) {
  const kv_arg *v = c->argv;
  int64_t db, port;
  *a = (migrate_args){.keys = &v[2], .n_keys = 1};
  if (v[0].len == 0 || v[0].len >= sizeof a->host)
    return "ERR syntax error";
  memcpy(a->host, v[0].ptr, v[0].len);
  if (!kv_parse_i64(&v[1], &port) || port < 1 || port > 65535 ||
      !kv_parse_i64(&v[3], &db) || !kv_parse_i64(&v[4], &a->timeout_ms))
    return "ERR value is not an integer or out of range";
  a->port = (int)port;
  if (db != 0)
    return "ERR DB index is out of range"; /* one database here */
  if (a->timeout_ms <= 0)
    a->timeout_ms = 1000; /* Redis' default for 0 */
  for (size_t i = 5; i < c->argc; i++) {
    if (kv_arg_is(&v[i], "COPY")) {
      a->copy = true;
    } else if (kv_arg_is(&v[i], "REPLACE")) {
      a->replace = true;
    } else if (kv_arg_is(&v[i], "AUTH") && i + 1 < c->argc) {
      a->password = &v[++i];
    } else if (kv_arg_is(&v[i], "AUTH2") && i + 2 < c->argc) {
      a->user = &v[++i];
      a->password = &v[++i];
    } else if (kv_arg_is(&v[i], "KEYS")) {
      if (v[2].len != 0)
        return "ERR When using MIGRATE KEYS option, the key argument must "
               "be set to the empty string";
      a->keys = &v[i + 1];
      a->n_keys = c->argc - i - 1;
      break;
    } else {
      return "ERR syntax error";
    }
  }
  return NULL;
}

/** A numeric address (inet_pton's form), to compare two spellings. */
typedef struct ip_addr {
  int family; /* AF_INET, AF_INET6, or 0: not numeric */
  unsigned char bytes[16];
} ip_addr;

static ip_addr ip_parse(const char *host) {
  ip_addr a = {0};
  if (inet_pton(AF_INET, host, a.bytes) == 1)
    a.family = AF_INET;
  else if (inet_pton(AF_INET6, host, a.bytes) == 1)
    a.family = AF_INET6;
  return a;
}

/* True when host:port is a node line of the cluster config: the same text
 * (case aside), or the same numeric address. */
static bool is_cluster_node(const kv_cluster *cl, const char *host, int port) {
  ip_addr want = ip_parse(host);
  for (size_t i = 0; cl != NULL && i < cl->n_nodes; i++) {
    const kv_cluster_node *n = &cl->nodes[i];
    if (n->port != port)
      continue;
    ip_addr have = ip_parse(n->host);
    if (strcasecmp(n->host, host) == 0 ||
        (want.family != 0 && have.family == want.family &&
         memcmp(have.bytes, want.bytes, sizeof want.bytes) == 0))
      return true;
  }
  return false;
}

/* What MIGRATE may reach (README "MIGRATE"): NULL, or the refusal's text
 * in `err` (`cap` bytes). */
static const char *migrate_policy(const kv_call *c, const migrate_args *a,
                                  char *err, size_t cap) {
  const kv_shared *sh = c->sess->shared;
  if (c->sess->rpc)
    return "ERR MIGRATE is served on the RESP port only (it waits on the "
           "target; the RPC port answers every call at once)";
  if (c->sess->in_exec) /* the gate refuses it in MULTI already */
    return "ERR MIGRATE is not allowed inside MULTI";
  ip_addr ip = ip_parse(a->host);
  if (ip.family == 0) {
    snprintf(err, cap,
             "ERR MIGRATE needs a numeric IP address, not '%.64s' (no DNS "
             "lookup on an event loop)",
             a->host);
    return err;
  }
  if (!sh->migrate_any_host &&
      !is_cluster_node(sh->cluster, a->host, a->port)) {
    snprintf(err, cap,
             "ERR MIGRATE target %.64s:%d is not a node of this server's "
             "[cluster] config; set [kv] migrate_any_host = yes to allow any "
             "host",
             a->host, a->port);
    return err;
  }
  char hp[KV_ADDR_MAX];
  snprintf(hp, sizeof hp, ip.family == AF_INET6 ? "[%s]:%d" : "%s:%d", a->host,
           a->port);
  if (a->password != NULL && sh->migrate_tls == NULL &&
      !kv_addr_is_loopback(hp))
    return "ERR MIGRATE sends AUTH only over TLS (this server's [kv] "
           "tls_listen) or to a loopback address, never in clear";
  return NULL;
}

/* A malloc'd NUL-terminated copy of an argument, or NULL. */
static char *arg_dup(const kv_arg *a) {
  char *p = malloc(a->len + 1);
  if (p != NULL) {
    memcpy(p, a->ptr, a->len);
    p[a->len] = '\0';
  }
  return p;
}

/* ---- keys in flight (cluster mode) ----
 * A write to a key between its snapshot and its delete would be lost when
 * the slot's owner changes (the target has the older value; a DEL here
 * would bring the key back there). Redis blocks such writes by running
 * MIGRATE with the server blocked; here they get TRYAGAIN while the slot
 * is migrating, and redis-cli, redis-py and weft's own cluster client
 * retry. The list is changed and read with the keys' stripes locked, so a
 * write is either before the snapshot (its value is sent) or sees it. */

/* Puts m on its cluster's list (the keys' stripes locked). */
static void register_op(kv_migrate *m, kv_cluster *cl) {
  pthread_mutex_lock(&cl->migrate_lock);
  m->cluster = cl;
  m->next_op = cl->migrating_ops;
  if (m->next_op != NULL)
    m->next_op->prev_op = m;
  cl->migrating_ops = m;
  pthread_mutex_unlock(&cl->migrate_lock);
}

/* Takes m off it (the keys' stripes locked). */
static void unregister_op(kv_migrate *m) {
  kv_cluster *cl = m->cluster;
  if (cl == NULL)
    return;
  pthread_mutex_lock(&cl->migrate_lock);
  if (m->prev_op != NULL)
    m->prev_op->next_op = m->next_op;
  else
    cl->migrating_ops = m->next_op;
  if (m->next_op != NULL)
    m->next_op->prev_op = m->prev_op;
  pthread_mutex_unlock(&cl->migrate_lock);
  m->cluster = NULL;
}

/* True when a MIGRATE in flight on `cl` holds `key` (its lock held). */
static bool key_in_flight(const kv_cluster *cl, const kv_arg *key) {
  for (const kv_migrate *m = cl->migrating_ops; m != NULL; m = m->next_op)
    for (size_t i = 0; i < m->n; i++)
      if (m->keys[i].klen == key->len &&
          memcmp(m->keys[i].key, key->ptr, key->len) == 0)
        return true;
  return false;
}

bool kv_migrate_keys_busy(kv_cluster *cl, const kv_command *k, size_t argc,
                          const kv_arg *argv) {
  if (!(k->flags & KV_CF_WRITE) || k->first_key <= 0 || argc == 0)
    return false;
  size_t first = (size_t)k->first_key - 1;
  size_t last = k->last_key < 0 ? argc - 1 : (size_t)k->last_key - 1;
  bool busy = false;
  pthread_mutex_lock(&cl->migrate_lock);
  for (size_t i = first; i <= last && i < argc && !busy;
       i += (size_t)k->key_step)
    busy = cl->migrating_ops != NULL && key_in_flight(cl, &argv[i]);
  pthread_mutex_unlock(&cl->migrate_lock);
  return busy;
}

void kv_migrate_free(kv_migrate *m) {
  if (m->cluster != NULL) { /* ended before its delete phase */
    kv_txn t;
    kv_txn_init(&t, m->store);
    for (size_t i = 0; i < m->n; i++)
      kv_txn_add_key(&t, m->keys[i].key, m->keys[i].klen);
    kv_txn_lock(&t);
    unregister_op(m);
    kv_txn_unlock(&t);
  }
  for (size_t i = 0; i < m->n; i++) {
    free(m->keys[i].key);
    kv_blob_release(m->keys[i].value);
  }
  if (m->password != NULL) {
    explicit_bzero(m->password, strlen(m->password));
    free(m->password);
  }
  free(m->user);
  free(m);
}

/* ---- the operation ---- */

/* The operation with the existing keys' values, taken under their stripes'
 * locks and released before any network wait (registered as in flight in
 * cluster mode). NULL without memory. */
static kv_migrate *snapshot(const kv_call *c, const migrate_args *a) {
  kv_migrate *m = calloc(1, sizeof *m + a->n_keys * sizeof m->keys[0]);
  if (m == NULL)
    return NULL;
  m->store = c->store;
  kv_txn t;
  kv_txn_init(&t, c->store);
  for (size_t i = 0; i < a->n_keys; i++)
    kv_txn_add_key(&t, a->keys[i].ptr, a->keys[i].len);
  kv_txn_lock(&t);
  bool ok = true;
  for (size_t i = 0; i < a->n_keys && ok; i++) {
    const kv_arg *key = &a->keys[i];
    kv_migrate_key *k = &m->keys[m->n];
    int64_t ttl;
    /* Value and TTL in one lookup: read apart, a key expiring between
     * the two was sent with TTL 0, which the target keeps for ever. */
    if (kv_get_pttl(c->store, key->ptr, key->len, &k->value, &ttl) != 1)
      continue;
    k->ttl_ms = ttl > 0 ? ttl : 0;
    k->klen = key->len;
    ok = (k->key = arg_dup(key)) != NULL;
    m->n++; /* freed with m either way */
  }
  if (ok && m->n > 0 && c->sess->shared->cluster != NULL)
    register_op(m, c->sess->shared->cluster);
  kv_txn_unlock(&t);
  m->password = a->password != NULL ? arg_dup(a->password) : NULL;
  m->user = a->user != NULL ? arg_dup(a->user) : NULL;
  if (!ok || (a->password != NULL && m->password == NULL) ||
      (a->user != NULL && m->user == NULL)) {
    kv_migrate_free(m);
    return NULL;
  }
  return m;
}

/* Deletes (unless COPY) the keys the target took whose value is still the
 * blob sent: one written meanwhile (SET, APPEND, INCR, DEL then SET: every
 * write stores a new blob; in cluster mode only while the slot is not
 * marked migrating) stays, and the next MIGRATE moves it again. Then the
 * keys are no longer in flight. */
static void settle(kv_migrate *m) {
  kv_txn t;
  kv_txn_init(&t, m->store);
  for (size_t i = 0; i < m->n; i++)
    kv_txn_add_key(&t, m->keys[i].key, m->keys[i].klen);
  kv_txn_lock(&t);
  for (size_t i = 0; i < m->n && !m->copy; i++) {
    kv_migrate_key *k = &m->keys[i];
    kv_blob *now = NULL;
    if (!k->moved || kv_get(m->store, k->key, k->klen, &now) != 1)
      continue;
    if (now == k->value)
      kv_del(m->store, 1, &(kv_key){k->key, k->klen});
    kv_blob_release(now);
  }
  unregister_op(m); /* writes to these keys go on (or ASK, once gone) */
  kv_txn_unlock(&t);
}

void kv_migrate_done(kv_migrate *m, const char *failed) {
  settle(m);
  kv_session *s = m->sess;
  if (s == NULL)
    return; /* the client went: nobody to answer */
  s->migrate = NULL;
  s->blocked = false;
  if (failed != NULL)
    m->ops->error(m->w, failed);
  else
    m->ops->simple(m->w, "OK");
  if (!m->starting && s->resume != NULL)
    s->resume(s); /* its next commands, and the flush */
}

void kv_migrate_detach(kv_session *s) {
  if (s->migrate != NULL)
    s->migrate->sess = NULL;
  s->migrate = NULL;
  s->blocked = false;
}

/* MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH password]
 * [AUTH2 username password] [KEYS key ...]: see the top of the file. */
void kv_cmd_migrate(const kv_call *c) {
  migrate_args a;
  char err[256];
  const char *bad = migrate_parse(c, &a);
  if (bad == NULL)
    bad = migrate_policy(c, &a, err, sizeof err);
  if (bad != NULL)
    return c->ops->error(c->w, bad);
  kv_migrate *m = snapshot(c, &a);
  if (m == NULL)
    return kv_reply_store_error(c, WEFT_ENOMEM);
  if (m->n == 0) {
    kv_migrate_free(m);
    return c->ops->simple(c->w, "NOKEY");
  }
  const kv_shared *sh = c->sess->shared;
  m->sess = c->sess;
  m->ops = c->ops;
  m->w = c->w;
  m->store = c->store;
  m->copy = a.copy;
  m->replace = a.replace;
  m->tls = sh->migrate_tls;
  m->timeout_ms = a.timeout_ms < sh->migrate_timeout_max_ms
                      ? a.timeout_ms
                      : sh->migrate_timeout_max_ms;
  snprintf(m->host, sizeof m->host, "%s", a.host);
  snprintf(m->uri, sizeof m->uri,
           strchr(a.host, ':') != NULL ? "tcp://[%s]:%d" : "tcp://%s:%d",
           a.host, a.port);
  /* The session runs nothing more until kv_migrate_done answers. */
  c->sess->blocked = true;
  c->sess->migrate = m;
  kv_migrate_connect(m);
}
