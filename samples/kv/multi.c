/* SPDX-License-Identifier: Apache-2.0 */
/* MULTI, EXEC and DISCARD (multi.h): a connection's queue of commands and
 * its execution as one store transaction, in Redis 7's words. */
#include "command_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

size_t kv_multi_limit(size_t max_value_bytes) {
  /* One command the decoders accept is at most the largest value plus
   * 128 KiB (server.c sizes them so). */
  size_t one = max_value_bytes + 128 * 1024;
  return one > KV_MULTI_MIN_BYTES ? one : KV_MULTI_MIN_BYTES;
}

void kv_multi_reset(kv_multi *m) {
  for (kv_queued *q = m->head, *next; q != NULL; q = next) {
    next = q->next;
    free(q);
  }
  *m = (kv_multi){0};
}

void kv_multi_flag(kv_session *s) {
  if (s->multi.active && !s->in_exec)
    s->multi.dirty = true;
}

void kv_multi_queue(kv_session *s, int cmd, size_t argc, const kv_arg *argv,
                    const kv_reply_ops *ops, void *w) {
  kv_multi *m = &s->multi;
  size_t bytes = 0;
  for (size_t i = 0; i < argc; i++)
    bytes += argv[i].len; /* each below the decoder's limit: no overflow */
  if (m->count >= KV_MULTI_MAX_COMMANDS ||
      bytes > s->shared->multi_max_bytes - m->bytes) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "ERR MULTI queue is full (at most %u commands and %zu bytes of "
             "arguments); the transaction is discarded at EXEC",
             KV_MULTI_MAX_COMMANDS, s->shared->multi_max_bytes);
    m->dirty = true;
    ops->error(w, msg);
    return;
  }
  bool scan = cmd == KV_CMD_KEYS || cmd == KV_CMD_SCAN;
  if (scan && m->scans >= KV_MULTI_MAX_SCANS) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "ERR MULTI may queue at most %u KEYS or SCAN commands (EXEC "
             "runs them with every stripe locked); the transaction is "
             "discarded at EXEC",
             KV_MULTI_MAX_SCANS);
    m->dirty = true;
    ops->error(w, msg);
    return;
  }
  kv_queued *q = malloc(sizeof *q + argc * sizeof(kv_arg) + bytes + 1);
  if (q == NULL) {
    m->dirty = true;
    ops->error(w, "ERR out of memory queueing the command");
    return;
  }
  q->next = NULL;
  q->cmd = cmd;
  q->argc = argc;
  unsigned char *data = (unsigned char *)(q->argv + argc);
  for (size_t i = 0; i < argc; i++) {
    if (argv[i].len > 0)
      memcpy(data, argv[i].ptr, argv[i].len);
    q->argv[i] = (kv_arg){data, argv[i].len};
    data += argv[i].len;
  }
  if (m->tail != NULL)
    m->tail->next = q;
  else
    m->head = q;
  m->tail = q;
  m->count++;
  m->bytes += bytes;
  m->scans += scan;
  ops->simple(w, "QUEUED");
}

/* MULTI: starts queueing. */
void kv_cmd_multi(const kv_call *c) {
  if (c->sess->multi.active)
    return c->ops->error(c->w, "ERR MULTI calls can not be nested");
  c->sess->multi.active = true;
  c->ops->simple(c->w, "OK");
}

/* DISCARD: drops the queue. */
void kv_cmd_discard(const kv_call *c) {
  if (!c->sess->multi.active)
    return c->ops->error(c->w, "ERR DISCARD without MULTI");
  kv_multi_reset(&c->sess->multi);
  kv_watch_reset(&c->sess->watch);
  c->ops->simple(c->w, "OK");
}

/* EXEC: the queue as one transaction of the store. Every stripe a queued
 * command may touch is locked first, in index order (kv_txn), so other
 * connections see all of it or none; a command's error is its element of
 * the reply, as in Redis. The stripes of the WATCHed keys are locked with
 * them: when one of those changed since WATCH nothing runs and the reply
 * is a null (watch.h). */
void kv_cmd_exec(const kv_call *c) {
  kv_session *s = c->sess;
  if (!s->multi.active)
    return c->ops->error(c->w, "ERR EXEC without MULTI");
  if (s->multi.dirty) {
    kv_multi_reset(&s->multi);
    kv_watch_reset(&s->watch);
    return c->ops->error(c->w, "EXECABORT Transaction discarded because of "
                               "previous errors.");
  }
  kv_multi m = s->multi;
  s->multi = (kv_multi){0};
  bool asking = s->asking;
  s->asking = false;
  kv_txn t;
  kv_txn_init(&t, c->store);
  for (kv_queued *q = m.head; q != NULL; q = q->next)
    kv_command_add_keys(&t, kv_command_find(q->cmd), q->argc, q->argv);
  kv_watch_add_keys(&s->watch, &t);
  kv_txn_lock(&t);
  bool changed = kv_watch_changed(&s->watch, c->store);
  kv_watch_reset(&s->watch);
  if (changed) { /* Redis' null reply: nothing ran */
    kv_txn_unlock(&t);
    kv_multi_reset(&m);
    return c->ops->null(c->w);
  }
  if (!kv_cluster_exec_check(s, &m, asking, c->ops, c->w)) {
    kv_txn_unlock(&t); /* the slot moved while it was queued */
    kv_multi_reset(&m);
    return;
  }
  s->in_exec = true;
  c->ops->array(c->w, m.count);
  for (kv_queued *q = m.head; q != NULL; q = q->next)
    kv_command_run(s, kv_command_find(q->cmd), q->argc, q->argv, c->ops, c->w);
  s->in_exec = false;
  kv_txn_unlock(&t);
  kv_multi_reset(&m);
}
