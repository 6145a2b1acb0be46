/* SPDX-License-Identifier: Apache-2.0 */
/* bench_options.c: what weft-bench's options mean, apart from how the
 * command line spells them (bench_main.c): bench_opt and its defaults,
 * the comma lists (patterns, sizes, rate points), the configurations
 * (raw-busy, raw-block, raw-tls-busy, raw-tls-block,
 * TRANSPORT[+tls][:BUSY_POLL_US], or the weft config file's), and the checks
 * before the run. Main thread, before the run. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

bench_opts bench_opt;

void bench_opts_defaults(void) {
  bench_opts *o = &bench_opt;
  o->reps = 3;
  o->iters = 20000;
  o->warmup = 2000;
  o->seconds = 0.5;
  o->warm_seconds = 0.1;
  o->rate_size = 16;
  o->idle_conns = 100;
  o->idle_seconds = 3;
  o->server_loops = 1;
  o->progress = isatty(STDERR_FILENO);
  snprintf(o->host, sizeof o->host, "127.0.0.1");
  for (int p = 0; p < P_N; p++)
    o->patterns[p] = true;
  static const size_t sizes[] = {16, 256, 4096, 65536, 1048576};
  o->n_sizes = 5;
  memcpy(o->sizes, sizes, sizeof sizes);
  o->rates[0] = (rate_point){1, 64};
  o->rates[1] = (rate_point){4, 16};
  o->n_rates = 2;
}

size_t bench_parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k')
    v *= 1024, end++;
  else if (*end == 'M' || *end == 'm')
    v *= 1048576, end++;
  if (end == s || *end != '\0' || v < 1 || v > 16 * 1048576.0)
    bench_fail("bad size %s", s);
  return (size_t)v;
}

long bench_parse_long(const char *what, const char *s, long min, long max) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || errno != 0 || v < min || v > max) {
    fprintf(stderr,
            "weft-bench: %s: \"%s\" is not a whole number from %ld "
            "to %ld\n",
            what, s, min, max);
    exit(2);
  }
  return v;
}

double bench_parse_seconds(const char *what, const char *s, double min,
                           double max) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || !(v >= min && v <= max)) {
    fprintf(stderr,
            "weft-bench: %s: \"%s\" is not a number of seconds "
            "from %g to %g\n",
            what, s, min, max);
    exit(2);
  }
  return v;
}

static void split(const char *list, void (*each)(const char *item)) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save))
    each(tok);
}

static void each_pattern(const char *s) {
  for (int p = 0; p < P_N; p++)
    if (strcmp(s, bench_patterns[p]->name) == 0) {
      bench_opt.patterns[p] = true;
      return;
    }
  bench_fail("unknown pattern %s", s);
}

void bench_opts_patterns(const char *list) {
  memset(bench_opt.patterns, 0, sizeof bench_opt.patterns);
  split(list, each_pattern);
}

static void each_size(const char *s) {
  if (bench_opt.n_sizes == BENCH_MAX_SIZES)
    bench_fail("too many sizes (at %s)", s);
  bench_opt.sizes[bench_opt.n_sizes++] = bench_parse_size(s);
}

void bench_opts_sizes(const char *list) {
  bench_opt.n_sizes = 0;
  split(list, each_size);
}

static void each_rate(const char *s) {
  int c = 0, w = 0;
  if (bench_opt.n_rates == BENCH_MAX_RATES || sscanf(s, "%dx%d", &c, &w) != 2 ||
      c < 1 || w < 1 || c > 1000)
    bench_fail("bad rate point %s (CONNSxWINDOW)", s);
  bench_opt.rates[bench_opt.n_rates++] = (rate_point){c, w};
}

void bench_opts_rates(const char *list) {
  bench_opt.n_rates = 0;
  split(list, each_rate);
}

void bench_opts_exclude(const char *item) {
  if (bench_opt.n_excludes == BENCH_MAX_CONFIGS || strchr(item, ':') == NULL)
    bench_fail("bad -x %s (TRANSPORT:PATTERN, at most 16)", item);
  snprintf(bench_opt.excludes[bench_opt.n_excludes++],
           sizeof bench_opt.excludes[0], "%s", item);
}

bool bench_opts_role(const char *role) {
  if (strcmp(role, "server") == 0)
    bench_opt.role = ROLE_SERVER;
  else if (strcmp(role, "client") == 0)
    bench_opt.role = ROLE_CLIENT;
  else if (strcmp(role, "both") == 0)
    bench_opt.role = ROLE_BOTH;
  else
    return false;
  return true;
}

/* ---- configurations ---- */

/* The raw setups: plain sockets or OpenSSL over them, spinning or
 * blocking. */
static const struct raw_setup {
  const char *name;
  bool busy, tls;
} raw_setups[] = {{"raw-busy", true, false},
                  {"raw-block", false, false},
                  {"raw-tls-busy", true, true},
                  {"raw-tls-block", false, true}};

