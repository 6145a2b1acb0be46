/* SPDX-License-Identifier: Apache-2.0 */
/* weft-echo: the smallest complete weft server and client.
 *
 *   weft-echo server [-c FILE] [-o section.key=value ...]
 *   weft-echo client [-c FILE] [-o ...]      ping-pong against a server
 *   weft-echo demo   [-c FILE] [-o ...]      both in one process
 *
 * The server's pipeline is one handler that writes back what it reads. The
 * client opens [echo] connections channels, each sending a message of
 * [echo] size bytes, waiting for all of it to come back, [echo] count times,
 * and prints round-trip percentiles. The transport is the one in the config
 * ([transport] name, or the scheme of [server] listen / [client] connect),
 * so `-o transport.name=uring` swaps it without a code change.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/weft.h>

/* ---- configuration: weft's sections plus [echo] ---- */

typedef struct echo_opts {
  long size;        /* bytes per message */
  long count;       /* round trips per connection */
  long connections; /* client channels */
} echo_opts;

static int parse_long(const char *v, long min, long max, long *out) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || n < min || n > max)
    return WEFT_EINVAL;
  *out = n;
  return 0;
}

static int echo_section(void *arg, const char *section, const char *key,
                        const char *value, char *err, size_t err_len) {
  echo_opts *o = arg;
  if (strcmp(section, "echo") != 0)
    return WEFT_ENOENT;
  long *field = strcmp(key, "size") == 0          ? &o->size
                : strcmp(key, "count") == 0       ? &o->count
                : strcmp(key, "connections") == 0 ? &o->connections
                                                  : NULL;
  if (field == NULL)
    return WEFT_ENOENT;
  long max = field == &o->size ? 16 << 20 : 100000000;
  if (parse_long(value, 1, max, field) < 0) {
    snprintf(err, err_len, "expected an integer from 1 to %ld", max);
    return WEFT_EINVAL;
  }
  return 0;
}

static const weft_config_key echo_keys[] = {
    {"echo", "size", "16", "bytes per message, an integer from 1 to 16777216"},
    {"echo", "count", "10000",
     "round trips per connection, an integer from 1 to 100000000"},
    {"echo", "connections", "1",
     "client channels, an integer from 1 to 100000000"},
    {NULL, NULL, NULL, NULL}};

static weft_cli cli = {
    .prog = "weft-echo",
    .synopsis = "[-c FILE] [-o section.key=value ...] server|client|demo",
    .about = "The smallest complete weft server and client. server: echo "
             "what arrives on\n[server] listen. client: ping-pong [echo] "
             "count messages of [echo] size bytes\non [echo] connections "
             "channels against [client] connect, and print round-trip\n"
             "percentiles. demo: both in one process, on a free loopback "
             "port.",
    .examples = "weft-echo demo -o echo.count=100000\n"
                "weft-echo server -o server.listen=uring://127.0.0.1:7000 & "
                "weft-echo client -o client.connect=uring://127.0.0.1:7000",
    .app = echo_section};

/* Options, then file, environment and -o; `*mode` gets the positional
 * mode. Returns 0 to run, 1 when --help or --version was answered, -1 on an
 * error (printed). */
static int load_config(int argc, char **argv, weft_config *cfg, echo_opts *o,
                       const char **mode) {
  weft_config_init(cfg);
  cfg->app_keys = echo_keys;
  *o = (echo_opts){.size = 16, .count = 10000, .connections = 1};
  cli.app_arg = o;
  int first = weft_cli_parse(&cli, cfg, argc, argv);
  if (first <= 0)
    return first == 0 ? 1 : -1;
  if (first + 1 != argc) {
    weft_cli_usage_error(&cli, first == argc ? "no mode given"
                                             : "more than one mode given");
    return -1;
  }
  *mode = argv[first];
  return 0;
}

/* ---- the server: one handler ---- */

static void echo_read(weft_ctx *ctx, void *msg) {
  weft_ctx_write(ctx, msg, WEFT_PROMISE_NONE); /* the buffer goes back out */
}

static void echo_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static const weft_handler echo_handler = {.name = "echo",
                                          .channel_read = echo_read,
                                          .channel_read_complete =
                                              echo_read_complete};

static void server_init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "echo", &echo_handler,
                         NULL);
}

