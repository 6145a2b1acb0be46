/* SPDX-License-Identifier: Apache-2.0 */
/* report.c: percentiles, spreads and the writers of weft-bench (see
 * report.h). */
#include "report.h"

#include "bench_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const metric_names[BENCH_METRICS] = {
    [BENCH_P50] = "p50_us",         [BENCH_P90] = "p90_us",
    [BENCH_P99] = "p99_us",         [BENCH_P999] = "p99.9_us",
    [BENCH_P9999] = "p99.99_us",    [BENCH_MAX] = "max_us",
    [BENCH_MEAN] = "mean_us",       [BENCH_MSGS] = "msgs_per_s",
    [BENCH_MBPS] = "mb_per_s",      [BENCH_CONNS] = "conns_per_s",
    [BENCH_CPU] = "server_cpu_pct",
};

const char *bench_metric_name(bench_metric m) {
  return m < BENCH_METRICS ? metric_names[m] : "?";
}

/* ---- percentiles and spreads ---- */

uint64_t bench_percentile(const uint64_t *sorted, size_t n, uint32_t ppm) {
  /* rank = ceil(n * ppm / 1e6), in integers so p99.9 of 1..100000 is
   * exactly 99900 (doubles would give 99899.99...). */
  uint64_t rank = ((uint64_t)n * ppm + 999999u) / 1000000u;
  if (rank < 1)
    rank = 1;
  if (rank > n)
    rank = n;
  return sorted[rank - 1];
}

int bench_latency_of(uint64_t *samples, size_t n, bench_latency *out) {
  memset(out, 0, sizeof *out);
  if (n == 0)
    return -1;
  qsort(samples, n, sizeof samples[0], bench_cmp_u64);
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += (double)samples[i];
  out->p50 = (double)bench_percentile(samples, n, 500000) / 1e3;
  out->p90 = (double)bench_percentile(samples, n, 900000) / 1e3;
  out->p99 = (double)bench_percentile(samples, n, 990000) / 1e3;
  out->p999 = (double)bench_percentile(samples, n, 999000) / 1e3;
  out->p9999 = (double)bench_percentile(samples, n, 999900) / 1e3;
  out->max = (double)samples[n - 1] / 1e3;
  out->mean = sum / (double)n / 1e3;
  out->n = n;
  return 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

bench_spread bench_spread_of(const double *v, int n) {
  bench_spread s = {NAN, NAN, NAN, 0};
  if (n <= 0)
    return s;
  double sorted[BENCH_MAX_REPS];
  if (n > BENCH_MAX_REPS)
    n = BENCH_MAX_REPS;
  memcpy(sorted, v, sizeof sorted[0] * (size_t)n);
  qsort(sorted, (size_t)n, sizeof sorted[0], cmp_double);
  s.median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  s.min = sorted[0];
  s.max = sorted[n - 1];
  s.n = n;
  return s;
}

/* ---- rows ---- */

void bench_row_add(bench_row *r, bench_metric m, double v) {
  if (m >= BENCH_METRICS || r->nvalues[m] >= BENCH_MAX_REPS)
    return;
  r->values[m][r->nvalues[m]++] = v;
}

void bench_row_add_latency(bench_row *r, const bench_latency *l) {
  bench_row_add(r, BENCH_P50, l->p50);
  bench_row_add(r, BENCH_P90, l->p90);
  bench_row_add(r, BENCH_P99, l->p99);
  bench_row_add(r, BENCH_P999, l->p999);
  bench_row_add(r, BENCH_P9999, l->p9999);
  bench_row_add(r, BENCH_MAX, l->max);
  bench_row_add(r, BENCH_MEAN, l->mean);
}

void bench_row_finish(bench_row *r) {
  for (int m = 0; m < BENCH_METRICS; m++)
    r->spread[m] = bench_spread_of(r->values[m], r->nvalues[m]);
}

bool bench_row_same_point(const bench_row *a, const bench_row *b) {
  return strcmp(a->pattern, b->pattern) == 0 && a->size == b->size &&
         a->conns == b->conns && a->window == b->window;
}

const bench_row *bench_row_peer(const bench_row *rows, size_t n,
                                const bench_row *r, const char *mode) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(rows[i].mode, mode) == 0 && bench_row_same_point(&rows[i], r))
      return &rows[i];
  return NULL;
}

/* ---- CSV ---- */

