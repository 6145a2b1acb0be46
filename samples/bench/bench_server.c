/* bench_server.c: weft-bench's server, in both kinds. Every connection
 * starts with the client's 16 B hello, which says what to do until EOF:
 * echo every byte (SRV_ECHO), count bytes and answer one byte per unit
 * (SRV_SINK), or close at once (SRV_CLOSE). The raw server is an accept
 * thread and a thread per connection, pinned to CPU 1 (one recv, one send
 * per echo, no epoll); the weft server is a handler on the session's
 * server loop, behind the TLS handler in a +tls setup. bench_session.c
 * starts both. */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"

/* ---- raw ---- */

typedef struct raw_conn {
  int fd;
  hello h;
  bool busy;
  char name[16];
} raw_conn;

/* Answers one byte per unit of the bytes counted so far; -1 on error. */
static int raw_answer(raw_conn *rc, uint64_t count, uint64_t *acked) {
  uint64_t due = count / rc->h.unit - *acked;
  *acked += due;
  for (size_t k; due > 0; due -= k) {
    k = due > BENCH_TXMAX ? BENCH_TXMAX : (size_t)due;
    if (bench_raw_send_all(rc->fd, bench_zeros, k) < 0)
      return -1;
  }
  return 0;
}

/* Echoes, or counts and answers one byte per unit, until EOF. */
static void *raw_conn_main(void *arg) {
  raw_conn *rc = arg;
  pthread_setname_np(pthread_self(), rc->name);
  bench_pin_self(1);
  uint8_t *buf = malloc(BENCH_TXMAX);
  uint64_t count = 0, acked = 0;
  for (;;) {
    ssize_t r = bench_raw_recv(rc->fd, buf, BENCH_TXMAX, rc->busy);
    if (r <= 0)
      break;
    if (rc->h.mode == SRV_ECHO) {
      if (bench_raw_send_all(rc->fd, buf, (size_t)r) < 0)
        break;
      continue;
    }
    count += (uint64_t)r;
    if (raw_answer(rc, count, &acked) < 0)
      break;
  }
  free(buf);
  close(rc->fd);
  free(rc);
  return NULL;
}

/* Reads the hello of a new connection; false (fd closed) when it is not
 * one or asks for a close. */
static bool raw_take_hello(int fd, hello *h) {
  if (bench_raw_recv_exact(fd, h, sizeof *h, false) < 0 ||
      h->magic != BENCH_HELLO_MAGIC || h->mode == SRV_CLOSE ||
      (h->mode == SRV_SINK && h->unit == 0)) {
    close(fd);
    return false;
  }
  return true;
}

static void raw_conn_start(session *s, int fd, const hello *h) {
  raw_conn *rc = malloc(sizeof *rc);
  *rc = (raw_conn){.fd = fd, .h = *h, .busy = s->cf->busy};
  snprintf(rc->name, sizeof rc->name, "%.8sraw", s->prefix);
  pthread_t t;
  if (pthread_create(&t, NULL, raw_conn_main, rc) != 0) {
    close(fd);
    free(rc);
    return;
  }
  pthread_detach(t);
}

/* Accepts, reads the hello (a CLOSE is handled here, so the connect rate
 * is not a thread-creation rate), and starts a thread per connection. */
void *bench_server_raw_main(void *arg) {
  session *s = arg;
  char name[16];
  snprintf(name, sizeof name, "%.8sacc", s->prefix);
  pthread_setname_np(pthread_self(), name);
  bench_pin_self(1);
  for (;;) {
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      return NULL; /* the listener was shut down */
    }
    bench_raw_nodelay(fd);
    hello h;
    if (raw_take_hello(fd, &h))
      raw_conn_start(s, fd, &h);
  }
}

/* ---- weft ---- */

typedef struct srv_conn {
  uint8_t hdr[sizeof(hello)];
  size_t hlen;
  hello h;
  uint64_t count, acked;
} srv_conn;

static void send_zeros(weft_ctx *ctx, uint64_t n) {
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  while (n > 0) {
    size_t k = n > BENCH_CHUNK ? BENCH_CHUNK : (size_t)n;
    weft_buf *b = weft_buf_alloc(pool, k);
    if (b == NULL)
      return;
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
