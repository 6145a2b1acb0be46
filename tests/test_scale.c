/* SPDX-License-Identifier: Apache-2.0 */
/* Ten thousand connections on a socket transport (tcp, uring), one run per
 * transport (WEFT_TEST_TRANSPORT; tests/CMakeLists.txt registers this file
 * as test_scale_tcp and test_scale_uring).
 *
 * A weft echo server with two loops runs in a forked child; this process
 * opens 10 000 plain kernel sockets to it. Every connection echoes a
 * message of its own, all stay idle for a second, then every one echoes
 * again. The test prints the server's RSS per connection (VmRSS of
 * /proc/PID/status before and after connecting, over the count) and the
 * server's CPU over the idle second (% of one core, from the scheduler's
 * per-thread run time), and asserts, loosely so that a shared machine
 * does not fail it:
 *   - every echo is right (the connection's own bytes, both rounds);
 *   - RSS per idle connection < 4 KiB (tcp holds about 1 KiB, uring
 *     about 1.2 KiB: a channel, its pipeline and the transport's state;
 *     no buffer is held while idle);
 *   - idle CPU < 5% of a core (an idle loop sleeps in epoll_wait or
 *     io_uring_enter; a busy-polling one would show ~100%).
 * Never speed.
 *
 * The fd limit is raised to what the count needs in both processes; a
 * hard limit below that skips the check with the reason. Under a
 * sanitizer the count is 2000 (the shadow memory and the slower code make
 * 10 000 slow and the RSS meaningless: it is printed, not asserted);
 * WEFT_TEST_SCALE multiplies the count further. The output says which.
 */
#include "harness_scale.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/loop.h>

#define FULL_COUNT 10000
#define SANITIZER_COUNT 2000
#define FD_SPARE 64         /* descriptors beyond the connections */
#define BATCH 256           /* connects in flight: under the backlog */
#define MSG 32              /* bytes of every message */
#define IO_TIMEOUT_MS 20000 /* a read or write that hangs this long fails */
#define MAX_KIB_PER_CONN 4.0
#define MAX_IDLE_CPU 5.0

/* ---- the server, in a child process ---- */

/* The connections of this run, set before the server forks. */
static int scale_count;

/* The server: an echo server of two loops on WEFT_TEST_TRANSPORT; writes
 * its address to `up`, serves until `down` reaches EOF, exits 0 if its
 * loops stopped with no leak. No Check asserts here (a child of a check). */
static _Noreturn void scale_server(int down, int up) {
  rlim_t hard;
  if (th_raise_fd_limit((rlim_t)scale_count + FD_SPARE, &hard) != 0)
    _exit(10);
  char listen[64];
  snprintf(listen, sizeof listen, "%s://127.0.0.1:0", th_transport_name());
  th_child_echo_server("wt-scale", 2, listen, th_batch_echo_init, 1024, down,
                       up);
}

/* ---- the clients: plain blocking sockets ---- */

/* Connection `i`'s message of round `round`: its number and the round,
 * padded with a byte of both, so a crossed or stale echo shows. */
static void message(int i, int round, char *out) {
  int len = snprintf(out, MSG, "%d/%d:", i, round);
  memset(out + len, 'a' + (i + round) % 26, (size_t)(MSG - len));
}

static void send_message(int fd, int i, int round) {
  char m[MSG];
  message(i, round, m);
  ck_assert_msg(send(fd, m, MSG, MSG_NOSIGNAL) == MSG,
                "connection %d, round %d: send: %s", i, round, strerror(errno));
}

/* Reads connection `i`'s echo of round `round`; false if it is missing
 * (EOF, reset, timeout) or wrong. Prints what went wrong for the first
 * `*report` failures. */
static bool read_echo(int fd, int i, int round, int *report) {
  char want[MSG], got[MSG];
  message(i, round, want);
  size_t have = 0;
  while (have < MSG) {
    ssize_t r = recv(fd, got + have, MSG - have, 0);
    if (r <= 0) {
      if ((*report)-- > 0)
        fprintf(stderr, "connection %d, round %d: %s after %zu bytes\n", i,
                round, r == 0 ? "EOF" : strerror(errno), have);
      return false;
    }
    have += (size_t)r;
  }
  if (memcmp(got, want, MSG) != 0) {
    if ((*report)-- > 0)
      fprintf(stderr, "connection %d, round %d: wrong echo %.*s\n", i, round,
              MSG, got);
    return false;
  }
  return true;
}

