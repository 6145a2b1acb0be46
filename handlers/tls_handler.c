/* SPDX-License-Identifier: Apache-2.0 */
/* The TLS handler (weft/tls.h): one OpenSSL engine per channel, driven
 * through BIOs over weft_bufs (tls_bio.c), first in the pipeline.
 *
 *   inbound   weft_buf (ciphertext, kept) -> rbio -> SSL_read -> weft_buf
 *             (plaintext, up to 16 KiB) -> next handler
 *   outbound  weft_buf (plaintext) -> queue -> SSL_write (full records)
 *             -> wbio: weft_bufs (ciphertext, up to 64 KiB) -> head
 *
 * Offsets: every ciphertext byte has its place in the stream OpenSSL
 * wrote into wbio (BIO_number_written counts them). A plaintext write's
 * promise waits for the offset of its last record's end (an "ack"); each
 * ciphertext buffer handed down carries a promise for the offset of its
 * end (a "chunk"); when the transport completes a chunk, the acks up to it
 * complete. Chunks complete in order, as the outbound queue does.
 *
 * Lifetime: the state is reference-counted on the loop thread: one
 * reference for the pipeline (dropped in handler_removed), one for each
 * chunk in flight, one for each queued task, and one for the duration of
 * every op of this handler that fires events (which may close the channel
 * and remove the handler under it). The last drop frees it. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/loop.h>
#include <weft/timer.h>

#include "handlers/tls_internal.h"

#define READ_MAX 16384u /* plaintext bytes per buffer up */

static void event_release(void *msg) { (void)msg; }

const weft_msg_type weft_tls_event_type = {.name = "weft_tls_event",
                                           .release = event_release};

/* ---- state ---- */

static void free_state(weft__tls_handler *s) {
  weft__tls_complete_acks(s, WEFT__TLS_NO_END, WEFT_ECLOSED);
  OPENSSL_cleanse(s->note.secret, sizeof s->note.secret);
  free(s->plain.slots);
  free(s->acks.slots);
  free(s->chunks.slots);
  free(s->closers.slots);
  SSL_free(s->ssl);
  weft_tls_context_release(s->tctx);
  free(s);
}

/* Returns false when the state was freed: touch nothing afterwards. */
bool weft__tls_drop(weft__tls_handler *s) {
  if (--s->refs > 0)
    return true;
  free_state(s);
  return false;
}

/* True while TLS may still move data on this channel. */
static bool alive(const weft__tls_handler *s) {
  return !s->failed && !s->removed && weft_channel_is_active(s->ch);
}

void weft__tls_fire_event(weft__tls_handler *s, weft_tls_event_kind kind,
                          int status, const char *reason) {
  if (s->removed)
    return;
  weft_tls_event ev = {.msg = {&weft_tls_event_type},
                       .kind = kind,
                       .status = status,
                       .reason = reason};
  weft_ctx_fire_user_event(s->ctx, &ev);
}

/* ---- the handshake ---- */

static void handshake_timeout(void *arg) {
  weft__tls_handler *s = arg;
  weft_channel *ch = weft_channel_retain(s->ch); /* see drain_timeout */
  weft__tls_fail(s, WEFT_ETIMEDOUT, "TLS handshake timed out after %d ms",
                 s->tctx->handshake_timeout_ms);
  weft_channel_release(ch);
}

/* Queued writes go: after the handshake, or after the switch to kTLS. */
static void send_waiting(weft__tls_handler *s) {
  bool flush = s->flush_wanted;
  s->flush_wanted = false;
  if (s->plain.len > 0 || flush)
    weft__tls_send_queued(s, flush);
}

void weft__tls_ktls_switched(weft__tls_handler *s, bool on) {
  s->ktls_pending = false;
  s->ktls_tx = on;
  if (alive(s) && !s->closing)
    send_waiting(s);
}

static void handshake_completed(weft__tls_handler *s) {
  s->done = true;
  weft_timer_stop(&s->hs_timer);
  if (weft__tls_push_all(s) < 0) { /* our last flight */
    weft__tls_fail(s, WEFT_ENOMEM, "TLS: no memory for the handshake");
    return;
  }
  /* kTLS: writes wait until the last flight left and the kernel took
   * over (or did not). */
  s->ktls_pending = s->tctx->ktls;
  weft__tls_fire_event(s, WEFT_TLS_HANDSHAKE_DONE, 0, NULL);
  if (!alive(s))
    return;
  if (s->ktls_pending)
    weft__tls_drain_then(s, AFTER_KTLS);
  else
    send_waiting(s);
}

/* One step of the handshake with what arrived. Returns 1 once complete,
 * 0 while it needs more from the peer, -1 after a failure (reported). */
