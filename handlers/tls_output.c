/* SPDX-License-Identifier: Apache-2.0 */
/* The TLS handler's output side (see tls_handler.c for the whole): the
 * plaintext queue, encryption into full records, ciphertext handed down in
 * chunks with their promises, the acks that complete a write's promise, and
 * what waits for the last bytes to leave (close_notify, a fatal alert). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

#include "handlers/tls_internal.h"

#define CHUNK_MAX WEFT_POOL_MAX_CLASS /* ciphertext bytes per buffer down */

/* ---- a small FIFO ---- */

int weft__tls_fifo_push(weft__tls_fifo *f, const void *e) {
  if (f->len == f->cap) {
    size_t cap = f->cap ? f->cap * 2 : 8; /* stays a power of two */
    unsigned char *s = malloc(cap * f->elem);
    if (s == NULL)
      return WEFT_ENOMEM;
    for (size_t i = 0; i < f->len; i++)
      memcpy(s + i * f->elem, weft__tls_fifo_at(f, i), f->elem);
    free(f->slots);
    f->slots = s, f->cap = cap, f->head = 0;
  }
  memcpy(f->slots + ((f->head + f->len) & (f->cap - 1)) * f->elem, e, f->elem);
  f->len++;
  return 0;
}

/* ---- outbound: plaintext in, ciphertext down ---- */

void weft__tls_complete_acks(weft__tls_handler *s, uint64_t upto, int status) {
  weft__tls_ack *a;
  while ((a = weft__tls_fifo_at(&s->acks, 0)) != NULL && a->end <= upto) {
    weft__tls_ack done;
    weft__tls_fifo_pop(&s->acks, &done);
    weft_promise_complete(done.promise, status);
  }
}

/* Fails the plaintext not yet encrypted. */
void weft__tls_fail_plain(weft__tls_handler *s, int err) {
  weft__tls_plain_write w;
  while (weft__tls_fifo_pop(&s->plain, &w)) {
    s->plain_bytes -= weft_buf_readable(w.buf);
    weft_buf_release(w.buf);
    weft_promise_complete(w.promise, err);
  }
}

static void run_after(weft__tls_handler *s, bool drained);

static void after_task(void *arg) {
  weft__tls_handler *s = arg;
  if (s->after != AFTER_NONE && s->handed >= s->after_target && !s->removed)
    run_after(s, true);
  weft_channel *ch = s->ch;
  weft__tls_drop(s);
  weft_channel_release(ch);
}

/* The promise of a ciphertext buffer handed down. */
static void chunk_done(void *arg, int status) {
  weft__tls_handler *s = arg;
  uint64_t end;
  if (weft__tls_fifo_pop(&s->chunks, &end)) {
    if (end > s->handed)
      s->handed = end;
    weft__tls_complete_acks(s, end, status);
  }
  /* What waited for these bytes runs as a task: this callback runs inside
   * the transport's send path. */
  if (s->after != AFTER_NONE && s->handed >= s->after_target) {
    weft_channel_retain(s->ch);
    weft__tls_hold(s);
    if (weft_loop_execute(weft_channel_loop(s->ch), after_task, s) < 0) {
      weft_channel_release(s->ch); /* the loop is ending: it closes all */
      s->refs--;
    }
  }
  weft__tls_drop(s);
}

/* Hands the ciphertext waiting in wbio down: full buffers only, or all of
 * it with `all`. Returns 0 or WEFT_ENOMEM. */
static int push_down(weft__tls_handler *s, bool all) {
  weft_buf *b;
  while ((b = weft__tls_bio_take(s->wbio, all)) != NULL) {
    s->down += weft_buf_readable(b);
    if (weft__tls_fifo_push(&s->chunks, &s->down) < 0) {
      weft_buf_release(b);
      return WEFT_ENOMEM;
    }
    weft__tls_hold(s); /* dropped by chunk_done */
    weft_ctx_write(s->ctx, b, (weft_promise){chunk_done, s});
  }
  return 0;
}

