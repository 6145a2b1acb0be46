/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/cluster.h: weft-kv-server as a node of a static Redis Cluster.
 *
 * The key space is split into the Redis Cluster spec's 16384 slots
 * (cluster_slot.h). Which node serves which slots is written in every
 * node's config ([cluster] node lines, cluster_config.c): there is no
 * gossip and no failover, so every node knows the same map from the start
 * and learns changes only from CLUSTER SETSLOT, which an operator sends
 * to every node (samples/kv/scripts/kv-cluster.sh starts such a cluster), and
 * from its state file at a restart (cluster_state.c, Redis' nodes.conf: the
 * map, epochs and migrations it knew, merged over the lines by config
 * epoch).
 *
 * Every command that names keys passes kv_cluster_admit (cluster.c)
 * before it runs or is queued in MULTI: keys of several slots get
 * -CROSSSLOT, a slot of another node -MOVED, a slot being migrated away
 * (CLUSTER SETSLOT MIGRATING) -ASK for keys not here, a slot being
 * imported (IMPORTING) serves clients that sent ASKING. A keyed command
 * is checked and run with its keys' stripes locked, as MIGRATE takes and
 * deletes keys under the same locks (cluster_migrate.c; a write to a key
 * it has in flight gets TRYAGAIN), so no write is lost to a migration. The
 * CLUSTER command family, ASKING, READONLY and READWRITE are in cluster_cmd.c.
 *
 * Threads: the slot map is a set of atomics read by every loop and
 * changed by CLUSTER SETSLOT on any loop; a kv_cluster is shared by every
 * connection of a server (kv_shared.cluster).
 */
#ifndef WEFT_SAMPLES_KV_CLUSTER_H
#define WEFT_SAMPLES_KV_CLUSTER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <weft/config.h>

#include "cluster_slot.h"

/** Nodes a cluster config may list. */
#define KV_CLUSTER_NODES_MAX 64
/** Longest node name, bytes. */
#define KV_CLUSTER_NAME_MAX 32
/** A node id: 40 hex digits, as Redis' (CLUSTER MYID). */
#define KV_CLUSTER_ID_LEN 40
/** Longest host name or address of a node, bytes with the NUL. */
#define KV_CLUSTER_HOST_MAX 256
/** No node (a slot nobody serves, no migration). */
#define KV_CLUSTER_NO_NODE 0xFF
/** Longest path of the state file ([cluster] config_file), bytes with the
 *  NUL. */
#define KV_CLUSTER_PATH_MAX 1024

/** One node of the cluster, from a [cluster] node line. */
typedef struct kv_cluster_node {
  char name[KV_CLUSTER_NAME_MAX + 1]; /* the line's first word */
  char id[KV_CLUSTER_ID_LEN + 1];     /* id=, or derived from the name */
  char host[KV_CLUSTER_HOST_MAX];     /* RESP address clients are sent to */
  int port;                           /* its RESP port */
  char rpc_host[KV_CLUSTER_HOST_MAX]; /* weft RPC address: RPC clients
                                         are redirected there, CLUSTER
                                         NODES shows it as the bus port;
                                         "" = none */
  int rpc_port;
} kv_cluster_node;

/** The [cluster] section. Initialise with kv_cluster_options_init. */
typedef struct kv_cluster_options {
  bool enabled;                         /* [cluster] enabled */
  char myself[KV_CLUSTER_NAME_MAX + 1]; /* [cluster] myself: a node name */
  size_t n_nodes;                       /* [cluster] node lines so far */
  kv_cluster_node nodes[KV_CLUSTER_NODES_MAX];
  uint8_t owner[KV_CLUSTER_SLOTS];       /* node index per slot, or
                                            KV_CLUSTER_NO_NODE */
  char config_file[KV_CLUSTER_PATH_MAX]; /* [cluster] config_file: the
                                            state file (cluster_state.c);
                                            "" = not kept */
} kv_cluster_options;

/** Fills `o` with the defaults: disabled, no nodes, no slot assigned. */
void kv_cluster_options_init(kv_cluster_options *o);

/**
 * One key of the [cluster] section (kv_server_config_section hands them
 * on): `enabled` (yes/no), `myself` (a node name), `config_file` (the
 * state file's path, at most KV_CLUSTER_PATH_MAX - 1 bytes; see
 * kv_cluster_default_config_file), `node` (one node per line; the key
 * repeats):
 *
 *     node = NAME HOST:PORT [rpc=HOST:PORT] [slots=A-B,C,...] [id=HEX40]
 *
 * NAME is 1 to 32 letters, digits, '-', '_' or '.'; HOST:PORT the node's
 * RESP address as clients reach it ("[v6]:port" for IPv6); rpc= its weft
 * RPC address (where RPC clients are redirected); slots= the
 * slots it serves (no slot twice in the cluster); id= its 40-hex-digit
 * node id (default: the first 40 hex digits of SHA-256("weft-kv-cluster "
 * NAME), so every node derives the same). Returns 0, WEFT_ENOENT for
 * another key, or WEFT_EINVAL with what is wrong and the valid form in
 * `err` (the config code prefixes file, line, section and key).
 */