static int start_server(weft_loop_group *group, const weft_config *cfg,
                        weft_server **srv) {
  weft_endpoint ep;
  int rc = weft_config_endpoint_parse(cfg, cfg->listen, &ep, NULL, 0);
  if (rc < 0) /* the config layer checked it: not reached */
    return rc;
  weft_server_bootstrap sb = {.group = group, .child_init = server_init};
  weft_config_server_bootstrap(cfg, &sb);
  return weft_server_bind_endpoint(srv, &sb, &ep); /* a failure is logged */
}

/* ---- the client: ping-pong per channel ---- */

typedef struct client_run {
  echo_opts opts;
  pthread_mutex_t lock;
  pthread_cond_t done_cond;
  long done;       /* channels finished */
  long failed;     /* channels that failed */
  uint64_t *rtt;   /* all round trips, ns: connections * count */
  const char *uri; /* the server's address, for messages */
} client_run;

typedef struct client_conn {
  client_run *run;
  long index;
  long sent;      /* round trips started */
  size_t pending; /* bytes of the current echo still to come */
  uint64_t t0;
} client_conn;

static void conn_finish(client_conn *c, bool ok) {
  client_run *run = c->run;
  pthread_mutex_lock(&run->lock);
  run->done++;
  run->failed += !ok;
  pthread_cond_signal(&run->done_cond);
  pthread_mutex_unlock(&run->lock);
}

static void send_ping(weft_ctx *ctx, client_conn *c) {
  weft_channel *ch = weft_ctx_channel(ctx);
  weft_buf *b = weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)),
                               (size_t)c->run->opts.size);
  if (b == NULL) {
    weft_ctx_fire_exception_caught(ctx, WEFT_ENOMEM, "ping buffer");
    return;
  }
  memset(b->base, 'p', (size_t)c->run->opts.size);
  b->writer_index = (size_t)c->run->opts.size;
  c->pending = (size_t)c->run->opts.size;
  c->t0 = weft_now_ns();
  weft_ctx_write_and_flush(ctx, b, WEFT_PROMISE_NONE);
}

static void client_active(weft_ctx *ctx) {
  send_ping(ctx, weft_ctx_state(ctx));
}

static void client_read(weft_ctx *ctx, void *msg) {
  client_conn *c = weft_ctx_state(ctx);
  weft_buf *b = msg;
  size_t n = weft_buf_readable(b);
  weft_buf_release(b);
  c->pending = n >= c->pending ? 0 : c->pending - n;
  if (c->pending > 0)
    return;
  uint64_t rtt = weft_now_ns() - c->t0;
  c->run->rtt[c->index * c->run->opts.count + c->sent] = rtt;
  if (++c->sent < c->run->opts.count) {
    send_ping(ctx, c);
    return;
  }
  conn_finish(c, true);
  c->run = NULL; /* finished: inactive must not count it again */
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static void client_inactive(weft_ctx *ctx) {
  client_conn *c = weft_ctx_state(ctx);
  if (c->run != NULL) {
    fprintf(stderr, "weft-echo: connection %ld closed early\n", c->index);
    conn_finish(c, false);
    c->run = NULL;
  }
  weft_ctx_fire_channel_inactive(ctx);
}

static void client_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler client_handler = {.name = "ping",
                                            .channel_active = client_active,
                                            .channel_read = client_read,
                                            .channel_inactive = client_inactive,
                                            .handler_removed = client_removed};

static void client_init(weft_channel *ch, void *arg) {
  client_conn *c = arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "ping", &client_handler, c);
}

