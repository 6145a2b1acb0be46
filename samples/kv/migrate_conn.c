/* SPDX-License-Identifier: Apache-2.0 */
/* MIGRATE's network part (migrate.h): a weft client channel to the target
 * on the session's own loop, so no loop thread ever waits on the network.
 *
 * Why on the loop and not on a worker thread: the loop already has what
 * a worker would need to rebuild: non-blocking connect with a timeout
 * (weft_bootstrap), TLS through the project's handler (weft_tls_add_first,
 * the same code as the server's listeners), timers, and the values sent
 * straight from the stored blobs without a copy. A worker would add a
 * thread's lifetime to join at shutdown, a blocking OpenSSL socket, and a
 * hand-back of every reply with weft_loop_execute. The one thing a worker
 * does better, DNS, MIGRATE does not need: the target must be a numeric
 * address (cluster_migrate.c checks it), so weft's connect resolves
 * nothing (weft_endpoint_resolve tries AI_NUMERICHOST first).
 *
 * The pipeline is [tls] -> "migrate" (this file's handler). Everything is
 * written at once after the connect (AUTH, then one RESTORE-ASKING per
 * key, REPLACE when asked), each value as a buffer over its blob; the
 * replies are read as lines. The timer is MIGRATE's timeout as Redis uses
 * it: the time allowed without progress (connect, then each read), so a
 * target that accepts and never answers fails after it, and one that
 * answers slowly but steadily does not.
 */
#include "migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/loop.h>
#include <weft/pipeline.h>

static const char payload_magic[4] = {'W', 'K', 'V', 1};

#define NS_PER_MS 1000000ull

/* Drops one of the references migrate.h lists; the last frees m. */
static void unref(kv_migrate *m) {
  if (--m->refs == 0)
    kv_migrate_free(m);
}

/* Ends the operation once: stops the timer, hands the outcome to the
 * command's side and closes the target channel (its pipeline drops its
 * reference later; the close may run mig_inactive at once, which finds
 * the operation done). */
static void finish(kv_migrate *m, const char *failed) {
  if (m->done)
    return;
  m->done = true;
  weft_timer_stop(&m->timer);
  kv_migrate_done(m, failed);
  if (m->ch != NULL)
    weft_channel_close(m->ch, WEFT_PROMISE_NONE);
  unref(m);
}

/* The timeout passed without progress. */
static void timed_out(void *arg) {
  kv_migrate *m = arg;
  finish(m, !m->connected
                ? "IOERR error or timeout connecting to the client"
                : "IOERR error or timeout reading to target instance");
}

/* (Re)arms the no-progress timer; false without memory for it. */
static bool arm(kv_migrate *m) {
  return weft_timer_start(&m->timer, (uint64_t)m->timeout_ms * NS_PER_MS, 0,
                          timed_out, m) == 0;
}

/* ---- the commands out ---- */

/* Appends one RESP bulk string header ("$<len>\r\n") to `b`. */
static int bulk_head(weft_buf *b, size_t len) {
  char h[24];
  int n = snprintf(h, sizeof h, "$%zu\r\n", len);
  return weft_buf_write_bytes(b, h, (size_t)n);
}

/* Appends a whole bulk string. */
static int bulk(weft_buf *b, const void *p, size_t len) {
  int rc = bulk_head(b, len);
  if (rc == 0)
    rc = weft_buf_write_bytes(b, p, len);
  if (rc == 0)
    rc = weft_buf_write_bytes(b, "\r\n", 2);
  return rc;
}

/* Room enough for a command's words but the value: key, TTL, names. */
static size_t head_size(const kv_migrate_key *k) { return k->klen + 160; }

/* Writes `b` down the pipeline (the target channel owns it then). */
static void put(weft_ctx *ctx, weft_buf *b) {
  weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
}

static void free_blob(void *base, size_t capacity, void *arg) {
  (void)base, (void)capacity;
  kv_blob_release(arg);
}

/* AUTH [user] password, when the command gave one. */
static int write_auth(weft_ctx *ctx, kv_migrate *m, weft_pool *pool) {
  size_t ul = m->user != NULL ? strlen(m->user) : 0;
  size_t pl = strlen(m->password);
  weft_buf *b = weft_buf_alloc(pool, ul + pl + 64);
  if (b == NULL)
    return WEFT_ENOMEM;
  int rc = weft_buf_write_bytes(b, m->user != NULL ? "*3\r\n" : "*2\r\n", 4);
  if (rc == 0)
    rc = bulk(b, "AUTH", 4);
  if (rc == 0 && m->user != NULL)
    rc = bulk(b, m->user, ul);
  if (rc == 0)
    rc = bulk(b, m->password, pl);
  put(ctx, b); /* written even on error: the buffer is released with it */
  return rc;
}

