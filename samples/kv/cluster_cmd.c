/* SPDX-License-Identifier: Apache-2.0 */
/* The CLUSTER command family, ASKING, READONLY and READWRITE (cluster.h),
 * in the reply formats of Redis 7.0 that cluster clients parse: redis-cli
 * and redis-benchmark read CLUSTER NODES, redis-py and most libraries
 * CLUSTER SLOTS (or SHARDS). */
#include "command_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/log.h>

#include "cluster.h"

#define DISABLED "ERR This instance has cluster support disabled"

/* The cluster of the call's server, or NULL after the error reply. */
static kv_cluster *cluster_of(const kv_call *c) {
  kv_cluster *cl = c->sess->shared->cluster;
  if (cl == NULL)
    c->ops->error(c->w, DISABLED);
  return cl;
}

/* ---- ASKING, READONLY, READWRITE ---- */

/* ASKING: the next command may use a slot this node is importing. */
void kv_cmd_asking(const kv_call *c) {
  if (cluster_of(c) == NULL)
    return;
  c->sess->asking = true;
  c->ops->simple(c->w, "OK");
}

/* READONLY: for reads from replicas; there are none, and every node
 * serves reads of its own slots anyway, so it changes nothing. */
void kv_cmd_readonly(const kv_call *c) {
  if (cluster_of(c) != NULL)
    c->ops->simple(c->w, "OK");
}

/* READWRITE: the end of READONLY; accepted likewise. */
void kv_cmd_readwrite(const kv_call *c) {
  if (cluster_of(c) != NULL)
    c->ops->simple(c->w, "OK");
}

/* ---- the slot map, read ---- */

static uint8_t owner_of(const kv_cluster *cl, size_t slot) {
  return atomic_load_explicit(&cl->owner[slot], memory_order_relaxed);
}

/* Runs of slots with an owner, and when `node` is not NO_NODE only its. */
static size_t count_runs(const kv_cluster *cl, uint8_t node) {
  size_t n = 0;
  for (size_t s = 0; s < KV_CLUSTER_SLOTS; s = kv_cluster_run_end(cl, s) + 1) {
    uint8_t o = owner_of(cl, s);
    n += o != KV_CLUSTER_NO_NODE && (node == KV_CLUSTER_NO_NODE || o == node);
  }
  return n;
}

/* A node as CLUSTER SLOTS lists it: ip, port, id, and a map of its other
 * endpoints (none here). To an RPC client (weft-kv, weft-kvbench), the
 * node's RPC address, as the redirections give it. */
static void slots_node(const kv_call *c, const kv_cluster_node *n) {
  bool rpc = c->sess->rpc && n->rpc_port != 0;
  c->ops->array(c->w, 4);
  kv_reply_cstr(c, rpc ? n->rpc_host : n->host);
  c->ops->integer(c->w, rpc ? n->rpc_port : n->port);
  kv_reply_cstr(c, n->id);
  c->ops->map(c->w, 0);
}

/* CLUSTER SLOTS: one entry per run of slots: first, last, then the master
 * (no replicas). */
static void cluster_slots(const kv_call *c, kv_cluster *cl) {
  c->ops->array(c->w, count_runs(cl, KV_CLUSTER_NO_NODE));
  for (size_t s = 0; s < KV_CLUSTER_SLOTS;) {
    size_t last = kv_cluster_run_end(cl, s);
    uint8_t o = owner_of(cl, s);
    if (o != KV_CLUSTER_NO_NODE) {
      c->ops->array(c->w, 3);
      c->ops->integer(c->w, (int64_t)s);
      c->ops->integer(c->w, (int64_t)last);
      slots_node(c, &cl->nodes[o]);
    }
    s = last + 1;
  }
}

static void pair_str(const kv_call *c, const char *k, const char *v) {
  kv_reply_cstr(c, k);
  kv_reply_cstr(c, v);
}

/* CLUSTER SHARDS: per node (each is a shard of one master), a map of its
 * "slots" (first and last of each run, flattened) and its "nodes" (one
 * map of id, port, ip, endpoint, role, replication-offset, health). */
