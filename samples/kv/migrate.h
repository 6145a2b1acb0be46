/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/migrate.h: one MIGRATE in flight, shared by the command's
 * side (cluster_migrate.c: the arguments, the policy, the snapshot of the
 * keys and, at the end, their deletion and the client's reply) and the
 * network side (migrate_conn.c: the target connection, driven by the
 * session's loop: the RESTORE-ASKING commands out, the replies in, the
 * timeout).
 *
 * Lifetime: kv_cmd_migrate makes it on the session's loop thread; the
 * network side ends it exactly once through kv_migrate_done, which writes
 * the reply (unless the client has gone: kv_migrate_detach) and lets the
 * session run its next command. Everything runs on that one loop thread:
 * no lock but the store's stripes, taken only around the snapshot and the
 * deletion, never across a network wait.
 */
#ifndef WEFT_SAMPLES_KV_MIGRATE_H
#define WEFT_SAMPLES_KV_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/channel.h>
#include <weft/timer.h>
#include <weft/tls.h>

#include "cluster.h"
#include "command_internal.h"

/** Longest target URI: "tcp://[" host "]:" port. */
#define KV_MIGRATE_URI_MAX (KV_CLUSTER_HOST_MAX + 16)

/** Longest reply line MIGRATE reads from the target, bytes. Every reply
 *  it waits for (+OK, -ERR ...) is one short line; a longer one is not
 *  a RESP answer to RESTORE and fails the migration. */
#define KV_MIGRATE_LINE_MAX 1024

/** One key MIGRATE sends. */
typedef struct kv_migrate_key {
  char *key; /* a copy: the call's arguments are gone once it returns */
  size_t klen;
  kv_blob *value; /* a reference taken under the stripe lock: the value
                     as sent, and its identity is the version compared
                     before the delete (blobs are immutable) */
  int64_t ttl_ms; /* 0 = none */
  bool moved;     /* the target answered +OK for it */
} kv_migrate_key;

/** A MIGRATE in flight. Loop thread of its session only. */
typedef struct kv_migrate {
  /* the client's side: NULL once the session closed (kv_migrate_detach) */
  kv_session *sess;
  const kv_reply_ops *ops;
  void *w;
  kv_store *store;
  kv_cluster *cluster; /* registered in its migrating_ops while the keys
                          are in flight, or NULL */
  struct kv_migrate *next_op, *prev_op; /* that list's links */
  bool starting; /* kv_cmd_migrate is still on the stack: an early end
                    replies without resuming the session */
  bool done;     /* ended: kv_migrate_done runs, or ran */
  bool copy, replace;
  /* the target */
  char uri[KV_MIGRATE_URI_MAX];
  char host[KV_CLUSTER_HOST_MAX]; /* numeric: the TLS name checked */
  weft_tls_context *tls;          /* the server's client context, or NULL */
  int64_t timeout_ms;             /* clamped: no progress for this long
                                     fails it */
  char *user, *password;          /* AUTH / AUTH2 copies, or NULL */
  /* the network side's state (migrate_conn.c) */
  weft_loop *loop;
  weft_channel *ch; /* the target channel, while its pipeline holds us */
  weft_timer timer;
  bool connected; /* the connect completed */
  int refs;       /* the operation, the connect callback, the
                     pipeline */
  size_t replies; /* reply lines read so far */
  char line[KV_MIGRATE_LINE_MAX];
  size_t line_len;
  const char *failed; /* the first failure's reply text, or NULL */
  char err[KV_MIGRATE_LINE_MAX + 64];
  size_t n;              /* keys that exist and are sent */
  kv_migrate_key keys[]; /* n of them */
} kv_migrate;

/**
 * Starts the network part (migrate_conn.c): connects to m->uri on the
 * current loop, with TLS when m->tls is set, sends AUTH and one
 * RESTORE-ASKING per key, and reads the replies. Ends by calling
 * kv_migrate_done exactly once, possibly before it returns (a connect
 * that fails at once). Loop thread.
 */
void kv_migrate_connect(kv_migrate *m);

/**
 * The end of the network part (cluster_migrate.c): `failed` is NULL or
 * the error reply's text. Deletes (unless COPY) every key the target
 * took whose value is still the one sent, replies, and resumes the
 * session. Called once, by migrate_conn.c. Loop thread.
 */
void kv_migrate_done(kv_migrate *m, const char *failed);

/** Frees what kv_cmd_migrate allocated (keys, secrets, m). */
void kv_migrate_free(kv_migrate *m);

/**
 * The session is closing (kv_session_fini): its MIGRATE, if one is in
 * flight, goes on to its end (the keys the target took are still deleted
 * here) but writes no reply and resumes nothing. Loop thread.
 */
void kv_migrate_detach(kv_session *s);

#endif
