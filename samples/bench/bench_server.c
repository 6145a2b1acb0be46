/* SPDX-License-Identifier: Apache-2.0 */
/* bench_server.c: weft-bench's weft server. Every connection starts with
 * the client's 16 B hello, which says what to do until EOF: echo every
 * byte (SRV_ECHO), count bytes and answer one byte per unit (SRV_SINK), or
 * close at once (SRV_CLOSE). The server is a handler on the session's
 * server loop, behind the TLS handler in a +tls setup; the raw server
 * that answers the same hello is raw_server.c. bench_session.c starts
 * both. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

typedef struct srv_conn {
  uint8_t hdr[sizeof(hello)];
  size_t hlen;
  hello h;
  uint64_t count, acked;
} srv_conn;

/* Writes `n` zero bytes (the sink's acknowledgements). A buffer the pool
 * cannot give closes the channel with a reason on stderr: an ack left out
 * would leave the client waiting for it until its run times out. */
static void send_zeros(weft_ctx *ctx, uint64_t n) {
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  while (n > 0) {
    size_t k = n > BENCH_CHUNK ? BENCH_CHUNK : (size_t)n;
    weft_buf *b = weft_buf_alloc(pool, k);
    if (b == NULL) {
      fprintf(stderr,
              "weft-bench server: no buffer for %zu bytes of "
              "acknowledgement: closing the channel\n",
              k);
      weft_ctx_close(ctx, WEFT_PROMISE_NONE);
      return;
    }
    memset(weft_buf_wptr(b), 0, k);
    b->writer_index += k;
    weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
    n -= k;
  }
}

/* Takes hello bytes from `b`; returns 1 when the hello is complete and
 * valid, 0 when more is needed, -1 when it is not a hello. */
static int srv_take_hello(srv_conn *s, weft_buf *b) {
  size_t n = sizeof s->hdr - s->hlen;
  if (n > weft_buf_readable(b))
    n = weft_buf_readable(b);
  weft_buf_read_bytes(b, s->hdr + s->hlen, n);
  s->hlen += n;
  if (s->hlen < sizeof s->hdr)
    return 0;
  memcpy(&s->h, s->hdr, sizeof s->h);
  if (s->h.magic != BENCH_HELLO_MAGIC || s->h.mode < SRV_ECHO ||
      s->h.mode > SRV_CLOSE || (s->h.mode == SRV_SINK && s->h.unit == 0))
    return -1;
  return 1;
}

/* The hello's part of a read: false when `b` was used up (released) and
 * nothing is left to do with it; a bad hello or a CLOSE closes. */
static bool srv_hello_read(weft_ctx *ctx, srv_conn *s, weft_buf *b) {
  int rc = srv_take_hello(s, b);
  if (rc > 0 && s->h.mode != SRV_CLOSE && weft_buf_readable(b) > 0)
    return true;
  weft_buf_release(b);
  if (rc < 0 || (rc > 0 && s->h.mode == SRV_CLOSE))
    weft_ctx_close(ctx, WEFT_PROMISE_NONE);
  return false;
}

static void srv_read(weft_ctx *ctx, void *msg) {
  srv_conn *s = weft_ctx_state(ctx);
  weft_buf *b = msg;
  if (s->hlen < sizeof s->hdr && !srv_hello_read(ctx, s, b))
    return;
  if (s->h.mode == SRV_ECHO) {
    weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
    return;
  }
  s->count += weft_buf_readable(b);
  weft_buf_release(b);
  uint64_t due = s->count / s->h.unit - s->acked;
  if (due > 0) {
    send_zeros(ctx, due);
    s->acked += due;
  }
}

static void srv_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static void srv_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler srv_handler = {.name = "bench-server",
                                         .handler_removed = srv_removed,
                                         .channel_read = srv_read,
                                         .channel_read_complete =
                                             srv_read_complete};

void bench_server_weft_init(weft_channel *ch, void *arg) {
  const session *ses = arg;
  srv_conn *s = calloc(1, sizeof *s);
  if (s != NULL && bench_opt.plain_echo) { /* no hello: echo from byte 0 */
    s->hlen = sizeof s->hdr;
    s->h.mode = SRV_ECHO;
  }
  if (s == NULL ||
      (ses->tls_server != NULL &&
       weft_tls_add_first(weft_channel_pipeline(ch), ses->tls_server, NULL) <
           0) ||
      weft_pipeline_add_last(weft_channel_pipeline(ch), "bench-server",
                             &srv_handler, s) < 0) {
    free(s);
    weft_channel_close(ch, WEFT_PROMISE_NONE);
  }
}
