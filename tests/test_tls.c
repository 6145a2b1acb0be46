/* SPDX-License-Identifier: Apache-2.0 */
/* The TLS handler (weft/tls.h), run once per stream transport
 * (WEFT_TEST_TRANSPORT: tcp, uring).
 *
 * Certificates are made at start-up by tests/tls/make-certs.sh (the
 * openssl command) in a temporary directory, removed at the end.
 *
 *  - On embedded channels (a client and a server handler wired back to
 *    back): handshake and data both ways with writes queued before it,
 *    merged records and one buffer per flush, promises that wait for the
 *    transport, flow control, close_notify, the bounds on what a peer may
 *    make the handler hold, a plaintext peer, the options and config keys.
 *  - Over the transport: weft to weft with TLS 1.2 and 1.3 (1 MiB echoed in
 *    random splits, every byte checked, ALPN); openssl s_client against a
 *    weft server and weft against openssl s_server (spawned, scripted);
 *    refused peers (a certificate of the wrong purpose, another CA, an
 *    expired one, the wrong host name, plain text) each with its reason
 *    logged while the server serves another client; close_notify seen by
 *    s_client; a silent client closed by the handshake timeout;
 *    renegotiation refused both ways. */
#include "harness_scale.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <openssl/err.h>

#include <weft/tls.h>
#include <weft/weft.h>

#ifndef WEFT_TLS_MAKE_CERTS
#error "WEFT_TLS_MAKE_CERTS: the path of tests/tls/make-certs.sh"
#endif

/* ---- certificates ---- */

static char certs[64];

static void certs_make(void) {
  snprintf(certs, sizeof certs, "/tmp/weft-tls-XXXXXX");
  char cmd[512];
  if (mkdtemp(certs) == NULL ||
      (snprintf(cmd, sizeof cmd, "%s %s", WEFT_TLS_MAKE_CERTS, certs),
       system(cmd) != 0)) {
    fprintf(stderr, "test_tls: cannot make certificates with %s in %s\n",
            WEFT_TLS_MAKE_CERTS, certs);
    exit(1);
  }
}

static void certs_remove(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", certs);
  if (system(cmd) != 0)
    fprintf(stderr, "test_tls: could not remove %s\n", certs);
}

/* The path of `name` in the certificate directory, into `out`. */
static void cert_path(char *out, size_t len, const char *name) {
  if (name == NULL)
    out[0] = '\0';
  else
    snprintf(out, len, "%s/%s", certs, name);
}

/* ---- contexts ---- */

typedef struct ctx_spec {
  const char *cert, *key, *ca; /* names in the certificate directory */
  weft_tls_verify verify;
  weft_tls_version min, max; /* 0 = the default */
  int timeout_ms;            /* 0 = the default */
  const char *server_name, *alpn;
} ctx_spec;

static weft_tls_context *make_ctx(weft_tls_mode mode, const ctx_spec *sp) {
  weft_tls_options o;
  weft_tls_options_init(&o);
  cert_path(o.cert_file, sizeof o.cert_file, sp->cert);
  cert_path(o.key_file, sizeof o.key_file, sp->key);
  cert_path(o.ca_file, sizeof o.ca_file, sp->ca);
  o.verify = sp->verify;
  if (sp->min)
    o.min_protocol = sp->min;
  if (sp->max)
    o.max_protocol = sp->max;
  if (sp->timeout_ms)
    o.handshake_timeout_ms = sp->timeout_ms;
  if (sp->server_name)
    snprintf(o.server_name, sizeof o.server_name, "%s", sp->server_name);
  if (sp->alpn)
    snprintf(o.alpn, sizeof o.alpn, "%s", sp->alpn);
  weft_tls_context *c;
  char err[256];
  int rc = weft_tls_context_new(&c, mode, &o, err, sizeof err);
  ck_assert_msg(rc == 0, "weft_tls_context_new: %s", err);
  return c;
}

static weft_tls_context *server_ctx(void) {
  return make_ctx(WEFT_TLS_SERVER,
                  &(ctx_spec){.cert = "server.pem", .key = "server.key"});
}

static weft_tls_context *client_ctx(void) {
  return make_ctx(WEFT_TLS_CLIENT,
                  &(ctx_spec){.ca = "ca.pem", .server_name = "localhost"});
}

/* ---- a handler that watches: events, exceptions, plaintext ---- */

#define TEXT_MAX 4096

typedef struct watch {
  atomic_int active, inactive, hs_done, hs_failed, close_notify, exceptions;
  atomic_int last_err;
  /* a reader: pattern checks or the first TEXT_MAX bytes as text */
  bool echo;          /* write back what arrives; "quit" closes */
  bool shared;        /* every server channel's: none kept in ch */
  bool check_pattern; /* compare with pat() */
  size_t send_total;  /* bytes to send after the handshake (client) */
  unsigned seed;      /* of the random splits */
  atomic_size_t received;
  atomic_int mismatch;
  char text[TEXT_MAX + 1];
  atomic_size_t text_len;
  weft_channel *ch; /* retained once active, unless shared */
  char protocol[16];
  char alpn[WEFT_TLS_NAME_MAX];
  atomic_int ktls; /* 1 + info.ktls_tx, noted at the first read */
} watch;

static uint8_t pat(size_t i) { return (uint8_t)((i * 131u) ^ (i >> 9)); }

static unsigned rnd(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return *seed >> 8;
}

static weft_buf *buf_of(weft_channel *ch, const void *p, size_t n) {
  weft_buf *b = weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)), n);
  ck_assert_ptr_nonnull(b);
  weft_buf_write_bytes(b, p, n);
  return b;
}

/* Sends send_total pattern bytes in random pieces, flushing now and then. */
static void send_pattern(weft_ctx *ctx, watch *w) {
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  size_t off = 0;
  while (off < w->send_total) {
    size_t n = 1 + rnd(&w->seed) % 16384;
    if (n > w->send_total - off)
      n = w->send_total - off;
    weft_buf *b = weft_buf_alloc(pool, n);
    ck_assert_ptr_nonnull(b);
    for (size_t i = 0; i < n; i++)
      b->base[i] = pat(off + i);
    b->writer_index = n;
    off += n;
    weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
    if (rnd(&w->seed) % 4 == 0)
      weft_ctx_flush(ctx);
  }
  weft_ctx_flush(ctx);
}

static void w_active(weft_ctx *ctx) {
  watch *w = weft_ctx_state(ctx);
  if (!w->shared)
    w->ch = weft_channel_retain(weft_ctx_channel(ctx));
  atomic_fetch_add(&w->active, 1);
  weft_ctx_fire_channel_active(ctx);
}

static void w_inactive(weft_ctx *ctx) {
  watch *w = weft_ctx_state(ctx);
  atomic_fetch_add(&w->inactive, 1);
  weft_ctx_fire_channel_inactive(ctx);
}

static void w_event(weft_ctx *ctx, void *event) {
  watch *w = weft_ctx_state(ctx);
  /* Not every event is a weft_msg: weft_event_read_resumed is an int. */
  if (event != &weft_event_read_resumed &&
      weft_msg_is(event, &weft_tls_event_type)) {
    weft_tls_event *ev = event;
    if (ev->kind == WEFT_TLS_HANDSHAKE_DONE) {
      weft_tls_info info;
      ck_assert_int_eq(weft_tls_info_get(weft_ctx_channel(ctx), &info), 0);
      snprintf(w->protocol, sizeof w->protocol, "%s", info.protocol);
      snprintf(w->alpn, sizeof w->alpn, "%s", info.alpn);
      atomic_fetch_add(&w->hs_done, 1);
      if (w->send_total > 0)
        send_pattern(ctx, w);
    } else if (ev->kind == WEFT_TLS_HANDSHAKE_FAILED) {
      atomic_store(&w->last_err, ev->status);
      atomic_fetch_add(&w->hs_failed, 1);
    } else if (ev->kind == WEFT_TLS_CLOSE_NOTIFY) {
      atomic_fetch_add(&w->close_notify, 1);
    }
  }
  weft_ctx_fire_user_event(ctx, event);
}

static void w_exception(weft_ctx *ctx, int err, const char *reason) {
  watch *w = weft_ctx_state(ctx);
  atomic_store(&w->last_err, err);
  atomic_fetch_add(&w->exceptions, 1);
  weft_ctx_fire_exception_caught(ctx, err, reason);
}

