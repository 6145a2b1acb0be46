/* SPDX-License-Identifier: Apache-2.0 */
/* samples/kv/command_internal.h: what the command files share: a call (one
 * command being run), the reply and parsing helpers in Redis' words
 * (command.c), the command table's entry type, and every command's
 * function. The commands live by topic: cmd_string.c (string values;
 * cmd_lcs.c LCS),
 * cmd_keyspace.c (keys, TTLs, SCAN, KEYS), cmd_server.c (PING, ECHO,
 * SELECT, CONFIG, INFO, COMMAND), session.c (CLIENT, QUIT), auth.c (AUTH,
 * HELLO), multi.c (MULTI, EXEC, DISCARD), cluster_cmd.c (CLUSTER, ASKING,
 * READONLY, READWRITE), cluster_migrate.c (DUMP, RESTORE, MIGRATE),
 * cmd_shutdown.c (SHUTDOWN). Not for the
 * protocols: they use command.h.
 */
#ifndef WEFT_SAMPLES_KV_COMMAND_INTERNAL_H
#define WEFT_SAMPLES_KV_COMMAND_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "command.h"
#include "session.h"

/** A command's flags (kv_command.flags). */
enum kv_command_flags {
  KV_CF_WRITE = 1u << 0,    /* changes the store (COMMAND's "write") */
  KV_CF_READONLY = 1u << 1, /* reads it only ("readonly") */
  KV_CF_NOAUTH = 1u << 2,   /* runs before authentication (AUTH, HELLO,
                               QUIT) */
  KV_CF_NOQUEUE = 1u << 3,  /* runs at once in MULTI (MULTI, EXEC,
                               DISCARD, QUIT) */
  KV_CF_ALLKEYS = 1u << 4,  /* may walk the whole store: EXEC locks every
                               stripe up front, in index order (KEYS, SCAN,
                               DBSIZE, FLUSHALL, and CLUSTER for its
                               COUNTKEYSINSLOT, GETKEYSINSLOT and SETSLOT
                               NODE); a walk inside a transaction holding
                               only some stripes would lock the others in
                               order while holding its own: an ABBA with
                               another loop's transaction */
  KV_CF_FAST = 1u << 5,     /* O(1) or O(log n) ("fast") */
  KV_CF_NOMULTI = 1u << 6,  /* refused inside MULTI (MIGRATE: it waits on
                               the network, EXEC holds its stripes) */
};

typedef struct kv_call kv_call;

/** One row of the command table. */
typedef struct kv_command {
  int id;         /* kv_cmd */
  int arity;      /* Redis': n = exactly n words with the name, -n =
                     at least n */
  unsigned flags; /* kv_command_flags */
  int first_key;  /* key positions among the words (the name is 0):
                     first, last (-1 = the last word), step; 0 0 0 =
                     no keys */
  int last_key;
  int key_step;
  const char *group;   /* COMMAND DOCS: "string", "generic", ... */
  const char *since;   /* the Redis version that added it */
  const char *summary; /* one line */
  void (*fn)(const kv_call *c);
} kv_command;

/** One command being run. */
struct kv_call {
  kv_session *sess;
  kv_store *store;
  const kv_command *cmd;
  const char *name; /* lower case, for error messages */
  size_t argc;      /* arguments after the name */
  const kv_arg *argv;
  const kv_reply_ops *ops;
  void *w;
};

/* ---- command.c: the table ---- */

/** The table's row for `cmd`, or NULL. */
const kv_command *kv_command_find(int cmd);

/** The rows, in kv_cmd order, and how many (COMMAND). */
const kv_command *kv_command_table(size_t *n);

/**
 * Runs the command of a checked call (the gate is passed): counts it and
 * calls its function. For EXEC's queue.
 */
void kv_command_run(kv_session *s, const kv_command *cmd, size_t argc,
                    const kv_arg *argv, const kv_reply_ops *ops, void *w);

/**
 * Adds to `t` the stripes `cmd` with these arguments touches: its keys by
 * the table's positions, or every stripe for KV_CF_ALLKEYS.
 */
void kv_command_add_keys(kv_txn *t, const kv_command *cmd, size_t argc,
                         const kv_arg *argv);

/* ---- command.c: replies and parsing in Redis' words ---- */

/** An error reply of `fmt` with one %s (the text is cut at 255 bytes). */
void kv_reply_errorf(const kv_call *c, const char *fmt, const char *arg);

