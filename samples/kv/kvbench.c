/* SPDX-License-Identifier: Apache-2.0 */
/* weft-kvbench: YCSB-style load for the KV service over its binary RPC
 * protocol (client.h).
 *
 *   weft-kvbench [-c FILE] [-o section.key=value]... [--connect URI]
 *                [--workload A|B|C] [--records N] [--no-load]
 *                [--distribution uniform|zipfian|scrambled]
 *                [--value-size BYTES] [--connections N] [--pipeline M]
 *                [--duration S | --operations N] [--warmup S] [--json]
 *                [--user USER] [-a PASSWORD]
 *                [--tls [--cacert FILE] [--cert FILE --key FILE]]
 *
 * Workloads as YCSB's core workloads: A = 50% reads, 50% updates; B = 95%
 * reads, 5% updates; C = reads only. A read is GET, an update SET of a
 * value of --value-size bytes. Keys are "user" and a 12-digit record
 * number below --records, chosen uniformly or Zipfian (theta 0.99). First
 * a load phase SETs every record (skip with --no-load), then a warm-up
 * that is not measured, then the measured run of --duration seconds or
 * --operations operations.
 *
 * N connections x M outstanding requests: each connection is a kv_client
 * on the group's loops (round robin) with M request slots; a slot issues
 * its next request from the callback of the previous one (closed loop), on
 * the loop thread, so the client's cheap path is measured. Every measured
 * request's latency (issue to callback) goes into a log-linear histogram
 * (HDR-like: 128 linear sub-buckets per power of two, < 0.8% error), one
 * per connection, merged at the end. Every option is also a key of the
 * [kvbench] config section (records, operations, duration, warmup,
 * workload, distribution, value_size, connections, pipeline, load, json,
 * seed) and a WEFT_KVBENCH_* variable. Every connection sends AUTH first
 * when a password is given (client_auth.h: -a, [kv] password,
 * WEFT_KV_PASSWORD, REDISCLI_AUTH), and speaks TLS with --tls
 * (client_tls.h; the server's [kv] tls_rpc_listen), one client context
 * shared by every connection.
 *
 * SIGINT (Ctrl-C) ends the run early: the requests in flight complete,
 * what was measured so far prints (marked "interrupted", or
 * "interrupted": true in JSON), and the status is 130 as a shell's for a
 * SIGINT; a second SIGINT stops at once.
 */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <weft/cli.h>
#include <weft/config.h>
#include <weft/error.h>
#include <weft/loop.h>

#include "client.h"
#include "client_auth.h"
#include "client_cluster.h"
#include "client_tls.h"
#include "kv_config.h"

#define KV_DEFAULT_CONNECT "127.0.0.1:7001"

#define ZIPF_THETA 0.99

static const char *prog = "weft-kvbench";

/* ---- options ---- */

typedef enum dist { DIST_UNIFORM, DIST_ZIPFIAN, DIST_SCRAMBLED } dist;

typedef struct bench_opts {
  char workload;       /* 'A', 'B' or 'C' */
  uint64_t records;    /* keys in the key space */
  uint64_t operations; /* measured operations; 0 = run for `duration` */
  double duration;     /* seconds of the measured run */
  double warmup;       /* seconds before it, not measured */
  dist distribution;
  size_t value_size; /* bytes */
  int connections;
  int pipeline; /* outstanding requests per connection */
  bool load;
  bool json;
  bool cluster; /* route by slot over a cluster's nodes (client_cluster.h) */
  uint64_t seed;
} bench_opts;

static void opts_init(bench_opts *o) {
  *o = (bench_opts){.workload = 'A',
                    .records = 100000,
                    .duration = 10,
                    .warmup = 2,
                    .distribution = DIST_ZIPFIAN,
                    .value_size = 100,
                    .connections = 4,
                    .pipeline = 16,
                    .load = true,
                    .seed = 1};
}

static bool parse_u64(const char *v, uint64_t *out) {
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  if (*v == '\0' || *v == '-' || *end != '\0')
    return false;
  *out = n;
  return true;
}

static bool parse_bool(const char *v, bool *out) {
  if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes"))
    return *out = true, true;
  if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no"))
    return *out = false, true;
  return false;
}

