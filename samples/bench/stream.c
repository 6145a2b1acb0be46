/* SPDX-License-Identifier: Apache-2.0 */
/* stream.c: weft-bench's stream pattern, unidirectional throughput. The
 * client sends messages of the point's size while it can; the server
 * counts them and answers one byte per unit (SRV_SINK; 256 KiB, or one
 * message if larger). Timed by the answers: a warm-up of --warm-seconds,
 * -t seconds measured, then the client sends only up to the end of the
 * current unit, and the answer to that last unit ends the measurement.
 * Payload bytes only: the row's MB/s and messages/s count the units
 * answered while measuring. */

#include <errno.h>
#include <sys/socket.h>

#include "bench.h"
#include "bench_util.h"

#define STREAM_UNIT 262144 /* bytes the server acknowledges at once */

static uint64_t stream_unit(size_t size) {
  return size >= STREAM_UNIT ? size : STREAM_UNIT / size * size;
}

static void stream_result(const point *pt, uint64_t unit, uint64_t units,
                          const bench_phases *ph, result *res) {
  double secs = (double)(ph->t1 - ph->t0) / 1e9;
  double bytes = (double)units * (double)unit;
  res->mb_per_s = bytes / secs / 1e6;
  res->msgs_per_s = bytes / (double)pt->size / secs;
}

/* ---- raw: a message per send from 64 KiB up (to 1 MiB), 64 KiB batches
 * of smaller ones; raw-tls: one SSL_write each ---- */

typedef struct raw_stream {
  raw_link l;
  uint64_t unit;
  size_t batch;
  size_t retry; /* raw-tls: an SSL_write to make again with this length */
  uint64_t sent, units, units0;
  bench_phases ph;
} raw_stream;

/* Sends up to k bytes: how many went, 0 when the socket is full, dies on
 * an error. A raw-tls write that found the socket full is made again with
 * the same length, as OpenSSL wants. */
static size_t raw_send(raw_stream *x, size_t k) {
  ssize_t w;
  if (x->l.ssl != NULL) {
    k = x->retry != 0 ? x->retry : k;
    w = bench_tls_send(&x->l, bench_zeros, k);
    x->retry = w == 0 ? k : 0;
  } else {
    w = send(x->l.fd, bench_zeros, k,
             (x->l.busy ? MSG_DONTWAIT : 0) | MSG_NOSIGNAL);
    if (w < 0 && (errno == EAGAIN || errno == EINTR))
      w = 0;
  }
  if (w < 0)
    bench_die("stream send");
  return (size_t)w;
}

/* Answer bytes there, waiting for some when `wait` (spinning when busy);
 * 0 for none yet; dies at EOF or on an error. */
