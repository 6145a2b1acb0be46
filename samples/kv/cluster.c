/* SPDX-License-Identifier: Apache-2.0 */
/* A server's cluster state and the gate's cluster check (cluster.h): the
 * slot map as atomics, and for every keyed command the Redis Cluster
 * spec's redirections: CROSSSLOT, MOVED, ASK (with ASKING), TRYAGAIN, and
 * CLUSTERDOWN for a slot nobody serves. */
#include "command_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

#include "cluster.h"

int kv_cluster_new(kv_cluster **out, const kv_cluster_options *o) {
  kv_cluster *c = calloc(1, sizeof *c);
  if (c == NULL)
    return WEFT_ENOMEM;
  c->n_nodes = o->n_nodes;
  memcpy(c->nodes, o->nodes, o->n_nodes * sizeof o->nodes[0]);
  for (size_t i = 0; i < o->n_nodes; i++) {
    if (strcmp(o->nodes[i].name, o->myself) == 0)
      c->myself = (unsigned)i;
    atomic_init(&c->node_epoch[i], i + 1);
  }
  for (size_t s = 0; s < KV_CLUSTER_SLOTS; s++) {
    atomic_init(&c->owner[s], o->owner[s]);
    atomic_init(&c->migrating[s], KV_CLUSTER_NO_NODE);
    atomic_init(&c->importing[s], KV_CLUSTER_NO_NODE);
  }
  atomic_init(&c->epoch, o->n_nodes);
  memcpy(c->config_file, o->config_file, sizeof c->config_file);
  pthread_mutex_init(&c->save_lock, NULL);
  atomic_init(&c->save_failed, false);
  pthread_mutex_init(&c->migrate_lock, NULL);
  *out = c;
  return 0;
}

void kv_cluster_free(kv_cluster *c) {
  if (c == NULL)
    return;
  pthread_mutex_destroy(&c->save_lock);
  pthread_mutex_destroy(&c->migrate_lock);
  free(c);
}

static uint8_t owner_of(const kv_cluster *c, size_t slot) {
  return atomic_load_explicit(&c->owner[slot], memory_order_relaxed);
}

size_t kv_cluster_run_end(const kv_cluster *c, size_t first) {
  uint8_t o = owner_of(c, first);
  size_t last = first;
  while (last + 1 < KV_CLUSTER_SLOTS && owner_of(c, last + 1) == o)
    last++;
  return last;
}

void kv_cluster_node_line(FILE *f, const kv_cluster *c, size_t i, int64_t now) {
  const kv_cluster_node *n = &c->nodes[i];
  bool me = i == c->myself;
  fprintf(f, "%s %s:%d@%d %s - 0 %lld %llu connected", n->id, n->host, n->port,
          n->rpc_port, me ? "myself,master" : "master",
          me ? 0ll : (long long)now,
          (unsigned long long)atomic_load(&c->node_epoch[i]));
  for (size_t s = 0; s < KV_CLUSTER_SLOTS;) {
    size_t last = kv_cluster_run_end(c, s);
    if (owner_of(c, s) == i)
      fprintf(f, s == last ? " %zu" : " %zu-%zu", s, last);
    s = last + 1;
  }
  for (size_t s = 0; me && s < KV_CLUSTER_SLOTS; s++) {
    uint8_t to = atomic_load(&c->migrating[s]);
    uint8_t from = atomic_load(&c->importing[s]);
    if (to != KV_CLUSTER_NO_NODE)
      fprintf(f, " [%zu->-%s]", s, c->nodes[to].id);
    if (from != KV_CLUSTER_NO_NODE)
      fprintf(f, " [%zu-<-%s]", s, c->nodes[from].id);
  }
  fputc('\n', f);
}

size_t kv_cluster_slots_assigned(const kv_cluster *c) {
  size_t n = 0;
  for (size_t s = 0; s < KV_CLUSTER_SLOTS; s++)
    n += atomic_load_explicit(&c->owner[s], memory_order_relaxed) !=
         KV_CLUSTER_NO_NODE;
  return n;
}

int kv_cluster_find_node(const kv_cluster *c, const void *id, size_t len) {
  for (size_t i = 0; i < c->n_nodes; i++) {
    const kv_cluster_node *n = &c->nodes[i];
    if ((len == KV_CLUSTER_ID_LEN && strncasecmp(n->id, id, len) == 0) ||
        (len == strlen(n->name) && memcmp(n->name, id, len) == 0))
      return (int)i;
  }
  return -1;
}