static void w_read(weft_ctx *ctx, void *msg) {
  watch *w = weft_ctx_state(ctx);
  weft_buf *b = msg;
  size_t n = weft_buf_readable(b);
  weft_tls_info info;
  if (atomic_load(&w->ktls) == 0 &&
      weft_tls_info_get(weft_ctx_channel(ctx), &info) == 0)
    atomic_store(&w->ktls, 1 + info.ktls_tx);
  if (w->echo) {
    if (n >= 4 && memcmp(weft_buf_rptr(b), "quit", 4) == 0) {
      weft_buf_release(b);
      weft_ctx_close(ctx, WEFT_PROMISE_NONE);
      return;
    }
    weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
    return;
  }
  size_t had = atomic_load(&w->received);
  if (w->check_pattern)
    for (size_t i = 0; i < n; i++)
      if (weft_buf_rptr(b)[i] != pat(had + i))
        atomic_store(&w->mismatch, 1);
  size_t tl = atomic_load(&w->text_len);
  size_t k = n < TEXT_MAX - tl ? n : TEXT_MAX - tl;
  memcpy(w->text + tl, weft_buf_rptr(b), k);
  atomic_store(&w->text_len, tl + k);
  atomic_store(&w->received, had + n);
  weft_buf_release(b);
}

static void w_read_complete(weft_ctx *ctx) {
  watch *w = weft_ctx_state(ctx);
  if (w->echo)
    weft_ctx_flush(ctx);
  weft_ctx_fire_channel_read_complete(ctx);
}

static const weft_handler watch_handler = {.name = "watch",
                                           .channel_active = w_active,
                                           .channel_inactive = w_inactive,
                                           .user_event = w_event,
                                           .exception_caught = w_exception,
                                           .channel_read = w_read,
                                           .channel_read_complete =
                                               w_read_complete};

/* The embedded tests keep what reaches the tail: a watch there passes
 * plaintext on instead of taking it. */
static void w_pass(weft_ctx *ctx, void *msg) {
  weft_ctx_fire_channel_read(ctx, msg);
}

static const weft_handler pass_handler = {.name = "watch",
                                          .channel_active = w_active,
                                          .channel_inactive = w_inactive,
                                          .user_event = w_event,
                                          .exception_caught = w_exception,
                                          .channel_read = w_pass};

static void watch_free(watch *w) {
  if (w->ch != NULL)
    weft_channel_release(w->ch);
  w->ch = NULL;
}

/* ---- embedded pairs: a client and a server handler back to back ---- */

typedef struct side_init {
  weft_tls_context *ctx;
  const char *server_name;
  watch *w;
} side_init;

static void side_init_cb(weft_channel *ch, void *arg) {
  side_init *si = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_tls_add_first(p, si->ctx, si->server_name), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "watch", &pass_handler, si->w), 0);
}

/* The client is made first, so the server's loop is the current one
 * (embedded loops nest): the server gets its bytes with
 * weft_embedded_write_inbound (which runs its tasks), the client through
 * its pipeline. */
typedef struct pair {
  weft_embedded *cli, *srv;
  watch cw, sw;
} pair;

static void pair_new(pair *p, weft_tls_context *cctx, weft_tls_context *sctx) {
  memset(p, 0, sizeof *p);
  side_init ci = {.ctx = cctx, .w = &p->cw};
  side_init si = {.ctx = sctx, .w = &p->sw};
  ck_assert_int_eq(weft_embedded_new(&p->cli, side_init_cb, &ci), 0);
  ck_assert_int_eq(weft_embedded_new(&p->srv, side_init_cb, &si), 0);
}

static weft_channel *cli_ch(pair *p) { return weft_embedded_channel(p->cli); }
static weft_channel *srv_ch(pair *p) { return weft_embedded_channel(p->srv); }

static void feed_client(pair *p, weft_buf *b) {
  weft_channel *ch = cli_ch(p);
  if (!weft_channel_is_active(ch)) {
    weft_buf_release(b);
    return;
  }
  weft_pipeline_fire_channel_read(weft_channel_pipeline(ch), b);
  if (weft_channel_is_active(ch))
    weft_pipeline_fire_channel_read_complete(weft_channel_pipeline(ch));
}

/* One hop: what one side sent reaches the other's pipeline (the client's
 * to the server when `to_server`); returns the bytes moved. */
static size_t hop(pair *p, bool to_server) {
  size_t moved = 0;
  weft_buf *b;
  while ((b = weft_embedded_read_outbound(to_server ? p->cli : p->srv)) !=
         NULL) {
    moved += weft_buf_readable(b);
    if (to_server)
      weft_embedded_write_inbound(p->srv, b);
    else
      feed_client(p, b);
  }
  return moved;
}

/* Moves what each side sent to the other until both are quiet; returns
 * the bytes moved. */
static size_t pair_pump(pair *p) {
  size_t total = 0, moved;
  do {
    moved = hop(p, true);
    moved += hop(p, false);
    total += moved;
  } while (moved > 0);
  return total;
}

/* A pair with the default contexts (the handlers hold them), after the
 * handshake when `handshake`. */
static void pair_std(pair *p, bool handshake) {
  weft_tls_context *c = client_ctx(), *s = server_ctx();
  pair_new(p, c, s);
  weft_tls_context_release(c);
  weft_tls_context_release(s);
  if (handshake) {
    pair_pump(p);
    ck_assert_int_eq(atomic_load(&p->cw.hs_done), 1);
  }
}

/* A buffer of `n` bytes `byte` from `pool`. */
static weft_buf *filled(weft_pool *pool, size_t n, int byte) {
  weft_buf *b = weft_buf_alloc(pool, n);
  ck_assert_ptr_nonnull(b);
  memset(b->base, byte, n);
  b->writer_index = n;
  return b;
}

static void pair_free(pair *p) {
  watch_free(&p->sw);
  watch_free(&p->cw);
  ck_assert_uint_eq(weft_embedded_free(p->srv), 0); /* the current loop */
  ck_assert_uint_eq(weft_embedded_free(p->cli), 0);
}

/* Every plaintext byte that reached the server's tail, appended. */
static size_t drain_inbound(weft_embedded *e, char *out, size_t cap) {
  size_t n = 0;
  weft_buf *b;
  while ((b = weft_embedded_read_inbound(e)) != NULL) {
    size_t k = weft_buf_readable(b);
    if (out != NULL && n + k <= cap)
      memcpy(out + n, weft_buf_rptr(b), k);
    n += k;
    weft_buf_release(b);
  }
  return n;
}

static size_t outbound_count(weft_embedded *e, size_t *bytes, pair *to) {
  size_t n = 0;
  *bytes = 0;
  weft_buf *b;
  while ((b = weft_embedded_read_outbound(e)) != NULL) {
    n++;
    *bytes += weft_buf_readable(b);
    if (to != NULL)
      weft_embedded_write_inbound(to->srv, b);
    else
      weft_buf_release(b);
  }
  return n;
}

static void count_promise(void *arg, int status) {
  int *n = arg;
  if (status == 0)
    (*n)++;
  else
    *n = -1000;
}

START_TEST(embedded_handshake_and_data) {
  for (int v = WEFT_TLS_1_2; v <= WEFT_TLS_1_3; v++) {
    weft_tls_context *c =
        make_ctx(WEFT_TLS_CLIENT, &(ctx_spec){.ca = "ca.pem",
                                              .server_name = "localhost",
                                              .max = (weft_tls_version)v});
    weft_tls_context *s = server_ctx();
    pair p;
    pair_new(&p, c, s);
    weft_tls_context_release(c); /* the handlers hold their own */
    weft_tls_context_release(s);
    /* Written and flushed before the handshake: queued, sent after. */
    int done = 0;
    weft_channel_write_and_flush(cli_ch(&p), buf_of(cli_ch(&p), "early ", 6),
                                 (weft_promise){count_promise, &done});
    weft_channel_write(cli_ch(&p), buf_of(cli_ch(&p), "bird", 4),
                       (weft_promise){count_promise, &done});
    ck_assert_int_eq(done, 0);
    pair_pump(&p);
    ck_assert_int_eq(atomic_load(&p.cw.hs_done), 1);
    ck_assert_int_eq(atomic_load(&p.sw.hs_done), 1);
    ck_assert_str_eq(p.cw.protocol, v == WEFT_TLS_1_3 ? "TLSv1.3" : "TLSv1.2");
    ck_assert_int_eq(done, 2);
    char got[64] = "";
    ck_assert_uint_eq(drain_inbound(p.srv, got, sizeof got), 10);
    ck_assert(memcmp(got, "early bird", 10) == 0);
    weft_tls_info info;
    ck_assert_int_eq(weft_tls_info_get(cli_ch(&p), &info), 0);
    ck_assert(info.handshake_done);
    ck_assert_str_eq(info.peer_subject, "CN=localhost");
    ck_assert(!info.ktls_tx && !info.ktls_rx);
    /* The server answers. */
    weft_channel_write_and_flush(srv_ch(&p), buf_of(srv_ch(&p), "worm", 4),
                                 WEFT_PROMISE_NONE);
    pair_pump(&p);
    weft_buf *b = weft_embedded_read_inbound(p.cli);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(weft_buf_readable(b), 4);
    ck_assert(memcmp(weft_buf_rptr(b), "worm", 4) == 0);
    weft_buf_release(b);
    ck_assert_int_eq(weft_embedded_exception(p.srv, 0), 0);
    pair_free(&p);
  }
}
END_TEST

