/* SPDX-License-Identifier: Apache-2.0 */
/* The TLS handler's private parts shared by its files: the context
 * (tls_context.c), the per-channel engine (tls_handler.c), and what
 * OpenSSL's callbacks note about one connection. */
#ifndef WEFT_HANDLERS_TLS_INTERNAL_H
#define WEFT_HANDLERS_TLS_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/loop.h>
#include <weft/timer.h>
#include <weft/tls.h>

struct weft_tls_context {
  _Atomic int refs;
  weft_tls_mode mode;
  weft_tls_verify verify; /* resolved: never DEFAULT */
  SSL_CTX *ssl_ctx;
  int handshake_timeout_ms;
  bool ktls;
  char server_name[WEFT_TLS_NAME_MAX];
  unsigned char alpn[WEFT_TLS_NAME_MAX]; /* wire format: length-prefixed */
  size_t alpn_len;
};

/* What OpenSSL's callbacks note about one connection, found through the
 * SSL's app data. */
typedef struct weft__tls_note {
  int verify_err;   /* the first X509_V_ERR_* the chain check met, or 0 */
  int verify_depth; /* of the certificate it failed on */
  char verify_subject[WEFT_TLS_NAME_MAX]; /* that certificate's subject */
  unsigned char secret[2][48]; /* kTLS: the client's, the server's first
                                  application traffic secret (key log) */
  size_t secret_len[2];
  bool reneg_refused; /* OpenSSL answered a renegotiation request with
                         no_renegotiation */
} weft__tls_note;

/** Binds `note` to `ssl` for the callbacks the context installed. */
void weft__tls_note_bind(SSL *ssl, weft__tls_note *note);

/**
 * Writes why a TLS operation failed into `buf`: "<what>: <OpenSSL's
 * reason>" and a hint where one helps (the verification error and the
 * peer certificate's subject; plain text; an alert from the peer). Takes
 * the errors from this thread's OpenSSL error queue (and empties it);
 * `ssl_err` is SSL_get_error's answer. Returns the weft error to report.
 */
int weft__tls_failure(char *buf, size_t len, const char *what, SSL *ssl,
                      int ssl_err, const weft__tls_note *note);

/** Formats `name` as "CN=localhost,O=..." (RFC 2253) into `buf`. */
void weft__tls_name(char *buf, size_t len, X509_NAME *name);

/* ---- the per-channel engine (tls_handler.c, tls_output.c) ---- */

#define WEFT__TLS_RECORD_MAX 16384u /* plaintext bytes in a TLS record */
/* kTLS: plaintext bytes that may wait for the switch to the kernel (the
 * handshake's last flight leaving). A peer that does not read that flight
 * while our side keeps writing would grow the wait without end; past this
 * the switch is given up and records are made in user space, where the
 * channel's write limits see them. 1 MiB: an application commonly writes
 * its first message in the same loop turn as the handshake completes,
 * before the flight has left (test_tls's ktls_echo writes 69 KiB; a bound
 * of 64 KiB gave up kTLS there in the Soft-RoCE VM). */
#define WEFT__TLS_KTLS_WAIT_MAX (1024u * 1024u)
#define WEFT__TLS_NO_END UINT64_MAX /* an ack whose record is not written */

/* A small FIFO of fixed-size elements (`elem` bytes each). `cap` is 0 or
 * a power of two, so a slot is found with a mask: these run several times
 * per record (the plaintext queue, acks, chunks, the BIOs' buffers), and
 * a `%` by a variable is a division each time (~1,000 instructions per
 * 16 B round trip, both ends, under callgrind). */
typedef struct weft__tls_fifo {
  unsigned char *slots;
  size_t elem, cap, head, len;
} weft__tls_fifo;

