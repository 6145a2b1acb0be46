/* SPDX-License-Identifier: Apache-2.0 */
/* The KV command table and its gate (command.h): what each command is
 * (arity, flags, key positions, documentation, function) and the checks
 * every call passes in Redis 7's order, plus the reply and parsing helpers
 * the command files share (command_internal.h). */
#include "command_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <weft/error.h>

#define W KV_CF_WRITE
#define R KV_CF_READONLY
#define F KV_CF_FAST
#define ALL KV_CF_ALLKEYS
#define NOAUTH KV_CF_NOAUTH
#define NOQ KV_CF_NOQUEUE

/* Arity, flags and key positions as Redis 7's COMMAND reports them. */
static const kv_command table[KV_CMD_COUNT_] = {
    [KV_CMD_PING] = {KV_CMD_PING, -1, F, 0, 0, 0, "connection", "1.0.0",
                     "Returns the server's liveliness response.", kv_cmd_ping},
    [KV_CMD_GET] = {KV_CMD_GET, 2, R | F, 1, 1, 1, "string", "1.0.0",
                    "Returns the string value of a key.", kv_cmd_get},
    [KV_CMD_SET] = {KV_CMD_SET, -3, W, 1, 1, 1, "string", "1.0.0",
                    "Sets the string value of a key, ignoring its type. The "
                    "key is created if it doesn't exist.",
                    kv_cmd_set},
    [KV_CMD_DEL] = {KV_CMD_DEL, -2, W, 1, -1, 1, "generic", "1.0.0",
                    "Deletes one or more keys.", kv_cmd_del},
    [KV_CMD_EXISTS] = {KV_CMD_EXISTS, -2, R | F, 1, -1, 1, "generic", "1.0.0",
                       "Determines whether one or more keys exist.",
                       kv_cmd_exists},
    [KV_CMD_INCR] = {KV_CMD_INCR, 2, W | F, 1, 1, 1, "string", "1.0.0",
                     "Increments the integer value of a key by one. Uses 0 "
                     "as initial value if the key doesn't exist.",
                     kv_cmd_incr},
    [KV_CMD_INCRBY] = {KV_CMD_INCRBY, 3, W | F, 1, 1, 1, "string", "1.0.0",
                       "Increments the integer value of a key by a number. "
                       "Uses 0 as initial value if the key doesn't exist.",
                       kv_cmd_incrby},
    [KV_CMD_DECR] = {KV_CMD_DECR, 2, W | F, 1, 1, 1, "string", "1.0.0",
                     "Decrements the integer value of a key by one. Uses 0 "
                     "as initial value if the key doesn't exist.",
                     kv_cmd_decr},
    [KV_CMD_MGET] = {KV_CMD_MGET, -2, R | F, 1, -1, 1, "string", "1.0.0",
                     "Atomically returns the string values of one or more "
                     "keys.",
                     kv_cmd_mget},
    [KV_CMD_MSET] = {KV_CMD_MSET, -3, W, 1, -1, 2, "string", "1.0.1",
                     "Atomically creates or modifies the string values of "
                     "one or more keys.",
                     kv_cmd_mset},
    [KV_CMD_SCAN] = {KV_CMD_SCAN, -2, R | ALL, 0, 0, 0, "generic", "2.8.0",
                     "Iterates over the key names in the database.",
                     kv_cmd_scan},
    [KV_CMD_DBSIZE] = {KV_CMD_DBSIZE, 1, R | F | ALL, 0, 0, 0, "server",
                       "1.0.0", "Returns the number of keys in the database.",
                       kv_cmd_dbsize},
    [KV_CMD_FLUSHALL] = {KV_CMD_FLUSHALL, -1, W | ALL, 0, 0, 0, "server",
                         "1.0.0", "Removes all keys from all databases.",
                         kv_cmd_flushall},
    [KV_CMD_INFO] = {KV_CMD_INFO, -1, 0, 0, 0, 0, "server", "1.0.0",
                     "Returns information and statistics about the server.",
                     kv_cmd_info},
    [KV_CMD_DECRBY] = {KV_CMD_DECRBY, 3, W | F, 1, 1, 1, "string", "1.0.0",
                       "Decrements a number from the integer value of a key. "
                       "Uses 0 as initial value if the key doesn't exist.",
                       kv_cmd_decrby},
    [KV_CMD_TTL] = {KV_CMD_TTL, 2, R | F, 1, 1, 1, "generic", "1.0.0",
                    "Returns the expiration time in seconds of a key.",
                    kv_cmd_ttl},
    [KV_CMD_PTTL] = {KV_CMD_PTTL, 2, R | F, 1, 1, 1, "generic", "2.6.0",
                     "Returns the expiration time in milliseconds of a key.",
                     kv_cmd_pttl},
    [KV_CMD_EXPIRE] = {KV_CMD_EXPIRE, -3, W | F, 1, 1, 1, "generic", "1.0.0",
                       "Sets the expiration time of a key in seconds.",
                       kv_cmd_expire},
    [KV_CMD_PEXPIRE] = {KV_CMD_PEXPIRE, -3, W | F, 1, 1, 1, "generic", "2.6.0",
                        "Sets the expiration time of a key in milliseconds.",
                        kv_cmd_pexpire},
    [KV_CMD_PERSIST] = {KV_CMD_PERSIST, 2, W | F, 1, 1, 1, "generic", "2.2.0",
                        "Removes the expiration time of a key.",
                        kv_cmd_persist},
    [KV_CMD_TYPE] = {KV_CMD_TYPE, 2, R | F, 1, 1, 1, "generic", "1.0.0",
                     "Determines the type of value stored at a key.",
                     kv_cmd_type},
    [KV_CMD_KEYS] = {KV_CMD_KEYS, 2, R | ALL, 0, 0, 0, "generic", "1.0.0",
                     "Returns all key names that match a pattern.",
                     kv_cmd_keys},
    [KV_CMD_APPEND] = {KV_CMD_APPEND, 3, W | F, 1, 1, 1, "string", "2.0.0",
                       "Appends a string to the value of a key. Creates the "
                       "key if it doesn't exist.",
                       kv_cmd_append},
    [KV_CMD_STRLEN] = {KV_CMD_STRLEN, 2, R | F, 1, 1, 1, "string", "2.2.0",
                       "Returns the length of a string value.", kv_cmd_strlen},
    [KV_CMD_GETDEL] = {KV_CMD_GETDEL, 2, W | F, 1, 1, 1, "string", "6.2.0",
                       "Returns the string value of a key after deleting the "
                       "key.",
                       kv_cmd_getdel},
    [KV_CMD_GETEX] = {KV_CMD_GETEX, -2, W | F, 1, 1, 1, "string", "6.2.0",
                      "Returns the string value of a key after setting its "
                      "expiration time.",
                      kv_cmd_getex},
    [KV_CMD_SETNX] = {KV_CMD_SETNX, 3, W | F, 1, 1, 1, "string", "1.0.0",
                      "Set the string value of a key only when the key "
                      "doesn't exist.",
                      kv_cmd_setnx},
    [KV_CMD_GETSET] = {KV_CMD_GETSET, 3, W | F, 1, 1, 1, "string", "1.0.0",
                       "Returns the previous string value of a key after "
                       "setting it to a new value.",
                       kv_cmd_getset},
    [KV_CMD_INCRBYFLOAT] = {KV_CMD_INCRBYFLOAT, 3, W | F, 1, 1, 1, "string",
                            "2.6.0",
                            "Increment the floating point value of a key by "
                            "a number. Uses 0 as initial value if the key "
                            "doesn't exist.",
                            kv_cmd_incrbyfloat},
    [KV_CMD_RENAME] = {KV_CMD_RENAME, 3, W, 1, 2, 1, "generic", "1.0.0",
                       "Renames a key and overwrites the destination.",
                       kv_cmd_rename},
    [KV_CMD_MULTI] = {KV_CMD_MULTI, 1, F | NOQ, 0, 0, 0, "transactions",
                      "1.2.0", "Starts a transaction.", kv_cmd_multi},
    [KV_CMD_EXEC] = {KV_CMD_EXEC, 1, NOQ, 0, 0, 0, "transactions", "1.2.0",
                     "Executes all commands in a transaction.", kv_cmd_exec},
    [KV_CMD_DISCARD] = {KV_CMD_DISCARD, 1, F | NOQ, 0, 0, 0, "transactions",
                        "2.0.0", "Discards a transaction.", kv_cmd_discard},
    [KV_CMD_AUTH] = {KV_CMD_AUTH, -2, F | NOAUTH, 0, 0, 0, "connection",
                     "1.0.0", "Authenticates the connection.", kv_cmd_auth},
    [KV_CMD_HELLO] = {KV_CMD_HELLO, -1, F | NOAUTH, 0, 0, 0, "connection",
                      "6.0.0", "Handshakes with the Redis server.",
                      kv_cmd_hello},
    [KV_CMD_CLIENT] = {KV_CMD_CLIENT, -2, 0, 0, 0, 0, "connection", "2.4.0",
                       "A container for client connection commands.",
                       kv_cmd_client},
    [KV_CMD_COMMAND] = {KV_CMD_COMMAND, -1, 0, 0, 0, 0, "server", "2.8.13",
                        "Returns detailed information about all commands.",
                        kv_cmd_command},
    [KV_CMD_ECHO] = {KV_CMD_ECHO, 2, F, 0, 0, 0, "connection", "1.0.0",
                     "Returns the given string.", kv_cmd_echo},
    [KV_CMD_SELECT] = {KV_CMD_SELECT, 2, F, 0, 0, 0, "connection", "1.0.0",
                       "Changes the selected database.", kv_cmd_select},
    [KV_CMD_CONFIG] = {KV_CMD_CONFIG, -2, 0, 0, 0, 0, "server", "2.0.0",
                       "A container for server configuration commands.",
                       kv_cmd_config},
    [KV_CMD_QUIT] = {KV_CMD_QUIT, -1, F | NOAUTH | NOQ, 0, 0, 0, "connection",
                     "1.0.0", "Closes the connection.", kv_cmd_quit},
    [KV_CMD_CLUSTER] = {KV_CMD_CLUSTER, -2, ALL, 0, 0, 0, "cluster", "3.0.0",
                        "A container for Redis Cluster commands.",
                        kv_cmd_cluster},
    [KV_CMD_ASKING] = {KV_CMD_ASKING, 1, F, 0, 0, 0, "cluster", "3.0.0",
                       "Signals that a cluster client is following an -ASK "
                       "redirect.",
                       kv_cmd_asking},
    [KV_CMD_READONLY] = {KV_CMD_READONLY, 1, F, 0, 0, 0, "cluster", "3.0.0",
                         "Enables read-only queries for a connection to a "
                         "Redis Cluster replica node.",
                         kv_cmd_readonly},
    [KV_CMD_READWRITE] = {KV_CMD_READWRITE, 1, F, 0, 0, 0, "cluster", "3.0.0",
                          "Enables read-write queries for a connection to a "
                          "Redis Cluster replica node.",
                          kv_cmd_readwrite},
    [KV_CMD_DUMP] = {KV_CMD_DUMP, 2, R, 1, 1, 1, "generic", "2.6.0",
                     "Returns a serialized representation of the value "
                     "stored at a key.",
                     kv_cmd_dump},
    [KV_CMD_RESTORE] = {KV_CMD_RESTORE, -4, W, 1, 1, 1, "generic", "2.6.0",
                        "Creates a key from the serialized representation of "
                        "a value.",
                        kv_cmd_restore},
    [KV_CMD_RESTORE_ASKING] = {KV_CMD_RESTORE_ASKING, -4, W, 1, 1, 1, "server",
                               "3.0.0",
                               "An internal command for migrating keys in "
                               "Redis Cluster.",
                               kv_cmd_restore},
    /* Its keys are where KEYS says (Redis' "movablekeys"): none for the
     * gate, which would lock the wrong words; it locks its own. */
    [KV_CMD_MIGRATE] = {KV_CMD_MIGRATE, -6, W | KV_CF_NOMULTI, 0, 0, 0,
                        "generic", "2.6.0",
                        "Atomically transfers a key from one Redis instance "
                        "to another.",
                        kv_cmd_migrate},
    [KV_CMD_WATCH] = {KV_CMD_WATCH, -2, F | NOQ, 1, -1, 1, "transactions",
                      "2.2.0",
                      "Monitors changes to keys to determine the execution "
                      "of a transaction.",
                      kv_cmd_watch},
    [KV_CMD_UNWATCH] = {KV_CMD_UNWATCH, 1, F, 0, 0, 0, "transactions", "2.2.0",
                        "Forgets about watched keys of a transaction.",
                        kv_cmd_unwatch},
    [KV_CMD_FLUSHDB] = {KV_CMD_FLUSHDB, -1, W | ALL, 0, 0, 0, "server", "1.0.0",
                        "Remove all keys from the current database.",
                        kv_cmd_flushall},
    [KV_CMD_SETEX] = {KV_CMD_SETEX, 4, W, 1, 1, 1, "string", "2.0.0",
                      "Sets the string value and expiration time of a key. "
                      "Creates the key if it doesn't exist.",
                      kv_cmd_setex},
    [KV_CMD_PSETEX] = {KV_CMD_PSETEX, 4, W, 1, 1, 1, "string", "2.6.0",
                       "Sets both string value and expiration time in "
                       "milliseconds of a key. The key is created if it "
                       "doesn't exist.",
                       kv_cmd_psetex},
    [KV_CMD_UNLINK] = {KV_CMD_UNLINK, -2, W | F, 1, -1, 1, "generic", "4.0.0",
                       "Asynchronously deletes one or more keys.", kv_cmd_del},
    [KV_CMD_MSETNX] = {KV_CMD_MSETNX, -3, W, 1, -1, 2, "string", "1.0.1",
                       "Atomically modifies the string values of one or more "
                       "keys only when all keys don't exist.",
                       kv_cmd_msetnx},
    [KV_CMD_GETRANGE] = {KV_CMD_GETRANGE, 4, R, 1, 1, 1, "string", "2.4.0",
                         "Returns a substring of the string stored at a key.",
                         kv_cmd_getrange},
    [KV_CMD_SETRANGE] = {KV_CMD_SETRANGE, 4, W, 1, 1, 1, "string", "2.2.0",
                         "Overwrites a part of a string value with another "
                         "by an offset. Creates the key if it doesn't exist.",
                         kv_cmd_setrange},
    [KV_CMD_EXPIREAT] = {KV_CMD_EXPIREAT, -3, W | F, 1, 1, 1, "generic",
                         "1.2.0",
                         "Sets the expiration time of a key to a Unix "
                         "timestamp.",
                         kv_cmd_expireat},
    [KV_CMD_PEXPIREAT] = {KV_CMD_PEXPIREAT, -3, W | F, 1, 1, 1, "generic",
                          "2.6.0",
                          "Sets the expiration time of a key to a Unix "
                          "milliseconds timestamp.",
                          kv_cmd_pexpireat},
    [KV_CMD_RENAMENX] = {KV_CMD_RENAMENX, 3, W | F, 1, 2, 1, "generic", "1.0.0",
                         "Renames a key only when the target key name "
                         "doesn't exist.",
                         kv_cmd_renamenx},
    [KV_CMD_COPY] = {KV_CMD_COPY, -3, W, 1, 2, 1, "generic", "6.2.0",
                     "Copies the value of a key to a new key.", kv_cmd_copy},
    [KV_CMD_TOUCH] = {KV_CMD_TOUCH, -2, R | F, 1, -1, 1, "generic", "3.2.1",
                      "Returns the number of existing keys out of those "
                      "specified after updating the time they were last "
                      "accessed.",
                      kv_cmd_exists},
    [KV_CMD_RANDOMKEY] = {KV_CMD_RANDOMKEY, 1, R | ALL, 0, 0, 0, "generic",
                          "1.0.0",
                          "Returns a random key name from the database.",
                          kv_cmd_randomkey},
    [KV_CMD_EXPIRETIME] = {KV_CMD_EXPIRETIME, 2, R | F, 1, 1, 1, "generic",
                           "7.0.0",
                           "Returns the expiration time of a key as a Unix "
                           "timestamp.",
                           kv_cmd_expiretime},
    [KV_CMD_PEXPIRETIME] = {KV_CMD_PEXPIRETIME, 2, R | F, 1, 1, 1, "generic",
                            "7.0.0",
                            "Returns the expiration time of a key as a Unix "
                            "milliseconds timestamp.",
                            kv_cmd_pexpiretime},
    [KV_CMD_SUBSTR] = {KV_CMD_SUBSTR, 4, R, 1, 1, 1, "string", "1.0.0",
                       "Returns a substring from a string value.",
                       kv_cmd_getrange},
    [KV_CMD_TIME] = {KV_CMD_TIME, 1, F, 0, 0, 0, "server", "2.6.0",
                     "Returns the server time.", kv_cmd_time},
    [KV_CMD_SETBIT] = {KV_CMD_SETBIT, 4, W, 1, 1, 1, "bitmap", "2.2.0",
                       "Sets or clears the bit at offset of the string "
                       "value. Creates the key if it doesn't exist.",
                       kv_cmd_setbit},
    [KV_CMD_GETBIT] = {KV_CMD_GETBIT, 3, R | F, 1, 1, 1, "bitmap", "2.2.0",
                       "Returns a bit value by offset.", kv_cmd_getbit},
    [KV_CMD_LCS] = {KV_CMD_LCS, -3, R, 1, 2, 1, "string", "7.0.0",
                    "Finds the longest common substring.", kv_cmd_lcs},
    /* NOQ: run in MULTI, where it refuses itself as Redis' no-multi. */
    [KV_CMD_SHUTDOWN] = {KV_CMD_SHUTDOWN, -1, NOQ, 0, 0, 0, "server", "1.0.0",
                         "Stops the server (weft-kv-server keeps nothing "
                         "on disk: nothing is saved).",
                         kv_cmd_shutdown},
};