/* ---- the gate ---- */

/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the node's address in the
 * session's protocol (RPC clients are sent to the RPC listener). */
static void redirect(const kv_session *s, const char *kind, unsigned slot,
                     unsigned node, const kv_reply_ops *ops, void *w) {
  const kv_cluster_node *n = &s->shared->cluster->nodes[node];
  bool rpc = s->rpc && n->rpc_port != 0;
  const char *host = rpc ? n->rpc_host : n->host;
  char msg[KV_CLUSTER_HOST_MAX + 48];
  snprintf(msg, sizeof msg, strchr(host, ':') ? "%s %u [%s]:%d" : "%s %u %s:%d",
           kind, slot, host, rpc ? n->rpc_port : n->port);
  ops->error(w, msg);
}

/* The keys of the command that exist here, and in `*n` how many keys it
 * names. */
static size_t present(kv_store *store, const kv_command *k, size_t argc,
                      const kv_arg *argv, size_t *n) {
  size_t first = (size_t)k->first_key - 1, found = 0;
  size_t last = k->last_key < 0 ? argc - 1 : (size_t)k->last_key - 1;
  *n = 0;
  for (size_t i = first; i <= last && i < argc; i += (size_t)k->key_step) {
    (*n)++;
    found += kv_exists(store, 1, &argv[i]) > 0;
  }
  return found;
}

int kv_cluster_command_slot(const kv_command *k, size_t argc,
                            const kv_arg *argv) {
  if (k->first_key <= 0 || (k->flags & KV_CF_ALLKEYS) || argc == 0)
    return -2;
  size_t first = (size_t)k->first_key - 1;
  size_t last = k->last_key < 0 ? argc - 1 : (size_t)k->last_key - 1;
  int slot = -2;
  for (size_t i = first; i <= last && i < argc; i += (size_t)k->key_step) {
    int s = (int)kv_cluster_keyslot(argv[i].ptr, argv[i].len);
    if (slot >= 0 && s != slot)
      return -1;
    slot = s;
  }
  return slot;
}

/* Whether the slot's keys of the command are served here (true), or the
 * redirection or error that says where (written; false). With `check`, a
 * slot being migrated away is decided by the keys found here, `found` of
 * the command's `n`, by Redis' rule: keys still here are served here; all
 * of them gone goes to the target with ASK; some here and some gone cannot
 * be served anywhere until the migration ends: TRYAGAIN. Without `check`
 * it is served (MULTI's queueing; EXEC checks again when it runs). Reads
 * `migrating` before `owner`: SETSLOT NODE writes them in the other order,
 * so a command that sees the migration's end sees the new owner too, and
 * never serves a slot given away. */
static bool route(kv_session *s, unsigned slot, bool asking, size_t found,
                  size_t n, bool check, const kv_reply_ops *ops, void *w) {
  kv_cluster *c = s->shared->cluster;
  uint8_t to = atomic_load(&c->migrating[slot]);
  uint8_t owner = atomic_load(&c->owner[slot]);
  if (owner == c->myself) {
    if (to == KV_CLUSTER_NO_NODE || !check || found == n)
      return true;
    if (found == 0)
      redirect(s, "ASK", slot, to, ops, w);
    else
      ops->error(w, "TRYAGAIN Multiple keys request during rehashing of slot");
    return false;
  }
  /* Another node's slot: served here only while it is imported and the
   * client sent ASKING (a multi-key command: when all its keys are here). */
  uint8_t from = atomic_load(&c->importing[slot]);
  if (from != KV_CLUSTER_NO_NODE && asking) {
    if (!check || found == n || n <= 1)
      return true;
    ops->error(w, "TRYAGAIN Multiple keys request during rehashing of slot");
    return false;
  }
  if (owner == KV_CLUSTER_NO_NODE)
    ops->error(w, "CLUSTERDOWN Hash slot not served");
  else
    redirect(s, "MOVED", slot, owner, ops, w);
  return false;
}

