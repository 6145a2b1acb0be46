/* SPDX-License-Identifier: Apache-2.0 */
/* The sample server programs against a client that floods and never reads,
 * measured from outside (tests/server_proc.h), over WEFT_TEST_TRANSPORT
 * (tcp or uring: the client is a plain socket). Every server gets the
 * output limit by default (WEFT_SERVER_OUTPUT_LIMIT, 64 MiB;
 * docs/architecture.md, "Safe by default"), so with flow control turned
 * off the connection is closed with the limit's reason in the log, and the
 * server's memory stays near the limit. Before, weft-echo had no limit:
 * 2 GiB in 5 s (issue 28). */
#include "harness.h"
#include "server_proc.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define MIB (1024L * 1024L)
#define CAP (1024 * MIB) /* the flood stops here: the test has failed */

#define REASON "output limit of 67108864 bytes exceeded"

/* Sends 256 KiB at a time on `fd` and never reads, until the server logs
 * the output limit's reason (`*limited`) or closes the connection, RSS
 * grows past CAP, or 60 s pass; returns the highest RSS growth over `base`
 * seen (sampled between sends). Over uring the client may see no close:
 * a channel closed with zero-copy sends in the kernel lingers until their
 * notifications (docs/transports/uring.md), which a client that never
 * reads holds back. */
static long flood(sp_server *s, int fd, long base, bool *limited) {
  static char chunk[256 * 1024];
  memset(chunk, 'x', sizeof chunk);
  long peak = 0;
  uint64_t end = th_now_ms() + 60000;
  *limited = false;
  while (th_now_ms() < end && peak <= CAP && !*limited) {
    ssize_t n = send(fd, chunk, sizeof chunk, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR)
      break; /* closed by the server */
    if (n < 0) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      poll(&p, 1, 10);
    }
    long grew = th_rss_bytes(s->pid) - base;
    peak = grew > peak ? grew : peak;
    *limited = sp_log_wait(s, REASON, 0);
  }
  return peak;
}

START_TEST(programs_echo_without_flow_control_closes_a_flood_at_the_limit) {
  const char *path = getenv("WEFT_ECHO");
  ck_assert_msg(path != NULL, "WEFT_ECHO is not set");
  char transport[64];
  snprintf(transport, sizeof transport, "transport.name=%s",
           th_transport_name());
  const char *argv[] = {path,
                        "-o",
                        "loop.loops=1",
                        "-o",
                        transport,
                        "-o",
                        "server.listen=127.0.0.1:0",
                        "-o",
                        "server.flow_control=false",
                        "server",
                        NULL};
  sp_server s = sp_start(argv, "listening on ");
  long base = th_rss_bytes(s.pid);
  int fd = th_connect_loopback(s.port);
  bool limited;
  long peak = flood(&s, fd, base, &limited);
  fprintf(stderr, "%s: weft-echo base %ld KiB, peak growth %ld KiB\n",
          th_transport_name(), base / 1024, peak / 1024);
  /* The queue at the limit, in pool blocks up to twice the bytes, plus
   * the reads in flight. */
  ck_assert_msg(peak <= 160 * MIB,
                "RSS grew by %ld KiB under the flood (bound 163840 KiB)",
                peak / 1024);
  ck_assert_msg(limited || sp_log_wait(&s, REASON, 30000),
                "no \"" REASON "\" in the server's log");
  close(fd);
  sp_stop(&s);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite(
      "programs_hostile", "core", 120,
      programs_echo_without_flow_control_closes_a_flood_at_the_limit, NULL);
}
