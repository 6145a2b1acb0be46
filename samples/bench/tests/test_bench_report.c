/* SPDX-License-Identifier: Apache-2.0 */
/* weft-bench's harness (samples/bench/report.c): percentiles against a
 * known distribution, median and spread of repetitions, CSV that parses
 * back field for field, JSON that a strict parser accepts, and the target
 * lines. No network, no timing. */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sched.h>

#include "bench_util.h"
#include "report.h"

/* ---- helpers: a memory FILE, a CSV splitter, a JSON checker ---- */

typedef struct membuf {
  char *text;
  size_t len;
  FILE *f;
} membuf;

static void mem_open(membuf *m) {
  m->text = NULL;
  m->len = 0;
  m->f = open_memstream(&m->text, &m->len);
  ck_assert_ptr_nonnull(m->f);
}

static void mem_close(membuf *m) { ck_assert_int_eq(fclose(m->f), 0); }

/* Splits one RFC 4180 line starting at *p into fields (quotes removed,
 * doubled quotes undone); advances *p past the line end. Returns the
 * number of fields. */
static int csv_split(const char **p, char fields[][64], int max) {
  int n = 0;
  const char *s = *p;
  for (;;) {
    char *out = n < max ? fields[n] : NULL;
    size_t len = 0;
    if (*s == '"') {
      for (s++; *s && !(*s == '"' && s[1] != '"'); s++) {
        if (*s == '"')
          s++;
        if (out && len < 63)
          out[len++] = *s;
      }
      ck_assert_int_eq(*s, '"');
      s++;
    } else {
      for (; *s && *s != ',' && *s != '\n'; s++)
        if (out && len < 63)
          out[len++] = *s;
    }
    if (out)
      out[len] = '\0';
    n++;
    if (*s == ',') {
      s++;
      continue;
    }
    ck_assert_int_eq(*s, '\n');
    *p = s + 1;
    return n;
  }
}

/* A strict JSON parser that only checks the syntax (RFC 8259): returns
 * the position after one value, or NULL. */
static const char *json_value(const char *s);

static const char *json_ws(const char *s) {
  while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
    s++;
  return s;
}

static const char *json_string(const char *s) {
  if (*s != '"')
    return NULL;
  for (s++; *s != '"'; s++) {
    if ((unsigned char)*s < 0x20)
      return NULL;
    if (*s != '\\')
      continue;
    s++;
    if (*s == 'u') {
      for (int i = 1; i <= 4; i++)
        if (!strchr("0123456789abcdefABCDEF", s[i]) || s[i] == '\0')
          return NULL;
      s += 4;
    } else if (!strchr("\"\\/bfnrt", *s) || *s == '\0') {
      return NULL;
    }
  }
  return s + 1;
}

static const char *json_number(const char *s) {
  const char *start = s;
  if (*s == '-')
    s++;
  if (*s == '0')
    s++;
  else if (*s >= '1' && *s <= '9')
    while (*s >= '0' && *s <= '9')
      s++;
  else
    return NULL;
  if (*s == '.') {
    if (!(*++s >= '0' && *s <= '9'))
      return NULL;
    while (*s >= '0' && *s <= '9')
      s++;
  }
  if (*s == 'e' || *s == 'E') {
    s++;
    if (*s == '+' || *s == '-')
      s++;
    if (!(*s >= '0' && *s <= '9'))
      return NULL;
    while (*s >= '0' && *s <= '9')
      s++;
  }
  return s > start ? s : NULL;
}

static const char *json_container(const char *s, char close, bool object) {
  s = json_ws(s + 1);
  if (*s == close)
    return s + 1;
  for (;;) {
    if (object) {
      s = json_string(json_ws(s));
      if (s == NULL || *(s = json_ws(s)) != ':')
        return NULL;
      s++;
    }
    s = json_value(s);
    if (s == NULL)
      return NULL;
    s = json_ws(s);
    if (*s == close)
      return s + 1;
    if (*s != ',')
      return NULL;
    s++;
  }
}

static const char *json_value(const char *s) {
  s = json_ws(s);
  switch (*s) {
  case '{':
    return json_container(s, '}', true);
  case '[':
    return json_container(s, ']', false);
  case '"':
    return json_string(s);
  case 't':
    return strncmp(s, "true", 4) == 0 ? s + 4 : NULL;
  case 'f':
    return strncmp(s, "false", 5) == 0 ? s + 5 : NULL;
  case 'n':
    return strncmp(s, "null", 4) == 0 ? s + 4 : NULL;
  default:
    return json_number(s);
  }
}