/* Fills cf when spec names a raw setup; false otherwise. */
static bool add_raw_config(bench_config *cf, const char *spec) {
  for (size_t i = 0; i < sizeof raw_setups / sizeof raw_setups[0]; i++) {
    const struct raw_setup *r = &raw_setups[i];
    if (strcmp(spec, r->name) != 0)
      continue;
    cf->raw = true;
    cf->busy = r->busy;
    cf->tls = r->tls;
    cf->busy_poll_us = cf->busy ? -1 : 0;
    snprintf(cf->mode, sizeof cf->mode, "%s", spec);
    snprintf(cf->label, sizeof cf->label, "%s", spec);
    snprintf(cf->transport, sizeof cf->transport, "tcp");
    return true;
  }
  return false;
}

static void add_config(const char *spec, int default_bp) {
  if (bench_opt.n_configs == BENCH_MAX_CONFIGS)
    bench_fail("too many configurations (at %s)", spec);
  bench_config *cf = &bench_opt.configs[bench_opt.n_configs++];
  memset(cf, 0, sizeof *cf);
  if (add_raw_config(cf, spec))
    return;
  const char *colon = strchr(spec, ':');
  size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
  static const char tls[] = "+tls";
  if (len > sizeof tls - 1 &&
      memcmp(spec + len - (sizeof tls - 1), tls, sizeof tls - 1) == 0) {
    cf->tls = true;
    len -= sizeof tls - 1;
  }
  if (len == 0 || len >= sizeof cf->transport || memchr(spec, '+', len))
    bench_fail("bad configuration %s (TRANSPORT[+tls][:BUSY_POLL_US])", spec);
  memcpy(cf->transport, spec, len);
  /* -1 spins for ever; the bound is weft's [loop] busy_poll_us range. */
  cf->busy_poll_us = colon ? (int)bench_parse_long("-S busy-poll window (µs)",
                                                   colon + 1, -1, 1000000)
                           : default_bp;
  snprintf(cf->mode, sizeof cf->mode, "weft");
  char name[sizeof cf->transport + 4];
  snprintf(name, sizeof name, "%s%s", cf->transport, cf->tls ? "+tls" : "");
  snprintf(cf->label, sizeof cf->label, "%s bp=%d", name, cf->busy_poll_us);
}

/* No -S: the raw floors, and the config's transport at its window and 0. */
static void add_default_configs(const weft_config *cfg) {
  char spec[40];
  add_config("raw-busy", 0);
  add_config("raw-block", 0);
  snprintf(spec, sizeof spec, "%s:%d", cfg->transport, cfg->loop.busy_poll_us);
  add_config(spec, 0);
  if (cfg->loop.busy_poll_us != 0) {
    snprintf(spec, sizeof spec, "%s:0", cfg->transport);
    add_config(spec, 0);
  }
}

void bench_opts_configs(const char *const *specs, int n,
                        const weft_config *cfg) {
  for (int i = 0; i < n; i++)
    add_config(specs[i], cfg->loop.busy_poll_us);
  if (n == 0)
    add_default_configs(cfg);
  for (int i = 0; i < bench_opt.n_configs; i++)
    bench_opt.configs[i].busy_poll_adaptive = cfg->loop.busy_poll_adaptive;
}

/* The raw-tls setups measure pingpong and stream only (their server takes
 * one connection at a time); a client asked for any other pattern is
 * refused up front (a server measures nothing). */
static void check_raw_tls_patterns(void) {
  if (bench_opt.role == ROLE_SERVER)
    return;
  bool others = false;
  for (int p = 0; p < P_N; p++)
    others |= bench_opt.patterns[p] && p != P_PINGPONG && p != P_STREAM;
  for (int i = 0; i < bench_opt.n_configs && others; i++)
    if (bench_opt.configs[i].raw && bench_opt.configs[i].tls)
      bench_fail("setup %s measures the pingpong and stream patterns only "
                 "(-p pingpong,stream)",
                 bench_opt.configs[i].label);
}

bool bench_opts_check(void) {
  const bench_opts *o = &bench_opt;
  if (o->reps < 1 || o->reps > BENCH_MAX_REPS || o->iters < 1 ||
      o->warmup < 0 || o->seconds <= 0 || o->warm_seconds < 0 ||
      o->idle_conns < 1 || o->idle_seconds <= 0 || o->port < 0 ||
      o->port > 65535 || o->server_loops < 1 || o->server_loops > 64)
    return false;
  if (o->role != ROLE_BOTH && o->n_configs != 1)
    bench_fail("%s", "--role server/client takes exactly one -S setup");
  /* a server may take any free port: it prints the one it got */
  if (o->role == ROLE_CLIENT && o->port == 0)
    bench_fail("%s", "--role client needs --port");
  /* without the hello a server can only echo */
  if (o->plain_echo && (o->role == ROLE_BOTH ||
                        (o->role == ROLE_CLIENT &&
                         (o->patterns[P_STREAM] || o->patterns[P_CONNECT]))))
    bench_fail("%s", "--plain-echo is for --role server, or --role client "
                     "with the echoing patterns (-p pingpong,bidir,rate,idle)");
  for (int i = 0; i < o->n_configs; i++)
    if (o->configs[i].tls && o->tls_certs == NULL)
      bench_fail("setup %s needs --tls-certs DIR (ca.pem, server.pem, "
                 "server.key: tests/tls/make-certs.sh DIR makes them)",
                 o->configs[i].label);
  check_raw_tls_patterns();
  return true;
}