static void cluster_shards(const kv_call *c, kv_cluster *cl) {
  c->ops->array(c->w, cl->n_nodes);
  for (size_t i = 0; i < cl->n_nodes; i++) {
    const kv_cluster_node *n = &cl->nodes[i];
    c->ops->map(c->w, 2);
    kv_reply_cstr(c, "slots");
    c->ops->array(c->w, 2 * count_runs(cl, (uint8_t)i));
    for (size_t s = 0; s < KV_CLUSTER_SLOTS;) {
      size_t last = kv_cluster_run_end(cl, s);
      if (owner_of(cl, s) == i) {
        c->ops->integer(c->w, (int64_t)s);
        c->ops->integer(c->w, (int64_t)last);
      }
      s = last + 1;
    }
    kv_reply_cstr(c, "nodes");
    c->ops->array(c->w, 1);
    c->ops->map(c->w, 7);
    pair_str(c, "id", n->id);
    kv_reply_cstr(c, "port");
    c->ops->integer(c->w, n->port);
    pair_str(c, "ip", n->host);
    pair_str(c, "endpoint", n->host);
    pair_str(c, "role", "master");
    kv_reply_cstr(c, "replication-offset");
    c->ops->integer(c->w, 0);
    pair_str(c, "health", "online");
  }
}

/* Closes `f` (an open_memstream of `*buf`, `*len`: both are set only by
 * the close) and sends what it holds as a verbatim string, as Redis sends
 * CLUSTER NODES and CLUSTER INFO. */
static void reply_stream(const kv_call *c, FILE *f, char **buf, size_t *len) {
  if (fclose(f) != 0 || *buf == NULL)
    kv_reply_store_error(c, WEFT_ENOMEM);
  else
    c->ops->verbatim(c->w, *buf, *len);
  free(*buf);
}

static void cluster_nodes(const kv_call *c, kv_cluster *cl) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (f == NULL)
    return kv_reply_store_error(c, WEFT_ENOMEM);
  for (size_t i = 0; i < cl->n_nodes; i++)
    kv_cluster_node_line(f, cl, i, kv_unix_ms());
  reply_stream(c, f, &buf, &len);
}

/* CLUSTER INFO: the state is "ok" when every slot has an owner (Redis'
 * cluster-require-full-coverage yes) and the state file holds the map
 * served (else a restart would bring back another: the node knows its
 * map is not what it would serve); no gossip, so no messages. */
static void cluster_info(const kv_call *c, kv_cluster *cl) {
  size_t assigned = kv_cluster_slots_assigned(cl), size = 0;
  for (size_t i = 0; i < cl->n_nodes; i++)
    size += count_runs(cl, (uint8_t)i) > 0;
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (f == NULL)
    return kv_reply_store_error(c, WEFT_ENOMEM);
  fprintf(f,
          "cluster_state:%s\r\ncluster_slots_assigned:%zu\r\n"
          "cluster_slots_ok:%zu\r\ncluster_slots_pfail:0\r\n"
          "cluster_slots_fail:0\r\ncluster_known_nodes:%zu\r\n"
          "cluster_size:%zu\r\ncluster_current_epoch:%llu\r\n"
          "cluster_my_epoch:%llu\r\ncluster_stats_messages_sent:0\r\n"
          "cluster_stats_messages_received:0\r\n"
          "total_cluster_links_buffer_limit_exceeded:0\r\n",
          assigned == KV_CLUSTER_SLOTS && !atomic_load(&cl->save_failed)
              ? "ok"
              : "fail",
          assigned, assigned, cl->n_nodes, size,
          (unsigned long long)atomic_load(&cl->epoch),
          (unsigned long long)atomic_load(&cl->node_epoch[cl->myself]));
  reply_stream(c, f, &buf, &len);
}

/* ---- keys of a slot ---- */

/* A slot argument, 0 to 16383, or -1 after "ERR Invalid or out of range
 * slot". */
static int slot_arg(const kv_call *c, const kv_arg *a) {
  int64_t v;
  if (!kv_parse_i64(a, &v) || v < 0 || v >= KV_CLUSTER_SLOTS) {
    c->ops->error(c->w, "ERR Invalid or out of range slot");
    return -1;
  }
  return (int)v;
}

/* Walks the whole store with SCAN and keeps the keys of `slot` (up to
 * `max` of them in `out`, when given); returns how many there are, or a
 * negative weft error. The store keeps no index by slot, so this is O(keys
 * in the store): for operators and migrations, not for hot paths. */
static int64_t keys_in_slot(kv_store *store, unsigned slot, int64_t max,
                            kv_scan_result *out) {
  kv_scan_result r = {0};
  uint64_t cursor = 0;
  int64_t n = 0;
  do {
    int rc = kv_scan(store, cursor, KV_SCAN_COUNT_MAX, NULL, 0, &r, &cursor);
    if (rc < 0) {
      kv_scan_result_clear(&r);
      return rc;
    }
    for (size_t i = 0; i < r.n; i++) {
      kv_blob *k = r.keys[i];
      if (kv_cluster_keyslot(k->data, k->len) != slot)
        continue;
      if (out != NULL && n < max) {
        /* Moved to `out`: the result's array keeps a stale pointer that
         * the NULL below stops clear from releasing. */
        kv_blob **keys =
            kv_array_reserve(out->keys, out->n, &out->cap, sizeof *keys);
        if (keys == NULL) {
          kv_scan_result_clear(&r);
          return WEFT_ENOMEM;
        }
        out->keys = keys;
        out->keys[out->n++] = k;
        r.keys[i] = NULL;
      }
      n++;
    }
    kv_scan_result_clear(&r);
  } while (cursor != 0);
  return n;
}