static bool json_valid(const char *text) {
  const char *end = json_value(text);
  return end != NULL && *json_ws(end) == '\0';
}

/* A row with a label, in `mode`, at 16 B ping-pong. */
static bench_row make_row(const char *config, const char *mode, int bp) {
  bench_row r;
  memset(&r, 0, sizeof r);
  snprintf(r.config, sizeof r.config, "%s", config);
  snprintf(r.mode, sizeof r.mode, "%s", mode);
  snprintf(r.transport, sizeof r.transport, "%s",
           strcmp(mode, "weft") == 0 ? "tcp" : "-");
  r.busy_poll_us = bp;
  snprintf(r.pattern, sizeof r.pattern, "pingpong");
  r.size = 16;
  r.conns = 1;
  r.window = 1;
  return r;
}

/* ---- percentiles ---- */

START_TEST(bench_latency_exact_uniform_1_to_100000) {
  /* 1..100000 ns in a scrambled order (a full-period LCG step modulo n) */
  size_t n = 100000;
  uint64_t *v = malloc(sizeof *v * n);
  ck_assert_ptr_nonnull(v);
  for (size_t i = 0; i < n; i++)
    v[i] = (uint64_t)((i * 7919u) % n) + 1;
  bench_latency l;
  ck_assert_int_eq(bench_latency_of(v, n, &l), 0);
  ck_assert_uint_eq(l.n, n);
  ck_assert_double_eq_tol(l.p50, 50.0, 1e-9);
  ck_assert_double_eq_tol(l.p90, 90.0, 1e-9);
  ck_assert_double_eq_tol(l.p99, 99.0, 1e-9);
  ck_assert_double_eq_tol(l.p999, 99.9, 1e-9);
  ck_assert_double_eq_tol(l.p9999, 99.99, 1e-9);
  ck_assert_double_eq_tol(l.max, 100.0, 1e-9);
  ck_assert_double_eq_tol(l.mean, 50.0005, 1e-9);
  /* sorted in place */
  for (size_t i = 1; i < n; i++)
    ck_assert_uint_le(v[i - 1], v[i]);
  free(v);
}
END_TEST

START_TEST(bench_percentile_nearest_rank_small_sets) {
  uint64_t one[] = {42};
  ck_assert_uint_eq(bench_percentile(one, 1, 500000), 42);
  ck_assert_uint_eq(bench_percentile(one, 1, 999900), 42);
  uint64_t ten[] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  ck_assert_uint_eq(bench_percentile(ten, 10, 500000), 50); /* rank 5 */
  ck_assert_uint_eq(bench_percentile(ten, 10, 510000), 60); /* rank 5.1->6 */
  ck_assert_uint_eq(bench_percentile(ten, 10, 900000), 90);
  ck_assert_uint_eq(bench_percentile(ten, 10, 990000), 100);
  ck_assert_uint_eq(bench_percentile(ten, 10, 0), 10);
  ck_assert_uint_eq(bench_percentile(ten, 10, 1000000), 100);
}
END_TEST

START_TEST(bench_latency_error_no_samples) {
  bench_latency l = {.p50 = 1};
  ck_assert_int_eq(bench_latency_of(NULL, 0, &l), -1);
  ck_assert_double_eq(l.p50, 0);
  ck_assert_uint_eq(l.n, 0);
}
END_TEST

/* ---- repetitions ---- */

START_TEST(bench_spread_median_odd_and_even) {
  double odd[] = {5, 1, 3};
  bench_spread s = bench_spread_of(odd, 3);
  ck_assert_double_eq(s.median, 3);
  ck_assert_double_eq(s.min, 1);
  ck_assert_double_eq(s.max, 5);
  ck_assert_int_eq(s.n, 3);
  ck_assert_double_eq(odd[0], 5); /* input untouched */
  double even[] = {4, 1, 3, 2};
  s = bench_spread_of(even, 4);
  ck_assert_double_eq(s.median, 2.5);
  ck_assert_double_eq(s.min, 1);
  ck_assert_double_eq(s.max, 4);
}
END_TEST

