/* SPDX-License-Identifier: Apache-2.0 */
/* A thousand UCX connections on a server of two loops, over the UCX
 * settings of the environment (tests/CMakeLists.txt registers it over tcp
 * and over shared memory).
 *
 * The server runs in a child process (forked before this process touches
 * UCX, so each process has its own UCX context: UCX 1.13 can abort when
 * one process opens and closes connections on several workers at once,
 * docs/transports/ucx.md), with two loops; the clients run on one loop of
 * this process. Every connection echoes a message, stays idle, then echoes
 * again. Printed: the time to connect them all, the server's RSS per
 * connection, its idle CPU (which includes weft's keepalive PINGs) and the
 * channels on each server loop. Asserted: every connect and echo, both
 * loops hold a fair share (the spreading REDIRECT of the UCX transport),
 * the idle server under 10% of a core, and a server that stops without a
 * leak.
 *
 * 1000 connections, times WEFT_TEST_SCALE, and a quarter of that in a
 * sanitizer build (ASan's shadow memory and UCX's many small allocations
 * make the full count slow there); the printed line says which.
 */
#include "harness.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/pipeline.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define MSG 64       /* bytes of every message, all the client's tag */
#define INFLIGHT 64  /* connects in progress at once */
#define IDLE_MS 5000 /* the idle CPU's window */

/* A started group of `n` loops. */
static weft_loop_group *loops(const char *name, int n) {
  weft_loop_options opts;
  weft_loop_options_init(&opts);
  opts.n_loops = n;
  opts.name = name;
  /* The 2-loop server pins its loops, as docs/transports/ucx.md advises on
   * UCX 1.13 ("Many workers in one process"): unpinned, this server hit
   * the library's async abort in 2 of 3 CI runs, pinned in 0 of 6. Loops
   * are not pinned by default (issue 32). */
  opts.pin = n > 1;
  weft_loop_group *g;
  if (weft_loop_group_new(&g, &opts) != 0 || weft_loop_group_start(g) != 0)
    return NULL;
  return g;
}

/* ---- the server (child process) ----
 * Echoes every message and counts the channels each of its two loops
 * took. Writes its address to `out`; then, for each 'q' read from `in`,
 * writes "<loop 0> <loop 1>\n"; at EOF it stops and exits 0 if nothing
 * leaked. No Check asserts here (a child of a check). */

static weft_loop_group *srv_group;
static atomic_int srv_on_loop[2];

static void echo_active(weft_ctx *ctx) {
  weft_loop *l = weft_channel_loop(weft_ctx_channel(ctx));
  atomic_fetch_add(&srv_on_loop[l == weft_loop_group_get(srv_group, 0) ? 0 : 1],
                   1);
}

static const weft_handler echo_handler = {.name = "echo",
                                          .channel_active = echo_active,
                                          .channel_read = th_echo_read,
                                          .exception_caught =
                                              th_echo_exception};

static void echo_init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "echo", &echo_handler,
                         NULL);
}

static _Noreturn void scale_server(int in, int out) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  srv_group = loops("wu-big-srv", 2);
  if (srv_group == NULL)
    _exit(2);
  char uri[300];
  weft_server_bootstrap sb = {.group = srv_group,
                              .listen = "ucx://127.0.0.1:0",
                              .child_init = echo_init};
  weft_channel_config_init(&sb.child_options);
  weft_server *srv;
  if (weft_server_bind(&srv, &sb) != 0 ||
      weft_server_address(srv, uri, sizeof uri) != 0)
    _exit(3);
  if (write(out, uri, strlen(uri)) != (ssize_t)strlen(uri))
    _exit(4);
  char c;
  while (read(in, &c, 1) > 0) {
    char line[64];
    int len =
        snprintf(line, sizeof line, "%d %d\n", atomic_load(&srv_on_loop[0]),
                 atomic_load(&srv_on_loop[1]));
    if (write(out, line, (size_t)len) != len)
      _exit(4);
  }
  weft_server_close(srv);
  weft_loop_group_stop(srv_group);
  int rc = weft_loop_group_join(srv_group);
  weft_loop_group_free(srv_group);
  _exit(rc == 0 ? 0 : 5);
}

/* ---- the clients (this process, one loop) ---- */

typedef struct fleet {
  weft_loop_group *g;
  atomic_int settled; /* connects that finished, either way */
} fleet;

typedef struct client {
  fleet *fl;
  uint8_t tag;
  atomic_int status; /* of the connect; 1 until known */
  atomic_int exceptions;
  atomic_int bad;      /* an echo that was not this client's bytes */
  atomic_llong echoed; /* bytes read */
  weft_channel *ch;    /* loop thread */
} client;