/** Appends a copy of `e`; returns 0 or WEFT_ENOMEM. */
int weft__tls_fifo_push(weft__tls_fifo *f, const void *e);
/** The i-th element from the front, or NULL. */
static inline void *weft__tls_fifo_at(const weft__tls_fifo *f, size_t i) {
  return i < f->len ? f->slots + ((f->head + i) & (f->cap - 1)) * f->elem
                    : NULL;
}
/** Takes the front element into `out`; false when empty. */
static inline bool weft__tls_fifo_pop(weft__tls_fifo *f, void *out) {
  if (f->len == 0)
    return false;
  memcpy(out, f->slots + f->head * f->elem, f->elem);
  f->head = (f->head + 1) & (f->cap - 1);
  f->len--;
  return true;
}

/* Plaintext waiting for encryption. */
typedef struct weft__tls_plain_write {
  weft_buf *buf;
  weft_promise promise;
} weft__tls_plain_write;

/* An encrypted write waiting for the transport. */
typedef struct weft__tls_ack {
  uint64_t end; /* wbio offset past its last record */
  weft_promise promise;
} weft__tls_ack;

/* What waits for our last bytes to leave. */
typedef enum weft__tls_after {
  AFTER_NONE,
  AFTER_CLOSE, /* close_notify: then pass the close down */
  AFTER_FAIL,  /* a fatal alert: then report the failure and close */
  AFTER_KTLS   /* the handshake's last flight: then hand TX to the kernel */
} weft__tls_after;

/* One channel's TLS handler. Reference-counted on the loop thread (see
 * tls_handler.c). */
typedef struct weft__tls_handler {
  weft__tls_note note; /* OpenSSL's callbacks write here */
  weft_tls_context *tctx;
  weft_ctx *ctx;
  weft_channel *ch;
  SSL *ssl;
  BIO *rbio, *wbio; /* owned by ssl */
  int refs;
  int depth;         /* inbound processing on the stack */
  bool removed;      /* handler_removed ran */
  bool started;      /* the handshake began */
  bool done;         /* the handshake completed */
  bool failed;       /* a fatal error: no more TLS */
  bool flush_wanted; /* a flush came before the handshake completed */
  bool fired;        /* plaintext passed on since the last read_complete */
  bool closing;      /* close_notify sent: inbound is dropped */
  bool peer_closed;  /* the peer's close_notify came */
  bool ktls_pending; /* kTLS: waiting for the last flight to leave */
  bool ktls_tx;      /* kTLS: the kernel makes our records */
  weft__tls_after after;
  uint64_t after_target; /* the wbio offset `after` waits for */
  int fail_err;
  size_t hs_bytes;      /* ciphertext received before the handshake ended */
  size_t plain_bytes;   /* readable bytes in `plain` */
  uint64_t down;        /* offset of the bytes handed down (wbio's, then
                           plaintext's with kTLS) */
  uint64_t handed;      /* offset the transport took */
  size_t unset_ends;    /* acks at the back of `acks` ending WEFT__TLS_NO_END */
  weft__tls_fifo plain; /* weft__tls_plain_write */
  weft__tls_fifo acks;  /* weft__tls_ack */
  weft__tls_fifo chunks;  /* uint64_t: wbio offset past each chunk in flight */
  weft__tls_fifo closers; /* weft_promise: closes waiting for close_notify */
  weft_timer hs_timer, drain_timer;
  char reason[400];
} weft__tls_handler;

/** Takes a reference to the state (loop thread, like all below). */
static inline void weft__tls_hold(weft__tls_handler *s) { s->refs++; }
/** Drops one; false when that freed the state: touch nothing then. */
bool weft__tls_drop(weft__tls_handler *s);
/** The pool of the channel's loop. */
static inline weft_pool *weft__tls_pool(weft__tls_handler *s) {
  return weft_loop_pool(weft_channel_loop(s->ch));
}
/** Fires a weft_tls_event towards the tail (unless removed). */
void weft__tls_fire_event(weft__tls_handler *s, weft_tls_event_kind kind,
                          int status, const char *reason);

