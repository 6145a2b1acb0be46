/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/command.h: executes one KV command for a connection, for
 * either protocol. The protocol supplies a reply writer; the executor only
 * says what to answer (Redis' reply types), and keeps the connection's
 * state in its session (session.h): the RESP version, authentication, a
 * MULTI queue, the client's name.
 *
 * Every command goes through one gate (kv_exec), in Redis 7's order: the
 * arity ("wrong number of arguments"), then authentication ("NOAUTH"),
 * then in cluster mode the slot's owner ("MOVED", "ASK", "CROSSSLOT":
 * cluster.h), then MULTI's queue ("QUEUED"), then the command. The table in
 * command.c holds each command's arity, flags, key positions (what EXEC locks)
 * and the one-line documentation COMMAND DOCS gives.
 */
#ifndef WEFT_SAMPLES_KV_COMMAND_H
#define WEFT_SAMPLES_KV_COMMAND_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/log.h>

#include "auth.h"
#include "proto.h"
#include "store.h"

/**
 * A reply writer. `w` is the writer's own state. bulk's `blob` is the
 * stored value the bytes belong to, or NULL: a writer that sends large
 * values without copying may retain it (kv_blob_retain) until sent. map
 * and verbatim are RESP3's types: a writer for RESP2 or the binary
 * protocol writes a map as an array of 2 x `pairs` values and a verbatim
 * string as a bulk string.
 */
typedef struct kv_reply_ops {
  void (*simple)(void *w, const char *s);
  void (*error)(void *w, const char *msg);
  void (*integer)(void *w, int64_t v);
  void (*bulk)(void *w, const void *data, size_t len, kv_blob *blob);
  void (*null)(void *w);
  void (*array)(void *w, size_t count);
  void (*map)(void *w, size_t pairs);
  void (*verbatim)(void *w, const void *text, size_t len);
} kv_reply_ops;

/** Per-loop counters, each written by its loop's thread only. */
typedef struct kv_loop_counters {
  _Alignas(64) _Atomic uint64_t commands; /* commands run */
} kv_loop_counters;

/** A refused connection is logged at most once per this many ns, with the
 *  number refused since (a scan of the port would flood the log). */
#define KV_DENIED_LOG_INTERVAL_NS (10 * 1000000000ull)

/**
 * What every connection of a server shares: the store, the passwords, the
 * counters and the facts INFO reports. The server fills it before the
 * first connection; the counters are atomics.
 */
typedef struct kv_shared {
  kv_store *store;
  kv_auth auth;                /* passwords (auth.h) */
  _Atomic bool protected_mode; /* [kv] protected_mode; CONFIG SET
                                  protected-mode changes it */
  kv_loop_counters *loops;
  unsigned n_loops;
  _Atomic uint64_t next_client_id;
  _Atomic uint64_t connected_clients;    /* sessions open now */
  _Atomic uint64_t total_connections;    /* sessions ever opened */
  _Atomic uint64_t rejected_connections; /* refused by protected mode */
  size_t multi_max_bytes;                /* kv_multi_limit */
  weft_log_limit denied_log;             /* protected mode's log lines */
  /* INFO server, clients */
  uint64_t start_ns;          /* weft_now_ns at start */
  unsigned hz;                /* [kv] expire_hz */
  int resp_port;              /* RESP's bound port, 0 = off */
  int tls_port;               /* RESP over TLS: its bound port, 0 = off */
  int rpc_port;               /* RPC's bound port, 0 = off */
  int max_clients;            /* [server] max_connections, 0 = no limit */
  char run_id[41];            /* random, 40 hex digits */
  const char *transport;      /* [transport] name */
  struct kv_cluster *cluster; /* [cluster] enabled: the slot map
                                 (cluster.h); NULL = standalone */
  /* What a connection may hold (conn_limits.h); NULL without a server. */
  struct kv_conn_limits *limits;
  /* MIGRATE (cluster_migrate.c): [kv] migrate_any_host,
   * migrate_timeout_max_ms (ms), and the client TLS context it speaks
   * when this server serves TLS (NULL = plaintext) */
  bool migrate_any_host;
  int64_t migrate_timeout_max_ms;
  struct weft_tls_context *migrate_tls;
  /* CLIENT LIST and KILL (client_list.c): every session, linked through
   * their prev_client / next_client under clients_lock, which also
   * guards each session's name */
  pthread_mutex_t clients_lock;
  struct kv_session *clients;
  /* SHUTDOWN (cmd_shutdown.c): [kv] shutdown_command, and what stops the
   * server (kv_server_options.shutdown); NULL = SHUTDOWN is refused */
  int shutdown_policy; /* kv_shutdown_policy (server.h) */
  void (*shutdown)(void *arg);
  void *shutdown_arg;
} kv_shared;

/** A connection's state (session.h). */
typedef struct kv_session kv_session;

/**
 * Runs command `cmd` (kv_cmd) with `argc` arguments (after the command
 * name) for session `s` and writes exactly one reply through `ops`: the
 * result, or an error in Redis' words ("ERR wrong number of arguments for
 * 'get' command", "NOAUTH Authentication required."), but for a SHUTDOWN
 * accepted over RESP, which answers nothing and closes the connection, as
 * Redis (redis-cli and redis-py take the close for success). In MULTI the reply
 * is "QUEUED" (the arguments are copied) and EXEC runs the queue. Argument
 * bytes are only read during the call. The session's loop thread.
 */
void kv_exec(kv_session *s, int cmd, size_t argc, const kv_arg *argv,
             const kv_reply_ops *ops, void *w);

/** Redis' version the server answers as (INFO redis_version, HELLO). */
#define KV_REDIS_VERSION "7.0.0"

#endif