START_TEST(bench_spread_not_measured_empty) {
  bench_spread s = bench_spread_of(NULL, 0);
  ck_assert_int_eq(s.n, 0);
  ck_assert(isnan(s.median) && isnan(s.min) && isnan(s.max));
}
END_TEST

START_TEST(bench_row_add_keeps_at_most_max_reps) {
  bench_row r = make_row("x", "weft", 20);
  for (int i = 0; i < BENCH_MAX_REPS + 5; i++)
    bench_row_add(&r, BENCH_MSGS, i);
  bench_row_finish(&r);
  ck_assert_int_eq(r.spread[BENCH_MSGS].n, BENCH_MAX_REPS);
  ck_assert_double_eq(r.spread[BENCH_MSGS].max, BENCH_MAX_REPS - 1);
  ck_assert_int_eq(r.spread[BENCH_P50].n, 0);
}
END_TEST

/* ---- CSV ---- */

START_TEST(bench_csv_parses_back_field_for_field) {
  bench_row rows[2] = {make_row("raw-busy", "raw-busy", -1),
                       make_row("tcp, \"odd\" label", "weft", 20)};
  bench_latency l = {.p50 = 7.25,
                     .p90 = 8,
                     .p99 = 9,
                     .p999 = 10,
                     .p9999 = 11,
                     .max = 12,
                     .mean = 7.5,
                     .n = 3};
  for (int k = 0; k < 2; k++) {
    l.p50 = 7.25;
    bench_row_add_latency(&rows[k], &l);
    l.p50 = 6.5;
    bench_row_add_latency(&rows[k], &l);
    bench_row_finish(&rows[k]);
  }
  membuf m;
  mem_open(&m);
  bench_csv_header(m.f);
  bench_csv_row(m.f, &rows[0]);
  bench_csv_row(m.f, &rows[1]);
  mem_close(&m);

  char head[64][64], f[64][64];
  const char *p = m.text;
  int nh = csv_split(&p, head, 64);
  ck_assert_int_eq(nh, 9 + 3 * BENCH_METRICS);
  ck_assert_str_eq(head[0], "config");
  ck_assert_str_eq(head[9], "p50_us");
  ck_assert_str_eq(head[10], "p50_us_min");
  for (int k = 0; k < 2; k++) {
    ck_assert_int_eq(csv_split(&p, f, 64), nh);
    ck_assert_str_eq(f[0], rows[k].config); /* the quoted label survives */
    ck_assert_str_eq(f[4], "pingpong");
    ck_assert_str_eq(f[5], "16");
    ck_assert_str_eq(f[8], "2");                      /* reps */
    ck_assert_double_eq_tol(atof(f[9]), 6.875, 1e-9); /* median of 2 */
    ck_assert_double_eq_tol(atof(f[10]), 6.5, 1e-9);  /* min */
    ck_assert_double_eq_tol(atof(f[11]), 7.25, 1e-9); /* max */
    ck_assert_str_eq(f[9 + 3 * BENCH_MSGS], "");      /* not measured */
  }
  ck_assert_str_eq(f[3], "20");
  ck_assert_int_eq(*p, '\0');
  free(m.text);
}
END_TEST

/* ---- JSON ---- */

START_TEST(bench_json_well_formed_with_odd_text) {
  bench_row rows[2] = {make_row("raw-busy", "raw-busy", -1),
                       make_row("a \"quoted\\\" \n label", "weft", 20)};
  bench_row_add(&rows[0], BENCH_MSGS, 1e6);
  bench_row_add(&rows[0], BENCH_MBPS, INFINITY); /* written as null */
  bench_row_finish(&rows[0]);
  bench_row_finish(&rows[1]);
  bench_meta meta = {.command = "weft-bench -c \"x\"",
                     .started = "2026-01-01T00:00:00+0000",
                     .load_before = {1.5, 2, NAN},
                     .load_after = {1, 1, 1},
                     .cpus = 2};
  membuf m;
  mem_open(&m);
  bench_json(m.f, &meta, rows, 2);
  mem_close(&m);
  ck_assert_msg(json_valid(m.text), "not valid JSON:\n%s", m.text);
  ck_assert_ptr_nonnull(strstr(m.text, "\"msgs_per_s\": {\"median\": 1e+06"));
  ck_assert_ptr_nonnull(strstr(m.text, "\"p50_us\": null"));
  ck_assert_ptr_null(strstr(m.text, "inf"));
  ck_assert_ptr_null(strstr(m.text, "nan"));
  free(m.text);
}
END_TEST

