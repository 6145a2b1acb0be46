/* SPDX-License-Identifier: Apache-2.0 */
/* pingpong.c: weft-bench's pingpong pattern. One connection, one message
 * of the point's size in flight: send, wait for the whole echo, send
 * again. The first `warm` round trips (-w, scaled down above 4 KiB) are
 * not recorded; every one of the next `iters` (-n, likewise) is, and the
 * row gets their percentiles (report.h: p50 ... p99.99, max, mean). The
 * server echoes (SRV_ECHO). This is also what weft-pingpong's ping-pong
 * phase measured. */

#include <stdlib.h>

#include "bench.h"
#include "bench_util.h"

/* Raw: one send per message, then a spinning or blocking recv (raw-tls:
 * SSL_write, SSL_read). */
static void pingpong_raw(session *s, const point *pt, result *res) {
  raw_link l = bench_raw_link_open(s, SRV_ECHO, 0);
  uint64_t *rtt = malloc(sizeof *rtt * (size_t)pt->iters);
  if (rtt == NULL)
    bench_die("malloc");
  for (long i = -pt->warm; i < pt->iters; i++) {
    uint64_t t0 = bench_now_ns();
    if (bench_raw_link_exchange(&l, pt->size) < 0)
      bench_die("ping-pong");
    if (i >= 0)
      rtt[i] = bench_now_ns() - t0;
  }
  res->has_lat = bench_latency_of(rtt, (size_t)pt->iters, &res->lat) == 0;
  free(rtt);
  bench_raw_link_close(&l);
}

/* ---- weft ---- */

static void pingpong_prepare(wrun *r) {
  r->rtt = malloc(sizeof *r->rtt * (size_t)r->pt->iters);
  if (r->rtt == NULL)
    bench_die("calloc");
}

static void pingpong_send(wrun *r, wconn *c) {
  r->tsend = bench_now_ns();
  bench_wconn_write_msg(c);
  weft_ctx_flush(c->ctx);
}

static void pingpong_start(wrun *r) {
  r->i = -r->pt->warm;
  pingpong_send(r, &r->c[0]);
}

static void pingpong_read(wrun *r, wconn *c, size_t n) {
  c->got += n;
  if (c->got < r->pt->size)
    return;
  c->got = 0;
  uint64_t t = bench_now_ns();
  if (r->i >= 0)
    r->rtt[r->i] = t - r->tsend;
  if (++r->i == r->pt->iters) {
    bench_wrun_end(r);
    return;
  }
  pingpong_send(r, c);
}

static void pingpong_finish(const wrun *r, result *res) {
  res->has_lat = bench_latency_of(r->rtt, (size_t)r->pt->iters, &res->lat) == 0;
}

const bench_pattern bench_pingpong = {.name = "pingpong",
                                      .server_mode = SRV_ECHO,
                                      .raw_run = pingpong_raw,
                                      .prepare = pingpong_prepare,
                                      .start = pingpong_start,
                                      .read = pingpong_read,
                                      .finish = pingpong_finish};