const kv_command *kv_command_find(int cmd) {
  if (cmd <= 0 || cmd >= KV_CMD_COUNT_ || table[cmd].fn == NULL)
    return NULL;
  return &table[cmd];
}

const kv_command *kv_command_table(size_t *n) {
  *n = KV_CMD_COUNT_;
  return table;
}

/* ---- replies and parsing ---- */

void kv_reply_errorf(const kv_call *c, const char *fmt, const char *arg) {
  char msg[256];
  snprintf(msg, sizeof msg, fmt, arg);
  c->ops->error(c->w, msg);
}

void kv_reply_arity(const kv_call *c) {
  kv_reply_errorf(c, "ERR wrong number of arguments for '%s' command", c->name);
}

void kv_reply_syntax(const kv_call *c) {
  c->ops->error(c->w, "ERR syntax error");
}

void kv_reply_store_error(const kv_call *c, int err) {
  kv_reply_errorf(c, "ERR %s", kv_error_message(err));
}

void kv_reply_not_integer(const kv_call *c) {
  c->ops->error(c->w, "ERR value is not an integer or out of range");
}

void kv_reply_cstr(const kv_call *c, const char *s) {
  c->ops->bulk(c->w, s, strlen(s), NULL);
}

bool kv_parse_i64(const kv_arg *a, int64_t *out) {
  char buf[24];
  if (a->len == 0 || a->len >= sizeof buf)
    return false;
  memcpy(buf, a->ptr, a->len);
  buf[a->len] = '\0';
  const char *digits = buf[0] == '-' ? buf + 1 : buf;
  if (digits[0] < '1' || digits[0] > '9')
    if (strcmp(buf, "0") != 0)
      return false;
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno != 0 || *end != '\0')
    return false;
  *out = v;
  return true;
}

