/* samples/kv/command.h: executes one KV command against the store, for
 * either protocol. The protocol supplies a reply writer; the executor only
 * says what to answer (Redis' reply types). */
#ifndef WEFT_SAMPLES_KV_COMMAND_H
#define WEFT_SAMPLES_KV_COMMAND_H

#include <stddef.h>
#include <stdint.h>

#include "proto.h"
#include "store.h"

/**
 * A reply writer. `w` is the writer's own state. bulk's `blob` is the
 * stored value the bytes belong to, or NULL: a writer that sends large
 * values without copying may retain it (kv_blob_retain) until sent.
 */
typedef struct kv_reply_ops {
  void (*simple)(void *w, const char *s);
  void (*error)(void *w, const char *msg);
  void (*integer)(void *w, int64_t v);
  void (*bulk)(void *w, const void *data, size_t len, kv_blob *blob);
  void (*null)(void *w);
  void (*array)(void *w, size_t count);
} kv_reply_ops;

/** What the executor needs besides the store. */
typedef struct kv_exec_env {
  kv_store *store;
  const char *server_info; /* extra "key:value\r\n" lines for INFO */
} kv_exec_env;

/**
 * Runs command `cmd` (kv_cmd) with `argc` arguments (after the command
 * name) and writes exactly one reply through `ops`: the result, or an
 * error in Redis' words ("ERR wrong number of arguments for 'get'
 * command"). Argument bytes are only read during the call. Any thread (the
 * store is thread-safe).
 */
void kv_exec(const kv_exec_env *env, int cmd, size_t argc, const kv_arg *argv,
             const kv_reply_ops *ops, void *w);

#endif