static void client_connected(weft_channel *ch, int status, void *arg) {
  client_conn *c = arg;
  if (status == 0)
    return;
  fprintf(stderr, "weft-echo: connect to %s: %s\n", c->run->uri,
          weft_strerror(status));
  conn_finish(c, false);
  c->run = NULL;
  if (ch == NULL) /* no channel, so no handler_removed will free c */
    free(c);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Prints the round trips' percentiles and their rate over `elapsed_ns`
 * (from the first connect to the last echo, so connecting is included). */
static void print_rtts(uint64_t *rtt, size_t n, const echo_opts *o,
                       const char *transport, int busy_poll_us,
                       uint64_t elapsed_ns) {
  qsort(rtt, n, sizeof *rtt, cmp_u64);
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += (double)rtt[i];
  printf("weft-echo: %zu round trips of %ld B over %s, %ld connection(s), "
         "busy_poll_us=%d\n",
         n, o->size, transport, o->connections, busy_poll_us);
  printf("  rtt us: p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f  mean %.1f\n",
         rtt[n / 2] / 1e3, rtt[n * 99 / 100] / 1e3, rtt[n * 999 / 1000] / 1e3,
         rtt[n - 1] / 1e3, sum / (double)n / 1e3);
  printf("  rate: %.0f round trips/s over %.3f s (connects included)\n",
         (double)n / ((double)elapsed_ns / 1e9), (double)elapsed_ns / 1e9);
}

static int run_client(weft_loop_group *group, const weft_config *cfg,
                      const echo_opts *o, const weft_endpoint *ep) {
  char uri[WEFT_CONFIG_URI_MAX + 16];
  weft_endpoint_format(ep, uri, sizeof uri);
  client_run run = {.opts = *o,
                    .uri = uri,
                    .lock = PTHREAD_MUTEX_INITIALIZER,
                    .done_cond = PTHREAD_COND_INITIALIZER};
  run.rtt = calloc((size_t)(o->connections * o->count), sizeof *run.rtt);
  if (run.rtt == NULL)
    return WEFT_ENOMEM;
  uint64_t t0 = weft_now_ns();
  for (long i = 0; i < o->connections; i++) {
    client_conn *c = calloc(1, sizeof *c);
    *c = (client_conn){.run = &run, .index = i};
    weft_bootstrap b = {.group = group,
                        .init = client_init,
                        .init_arg = c,
                        .options = cfg->channel,
                        .on_connect = client_connected,
                        .connect_arg = c};
    if (weft_bootstrap_connect_endpoint(&b, ep) < 0) {
      free(c);
      run.done++, run.failed++;
    }
  }
  pthread_mutex_lock(&run.lock);
  while (run.done < o->connections)
    pthread_cond_wait(&run.done_cond, &run.lock);
  pthread_mutex_unlock(&run.lock);
  if (run.failed == 0)
    print_rtts(run.rtt, (size_t)(o->connections * o->count), o, uri,
               cfg->loop.busy_poll_us, weft_now_ns() - t0);
  free(run.rtt);
  return run.failed == 0 ? 0 : WEFT_ECONNABORTED;
}

/* ---- main ---- */

int main(int argc, char **argv) {
  weft_config cfg;
  echo_opts opts;
  const char *mode = NULL;
  int c = load_config(argc, argv, &cfg, &opts, &mode);
  if (c != 0)
    return c > 0 ? 0 : 2;
  bool server = strcmp(mode, "server") == 0, client = !strcmp(mode, "client"),
       demo = !strcmp(mode, "demo");
  if (!server && !client && !demo) {
    weft_cli_usage_error(&cli, "unknown mode '%s'", mode);
    return 2;
  }
  /* SIGINT and SIGTERM end the server: blocked as the loops start, taken
   * by weft_cli_wait_stop below (weft/cli.h says why not a handler). */
  sigset_t stop;
  weft_loop_group *group;
  int rc = weft_cli_loops_start(&cli, &cfg.loop, server ? &stop : NULL, &group);
  if (rc < 0)
    return 1;
  weft_server *srv = NULL;
  bool config_error = false;
  char uri[WEFT_CONFIG_URI_MAX + 16];
  weft_endpoint ep = {.port = 0}; /* [client] connect, or the demo server */
  if (server || demo) {
    if (demo) /* any free port, on loopback */
      weft_config_set(&cfg, "demo", "server", "listen", "127.0.0.1:0", NULL,
                      NULL, uri, sizeof uri);
    if ((rc = start_server(group, &cfg, &srv)) < 0) {
      /* the setting to change: a configuration error, status 2 */
      fprintf(stderr, "weft-echo: [server] listen = %s: %s\n", cfg.listen,
              weft_strerror(rc));
      config_error = true;
      goto out;
    }
    weft_server_address(srv, uri, sizeof uri);
    fprintf(stderr, "weft-echo: listening on %s\n", uri);
    weft_endpoint_parse(uri, &ep, NULL, 0); /* the bound port, for demo */
  } else {
    weft_config_endpoint_parse(&cfg, cfg.connect, &ep, NULL, 0);
  } /* (an endpoint that did not parse is refused by the connect) */
  if (server) {
    weft_cli_wait_stop(&stop);
    weft_cli_log_loop_stats(&cli, group);
  } else
    rc = run_client(group, &cfg, &opts, &ep);
out:
  if (srv != NULL)
    weft_server_close(srv);
  weft_loop_group_stop(group);
  int join = weft_loop_group_join(group);
  weft_loop_group_free(group);
  return config_error ? 2 : rc < 0 || join < 0 ? 1 : 0;
}