bool kv_arg_is(const kv_arg *a, const char *s) {
  return a->len == strlen(s) && strncasecmp(a->ptr, s, a->len) == 0;
}

int64_t kv_unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void kv_text_add(kv_text *t, const char *fmt, ...) {
  for (int tries = 0; tries < 2 && !t->failed; tries++) {
    va_list ap;
    va_start(ap, fmt);
    int n = t->buf != NULL
                ? vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap)
                : vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if (t->buf != NULL && (size_t)n < t->cap - t->len) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = (t->cap + (size_t)n + 1) * 2;
    char *b = realloc(t->buf, cap);
    if (b == NULL) {
      t->failed = true;
      return;
    }
    t->buf = b;
    t->cap = cap;
  }
}

/* ---- the gate ---- */

/* The command's name in lower case, for error messages. */
static void lower_name(int cmd, char *out, size_t cap) {
  const char *upper = kv_cmd_name(cmd);
  size_t i = 0;
  for (; upper[i] != '\0' && i + 1 < cap; i++)
    out[i] = (char)(upper[i] | 0x20); /* ASCII letters to lower case */
  out[i] = '\0';
}

void kv_command_run(kv_session *s, const kv_command *cmd, size_t argc,
                    const kv_arg *argv, const kv_reply_ops *ops, void *w) {
  char name[16];
  lower_name(cmd->id, name, sizeof name);
  kv_call c = {.sess = s,
               .store = s->shared->store,
               .cmd = cmd,
               .name = name,
               .argc = argc,
               .argv = argv,
               .ops = ops,
               .w = w};
  atomic_store_explicit(&s->last_cmd, cmd->id, memory_order_relaxed);
  atomic_store_explicit(&s->last_ns, kv_session_now_ns(), memory_order_relaxed);
  if (s->loop_index < s->shared->n_loops) {
    _Atomic uint64_t *n = &s->shared->loops[s->loop_index].commands;
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                          memory_order_relaxed);
  }
  cmd->fn(&c);
}