static void csv_text(FILE *f, const char *s) {
  if (strpbrk(s, ",\"\n\r") == NULL) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"')
      fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static void csv_number(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.6g", v);
}

void bench_csv_header(FILE *f) {
  fputs("config,mode,transport,busy_poll_us,pattern,size,conns,window,reps", f);
  for (int m = 0; m < BENCH_METRICS; m++)
    fprintf(f, ",%s,%s_min,%s_max", metric_names[m], metric_names[m],
            metric_names[m]);
  fputc('\n', f);
}

static int row_reps(const bench_row *r) {
  int reps = 0;
  for (int m = 0; m < BENCH_METRICS; m++)
    if (r->nvalues[m] > reps)
      reps = r->nvalues[m];
  return reps;
}

void bench_csv_row(FILE *f, const bench_row *r) {
  csv_text(f, r->config);
  fputc(',', f);
  csv_text(f, r->mode);
  fputc(',', f);
  csv_text(f, r->transport);
  fprintf(f, ",%d,", r->busy_poll_us);
  csv_text(f, r->pattern);
  fprintf(f, ",%zu,%d,%d,%d", r->size, r->conns, r->window, row_reps(r));
  for (int m = 0; m < BENCH_METRICS; m++) {
    const bench_spread *s = &r->spread[m];
    fputc(',', f);
    csv_number(f, s->median);
    fputc(',', f);
    csv_number(f, s->min);
    fputc(',', f);
    csv_number(f, s->max);
  }
  fputc('\n', f);
}

/* ---- JSON ---- */

static void json_text(FILE *f, const char *s) {
  fputc('"', f);
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(f, "\\%c", c);
    else if (c < 0x20)
      fprintf(f, "\\u%04x", c);
    else
      fputc(c, f);
  }
  fputc('"', f);
}

static void json_number(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fputs("null", f);
}

/* `, "key": [1, 5, 15 minute load averages]` */
static void json_loadavg(FILE *f, const char *key, const double v[3]) {
  fprintf(f, ", \"%s\": [", key);
  for (int i = 0; i < 3; i++) {
    json_number(f, v[i]);
    fputs(i < 2 ? ", " : "]", f);
  }
}

/* `before` (the separator or brace), then `"key": ` and the string (or
 * the number) as JSON. */
static void json_key_text(FILE *f, const char *before, const char *key,
                          const char *value) {
  fprintf(f, "%s\"%s\": ", before, key);
  json_text(f, value);
}

static void json_key_number(FILE *f, const char *before, const char *key,
                            double value) {
  fprintf(f, "%s\"%s\": ", before, key);
  json_number(f, value);
}

static void json_meta(FILE *f, const bench_meta *m) {
  json_key_text(f, "{", "command", m->command);
  json_key_text(f, ", ", "started", m->started);
  json_loadavg(f, "load_before", m->load_before);
  json_loadavg(f, "load_after", m->load_after);
  fprintf(f, ", \"cpus\": %d", m->cpus);
  json_key_text(f, ", ", "note", m->machine_note ? m->machine_note : "");
  fputc('}', f);
}

static void json_row(FILE *f, const bench_row *r) {
  json_key_text(f, "    {", "config", r->config);
  json_key_text(f, ", ", "mode", r->mode);
  json_key_text(f, ", ", "transport", r->transport);
  fprintf(f, ", \"busy_poll_us\": %d", r->busy_poll_us);
  json_key_text(f, ", ", "pattern", r->pattern);
  fprintf(f,
          ", \"size\": %zu, \"conns\": %d, \"window\": %d, \"reps\": %d, "
          "\"metrics\": {",
          r->size, r->conns, r->window, row_reps(r));
  for (int m = 0; m < BENCH_METRICS; m++) {
    const bench_spread *s = &r->spread[m];
    fprintf(f, "%s\"%s\": ", m ? ", " : "", metric_names[m]);
    if (s->n == 0) {
      fputs("null", f);
      continue;
    }
    json_key_number(f, "{", "median", s->median);
    json_key_number(f, ", ", "min", s->min);
    json_key_number(f, ", ", "max", s->max);
    fprintf(f, ", \"n\": %d}", s->n);
  }
  fputs("}}", f);
}

void bench_json(FILE *f, const bench_meta *meta, const bench_row *rows,
                size_t n) {
  fputs("{\n  \"meta\": ", f);
  json_meta(f, meta);
  fputs(",\n  \"rows\": [\n", f);
  for (size_t i = 0; i < n; i++) {
    json_row(f, &rows[i]);
    fputs(i + 1 < n ? ",\n" : "\n", f);
  }
  fputs("  ]\n}\n", f);
}