static int handshake_step(weft__tls_handler *s) {
  weft__tls_clear_errors();
  int rc = SSL_do_handshake(s->ssl);
  if (rc == 1) {
    handshake_completed(s);
    return alive(s) ? 1 : -1;
  }
  int e = SSL_get_error(s->ssl, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    if (weft__tls_push_all(s) < 0) {
      weft__tls_fail(s, WEFT_ENOMEM, "TLS: no memory for the handshake");
      return -1;
    }
    return 0;
  }
  char why[sizeof s->reason];
  int err = weft__tls_failure(why, sizeof why, "TLS handshake failed", s->ssl,
                              e, &s->note);
  weft__tls_fail(s, err, "%s", why);
  return -1;
}

static void start_handshake(weft__tls_handler *s) {
  if (s->started)
    return;
  s->started = true;
  if (s->tctx->handshake_timeout_ms > 0)
    weft_timer_start(&s->hs_timer,
                     (uint64_t)s->tctx->handshake_timeout_ms * 1000000u, 0,
                     handshake_timeout, s);
  if (s->tctx->mode == WEFT_TLS_CLIENT)
    handshake_step(s); /* the ClientHello */
}

/* ---- inbound: ciphertext in, plaintext up ---- */

static void peer_closed(weft__tls_handler *s) {
  s->peer_closed = true;
  if (s->fired && !s->removed) {
    s->fired = false;
    weft_ctx_fire_channel_read_complete(s->ctx);
  }
  weft__tls_fire_event(s, WEFT_TLS_CLOSE_NOTIFY, 0, NULL);
  weft_promise none = WEFT_PROMISE_NONE;
  if (!alive(s) || s->closing)
    return;
  if (weft__tls_fifo_push(&s->closers, &none) == 0)
    weft__tls_start_close(s);
  else
    weft_ctx_close(s->ctx, none); /* no memory to wait: close now */
}

/* Nothing is left to decrypt: neither received ciphertext nor records
 * (or read-ahead bytes) inside the engine. */
static bool drained(weft__tls_handler *s) {
  return weft__tls_bio_pending(s->rbio) == 0 && !SSL_has_pending(s->ssl);
}

/* Decrypts and passes plaintext on while the channel reads. */
static void read_records(weft__tls_handler *s) {
  bool more = !drained(s);
  while (more && alive(s) && !s->closing && !s->peer_closed &&
         weft_channel_is_reading(s->ch)) {
    size_t avail = weft__tls_bio_pending(s->rbio) + (size_t)SSL_pending(s->ssl);
    size_t cap = avail < READ_MAX ? (avail > 0 ? avail : 1) : READ_MAX;
    weft_buf *b = weft_buf_alloc(weft__tls_pool(s), cap);
    if (b == NULL) {
      weft__tls_fail(s, WEFT_ENOMEM, "TLS: no memory for plaintext");
      return;
    }
    int e = SSL_ERROR_NONE;
    while (weft_buf_writable(b) > 0) {
      weft__tls_clear_errors();
      size_t r = 0;
      if (SSL_read_ex(s->ssl, weft_buf_wptr(b), weft_buf_writable(b), &r) !=
          1) {
        e = SSL_get_error(s->ssl, 0);
        break;
      }
      b->writer_index += r;
      /* Nothing left to decrypt: the next SSL_read would only answer
       * WANT_READ (a call and an error-queue round per receive), and the
       * outer loop need not ask again. */
      if (drained(s)) {
        more = false;
        break;
      }
    }
    if (weft_buf_readable(b) > 0) {
      s->fired = true;
      weft_ctx_fire_channel_read(s->ctx, b);
    } else {
      weft_buf_release(b);
    }
    if (s->note.reneg_refused) {
      weft__tls_fail(s, WEFT_EPROTO,
                     "TLS renegotiation refused: the peer asked to renegotiate "
                     "(renegotiation is off)");
      return;
    }
    if (e == SSL_ERROR_NONE)
      continue;
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
      break;
    if (e == SSL_ERROR_ZERO_RETURN) {
      peer_closed(s);
      return;
    }
    char why[sizeof s->reason];
    int err = weft__tls_failure(why, sizeof why, "TLS read failed", s->ssl, e,
                                &s->note);
    weft__tls_fail(s, err, "%s", why);
    return;
  }
}

/* What arrived: on with the handshake, then application data, then send
 * what OpenSSL wrote meanwhile (tickets, alerts, key updates). */
