/* SPDX-License-Identifier: Apache-2.0 */
/* The KV client's blocking wrappers (client.h, kv_sync_*): each starts
 * the asynchronous call and waits on a condition variable until its
 * callback ran. From threads that are not a loop's only: waiting on a loop
 * thread would stop the loop that must answer. */
#include "client.h"
#include "client_internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <weft/error.h>
#include <weft/loop.h>

static bool on_loop_thread(void) { return weft_loop_current() != NULL; }

typedef struct waiter {
  pthread_mutex_t m;
  pthread_cond_t cv;
  bool done;
  int err;
  kv_reply *reply;
} waiter;

static void waiter_init(waiter *w) {
  *w = (waiter){.done = false};
  pthread_mutex_init(&w->m, NULL);
  pthread_cond_init(&w->cv, NULL);
}

/* The signal is sent under the mutex, so the waiter cannot destroy the
 * condition variable while signal() still uses it. */
static void waiter_wake(waiter *w, int err) {
  pthread_mutex_lock(&w->m);
  w->err = err;
  w->done = true;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->m);
}

static int waiter_wait(waiter *w) {
  pthread_mutex_lock(&w->m);
  while (!w->done)
    pthread_cond_wait(&w->cv, &w->m);
  pthread_mutex_unlock(&w->m);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->m);
  return w->err;
}

static void sync_connected(void *arg, kv_client *c, int status) {
  (void)c;
  waiter_wake(arg, status);
}

int kv_sync_connect(kv_client **out, weft_loop_group *group, const char *uri,
                    const kv_client_options *opts) {
  if (on_loop_thread())
    return WEFT_EINVAL;
  waiter w;
  waiter_init(&w);
  kv_client *c;
  int rc = kv_client_connect(&c, group, NULL, uri, opts, sync_connected, &w);
  if (rc < 0) {
    waiter_wake(&w, rc);
    waiter_wait(&w);
    return rc;
  }
  rc = waiter_wait(&w);
  if (rc < 0) {
    kv_sync_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

static void sync_replied(void *arg, int err, const kv_reply *reply) {
  waiter *w = arg;
  if (err == 0 && (w->reply = kv_reply_dup(reply)) == NULL)
    err = WEFT_ENOMEM;
  waiter_wake(w, err);
}

int kv_sync_call(kv_client *c, int cmd, size_t argc, const kv_arg *argv,
                 uint64_t timeout_ns, kv_reply **out) {
  if (on_loop_thread() || out == NULL)
    return WEFT_EINVAL;
  waiter w;
  waiter_init(&w);
  int rc = kv_client_call(c, cmd, argc, argv, timeout_ns, sync_replied, &w);
  if (rc < 0)
    waiter_wake(&w, rc);
  rc = waiter_wait(&w);
  *out = rc == 0 ? w.reply : NULL;
  return rc;
}

/* A sync call whose reply must have tag `want` (or NULL for GET/SET). */
static int sync_expect(kv_client *c, int cmd, size_t argc, const kv_arg *argv,
                       uint8_t want, kv_reply **out) {
  kv_reply *r;
  int rc = kv_sync_call(c, cmd, argc, argv, 0, &r);
  if (rc < 0)
    return rc;
  if (r->tag == KV_TAG_ERROR)
    rc = kv_reply_error_code(r);
  else if (r->tag != want && r->tag != KV_TAG_NULL)
    rc = WEFT_EPROTO;
  if (rc < 0 || out == NULL) {
    kv_reply_free(r);
    return rc;
  }
  *out = r;
  return 0;
}

/* sync_expect for a command whose one argument is `key`. */
static int sync_key(kv_client *c, int cmd, const void *key, size_t klen,
                    uint8_t tag, kv_reply **out) {
  kv_arg a[] = {{key, klen}};
  return sync_expect(c, cmd, 1, a, tag, out);
}

int kv_sync_get(kv_client *c, const void *key, size_t klen, char **val,
                size_t *len) {
  kv_reply *r;
  int rc = sync_key(c, KV_CMD_GET, key, klen, KV_TAG_BULK, &r);
  if (rc < 0)
    return rc;
  if (r->tag == KV_TAG_NULL) {
    kv_reply_free(r);
    return WEFT_ENOENT;
  }
  char *copy = malloc(r->len + 1);
  if (copy != NULL) {
    memcpy(copy, r->str, r->len);
    copy[r->len] = '\0';
    *val = copy;
    if (len != NULL)
      *len = r->len;
  }
  kv_reply_free(r);
  return copy != NULL ? 0 : WEFT_ENOMEM;
}

int kv_sync_set(kv_client *c, const void *key, size_t klen, const void *val,
                size_t vlen) {
  kv_arg a[] = {{key, klen}, {val, vlen}};
  return sync_expect(c, KV_CMD_SET, 2, a, KV_TAG_SIMPLE, NULL);
}

static int sync_integer(kv_client *c, int cmd, const void *key, size_t klen,
                        int64_t *value) {
  kv_reply *r;
  int rc = sync_key(c, cmd, key, klen, KV_TAG_INTEGER, &r);
  if (rc < 0)
    return rc;
  if (r->tag != KV_TAG_INTEGER)
    rc = WEFT_EPROTO;
  else if (value != NULL)
    *value = r->integer;
  kv_reply_free(r);
  return rc;
}

int kv_sync_del(kv_client *c, const void *key, size_t klen, int64_t *n) {
  return sync_integer(c, KV_CMD_DEL, key, klen, n);
}

int kv_sync_incr(kv_client *c, const void *key, size_t klen, int64_t *value) {
  return sync_integer(c, KV_CMD_INCR, key, klen, value);
}

static void sync_closed(void *arg) { waiter_wake(arg, 0); }

void kv_sync_close(kv_client *c) {
  if (c == NULL)
    return;
  if (on_loop_thread()) {
    kv_client_close(c, NULL, NULL);
    return;
  }
  waiter w;
  waiter_init(&w);
  if (kv__client_close_start(c, sync_closed, &w) < 0)
    waiter_wake(&w, 0);
  waiter_wait(&w);
}
