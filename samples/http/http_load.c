/* SPDX-License-Identifier: Apache-2.0 */
/* weft-http-load: drives any HTTP/1.1 server with weft's HTTP client codec.
 *
 *   weft-http-load [-c FILE] [-o section.key=value ...]
 *
 * [load] connections channels to [client] connect each send GET [load]
 * path (Host: [load] host), keeping [load] pipeline requests in flight,
 * until [load] requests responses came back in all (or [load] seconds
 * passed). Prints the rate, latency percentiles (from a request's write to
 * its response's end) and the responses that were not 2xx; exits 1 when a
 * connection failed or a response was not 2xx.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

typedef struct load_opts {
  long connections, pipeline, requests;
  double seconds; /* 0 = no time limit */
  char path[1024];
  char host[256];
} load_opts;

static int parse_long(const char *v, long min, long max, long *out) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno != 0 || n < min || n > max)
    return WEFT_EINVAL;
  *out = n;
  return 0;
}

static int load_section(void *arg, const char *section, const char *key,
                        const char *value, char *err, size_t err_len) {
  load_opts *o = arg;
  if (strcmp(section, "load") != 0)
    return WEFT_ENOENT;
  if (strcmp(key, "path") == 0 || strcmp(key, "host") == 0) {
    char *dst = key[0] == 'p' ? o->path : o->host;
    size_t cap = key[0] == 'p' ? sizeof o->path : sizeof o->host;
    if (strlen(value) >= cap || (key[0] == 'p' && value[0] != '/')) {
      snprintf(err, err_len, "%s",
               key[0] == 'p' ? "a path starting with /"
                             : "a host of at most 255 "
                               "bytes");
      return WEFT_EINVAL;
    }
    strcpy(dst, value);
    return 0;
  }
  if (strcmp(key, "seconds") == 0) {
    char *end;
    double s = strtod(value, &end);
    if (*value == '\0' || *end != '\0' || !(s >= 0 && s <= 86400)) {
      snprintf(err, err_len, "a number of seconds from 0 to 86400");
      return WEFT_EINVAL;
    }
    o->seconds = s;
    return 0;
  }
  long *field = strcmp(key, "connections") == 0 ? &o->connections
                : strcmp(key, "pipeline") == 0  ? &o->pipeline
                : strcmp(key, "requests") == 0  ? &o->requests
                                                : NULL;
  if (field == NULL)
    return WEFT_ENOENT;
  long max = field == &o->pipeline ? 64 : 100000000;
  if (parse_long(value, 1, max, field) < 0) {
    snprintf(err, err_len, "an integer from 1 to %ld", max);
    return WEFT_EINVAL;
  }
  return 0;
}

static const weft_config_key load_keys[] = {
    {"load", "connections", "1", "channels, an integer from 1 to 100000000"},
    {"load", "pipeline", "1",
     "requests in flight per channel, an integer from 1 to 64"},
    {"load", "requests", "10000",
     "responses to wait for in all, an integer from 1 to 100000000"},
    {"load", "seconds", "0", "stop after this long, 0 = no limit"},
    {"load", "path", "/plaintext", "the request-target, starting with /"},
    {"load", "host", "localhost", "the Host header"},
    {NULL, NULL, NULL, NULL}};

static weft_cli cli = {
    .prog = "weft-http-load",
    .synopsis = "[-c FILE] [-o section.key=value ...]",
    .about = "Drives an HTTP/1.1 server with weft's HTTP client codec: [load] "
             "connections\nchannels to [client] connect, [load] pipeline "
             "requests in flight on each,\nuntil [load] requests responses "
             "came back; prints the rate and latencies.",
    .examples = "weft-http-load -o client.connect=127.0.0.1:8080 -o "
                "load.connections=16 -o load.requests=100000\n"
                "weft-http-load -o client.connect=uring://127.0.0.1:8080 -o "
                "load.pipeline=16 -o load.path=/json",
    .app = load_section};

/* ---- the run ---- */

typedef struct run {
  load_opts o;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  long done, failed; /* channels */
  long started;      /* requests claimed, under lock */
  long bad;          /* responses not 2xx */
  uint64_t deadline; /* weft_now_ns, 0 = none */
  uint64_t *lat;     /* ns, one per response, `count` so far */
  long count;
} run;

typedef struct conn {
  run *r;
  uint64_t sent_at[64]; /* a ring: requests in flight, oldest first */
  int head, inflight;
  bool finished;
} conn;

static bool claim(run *r) {
  pthread_mutex_lock(&r->lock);
  bool ok = r->started < r->o.requests &&
            (r->deadline == 0 || weft_now_ns() < r->deadline);
  r->started += ok;
  pthread_mutex_unlock(&r->lock);
  return ok;
}

static void finish(conn *c, bool ok) {
  if (c->finished)
    return;
  c->finished = true;
  pthread_mutex_lock(&c->r->lock);
  c->r->done++;
  c->r->failed += !ok;
  pthread_cond_signal(&c->r->cond);
  pthread_mutex_unlock(&c->r->lock);
}

static void send_more(weft_ctx *ctx, conn *c) {
  while (c->inflight < c->r->o.pipeline && claim(c->r)) {
    weft_http_client_request *q =
        weft_http_client_request_new("GET", c->r->o.path, c->r->o.host);
    if (q == NULL) {
      weft_ctx_fire_exception_caught(ctx, WEFT_ENOMEM, "request");
      return;
    }
    c->sent_at[(c->head + c->inflight++) % 64] = weft_now_ns();
    weft_ctx_write(ctx, q, WEFT_PROMISE_NONE);
  }
  weft_ctx_flush(ctx);
  if (c->inflight == 0) {
    finish(c, true);
    weft_ctx_close(ctx, WEFT_PROMISE_NONE);
  }
}