static void pump(weft__tls_handler *s) {
  if (!s->done && handshake_step(s) <= 0)
    return;
  read_records(s);
  if (alive(s) && weft__tls_push_all(s) < 0)
    weft__tls_fail(s, WEFT_ENOMEM, "TLS: no memory for ciphertext");
}

static void tls_read(weft_ctx *ctx, void *msg) {
  if (!weft_msg_is(msg, &weft_buf_msg_type)) {
    weft_ctx_fire_channel_read(ctx, msg);
    return;
  }
  weft__tls_handler *s = weft_ctx_state(ctx);
  weft_buf *b = msg;
  size_t n = weft_buf_readable(b);
  if (s->failed || s->closing || s->peer_closed) {
    weft_buf_release(b); /* no more TLS here: dropped */
    return;
  }
  weft__tls_hold(s);
  s->depth++;
  if (!s->done && (s->hs_bytes += n) > WEFT_TLS_MAX_HANDSHAKE_BYTES) {
    weft__tls_fail(
        s, WEFT_ENOBUFS,
        "TLS handshake refused: the peer sent more than %u bytes without "
        "completing it",
        WEFT_TLS_MAX_HANDSHAKE_BYTES);
  } else if (weft__tls_bio_pending(s->rbio) + n > WEFT_TLS_MAX_BUFFERED_BYTES) {
    weft__tls_fail(
        s, WEFT_ENOBUFS,
        "TLS: more than %u bytes of ciphertext unread while the channel "
        "does not read",
        WEFT_TLS_MAX_BUFFERED_BYTES);
  } else {
    bool read_now = weft_channel_is_reading(s->ch);
    int rc = weft__tls_bio_put(s->rbio, b, read_now); /* takes b */
    b = NULL;
    if (rc < 0)
      weft__tls_fail(s, WEFT_ENOMEM, "TLS: no memory for received records");
    else
      pump(s);
  }
  if (b != NULL)
    weft_buf_release(b);
  s->depth--;
  weft__tls_drop(s);
}

static void tls_read_complete(weft_ctx *ctx) {
  weft__tls_handler *s = weft_ctx_state(ctx);
  if (!s->fired)
    return; /* only records of the handshake, or a part of one */
  s->fired = false;
  weft_ctx_fire_channel_read_complete(ctx);
}

static void tls_user_event(weft_ctx *ctx, void *event) {
  weft__tls_handler *s = weft_ctx_state(ctx);
  /* Reading resumed: decrypt what waited. Inside our own event the loop
   * there goes on by itself. */
  if (event == &weft_event_read_resumed && s->depth == 0 && s->done) {
    weft__tls_hold(s);
    s->depth++;
    read_records(s);
    if (alive(s) && weft__tls_push_all(s) < 0)
      weft__tls_fail(s, WEFT_ENOMEM, "TLS: no memory for ciphertext");
    if (s->fired && !s->removed) {
      s->fired = false;
      weft_ctx_fire_channel_read_complete(ctx);
    }
    s->depth--;
    weft__tls_drop(s);
  }
  weft_ctx_fire_user_event(ctx, event);
}

static void tls_active(weft_ctx *ctx) {
  weft__tls_handler *s = weft_ctx_state(ctx);
  weft__tls_hold(s);
  start_handshake(s);
  bool go_on = !s->removed && weft_channel_is_active(s->ch);
  weft__tls_drop(s);
  if (go_on)
    weft_ctx_fire_channel_active(ctx);
}

static void tls_inactive(weft_ctx *ctx) {
  weft__tls_handler *s = weft_ctx_state(ctx);
  weft__tls_hold(s);
  weft_timer_stop(&s->hs_timer);
  if (s->after == AFTER_FAIL) {
    weft__tls_report_failure(s); /* the peer left before our alert did */
  } else if (!s->done && !s->failed && s->started) {
    s->failed = true;
    s->fail_err = WEFT_ECONNRESET;
    snprintf(s->reason, sizeof s->reason,
             "TLS handshake failed: the connection closed before it "
             "completed");
    weft_channel_log(s->ch, WEFT_LOG_INFO, "%s", s->reason);
    weft__tls_fire_event(s, WEFT_TLS_HANDSHAKE_FAILED, s->fail_err, s->reason);
  }
  weft__tls_fail_plain(s, WEFT_ECLOSED);
  weft__tls_pass_closes_down(s);
  weft__tls_drop(s);
  weft_ctx_fire_channel_inactive(ctx);
}

/* The handshake's last flight has not left while WEFT__TLS_KTLS_WAIT_MAX
 * bytes wait: records stay in user space for this channel. */
