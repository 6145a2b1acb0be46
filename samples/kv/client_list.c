/* SPDX-License-Identifier: Apache-2.0 */
/* CLIENT LIST and CLIENT KILL (session.h): the server's sessions, of every
 * loop, on one list under kv_shared.clients_lock. What LIST shows of
 * another loop's session is what that thread may read: the fixed fields
 * (id, addresses, age), the name (written under the lock) and the last
 * command and its time (relaxed atomics); its transaction, user and RESP
 * version only its own loop may read, so they show for the caller alone.
 * KILL closes a session's channel on the channel's own loop (a task that
 * holds a reference to it); the caller's own, with SKIPME no, closes once
 * the reply is sent, as after QUIT. */
#include "command_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/log.h>
#include <weft/loop.h>

void kv_client_register(kv_session *s) {
  kv_shared *sh = s->shared;
  pthread_mutex_lock(&sh->clients_lock);
  s->prev_client = NULL;
  s->next_client = sh->clients;
  if (sh->clients != NULL)
    sh->clients->prev_client = s;
  sh->clients = s;
  pthread_mutex_unlock(&sh->clients_lock);
}

void kv_client_unregister(kv_session *s) {
  kv_shared *sh = s->shared;
  pthread_mutex_lock(&sh->clients_lock);
  if (s->prev_client != NULL)
    s->prev_client->next_client = s->next_client;
  else if (sh->clients == s)
    sh->clients = s->next_client;
  if (s->next_client != NULL)
    s->next_client->prev_client = s->prev_client;
  s->prev_client = s->next_client = NULL;
  pthread_mutex_unlock(&sh->clients_lock);
}

/* ---- CLIENT LIST ---- */

/* Appends one session's line, Redis' `key=value` fields; `own`: the
 * caller's, whose every field this thread may read. Under the lock. */
static void list_line(kv_text *t, const kv_session *s, bool own, uint64_t now) {
  const char *cmd =
      kv_cmd_name(atomic_load_explicit(&s->last_cmd, memory_order_relaxed));
  char lower[24] = "NULL";
  for (size_t i = 0; cmd != NULL && cmd[i] != '\0' && i + 1 < sizeof lower; i++)
    lower[i] = (char)(cmd[i] | 0x20), lower[i + 1] = '\0';
  uint64_t last = atomic_load_explicit(&s->last_ns, memory_order_relaxed);
  kv_text_add(
      t,
      "id=%" PRIu64 " addr=%s laddr=%s fd=-1 name=%s age=%" PRIu64
      " idle=%" PRIu64 " flags=%s db=0 sub=0 psub=0 ssub=0 multi=%ld "
      "qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 "
      "omem=0 tot-mem=0 events=r cmd=%s user=%s redir=-1 resp=%d\n",
      s->id, s->addr, s->laddr, s->name, (now - s->created_ns) / 1000000000u,
      now > last ? (now - last) / 1000000000u : 0,
      own && s->multi.active ? "x" : "N",
      own && s->multi.active ? (long)s->multi.count : -1L, lower,
      !own          ? "?"
      : s->acl_user ? s->shared->auth.user
                    : "default",
      own ? s->resp : 0);
}

/* LIST's filter: TYPE (only "normal" has sessions here) and ID. False
 * after an error reply. */
static bool list_filter(const kv_call *c, bool *none, size_t *ids_from) {
  *none = false;
  *ids_from = 0;
  if (c->argc == 1)
    return true;
  if (kv_arg_is(&c->argv[1], "TYPE") && c->argc == 3) {
    if (kv_arg_is(&c->argv[2], "normal"))
      return true;
    if (kv_arg_is(&c->argv[2], "master") || kv_arg_is(&c->argv[2], "replica") ||
        kv_arg_is(&c->argv[2], "pubsub")) {
      *none = true; /* no such connections here */
      return true;
    }
    kv_reply_errorf(c, "ERR Unknown client type '%s'", "");
    return false;
  }
  if (kv_arg_is(&c->argv[1], "ID") && c->argc >= 3) {
    for (size_t i = 2; i < c->argc; i++) {
      int64_t id;
      if (!kv_parse_i64(&c->argv[i], &id) || id <= 0) {
        c->ops->error(c->w, "ERR Invalid client ID");
        return false;
      }
    }
    *ids_from = 2;
    return true;
  }
  kv_reply_syntax(c);
  return false;
}

/* True when `s` is one of the IDs of argv[from..] (from 0: no filter). */
static bool list_wants(const kv_call *c, size_t from, const kv_session *s) {
  if (from == 0)
    return true;
  for (size_t i = from; i < c->argc; i++) {
    int64_t id;
    if (kv_parse_i64(&c->argv[i], &id) && (uint64_t)id == s->id)
      return true;
  }
  return false;
}