START_TEST(bench_json_checker_rejects_broken_text) {
  /* the checker above must be able to say no, or the test proves nothing */
  ck_assert(json_valid("{\"a\": [1, 2.5e3, null, \"x\\n\"]}"));
  ck_assert(!json_valid("{\"a\": [1, 2,]}"));
  ck_assert(!json_valid("{\"a\": nan}"));
  ck_assert(!json_valid("{\"a\": \"raw\nnewline\"}"));
  ck_assert(!json_valid("{\"a\": 1} x"));
  ck_assert(!json_valid("{\"a\" 1}"));
}
END_TEST

START_TEST(bench_json_empty_report_valid) {
  bench_meta meta = {.command = "c", .started = "s"};
  membuf m;
  mem_open(&m);
  bench_json(m.f, &meta, NULL, 0);
  mem_close(&m);
  ck_assert(json_valid(m.text));
  free(m.text);
}
END_TEST

/* ---- tables and targets ---- */

/* The targets of n ping-pong rows, row k with one p50 of p50[k]; the text
 * is the caller's to free. */
static char *pingpong_targets(bench_row *rows, const double *p50, int n) {
  for (int k = 0; k < n; k++) {
    bench_row_add(&rows[k], BENCH_P50, p50[k]);
    bench_row_finish(&rows[k]);
  }
  membuf m;
  mem_open(&m);
  bench_targets(m.f, rows, (size_t)n);
  mem_close(&m);
  return m.text;
}

START_TEST(bench_targets_ratio_met_and_missed) {
  bench_row rows[4] = {
      make_row("raw-busy", "raw-busy", -1), make_row("tcp bp=20", "weft", 20),
      make_row("raw-block", "raw-block", 0), make_row("tcp bp=0", "weft", 0)};
  char *text = pingpong_targets(rows, (const double[]){10, 11, 40, 52}, 4);
  ck_assert_ptr_nonnull(strstr(text, "tcp bp=20: 11 / 10 (raw-busy) = "
                                     "**1.10x** (target <= 1.2x): met\n"));
  /* 52/40 = 1.3: 8% over the 1.2 limit */
  ck_assert_ptr_nonnull(strstr(text, "tcp bp=0: 52 / 40 (raw-block) = "
                                     "**1.30x** (target <= 1.2x): missed "
                                     "by 8%\n"));
  free(text);
}
END_TEST

/* A +tls row's floor is OpenSSL's own (raw-tls-*), at 1.1x; never the
 * plaintext raw rows. */
START_TEST(bench_targets_tls_against_raw_tls) {
  bench_row rows[5] = {make_row("raw-busy", "raw-busy", -1),
                       make_row("raw-tls-busy", "raw-tls-busy", -1),
                       make_row("tcp+tls bp=20", "weft", 20),
                       make_row("raw-tls-block", "raw-tls-block", 0),
                       make_row("tcp+tls bp=0", "weft", 0)};
  char *text = pingpong_targets(rows, (const double[]){10, 20, 21, 50, 60}, 5);
  ck_assert_ptr_nonnull(strstr(text, "tcp+tls bp=20: 21 / 20 (raw-tls-busy) "
                                     "= **1.05x** (target <= 1.1x): met\n"));
  /* 60/50 = 1.2: 9% over the 1.1 limit */
  ck_assert_ptr_nonnull(strstr(text, "tcp+tls bp=0: 60 / 50 (raw-tls-block) "
                                     "= **1.20x** (target <= 1.1x): missed "
                                     "by 9%\n"));
  ck_assert_ptr_null(strstr(text, "(raw-busy)"));
  free(text);
}
END_TEST

START_TEST(bench_targets_rate_against_faster_raw) {
  bench_row rows[3] = {make_row("raw-busy", "raw-busy", -1),
                       make_row("raw-block", "raw-block", 0),
                       make_row("tcp bp=20", "weft", 20)};
  double rate[3] = {600000, 1000000, 900000};
  for (int k = 0; k < 3; k++) {
    snprintf(rows[k].pattern, sizeof rows[k].pattern, "rate");
    rows[k].window = 64;
    bench_row_add(&rows[k], BENCH_MSGS, rate[k]);
    bench_row_finish(&rows[k]);
  }
  membuf m;
  mem_open(&m);
  bench_targets(m.f, rows, 3);
  mem_close(&m);
  ck_assert_ptr_nonnull(strstr(m.text, "9e+05 / 1e+06 (raw-block) = "
                                       "**0.90x** (target >= 0.8x): met"));
  free(m.text);
}
END_TEST