START_TEST(embedded_stale_error_queue) {
  /* An error another library (or another channel) left on this thread's
   * OpenSSL queue must not read as this channel's failure: SSL_get_error
   * consults the queue after each WANT_READ, so it must be empty first. */
  pair p;
  pair_std(&p, false);
  ERR_raise(ERR_LIB_USER, 1); /* stale, before the handshake's steps */
  pair_pump(&p);
  ck_assert_int_eq(atomic_load(&p.cw.hs_done), 1);
  ck_assert_int_eq(atomic_load(&p.sw.hs_done), 1);
  /* A record in two parts: the first part's SSL_read answers WANT_READ. */
  weft_channel_write_and_flush(cli_ch(&p), buf_of(cli_ch(&p), "ping", 4),
                               WEFT_PROMISE_NONE);
  weft_buf *rec = weft_embedded_read_outbound(p.cli);
  ck_assert_ptr_nonnull(rec);
  ck_assert_ptr_null(weft_embedded_read_outbound(p.cli));
  size_t n = weft_buf_readable(rec);
  ck_assert_uint_gt(n, 8);
  ERR_raise(ERR_LIB_USER, 2);
  weft_embedded_write_inbound(p.srv,
                              buf_of(srv_ch(&p), weft_buf_rptr(rec), n / 2));
  ck_assert(weft_channel_is_active(srv_ch(&p)));
  weft_embedded_write_inbound(
      p.srv, buf_of(srv_ch(&p), weft_buf_rptr(rec) + n / 2, n - n / 2));
  weft_buf_release(rec);
  char got[16] = "";
  ck_assert_uint_eq(drain_inbound(p.srv, got, sizeof got), 4);
  ck_assert(memcmp(got, "ping", 4) == 0);
  ck_assert_int_eq(weft_embedded_exception(p.srv, 0), 0);
  ck_assert_int_eq(weft_embedded_exception(p.cli, 0), 0);
  ERR_clear_error();
  pair_free(&p);
}
END_TEST

START_TEST(embedded_small_record_read_in_place) {
  /* A small record that arrives while the channel reads, with nothing
   * else held, is decrypted from the buffer it came in: one allocation
   * (the plaintext), not a copy into a buffer of ours first. While the
   * channel does not read, small ones are still copied (held memory:
   * embedded_held_ciphertext_memory). */
  pair p;
  pair_std(&p, true);
  weft_channel_write_and_flush(cli_ch(&p), buf_of(cli_ch(&p), "ping", 4),
                               WEFT_PROMISE_NONE);
  weft_buf *rec = weft_embedded_read_outbound(p.cli);
  ck_assert_ptr_nonnull(rec);
  weft_buf *in = buf_of(srv_ch(&p), weft_buf_rptr(rec), weft_buf_readable(rec));
  weft_buf_release(rec);
  weft_pool_stats before, after;
  weft_pool_stats_get(weft_embedded_pool(p.srv), &before);
  weft_embedded_write_inbound(p.srv, in);
  weft_pool_stats_get(weft_embedded_pool(p.srv), &after);
  ck_assert_uint_eq(after.allocs - before.allocs, 1);
  char got[16] = "";
  ck_assert_uint_eq(drain_inbound(p.srv, got, sizeof got), 4);
  ck_assert(memcmp(got, "ping", 4) == 0);
  pair_free(&p);
}
END_TEST

START_TEST(embedded_batching_and_promises) {
  pair p;
  pair_std(&p, true);
  /* 100 small writes, one flush: one record, one buffer down. */
  int done = 0;
  char msg[100];
  memset(msg, 'x', sizeof msg);
  for (int i = 0; i < 100; i++)
    weft_channel_write(cli_ch(&p), buf_of(cli_ch(&p), msg, sizeof msg),
                       (weft_promise){count_promise, &done});
  ck_assert_int_eq(done, 0);
  weft_channel_flush(cli_ch(&p));
  ck_assert_int_eq(done, 100);
  size_t bytes;
  ck_assert_uint_eq(outbound_count(p.cli, &bytes, &p), 1);
  ck_assert_uint_lt(bytes, 100 * 100 + 64); /* one record's overhead */
  ck_assert_uint_eq(drain_inbound(p.srv, NULL, 0), 100 * 100);
  /* A promise completes when the transport took the bytes, not before. */
  weft_embedded_set_write_limit(p.cli, 0);
  done = 0;
  weft_channel_write_and_flush(cli_ch(&p), buf_of(cli_ch(&p), msg, 10),
                               (weft_promise){count_promise, &done});
  ck_assert_int_eq(done, 0);
  weft_embedded_set_write_limit(p.cli, SIZE_MAX);
  ck_assert_int_eq(done, 1);
  outbound_count(p.cli, &bytes, &p);
  ck_assert_uint_eq(drain_inbound(p.srv, NULL, 0), 10);
  /* 300 KiB: full records, buffers of 64 KiB, the fewest that hold it. */
  size_t big = 300 * 1024;
  weft_buf *b = filled(weft_embedded_pool(p.cli), big, 'y');
  done = 0;
  weft_channel_write(cli_ch(&p), b, (weft_promise){count_promise, &done});
  /* Whole chunks go down before the flush: the watermarks see them. */
  ck_assert_uint_ge(weft_channel_pending_bytes(cli_ch(&p)), 4 * 65536);
  weft_channel_flush(cli_ch(&p));
  ck_assert_int_eq(done, 1);
  size_t n = outbound_count(p.cli, &bytes, &p);
  ck_assert_uint_eq(n, (bytes + 65535) / 65536);
  ck_assert_uint_lt(bytes, big + 19 * 64);
  ck_assert_uint_eq(drain_inbound(p.srv, NULL, 0), big);
  pair_free(&p);
}
END_TEST

START_TEST(embedded_flow_control) {
  pair p;
  pair_std(&p, true);
  weft_channel *sch = srv_ch(&p);
  ck_assert_int_eq(weft_channel_set_option(sch, WEFT_OPT_AUTO_READ, 0), 0);
  ck_assert(!weft_channel_is_reading(sch));
  size_t total = 50 * 1024;
  weft_buf *b = filled(weft_embedded_pool(p.cli), total, 'z');
  weft_channel_write_and_flush(cli_ch(&p), b, WEFT_PROMISE_NONE);
  pair_pump(&p);
  /* Paused: no plaintext delivered, the ciphertext waits. */
  ck_assert_uint_eq(drain_inbound(p.srv, NULL, 0), 0);
  ck_assert_int_eq(weft_channel_set_option(sch, WEFT_OPT_AUTO_READ, 1), 0);
  weft_embedded_run_pending(p.srv); /* the resume task, then the event */
  ck_assert_uint_eq(drain_inbound(p.srv, NULL, 0), total);
  pair_free(&p);
}
END_TEST

START_TEST(embedded_close_notify) {
  pair p;
  pair_std(&p, true);
  int closed = 0, unflushed = 0;
  weft_channel_write(cli_ch(&p), buf_of(cli_ch(&p), "lost", 4),
                     (weft_promise){count_promise, &unflushed});
  weft_channel_close(cli_ch(&p), (weft_promise){count_promise, &closed});
  ck_assert_int_eq(closed, 1);    /* close_notify went, then the close */
  ck_assert_int_lt(unflushed, 0); /* written, never flushed: ECLOSED */
  ck_assert_int_eq(weft_channel_state_of(cli_ch(&p)), WEFT_CHANNEL_CLOSED);
  /* The server reads it, says so, and closes too. */
  pair_pump(&p);
  ck_assert_int_eq(atomic_load(&p.sw.close_notify), 1);
  ck_assert_int_eq(weft_channel_state_of(srv_ch(&p)), WEFT_CHANNEL_CLOSED);
  ck_assert_int_eq(weft_embedded_exception(p.srv, 0), 0);
  pair_free(&p);
}
END_TEST

START_TEST(embedded_alpn_refused) {
  th_log_capture_start();
  weft_tls_context *c = make_ctx(
      WEFT_TLS_CLIENT,
      &(ctx_spec){.ca = "ca.pem", .server_name = "localhost", .alpn = "h2"});
  weft_tls_context *s = make_ctx(
      WEFT_TLS_SERVER,
      &(ctx_spec){.cert = "server.pem", .key = "server.key", .alpn = "weft/1"});
  pair p;
  pair_new(&p, c, s);
  pair_pump(&p);
  ck_assert_int_eq(weft_embedded_exception(p.srv, 0), WEFT_EPROTO);
  ck_assert_int_eq(atomic_load(&p.cw.hs_failed), 1);
  ck_assert_int_eq(th_log_count("no application protocol"), 2); /* both */
  pair_free(&p);
  weft_tls_context_release(c);
  weft_tls_context_release(s);
}
END_TEST