/** "ERR wrong number of arguments for '<name>' command". */
void kv_reply_arity(const kv_call *c);

/** "ERR syntax error". */
void kv_reply_syntax(const kv_call *c);

/** "ERR <kv_error_message(err)>". */
void kv_reply_store_error(const kv_call *c, int err);

/** "ERR value is not an integer or out of range". */
void kv_reply_not_integer(const kv_call *c);

/** A growing text (INFO's, CLIENT LIST's reply). Zero-initialised =
 *  empty; the owner frees `buf`. */
typedef struct kv_text {
  char *buf;
  size_t len, cap;
  bool failed; /* out of memory on the way: the text is incomplete */
} kv_text;

/** Appends printf-style text to `t`, growing it; on failure sets
 *  t->failed and adds nothing more. */
void kv_text_add(kv_text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/** A bulk reply of a C string. */
void kv_reply_cstr(const kv_call *c, const char *s);

/** Parses a decimal int64 as Redis' string2ll: no spaces, no '+', no
 *  leading zeros, no overflow. */
bool kv_parse_i64(const kv_arg *a, int64_t *out);

/** True when `a` equals `s` ignoring ASCII case. */
bool kv_arg_is(const kv_arg *a, const char *s);

/** Milliseconds since the Unix epoch (EXAT, PXAT, INFO). */
int64_t kv_unix_ms(void);

/** The longest TTL given to the store, milliseconds: 400 years. Longer
 *  ones (Redis takes up to 2^63 - 1 ms) are clamped to it, as the store's
 *  nanosecond deadlines end some 584 years after its clock's zero. */
#define KV_TTL_MAX_MS (400ll * 365 * 24 * 3600 * 1000)

/* ---- the commands ---- */

void kv_cmd_get(const kv_call *c);
void kv_cmd_set(const kv_call *c);
void kv_cmd_setnx(const kv_call *c);
void kv_cmd_getset(const kv_call *c);
void kv_cmd_getdel(const kv_call *c);
void kv_cmd_getex(const kv_call *c);
void kv_cmd_append(const kv_call *c);
void kv_cmd_strlen(const kv_call *c);
void kv_cmd_incr(const kv_call *c);
void kv_cmd_decr(const kv_call *c);
void kv_cmd_incrby(const kv_call *c);
void kv_cmd_decrby(const kv_call *c);
void kv_cmd_incrbyfloat(const kv_call *c);
void kv_cmd_mget(const kv_call *c);
void kv_cmd_mset(const kv_call *c);
void kv_cmd_setex(const kv_call *c);
void kv_cmd_psetex(const kv_call *c);
void kv_cmd_msetnx(const kv_call *c);
void kv_cmd_getrange(const kv_call *c);
void kv_cmd_setrange(const kv_call *c);
void kv_cmd_setbit(const kv_call *c);
void kv_cmd_getbit(const kv_call *c);
void kv_cmd_lcs(const kv_call *c);

void kv_cmd_del(const kv_call *c);
void kv_cmd_exists(const kv_call *c);
void kv_cmd_type(const kv_call *c);
void kv_cmd_ttl(const kv_call *c);
void kv_cmd_pttl(const kv_call *c);
void kv_cmd_expire(const kv_call *c);
void kv_cmd_pexpire(const kv_call *c);
void kv_cmd_persist(const kv_call *c);
void kv_cmd_rename(const kv_call *c);
void kv_cmd_keys(const kv_call *c);
void kv_cmd_scan(const kv_call *c);
void kv_cmd_dbsize(const kv_call *c);
void kv_cmd_flushall(const kv_call *c);
void kv_cmd_expireat(const kv_call *c);
void kv_cmd_pexpireat(const kv_call *c);
void kv_cmd_expiretime(const kv_call *c);
void kv_cmd_pexpiretime(const kv_call *c);
void kv_cmd_renamenx(const kv_call *c);
void kv_cmd_copy(const kv_call *c);
void kv_cmd_randomkey(const kv_call *c);

void kv_cmd_ping(const kv_call *c);
void kv_cmd_echo(const kv_call *c);
void kv_cmd_select(const kv_call *c);
void kv_cmd_time(const kv_call *c);
void kv_cmd_config(const kv_call *c);
void kv_cmd_info(const kv_call *c);

/* ---- cmd_shutdown.c ---- */

/** SHUTDOWN [NOSAVE | SAVE] [NOW] [FORCE] [ABORT]: Redis 7's parsing,
 *  [kv] shutdown_command's policy, kv_shared.shutdown's hook. */
void kv_cmd_shutdown(const kv_call *c);
void kv_cmd_command(const kv_call *c);

void kv_cmd_client(const kv_call *c);
/** CLIENT LIST and CLIENT KILL (client_list.c), for kv_cmd_client. */
void kv_client_list(const kv_call *c);
void kv_client_kill(const kv_call *c);
void kv_cmd_quit(const kv_call *c);

void kv_cmd_auth(const kv_call *c);
void kv_cmd_hello(const kv_call *c);

void kv_cmd_multi(const kv_call *c);
void kv_cmd_exec(const kv_call *c);
void kv_cmd_discard(const kv_call *c);
void kv_cmd_watch(const kv_call *c);
void kv_cmd_unwatch(const kv_call *c);

void kv_cmd_cluster(const kv_call *c);
void kv_cmd_asking(const kv_call *c);
void kv_cmd_readonly(const kv_call *c);
void kv_cmd_readwrite(const kv_call *c);
void kv_cmd_dump(const kv_call *c);
void kv_cmd_restore(const kv_call *c);
void kv_cmd_migrate(const kv_call *c);

/* ---- cluster.c: the gate's cluster check ---- */

/**
 * The slot of the keys command `k` names in `argv` (the table's key
 * positions): 0 to 16383, -1 when they are in different slots
 * (CROSSSLOT), -2 when it names none. Pure; any thread.
 */
int kv_cluster_command_slot(const kv_command *k, size_t argc,
                            const kv_arg *argv);

/**
 * The cluster check of kv_exec for a server in cluster mode
 * (s->shared->cluster set), after arity and authentication and before
 * MULTI's queue: returns true when the command may run (or be queued)
 * here; else it has written the redirection or error (CROSSSLOT, MOVED,
 * ASK, TRYAGAIN, CLUSTERDOWN), marked a transaction being queued (EXEC
 * will abort it) or discarded the one EXEC was about to run, and returns
 * false. Also ends ASKING's effect after one command.
 *
 * A keyed command to run now (not queued, not EXEC) is checked with the
 * stripes of its keys locked in `t` (kv_txn), and true leaves them locked:
 * the caller runs the command, then calls kv_txn_unlock(t). Check
 * t->locked: commands without keys lock nothing. The session's loop
 * thread.
 */
bool kv_cluster_admit(kv_session *s, const kv_command *k, size_t argc,
                      const kv_arg *argv, const kv_reply_ops *ops, void *w,
                      kv_txn *t);

/**
 * EXEC's cluster check, with its transaction locked: the queued keys' slot
 * is still served here, and during a migration all the keys are here (or,
 * importing with ASKING, all of them or one); else writes the redirection
 * or TRYAGAIN and returns false (EXEC then discards the transaction).
 * `asking`: the client sent ASKING before EXEC. True outside cluster mode.
 */
bool kv_cluster_exec_check(kv_session *s, const kv_multi *m, bool asking,
                           const kv_reply_ops *ops, void *w);

/* ---- cluster_migrate.c: keys in flight ---- */

/** The error a write gets for a key a MIGRATE is moving (Redis Cluster's
 *  TRYAGAIN: cluster clients retry it). */
#define KV_MIGRATE_TRYAGAIN                                                    \
  "TRYAGAIN a key of the request is being migrated; retry"

/**
 * True when `k` writes (KV_CF_WRITE) a key that a MIGRATE of this server
 * has sent and not yet settled (its value would be lost, or a deleted
 * key come back, when the target's copy becomes the key). For the gate,
 * with the keys' stripes locked, when their slot is migrating. Any loop
 * thread.
 */
bool kv_migrate_keys_busy(struct kv_cluster *c, const kv_command *k,
                          size_t argc, const kv_arg *argv);

/* ---- multi.c: queueing ---- */

/**
 * Queues a checked command in the session's transaction and answers
 * "QUEUED", or refuses it past the queue's bounds (and marks the
 * transaction).
 */
void kv_multi_queue(kv_session *s, int cmd, size_t argc, const kv_arg *argv,
                    const kv_reply_ops *ops, void *w);

#endif