/* One [kvbench] key; also the flags' back end. */
static int set_opt(bench_opts *o, const char *key, const char *v, char *err,
                   size_t err_len) {
  uint64_t n;
  char *end;
  const char *want = NULL;
  if (!strcmp(key, "workload")) {
    if (strlen(v) == 1 && strchr("ABCabc", v[0]))
      o->workload = (char)(v[0] & ~0x20);
    else
      want = "A, B or C";
  } else if (!strcmp(key, "records")) {
    if (parse_u64(v, &n) && n > 0)
      o->records = n;
    else
      want = "an integer > 0";
  } else if (!strcmp(key, "operations")) {
    if (parse_u64(v, &n))
      o->operations = n;
    else
      want = "an integer >= 0 (0 = run for the duration)";
  } else if (!strcmp(key, "duration") || !strcmp(key, "warmup")) {
    double d = strtod(v, &end);
    if (*v != '\0' && *end == '\0' && d >= 0)
      *(!strcmp(key, "duration") ? &o->duration : &o->warmup) = d;
    else
      want = "seconds >= 0";
  } else if (!strcmp(key, "distribution")) {
    if (!strcasecmp(v, "uniform"))
      o->distribution = DIST_UNIFORM;
    else if (!strcasecmp(v, "zipfian"))
      o->distribution = DIST_ZIPFIAN;
    else if (!strcasecmp(v, "scrambled"))
      o->distribution = DIST_SCRAMBLED;
    else
      want = "uniform, zipfian or scrambled";
  } else if (!strcmp(key, "value_size")) {
    if (parse_u64(v, &n) && n <= 1024 * 1024)
      o->value_size = (size_t)n;
    else
      want = "bytes, at most 1048576";
  } else if (!strcmp(key, "connections") || !strcmp(key, "pipeline")) {
    if (parse_u64(v, &n) && n > 0 && n <= 10000)
      *(!strcmp(key, "connections") ? &o->connections : &o->pipeline) = (int)n;
    else
      want = "an integer from 1 to 10000";
  } else if (!strcmp(key, "load") || !strcmp(key, "json") ||
             !strcmp(key, "cluster")) {
    bool *flag = !strcmp(key, "load")   ? &o->load
                 : !strcmp(key, "json") ? &o->json
                                        : &o->cluster;
    if (!parse_bool(v, flag))
      want = "true or false";
  } else if (!strcmp(key, "seed")) {
    if (!parse_u64(v, &o->seed))
      want = "an integer >= 0";
  } else {
    return WEFT_ENOENT;
  }
  if (want == NULL)
    return 0;
  snprintf(err, err_len, "\"%s\": expected %s", v, want);
  return WEFT_EINVAL;
}

/* What the [kvbench] and [kv] callbacks fill. */
typedef struct bench_config {
  bench_opts *o;
  kv_client_auth *auth;
  kv_client_tls *tls;
} bench_config;

static int config_section(void *arg, const char *section, const char *key,
                          const char *value, char *err, size_t err_len) {
  bench_config *bc = arg;
  if (!strcmp(section, "kv")) { /* TLS, the credentials; the server's keys */
    int rc = kv_client_tls_key(bc->tls, key, value, err, err_len);
    return rc != WEFT_ENOENT
               ? rc
               : kv_client_auth_key(bc->auth, key, value, err, err_len);
  }
  if (strcmp(section, "cluster") == 0)
    return 0; /* the server's, when the file is shared */
  if (strcmp(section, "kvbench") != 0)
    return WEFT_ENOENT;
  return set_opt(bc->o, key, value, err, err_len);
}

/* ---- random numbers and key choice ---- */

static uint64_t splitmix64(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double uniform01(uint64_t *s) {
  return (double)(splitmix64(s) >> 11) * 0x1.0p-53;
}

/* The Zipfian generator of YCSB (ZipfianGenerator.java), from J. Gray, P.
 * Sundaresan, S. Englert, K. Baclawski, P. J. Weinberger, "Quickly
 * generating billion-record synthetic databases", SIGMOD 1994: item i
 * (0-based) is drawn with probability proportional to 1 / (i+1)^theta,
 * by inverting an approximation of the CDF in O(1) per draw after an O(n)
 * zeta(n, theta) once. Item 0 is the most popular. */
typedef struct zipf {
  uint64_t n;
  double theta, alpha, zetan, eta, half_pow_theta;
} zipf;

static double zeta(uint64_t n, double theta) {
  double sum = 0;
  for (uint64_t i = 1; i <= n; i++)
    sum += 1.0 / pow((double)i, theta);
  return sum;
}

static void zipf_init(zipf *z, uint64_t n, double theta) {
  double zeta2 = zeta(2, theta);
  z->n = n;
  z->theta = theta;
  z->alpha = 1.0 / (1.0 - theta);
  z->zetan = zeta(n, theta);
  z->eta = (1 - pow(2.0 / (double)n, 1 - theta)) / (1 - zeta2 / z->zetan);
  z->half_pow_theta = 1 + pow(0.5, theta);
}

static uint64_t zipf_next(const zipf *z, uint64_t *rng) {
  double u = uniform01(rng), uz = u * z->zetan;
  if (uz < 1.0)
    return 0;
  if (uz < z->half_pow_theta)
    return 1;
  uint64_t i =
      (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1, z->alpha));
  return i < z->n ? i : z->n - 1;
}