START_TEST(bench_table_ratio_to_raw_peer) {
  bench_row rows[2] = {make_row("raw-busy", "raw-busy", -1),
                       make_row("tcp bp=20", "weft", 20)};
  bench_row_add(&rows[0], BENCH_P50, 5);
  bench_row_add(&rows[1], BENCH_P50, 6);
  bench_row_add(&rows[1], BENCH_P50, 7);
  bench_row_finish(&rows[0]);
  bench_row_finish(&rows[1]);
  membuf m;
  mem_open(&m);
  bench_table(m.f, rows, 2);
  mem_close(&m);
  ck_assert_ptr_nonnull(strstr(m.text, "| tcp bp=20 | 16 B | 1 x 1 | "
                                       "6.50 (6.00..7.00) |"));
  ck_assert_ptr_nonnull(strstr(m.text, "| 1.30x | - |\n"));
  free(m.text);
}
END_TEST

/* max_us is the largest over the repetitions, not the median of each
 * repetition's maximum (which would hide the worst one). */
START_TEST(bench_table_max_is_max_of_repetitions) {
  bench_row r = make_row("tcp bp=20", "weft", 20);
  bench_row_add(&r, BENCH_P50, 5);
  bench_row_add(&r, BENCH_MAX, 10);
  bench_row_add(&r, BENCH_MAX, 90);
  bench_row_add(&r, BENCH_MAX, 20);
  bench_row_finish(&r);
  membuf m;
  mem_open(&m);
  bench_table(m.f, &r, 1);
  mem_close(&m);
  ck_assert_ptr_nonnull(strstr(m.text, "max_us (of all reps)"));
  ck_assert_ptr_nonnull(strstr(m.text, " - | 90.00 | - |"));
  free(m.text);
}
END_TEST

/* ---- CPU pinning (--no-pin) ---- */

/* --no-pin leaves every thread where the scheduler puts it: a pinned
 * thread on the shared machine waited 0.3-0.9 s for its CPU while another
 * session's task held it (docs/journal/2026-11-22-ucx.md,
 * "The 1 MiB stall"). */
START_TEST(bench_no_pin_leaves_affinity) {
  cpu_set_t all, now;
  ck_assert_int_eq(sched_getaffinity(0, sizeof all, &all), 0);
  if (CPU_COUNT(&all) < 2 || !CPU_ISSET(0, &all)) {
    th_skip(__func__, "needs CPU 0 and one more in the affinity mask (%d)",
            CPU_COUNT(&all));
    return;
  }
  bench_pin_enable(false);
  bench_pin_self(0);
  ck_assert_int_eq(sched_getaffinity(0, sizeof now, &now), 0);
  ck_assert(CPU_EQUAL(&now, &all));
  bench_pin_enable(true); /* the default: pinned to the one CPU */
  bench_pin_self(0);
  ck_assert_int_eq(sched_getaffinity(0, sizeof now, &now), 0);
  ck_assert_int_eq(CPU_COUNT(&now), 1);
  ck_assert(CPU_ISSET(0, &now));
  ck_assert_int_eq(sched_setaffinity(0, sizeof all, &all), 0);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "bench_report", "report", 0, bench_latency_exact_uniform_1_to_100000,
      bench_percentile_nearest_rank_small_sets, bench_latency_error_no_samples,
      bench_spread_median_odd_and_even, bench_spread_not_measured_empty,
      bench_row_add_keeps_at_most_max_reps,
      bench_csv_parses_back_field_for_field,
      bench_json_well_formed_with_odd_text,
      bench_json_checker_rejects_broken_text, bench_json_empty_report_valid,
      bench_targets_ratio_met_and_missed, bench_targets_tls_against_raw_tls,
      bench_targets_rate_against_faster_raw, bench_table_ratio_to_raw_peer,
      bench_table_max_is_max_of_repetitions, bench_no_pin_leaves_affinity,
      NULL);
}