/* tls_output.c: plaintext in, ciphertext down, failures and closes. */

/** Completes the acks up to wbio offset `upto` with `status`. */
void weft__tls_complete_acks(weft__tls_handler *s, uint64_t upto, int status);
/** Fails the plaintext not yet encrypted with `err`. */
void weft__tls_fail_plain(weft__tls_handler *s, int err);
/** Hands everything in wbio down and flushes. Returns 0 or WEFT_ENOMEM. */
int weft__tls_push_all(weft__tls_handler *s);
/** Encrypts queued plaintext and hands it down: whole chunks, or all of
 *  it and a flush with `flush`. Failures are reported (weft__tls_fail). */
void weft__tls_send_queued(weft__tls_handler *s, bool flush);
/** A fatal error: the alert OpenSSL queued goes out, then the failure is
 *  reported (event, exception) and the channel closed. */
void weft__tls_fail(weft__tls_handler *s, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/** Sends close_notify; the closes in `closers` go down once it left. */
void weft__tls_start_close(weft__tls_handler *s);
/** Passes the closes waiting in `closers` down. */
void weft__tls_pass_closes_down(weft__tls_handler *s);
/** Reports a failure that waited for its alert to leave. */
void weft__tls_report_failure(weft__tls_handler *s);
/** Sets `after` to `what`, run once everything handed down left (or
 *  after WEFT_TLS_CLOSE_NOTIFY_TIMEOUT_MS): at once if it has. */
void weft__tls_drain_then(weft__tls_handler *s, weft__tls_after what);

/* tls_bio.c: the engine's BIOs over weft_bufs (no memory BIO copies). */

/** A BIO for `s`'s engine (read or write side), or NULL without memory.
 *  BIO_ctrl_pending answers the bytes it holds; BIO_reset drops them. */
BIO *weft__tls_bio_new(weft__tls_handler *s);
/** Read side: appends received ciphertext; takes `b` (kept, or copied and
 *  released when small, unless `read_now`: the caller decrypts at once and
 *  nothing else is held). Returns 0 or WEFT_ENOMEM (`b` released). */
int weft__tls_bio_put(BIO *bio, weft_buf *b, bool read_now);
/** Write side: the oldest buffer of records, owned by the caller: only a
 *  full one unless `partial`. NULL when there is none. */
weft_buf *weft__tls_bio_take(BIO *bio, bool partial);
/** The bytes `bio` (one of ours) holds: BIO_ctrl_pending without the BIO
 *  layer's ctrl dispatch, asked several times per record. */
size_t weft__tls_bio_pending(BIO *bio);

/**
 * Empties this thread's OpenSSL error queue before an SSL call whose
 * failure SSL_get_error will read (it must start empty). ERR_clear_error
 * always walks the queue's 16 slots (32 frees of NULL): it was ~8% of the
 * CPU TLS adds to a 16 B round trip. The queue is nearly always empty, and
 * peeking at it is one thread-local lookup.
 */
static inline void weft__tls_clear_errors(void) {
  if (ERR_peek_error() != 0)
    ERR_clear_error();
}

/* kTLS (tls_ktls.c, tls_handler.c). */

/** The key log callback: notes the application traffic secrets. */
void weft__tls_keylog_cb(const SSL *ssl, const char *line);
/** Hands record encryption to the kernel (TLS 1.3, a transport with
 *  ktls_tx) once everything handed down left (`drained`); false, after
 *  logging why once per process, when it cannot. Wipes the secrets. */
bool weft__tls_ktls_start(weft__tls_handler *s, bool drained);
/** The switch is over (`on`: the kernel encrypts): queued writes go. */
void weft__tls_ktls_switched(weft__tls_handler *s, bool on);
/** kTLS: stops waiting for the last flight to leave (no switch follows). */
void weft__tls_cancel_ktls_wait(weft__tls_handler *s);

#endif