/* FNV-1a over the 8 bytes of v: YCSB's scrambled Zipfian hashes the rank
 * so the popular items spread over the key space instead of clustering at
 * the low record numbers (YCSB draws the rank from a larger item space
 * first; drawing it from the key space keeps the same popularity skew). */
static uint64_t fnv1a64(uint64_t v) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int i = 0; i < 8; i++) {
    h ^= (v >> (8 * i)) & 0xFF;
    h *= 0x100000001B3ull;
  }
  return h;
}

/* ---- the latency histogram ---- */

#define SUB_BITS 7
#define SUB_COUNT (1u << SUB_BITS)
/* Values below 2*SUB_COUNT have a bucket each; above, each power of two
 * [2^(e+7), 2^(e+8)) has SUB_COUNT buckets of width 2^e. */
#define HIST_BUCKETS ((64 - SUB_BITS) * SUB_COUNT + 2 * SUB_COUNT)

typedef struct hist {
  uint64_t counts[HIST_BUCKETS];
  uint64_t total, max, sum;
} hist;

static size_t hist_index(uint64_t v) {
  if (v < 2 * SUB_COUNT)
    return (size_t)v;
  unsigned e = 63 - (unsigned)__builtin_clzll(v) - SUB_BITS;
  return ((size_t)e << SUB_BITS) + (size_t)(v >> e);
}

/* The largest value that lands in bucket `i` (HDR's highest equivalent
 * value), so a percentile never understates. */
static uint64_t hist_value(size_t i) {
  if (i < 2 * SUB_COUNT)
    return i;
  unsigned e = (unsigned)(i >> SUB_BITS) - 1;
  uint64_t m = SUB_COUNT + (i & (SUB_COUNT - 1));
  return ((m + 1) << e) - 1;
}

static void hist_record(hist *h, uint64_t v) {
  h->counts[hist_index(v)]++;
  h->total++;
  h->sum += v;
  if (v > h->max)
    h->max = v;
}

static void hist_merge(hist *into, const hist *h) {
  for (size_t i = 0; i < HIST_BUCKETS; i++)
    into->counts[i] += h->counts[i];
  into->total += h->total;
  into->sum += h->sum;
  if (h->max > into->max)
    into->max = h->max;
}

static uint64_t hist_percentile(const hist *h, double p) {
  if (h->total == 0)
    return 0;
  uint64_t rank = (uint64_t)ceil(p / 100.0 * (double)h->total);
  if (rank < 1)
    rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < HIST_BUCKETS; i++)
    if ((seen += h->counts[i]) >= rank)
      return hist_value(i) < h->max ? hist_value(i) : h->max;
  return h->max;
}

/* ---- the run ---- */

enum phase { PHASE_LOAD, PHASE_WARMUP, PHASE_RUN, PHASE_STOP };

typedef struct bench bench;
typedef struct conn conn;

typedef struct slot {
  conn *conn;
  uint64_t start_ns;
  int phase;   /* the phase the request was issued in */
  bool update; /* SET (else GET) */
} slot;

struct conn {
  bench *b;
  kv_client *client;          /* or, with [kvbench] cluster: */
  kv_cluster_client *cluster; /* one connection per node */
  uint64_t rng;               /* loop thread */
  hist *h; /* loop thread; read by main once all slots retired */
  uint64_t reads, updates, last_done_ns; /* loop thread, as h */
  slot *slots;
};