int kv_cluster_config_key(kv_cluster_options *o, const char *key,
                          const char *value, char *err, size_t err_len);

/**
 * The default of [cluster] config_file, for a server configured from the
 * INI file `ini` (NULL or "" when there is none): beside it, its name
 * without the extension plus ".nodes.conf" (node1.ini: node1.nodes.conf),
 * as Redis keeps nodes.conf beside its config. Leaves a config_file that
 * was set alone. Returns 0, or WEFT_EINVAL when the path would exceed
 * KV_CLUSTER_PATH_MAX.
 */
int kv_cluster_default_config_file(kv_cluster_options *o, const char *ini);

/**
 * Checks what single lines cannot: with `enabled`, `myself` names a node.
 * Returns 0, or WEFT_EINVAL with the problem and the node names in `err`.
 */
int kv_cluster_options_check(const kv_cluster_options *o, char *err,
                             size_t err_len);

/**
 * A server's cluster state (read-only for the command files; the atomics
 * are read on any loop and written by CLUSTER SETSLOT on any loop).
 */
typedef struct kv_cluster {
  size_t n_nodes;
  kv_cluster_node nodes[KV_CLUSTER_NODES_MAX];
  unsigned myself;                             /* index of this server's node */
  _Atomic uint8_t owner[KV_CLUSTER_SLOTS];     /* node index or NO_NODE */
  _Atomic uint8_t migrating[KV_CLUSTER_SLOTS]; /* to node, or NO_NODE */
  _Atomic uint8_t importing[KV_CLUSTER_SLOTS]; /* from node, or NO_NODE */
  _Atomic uint64_t epoch;                      /* cluster_current_epoch */
  _Atomic uint64_t node_epoch[KV_CLUSTER_NODES_MAX]; /* config epochs */
  /* The state file (cluster_state.c): its path ("" = none), a lock that
   * orders its writers, and whether the last write failed (the live map
   * then differs from what a restart would load: cluster_state:fail). */
  char config_file[KV_CLUSTER_PATH_MAX];
  pthread_mutex_t save_lock;
  _Atomic bool save_failed;
  /* MIGRATEs in flight, whose keys a write gets TRYAGAIN for while their
   * slot is migrating (cluster_migrate.c); the lock is taken inside
   * stripe locks, never around them */
  pthread_mutex_t migrate_lock;
  struct kv_migrate *migrating_ops;
} kv_cluster;

/**
 * Makes the runtime state from checked options (kv_cluster_options_check).
 * Returns 0 with it in `*out`, or WEFT_ENOMEM. Any thread.
 */
int kv_cluster_new(kv_cluster **out, const kv_cluster_options *o);

/** Frees it (NULL ignored), once no connection of the server runs. */
void kv_cluster_free(kv_cluster *c);

/** Slots with an owner (CLUSTER INFO cluster_slots_assigned). */
size_t kv_cluster_slots_assigned(const kv_cluster *c);

/** The node named by `id` (its 40-digit id, or its name), or -1. */
int kv_cluster_find_node(const kv_cluster *c, const void *id, size_t len);

/** The last slot of the run of slots from `first` that have its owner. */
size_t kv_cluster_run_end(const kv_cluster *c, size_t first);

/**
 * Writes node `i`'s line of CLUSTER NODES to `f`: id, ip:port@cport,
 * flags, master, ping sent, pong received (`now`, Unix ms; 0 in the state
 * file), config epoch, link state, slots; for this node also its
 * migrations, "[slot->-id]" and "[slot-<-id]". The state file holds the
 * same lines. Any thread.
 */
void kv_cluster_node_line(FILE *f, const kv_cluster *c, size_t i, int64_t now);

/**
 * The state file (cluster_state.c), Redis' nodes.conf for this cluster:
 * what the node knows of the slot map, the config epochs and its own
 * migrations. kv_cluster_state_load merges it into `c` (just made by
 * kv_cluster_new from the [cluster] lines): a slot claimed in the file by
 * a node whose config epoch is above the [cluster] lines' current epoch
 * (the node count: a claim a CLUSTER SETSLOT NODE made since) overrides
 * the lines' owner; the file's epochs and this node's MIGRATING and
 * IMPORTING marks are taken. A missing file is no error (a first start).
 * Returns 0, or WEFT_EBADCONF with "FILE:LINE: what is wrong; what is
 * valid" in `err`, or the open/read error (negative errno as weft code)
 * with the file named. Before the server's loops use `c`.
 */
int kv_cluster_state_load(kv_cluster *c, char *err, size_t err_len);

/**
 * Writes the node's state to its file as Redis saves nodes.conf: to FILE
 * plus ".tmp", fsync, rename over FILE, fsync of the directory, so a
 * crash leaves the old file or the new one. Writers are serialised (the
 * save lock), and each writes the state as it is when it holds the lock,
 * so the last write has every change. Returns 0 (also without a file), or
 * a negative weft error with the path and the failing step in `err`; sets
 * or clears save_failed. Any thread: a loop thread blocks for the write
 * and the fsyncs (CLUSTER SETSLOT is an operator's command, as in Redis).
 */
int kv_cluster_state_save(kv_cluster *c, char *err, size_t err_len);

#endif