/* ---- markdown tables ---- */

static void md_size(FILE *f, size_t size) {
  if (size >= 1048576 && size % 1048576 == 0)
    fprintf(f, "%zu MiB", size / 1048576);
  else if (size >= 1024 && size % 1024 == 0)
    fprintf(f, "%zu KiB", size / 1024);
  else
    fprintf(f, "%zu B", size);
}

/* "median (min..max)" with a precision fitting the magnitude. */
static void md_spread(FILE *f, const bench_spread *s) {
  if (s->n == 0) {
    fputs(" - |", f);
    return;
  }
  const char *fmt = s->median >= 1000 ? " %.0f (%.0f..%.0f) |"
                    : s->median >= 10 ? " %.1f (%.1f..%.1f) |"
                                      : " %.2f (%.2f..%.2f) |";
  fprintf(f, fmt, s->median, s->min, s->max);
}

/* One figure per repetition summarised as one: the median, except for a
 * maximum, where the largest over the repetitions is the honest figure (a
 * median of maxima hides the worst repetition). */
static void md_value(FILE *f, const bench_spread *s, bench_metric m) {
  double v = m == BENCH_MAX ? s->max : s->median;
  if (s->n == 0)
    fputs(" - |", f);
  else
    fprintf(f, v >= 100 ? " %.0f |" : " %.2f |", v);
}

/* weft row / peer row of `mode`, for metric m; "-" when either is missing. */
static void md_ratio(FILE *f, const bench_row *rows, size_t n,
                     const bench_row *r, const char *mode, bench_metric m) {
  const bench_row *p = bench_row_peer(rows, n, r, mode);
  if (strcmp(r->mode, "weft") != 0 || p == NULL || r->spread[m].n == 0 ||
      p->spread[m].n == 0 || p->spread[m].median == 0) {
    fputs(" - |", f);
    return;
  }
  fprintf(f, " %.2fx |", r->spread[m].median / p->spread[m].median);
}

typedef struct pattern_view {
  const char *pattern;
  const char *title;
  bench_metric main; /* shown with its spread, and in the ratios */
  bench_metric extra[7];
  int n_extra;
} pattern_view;

static const pattern_view views[] = {
    {"pingpong",
     "Ping-pong round trip, µs",
     BENCH_P50,
     {BENCH_P90, BENCH_P99, BENCH_P999, BENCH_P9999, BENCH_MAX, BENCH_MEAN},
     6},
    {"rate", "Message rate, messages/s (echoed)", BENCH_MSGS, {BENCH_MBPS}, 1},
    {"stream",
     "Unidirectional throughput, payload MB/s",
     BENCH_MBPS,
     {BENCH_MSGS},
     1},
    {"bidir",
     "Bidirectional throughput (echo), payload MB/s both ways",
     BENCH_MBPS,
     {BENCH_MSGS},
     1},
    {"connect",
     "Connection setup and teardown, connections/s; connect latency "
     "(connect to active), µs",
     BENCH_CONNS,
     {BENCH_P50, BENCH_P99, BENCH_MAX, BENCH_MEAN},
     4},
    {"idle", "Idle connections: server CPU, % of one core", BENCH_CPU, {0}, 0},
};

static void md_header(FILE *f, const pattern_view *v) {
  fprintf(f, "| config | size | conns x window | %s (min..max) |",
          metric_names[v->main]);
  for (int i = 0; i < v->n_extra; i++)
    fprintf(f, v->extra[i] == BENCH_MAX ? " %s (of all reps) |" : " %s |",
            metric_names[v->extra[i]]);
  fputs(" / raw-busy | / raw-block |\n|---|---:|---:|---:|", f);
  for (int i = 0; i < v->n_extra; i++)
    fputs("---:|", f);
  fputs("---:|---:|\n", f);
}

static void md_row(FILE *f, const bench_row *rows, size_t n, const bench_row *r,
                   const pattern_view *v) {
  fprintf(f, "| %s | ", r->config);
  if (r->size)
    md_size(f, r->size);
  else
    fputc('-', f);
  if (r->window > 0)
    fprintf(f, " | %d x %d |", r->conns, r->window);
  else
    fprintf(f, " | %d |", r->conns);
  md_spread(f, &r->spread[v->main]);
  for (int i = 0; i < v->n_extra; i++)
    md_value(f, &r->spread[v->extra[i]], v->extra[i]);
  md_ratio(f, rows, n, r, "raw-busy", v->main);
  md_ratio(f, rows, n, r, "raw-block", v->main);
  fputc('\n', f);
}