/* CLUSTER COUNTKEYSINSLOT slot. */
static void cluster_countkeys(const kv_call *c) {
  int slot = slot_arg(c, &c->argv[1]);
  if (slot < 0)
    return;
  int64_t n = keys_in_slot(c->store, (unsigned)slot, 0, NULL);
  if (n < 0)
    return kv_reply_store_error(c, (int)n);
  c->ops->integer(c->w, n);
}

/* CLUSTER GETKEYSINSLOT slot count. A key can be returned twice when the
 * table grows during the walk (SCAN's guarantee). */
static void cluster_getkeys(const kv_call *c) {
  int64_t max;
  if (!kv_parse_i64(&c->argv[2], &max) || max < 0)
    return c->ops->error(c->w, "ERR Invalid number of keys");
  int slot = slot_arg(c, &c->argv[1]);
  if (slot < 0)
    return;
  kv_scan_result keys = {0};
  int64_t n = keys_in_slot(c->store, (unsigned)slot, max, &keys);
  if (n < 0) {
    kv_scan_result_clear(&keys);
    return kv_reply_store_error(c, (int)n);
  }
  c->ops->array(c->w, keys.n);
  for (size_t i = 0; i < keys.n; i++)
    c->ops->bulk(c->w, keys.keys[i]->data, keys.keys[i]->len, keys.keys[i]);
  kv_scan_result_clear(&keys);
}

/* ---- SETSLOT ---- */

/* The node argument of SETSLOT, or -1 after "ERR I don't know about node". */
static int node_arg(const kv_call *c, kv_cluster *cl, const kv_arg *a) {
  int n = kv_cluster_find_node(cl, a->ptr, a->len);
  if (n < 0) {
    char id[KV_CLUSTER_ID_LEN + 1];
    snprintf(id, sizeof id, "%.*s", (int)a->len, (const char *)a->ptr);
    kv_reply_errorf(c, "ERR I don't know about node %s", id);
  }
  return n;
}

/* After a SETSLOT changed the map: writes the state file (a restart loads
 * it) and answers OK, or an error saying the change holds here but was
 * not saved (CLUSTER INFO says cluster_state:fail until a save works). */
static void reply_saved(const kv_call *c, kv_cluster *cl) {
  char err[KV_CLUSTER_PATH_MAX + 128];
  if (kv_cluster_state_save(cl, err, sizeof err) == 0)
    return c->ops->simple(c->w, "OK");
  weft_log(WEFT_LOG_ERROR, "kv: cluster state not saved: %s", err);
  kv_reply_errorf(c,
                  "ERR the slot map changed here but was not saved, a "
                  "restart would undo it: %s",
                  err);
}

/* SETSLOT slot NODE id: the slot's owner changes, here (every node must be
 * told: there is no gossip). The migration marks end where Redis ends them:
 * importing when this node takes the slot, migrating when it gives it.
 * Giving a slot away needs it empty; the check and the change are one step
 * under every stripe lock: the gate routes a keyed command under its keys'
 * stripe locks (cluster.c), so a write is either seen by the check (and
 * the slot kept) or routed after the change (MOVED), never acknowledged
 * here and then stranded behind MOVED. */
static void setslot_node(const kv_call *c, kv_cluster *cl, unsigned slot,
                         int node) {
  kv_txn t;
  bool locked = kv_txn_lock_all(&t, c->store);
  uint8_t was = owner_of(cl, slot);
  int64_t keys = 0;
  if (was == cl->myself && (unsigned)node != cl->myself)
    keys = keys_in_slot(c->store, slot, 0, NULL);
  if (keys == 0) {
    /* The owner first, then the marks (seq_cst): the gate reads them in
     * the other order (cluster.c, route), so a command that sees the
     * migration over sees the new owner too. */
    atomic_store(&cl->owner[slot], (uint8_t)node);
    if ((unsigned)node == cl->myself)
      atomic_store(&cl->importing[slot], KV_CLUSTER_NO_NODE);
    else
      atomic_store(&cl->migrating[slot], KV_CLUSTER_NO_NODE);
    if (was != node) {
      uint64_t e = atomic_fetch_add(&cl->epoch, 1) + 1;
      atomic_store(&cl->node_epoch[node], e);
    }
  }
  if (locked)
    kv_txn_unlock(&t);
  if (keys < 0)
    return kv_reply_store_error(c, (int)keys);
  if (keys > 0) {
    char msg[128];
    snprintf(msg, sizeof msg,
             "ERR Can't assign hashslot %u to a different node while I "
             "still hold keys for this hash slot.",
             slot);
    return c->ops->error(c->w, msg);
  }
  reply_saved(c, cl);
}