static void give_up_ktls(weft__tls_handler *s) {
  weft_channel_log(s->ch, WEFT_LOG_INFO,
                   "kTLS: the handshake's last flight has not left and %zu "
                   "bytes wait; records are made in user space",
                   s->plain_bytes);
  weft__tls_cancel_ktls_wait(s);
  weft__tls_hold(s);
  weft__tls_ktls_switched(s, false);
  weft__tls_drop(s);
}

static void tls_write(weft_ctx *ctx, void *msg, weft_promise promise) {
  weft__tls_handler *s = weft_ctx_state(ctx);
  int err = 0;
  if (!weft_msg_is(msg, &weft_buf_msg_type))
    err = WEFT_EINVAL;
  else if (s->failed)
    err = s->fail_err < 0 ? s->fail_err : WEFT_ECLOSED;
  else if (s->closing || weft_channel_state_of(s->ch) >= WEFT_CHANNEL_INACTIVE)
    err = WEFT_ECLOSED;
  weft__tls_plain_write w = {.buf = msg, .promise = promise};
  if (err == 0 && weft__tls_fifo_push(&s->plain, &w) < 0)
    err = WEFT_ENOMEM;
  if (err < 0) {
    if (err == WEFT_EINVAL)
      weft_channel_log(s->ch, WEFT_LOG_WARN,
                       "a %s reached the TLS handler; only weft_buf can be "
                       "written (is an encoder missing?)",
                       weft_msg_type_name(msg));
    weft_msg_release(msg);
    weft_promise_complete(promise, err);
    return;
  }
  s->plain_bytes += weft_buf_readable(w.buf);
  if (s->ktls_pending && s->plain_bytes > WEFT__TLS_KTLS_WAIT_MAX) {
    give_up_ktls(s);
    return;
  }
  /* Whole records go now, so the watermarks see them. */
  if (s->done && !s->ktls_pending && s->plain_bytes >= WEFT__TLS_RECORD_MAX) {
    weft__tls_hold(s);
    weft__tls_send_queued(s, false);
    weft__tls_drop(s);
  }
}

static void tls_flush(weft_ctx *ctx) {
  weft__tls_handler *s = weft_ctx_state(ctx);
  if (s->failed || s->closing) {
    weft_ctx_flush(ctx);
    return;
  }
  if (!s->done || s->ktls_pending) {
    s->flush_wanted = true; /* once the handshake completed */
    return;
  }
  weft__tls_hold(s);
  weft__tls_send_queued(s, true);
  weft__tls_drop(s);
}

static void tls_close(weft_ctx *ctx, weft_promise promise) {
  weft__tls_handler *s = weft_ctx_state(ctx);
  bool wait = s->closing
                  ? s->after == AFTER_CLOSE
                  : !s->failed && s->done && weft_channel_is_active(s->ch);
  if (!wait || weft__tls_fifo_push(&s->closers, &promise) < 0) {
    weft_ctx_close(ctx, promise); /* no close_notify to wait for */
    return;
  }
  if (!s->closing)
    weft__tls_start_close(s);
}

static void tls_added(weft_ctx *ctx) {
  weft__tls_handler *s = weft_ctx_state(ctx);
  s->ctx = ctx;
  s->ch = weft_ctx_channel(ctx);
  weft_loop *loop = weft_channel_loop(s->ch);
  weft_timer_init(loop, &s->hs_timer);
  weft_timer_init(loop, &s->drain_timer);
  if (weft_channel_is_active(s->ch)) {
    weft__tls_hold(s);
    start_handshake(s);
    weft__tls_drop(s);
  }
}

static void tls_removed(weft_ctx *ctx) {
  weft__tls_handler *s = weft_ctx_state(ctx);
  s->removed = true;
  weft_timer_stop(&s->hs_timer);
  weft_timer_stop(&s->drain_timer);
  weft__tls_fail_plain(s, WEFT_ECLOSED);
  /* Acks of ciphertext that never went down fail; those in flight wait
   * for their chunks. */
  weft__tls_ack *a;
  while (s->acks.len > 0 &&
         (a = weft__tls_fifo_at(&s->acks, s->acks.len - 1))->end > s->down) {
    weft_promise p = a->promise;
    s->acks.len--;
    weft_promise_complete(p, WEFT_ECLOSED);
  }
  s->after = AFTER_NONE;
  weft_promise p;
  while (weft__tls_fifo_pop(&s->closers, &p))
    weft_ctx_close(ctx, p);
  weft__tls_drop(s); /* the pipeline's */
}

static const weft_handler tls_ops = {.name = "tls",
                                     .handler_added = tls_added,
                                     .handler_removed = tls_removed,
                                     .channel_active = tls_active,
                                     .channel_inactive = tls_inactive,
                                     .channel_read = tls_read,
                                     .channel_read_complete = tls_read_complete,
                                     .user_event = tls_user_event,
                                     .write = tls_write,
                                     .flush = tls_flush,
                                     .close = tls_close};

