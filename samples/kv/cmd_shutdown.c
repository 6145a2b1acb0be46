/* SPDX-License-Identifier: Apache-2.0 */
/* SHUTDOWN (command_internal.h): Redis 7's arguments for a server without
 * persistence, behind [kv] shutdown_command.
 *
 * Redis 7.0's shutdownCommand takes NOSAVE, SAVE, NOW, FORCE and ABORT in
 * any order; NOSAVE with SAVE, or ABORT with any other, is a syntax error;
 * ABORT without a shutdown in progress answers "No shutdown in progress.".
 * NOW (do not wait for replicas) and FORCE (stop even if saving fails)
 * change nothing here: there are no replicas and nothing is saved. SAVE is
 * refused, since a save cannot happen: Redis would stop without the data
 * the caller asked to keep. The command is no-multi in Redis 7, refused in
 * MULTI. On success Redis answers nothing: the process exits and the
 * connection closes, which redis-cli and redis-py take for success; over
 * RESP this does the same, over weft RPC (which needs one response per
 * request) it answers +OK first. */
#include "command_internal.h"
#include "server.h"

#include <weft/log.h>

enum {
  SD_NOSAVE = 1 << 0,
  SD_SAVE = 1 << 1,
  SD_NOW = 1 << 2,
  SD_FORCE = 1 << 3,
  SD_ABORT = 1 << 4
};

/* The flags of the arguments, or -1 for a word that is none of them. */
static int shutdown_flags(const kv_call *c) {
  static const char *const words[] = {"NOSAVE", "SAVE", "NOW", "FORCE",
                                      "ABORT"};
  int flags = 0;
  for (size_t i = 0; i < c->argc; i++) {
    int bit = -1;
    for (int w = 0; w < 5 && bit < 0; w++)
      if (kv_arg_is(&c->argv[i], words[w]))
        bit = w;
    if (bit < 0)
      return -1;
    flags |= 1 << bit;
  }
  return flags;
}

/* The policy's refusal for this client, or NULL when it may stop us. */
static const char *shutdown_refusal(const kv_session *s) {
  if (s->shared->shutdown == NULL)
    return "ERR SHUTDOWN is not available: the program that embeds this "
           "server stops it itself";
  switch (s->shared->shutdown_policy) {
  case KV_SHUTDOWN_YES:
    return NULL;
  case KV_SHUTDOWN_LOCAL:
    return kv_addr_is_loopback(s->addr)
               ? NULL
               : "ERR SHUTDOWN is allowed from the loopback network only "
                 "([kv] shutdown_command = local)";
  default:
    return "ERR SHUTDOWN is disabled on this server ([kv] shutdown_command "
           "= no)";
  }
}

void kv_cmd_shutdown(const kv_call *c) {
  kv_session *s = c->sess;
  if (s->multi.active && !s->in_exec) {
    kv_multi_flag(s); /* EXEC then aborts, as Redis' rejected commands */
    c->ops->error(c->w, "ERR Command not allowed inside a transaction");
    return;
  }
  int flags = c->argc > 5 ? -1 : shutdown_flags(c);
  if (flags < 0 || ((flags & SD_ABORT) && flags != SD_ABORT) ||
      ((flags & SD_NOSAVE) && (flags & SD_SAVE)))
    return kv_reply_syntax(c);
  const char *refused = shutdown_refusal(s);
  if (refused != NULL)
    return c->ops->error(c->w, refused);
  if (flags & SD_ABORT) /* nothing is ever in progress: we stop at once */
    return c->ops->error(c->w, "ERR No shutdown in progress.");
  if (flags & SD_SAVE)
    return c->ops->error(c->w,
                         "ERR SHUTDOWN SAVE: this server has no persistence "
                         "(no RDB, no AOF), nothing can be saved; use "
                         "SHUTDOWN or SHUTDOWN NOSAVE");
  weft_log(WEFT_LOG_WARN, "kv: SHUTDOWN from %s: the server stops", s->addr);
  if (s->rpc)
    c->ops->simple(c->w, "OK");
  else
    s->quit = true; /* no reply: the connection closes, as Redis' exit */
  s->shared->shutdown(s->shared->shutdown_arg);
}