static void watch_only_init(weft_channel *ch, void *arg) {
  th_add_last(ch, "watch", &pass_handler, arg);
}

/* STARTTLS: plaintext first, then TLS added to both active channels. */
START_TEST(embedded_starttls) {
  weft_tls_context *c = client_ctx(), *s = server_ctx();
  pair p;
  memset(&p, 0, sizeof p);
  ck_assert_int_eq(weft_embedded_new(&p.cli, watch_only_init, &p.cw), 0);
  ck_assert_int_eq(weft_embedded_new(&p.srv, watch_only_init, &p.sw), 0);
  weft_channel_write_and_flush(cli_ch(&p), buf_of(cli_ch(&p), "STARTTLS", 8),
                               WEFT_PROMISE_NONE);
  pair_pump(&p);
  char got[16];
  ck_assert_uint_eq(drain_inbound(p.srv, got, sizeof got), 8);
  ck_assert_int_eq(
      weft_tls_add_first(weft_channel_pipeline(srv_ch(&p)), s, NULL), 0);
  ck_assert_int_eq(
      weft_tls_add_first(weft_channel_pipeline(cli_ch(&p)), c, NULL), 0);
  weft_channel_write_and_flush(cli_ch(&p), buf_of(cli_ch(&p), "secret", 6),
                               WEFT_PROMISE_NONE);
  pair_pump(&p);
  ck_assert_int_eq(atomic_load(&p.cw.hs_done), 1);
  ck_assert_int_eq(atomic_load(&p.sw.hs_done), 1);
  ck_assert_uint_eq(drain_inbound(p.srv, got, sizeof got), 6);
  ck_assert(memcmp(got, "secret", 6) == 0);
  pair_free(&p);
  weft_tls_context_release(c);
  weft_tls_context_release(s);
}
END_TEST

/* Feeds `e` (the current embedded channel) with `make(i, buf)` pieces
 * until it closes; returns the bytes it took. */
static size_t feed_until_closed(weft_embedded *e, size_t limit,
                                size_t (*make)(size_t i, uint8_t *out)) {
  static uint8_t piece[16384 + 5];
  size_t fed = 0;
  for (size_t i = 0; fed < limit; i++) {
    size_t n = make(i, piece);
    if (weft_embedded_write_inbound_bytes(e, piece, n) != 0)
      break;
    fed += n;
    if (!weft_channel_is_active(weft_embedded_channel(e)))
      break;
  }
  return fed;
}

/* A ClientHello that claims `hello_len` bytes, then records of it. */
static size_t hello_len;

static size_t long_hello(size_t i, uint8_t *out) {
  out[0] = 22, out[1] = 3, out[2] = 1, out[3] = 0x40, out[4] = 0;
  memset(out + 5, 0x41, 16384);
  if (i == 0) {
    out[5] = 1; /* client_hello */
    out[6] = (uint8_t)(hello_len >> 16);
    out[7] = (uint8_t)(hello_len >> 8);
    out[8] = (uint8_t)hello_len;
  }
  return 16384 + 5;
}

/* Ciphertext held while reading is paused costs about its own bytes in
 * pool memory, not a pool block per received segment: a peer trickling
 * small segments (each in a large receive buffer) pins nothing more. */
START_TEST(embedded_held_ciphertext_memory) {
  pair p;
  pair_std(&p, true);
  ck_assert_int_eq(weft_channel_set_option(srv_ch(&p), WEFT_OPT_AUTO_READ, 0),
                   0);
  size_t total = 256 * 1024;
  weft_channel_write_and_flush(cli_ch(&p),
                               filled(weft_embedded_pool(p.cli), total, 'm'),
                               WEFT_PROMISE_NONE);
  weft_pool *pool = weft_embedded_pool(p.srv);
  weft_pool_stats before, after;
  weft_pool_stats_get(pool, &before);
  size_t fed = 0, seg = 3000;
  weft_buf *b;
  while ((b = weft_embedded_read_outbound(p.cli)) != NULL) {
    for (size_t off = 0; off < weft_buf_readable(b); off += seg) {
      size_t n =
          weft_buf_readable(b) - off < seg ? weft_buf_readable(b) - off : seg;
      weft_buf *s = weft_buf_alloc(pool, WEFT_POOL_MAX_CLASS); /* 64 KiB */
      memcpy(weft_buf_wptr(s), weft_buf_rptr(b) + off, n);
      s->writer_index = n;
      weft_embedded_write_inbound(p.srv, s);
      fed += n;
    }
    weft_buf_release(b);
  }
  ck_assert_uint_gt(fed, total);
  weft_pool_stats_get(pool, &after);
  /* Held in buffers of 16 KiB, filled one after the other: ~17, not ~90
   * blocks of 64 KiB. */
  ck_assert_uint_le(after.live - before.live, fed / 16384 + 2);
  ck_assert_int_eq(weft_channel_set_option(srv_ch(&p), WEFT_OPT_AUTO_READ, 1),
                   0);
  weft_embedded_run_pending(p.srv); /* the resume task, then the event */
  ck_assert_uint_eq(drain_inbound(p.srv, NULL, 0), total);
  pair_free(&p);
}
END_TEST

START_TEST(embedded_bounds) {
  th_log_capture_start();
  weft_tls_context *c = client_ctx(), *s = server_ctx();
  /* A handshake that goes on and on is refused long before megabytes:
   * a message that claims 16 MiB at once, one that claims 128 KiB (the
   * most a ClientHello may take) once it is complete, and nothing ever
   * past WEFT_TLS_MAX_HANDSHAKE_BYTES. */
  pair p;
  size_t claims[] = {0xffffff, 0x01ff00};
  for (size_t k = 0; k < 2; k++) {
    pair_new(&p, c, s);
    hello_len = claims[k];
    size_t fed = feed_until_closed(p.srv, 8u << 20, long_hello);
    ck_assert_uint_le(fed, k == 0 ? 16389 : 0x01ff00 + 2 * 16389);
    ck_assert(!weft_channel_is_active(srv_ch(&p)));
    ck_assert_int_eq(weft_embedded_exception(p.srv, 0), WEFT_EPROTO);
    pair_free(&p);
  }
  ck_assert_int_eq(th_log_count("TLS handshake failed: excessive message "
                                "size"),
                   1);
  /* Ciphertext held while reading is paused is bounded. */
  pair_new(&p, c, s);
  pair_pump(&p);
  ck_assert_int_eq(weft_channel_set_option(srv_ch(&p), WEFT_OPT_AUTO_READ, 0),
                   0);
  size_t total = 2u << 20;
  weft_buf *b = filled(weft_embedded_pool(p.cli), total, 'q');
  weft_channel_write_and_flush(cli_ch(&p), b, WEFT_PROMISE_NONE);
  pair_pump(&p);
  ck_assert_int_eq(weft_embedded_exception(p.srv, 0), WEFT_ENOBUFS);
  ck_assert_int_eq(th_log_count("ciphertext unread while the channel does "
                                "not read"),
                   1);
  pair_free(&p);
  weft_tls_context_release(c);
  weft_tls_context_release(s);
}
END_TEST

START_TEST(embedded_plaintext_peer) {
  pair p;
  pair_std(&p, false);
  th_log_capture_start();
  weft_embedded_write_inbound_bytes(p.srv, "PING\r\n", 6);
  ck_assert_int_eq(weft_embedded_exception(p.srv, 0), WEFT_EPROTO);
  ck_assert_int_eq(atomic_load(&p.sw.hs_failed), 1);
  ck_assert_int_eq(th_log_count("TLS handshake failed: wrong version number "
                                "(is the peer speaking plain text?)"),
                   1);
  ck_assert(!weft_channel_is_active(srv_ch(&p)));
  pair_free(&p);
}
END_TEST

/* ---- options, config keys, context errors ---- */

static int tls_section(void *arg, const char *section, const char *key,
                       const char *value, char *err, size_t len) {
  if (strcmp(section, "tls") != 0)
    return WEFT_ENOENT;
  return weft_tls_options_set(arg, key, value, err, len);
}