/* ---- public ---- */

static bool is_ip_address(const char *name) {
  unsigned char addr[16];
  return inet_pton(AF_INET, name, addr) == 1 ||
         inet_pton(AF_INET6, name, addr) == 1;
}

/* SNI and the name the server's certificate must carry. */
static int set_server_name(weft__tls_handler *s, const char *name) {
  weft_tls_context *c = s->tctx;
  if (name == NULL)
    name = c->server_name;
  if (name[0] == '\0') {
    if (c->verify != WEFT_TLS_VERIFY_REQUIRED)
      return 0;
    weft_log(WEFT_LOG_WARN,
             "TLS client: verify = required needs a server name (the name "
             "the server's certificate must carry): set server_name, or "
             "verify = optional to check the chain only");
    return WEFT_EINVAL;
  }
  bool ip = is_ip_address(name);
  if (!ip && SSL_set_tlsext_host_name(s->ssl, name) != 1)
    return WEFT_EINVAL;
  if (c->verify == WEFT_TLS_VERIFY_NONE)
    return 0;
  int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(s->ssl), name)
              : SSL_set1_host(s->ssl, name);
  return ok == 1 ? 0 : WEFT_EINVAL;
}

static int engine_new(weft__tls_handler *s, const char *server_name) {
  s->ssl = SSL_new(s->tctx->ssl_ctx);
  if (s->ssl == NULL)
    return WEFT_ENOMEM;
  s->rbio = weft__tls_bio_new(s);
  s->wbio = weft__tls_bio_new(s);
  if (s->rbio == NULL || s->wbio == NULL) {
    BIO_free(s->rbio);
    BIO_free(s->wbio);
    return WEFT_ENOMEM;
  }
  SSL_set_bio(s->ssl, s->rbio, s->wbio);
  weft__tls_note_bind(s->ssl, &s->note);
  if (s->tctx->mode == WEFT_TLS_SERVER) {
    SSL_set_accept_state(s->ssl);
    return 0;
  }
  SSL_set_connect_state(s->ssl);
  return set_server_name(s, server_name);
}

int weft_tls_add_first(weft_pipeline *p, weft_tls_context *ctx,
                       const char *server_name) {
  if (p == NULL || ctx == NULL)
    return WEFT_EINVAL;
  weft__tls_handler *s = calloc(1, sizeof *s);
  if (s == NULL)
    return WEFT_ENOMEM;
  s->refs = 1;
  s->tctx = weft_tls_context_retain(ctx);
  s->plain.elem = sizeof(weft__tls_plain_write);
  s->acks.elem = sizeof(weft__tls_ack);
  s->chunks.elem = sizeof(uint64_t);
  s->closers.elem = sizeof(weft_promise);
  ERR_clear_error();
  int rc = engine_new(s, server_name);
  ERR_clear_error();
  if (rc == 0)
    rc = weft_pipeline_add_first(p, WEFT_TLS_HANDLER_NAME, &tls_ops, s);
  if (rc < 0)
    free_state(s);
  return rc;
}

int weft_tls_info_get(weft_channel *ch, weft_tls_info *out) {
  weft_ctx *ctx =
      weft_pipeline_context(weft_channel_pipeline(ch), WEFT_TLS_HANDLER_NAME);
  if (ctx == NULL || weft_ctx_handler(ctx) != &tls_ops)
    return WEFT_ENOENT;
  weft__tls_handler *s = weft_ctx_state(ctx);
  memset(out, 0, sizeof *out);
  out->handshake_done = s->done;
  out->ktls_tx = s->ktls_tx;
  if (!s->done)
    return 0;
  out->resumed = SSL_session_reused(s->ssl) == 1;
  out->protocol = SSL_get_version(s->ssl);
  const SSL_CIPHER *c = SSL_get_current_cipher(s->ssl);
  out->cipher = c != NULL ? SSL_CIPHER_get_name(c) : NULL;
  const unsigned char *alpn;
  unsigned alen = 0;
  SSL_get0_alpn_selected(s->ssl, &alpn, &alen);
  if (alen > 0 && alen < sizeof out->alpn) {
    memcpy(out->alpn, alpn, alen);
    out->alpn[alen] = '\0';
  }
  X509 *peer = SSL_get0_peer_certificate(s->ssl);
  if (peer != NULL)
    weft__tls_name(out->peer_subject, sizeof out->peer_subject,
                   X509_get_subject_name(peer));
  return 0;
}
