/* SPDX-License-Identifier: Apache-2.0 */
/* echo.c: weft-bench's windowed echo patterns, rate and bidir. Each
 * connection keeps `window` messages in flight to an echoing server
 * (SRV_ECHO) and sends as many again as came back. Timed: a warm-up of
 * --warm-seconds, -t seconds measured (echoed messages counted), then no
 * more refills until every window has drained. The patterns differ only
 * in their points (bench_run.c): rate is --rate-size messages at
 * CONNSxWINDOW (--rate), the messages/s row; bidir is one connection with
 * 256 KiB in flight (at least two messages) per -s size, payload MB/s in
 * both directions. rate at 1 x 64 is what weft-pingpong's pipelined phase
 * measured. */

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"

static void echo_result(const point *pt, uint64_t msgs, const bench_phases *ph,
                        result *res) {
  double secs = (double)(ph->t1 - ph->t0) / 1e9;
  res->msgs_per_s = (double)msgs / secs;
  res->mb_per_s = (double)msgs * (double)pt->size *
                  (pt->pattern == P_BIDIR ? 2.0 : 1.0) / secs / 1e6;
}

/* ---- raw: refills in one send per read, as weft's flush gathers its
 * writes ---- */

typedef struct raw_echo {
  int fd;
  uint64_t tosend; /* bytes queued for sending */
  size_t partial;  /* bytes of a message not yet complete */
  long outstanding;
} raw_echo;

typedef struct raw_echo_run {
  const point *pt;
  bool busy;
  int n;
  raw_echo *c;
  struct pollfd *pfd; /* raw_poll's */
  bench_phases ph;
  uint64_t msgs;
} raw_echo_run;

/* Sends what e has queued, without waiting; true when something went. */
static bool raw_send_queued(raw_echo *e) {
  if (e->tosend == 0)
    return false;
  size_t k = e->tosend > BENCH_TXMAX ? BENCH_TXMAX : (size_t)e->tosend;
  ssize_t w = send(e->fd, bench_zeros, k, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (w <= 0)
    return false;
  e->tosend -= (uint64_t)w;
  return true;
}

/* k messages of e came back at `now`: counted, and refilled unless the
 * run drains. */
static void raw_echoed(raw_echo_run *x, raw_echo *e, long k, uint64_t now) {
  e->outstanding -= k;
  if (!bench_phases_tick(&x->ph, now) && x->ph.phase >= PH_MEASURE)
    x->msgs += (uint64_t)k;
  if (x->ph.phase < PH_DRAIN) {
    e->tosend += (uint64_t)k * x->pt->size;
    e->outstanding += k;
  }
}

/* One connection's turn: send what is queued, receive what came back;
 * true when either moved. */
static bool raw_turn(raw_echo_run *x, raw_echo *e) {
  bool progress = raw_send_queued(e);
  /* one connection with nothing to send: block in recv, no poll */
  int flags = !x->busy && x->n == 1 && e->tosend == 0 ? 0 : MSG_DONTWAIT;
  if (e->outstanding == 0)
    return progress;
  ssize_t r = recv(e->fd, bench_rxbuf, sizeof bench_rxbuf, flags);
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
    bench_die("echo recv");
  if (r < 0)
    return progress;
  e->partial += (size_t)r;
  long k = (long)(e->partial / x->pt->size);
  e->partial %= x->pt->size;
  raw_echoed(x, e, k, bench_now_ns());
  return true;
}

static bool raw_drained(const raw_echo_run *x) {
  for (int i = 0; i < x->n; i++)
    if (x->c[i].outstanding != 0)
      return false;
  return true;
}

/* Several connections of a blocking kind, none moved: wait for one. */
static void raw_poll(const raw_echo_run *x) {
  for (int i = 0; i < x->n; i++)
    x->pfd[i] = (struct pollfd){
        .fd = x->c[i].fd,
        .events = (short)(POLLIN | (x->c[i].tosend ? POLLOUT : 0))};
  poll(x->pfd, (nfds_t)x->n, -1);
}

static void raw_connect_all(raw_echo_run *x, session *s) {
  x->c = calloc((size_t)x->n, sizeof *x->c);
  x->pfd = calloc((size_t)x->n, sizeof *x->pfd);
  if (x->c == NULL || x->pfd == NULL)
    bench_die("calloc");
  for (int i = 0; i < x->n; i++) {
    x->c[i].fd = bench_raw_connect(s, SRV_ECHO, 0);
    x->c[i].tosend = (uint64_t)x->pt->window * x->pt->size;
    x->c[i].outstanding = x->pt->window;
  }
}

static void echo_raw(session *s, const point *pt, result *res) {
  raw_echo_run x = {.pt = pt, .busy = s->cf->busy, .n = pt->conns};
  raw_connect_all(&x, s);
  bench_phases_start(&x.ph, bench_now_ns());
  while (x.ph.phase != PH_DONE) {
    bool progress = false;
    for (int i = 0; i < x.n; i++)
      if (raw_turn(&x, &x.c[i]))
        progress = true;
    if (x.ph.phase == PH_DRAIN && raw_drained(&x)) {
      x.ph.t1 = bench_now_ns();
      x.ph.phase = PH_DONE;
    }
    if (!progress && !x.busy && x.ph.phase != PH_DONE && x.n > 1)
      raw_poll(&x);
  }
  echo_result(pt, x.msgs, &x.ph, res);
  for (int i = 0; i < x.n; i++)
    bench_raw_close(x.c[i].fd, x.busy);
  free(x.pfd);
  free(x.c);
}

/* ---- weft ---- */

static void echo_start(wrun *r) {
  for (int i = 0; i < r->n; i++) {
    for (int k = 0; k < r->pt->window; k++)
      bench_wconn_write_msg(&r->c[i]);
    r->c[i].outstanding = r->pt->window;
    weft_ctx_flush(r->c[i].ctx);
  }
}

static void echo_finish_if_drained(wrun *r) {
  for (int i = 0; i < r->n; i++)
    if (r->c[i].outstanding > 0)
      return;
  r->ph.t1 = bench_now_ns();
  bench_wrun_end(r);
}

static void echo_read(wrun *r, wconn *c, size_t n) {
  c->got += n;
  long k = (long)(c->got / r->pt->size);
  c->got %= r->pt->size;
  c->outstanding -= k;
  if (!bench_phases_tick(&r->ph, bench_now_ns()) && r->ph.phase >= PH_MEASURE)
    r->msgs += (uint64_t)k;
  if (r->ph.phase == PH_DRAIN) {
    echo_finish_if_drained(r);
    return;
  }
  for (long j = 0; j < k; j++)
    bench_wconn_write_msg(c);
  c->outstanding += k;
  if (k > 0)
    weft_ctx_flush(c->ctx);
}

static void echo_finish(const wrun *r, result *res) {
  echo_result(r->pt, r->msgs, &r->ph, res);
}

/* rate and bidir: the same client, other points. */
#define ECHO_PATTERN(pattern_name)                                             \
  {                                                                            \
    .name = pattern_name, .server_mode = SRV_ECHO, .raw_run = echo_raw,        \
    .start = echo_start, .read = echo_read, .finish = echo_finish              \
  }

const bench_pattern bench_rate = ECHO_PATTERN("rate");
const bench_pattern bench_bidir = ECHO_PATTERN("bidir");
