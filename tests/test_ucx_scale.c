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
#include "harness_scale.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/channel.h>
#include <weft/loop.h>
#include <weft/pipeline.h>

#define INFLIGHT 64  /* connects in progress at once */
#define IDLE_MS 5000 /* the idle CPU's window */

/* A started group of `n` loops. The 2-loop server pins its loops, as
 * docs/transports/ucx.md advises on UCX 1.13 ("Many workers in one
 * process"): unpinned, this server hit the library's async abort in 2 of 3
 * CI runs, pinned in 0 of 6. Loops are not pinned by default (issue 32). */
static weft_loop_group *loops(const char *name, int n) {
  return th_loops_start(name, n, n > 1);
}

/* ---- the server (child process) ----
 * Echoes every message and counts the channels each of its two loops
 * took. Writes its address to `out`; then answers each query
 * (th_child_query) with "<loop 0> <loop 1>"; at EOF it stops and exits 0
 * if nothing leaked. No Check asserts here (a child of a check). */

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

/* Answers a query (th_child_query): the channels on each loop. */
static int count_loops(long long *v) {
  v[0] = atomic_load(&srv_on_loop[0]);
  v[1] = atomic_load(&srv_on_loop[1]);
  return 2;
}

/* The server's stdout and stderr (UCX prints its fatal errors there). */
static char srv_log[] = "/tmp/weft-ucx-scale-XXXXXX";

static _Noreturn void scale_server(int in, int out) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  th_child_log_to(srv_log);
  srv_group = loops("wu-big-srv", 2);
  if (srv_group == NULL)
    _exit(2);
  weft_server *srv =
      th_child_bind(srv_group, "ucx://127.0.0.1:0", echo_init, 0);
  if (srv == NULL)
    _exit(3);
  th_child_serve(srv_group, srv, in, out, count_loops);
}

/* ---- the clients (this process, one loop: harness_scale.h) ---- */

/* What one connection leaves (the server's workers, UCX's pools): the
 * connections after it are the cost per connection. */
typedef struct first_rss {
  pid_t pid;
  long kib;
} first_rss;

static void measure_first(void *arg) {
  first_rss *f = arg;
  f->kib = th_status_kib(f->pid, "VmRSS:");
}

START_TEST(ucx_thousand_connections_on_two_loops) {
  double scale = th_test_scale() * (TH_SANITIZED ? 0.25 : 1.0);
  int n = (int)(1000 * scale + 0.5);
  if (n < 8)
    n = 8;
  int log_fd = mkstemp(srv_log);
  ck_assert_int_ge(log_fd, 0);
  close(log_fd);
  th_child srv;
  th_child_start(&srv, scale_server); /* before this process touches UCX */
  th_sleep_ms(200);
  long rss0 = th_status_kib(srv.pid, "VmRSS:");

  th_fleet fl = {.g = loops("wu-big-cli", 1)};
  ck_assert_ptr_nonnull(fl.g);
  th_client *cs = calloc((size_t)n, sizeof *cs);
  ck_assert_ptr_nonnull(cs);
  uint64_t t0 = th_now_ms();
  first_rss first = {.pid = srv.pid};
  int failed = th_fleet_connect_count(&fl, cs, n, srv.uri, INFLIGHT,
                                      measure_first, &first);
  if (failed > 0) {
    th_child_print_log(srv_log);
    if (th_child_aborted_with(&srv, srv_log, TH_UCX_ASYNC_ABORT)) {
      th_skip(__func__,
              "the server process hit UCX 1.13's async abort "
              "(openucx/ucx#9942, docs/transports/ucx.md \"Many workers in "
              "one process\"); %d of %d connects failed with it",
              failed, n);
      th_fleet_stop(&fl);
      free(cs);
      close(srv.to);
      close(srv.from);
      unlink(srv_log);
      return;
    }
  }
  ck_assert_msg(failed == 0, "%d of %d connects failed", failed, n);
  long rss1 = first.kib;
  uint64_t t_conn = th_now_ms() - t0;

  th_fleet_echo_round(&fl, cs, n, TH_MSG, 120000);
  th_sleep_ms(1000); /* settle: the last credits and completions */
  long rss_n = th_status_kib(srv.pid, "VmRSS:");
  long my_rss = th_status_kib(getpid(), "VmRSS:");
  double srv_cpu = th_idle_cpu(srv.pid, IDLE_MS);
  double cli_cpu = th_idle_cpu(getpid(), IDLE_MS);
  th_fleet_echo_round(&fl, cs, n, 2 * TH_MSG, 120000);
  long long on[2];
  ck_assert_msg(th_child_query(&srv, on, 2), "the server did not answer");
  int on0 = (int)on[0], on1 = (int)on[1];

  const char *tls = getenv("UCX_TLS");
  int more = n > 1 ? n - 1 : 1;
  printf("ucx scale (UCX_TLS=%s): %d connections (1000 x WEFT_TEST_SCALE "
         "%.2f%s), connected in %.1f s (%.0f/s, %d at a time)\n",
         tls != NULL ? tls : "default", n, th_test_scale(),
         TH_SANITIZED ? " x 0.25 for the sanitizer build" : "", t_conn / 1000.0,
         n / (t_conn / 1000.0), INFLIGHT);
  printf("ucx scale: server RSS %ld KiB at start, %ld KiB with one "
         "connection, %ld KiB with %d idle ones: %.1f KiB per connection "
         "(client process: %ld KiB)\n",
         rss0, rss1, rss_n, n, (double)(rss_n - rss1) / more, my_rss);
  printf("ucx scale: idle CPU over %d s (keepalive on): server %.2f%%, "
         "client %.2f%%; server channels: loop 0 %d, loop 1 %d\n",
         IDLE_MS / 1000, srv_cpu, cli_cpu, on0, on1);
  fflush(stdout);
  th_fleet_assert_clean(cs, n);
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
    ck_assert_int_eq(weft_loop_execute(loop, th_client_close_task, &cs[i]), 0);
  th_fleet_stop(&fl);
  free(cs);
  th_child_finish(&srv);
  th_child_print_log(srv_log);
  unlink(srv_log);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("ucx_scale", "scale", 600,
                  ucx_thousand_connections_on_two_loops, NULL);
}