/* RESTORE-ASKING key ttl payload [REPLACE]: the words around the value in
 * pool buffers, the value itself as a buffer over its blob. */
static int write_restore(weft_ctx *ctx, kv_migrate *m, kv_migrate_key *k,
                         weft_pool *pool) {
  weft_buf *b = weft_buf_alloc(pool, head_size(k));
  if (b == NULL)
    return WEFT_ENOMEM;
  char ttl[24];
  int tn = snprintf(ttl, sizeof ttl, "%lld", (long long)k->ttl_ms);
  int rc = weft_buf_write_bytes(b, m->replace ? "*5\r\n" : "*4\r\n", 4);
  if (rc == 0)
    rc = bulk(b, "RESTORE-ASKING", 14);
  if (rc == 0)
    rc = bulk(b, k->key, k->klen);
  if (rc == 0)
    rc = bulk(b, ttl, (size_t)tn);
  if (rc == 0)
    rc = bulk_head(b, sizeof payload_magic + k->value->len);
  if (rc == 0)
    rc = weft_buf_write_bytes(b, payload_magic, sizeof payload_magic);
  put(ctx, b);
  if (rc < 0)
    return rc;
  weft_buf *v =
      weft_buf_wrap(pool, k->value->data, k->value->len, k->value->len,
                    free_blob, kv_blob_retain(k->value));
  if (v == NULL) {
    kv_blob_release(k->value);
    return WEFT_ENOMEM;
  }
  put(ctx, v);
  if ((b = weft_buf_alloc(pool, 16)) == NULL)
    return WEFT_ENOMEM;
  rc = weft_buf_write_bytes(b, "\r\n", 2);
  if (rc == 0 && m->replace)
    rc = bulk(b, "REPLACE", 7);
  put(ctx, b);
  return rc;
}

/* Everything MIGRATE sends, in one flush. Pipelined: the replies are a
 * few bytes each, read as they come. */
static void send_all(weft_ctx *ctx, kv_migrate *m) {
  weft_pool *pool = weft_loop_pool(m->loop);
  int rc = m->password != NULL ? write_auth(ctx, m, pool) : 0;
  for (size_t i = 0; i < m->n && rc == 0; i++)
    rc = write_restore(ctx, m, &m->keys[i], pool);
  weft_ctx_flush(ctx);
  if (rc < 0)
    finish(m, "IOERR error or timeout writing to target instance");
}

/* ---- the replies in ---- */

/* Control bytes of a target's text become spaces: it goes into an error
 * reply and a log line. */
static void printable(char *s) {
  for (; *s != '\0'; s++)
    if ((unsigned char)*s < ' ' || (unsigned char)*s == 0x7f)
      *s = ' ';
}

/* One reply line (without CRLF): AUTH's, then one per key. A key is moved
 * only on exactly "+OK"; "-..." is the target's refusal (the key stays,
 * the next keys' replies still count, as Redis); anything else is not a
 * RESP answer to these commands (an HTTP server's "HTTP/1.1 400 ...") and
 * ends the migration with every key not yet answered kept. Returns false
 * once it ended. */
static bool take_line(kv_migrate *m, char *line) {
  size_t i = m->replies++;
  bool auth = m->password != NULL && i == 0;
  size_t key = m->password != NULL ? i - 1 : i;
  printable(line);
  if (strcmp(line, "+OK") == 0) {
    if (!auth)
      m->keys[key].moved = true;
  } else if (line[0] == '-') {
    if (m->failed == NULL) {
      snprintf(m->err, sizeof m->err,
               "ERR Target instance replied with error: %s", line + 1);
      m->failed = m->err;
    }
    if (auth) { /* the RESTOREs' replies are NOAUTH's: nothing moved */
      finish(m, m->failed);
      return false;
    }
  } else {
    snprintf(m->err, sizeof m->err,
             "IOERR target instance sent a reply that is not RESP +OK or "
             "-ERR: '%.64s'; the keys not yet answered stay here",
             line);
    weft_log(WEFT_LOG_WARN, "kv: MIGRATE to %s: %s", m->uri, m->err);
    finish(m, m->err);
    return false;
  }
  if (m->replies == m->n + (m->password != NULL)) {
    finish(m, m->failed);
    return false;
  }
  return true;
}

