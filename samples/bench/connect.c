/* connect.c: weft-bench's connect pattern, connection setup and teardown.
 * One connection at a time: connect, send the 16 B hello asking for a
 * close (SRV_CLOSE), see EOF, close, and the next one. Timed: a warm-up
 * of --warm-seconds, then -t seconds; the row is connections per second.
 * The raw server closes in its accept thread, so the raw rate is not a
 * thread-creation rate. */

#include <unistd.h>

#include "bench.h"
#include "bench_util.h"

/* Raw: counts the connections begun from the first one after the warm-up
 * until warm-up plus -t seconds. */
static void connect_raw(session *s, const point *pt, result *res) {
  bool busy = s->cf->busy;
  uint64_t start = bench_now_ns(), t0 = 0, count = 0;
  uint64_t warm_end = start + (uint64_t)(bench_opt.warm_seconds * 1e9);
  uint64_t end = warm_end + (uint64_t)(bench_opt.seconds * 1e9), now;
  while ((now = bench_now_ns()) < end) {
    if (t0 == 0 && now >= warm_end)
      t0 = now;
    int fd = bench_raw_connect(s, SRV_CLOSE, 0);
    bench_raw_drain(fd, busy);
    close(fd);
    count += t0 != 0;
  }
  res->conns_per_s = (double)count / ((double)(bench_now_ns() - t0) / 1e9);
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
}

const bench_pattern bench_connect = {.name = "connect",
                                     .server_mode = SRV_CLOSE,
                                     .raw_run = connect_raw,
                                     .begin = connect_begin,
                                     .inactive = connect_inactive,
                                     .finish = connect_finish};