START_TEST(options_and_config) {
  weft_tls_options o;
  weft_tls_options_init(&o);
  ck_assert_int_eq(o.min_protocol, WEFT_TLS_1_2);
  ck_assert_int_eq(o.max_protocol, WEFT_TLS_1_3);
  ck_assert_int_eq(o.handshake_timeout_ms, 10000);
  char err[256];
  ck_assert_int_eq(weft_tls_options_set(&o, "verify", "optional", err, 256), 0);
  ck_assert_int_eq(o.verify, WEFT_TLS_VERIFY_OPTIONAL);
  ck_assert_int_eq(weft_tls_options_set(&o, "verify", "maybe", err, 256),
                   WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "none, optional or required"));
  ck_assert_int_eq(weft_tls_options_set(&o, "min_protocol", "tls1.3", err, 256),
                   0);
  ck_assert_int_eq(o.min_protocol, WEFT_TLS_1_3);
  ck_assert_int_eq(weft_tls_options_set(&o, "min_protocol", "ssl3", err, 256),
                   WEFT_EINVAL);
  ck_assert_int_eq(weft_tls_options_set(&o, "alpn", "h2, http/1.1", err, 256),
                   0);
  ck_assert_int_eq(weft_tls_options_set(&o, "alpn", "h2,,x", err, 256),
                   WEFT_EINVAL);
  ck_assert_int_eq(
      weft_tls_options_set(&o, "handshake_timeout_ms", "-1", err, 256),
      WEFT_EINVAL);
  ck_assert_int_eq(weft_tls_options_set(&o, "ktls", "on", err, 256), 0);
  ck_assert(o.ktls);
  ck_assert_int_eq(weft_tls_options_set(&o, "nope", "1", err, 256),
                   WEFT_ENOENT);
  /* Every key of the table is one the setter knows. */
  size_t n = 0;
  for (const weft_config_key *k = weft_tls_config_keys; k->section; k++, n++) {
    weft_tls_options t;
    weft_tls_options_init(&t);
    ck_assert_str_eq(k->section, "tls");
    ck_assert_int_eq(weft_tls_options_set(&t, k->name, k->def, err, 256), 0);
  }
  ck_assert_uint_eq(n, WEFT_TLS_CONFIG_KEY_COUNT);
  weft_config_key copy[WEFT_TLS_CONFIG_KEY_COUNT + 1];
  ck_assert_int_eq(weft_tls_config_keys_copy(copy, 3, "srv.tls"), WEFT_ENOSPC);
  ck_assert_int_eq(
      weft_tls_config_keys_copy(copy, WEFT_TLS_CONFIG_KEY_COUNT + 1, "srv.tls"),
      WEFT_TLS_CONFIG_KEY_COUNT);
  ck_assert_str_eq(copy[0].section, "srv.tls");
  ck_assert_ptr_null(copy[WEFT_TLS_CONFIG_KEY_COUNT].section);
  /* Through a config file and the program's section callback. */
  char ini[128];
  snprintf(ini, sizeof ini, "%s/weft.ini", certs);
  FILE *f = fopen(ini, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f,
          "[tls]\ncert_file = %s/server.pem\nkey_file = %s/server.key\n"
          "verify = required\nca_file = %s/ca.pem\n"
          "handshake_timeout_ms = 500\n",
          certs, certs, certs);
  fclose(f);
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.app_keys = weft_tls_config_keys;
  weft_tls_options_init(&o);
  ck_assert_int_eq(weft_config_load(&cfg, ini, tls_section, &o, err, 256), 0);
  ck_assert_int_eq(o.verify, WEFT_TLS_VERIFY_REQUIRED);
  ck_assert_int_eq(o.handshake_timeout_ms, 500);
  weft_tls_context *c;
  ck_assert_int_eq(weft_tls_context_new(&c, WEFT_TLS_SERVER, &o, err, 256), 0);
  ck_assert_int_eq(weft_tls_context_mode(c), WEFT_TLS_SERVER);
  weft_tls_context_release(c);
  f = fopen(ini, "w");
  fprintf(f, "[tls]\nverify = sometimes\n");
  fclose(f);
  ck_assert_int_eq(weft_config_load(&cfg, ini, tls_section, &o, err, 256),
                   WEFT_EBADCONF);
  ck_assert_ptr_nonnull(strstr(err, "none, optional or required"));
}
END_TEST

START_TEST(context_errors) {
  weft_tls_options o;
  char err[256];
  weft_tls_context *c = NULL;
  weft_tls_options_init(&o);
  ck_assert_int_eq(weft_tls_context_new(&c, WEFT_TLS_SERVER, &o, err, 256),
                   WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "needs cert_file"));
  cert_path(o.cert_file, sizeof o.cert_file, "missing.pem");
  ck_assert_int_eq(weft_tls_context_new(&c, WEFT_TLS_SERVER, &o, err, 256),
                   WEFT_EINVAL);
  ck_assert_msg(strstr(err, "missing.pem") != NULL &&
                    strstr(err, ": No such file or directory") != NULL &&
                    strstr(err, "system library") == NULL,
                "%s", err);
  cert_path(o.cert_file, sizeof o.cert_file, "server.pem");
  cert_path(o.key_file, sizeof o.key_file, "client.key");
  ck_assert_int_eq(weft_tls_context_new(&c, WEFT_TLS_SERVER, &o, err, 256),
                   WEFT_EINVAL);
  ck_assert_msg(strstr(err, "do not match") != NULL, "%s", err);
  cert_path(o.key_file, sizeof o.key_file, "server.key");
  o.verify = WEFT_TLS_VERIFY_REQUIRED;
  ck_assert_int_eq(weft_tls_context_new(&c, WEFT_TLS_SERVER, &o, err, 256),
                   WEFT_EINVAL);
  ck_assert_ptr_nonnull(strstr(err, "needs ca_file"));
  o.verify = WEFT_TLS_VERIFY_NONE;
  o.min_protocol = WEFT_TLS_1_3;
  o.max_protocol = WEFT_TLS_1_2;
  ck_assert_int_eq(weft_tls_context_new(&c, WEFT_TLS_SERVER, &o, err, 256),
                   WEFT_EINVAL);
  /* A client that must check the name but has none is refused per
   * channel. */
  weft_tls_options_init(&o);
  ck_assert_int_eq(weft_tls_context_new(&c, WEFT_TLS_CLIENT, &o, err, 256), 0);
  weft_embedded *e;
  ck_assert_int_eq(weft_embedded_new(&e, NULL, NULL), 0);
  th_log_capture_start();
  ck_assert_int_eq(
      weft_tls_add_first(weft_channel_pipeline(weft_embedded_channel(e)), c,
                         NULL),
      WEFT_EINVAL);
  ck_assert_int_eq(th_log_count("needs a server name"), 1);
  ck_assert_int_eq(
      weft_tls_add_first(weft_channel_pipeline(weft_embedded_channel(e)), c,
                         "localhost"),
      0);
  ck_assert_int_eq(
      weft_tls_add_first(weft_channel_pipeline(weft_embedded_channel(e)), c,
                         "localhost"),
      WEFT_EEXIST);
  weft_tls_context_release(c);
  ck_assert_uint_eq(weft_embedded_free(e), 0);
}
END_TEST

/* ---- over the transport ---- */

/* A weft TLS echo server; "quit" closes the channel. */
typedef struct net {
  weft_loop_group *servers, *clients;
  weft_server *srv;
  weft_tls_context *sctx;
  watch sw; /* every server channel counts here */
  char uri[128];
  int port;
} net;

static void server_init_echo(weft_channel *ch, void *arg) {
  net *n = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_tls_add_first(p, n->sctx, NULL), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "watch", &watch_handler, &n->sw),
                   0);
}

static void net_start(net *n, weft_tls_context *sctx) {
  memset(n, 0, sizeof *n);
  n->sctx = sctx;
  n->sw.echo = true;
  n->sw.shared = true;
  n->servers = th_group_start(NULL, th_suite_loops());
  n->clients = th_group_start(NULL, 1);
  char listen[96];
  snprintf(listen, sizeof listen, "%s://127.0.0.1:0", th_transport_name());
  n->srv = th_server_bind(n->servers, listen, server_init_echo, n, n->uri,
                          sizeof n->uri);
  const char *colon = strrchr(n->uri, ':');
  ck_assert_ptr_nonnull(colon);
  n->port = atoi(colon + 1);
}

static void net_stop(net *n) {
  weft_loop_group_stop(n->clients);
  ck_assert_int_eq(weft_loop_group_join(n->clients), 0);
  weft_loop_group_free(n->clients);
  weft_server_close(n->srv);
  weft_loop_group_stop(n->servers);
  ck_assert_int_eq(weft_loop_group_join(n->servers), 0);
  weft_loop_group_free(n->servers);
  weft_tls_context_release(n->sctx);
}

typedef struct client {
  weft_tls_context *ctx;
  const char *server_name;
  watch w;
} client;

static void client_init(weft_channel *ch, void *arg) {
  client *c = arg;
  weft_pipeline *p = weft_channel_pipeline(ch);
  ck_assert_int_eq(weft_tls_add_first(p, c->ctx, c->server_name), 0);
  ck_assert_int_eq(weft_pipeline_add_last(p, "watch", &watch_handler, &c->w),
                   0);
}