/* Everything in wbio, down and flushed. Once the kernel encrypts, what
 * OpenSSL writes (an alert, a key update) would be records of the wrong
 * key: dropped. */
int weft__tls_push_all(weft__tls_handler *s) {
  if (weft__tls_bio_pending(s->wbio) == 0)
    return 0;
  if (s->ktls_tx)
    return BIO_reset(s->wbio), 0;
  int rc = push_down(s, true);
  weft_ctx_flush(s->ctx);
  return rc;
}

/* Sets the end of acks whose last byte was in a record just written. */
static void set_ends(weft__tls_handler *s) {
  uint64_t end = BIO_number_written(s->wbio);
  for (size_t i = s->acks.len - s->unset_ends; i < s->acks.len; i++)
    ((weft__tls_ack *)weft__tls_fifo_at(&s->acks, i))->end = end;
  s->unset_ends = 0;
}

static int ssl_write(weft__tls_handler *s, const void *p, size_t n) {
  weft__tls_clear_errors();
  size_t w = 0;
  if (SSL_write_ex(s->ssl, p, n, &w) == 1 && w == n) {
    set_ends(s);
    return 0;
  }
  int e = SSL_get_error(s->ssl, 0);
  char why[sizeof s->reason];
  int err = weft__tls_failure(why, sizeof why, "TLS write failed", s->ssl, e,
                              &s->note);
  weft__tls_fail(s, err, "%s", why);
  return err;
}

/* Encrypts queued plaintext: whole records only, or all with `all`.
 * Small writes are merged into full records; a buffer holding whole
 * records is encrypted in place. Returns 0 or the error (reported). */
static int encrypt_queue(weft__tls_handler *s, bool all) {
  unsigned char rec[WEFT__TLS_RECORD_MAX];
  size_t fill = 0;
  size_t budget =
      all ? s->plain_bytes
          : s->plain_bytes / WEFT__TLS_RECORD_MAX * WEFT__TLS_RECORD_MAX;
  weft__tls_plain_write *w;
  while ((w = weft__tls_fifo_at(&s->plain, 0)) != NULL &&
         (budget > 0 || weft_buf_readable(w->buf) == 0)) {
    weft_buf *b = w->buf;
    size_t n = weft_buf_readable(b);
    if (n > budget)
      n = budget;
    size_t used;
    if (fill == 0 && n >= WEFT__TLS_RECORD_MAX) {
      used = n / WEFT__TLS_RECORD_MAX * WEFT__TLS_RECORD_MAX;
      if (ssl_write(s, weft_buf_rptr(b), used) < 0)
        return s->fail_err;
    } else {
      used = n < WEFT__TLS_RECORD_MAX - fill ? n : WEFT__TLS_RECORD_MAX - fill;
      memcpy(rec + fill, weft_buf_rptr(b), used);
      fill += used;
    }
    b->reader_index += used;
    budget -= used;
    s->plain_bytes -= used;
    if (weft_buf_readable(b) == 0) {
      weft__tls_plain_write done = *w;
      weft__tls_fifo_pop(&s->plain, &done);
      weft_buf_release(done.buf);
      weft__tls_ack a = {.end = fill == 0 ? BIO_number_written(s->wbio)
                                          : WEFT__TLS_NO_END,
                         .promise = done.promise};
      if (weft__tls_fifo_push(&s->acks, &a) < 0) {
        weft_promise_complete(done.promise, WEFT_ENOMEM);
        weft__tls_fail(s, WEFT_ENOMEM, "TLS: no memory for a write's promise");
        return WEFT_ENOMEM;
      }
      s->unset_ends += a.end == WEFT__TLS_NO_END;
    }
    if (fill == WEFT__TLS_RECORD_MAX) {
      if (ssl_write(s, rec, fill) < 0)
        return s->fail_err;
      fill = 0;
    }
  }
  if (fill > 0 && ssl_write(s, rec, fill) < 0)
    return s->fail_err;
  return 0;
}

