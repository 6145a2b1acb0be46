/* SPDX-License-Identifier: Apache-2.0 */
/* bench_run.c: weft-bench's run, once the options are set. The points to
 * measure (a pattern at a size, connection count and window), every
 * configuration's session, then repetition 1 of every point in every
 * configuration, repetition 2, ...; one row per point and configuration
 * (report.h), written as tables, CSV and JSON. In the server role it only
 * serves until SIGINT/SIGTERM. Also here: the pattern table, the phases of
 * the timed patterns, and the two ways a run stops on an error. */

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"

#define BIDIR_INFLIGHT 262144 /* bytes in flight per connection, bidir */

const bench_pattern *const bench_patterns[P_N] = {
    [P_PINGPONG] = &bench_pingpong, [P_STREAM] = &bench_stream,
    [P_BIDIR] = &bench_bidir,       [P_RATE] = &bench_rate,
    [P_CONNECT] = &bench_connect,   [P_IDLE] = &bench_idle};

void bench_die(const char *what) {
  fprintf(stderr, "weft-bench: %s: %s\n", what, strerror(errno));
  exit(1);
}

void bench_fail(const char *fmt, const char *arg) {
  fprintf(stderr, "weft-bench: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(2);
}

void bench_phases_start(bench_phases *p, uint64_t now) {
  p->phase = PH_WARM;
  p->warm_end = now + (uint64_t)(bench_opt.warm_seconds * 1e9);
}

bool bench_phases_tick(bench_phases *p, uint64_t now) {
  if (p->phase == PH_WARM && now >= p->warm_end) {
    p->phase = PH_MEASURE;
    p->t0 = now;
    p->end = now + (uint64_t)(bench_opt.seconds * 1e9);
    return true;
  }
  if (p->phase == PH_MEASURE && now >= p->end)
    p->phase = PH_DRAIN;
  return false;
}

/* ---- the points ---- */

static long scaled(long n, size_t size, long floor) {
  long v = size > 4096 ? (long)((double)n * 4096.0 / (double)size) : n;
  return v < floor ? floor : v;
}

/* pingpong, stream, bidir: one point per -s size. */
static int sized_points(enum pattern p, point *pts, int max) {
  int n = 0;
  for (int i = 0; i < bench_opt.n_sizes && n < max; i++) {
    point q = {.pattern = p, .conns = 1, .size = bench_opt.sizes[i]};
    q.iters = scaled(bench_opt.iters, q.size, 200);
    q.warm = scaled(bench_opt.warmup, q.size, 20);
    if (p == P_PINGPONG)
      q.window = 1;
    else if (p == P_BIDIR)
      q.window =
          q.size * 2 > BIDIR_INFLIGHT ? 2 : (int)(BIDIR_INFLIGHT / q.size);
    pts[n++] = q;
  }
  return n;
}

/* rate: one point per --rate CONNSxWINDOW. */
static int rate_points(point *pts, int max) {
  int n = 0;
  for (int i = 0; i < bench_opt.n_rates && n < max; i++)
    pts[n++] = (point){.pattern = P_RATE,
                       .size = bench_opt.rate_size,
                       .conns = bench_opt.rates[i].conns,
                       .window = bench_opt.rates[i].window};
  return n;
}

static int make_points(point *pts, int max) {
  int n = 0;
  for (int p = 0; p < P_N; p++) {
    if (!bench_opt.patterns[p])
      continue;
    if (p == P_PINGPONG || p == P_STREAM || p == P_BIDIR)
      n += sized_points((enum pattern)p, pts + n, max - n);
    else if (p == P_RATE)
      n += rate_points(pts + n, max - n);
    else if (n < max) /* connect: one at a time; idle: --idle-conns */
      pts[n++] = (point){.pattern = (enum pattern)p,
                         .conns = p == P_IDLE ? bench_opt.idle_conns : 1};
  }
  return n;
}

/* raw-busy with many idle connections would be that many spinning
 * threads: not a floor of anything. */
static bool applies(const bench_config *cf, const point *pt) {
  if (pt->pattern == P_IDLE && cf->raw && cf->busy)
    return false;
  char key[48];
  snprintf(key, sizeof key, "%s:%s", cf->raw ? cf->mode : cf->transport,
           bench_patterns[pt->pattern]->name);
  for (int i = 0; i < bench_opt.n_excludes; i++)
    if (strcmp(bench_opt.excludes[i], key) == 0)
      return false;
  return true;
}

/* ---- rows and outputs ---- */

static void row_init(bench_row *row, const bench_config *cf, const point *pt) {
  memset(row, 0, sizeof *row);
  snprintf(row->config, sizeof row->config, "%s", cf->label);
  snprintf(row->mode, sizeof row->mode, "%s", cf->mode);
  snprintf(row->transport, sizeof row->transport, "%s",
           cf->raw ? "-" : cf->transport);
  row->busy_poll_us = cf->busy_poll_us;
  snprintf(row->pattern, sizeof row->pattern, "%s",
           bench_patterns[pt->pattern]->name);
  row->size = pt->size;
  row->conns = pt->conns;
  row->window = pt->window;
}

static void row_add(bench_row *row, const result *res) {
  if (res->has_lat)
    bench_row_add_latency(row, &res->lat);
  if (res->msgs_per_s >= 0)
    bench_row_add(row, BENCH_MSGS, res->msgs_per_s);
  if (res->mb_per_s >= 0)
    bench_row_add(row, BENCH_MBPS, res->mb_per_s);
  if (res->conns_per_s >= 0)
    bench_row_add(row, BENCH_CONNS, res->conns_per_s);
  if (res->cpu_pct >= 0)
    bench_row_add(row, BENCH_CPU, res->cpu_pct);
}

static void progress(int done, int total, int rep, const point *pt,
                     const bench_config *cf, uint64_t started) {
  if (!bench_opt.progress)
    return;
  double el = (double)(bench_now_ns() - started) / 1e9;
  double eta = done > 0 ? el / done * (total - done) : 0;
  fprintf(stderr,
          "\r[%d/%d] rep %d/%d %-8s %8zu B %-14s %4.0f s, ~%.0f s left ",
          done + 1, total, rep + 1, bench_opt.reps,
          bench_patterns[pt->pattern]->name, pt->size, cf->label, el, eta);
  fflush(stderr);
}

static void read_load(double v[3]) {
  FILE *f = fopen("/proc/loadavg", "r");
  v[0] = v[1] = v[2] = -1;
  if (f != NULL) {
    if (fscanf(f, "%lf %lf %lf", &v[0], &v[1], &v[2]) != 3)
      v[0] = v[1] = v[2] = -1;
    fclose(f);
  }
}

static void write_csv(const bench_row *rows, size_t n) {
  FILE *f = fopen(bench_opt.csv, "w");
  if (f == NULL)
    bench_die(bench_opt.csv);
  bench_csv_header(f);
  for (size_t i = 0; i < n; i++)
    bench_csv_row(f, &rows[i]);
  fclose(f);
}

/* The tables, the targets and the load averages. */
static void write_md(FILE *f, const bench_row *rows, size_t n,
                     const bench_meta *meta) {
  bench_table(f, rows, n);
  fputs("Targets (ratios from this run):\n\n", f);
  bench_targets(f, rows, n);
  fprintf(f,
          "\nLoad average before: %.2f %.2f %.2f, after: %.2f "
          "%.2f %.2f (%d CPUs).\n",
          meta->load_before[0], meta->load_before[1], meta->load_before[2],
          meta->load_after[0], meta->load_after[1], meta->load_after[2],
          meta->cpus);
}

static void write_outputs(const bench_row *rows, size_t n, bench_meta *meta) {
  if (bench_opt.csv != NULL)
    write_csv(rows, n);
  if (bench_opt.json != NULL) {
    FILE *f = fopen(bench_opt.json, "w");
    if (f == NULL)
      bench_die(bench_opt.json);
    bench_json(f, meta, rows, n);
    fclose(f);
  }
  if (!bench_opt.quiet)
    write_md(stdout, rows, n, meta);
  FILE *md = bench_opt.md != NULL ? fopen(bench_opt.md, "w") : NULL;
  if (md != NULL) {
    write_md(md, rows, n, meta);
    fclose(md);
  }
}

/* ---- the client: every point x configuration x repetition ---- */

static void measure(bench_config *cf, const point *pt, bench_row *row) {
  result res = {
      .msgs_per_s = -1, .mb_per_s = -1, .conns_per_s = -1, .cpu_pct = -1};
  if (cf->raw) /* raw-tls: pingpong and stream (bench_opts_check) */
    bench_patterns[pt->pattern]->raw_run(cf->s, pt, &res);
  else
    bench_weft_measure(cf->s, pt, &res);
  row_add(row, &res);
}

/* Repetitions interleaved: repetition r of every point and configuration
 * before repetition r+1. */
static void measure_all(const point *pts, int np, bench_row *rows) {
  int nc = bench_opt.n_configs, total = bench_opt.reps * np * nc, done = 0;
  uint64_t t0 = bench_now_ns();
  for (int rep = 0; rep < bench_opt.reps; rep++)
    for (int p = 0; p < np; p++)
      for (int k = 0; k < nc; k++, done++) {
        bench_config *cf = &bench_opt.configs[k];
        if (!applies(cf, &pts[p]))
          continue;
        progress(done, total, rep, &pts[p], cf, t0);
        measure(cf, &pts[p], &rows[p * nc + k]);
      }
  if (bench_opt.progress)
    fputc('\n', stderr);
}

/* Finishes every row and drops those of points a configuration does not
 * apply to; returns how many are kept. */
static size_t finish_rows(const point *pts, bench_row *rows, size_t nrows) {
  size_t kept = 0, nc = (size_t)bench_opt.n_configs;
  for (size_t i = 0; i < nrows; i++) {
    bench_row_finish(&rows[i]);
    if (applies(&bench_opt.configs[i % nc], &pts[i / nc]))
      rows[kept++] = rows[i];
  }
  return kept;
}

static void run_client(const char *command) {
  point pts[P_N * BENCH_MAX_SIZES];
  int np = make_points(pts, (int)(sizeof pts / sizeof pts[0]));
  int nc = bench_opt.n_configs;
  size_t nrows = (size_t)np * (size_t)nc;
  bench_row *rows = calloc(nrows, sizeof *rows);
  if (rows == NULL)
    bench_die("calloc");
  for (int p = 0; p < np; p++)
    for (int k = 0; k < nc; k++)
      row_init(&rows[p * nc + k], &bench_opt.configs[k], &pts[p]);
  bench_meta meta = {.command = command,
                     .cpus = (int)sysconf(_SC_NPROCESSORS_ONLN)};
  char started[32];
  time_t t = time(NULL);
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%S%z", localtime(&t));
  meta.started = started;
  read_load(meta.load_before);
  bench_pin_self(0); /* the raw client runs on this thread */
  measure_all(pts, np, rows);
  read_load(meta.load_after);
  write_outputs(rows, finish_rows(pts, rows, nrows), &meta);
  free(rows);
}

static void server_signals(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
}

static void run_server(void) {
  bench_config *cf = &bench_opt.configs[0];
  if (cf->raw)
    printf("weft-bench: %s serving on %s:%u\n", cf->label, bench_opt.host,
           (unsigned)ntohs(cf->s->addr.sin_port));
  else
    printf("weft-bench: %s serving on %s\n", cf->label, cf->s->uri);
  fflush(stdout);
  sigset_t set;
  server_signals(&set);
  int sig;
  sigwait(&set, &sig);
}

int bench_run(const char *command) {
  signal(SIGPIPE, SIG_IGN);
  if (bench_opt.role == ROLE_SERVER) {
    /* sigwait needs the signals blocked in every thread: block first */
    sigset_t set;
    server_signals(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
  }
  for (int k = 0; k < bench_opt.n_configs; k++)
    bench_session_start(&bench_opt.configs[k], k);
  if (bench_opt.role == ROLE_SERVER)
    run_server();
  else
    run_client(command);
  for (int k = 0; k < bench_opt.n_configs; k++)
    bench_session_stop(&bench_opt.configs[k]);
  return 0;
}