static void client_connect(weft_loop_group *g, const char *uri, client *c) {
  weft_bootstrap b = th_bootstrap(g, NULL, uri, client_init, c);
  ck_assert_int_eq(weft_bootstrap_connect(&b), 0);
}

static void close_task(void *arg) {
  weft_channel *ch = arg;
  weft_channel_close(ch, WEFT_PROMISE_NONE);
  weft_channel_release(ch);
}

/* Closes a client's channel from its loop and waits until it is gone. */
static void client_close(client *c) {
  if (c->w.ch == NULL)
    return;
  weft_channel *ch = c->w.ch;
  c->w.ch = NULL;
  ck_assert_int_eq(weft_loop_execute(weft_channel_loop(ch), close_task, ch), 0);
  WAIT_FOR(atomic_load(&c->w.inactive) == 1);
}

typedef struct send_req {
  weft_channel *ch;
  char text[64];
} send_req;

static void send_task(void *arg) {
  send_req *r = arg;
  weft_channel_write_and_flush(r->ch, buf_of(r->ch, r->text, strlen(r->text)),
                               WEFT_PROMISE_NONE);
  weft_channel_release(r->ch);
  free(r);
}

/* Writes `text` on a client's channel, from its loop. */
static void client_send(client *c, const char *text) {
  send_req *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  ck_assert_ptr_nonnull(c->w.ch);
  r->ch = weft_channel_retain(c->w.ch);
  snprintf(r->text, sizeof r->text, "%s", text);
  ck_assert_int_eq(weft_loop_execute(weft_channel_loop(r->ch), send_task, r),
                   0);
}

/* A client that connected first still gets its echo. */
static void assert_still_served(client *good) {
  size_t had = atomic_load(&good->w.received);
  client_send(good, "ping\n");
  WAIT_FOR(atomic_load(&good->w.received) == had + 5);
}

static void echo_test(weft_tls_version v) {
  net n;
  net_start(&n, server_ctx());
  client c = {
      .ctx = make_ctx(WEFT_TLS_CLIENT, &(ctx_spec){.ca = "ca.pem",
                                                   .server_name = "localhost",
                                                   .max = v,
                                                   .alpn = "x-other,weft/1"})};
  c.w.check_pattern = true;
  c.w.send_total = 1u << 20;
  c.w.seed = 42 + (unsigned)v;
  weft_tls_context_release(n.sctx);
  n.sctx = make_ctx(WEFT_TLS_SERVER, &(ctx_spec){.cert = "server.pem",
                                                 .key = "server.key",
                                                 .alpn = "weft/1,h2"});
  client_connect(n.clients, n.uri, &c);
  WAIT_FOR(atomic_load(&c.w.received) == c.w.send_total ||
           atomic_load(&c.w.inactive) > 0);
  ck_assert_uint_eq(atomic_load(&c.w.received), c.w.send_total);
  ck_assert_int_eq(atomic_load(&c.w.mismatch), 0);
  ck_assert_str_eq(c.w.protocol, v == WEFT_TLS_1_3 ? "TLSv1.3" : "TLSv1.2");
  ck_assert_str_eq(c.w.alpn, "weft/1");
  ck_assert_int_eq(atomic_load(&n.sw.exceptions), 0);
  client_close(&c);
  /* The client's close_notify reached the server, which closed too. */
  WAIT_FOR(atomic_load(&n.sw.inactive) == 1);
  ck_assert_int_eq(atomic_load(&n.sw.close_notify), 1);
  net_stop(&n);
  weft_tls_context_release(c.ctx);
}

START_TEST(echo_tls12) { echo_test(WEFT_TLS_1_2); }
END_TEST

START_TEST(echo_tls13) { echo_test(WEFT_TLS_1_3); }
END_TEST

/* ---- spawned openssl processes ---- */

typedef struct proc {
  pid_t pid;
  int in, out;
  char *buf;
  size_t len, cap;
} proc;

static void proc_start(proc *p, char *const argv[]) {
  int in[2], out[2];
  ck_assert_int_eq(pipe(in), 0);
  ck_assert_int_eq(pipe(out), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(in[1]);
    close(out[0]);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  *p = (proc){.pid = pid, .in = in[1], .out = out[0]};
  p->cap = 1 << 20;
  p->buf = malloc(p->cap + 1);
  ck_assert_ptr_nonnull(p->buf);
  p->buf[0] = '\0';
}

/* Reads the output until `needle` shows up (true) or `ms` pass. */
static bool proc_wait_for(proc *p, const char *needle, int ms) {
  uint64_t end = th_now_ms() + (uint64_t)ms;
  while (strstr(p->buf, needle) == NULL) {
    uint64_t now = th_now_ms();
    if (now >= end)
      return false;
    struct pollfd pfd = {.fd = p->out, .events = POLLIN};
    if (poll(&pfd, 1, (int)(end - now)) <= 0)
      continue;
    ssize_t n = read(p->out, p->buf + p->len, p->cap - p->len);
    if (n <= 0) {
      if (n == 0 || (errno != EAGAIN && errno != EINTR))
        return strstr(p->buf, needle) != NULL; /* it ended */
      continue;
    }
    p->len += (size_t)n;
    p->buf[p->len] = '\0';
    if (p->len == p->cap)
      p->len = 0; /* keep going; old output is not needed */
  }
  return true;
}

static void proc_write(proc *p, const char *s) {
  th_write_all(p->in, s, strlen(s));
}

/* Closes its stdin, waits up to `ms` for it to exit, then kills it. */
static void proc_end(proc *p, int ms) {
  if (p->in >= 0)
    close(p->in);
  p->in = -1;
  uint64_t end = th_now_ms() + (uint64_t)ms;
  int status;
  while (waitpid(p->pid, &status, WNOHANG) == 0) {
    if (th_now_ms() >= end) {
      kill(p->pid, SIGKILL);
      waitpid(p->pid, &status, 0);
      break;
    }
    proc_wait_for(p, "\x01never\x01", 10);
  }
  close(p->out);
  free(p->buf);
}

static bool stream_transport(void) {
  /* openssl and raw sockets speak TCP: both transports here are TCP. */
  return strcmp(th_transport_name(), "tcp") == 0 ||
         strcmp(th_transport_name(), "uring") == 0;
}

/* kTLS can run here: the kernel has the tls upper layer protocol, and
 * the suite's transport is tcp (the one with ktls_tx). */
static bool ktls_expected(void) {
  char ulp[256] = "";
  FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "r");
  if (f != NULL) {
    if (fgets(ulp, sizeof ulp, f) == NULL)
      ulp[0] = '\0';
    fclose(f);
  }
  return strstr(ulp, "tls") != NULL && strcmp(th_transport_name(), "tcp") == 0;
}

/* The kTLS outcome of a session: encrypted by the kernel where it can,
 * else user-space records and one line that says why. */
static void assert_ktls_outcome(watch *w) {
  WAIT_FOR(atomic_load(&w->ktls) != 0);
  if (ktls_expected()) {
    ck_assert_msg(atomic_load(&w->ktls) == 2,
                  "the kernel has kTLS, yet the records are user space's: %s",
                  th_log_text());
  } else {
    ck_assert_int_eq(atomic_load(&w->ktls), 1);
    ck_assert_int_eq(th_log_count("TLS: ktls = on, but "), 1);
  }
}

static weft_tls_context *ktls_ctx(weft_tls_mode mode) {
  weft_tls_options o;
  weft_tls_options_init(&o);
  if (mode == WEFT_TLS_SERVER) {
    cert_path(o.cert_file, sizeof o.cert_file, "server.pem");
    cert_path(o.key_file, sizeof o.key_file, "server.key");
  } else {
    cert_path(o.ca_file, sizeof o.ca_file, "ca.pem");
    snprintf(o.server_name, sizeof o.server_name, "localhost");
  }
  char err[256];
  ck_assert_int_eq(weft_tls_options_set(&o, "ktls", "on", err, sizeof err), 0);
  weft_tls_context *c;
  ck_assert_int_eq(weft_tls_context_new(&c, mode, &o, err, sizeof err), 0);
  return c;
}

/* kTLS waits for the handshake's last flight to leave before the kernel
 * takes over. A kTLS server has none (it sends no session tickets), but a
 * client does (its Finished): a server that never reads it must not let
 * the client's writes pile up without end. Past WEFT__TLS_KTLS_WAIT_MAX
 * (1 MiB) kTLS is given up and the writes go as user-space records, where
 * the channel's write limits count them. */