/* Writes one MSG-byte message of `c`'s tag. Loop thread. */
static void send_task(void *arg) {
  client *c = arg;
  if (c->ch == NULL)
    return;
  weft_buf *b = weft_buf_alloc(weft_loop_pool(weft_channel_loop(c->ch)), MSG);
  if (b == NULL)
    return;
  memset(b->base, c->tag, MSG);
  b->writer_index = MSG;
  weft_channel_write_and_flush(c->ch, b, WEFT_PROMISE_NONE);
}

static void client_active(weft_ctx *ctx) {
  ((client *)weft_ctx_state(ctx))->ch = weft_ctx_channel(ctx);
}

static void client_read(weft_ctx *ctx, void *msg) {
  client *c = weft_ctx_state(ctx);
  weft_buf *b = msg;
  size_t n = weft_buf_readable(b);
  for (size_t i = 0; i < n; i++)
    if (weft_buf_rptr(b)[i] != c->tag)
      atomic_store(&c->bad, 1);
  weft_buf_release(b);
  atomic_fetch_add(&c->echoed, (long long)n);
}

static void client_exception(weft_ctx *ctx, int err, const char *reason) {
  client *c = weft_ctx_state(ctx);
  fprintf(stderr, "client %u: %s: %s\n", c->tag, weft_err_name(err), reason);
  atomic_fetch_add(&c->exceptions, 1);
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static void client_inactive(weft_ctx *ctx) {
  ((client *)weft_ctx_state(ctx))->ch = NULL;
}

static const weft_handler client_handler = {.name = "client",
                                            .channel_active = client_active,
                                            .channel_read = client_read,
                                            .channel_inactive = client_inactive,
                                            .exception_caught =
                                                client_exception};

static void client_init(weft_channel *ch, void *arg) {
  ck_assert_int_eq(weft_pipeline_add_last(weft_channel_pipeline(ch), "client",
                                          &client_handler, arg),
                   0);
}

static void client_connected(weft_channel *ch, int status, void *arg) {
  (void)ch;
  client *c = arg;
  atomic_store(&c->status, status);
  atomic_fetch_add(&c->fl->settled, 1);
}

static void client_connect(client *c, const char *uri) {
  atomic_init(&c->status, 1);
  weft_bootstrap b = {.loop = weft_loop_group_get(c->fl->g, 0),
                      .connect = uri,
                      .init = client_init,
                      .init_arg = c,
                      .on_connect = client_connected,
                      .connect_arg = c};
  weft_channel_config_init(&b.options);
  b.options.connect_timeout_ms = 60000; /* a crowd of handshakes */
  ck_assert_int_eq(weft_bootstrap_connect(&b), 0);
}

static void close_task(void *arg) {
  client *c = arg;
  if (c->ch != NULL)
    weft_channel_close(c->ch, WEFT_PROMISE_NONE);
}

/* Every client sends one message; all must come back. */
static void echo_round(fleet *fl, client *cs, int n, long long want) {
  weft_loop *loop = weft_loop_group_get(fl->g, 0);
  for (int i = 0; i < n; i++)
    ck_assert_int_eq(weft_loop_execute(loop, send_task, &cs[i]), 0);
  uint64_t deadline = th_now_ms() + 120000;
  int done = 0;
  while (th_now_ms() < deadline) {
    done = 0;
    for (int i = 0; i < n; i++)
      done += atomic_load(&cs[i].echoed) >= want;
    if (done == n)
      break;
    th_sleep_ms(20);
  }
  ck_assert_msg(done == n, "%d of %d clients got their echo", done, n);
}

/* Asks the server for its per-loop channel counts. */
static void server_loops(int to, int from, int *l0, int *l1) {
  ck_assert_int_eq(write(to, "q", 1), 1);
  char line[64];
  ssize_t got = read(from, line, sizeof line - 1);
  ck_assert_int_gt(got, 0);
  line[got] = '\0';
  ck_assert_int_eq(sscanf(line, "%d %d", l0, l1), 2);
}

START_TEST(ucx_thousand_connections_on_two_loops) {
  double scale = th_test_scale() * (SANITIZED ? 0.25 : 1.0);
  int n = (int)(1000 * scale + 0.5);
  if (n < 8)
    n = 8;
  int to_srv[2], from_srv[2];
  ck_assert_int_eq(pipe(to_srv), 0);
  ck_assert_int_eq(pipe(from_srv), 0);
  pid_t pid = fork(); /* before this process touches UCX */
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(to_srv[1]);
    close(from_srv[0]);
    scale_server(to_srv[0], from_srv[1]);
  }
  close(to_srv[0]);
  close(from_srv[1]);
  char uri[300] = "";
  ssize_t got = read(from_srv[0], uri, sizeof uri - 1);
  ck_assert_msg(got > 0, "the server did not start");
  uri[got] = '\0';
  th_sleep_ms(200);
  long rss0 = th_status_kib(pid, "VmRSS:");

  fleet fl = {.g = loops("wu-big-cli", 1)};
  ck_assert_ptr_nonnull(fl.g);
  client *cs = calloc((size_t)n, sizeof *cs);
  ck_assert_ptr_nonnull(cs);
  uint64_t t0 = th_now_ms();
  long rss1 = 0;
  for (int i = 0; i < n; i++) {
    cs[i].fl = &fl;
    cs[i].tag = (uint8_t)(i * 7 + 1);
    while (i - atomic_load(&fl.settled) >= INFLIGHT)
      th_sleep_ms(1);
    client_connect(&cs[i], uri);
    if (i == 0) {
      /* What one connection leaves (the server's workers, UCX's pools);
       * the connections after it are the cost per connection. */
      ASSERT_EVENTUALLY(atomic_load(&fl.settled) == 1, 60000);
      th_sleep_ms(200);
      rss1 = th_status_kib(pid, "VmRSS:");
    }
  }
  ASSERT_EVENTUALLY(atomic_load(&fl.settled) == n, 180000);
  uint64_t t_conn = th_now_ms() - t0;
  int failed = 0;
  for (int i = 0; i < n; i++)
    if (atomic_load(&cs[i].status) != 0 && failed++ == 0)
      fprintf(stderr, "client %d: connect failed: %s\n", i,
              weft_err_name(atomic_load(&cs[i].status)));
  ck_assert_msg(failed == 0, "%d of %d connects failed", failed, n);

  echo_round(&fl, cs, n, MSG);
  th_sleep_ms(1000); /* settle: the last credits and completions */
  long rss_n = th_status_kib(pid, "VmRSS:");
  long my_rss = th_status_kib(getpid(), "VmRSS:");
  double srv_cpu = th_idle_cpu(pid, IDLE_MS);
  double cli_cpu = th_idle_cpu(getpid(), IDLE_MS);
  echo_round(&fl, cs, n, 2 * MSG);
  int on0 = 0, on1 = 0;
  server_loops(to_srv[1], from_srv[0], &on0, &on1);

  const char *tls = getenv("UCX_TLS");
  int more = n > 1 ? n - 1 : 1;
  printf("ucx scale (UCX_TLS=%s): %d connections (1000 x WEFT_TEST_SCALE "
         "%.2f%s), connected in %.1f s (%.0f/s, %d at a time)\n",
         tls != NULL ? tls : "default", n, th_test_scale(),
         SANITIZED ? " x 0.25 for the sanitizer build" : "", t_conn / 1000.0,
         n / (t_conn / 1000.0), INFLIGHT);
  printf("ucx scale: server RSS %ld KiB at start, %ld KiB with one "
         "connection, %ld KiB with %d idle ones: %.1f KiB per connection "
         "(client process: %ld KiB)\n",
         rss0, rss1, rss_n, n, (double)(rss_n - rss1) / more, my_rss);
  printf("ucx scale: idle CPU over %d s (keepalive on): server %.2f%%, "
         "client %.2f%%; server channels: loop 0 %d, loop 1 %d\n",
         IDLE_MS / 1000, srv_cpu, cli_cpu, on0, on1);
  fflush(stdout);
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(atomic_load(&cs[i].bad), 0);
    ck_assert_int_eq(atomic_load(&cs[i].exceptions), 0);
  }
  ck_assert_int_eq(on0 + on1, n);
  /* Spreading is on where the lanes are tcp only; over shared memory UCX
   * 1.13 can abort a server whose workers share connections
   * (transports/ucx/context.c, spread_safe), so there every channel stays
   * on loop 0. */
  bool spread = tls != NULL && strcmp(tls, "tcp") == 0;
  if (spread)
    ck_assert_msg(on0 >= n / 4 && on1 >= n / 4,
                  "the server's loops took %d and %d of %d channels", on0, on1,
                  n);
  else
    ck_assert_msg(on1 == 0,
                  "spreading is off over %s, yet loop 1 took %d channels",
                  tls != NULL ? tls : "UCX's default lanes", on1);
  ck_assert_msg(srv_cpu < 10.0, "the idle server used %.1f%% CPU", srv_cpu);

  weft_loop *loop = weft_loop_group_get(fl.g, 0);
  for (int i = 0; i < n; i++)
    ck_assert_int_eq(weft_loop_execute(loop, close_task, &cs[i]), 0);
  weft_loop_group_stop(fl.g);
  ck_assert_int_eq(weft_loop_group_join(fl.g), 0);
  weft_loop_group_free(fl.g);
  free(cs);
  close(to_srv[1]); /* the server stops */
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "the server process ended with status 0x%x", st);
  close(from_srv[0]);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("ucx_scale");
  TCase *tc = tcase_create("scale");
  tcase_set_timeout(tc, 600);
  th_add_tests(tc, ucx_thousand_connections_on_two_loops, NULL);
  suite_add_tcase(s, tc);
  return s;
}