/* CLUSTER SETSLOT slot IMPORTING id | MIGRATING id | STABLE | NODE id. */
static void cluster_setslot(const kv_call *c, kv_cluster *cl) {
  if (c->argc < 3)
    return kv_reply_arity(c);
  int slot = slot_arg(c, &c->argv[1]);
  if (slot < 0)
    return;
  const kv_arg *how = &c->argv[2];
  if (kv_arg_is(how, "STABLE")) {
    if (c->argc != 3)
      return kv_reply_syntax(c);
    atomic_store(&cl->migrating[slot], KV_CLUSTER_NO_NODE);
    atomic_store(&cl->importing[slot], KV_CLUSTER_NO_NODE);
    return reply_saved(c, cl);
  }
  bool mig = kv_arg_is(how, "MIGRATING"), imp = kv_arg_is(how, "IMPORTING");
  if ((!mig && !imp && !kv_arg_is(how, "NODE")) || c->argc != 4)
    return kv_reply_syntax(c);
  int node = node_arg(c, cl, &c->argv[3]);
  if (node < 0)
    return;
  bool mine = owner_of(cl, (size_t)slot) == cl->myself;
  char msg[128];
  if (mig && !mine) {
    snprintf(msg, sizeof msg, "ERR I'm not the owner of hash slot %d", slot);
    return c->ops->error(c->w, msg);
  }
  if (imp && mine) {
    snprintf(msg, sizeof msg, "ERR I'm already the owner of hash slot %d",
             slot);
    return c->ops->error(c->w, msg);
  }
  if ((mig || imp) && (unsigned)node == cl->myself)
    return c->ops->error(c->w, "ERR I can't migrate or import a slot from or "
                               "to myself");
  if (!mig && !imp)
    return setslot_node(c, cl, (unsigned)slot, node);
  atomic_store(mig ? &cl->migrating[slot] : &cl->importing[slot],
               (uint8_t)node);
  reply_saved(c, cl);
}

/* ---- CLUSTER ---- */

static const char *const help[] = {
    "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "COUNTKEYSINSLOT <slot>",
    "GETKEYSINSLOT <slot> <count>",
    "INFO",
    "KEYSLOT <key>",
    "MYID",
    "NODES",
    "SETSLOT <slot> (IMPORTING|MIGRATING|NODE <node-id>|STABLE)",
    "SHARDS",
    "SLOTS",
    "HELP"};

/* CLUSTER subcommand [args]: the subcommands in `help`, each with Redis'
 * arity. */
void kv_cmd_cluster(const kv_call *c) {
  kv_cluster *cl = cluster_of(c);
  if (cl == NULL)
    return;
  const kv_arg *sub = &c->argv[0];
  size_t n = c->argc;
  if (kv_arg_is(sub, "SLOTS") && n == 1)
    return cluster_slots(c, cl);
  if (kv_arg_is(sub, "SHARDS") && n == 1)
    return cluster_shards(c, cl);
  if (kv_arg_is(sub, "NODES") && n == 1)
    return cluster_nodes(c, cl);
  if (kv_arg_is(sub, "INFO") && n == 1)
    return cluster_info(c, cl);
  if (kv_arg_is(sub, "MYID") && n == 1)
    return kv_reply_cstr(c, cl->nodes[cl->myself].id);
  if (kv_arg_is(sub, "KEYSLOT") && n == 2)
    return c->ops->integer(c->w,
                           kv_cluster_keyslot(c->argv[1].ptr, c->argv[1].len));
  if (kv_arg_is(sub, "COUNTKEYSINSLOT") && n == 2)
    return cluster_countkeys(c);
  if (kv_arg_is(sub, "GETKEYSINSLOT") && n == 3)
    return cluster_getkeys(c);
  if (kv_arg_is(sub, "SETSLOT"))
    return cluster_setslot(c, cl);
  if (kv_arg_is(sub, "HELP") && n == 1) {
    c->ops->array(c->w, sizeof help / sizeof help[0]);
    for (size_t i = 0; i < sizeof help / sizeof help[0]; i++)
      c->ops->simple(c->w, help[i]);
    return;
  }
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)sub->len, (const char *)sub->ptr);
  kv_reply_errorf(c,
                  "ERR unknown subcommand or wrong number of arguments "
                  "for '%s'. Try CLUSTER HELP.",
                  name);
}