void kv_exec(kv_session *s, int cmd, size_t argc, const kv_arg *argv,
             const kv_reply_ops *ops, void *w) {
  if (s->denied) { /* protected mode: nothing runs */
    ops->error(w, KV_DENIED_TEXT);
    return;
  }
  const kv_command *k = kv_command_find(cmd);
  if (k == NULL) {
    kv_multi_flag(s);
    ops->error(w, "ERR unknown command");
    return;
  }
  size_t words = argc + 1; /* with the name, as Redis counts */
  if ((k->arity > 0 && words != (size_t)k->arity) ||
      (k->arity < 0 && words < (size_t)-k->arity)) {
    char name[16];
    lower_name(cmd, name, sizeof name);
    kv_call c = {.sess = s, .name = name, .ops = ops, .w = w};
    kv_multi_flag(s);
    kv_reply_arity(&c);
    return;
  }
  if (!s->authenticated && !(k->flags & KV_CF_NOAUTH)) {
    kv_multi_flag(s);
    ops->error(w, KV_NOAUTH_TEXT);
    return;
  }
  kv_txn t;
  t.locked = false; /* not the whole struct: 512 bytes per command */
  if (s->shared->cluster != NULL && !s->in_exec &&
      !kv_cluster_admit(s, k, argc, argv, ops, w, &t))
    return;
  if (s->multi.active && !s->in_exec && (k->flags & KV_CF_NOMULTI)) {
    kv_multi_flag(s);
    ops->error(w, "ERR MIGRATE is not allowed inside MULTI (it waits on the "
                  "network; the transaction is discarded at EXEC)");
  } else if (s->multi.active && !s->in_exec && !(k->flags & KV_CF_NOQUEUE))
    kv_multi_queue(s, cmd, argc, argv, ops, w);
  else
    kv_command_run(s, k, argc, argv, ops, w);
  if (t.locked) /* kv_cluster_admit's */
    kv_txn_unlock(&t);
}

void kv_command_add_keys(kv_txn *t, const kv_command *cmd, size_t argc,
                         const kv_arg *argv) {
  if (cmd->flags & KV_CF_ALLKEYS) {
    kv_txn_add_all(t);
    return;
  }
  if (cmd->first_key <= 0 || argc == 0)
    return;
  /* Word positions count the name; argv does not. */
  size_t first = (size_t)cmd->first_key - 1;
  size_t last = cmd->last_key < 0 ? argc - 1 : (size_t)cmd->last_key - 1;
  if (last >= argc)
    last = argc - 1;
  for (size_t i = first; i <= last; i += (size_t)cmd->key_step)
    kv_txn_add_key(t, argv[i].ptr, argv[i].len);
}