void bench_table(FILE *f, const bench_row *rows, size_t n) {
  for (size_t k = 0; k < sizeof views / sizeof views[0]; k++) {
    const pattern_view *v = &views[k];
    bool any = false;
    for (size_t i = 0; i < n; i++) {
      if (strcmp(rows[i].pattern, v->pattern) != 0)
        continue;
      if (!any) {
        fprintf(f, "%s:\n\n", v->title);
        md_header(f, v);
        any = true;
      }
      md_row(f, rows, n, &rows[i], v);
    }
    if (any)
      fputc('\n', f);
  }
}

/* ---- targets ---- */

/* One "weft / raw" ratio line; `upper` means the ratio must stay below
 * `limit`, otherwise above it. */
static void target_line(FILE *f, const bench_row *r, const bench_row *p,
                        bench_metric m, const char *what, double limit,
                        bool upper) {
  if (p == NULL)
    return;
  double a = r->spread[m].median, b = p->spread[m].median;
  if (r->spread[m].n == 0 || p->spread[m].n == 0 || b == 0)
    return;
  double ratio = a / b;
  bool met = upper ? ratio <= limit : ratio >= limit;
  fprintf(f, "- %s, %s: %.3g / %.3g (%s) = **%.2fx** (target %s %.1fx): %s",
          what, r->config, a, b, p->config, ratio, upper ? "<=" : ">=", limit,
          met ? "met" : "missed");
  if (!met)
    fprintf(f, " by %.0f%%", 100.0 * fabs(ratio / limit - 1.0));
  fputs("\n", f);
}

/* The raw row of r's point with the higher message rate: spinning on one
 * connection reads a message or two per recv, so either kind may be the
 * faster floor. */
static const bench_row *best_raw_rate(const bench_row *rows, size_t n,
                                      const bench_row *r) {
  const bench_row *a = bench_row_peer(rows, n, r, "raw-busy");
  const bench_row *b = bench_row_peer(rows, n, r, "raw-block");
  if (a == NULL || a->spread[BENCH_MSGS].n == 0)
    return b;
  if (b == NULL || b->spread[BENCH_MSGS].n == 0)
    return a;
  return a->spread[BENCH_MSGS].median >= b->spread[BENCH_MSGS].median ? a : b;
}

/* The 16 B ping-pong p50 against the floor of the same blocking kind: a
 * +tls row's is OpenSSL's own (raw-tls-busy, raw-tls-block; issue 32's
 * target 1.1x), a plaintext row's the raw sockets' (1.2x). */
static void pingpong_target(FILE *f, const bench_row *rows, size_t n,
                            const bench_row *r) {
  bool blocking = r->busy_poll_us == 0;
  bool tls = strstr(r->config, "+tls") != NULL;
  const char *peer = tls ? (blocking ? "raw-tls-block" : "raw-tls-busy")
                         : (blocking ? "raw-block" : "raw-busy");
  char what[48];
  snprintf(what, sizeof what, "ping-pong p50 16 B vs %s", peer);
  target_line(f, r, bench_row_peer(rows, n, r, peer), BENCH_P50, what,
              tls ? 1.1 : 1.2, true);
}

static void targets_for(FILE *f, const bench_row *rows, size_t n,
                        const bench_row *r) {
  if (strcmp(r->pattern, "idle") == 0) {
    const bench_spread *s = &r->spread[BENCH_CPU];
    if (s->n)
      fprintf(f,
              "- server CPU with %d idle connections, %s: **%.2f%%** of a "
              "core (target < 1%%): %s\n",
              r->conns, r->config, s->median, s->median < 1 ? "met" : "missed");
    return;
  }
  if (r->size != 16)
    return;
  if (strcmp(r->pattern, "pingpong") == 0)
    pingpong_target(f, rows, n, r);
  else if (strcmp(r->pattern, "rate") == 0 && r->conns == 1)
    target_line(f, r, best_raw_rate(rows, n, r), BENCH_MSGS,
                "pipelined 16 B rate vs the faster raw batched echo", 0.8,
                false);
}

void bench_targets(FILE *f, const bench_row *rows, size_t n) {
  static const char *const order[] = {"pingpong", "rate", "idle"};
  for (size_t k = 0; k < 3; k++)
    for (size_t i = 0; i < n; i++)
      if (strcmp(rows[i].mode, "weft") == 0 &&
          strcmp(rows[i].pattern, order[k]) == 0)
        targets_for(f, rows, n, &rows[i]);
}