START_TEST(embedded_ktls_wait_is_bounded) {
  weft_tls_context *c = ktls_ctx(WEFT_TLS_CLIENT), *s = server_ctx();
  pair p;
  pair_new(&p, c, s);
  weft_tls_context_release(c);
  weft_tls_context_release(s);
  hop(&p, true);                           /* ClientHello */
  weft_embedded_set_write_limit(p.cli, 0); /* nothing leaves the client */
  hop(&p, false); /* the server's flight; the client finishes */
  ck_assert_int_eq(atomic_load(&p.cw.hs_done), 1);
  th_log_capture_start();
  enum { CHUNK = 16384, CHUNKS = 80 }; /* 1.25 MiB */
  for (int i = 0; i < CHUNKS; i++)
    weft_channel_write_and_flush(cli_ch(&p),
                                 filled(weft_embedded_pool(p.cli), CHUNK, 'r'),
                                 WEFT_PROMISE_NONE);
  th_log_capture_stop();
  ck_assert_int_eq(th_log_count("kTLS: the handshake's last flight has not "
                                "left"),
                   1);
  /* The records wait in the channel's queue, where the watermarks see
   * them: the channel is unwritable. */
  ck_assert(!weft_channel_is_writable(cli_ch(&p)));
  weft_embedded_set_write_limit(p.cli, SIZE_MAX);
  pair_pump(&p);
  ck_assert_uint_eq(drain_inbound(p.srv, NULL, 0), (size_t)CHUNK * CHUNKS);
  pair_free(&p);
}
END_TEST

/* s_client against a weft server (with kTLS when `ktls`): echo, then the
 * server closes and s_client sees its close_notify. */
static void s_client_session(bool ktls) {
  TH_SKIP_UNLESS(stream_transport());
  th_log_capture_start();
  net n;
  net_start(&n, ktls ? ktls_ctx(WEFT_TLS_SERVER) : server_ctx());
  char connect[64], ca[600];
  snprintf(connect, sizeof connect, "127.0.0.1:%d", n.port);
  cert_path(ca, sizeof ca, "ca.pem");
  char *argv[] = {"openssl",     "s_client",  "-connect",
                  connect,       "-CAfile",   ca,
                  "-servername", "localhost", "-verify_return_error",
                  "-msg",        NULL};
  proc p;
  proc_start(&p, argv);
  ck_assert_msg(proc_wait_for(&p, "Verify return code: 0 (ok)", 10000), "%s",
                p.buf);
  proc_write(&p, "hello from s_client\n");
  ck_assert_msg(proc_wait_for(&p, "\nhello from s_client\n", 10000), "%s",
                p.buf);
  proc_write(&p, "quit\n");
  ck_assert_msg(proc_wait_for(&p,
                              "<<< TLS 1.3, Alert [length 0002], warning "
                              "close_notify",
                              10000),
                "%s", p.buf);
  proc_end(&p, 5000);
  WAIT_FOR(atomic_load(&n.sw.inactive) == 1);
  ck_assert_int_eq(atomic_load(&n.sw.exceptions), 0);
  if (ktls)
    assert_ktls_outcome(&n.sw);
  else
    ck_assert_int_eq(atomic_load(&n.sw.ktls), 1);
  net_stop(&n);
}

START_TEST(s_client_to_weft) { s_client_session(false); }
END_TEST

START_TEST(s_client_to_ktls_weft) { s_client_session(true); }
END_TEST

/* weft to weft with ktls = on at both ends: 1 MiB echoed, every byte
 * checked, close_notify from the kernel (or not: see assert_ktls_outcome). */
START_TEST(ktls_echo) {
  th_log_capture_start();
  net n;
  net_start(&n, ktls_ctx(WEFT_TLS_SERVER));
  client c = {.ctx = ktls_ctx(WEFT_TLS_CLIENT)};
  c.w.check_pattern = true;
  c.w.send_total = 1u << 20;
  c.w.seed = 7;
  client_connect(n.clients, n.uri, &c);
  WAIT_FOR(atomic_load(&c.w.received) == c.w.send_total ||
           atomic_load(&c.w.inactive) > 0);
  ck_assert_uint_eq(atomic_load(&c.w.received), c.w.send_total);
  ck_assert_int_eq(atomic_load(&c.w.mismatch), 0);
  ck_assert_str_eq(c.w.protocol, "TLSv1.3");
  assert_ktls_outcome(&c.w);
  assert_ktls_outcome(&n.sw);
  client_close(&c);
  WAIT_FOR(atomic_load(&n.sw.inactive) == 1);
  ck_assert_int_eq(atomic_load(&n.sw.close_notify), 1);
  ck_assert_int_eq(atomic_load(&n.sw.exceptions), 0);
  net_stop(&n);
  weft_tls_context_release(c.ctx);
}
END_TEST

static int free_port(void) {
  uint16_t port;
  close(th_bind_loopback(&port));
  return port;
}

/* openssl s_server on a free port with `extra` arguments; waits until it
 * accepts. */
static int s_server_start(proc *p, const char *const *extra) {
  int port = free_port();
  char accept[32], cert[600], key[600];
  snprintf(accept, sizeof accept, "127.0.0.1:%d", port);
  cert_path(cert, sizeof cert, "server.pem");
  cert_path(key, sizeof key, "server.key");
  char *argv[24] = {"openssl", "s_server", "-accept", accept,     "-cert",
                    cert,      "-key",     key,       "-naccept", "1"};
  int i = 10;
  for (; *extra != NULL && i < 23; extra++)
    argv[i++] = (char *)*extra;
  argv[i] = NULL;
  proc_start(p, argv);
  ck_assert_msg(proc_wait_for(p, "ACCEPT", 10000), "%s", p->buf);
  return port;
}

START_TEST(weft_to_s_server) {
  TH_SKIP_UNLESS(stream_transport());
  proc p;
  int port = s_server_start(&p, (const char *const[]){"-rev", NULL});
  weft_loop_group *g = th_group_start(NULL, 1);
  client c = {.ctx = client_ctx()};
  char uri[96];
  snprintf(uri, sizeof uri, "%s://127.0.0.1:%d", th_transport_name(), port);
  client_connect(g, uri, &c);
  WAIT_FOR(atomic_load(&c.w.hs_done) == 1);
  client_send(&c, "ping\n");
  WAIT_FOR(atomic_load(&c.w.text_len) >= 5);
  ck_assert(memcmp(c.w.text, "gnip\n", 5) == 0);
  /* s_server -rev ends the session on CLOSE with close_notify: the weft
   * client sees it and closes. */
  client_send(&c, "CLOSE\n");
  WAIT_FOR(atomic_load(&c.w.inactive) == 1);
  ck_assert_int_eq(atomic_load(&c.w.close_notify), 1);
  ck_assert_int_eq(atomic_load(&c.w.exceptions), 0);
  proc_end(&p, 5000);
  watch_free(&c.w);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
  weft_tls_context_release(c.ctx);
}
END_TEST

/* ---- refused peers ---- */

/* A server that wants client certificates of the test CA. */
static weft_tls_context *mtls_server_ctx(void) {
  return make_ctx(WEFT_TLS_SERVER,
                  &(ctx_spec){.cert = "server.pem",
                              .key = "server.key",
                              .ca = "ca.pem",
                              .verify = WEFT_TLS_VERIFY_REQUIRED});
}

static weft_tls_context *cert_client_ctx(const char *cert, const char *key) {
  return make_ctx(WEFT_TLS_CLIENT, &(ctx_spec){.cert = cert,
                                               .key = key,
                                               .ca = "ca.pem",
                                               .server_name = "localhost"});
}

/* A good client, connected and served first. */
static void good_client_start(net *n, client *good, const char *cert,
                              const char *key) {
  memset(good, 0, sizeof *good);
  good->ctx = cert != NULL ? cert_client_ctx(cert, key) : client_ctx();
  client_connect(n->clients, n->uri, good);
  WAIT_FOR(atomic_load(&good->w.hs_done) == 1);
  assert_still_served(good);
}

static void good_client_end(client *good) {
  client_close(good);
  watch_free(&good->w);
  weft_tls_context_release(good->ctx);
}

/* A weft client with `ctx` (taken) connects and is refused: the server
 * logs `reason` (when `server_side`), else the client does; the good
 * client is served on. */
static void expect_refused(net *n, client *good, weft_tls_context *ctx,
                           const char *server_name, const char *reason,
                           bool server_side) {
  int failed_before =
      atomic_load(&n->sw.hs_failed) + atomic_load(&n->sw.exceptions);
  client bad = {.ctx = ctx, .server_name = server_name};
  client_connect(n->clients, n->uri, &bad);
  WAIT_FOR(atomic_load(&bad.w.inactive) == 1);
  WAIT_FOR(th_log_count(reason) == 1);
  if (server_side)
    WAIT_FOR(atomic_load(&n->sw.hs_failed) + atomic_load(&n->sw.exceptions) >
             failed_before);
  else
    ck_assert_int_gt(atomic_load(&bad.w.exceptions), 0);
  assert_still_served(good);
  watch_free(&bad.w);
  weft_tls_context_release(bad.ctx);
}