struct bench {
  bench_opts o;
  zipf z;
  uint8_t *value;
  _Atomic int phase;
  atomic_int active;               /* slots still issuing */
  atomic_uint_fast64_t next_load;  /* next record the load phase sets */
  atomic_uint_fast64_t run_issued; /* measured requests issued */
  atomic_uint_fast64_t completed;  /* every completed request */
  atomic_uint_fast64_t errors;     /* failed calls and error replies */
  conn *conns;
  kv_client_auth auth; /* the credentials every connection sends */
  kv_client_tls tls;   /* TLS for every connection */
};

/* Set by the first SIGINT (any thread may take it): the phase in
 * progress ends, the results so far print. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
  (void)sig;
  interrupted = 1;
}

/* SA_RESETHAND: the second SIGINT has the default action, so a run stuck
 * on a silent server still stops. */
static void catch_sigint(void) {
  struct sigaction sa = {.sa_handler = on_sigint,
                         .sa_flags = (int)SA_RESETHAND};
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t choose_key(conn *c) {
  bench *b = c->b;
  switch (b->o.distribution) {
  case DIST_UNIFORM:
    return splitmix64(&c->rng) % b->o.records;
  case DIST_ZIPFIAN:
    return zipf_next(&b->z, &c->rng);
  case DIST_SCRAMBLED:
    return fnv1a64(zipf_next(&b->z, &c->rng)) % b->o.records;
  }
  return 0;
}

static double read_fraction(char workload) {
  return workload == 'A' ? 0.5 : workload == 'B' ? 0.95 : 1.0;
}

static void on_reply(void *arg, int err, const kv_reply *reply);

static void slot_retire(slot *s) { atomic_fetch_sub(&s->conn->b->active, 1); }

/* Picks the slot's next request by phase and sends it, or retires it. */
static void slot_issue(slot *s) {
  conn *c = s->conn;
  bench *b = c->b;
  int phase = atomic_load_explicit(&b->phase, memory_order_relaxed);
  uint64_t key;
  bool update;
  if (phase == PHASE_STOP)
    return slot_retire(s);
  if (phase == PHASE_LOAD) {
    key = atomic_fetch_add_explicit(&b->next_load, 1, memory_order_relaxed);
    if (key >= b->o.records)
      return slot_retire(s);
    update = true;
  } else {
    if (phase == PHASE_RUN && b->o.operations > 0 &&
        atomic_fetch_add_explicit(&b->run_issued, 1, memory_order_relaxed) >=
            b->o.operations)
      return slot_retire(s);
    key = choose_key(c);
    update = uniform01(&c->rng) >= read_fraction(b->o.workload);
  }
  char k[32];
  int klen = snprintf(k, sizeof k, "user%012" PRIu64, key);
  kv_arg argv[2] = {{k, (size_t)klen}, {b->value, b->o.value_size}};
  s->phase = phase;
  s->update = update;
  s->start_ns = now_ns();
  int cmd = update ? KV_CMD_SET : KV_CMD_GET;
  int rc = c->cluster != NULL
               ? kv_cluster_client_call(c->cluster, cmd, update ? 2 : 1, argv,
                                        0, on_reply, s)
               : kv_client_call(c->client, cmd, update ? 2 : 1, argv, 0,
                                on_reply, s);
  if (rc < 0) {
    atomic_fetch_add_explicit(&b->errors, 1, memory_order_relaxed);
    slot_retire(s);
  }
}

static void on_reply(void *arg, int err, const kv_reply *reply) {
  slot *s = arg;
  conn *c = s->conn;
  bench *b = c->b;
  uint64_t done = now_ns();
  if (err < 0 || kv_reply_is_error(reply))
    atomic_fetch_add_explicit(&b->errors, 1, memory_order_relaxed);
  if (s->phase == PHASE_RUN) {
    hist_record(c->h, done - s->start_ns);
    *(s->update ? &c->updates : &c->reads) += 1;
    c->last_done_ns = done;
  }
  atomic_fetch_add_explicit(&b->completed, 1, memory_order_relaxed);
  if (err < 0)
    return slot_retire(s); /* the connection is gone */
  slot_issue(s);
}

static void conn_start(void *arg) {
  conn *c = arg;
  for (int i = 0; i < c->b->o.pipeline; i++)
    slot_issue(&c->slots[i]);
}

/* Starts every slot of every connection, on their loops. */
static int start_phase(bench *b, int phase) {
  atomic_store(&b->phase, phase);
  atomic_store(&b->active, b->o.connections * b->o.pipeline);
  for (int i = 0; i < b->o.connections; i++) {
    conn *c = &b->conns[i];
    weft_loop *loop = c->cluster != NULL ? kv_cluster_client_loop(c->cluster)
                                         : kv_client_loop(c->client);
    int rc = weft_loop_execute(loop, conn_start, c);
    if (rc < 0)
      return rc;
  }
  return 0;
}

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                        .tv_nsec = (long)(ns % 1000000000u)};
  nanosleep(&ts, NULL);
}

