/* SPDX-License-Identifier: Apache-2.0 */
/* report.h: the pure parts of weft-bench, kept apart from the network code
 * so samples/bench/tests/test_bench_report.c can check them: percentiles of
 * recorded samples, median and spread of repetitions, and the writers (markdown
 * table, CSV, JSON).
 *
 * A bench_row is one measured point: one configuration (raw floor or a
 * weft transport with a busy-poll window), one pattern, one message size,
 * one connection count and window. Every repetition adds one value per
 * metric it measures; bench_row_finish() turns them into median, min and
 * max. A metric with no values is "not measured": an empty CSV field and
 * null in JSON.
 *
 * Nothing here allocates except bench_latency_of's caller's array, nothing
 * is global, and every function may be called from any thread on its own
 * data.
 */
#ifndef WEFT_BENCH_REPORT_H
#define WEFT_BENCH_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/** Most repetitions a row keeps. */
#define BENCH_MAX_REPS 32

/** Latency percentiles of one repetition, in microseconds. */
typedef struct bench_latency {
  double p50, p90, p99, p999, p9999, max, mean;
  size_t n; /* samples */
} bench_latency;

/**
 * Sample of rank ceil(n * ppm / 1e6) (nearest rank, 1-based) of `sorted`
 * (ascending, n >= 1); ppm is parts per million (500000 = p50, 999900 =
 * p99.99, 1000000 = max). Integer arithmetic, so 1..100000 gives exactly
 * 50000, 99900, 99990.
 */
uint64_t bench_percentile(const uint64_t *sorted, size_t n, uint32_t ppm);

/**
 * Sorts `samples` (nanoseconds, n of them) in place and fills `out` with
 * the percentiles and mean in microseconds. Returns 0, or -1 (out zeroed)
 * when n is 0.
 */
int bench_latency_of(uint64_t *samples, size_t n, bench_latency *out);

/** Median, min and max of the repetitions of one metric. */
typedef struct bench_spread {
  double median, min, max;
  int n; /* values; 0 = not measured (the doubles are NaN) */
} bench_spread;

/**
 * Median (the mean of the middle two for an even count), min and max of
 * `v` (n values, not modified). n == 0 gives n = 0 and NaNs.
 */
bench_spread bench_spread_of(const double *v, int n);

/** The metrics a row can carry (one CSV triple / JSON object each). */
typedef enum bench_metric {
  BENCH_P50,   /* ping-pong round trip (connect: connect latency), µs */
  BENCH_P90,   /* µs */
  BENCH_P99,   /* µs */
  BENCH_P999,  /* µs */
  BENCH_P9999, /* µs */
  BENCH_MAX,   /* µs */
  BENCH_MEAN,  /* µs */
  BENCH_MSGS,  /* messages per second (echoed messages for rate/bidir) */
  BENCH_MBPS,  /* payload MB/s (10^6 bytes; bidir counts both directions) */
  BENCH_CONNS, /* connections set up and torn down per second */
  BENCH_CPU,   /* server CPU, percent of one core */
  BENCH_METRICS
} bench_metric;

/** CSV/JSON name of a metric ("p50_us", "msgs_per_s", ...). */
const char *bench_metric_name(bench_metric m);

/** One measured point and its repetitions. Fill the key fields, then add. */
typedef struct bench_row {
  char config[40];    /* label: "raw-busy", "tcp bp=20" */
  char mode[16];      /* "weft", "raw-busy", "raw-block", "raw-tls-busy"
                         or "raw-tls-block" */
  char transport[16]; /* "tcp", "uring", ... ("-" for raw) */
  int busy_poll_us;   /* weft's window; raw-busy -1 (never blocks), raw-block
                         0 (always blocks) */
  char pattern[12];   /* "pingpong", "stream", "bidir", "rate", "connect",
                         "idle" */
  size_t size;        /* message bytes (0 where there is no message) */
  int conns;          /* connections */
  int window;         /* messages in flight per connection (0: n/a) */
  /* repetitions: values[m][0..nvalues[m]) */
  double values[BENCH_METRICS][BENCH_MAX_REPS];
  int nvalues[BENCH_METRICS];
  bench_spread spread[BENCH_METRICS]; /* set by bench_row_finish */
} bench_row;

/** Adds one repetition's value of metric `m` (dropped past the maximum). */
void bench_row_add(bench_row *r, bench_metric m, double v);

/** Adds a repetition's percentiles (the seven latency metrics). */
void bench_row_add_latency(bench_row *r, const bench_latency *l);

/** Computes spread[] from the values added so far. */
void bench_row_finish(bench_row *r);

/** True when rows a and b measure the same point (pattern, size, conns,
 * window) possibly in different configurations. */
bool bench_row_same_point(const bench_row *a, const bench_row *b);

/**
 * The row of mode `mode` ("raw-busy", ...) measuring the same point as
 * `r`, or NULL.
 */
const bench_row *bench_row_peer(const bench_row *rows, size_t n,
                                const bench_row *r, const char *mode);

/** Writes the CSV header line (column names; see bench_csv_row). */
void bench_csv_header(FILE *f);

/**
 * Writes one CSV line: the key fields, then for each metric its median,
 * min and max (empty when not measured). Text fields holding a comma, a
 * quote or a newline are quoted with doubled quotes (RFC 4180).
 */
void bench_csv_row(FILE *f, const bench_row *r);

/** What a JSON report says about its run (all text borrowed). */
typedef struct bench_meta {
  const char *command;      /* the command line */
  const char *started;      /* ISO 8601 time */
  double load_before[3];    /* /proc/loadavg at start */
  double load_after[3];     /* and at the end */
  int cpus;                 /* online CPUs */
  const char *machine_note; /* free text, may be NULL */
} bench_meta;

/**
 * Writes the whole report as one JSON object: {"meta": {...}, "rows":
 * [{"config": ..., "metrics": {"p50_us": {"median":..,"min":..,"max":..,
 * "n":..} or null, ...}}, ...]}. Non-finite numbers are written as null.
 */
void bench_json(FILE *f, const bench_meta *meta, const bench_row *rows,
                size_t n);

/**
 * Writes markdown tables, one per pattern present in `rows`, with the
 * columns that pattern measures and the ratio of each weft row to the
 * raw-busy and raw-block rows of the same point.
 */
void bench_table(FILE *f, const bench_row *rows, size_t n);

/**
 * Writes the targets as a markdown list, each with the ratio
 * measured here and met / missed by how much: ping-pong p50 at 16 B with
 * busy polling <= 1.2x raw-busy, with busy_poll_us=0 <= 1.2x raw-block
 * (a +tls row: <= 1.1x raw-tls-busy or raw-tls-block, OpenSSL's floor),
 * pipelined 16 B rate (1 connection) >= 0.8x the raw batched echo of the
 * same blocking kind, idle server CPU < 1%. Points not measured are
 * skipped.
 */
void bench_targets(FILE *f, const bench_row *rows, size_t n);

#endif