/* A server that wants client certificates refuses `cert` (NULL: none)
 * with `reason` logged, while it serves a good client. */
static void server_refuses(const char *cert, const char *key,
                           const char *reason) {
  th_log_capture_start();
  net n;
  net_start(&n, mtls_server_ctx());
  client good;
  good_client_start(&n, &good, "client.pem", "client.key");
  expect_refused(&n, &good,
                 cert != NULL ? cert_client_ctx(cert, key) : client_ctx(), NULL,
                 reason, true);
  good_client_end(&good);
  net_stop(&n);
}

/* A server certificate is no client certificate. */
START_TEST(refuse_wrong_purpose) {
  server_refuses("server.pem", "server.key",
                 "TLS handshake failed: certificate verify failed: "
                 "unsuitable certificate purpose (peer certificate: "
                 "CN=localhost, depth 0)");
}
END_TEST

START_TEST(refuse_no_certificate) {
  server_refuses(NULL, NULL,
                 "TLS handshake failed: peer did not return a certificate");
}
END_TEST

START_TEST(refuse_other_ca) {
  server_refuses("rogue-client.pem", "rogue-client.key",
                 "TLS handshake failed: certificate verify failed: unable to "
                 "get local issuer certificate (peer certificate: CN=weft "
                 "test client, depth 0)");
}
END_TEST

START_TEST(refuse_expired) {
  server_refuses("expired.pem", "expired.key",
                 "TLS handshake failed: certificate verify failed: "
                 "certificate has expired (peer certificate: CN=weft "
                 "expired, depth 0)");
}
END_TEST

/* A server presenting `cert`: a client of the test CA refuses it with
 * `reason`, while a client that does not check still gets served. */
static void client_refuses(const char *cert, const char *key,
                           const char *server_name, const char *reason) {
  th_log_capture_start();
  net n;
  net_start(&n,
            make_ctx(WEFT_TLS_SERVER, &(ctx_spec){.cert = cert, .key = key}));
  client good = {.ctx = make_ctx(WEFT_TLS_CLIENT,
                                 &(ctx_spec){.verify = WEFT_TLS_VERIFY_NONE})};
  client_connect(n.clients, n.uri, &good);
  WAIT_FOR(atomic_load(&good.w.hs_done) == 1);
  assert_still_served(&good);
  expect_refused(&n, &good, client_ctx(), server_name, reason, false);
  good_client_end(&good);
  net_stop(&n);
}

START_TEST(client_refuses_expired) {
  client_refuses("expired.pem", "expired.key", NULL,
                 "TLS handshake failed: certificate verify failed: "
                 "certificate has expired (peer certificate: CN=weft "
                 "expired, depth 0)");
}
END_TEST

START_TEST(client_refuses_other_ca) {
  client_refuses("rogue.pem", "rogue.key", NULL,
                 "TLS handshake failed: certificate verify failed: unable to "
                 "get local issuer certificate (peer certificate: "
                 "CN=localhost, depth 0)");
}
END_TEST

START_TEST(client_refuses_wrong_name) {
  client_refuses("server.pem", "server.key", "wrong.example",
                 "TLS handshake failed: certificate verify failed: hostname "
                 "mismatch (peer certificate: CN=localhost, depth 0)");
}
END_TEST

/* Reads until EOF (0) or error; returns the bytes read. */
static ssize_t read_to_eof(int fd, char *buf, size_t cap) {
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, cap - n);
    if (r <= 0)
      return r == 0 ? (ssize_t)n : -1;
    n += (size_t)r;
    if (n == cap)
      n = 0;
  }
}

START_TEST(refuse_plaintext) {
  TH_SKIP_UNLESS(stream_transport());
  th_log_capture_start();
  net n;
  net_start(&n, server_ctx());
  client good;
  good_client_start(&n, &good, NULL, NULL);
  int fd = th_raw_connect((uint16_t)n.port);
  th_write_all(fd, "PING\r\n", 6);
  char buf[256];
  ck_assert_int_ge(read_to_eof(fd, buf, sizeof buf), 0); /* closed */
  close(fd);
  WAIT_FOR(th_log_count("TLS handshake failed: wrong version number (is "
                        "the peer speaking plain text?)") == 1);
  assert_still_served(&good);
  good_client_end(&good);
  net_stop(&n);
}
END_TEST

START_TEST(handshake_timeout) {
  TH_SKIP_UNLESS(stream_transport());
  th_log_capture_start();
  net n;
  net_start(&n, make_ctx(WEFT_TLS_SERVER, &(ctx_spec){.cert = "server.pem",
                                                      .key = "server.key",
                                                      .timeout_ms = 300}));
  uint64_t t0 = th_now_ms();
  int fd = th_raw_connect((uint16_t)n.port);
  char buf[64];
  ck_assert_int_ge(read_to_eof(fd, buf, sizeof buf), 0); /* closed */
  close(fd);
  ck_assert_uint_ge(th_now_ms() - t0, 290);
  WAIT_FOR(th_log_count("TLS handshake timed out after 300 ms") == 1);
  WAIT_FOR(atomic_load(&n.sw.inactive) == 1);
  ck_assert_int_eq(atomic_load(&n.sw.hs_failed), 1);
  ck_assert_int_eq(atomic_load(&n.sw.last_err), WEFT_ETIMEDOUT);
  net_stop(&n);
}
END_TEST

START_TEST(renegotiation_refused) {
  TH_SKIP_UNLESS(stream_transport());
  th_log_capture_start();
  /* A client asks (s_client's R command, TLS 1.2). */
  net n;
  net_start(&n, server_ctx());
  char connect[64], ca[600];
  snprintf(connect, sizeof connect, "127.0.0.1:%d", n.port);
  cert_path(ca, sizeof ca, "ca.pem");
  char *argv[] = {
      "openssl", "s_client",    "-connect",  connect,   "-CAfile",
      ca,        "-servername", "localhost", "-tls1_2", "-verify_return_error",
      NULL};
  proc p;
  proc_start(&p, argv);
  ck_assert_msg(proc_wait_for(&p, "Verify return code: 0 (ok)", 10000), "%s",
                p.buf);
  proc_write(&p, "R\n");
  WAIT_FOR(th_log_count("TLS renegotiation refused") == 1);
  WAIT_FOR(atomic_load(&n.sw.inactive) == 1);
  proc_end(&p, 5000);
  net_stop(&n);
  /* A server asks (s_server's r command): the weft client refuses. */
  int port = s_server_start(&p, (const char *const[]){"-tls1_2", NULL});
  weft_loop_group *g = th_group_start(NULL, 1);
  client c = {.ctx = client_ctx()};
  char uri[96];
  snprintf(uri, sizeof uri, "%s://127.0.0.1:%d", th_transport_name(), port);
  client_connect(g, uri, &c);
  WAIT_FOR(atomic_load(&c.w.hs_done) == 1);
  ck_assert_msg(proc_wait_for(&p, "Secure Renegotiation", 10000), "%s", p.buf);
  proc_write(&p, "r\n");
  WAIT_FOR(th_log_count("TLS renegotiation refused") == 2);
  WAIT_FOR(atomic_load(&c.w.inactive) == 1);
  proc_end(&p, 5000);
  watch_free(&c.w);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
  weft_tls_context_release(c.ctx);
}
END_TEST

Suite *weft_test_suite(void) {
  th_require_transport();
  Suite *s = suite_create("tls");
  TCase *emb = th_add_case(
      s, "embedded", 0, embedded_handshake_and_data, embedded_stale_error_queue,
      embedded_small_record_read_in_place, embedded_batching_and_promises,
      embedded_flow_control, embedded_close_notify, embedded_bounds,
      embedded_held_ciphertext_memory, embedded_plaintext_peer,
      embedded_alpn_refused, embedded_starttls, embedded_ktls_wait_is_bounded,
      options_and_config, context_errors, NULL);
  tcase_add_unchecked_fixture(emb, certs_make, certs_remove);
  TCase *tc_net = th_add_case(
      s, "network", 120, echo_tls12, echo_tls13, s_client_to_weft,
      s_client_to_ktls_weft, ktls_echo, weft_to_s_server, refuse_wrong_purpose,
      refuse_no_certificate, refuse_other_ca, refuse_expired,
      client_refuses_expired, client_refuses_other_ca,
      client_refuses_wrong_name, refuse_plaintext, handshake_timeout,
      renegotiation_refused, NULL);
  tcase_add_unchecked_fixture(tc_net, certs_make, certs_remove);
  return s;
}
