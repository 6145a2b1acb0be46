/* SPDX-License-Identifier: Apache-2.0 */
/* WATCH and UNWATCH (watch.h): the keys a connection watches, with the
 * versions EXEC compares. */
#include "command_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>

void kv_watch_reset(kv_watch *w) {
  for (size_t i = 0; i < w->n; i++)
    free(w->keys[i]);
  free(w->keys);
  *w = (kv_watch){0};
}

void kv_watch_add_keys(const kv_watch *w, kv_txn *t) {
  for (size_t i = 0; i < w->n; i++)
    kv_txn_add_key(t, w->keys[i]->key, w->keys[i]->klen);
}

bool kv_watch_changed(const kv_watch *w, kv_store *store) {
  for (size_t i = 0; i < w->n; i++) {
    const kv_watched *k = w->keys[i];
    uint64_t version;
    int rc = kv_watch_version(store, k->key, k->klen, &version);
    if (rc < 0 || (rc == 1) != k->exists || version != k->version)
      return true;
  }
  return false;
}

/* Makes room for `more` keys of `bytes` key bytes; false (nothing
 * changed) past the bounds or out of memory. */
static bool watch_reserve(kv_watch *w, size_t more, size_t bytes,
                          size_t max_bytes) {
  if (more > KV_WATCH_MAX_KEYS - w->n || bytes > max_bytes - w->bytes)
    return false;
  if (w->n + more <= w->cap)
    return true;
  size_t cap = w->cap ? w->cap : 8;
  while (cap < w->n + more)
    cap *= 2;
  kv_watched **keys = realloc(w->keys, cap * sizeof *keys);
  if (keys == NULL)
    return false;
  w->keys = keys;
  w->cap = cap;
  return true;
}

/* WATCH key [key ...]: records each key's version now. Refused inside
 * MULTI, as in Redis. */
void kv_cmd_watch(const kv_call *c) {
  kv_session *s = c->sess;
  if (s->multi.active)
    return c->ops->error(c->w, "ERR WATCH inside MULTI is not allowed");
  size_t bytes = 0;
  for (size_t i = 0; i < c->argc; i++)
    bytes += c->argv[i].len; /* each below the decoder's limit */
  if (!watch_reserve(&s->watch, c->argc, bytes, s->shared->multi_max_bytes)) {
    char msg[160];
    snprintf(msg, sizeof msg,
             "ERR too many WATCHed keys (at most %u keys and %zu bytes of "
             "them per connection)",
             KV_WATCH_MAX_KEYS, s->shared->multi_max_bytes);
    return c->ops->error(c->w, msg);
  }
  size_t added = 0;
  for (; added < c->argc; added++) {
    const kv_arg *a = &c->argv[added];
    kv_watched *k = malloc(sizeof *k + a->len + 1);
    if (k == NULL)
      break;
    int rc = kv_watch_version(c->store, a->ptr, a->len, &k->version);
    if (rc < 0) {
      free(k);
      while (added > 0) /* all or nothing */
        free(s->watch.keys[s->watch.n + --added]);
      return kv_reply_store_error(c, rc);
    }
    k->exists = rc == 1;
    k->klen = a->len;
    if (a->len > 0)
      memcpy(k->key, a->ptr, a->len);
    s->watch.keys[s->watch.n + added] = k;
  }
  if (added < c->argc) {
    while (added > 0)
      free(s->watch.keys[s->watch.n + --added]);
    return c->ops->error(c->w, "ERR out of memory recording WATCHed keys");
  }
  s->watch.n += c->argc;
  s->watch.bytes += bytes;
  c->ops->simple(c->w, "OK");
}

/* UNWATCH: forgets every watched key. */
void kv_cmd_unwatch(const kv_call *c) {
  kv_watch_reset(&c->sess->watch);
  c->ops->simple(c->w, "OK");
}