/* CLIENT LIST [TYPE normal|master|replica|pubsub] [ID id ...]. */
void kv_client_list(const kv_call *c) {
  bool none;
  size_t ids_from;
  if (!list_filter(c, &none, &ids_from))
    return;
  kv_text t = {0};
  uint64_t now = kv_session_now_ns();
  kv_shared *sh = c->sess->shared;
  pthread_mutex_lock(&sh->clients_lock);
  for (const kv_session *s = sh->clients; s != NULL && !none;
       s = s->next_client)
    if (list_wants(c, ids_from, s))
      list_line(&t, s, s == c->sess, now);
  pthread_mutex_unlock(&sh->clients_lock);
  if (t.failed)
    c->ops->error(c->w, "ERR out of memory listing the clients");
  else
    c->ops->verbatim(c->w, t.buf != NULL ? t.buf : "", t.len);
  free(t.buf);
}

/* ---- CLIENT KILL ---- */

/* KILL's filters; unset ones match every session. */
typedef struct kill_filter {
  uint64_t id; /* 0 = any */
  const kv_arg *addr, *laddr, *user;
  bool skipme;
} kill_filter;

static bool arg_equals(const kv_arg *a, const char *s) {
  return a->len == strlen(s) && memcmp(a->ptr, s, a->len) == 0;
}

static bool kill_matches(const kill_filter *f, const kv_session *s) {
  return (f->id == 0 || f->id == s->id) &&
         (f->addr == NULL || arg_equals(f->addr, s->addr)) &&
         (f->laddr == NULL || arg_equals(f->laddr, s->laddr)) &&
         (f->user == NULL ||
          arg_equals(f->user, "default")); /* only the caller's is known */
}

/* Parses KILL's arguments (argv[1..]): the old form (one address) or
 * the filters. False after an error reply. */
static bool kill_parse(const kv_call *c, kill_filter *f, bool *old_form) {
  *f = (kill_filter){.skipme = true};
  *old_form = c->argc == 2;
  if (*old_form) {
    f->addr = &c->argv[1];
    f->skipme = false; /* Redis: the old form kills the caller too */
    return true;
  }
  if (c->argc < 3 || c->argc % 2 == 0) {
    kv_reply_syntax(c);
    return false;
  }
  for (size_t i = 1; i + 1 < c->argc; i += 2) {
    const kv_arg *v = &c->argv[i + 1];
    int64_t id;
    if (kv_arg_is(&c->argv[i], "ID")) {
      if (!kv_parse_i64(v, &id) || id <= 0) {
        c->ops->error(c->w, "ERR client-id should be greater than 0");
        return false;
      }
      f->id = (uint64_t)id;
    } else if (kv_arg_is(&c->argv[i], "ADDR")) {
      f->addr = v;
    } else if (kv_arg_is(&c->argv[i], "LADDR")) {
      f->laddr = v;
    } else if (kv_arg_is(&c->argv[i], "USER")) {
      f->user = v;
    } else if (kv_arg_is(&c->argv[i], "SKIPME")) {
      if (!kv_arg_is(v, "yes") && !kv_arg_is(v, "no")) {
        kv_reply_syntax(c);
        return false;
      }
      f->skipme = kv_arg_is(v, "yes");
    } else {
      kv_reply_syntax(c);
      return false;
    }
  }
  return true;
}

/* On the channel's loop: closes it, drops KILL's reference. */
static void kill_task(void *arg) {
  weft_channel *ch = arg;
  weft_channel_close(ch, WEFT_PROMISE_NONE);
  weft_channel_release(ch);
}

/* CLIENT KILL ip:port | [ID id] [ADDR ip:port] [LADDR ip:port]
 * [USER name] [SKIPME yes|no]: the old form answers OK or "No such
 * client", the new one the number closed. */
void kv_client_kill(const kv_call *c) {
  kill_filter f;
  bool old_form;
  if (!kill_parse(c, &f, &old_form))
    return;
  kv_shared *sh = c->sess->shared;
  int64_t killed = 0;
  pthread_mutex_lock(&sh->clients_lock);
  for (kv_session *s = sh->clients; s != NULL; s = s->next_client) {
    if (!kill_matches(&f, s) || (s == c->sess && f.skipme))
      continue;
    killed++;
    if (s == c->sess) {
      s->quit = true; /* after this reply, as QUIT */
      continue;
    }
    weft_channel *ch = weft_channel_retain(s->channel);
    if (weft_loop_execute(weft_channel_loop(ch), kill_task, ch) != 0)
      weft_channel_release(ch), killed--; /* its loop has ended */
  }
  pthread_mutex_unlock(&sh->clients_lock);
  if (killed > 0)
    weft_log(WEFT_LOG_INFO,
             "kv: CLIENT KILL by client %" PRIu64 " (%s): %" PRId64
             " connection(s) closed",
             c->sess->id, c->sess->addr, killed);
  if (!old_form)
    return c->ops->integer(c->w, killed);
  if (killed == 0)
    return c->ops->error(c->w, "ERR No such client");
  c->ops->simple(c->w, "OK");
}
