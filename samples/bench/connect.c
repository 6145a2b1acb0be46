/* SPDX-License-Identifier: Apache-2.0 */
/* connect.c: weft-bench's connect pattern, connection setup and teardown.
 * One connection at a time: connect, send the 16 B hello asking for a
 * close (SRV_CLOSE), see EOF, close, and the next one. Timed: a warm-up
 * of --warm-seconds, then -t seconds; the row is connections per second,
 * and the connect latency of each measured connection: from the connect
 * request to channel_active (weft: the transport's handshake is done), or
 * to connect() returning (raw). The raw server closes in its accept
 * thread, so the raw rate is not a thread-creation rate. */

#include <stdlib.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"

/* Appends one connect latency (`ns`) to the growing array `*v` (`*n` of
 * `*cap`); dies when out of memory. */
static void lat_push(uint64_t **v, size_t *n, size_t *cap, uint64_t ns) {
  if (*n == *cap) {
    size_t c = *cap ? *cap * 2 : 1024;
    uint64_t *p = realloc(*v, c * sizeof *p);
    if (p == NULL)
      bench_die("realloc");
    *v = p;
    *cap = c;
  }
  (*v)[(*n)++] = ns;
}

/* Raw: counts the connections begun from the first one after the warm-up
 * until warm-up plus -t seconds, and the time each connect (with the
 * hello's send) took. */
static void connect_raw(session *s, const point *pt, result *res) {
  (void)pt;
  bool busy = s->cf->busy;
  uint64_t start = bench_now_ns(), t0 = 0, count = 0;
  uint64_t warm_end = start + (uint64_t)(bench_opt.warm_seconds * 1e9);
  uint64_t end = warm_end + (uint64_t)(bench_opt.seconds * 1e9), now;
  uint64_t *lat = NULL;
  size_t n = 0, cap = 0;
  while ((now = bench_now_ns()) < end) {
    if (t0 == 0 && now >= warm_end)
      t0 = now;
    int fd = bench_raw_connect(s, SRV_CLOSE, 0);
    if (t0 != 0)
      lat_push(&lat, &n, &cap, bench_now_ns() - now);
    bench_raw_drain(fd, busy);
    close(fd);
    count += t0 != 0;
  }
  res->conns_per_s = (double)count / ((double)(bench_now_ns() - t0) / 1e9);
  res->has_lat = bench_latency_of(lat, n, &res->lat) == 0;
  free(lat);
}

/* ---- weft: the next connection starts when the last one is inactive ---- */

static void connect_next(wrun *r) {
  int rc = bench_wconn_connect(r, &r->c[0]);
  if (rc < 0) {
    bench_wrun_fail(r, rc);
    bench_wconn_gone(r, &r->c[0]);
  }
}

static void connect_start_task(void *arg) {
  wrun *r = arg;
  bench_phases_start(&r->ph, bench_now_ns());
  connect_next(r);
}

static void connect_begin(wrun *r) {
  weft_loop_execute(r->loop, connect_start_task, r);
}

/* The connection is up: its connect latency counts while measuring. */
static void connect_active(wrun *r, wconn *c) {
  uint64_t now = bench_now_ns();
  if (r->ph.phase == PH_MEASURE && now < r->ph.end)
    lat_push(&r->rtt, &r->n_rtt, &r->cap_rtt, now - c->t_connect);
}

/* One connection set up and torn down: count it, start the next. */
static bool connect_inactive(wrun *r, wconn *c) {
  if (r->ph.phase == PH_DONE)
    return false;
  uint64_t now = bench_now_ns();
  if (!bench_phases_tick(&r->ph, now) && r->ph.phase >= PH_MEASURE) {
    r->count++;
    if (r->ph.phase == PH_DRAIN) { /* the time is up */
      r->ph.t1 = now;
      r->ph.phase = PH_DONE;
      return false;
    }
  }
  *c = (wconn){.run = r};
  connect_next(r);
  return true;
}

static void connect_finish(const wrun *r, result *res) {
  res->conns_per_s = (double)r->count / ((double)(r->ph.t1 - r->ph.t0) / 1e9);
  res->has_lat = bench_latency_of(r->rtt, r->n_rtt, &res->lat) == 0;
}

const bench_pattern bench_connect = {.name = "connect",
                                     .server_mode = SRV_CLOSE,
                                     .raw_run = connect_raw,
                                     .begin = connect_begin,
                                     .active = connect_active,
                                     .inactive = connect_inactive,
                                     .finish = connect_finish};