/* kTLS: plaintext goes down as it is, the kernel makes the records; a
 * write's promise is the transport's, through the same chunk and ack
 * books (offsets go on counting plaintext). At least 64 KiB, or all. */
static void pass_queue(weft__tls_handler *s, bool all) {
  if (!all && s->plain_bytes < CHUNK_MAX)
    return;
  weft__tls_plain_write w;
  while (weft__tls_fifo_pop(&s->plain, &w)) {
    size_t n = weft_buf_readable(w.buf);
    s->plain_bytes -= n;
    s->down += n;
    weft__tls_ack a = {.end = s->down, .promise = w.promise};
    if (weft__tls_fifo_push(&s->chunks, &s->down) < 0 ||
        weft__tls_fifo_push(&s->acks, &a) < 0) {
      weft_buf_release(w.buf);
      weft_promise_complete(w.promise, WEFT_ENOMEM);
      weft__tls_fail(s, WEFT_ENOMEM, "TLS: no memory for a write's promise");
      return;
    }
    weft__tls_hold(s); /* dropped by chunk_done */
    weft_ctx_write(s->ctx, w.buf, (weft_promise){chunk_done, s});
  }
  if (all)
    weft_ctx_flush(s->ctx);
}

/* Encrypts and hands down: whole chunks, or everything with a flush. */
void weft__tls_send_queued(weft__tls_handler *s, bool flush) {
  if (s->ktls_tx) {
    pass_queue(s, flush);
    return;
  }
  if (encrypt_queue(s, flush) < 0)
    return;
  int rc = flush ? weft__tls_push_all(s) : push_down(s, false);
  if (rc < 0)
    weft__tls_fail(s, rc, "TLS: no memory for ciphertext");
  else /* empty writes after bytes already sent */
    weft__tls_complete_acks(s, s->handed, 0);
}

/* ---- failure, close_notify, and what waits for the last bytes ---- */

/* What waited for the last bytes, now that they left (`drained`) or
 * the wait timed out. */
static void run_after(weft__tls_handler *s, bool drained) {
  switch (s->after) {
  case AFTER_FAIL:
    weft__tls_report_failure(s);
    break;
  case AFTER_CLOSE:
    if (s->ktls_tx && drained && weft_channel_is_active(s->ch)) {
      static const uint8_t close_notify[2] = {1, 0}; /* warning, 0 */
      weft_channel_transport(s->ch)->ktls_send_record(s->ch, 21, close_notify,
                                                      2); /* best effort */
    }
    weft__tls_pass_closes_down(s);
    break;
  case AFTER_KTLS:
    s->after = AFTER_NONE;
    weft__tls_ktls_switched(s, weft_channel_is_active(s->ch) &&
                                   weft__tls_ktls_start(s, drained));
    break;
  case AFTER_NONE:
    break;
  }
}

/* Runs `what` once the transport took everything handed down so far, or
 * after WEFT_TLS_CLOSE_NOTIFY_TIMEOUT_MS (a peer that reads nothing). */
static void drain_timeout(void *arg);

void weft__tls_drain_then(weft__tls_handler *s, weft__tls_after what) {
  s->after_target = s->down;
  s->after = what;
  if (s->handed >= s->after_target || !weft_channel_is_active(s->ch)) {
    run_after(s, s->handed >= s->after_target);
    return;
  }
  weft_timer_start(&s->drain_timer,
                   (uint64_t)WEFT_TLS_CLOSE_NOTIFY_TIMEOUT_MS * 1000000u, 0,
                   drain_timeout, s);
}

/* Timers run outside any event: the close they may cause must not free
 * the channel under the pipeline that is still unwinding. */