static void load_active(weft_ctx *ctx) { send_more(ctx, weft_ctx_state(ctx)); }

static void load_read(weft_ctx *ctx, void *msg) {
  conn *c = weft_ctx_state(ctx);
  if (weft_msg_is(msg, &weft_http_response_head_type)) {
    int status = ((weft_http_response_head *)msg)->status;
    if (status < 200 || status > 299) {
      pthread_mutex_lock(&c->r->lock);
      c->r->bad++;
      pthread_mutex_unlock(&c->r->lock);
    }
  }
  bool end = weft_msg_is(msg, &weft_http_end_type);
  weft_msg_release(msg);
  if (!end || c->inflight == 0)
    return;
  uint64_t lat = weft_now_ns() - c->sent_at[c->head];
  c->head = (c->head + 1) % 64;
  c->inflight--;
  pthread_mutex_lock(&c->r->lock);
  c->r->lat[c->r->count++] = lat;
  pthread_mutex_unlock(&c->r->lock);
  send_more(ctx, c);
}

static void load_inactive(weft_ctx *ctx) {
  conn *c = weft_ctx_state(ctx);
  if (!c->finished)
    fprintf(stderr,
            "weft-http-load: a connection closed with %d requests "
            "in flight\n",
            c->inflight);
  finish(c, false);
  weft_ctx_fire_channel_inactive(ctx);
}

static void load_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler load_handler = {.name = "load",
                                          .channel_active = load_active,
                                          .channel_read = load_read,
                                          .channel_inactive = load_inactive,
                                          .handler_removed = load_removed};

static void load_init(weft_channel *ch, void *arg) {
  weft_pipeline *p = weft_channel_pipeline(ch);
  weft_http_client_codec_add_last(p, "http", NULL);
  weft_pipeline_add_last(p, "load", &load_handler, arg);
}

static void load_connected(weft_channel *ch, int status, void *arg) {
  conn *c = arg;
  if (status == 0)
    return;
  fprintf(stderr, "weft-http-load: connect: %s\n", weft_strerror(status));
  finish(c, false);
  if (ch == NULL)
    free(c);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void report(run *r, const char *uri, uint64_t elapsed) {
  long n = r->count;
  printf("weft-http-load: %ld responses from %s%s, %ld connection(s), "
         "pipeline %ld, %ld not 2xx\n",
         n, uri, r->o.path, r->o.connections, r->o.pipeline, r->bad);
  if (n == 0)
    return;
  qsort(r->lat, (size_t)n, sizeof *r->lat, cmp_u64);
  printf("  latency us: p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n",
         r->lat[n / 2] / 1e3, r->lat[n * 99 / 100] / 1e3,
         r->lat[n * 999 / 1000] / 1e3, r->lat[n - 1] / 1e3);
  printf("  rate: %.0f requests/s over %.3f s\n",
         (double)n / ((double)elapsed / 1e9), (double)elapsed / 1e9);
}

int main(int argc, char **argv) {
  weft_config cfg;
  weft_config_init(&cfg);
  cfg.app_keys = load_keys;
  run r = {.o = {.connections = 1,
                 .pipeline = 1,
                 .requests = 10000,
                 .path = "/plaintext",
                 .host = "localhost"},
           .lock = PTHREAD_MUTEX_INITIALIZER,
           .cond = PTHREAD_COND_INITIALIZER};
  cli.app_arg = &r.o;
  int first = weft_cli_parse(&cli, &cfg, argc, argv);
  if (first <= 0)
    return first == 0 ? 0 : 2;
  if (first != argc) {
    weft_cli_usage_error(&cli, "unexpected argument '%s'", argv[first]);
    return 2;
  }
  r.lat = calloc((size_t)r.o.requests, sizeof *r.lat);
  if (r.lat == NULL) {
    fprintf(stderr, "weft-http-load: latencies: %s\n",
            weft_strerror(WEFT_ENOMEM));
    return 1;
  }
  weft_loop_group *group;
  if (weft_cli_loops_start(&cli, &cfg.loop, NULL, &group) < 0)
    return 1;
  char uri[WEFT_CONFIG_URI_MAX + 16];
  weft_endpoint ep; /* parsed once; the text is for the report */
  if (weft_config_endpoint_parse(&cfg, cfg.connect, &ep, uri, sizeof uri) < 0) {
    fprintf(stderr, "weft-http-load: [client] connect: %s\n", uri);
    return 2; /* the config layer checked it: not reached */
  }
  weft_endpoint_format(&ep, uri, sizeof uri);
  uint64_t t0 = weft_now_ns();
  if (r.o.seconds > 0)
    r.deadline = t0 + (uint64_t)(r.o.seconds * 1e9);
  for (long i = 0; i < r.o.connections; i++) {
    conn *c = calloc(1, sizeof *c);
    if (c == NULL) {
      r.done++, r.failed++;
      continue;
    }
    c->r = &r;
    weft_bootstrap b = {.group = group,
                        .init = load_init,
                        .init_arg = c,
                        .options = cfg.channel,
                        .on_connect = load_connected,
                        .connect_arg = c};
    if (weft_bootstrap_connect_endpoint(&b, &ep) < 0) {
      free(c);
      r.done++, r.failed++;
    }
  }
  pthread_mutex_lock(&r.lock);
  while (r.done < r.o.connections)
    pthread_cond_wait(&r.cond, &r.lock);
  pthread_mutex_unlock(&r.lock);
  report(&r, uri, weft_now_ns() - t0);
  weft_loop_group_stop(group);
  weft_loop_group_join(group);
  weft_loop_group_free(group);
  free(r.lat);
  return r.failed == 0 && r.bad == 0 ? 0 : 1;
}