START_TEST(ten_thousand_idle_connections) {
  int n = TH_SANITIZED ? SANITIZER_COUNT : FULL_COUNT;
  double scale = th_test_scale();
  n = (int)(n * scale + 0.5);
  if (n < 1)
    n = 1;
  rlim_t hard = 0;
  if (th_raise_fd_limit((rlim_t)n + FD_SPARE, &hard) != 0) {
    th_skip(__func__,
            "%d connections need RLIMIT_NOFILE %d in each process; the "
            "hard limit is %llu",
            n, n + FD_SPARE, (unsigned long long)hard);
    return;
  }

  scale_count = n;
  th_child srv;
  th_child_start(&srv, scale_server);
  pid_t pid = srv.pid;
  uint16_t port = th_uri_port(srv.uri);
  th_sleep_ms(300);
  long rss0 = th_status_kib(pid, "VmRSS:");

  /* Connect in batches, each connection echoing its first message before
   * the next batch: the listen backlog never overflows (a dropped SYN
   * would cost a second's retry). */
  int *fds = malloc((size_t)n * sizeof *fds);
  ck_assert_ptr_nonnull(fds);
  int bad = 0, report = 5;
  uint64_t t0 = th_now_ms();
  for (int base = 0; base < n; base += BATCH) {
    int end = base + BATCH < n ? base + BATCH : n;
    for (int i = base; i < end; i++) {
      fds[i] = th_connect_timeout(port, IO_TIMEOUT_MS);
      ck_assert_msg(fds[i] >= 0, "connection %d: connect: %s", i,
                    strerror(-fds[i]));
      send_message(fds[i], i, 1);
    }
    for (int i = base; i < end; i++)
      bad += !read_echo(fds[i], i, 1, &report);
  }
  uint64_t t_conn = th_now_ms() - t0;
  ck_assert_msg(bad == 0, "%d of %d connections: no right first echo", bad, n);

  /* Idle: the server holds every connection and does nothing. */
  th_sleep_ms(300); /* the last flushes and the loops go to sleep */
  long rss_n = th_status_kib(pid, "VmRSS:");
  long long ns0 = th_run_ns(pid);
  uint64_t i0 = th_now_ms();
  th_sleep_ms(1000);
  long long ns1 = th_run_ns(pid);
  uint64_t idle_ms = th_now_ms() - i0;
  ck_assert(ns0 >= 0 && ns1 >= ns0);
  double cpu = 100.0 * (double)(ns1 - ns0) / 1e6 / (double)idle_ms;

  /* Every one echoes again: all sends first, then all reads. */
  t0 = th_now_ms();
  for (int i = 0; i < n; i++)
    send_message(fds[i], i, 2);
  for (int i = 0; i < n; i++)
    bad += !read_echo(fds[i], i, 2, &report);
  uint64_t t_round = th_now_ms() - t0;

  double per_conn = (double)(rss_n - rss0) / n;
  printf("%s scale: %d connections (%s x WEFT_TEST_SCALE %.2f) to a "
         "2-loop server; connected and echoed in %.1f s, second echo of "
         "all in %.1f s\n",
         th_transport_name(), n,
         TH_SANITIZED ? "2000 under a sanitizer" : "10000", scale,
         t_conn / 1000.0, t_round / 1000.0);
  printf("%s scale: server RSS %ld KiB before, %ld KiB with %d idle "
         "connections: %.2f KiB per connection (bound %.0f KiB%s)\n",
         th_transport_name(), rss0, rss_n, n, per_conn, MAX_KIB_PER_CONN,
         TH_SANITIZED ? ", not asserted under a sanitizer" : "");
  printf("%s scale: server CPU while idle: %.2f%% of one core over %.2f s "
         "(bound %.0f%%)\n",
         th_transport_name(), cpu, idle_ms / 1000.0, MAX_IDLE_CPU);
  fflush(stdout);

  ck_assert_msg(bad == 0, "%d of %d connections: no right second echo", bad, n);
  if (!TH_SANITIZED)
    ck_assert_msg(per_conn < MAX_KIB_PER_CONN,
                  "%.2f KiB of server RSS per idle connection", per_conn);
  ck_assert_msg(cpu < MAX_IDLE_CPU, "the idle server used %.2f%% of a core",
                cpu);

  for (int i = 0; i < n; i++)
    close(fds[i]);
  free(fds);
  th_child_finish(&srv);
}
END_TEST

Suite *weft_test_suite(void) {
  th_require_transport();
  return th_suite("scale", "scale", 120, ten_thousand_idle_connections, NULL);
}