/* Waits until `deadline_ns` (0 = until every slot retired), printing a
 * progress line every second. */
static void wait_phase(bench *b, const char *what, uint64_t deadline_ns) {
  uint64_t start = now_ns(), next = start + 1000000000u;
  uint64_t last = atomic_load(&b->completed);
  for (;;) {
    uint64_t t = now_ns();
    if (interrupted ||
        (deadline_ns != 0 ? t >= deadline_ns : atomic_load(&b->active) == 0))
      return;
    if (t >= next) {
      uint64_t done = atomic_load(&b->completed);
      fprintf(stderr, "%s: %-7s %5.0f s  %10.0f ops/s  errors %" PRIu64 "\n",
              prog, what, (double)(t - start) / 1e9,
              (double)(done - last) * 1e9 / (double)(t - next + 1000000000u),
              (uint64_t)atomic_load(&b->errors));
      last = done;
      next = t + 1000000000u;
    }
    sleep_ns(1000000u);
  }
}

static void wait_retired(bench *b) {
  while (atomic_load(&b->active) > 0)
    sleep_ns(1000000u);
}

typedef struct result {
  hist h;
  double seconds;
  uint64_t reads, updates, errors;
  double load_seconds;
  uint64_t loaded;  /* records the load phase set */
  bool interrupted; /* SIGINT ended the run: what was measured until then */
} result;

static const char *dist_name(dist d) {
  return d == DIST_UNIFORM   ? "uniform"
         : d == DIST_ZIPFIAN ? "zipfian"
                             : "scrambled";
}

static void print_result(const bench *b, const char *uri, const result *r) {
  const bench_opts *o = &b->o;
  uint64_t ops = r->h.total;
  double rate = r->seconds > 0 ? (double)ops / r->seconds : 0;
  double us[5] = {hist_percentile(&r->h, 50) / 1e3,
                  hist_percentile(&r->h, 99) / 1e3,
                  hist_percentile(&r->h, 99.9) / 1e3, r->h.max / 1e3,
                  ops ? (double)r->h.sum / (double)ops / 1e3 : 0};
  if (o->json) {
    printf("{\"server\":\"%s\",\"workload\":\"%c\",\"distribution\":\"%s\","
           "\"records\":%" PRIu64 ",\"value_size\":%zu,\"connections\":%d,"
           "\"pipeline\":%d,\"load_seconds\":%.3f,\"seconds\":%.3f,"
           "\"operations\":%" PRIu64 ",\"reads\":%" PRIu64
           ",\"updates\":%" PRIu64 ",\"errors\":%" PRIu64
           ",\"ops_per_sec\":%.1f,\"latency_us\":{\"p50\":%.2f,"
           "\"p99\":%.2f,\"p99_9\":%.2f,\"max\":%.2f,\"mean\":%.2f},"
           "\"interrupted\":%s}\n",
           uri, o->workload, dist_name(o->distribution), o->records,
           o->value_size, o->connections, o->pipeline, r->load_seconds,
           r->seconds, ops, r->reads, r->updates, r->errors, rate, us[0], us[1],
           us[2], us[3], us[4], r->interrupted ? "true" : "false");
    return;
  }
  printf("server       %s\n", uri);
  printf("workload     %c (%s keys, %" PRIu64 " records, %zu-byte values)\n",
         o->workload, dist_name(o->distribution), o->records, o->value_size);
  printf("clients      %d connections x %d outstanding\n", o->connections,
         o->pipeline);
  if (r->load_seconds > 0)
    printf("load         %.2f s (%.0f sets/s)\n", r->load_seconds,
           (double)r->loaded / r->load_seconds);
  printf("run          %.2f s, %" PRIu64 " ops (%" PRIu64 " reads, %" PRIu64
         " updates), %" PRIu64 " errors%s\n",
         r->seconds, ops, r->reads, r->updates, r->errors,
         r->interrupted ? " (interrupted)" : "");
  printf("throughput   %.0f ops/s\n", rate);
  printf("latency us   p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  mean %.1f\n",
         us[0], us[1], us[2], us[3], us[4]);
}