static size_t raw_answers(raw_stream *x, bool wait) {
  ssize_t r;
  if (x->l.ssl != NULL) {
    r = wait ? bench_tls_recv(&x->l, bench_rxbuf, sizeof bench_rxbuf)
             : bench_tls_take(&x->l, bench_rxbuf, sizeof bench_rxbuf);
  } else {
    r = recv(x->l.fd, bench_rxbuf, sizeof bench_rxbuf,
             wait && !x->l.busy ? 0 : MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
      return 0;
    if (r == 0)
      r = -1; /* EOF */
  }
  if (r < 0)
    bench_die("stream recv");
  return (size_t)r;
}

/* Sends a batch, or when draining what is left of the current unit;
 * returns how much it meant to send (0: nothing left). */
static uint64_t raw_send_some(raw_stream *x) {
  uint64_t left = x->ph.phase == PH_DRAIN
                      ? (x->unit - x->sent % x->unit) % x->unit
                      : x->batch;
  if (left == 0)
    return 0;
  x->sent += raw_send(x, left > x->batch ? x->batch : (size_t)left);
  return left;
}

/* Receives answers (waiting once nothing is left to send) and moves the
 * phases. */
static void raw_take_answers(raw_stream *x, uint64_t left) {
  size_t r = raw_answers(x, left == 0);
  if (r == 0)
    return;
  x->units += (uint64_t)r;
  uint64_t now = bench_now_ns();
  if (bench_phases_tick(&x->ph, now))
    x->units0 = x->units;
  if (x->ph.phase == PH_DRAIN && x->units * x->unit == x->sent) {
    x->ph.t1 = now;
    x->ph.phase = PH_DONE;
  }
}

static void stream_raw(session *s, const point *pt, result *res) {
  raw_stream x = {.unit = stream_unit(pt->size)};
  x.l = bench_raw_link_open(s, SRV_SINK, x.unit);
  x.batch = pt->size >= BENCH_TXMAX   ? BENCH_TXMAX
            : pt->size >= BENCH_CHUNK ? pt->size
                                      : BENCH_CHUNK / pt->size * pt->size;
  bench_phases_start(&x.ph, bench_now_ns());
  while (x.ph.phase != PH_DONE)
    raw_take_answers(&x, raw_send_some(&x));
  stream_result(pt, x.unit, x.units - x.units0, &x.ph, res);
  bench_raw_link_close(&x.l);
}

/* ---- weft: writes while the channel is writable ---- */

static void stream_prepare(wrun *r) { r->unit = stream_unit(r->pt->size); }

/* Writes while the channel is writable; in the drain phase only up to the
 * end of the current unit. */
static bool stream_wants(const wconn *c) {
  const wrun *r = c->run;
  return !c->gone && r->ph.phase != PH_DONE &&
         (r->ph.phase != PH_DRAIN || c->sent % r->unit != 0);
}

static void stream_pump_task(void *arg);

/* At most PUMP_BUDGET bytes per call, so the loop gets to read the
 * server's answers (which move the phases); if the channel is still
 * writable then, a task continues. */
#define PUMP_BUDGET (4 * BENCH_CHUNK)
static void stream_pump(wconn *c) {
  wrun *r = c->run;
  if (c->pumping || c->queued)
    return;
  c->pumping = true;
  uint64_t budget = 0;
  while (budget < PUMP_BUDGET && stream_wants(c) &&
         weft_channel_is_writable(c->ch)) {
    /* The budget bounds this loop too: a handler that queues writes
     * without counting them against the watermarks (TLS while kTLS is
     * being set up) keeps the channel writable. */
    while (budget < PUMP_BUDGET && stream_wants(c) &&
           weft_channel_is_writable(c->ch)) {
      bench_wconn_write_msg(c);
      c->sent += r->pt->size;
      budget += r->pt->size;
    }
    weft_ctx_flush(c->ctx);
  }
  c->pumping = false;
  if (stream_wants(c) && weft_channel_is_writable(c->ch)) {
    c->queued = true;
    weft_loop_execute(r->loop, stream_pump_task, c);
  }
}

static void stream_pump_task(void *arg) {
  wconn *c = arg;
  c->queued = false;
  stream_pump(c);
}

static void stream_start(wrun *r) {
  for (int i = 0; i < r->n; i++)
    stream_pump(&r->c[i]);
}

static void stream_read(wrun *r, wconn *c, size_t n) {
  c->units += n;
  r->units += n;
  uint64_t now = bench_now_ns();
  if (bench_phases_tick(&r->ph, now))
    r->units0 = r->units;
  stream_pump(c);
  if (r->ph.phase != PH_DRAIN)
    return;
  for (int i = 0; i < r->n; i++)
    if (r->c[i].units * r->unit != r->c[i].sent)
      return;
  r->ph.t1 = now;
  bench_wrun_end(r);
}

static void stream_finish(const wrun *r, result *res) {
  stream_result(r->pt, r->unit, r->units - r->units0, &r->ph, res);
}

const bench_pattern bench_stream = {.name = "stream",
                                    .server_mode = SRV_SINK,
                                    .raw_run = stream_raw,
                                    .prepare = stream_prepare,
                                    .start = stream_start,
                                    .read = stream_read,
                                    .writable = stream_pump,
                                    .finish = stream_finish};