static void drain_timeout(void *arg) {
  weft__tls_handler *s = arg;
  weft_channel *ch = weft_channel_retain(s->ch);
  s->handed = s->after_target; /* what is left is given up */
  run_after(s, false);
  weft_channel_release(ch);
}

/* Ends the wait for `what` if that is the one running: false if not. */
static bool end_wait(weft__tls_handler *s, weft__tls_after what) {
  if (s->after != what)
    return false;
  s->after = AFTER_NONE;
  weft_timer_stop(&s->drain_timer);
  return true;
}

void weft__tls_cancel_ktls_wait(weft__tls_handler *s) {
  end_wait(s, AFTER_KTLS);
}

/* The close(s) that waited for close_notify (or a failure) go down. */
void weft__tls_pass_closes_down(weft__tls_handler *s) {
  if (s->after == AFTER_CLOSE)
    s->after = AFTER_NONE;
  weft_timer_stop(&s->drain_timer);
  weft__tls_hold(s);
  weft_promise p;
  while (weft__tls_fifo_pop(&s->closers, &p))
    weft_ctx_close(s->ctx, p);
  weft__tls_drop(s);
}

void weft__tls_report_failure(weft__tls_handler *s) {
  if (!end_wait(s, AFTER_FAIL))
    return;
  weft__tls_hold(s);
  if (!s->done)
    weft__tls_fire_event(s, WEFT_TLS_HANDSHAKE_FAILED, s->fail_err, s->reason);
  if (!s->removed)
    weft_ctx_fire_exception_caught(s->ctx, s->fail_err, s->reason);
  /* The tail closed it, unless a handler kept the exception. */
  if (!s->removed && weft_channel_is_active(s->ch))
    weft_ctx_close(s->ctx, WEFT_PROMISE_NONE);
  if (!s->removed)
    weft__tls_pass_closes_down(s);
  weft__tls_drop(s);
}

/* A fatal error: no more TLS on this channel. The alert OpenSSL queued
 * goes out first; then the failure is reported and the channel closed. */
void weft__tls_fail(weft__tls_handler *s, int err, const char *fmt, ...) {
  if (s->failed)
    return;
  s->failed = true;
  s->fail_err = err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->reason, sizeof s->reason, fmt, ap);
  va_end(ap);
  weft_timer_stop(&s->hs_timer);
  weft__tls_hold(s);
  weft__tls_fail_plain(s, err);
  if (weft_channel_is_active(s->ch) && !s->removed)
    weft__tls_push_all(s); /* best effort: the alert */
  if (!s->removed) {
    if (s->after == AFTER_CLOSE)
      weft__tls_pass_closes_down(s);
    weft__tls_drain_then(s, AFTER_FAIL);
  }
  weft__tls_drop(s);
}

/* Sends close_notify; the closes waiting in `closers` go down once it
 * left (drain_then). With kTLS the kernel sends it, once the bytes before
 * it left (run_after). */
void weft__tls_start_close(weft__tls_handler *s) {
  s->closing = true;
  weft__tls_hold(s);
  if (s->ktls_pending) {
    /* Closing before the kernel took over: no switch; writes flushed
     * meanwhile go as user-space records before close_notify. */
    s->ktls_pending = false;
    weft__tls_cancel_ktls_wait(s);
    if (s->flush_wanted) {
      s->flush_wanted = false;
      weft__tls_send_queued(s, true);
    }
  }
  weft__tls_fail_plain(s, WEFT_ECLOSED); /* written, never flushed: channel.h */
  if (!s->ktls_tx) {
    ERR_clear_error();
    SSL_shutdown(s->ssl); /* queues close_notify in wbio */
    ERR_clear_error();
    if (weft__tls_push_all(s) < 0)
      s->handed = s->down; /* give up on it */
  }
  if (!s->removed)
    weft__tls_drain_then(s, AFTER_CLOSE);
  weft__tls_drop(s);
}