/* The run's phases; stops early on SIGINT, once the requests in flight
 * completed. Returns the measured run's start (now when SIGINT came
 * before it), or 0 when a phase could not start. */
static uint64_t run_phases(bench *b, result *r) {
  const bench_opts *o = &b->o;
  uint64_t t1 = 0;
  if (o->load) {
    uint64_t t = now_ns();
    if (start_phase(b, PHASE_LOAD) < 0)
      return 0;
    wait_phase(b, "load", 0);
    r->load_seconds = (double)(now_ns() - t) / 1e9;
  }
  if (!interrupted) {
    uint64_t t0 = now_ns();
    if (start_phase(b, PHASE_WARMUP) < 0)
      return 0;
    wait_phase(b, "warmup", t0 + (uint64_t)(o->warmup * 1e9));
  }
  if (!interrupted) {
    t1 = now_ns();
    atomic_store(&b->phase, PHASE_RUN);
    wait_phase(b, "run",
               o->operations > 0 ? 0 : t1 + (uint64_t)(o->duration * 1e9));
  }
  atomic_store(&b->phase, PHASE_STOP);
  wait_retired(b);
  r->interrupted = interrupted;
  uint64_t loaded = atomic_load(&b->next_load);
  r->loaded = loaded < o->records ? loaded : o->records;
  return t1 != 0 ? t1 : now_ns();
}

/* The whole benchmark on connected clients. */
static int run_bench(bench *b, result *r) {
  const bench_opts *o = &b->o;
  uint64_t t1 = run_phases(b, r);
  if (t1 == 0)
    return WEFT_ECLOSED;
  /* The run ends with its last measured completion. */
  uint64_t end = t1;
  for (int i = 0; i < o->connections; i++) {
    conn *c = &b->conns[i];
    hist_merge(&r->h, c->h);
    r->reads += c->reads;
    r->updates += c->updates;
    if (c->last_done_ns > end)
      end = c->last_done_ns;
  }
  r->seconds = (double)(end - t1) / 1e9;
  r->errors = atomic_load(&b->errors);
  return 0;
}

static int connect_all(bench *b, weft_loop_group *group, const char *uri,
                       const weft_config *cfg) {
  kv_client_options co;
  kv_client_options_init(&co);
  co.channel = cfg->channel;
  kv_client_auth_apply(&b->auth, &co);
  char err[600];
  if (kv_client_tls_apply(&b->tls, uri, &co, err, sizeof err) < 0) {
    fprintf(stderr, "%s: %s\n", prog, err);
    kv_client_auth_clear(&b->auth);
    return WEFT_EINVAL;
  }
  for (int i = 0; i < b->o.connections; i++) {
    conn *c = &b->conns[i];
    c->b = b;
    c->rng = b->o.seed * 0x100000001B3ull + (uint64_t)i;
    c->h = calloc(1, sizeof *c->h);
    c->slots = calloc((size_t)b->o.pipeline, sizeof *c->slots);
    if (c->h == NULL || c->slots == NULL) {
      fprintf(stderr, "%s: out of memory\n", prog);
      return WEFT_ENOMEM;
    }
    for (int k = 0; k < b->o.pipeline; k++)
      c->slots[k].conn = c;
    int rc = b->o.cluster
                 ? kv_cluster_client_connect(&c->cluster, group, uri, &co)
                 : kv_sync_connect(&c->client, group, uri, &co);
    if (rc < 0) {
      fprintf(stderr, "%s: cannot connect to %s: %s\n", prog, uri,
              rc == WEFT_EACCES ? "refused (AUTH failed, or protected mode)"
                                : weft_strerror(rc));
      kv_client_auth_clear(&b->auth);
      kv_client_tls_release(&b->tls);
      return rc;
    }
  }
  kv_client_auth_clear(&b->auth);
  kv_client_tls_release(&b->tls); /* the clients hold their own */
  return 0;
}

static void free_conns(bench *b) {
  for (int i = 0; i < b->o.connections; i++) {
    if (b->conns[i].cluster != NULL)
      kv_cluster_client_close(b->conns[i].cluster);
    else if (b->conns[i].client != NULL)
      kv_sync_close(b->conns[i].client);
    free(b->conns[i].h);
    free(b->conns[i].slots);
  }
  free(b->conns);
}

/* ---- command line ---- */

static const char *const sections[] = {"loop", "transport", "client",
                                       "kv",   "kvbench",   NULL};