/* route() for one command's keys, counting those here when it matters. */
static bool route_command(kv_session *s, const kv_command *k, size_t argc,
                          const kv_arg *argv, unsigned slot, bool asking,
                          bool check, const kv_reply_ops *ops, void *w) {
  size_t n = 0, found = 0;
  kv_cluster *c = s->shared->cluster;
  if (check && atomic_load(&c->migrating[slot]) != KV_CLUSTER_NO_NODE &&
      kv_migrate_keys_busy(c, k, argc, argv)) {
    ops->error(w, KV_MIGRATE_TRYAGAIN);
    return false;
  }
  if (check && (atomic_load(&c->migrating[slot]) != KV_CLUSTER_NO_NODE ||
                atomic_load(&c->importing[slot]) != KV_CLUSTER_NO_NODE))
    found = present(s->shared->store, k, argc, argv, &n);
  return route(s, slot, asking, found, n, check, ops, w);
}

bool kv_cluster_admit(kv_session *s, const kv_command *k, size_t argc,
                      const kv_arg *argv, const kv_reply_ops *ops, void *w,
                      kv_txn *t) {
  bool asking = s->asking || k->id == KV_CMD_RESTORE_ASKING;
  bool queueing = s->multi.active && !(k->flags & KV_CF_NOQUEUE);
  /* ASKING lasts one command, or a whole transaction (Redis' rule; EXEC
   * ends it in kv_cmd_exec, after its own check). */
  if (k->id != KV_CMD_ASKING && !queueing && k->id != KV_CMD_MULTI &&
      k->id != KV_CMD_EXEC)
    s->asking = false;
  int slot = kv_cluster_command_slot(k, argc, argv);
  if (k->id == KV_CMD_EXEC && s->multi.active && !s->multi.dirty)
    slot = (int)s->multi.cluster_slot - 1; /* the queued keys' slot */
  if (slot == -2 || (k->id == KV_CMD_EXEC && slot < 0))
    return true;
  if (slot == -1 || (queueing && s->multi.cluster_slot != 0 &&
                     s->multi.cluster_slot != (unsigned)slot + 1)) {
    kv_multi_flag(s);
    ops->error(w, "CROSSSLOT Keys in request don't hash to the same slot");
    return false;
  }
  bool ok;
  if (queueing || k->id == KV_CMD_EXEC) {
    /* Queueing checks without locks (a hint, as Redis' own); EXEC checks
     * again under its transaction's locks (kv_cluster_exec_check). */
    ok = route_command(s, k, argc, argv, (unsigned)slot, asking, queueing, ops,
                       w);
  } else {
    /* The slot's state and the keys are read under the keys' stripe
     * locks, and the command runs under them: MIGRATE moves keys under
     * the same locks, so a command never writes a key that has just left
     * (it would be lost when the slot's owner changes). */
    kv_txn_init(t, s->shared->store);
    kv_command_add_keys(t, k, argc, argv);
    kv_txn_lock(t);
    ok = route_command(s, k, argc, argv, (unsigned)slot, asking, true, ops, w);
    if (!ok)
      kv_txn_unlock(t);
  }
  if (!ok) {
    if (k->id == KV_CMD_EXEC) { /* Redis discards it with the redirection */
      kv_multi_reset(&s->multi);
      s->asking = false;
    } else
      kv_multi_flag(s);
    return false;
  }
  if (queueing) /* EXEC checks the slot again when it runs */
    s->multi.cluster_slot = (unsigned)slot + 1;
  return true;
}

bool kv_cluster_exec_check(kv_session *s, const kv_multi *m, bool asking,
                           const kv_reply_ops *ops, void *w) {
  if (s->shared->cluster == NULL || m->cluster_slot == 0)
    return true;
  size_t n = 0, found = 0;
  kv_cluster *c = s->shared->cluster;
  bool migrating =
      atomic_load(&c->migrating[m->cluster_slot - 1]) != KV_CLUSTER_NO_NODE;
  for (const kv_queued *q = m->head; q != NULL; q = q->next) {
    const kv_command *k = kv_command_find(q->cmd);
    if (k->first_key <= 0 || (k->flags & KV_CF_ALLKEYS))
      continue;
    if (migrating && kv_migrate_keys_busy(c, k, q->argc, q->argv)) {
      ops->error(w, KV_MIGRATE_TRYAGAIN);
      return false;
    }
    size_t qn;
    found += present(s->shared->store, k, q->argc, q->argv, &qn);
    n += qn;
  }
  return route(s, m->cluster_slot - 1, asking, found, n, true, ops, w);
}