/* Splits what was read into lines. */
static void mig_read(weft_ctx *ctx, void *msg) {
  kv_migrate *m = weft_ctx_state(ctx);
  if (!weft_msg_is(msg, &weft_buf_msg_type) || m->done) {
    weft_msg_release(msg);
    return;
  }
  weft_buf *b = msg;
  const char *p = (const char *)weft_buf_rptr(b);
  size_t n = weft_buf_readable(b);
  bool going = n == 0 || arm(m); /* progress: the timeout starts again */
  for (size_t i = 0; i < n && going; i++) {
    if (p[i] == '\n') {
      size_t l = m->line_len;
      if (l > 0 && m->line[l - 1] == '\r')
        l--;
      m->line[l] = '\0';
      m->line_len = 0;
      going = take_line(m, m->line);
    } else if (m->line_len + 1 >= sizeof m->line) {
      m->line[64] = '\0';
      going = take_line(m, m->line); /* too long for any answer: not one */
    } else {
      m->line[m->line_len++] = p[i];
    }
  }
  weft_buf_release(b);
}

/* The target closed (or the channel failed) before every reply came. */
static void mig_inactive(weft_ctx *ctx) {
  kv_migrate *m = weft_ctx_state(ctx);
  m->ch = NULL; /* closed already */
  finish(m, "IOERR error or timeout reading to target instance");
  weft_ctx_fire_channel_inactive(ctx);
}

/* A TLS or transport error: logged at INFO (the client gets IOERR), and
 * the channel closes, which ends the operation (mig_inactive). */
static void mig_exception(weft_ctx *ctx, int err, const char *reason) {
  kv_migrate *m = weft_ctx_state(ctx);
  weft_log(WEFT_LOG_INFO, "kv: MIGRATE to %s: %s (%s)", m->uri, reason,
           weft_strerror(err));
  finish(m, "IOERR error or timeout reading to target instance");
}

static void mig_removed(weft_ctx *ctx) {
  kv_migrate *m = weft_ctx_state(ctx);
  m->ch = NULL;
  unref(m);
}

static const weft_handler migrate_handler = {.name = "kv-migrate",
                                             .channel_inactive = mig_inactive,
                                             .channel_read = mig_read,
                                             .exception_caught = mig_exception,
                                             .handler_removed = mig_removed};

/* ---- the connect ---- */

static void mig_init(weft_channel *ch, void *arg) {
  kv_migrate *m = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  if (m->done) { /* timed out before the channel was made */
    weft_channel_close(ch, WEFT_PROMISE_NONE);
    return;
  }
  int rc = m->tls != NULL ? weft_tls_add_first(p, m->tls, m->host) : 0;
  if (rc == 0)
    rc = weft_pipeline_add_last(p, "migrate", &migrate_handler, m);
  if (rc < 0) {
    weft_log(WEFT_LOG_WARN, "kv: MIGRATE to %s: cannot build the pipeline: %s",
             m->uri, weft_strerror(rc));
    weft_channel_close(ch, WEFT_PROMISE_NONE);
    return;
  }
  m->refs++; /* the pipeline's, dropped by mig_removed */
  m->ch = ch;
}

static void mig_connected(weft_channel *ch, int status, void *arg) {
  kv_migrate *m = arg;
  if (m->done) {
    unref(m);
    return;
  }
  if (status < 0 || ch == NULL || m->ch != ch) {
    finish(m, "IOERR error or timeout connecting to the client");
  } else if (arm(m)) {
    m->connected = true;
    send_all(weft_pipeline_context(weft_channel_pipeline(ch), "migrate"), m);
  } else {
    finish(m, "IOERR error or timeout connecting to the client");
  }
  unref(m);
}

void kv_migrate_connect(kv_migrate *m) {
  m->loop = weft_loop_current();
  /* The operation's reference (dropped by finish), and this call's: an
   * end before it returns must not free m under it. */
  m->refs = 2;
  m->starting = true;
  weft_timer_init(m->loop, &m->timer);
  weft_bootstrap b = {.loop = m->loop,
                      .connect = m->uri,
                      .init = mig_init,
                      .init_arg = m,
                      .on_connect = mig_connected,
                      .connect_arg = m};
  weft_channel_config_init(&b.options);
  b.options.connect_timeout_ms =
      m->timeout_ms > INT32_MAX ? INT32_MAX : (int)m->timeout_ms;
  m->refs++; /* the connect callback's */
  if (weft_bootstrap_connect(&b) < 0) {
    m->refs--;
    finish(m, "IOERR error or timeout connecting to the client");
  } else if (!arm(m)) {
    finish(m, "IOERR error or timeout connecting to the client");
  }
  m->starting = false;
  unref(m);
}