static weft_cli cli = {
    .prog = "weft-kvbench",
    .synopsis = "[options]",
    .about = "YCSB-style load for the KV service over weft RPC: loads "
             "[kvbench] records\nkeys, then runs workload A (50/50 "
             "read/update), B (95/5) or C (read only)\nfrom [kvbench] "
             "connections connections with [kvbench] pipeline requests\n"
             "outstanding each, and prints throughput and latency "
             "percentiles.",
    .flags = "  --connect URI           server (default [client] connect, "
             "127.0.0.1:7001)\n"
             "  --workload A|B|C        [kvbench] workload\n"
             "  --records N             [kvbench] records\n"
             "  --no-load               [kvbench] load = false: skip the "
             "load phase\n"
             "  --distribution D        [kvbench] distribution\n"
             "  --value-size BYTES      [kvbench] value_size\n"
             "  --connections N         [kvbench] connections\n"
             "  --pipeline M            [kvbench] pipeline\n"
             "  --duration S            [kvbench] duration\n"
             "  --operations N          [kvbench] operations\n"
             "  --warmup S              [kvbench] warmup\n"
             "  --seed N                [kvbench] seed\n"
             "  --json                  [kvbench] json = true\n"
             "  --cluster               [kvbench] cluster = true: learn "
             "the slot map and send\n"
             "                          each key to its node (Redis "
             "Cluster; MOVED, ASK followed)\n"
             "  -a, --pass PASSWORD     AUTH with it on every connection "
             "(visible to ps: prefer\n"
             "                          WEFT_KV_PASSWORD or [kv] password; "
             "else REDISCLI_AUTH)\n"
             "  --user USER             AUTH as this user ([kv] "
             "client_user)\n"
             "  --no-auth-warning       no warning for a password on the "
             "command line\n" KV_CLIENT_TLS_FLAGS_HELP,
    .examples = "weft-kvbench --workload C --duration 5\n"
                "weft-kvbench --tls --cacert ca.pem --connect 127.0.0.1:7002 "
                "--workload A\n"
                "weft-kvbench --connect uring://127.0.0.1:7001 -o "
                "kvbench.pipeline=64 --json",
    .sections = sections,
    .unread = kv_client_unread,
    .app = config_section};

typedef struct cli_flags {
  const char *connect;
  const char *keys[32], *values[32]; /* flags that are [kvbench] keys */
  int n;
} cli_flags;

/* Returns 0 to run, 1 when --help or --version was answered, -1 on an error
 * (printed). File, environment and -o first, then the flags: the last one
 * wins. */
static int configure(int argc, char **argv, weft_config *cfg, bench_opts *o,
                     kv_client_auth *auth, kv_client_tls *tls) {
  static const struct option longs[] = {
      {"connect", required_argument, NULL, 'C'},
      {"workload", required_argument, NULL, 'w'},
      {"records", required_argument, NULL, 'r'},
      {"no-load", no_argument, NULL, 'L'},
      {"distribution", required_argument, NULL, 'd'},
      {"value-size", required_argument, NULL, 'v'},
      {"connections", required_argument, NULL, 'n'},
      {"pipeline", required_argument, NULL, 'p'},
      {"duration", required_argument, NULL, 't'},
      {"operations", required_argument, NULL, 'N'},
      {"warmup", required_argument, NULL, 'W'},
      {"seed", required_argument, NULL, 's'},
      {"json", no_argument, NULL, 'j'},
      {"cluster", no_argument, NULL, 'K'},
      KV_CLIENT_AUTH_LONGOPTS,
      KV_CLIENT_TLS_LONGOPTS,
      WEFT_CLI_LONG_OPTS,
      {NULL, 0, NULL, 0}};
  static const struct {
    int opt;
    const char *key, *value; /* value NULL = the flag's argument */
  } keys[] = {{'w', "workload", NULL},     {'r', "records", NULL},
              {'d', "distribution", NULL}, {'v', "value_size", NULL},
              {'n', "connections", NULL},  {'p', "pipeline", NULL},
              {'t', "duration", NULL},     {'N', "operations", NULL},
              {'W', "warmup", NULL},       {'s', "seed", NULL},
              {'L', "load", "false"},      {'j', "json", "true"},
              {'K', "cluster", "true"}};
  cli_flags f = {0};
  weft_config_init(cfg);
  cfg->app_keys = kv_config_keys;
  snprintf(cfg->connect, sizeof cfg->connect, "%s", KV_DEFAULT_CONNECT);
  opts_init(o);
  static bench_config bc;
  bc = (bench_config){o, auth, tls};
  cli.app_arg = &bc;
  opterr = 0;
  int opt;
  while ((opt = getopt_long(argc, argv, ":" WEFT_CLI_OPTS "a:", longs, NULL)) !=
         -1) {
    int rc = weft_cli_option(&cli, opt, optarg);
    if (rc == 0)
      rc = kv_client_auth_option(auth, &cli, opt, optarg);
    if (rc == 0)
      rc = kv_client_tls_option(tls, &cli, opt, optarg);
    if (rc != 0) {
      if (rc < 0)
        return -1;
      continue;
    }
    if (opt == 'h')
      return weft_cli_help(&cli, cfg, stdout) == 0 ? 1 : -1;
    if (opt == 'V')
      return weft_cli_version(&cli, stdout) == 0 ? 1 : -1;
    if (opt == 'C') {
      f.connect = optarg;
      continue;
    }
    size_t i = 0;
    while (i < sizeof keys / sizeof keys[0] && keys[i].opt != opt)
      i++;
    if (i == sizeof keys / sizeof keys[0] || f.n == 32) {
      weft_cli_bad_option(&cli, opt, argv[optind - 1]);
      return -1;
    }
    f.keys[f.n] = keys[i].key;
    f.values[f.n++] = keys[i].value != NULL ? keys[i].value : optarg;
  }
  if (optind < argc) {
    weft_cli_usage_error(&cli, "unexpected argument '%s'", argv[optind]);
    return -1;
  }
  kv_client_auth_warn(auth);
  if (weft_cli_configure(&cli, cfg) < 0)
    return -1;
  for (int i = 0; i < f.n; i++) {
    char msg[256];
    if (set_opt(o, f.keys[i], f.values[i], msg, sizeof msg) < 0) {
      weft_cli_usage_error(&cli, "--%s %s", f.keys[i], msg);
      return -1;
    }
  }
  if (f.connect != NULL)
    snprintf(cfg->connect, sizeof cfg->connect, "%s", f.connect);
  return 0;
}

int main(int argc, char **argv) {
  weft_config cfg;
  bench b = {0};
  int c = configure(argc, argv, &cfg, &b.o, &b.auth, &b.tls);
  if (c != 0)
    return c > 0 ? 0 : 2;
  char uri[WEFT_CONFIG_URI_MAX + 32];
  if (weft_config_endpoint(&cfg, cfg.connect, uri, sizeof uri) < 0) {
    fprintf(stderr, "%s: address too long: %s\n", prog, cfg.connect);
    return 2;
  }
  if (b.o.distribution != DIST_UNIFORM)
    zipf_init(&b.z, b.o.records, ZIPF_THETA);
  b.value = malloc(b.o.value_size + 1);
  b.conns = calloc((size_t)b.o.connections, sizeof *b.conns);
  if (b.value == NULL || b.conns == NULL) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return 1;
  }
  uint64_t vs = b.o.seed;
  for (size_t i = 0; i < b.o.value_size; i++)
    b.value[i] = (uint8_t)('a' + splitmix64(&vs) % 26);
  weft_loop_group *group;
  int rc = weft_loop_group_new(&group, &cfg.loop);
  if (rc == 0 && (rc = weft_loop_group_start(group)) < 0)
    weft_loop_group_free(group);
  if (rc < 0) {
    fprintf(stderr, "%s: cannot start the loops: %s\n", prog,
            weft_strerror(rc));
    return 1;
  }
  catch_sigint();
  result *r = calloc(1, sizeof *r);
  rc = r == NULL ? WEFT_ENOMEM : connect_all(&b, group, uri, &cfg);
  if (rc == 0) {
    if ((rc = run_bench(&b, r)) == 0)
      print_result(&b, uri, r);
    else
      fprintf(stderr, "%s: %s\n", prog, weft_strerror(rc));
  }
  /* 128 + SIGINT, as a shell reports a command SIGINT stopped */
  int status = r != NULL && r->interrupted              ? 128 + SIGINT
               : rc < 0 || (r != NULL && r->errors > 0) ? 1
                                                        : 0;
  free_conns(&b);
  weft_loop_group_stop(group);
  weft_loop_group_join(group);
  weft_loop_group_free(group);
  free(r);
  free(b.value);
  return status;
}
