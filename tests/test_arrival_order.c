/* SPDX-License-Identifier: Apache-2.0 */
/* The tcp transport serves its connections in the order their bytes came
 * (transports/tcp/tcp.c, file comment: its channel sockets are
 * edge-triggered). With level-triggered sockets, epoll puts a socket it
 * just reported back on its ready list at once, so a connection that
 * sends again while the loop is busy is served ahead of one whose bytes
 * came earlier: over 64 keep-alive connections that put weft-http's p99
 * above nginx's (samples/http/docs/benchmarks.md).
 *
 * The case: connections A and C; A's first byte reaches a handler that
 * holds the loop; meanwhile C sends, then A sends again, each waited for
 * until the server's kernel has it (the client's unacknowledged bytes
 * fall to 0: progress, not a pause). Released, the loop must read C's
 * byte before A's second. Both with a loop that spins and one that
 * sleeps.
 *
 * And no edge is lost: a flush that the transport's batch limit stops
 * (TCP_MAX_WRITES_PER_FLUSH sendmsg calls of TCP_MAX_IOV buffers) while
 * the socket can still take bytes gets no new EPOLLOUT edge, so the rest
 * must go on from a re-arm, or it waits for ever. */
#include "harness.h"
#include "harness_scale.h"

#include <linux/sockios.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/loop.h>
#include <weft/pipeline.h>

#define MAX_READS 8

/* What the server's handler saw; the test thread reads it. */
static struct {
  atomic_int channels; /* accepted */
  atomic_int holding;  /* the handler holds the loop in A's first read */
  atomic_int release;  /* the test lets it go */
  atomic_int n;        /* reads recorded */
  char order[MAX_READS];
} seen;

static void order_read(weft_ctx *ctx, void *msg) {
  weft_buf *b = msg;
  const char *p = (const char *)weft_buf_rptr(b);
  for (size_t i = 0; i < weft_buf_readable(b); i++) {
    int k = atomic_load(&seen.n);
    if (k < MAX_READS) {
      seen.order[k] = p[i];
      atomic_store(&seen.n, k + 1);
    }
    if (p[i] == 'a' && k == 0) {
      atomic_store(&seen.holding, 1);
      for (int t = 0; t < 120000 && !atomic_load(&seen.release); t++)
        usleep(500);
    }
  }
  weft_buf_release(b);
  (void)ctx;
}

static const weft_handler order_handler = {.name = "order",
                                           .channel_read = order_read};

static void order_init(weft_channel *ch, void *arg) {
  (void)arg;
  atomic_fetch_add(&seen.channels, 1);
  th_add_last(ch, "order", &order_handler, NULL);
}

/* Sends one byte on `fd` and waits until the peer's kernel acknowledged
 * it (SIOCOUTQ: bytes sent and not yet acknowledged), so it sits in the
 * server's socket, whose readiness epoll has seen, before the next send. */
static void send_acked(int fd, char c) {
  th_write_all(fd, &c, 1);
  int out = 1;
  for (int t = 0; t < 60000; t++) {
    ck_assert_int_eq(ioctl(fd, SIOCOUTQ, &out), 0);
    if (out == 0)
      break;
    usleep(1000);
  }
  ck_assert_int_eq(out, 0);
}

static void served_in_arrival_order(int64_t busy_poll_us) {
  memset(&seen, 0, sizeof seen);
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = 1;
  o.busy_poll_us = busy_poll_us;
  o.busy_poll_adaptive = false;
  weft_loop_group *group;
  ck_assert_int_eq(weft_loop_group_new(&group, &o), 0);
  ck_assert_int_eq(weft_loop_group_start(group), 0);
  char uri[128];
  weft_server *srv = th_server_bind(group, "tcp://127.0.0.1:0", order_init,
                                    NULL, uri, sizeof uri);
  int port = th_uri_port(uri);
  int a = th_connect_loopback(port), c = th_connect_loopback(port);
  ASSERT_EVENTUALLY(atomic_load(&seen.channels) == 2, 60000);

  send_acked(a, 'a');
  ASSERT_EVENTUALLY(atomic_load(&seen.holding) == 1, 60000);
  send_acked(c, 'c');
  send_acked(a, 'A');
  atomic_store(&seen.release, 1);
  ASSERT_EVENTUALLY(atomic_load(&seen.n) == 3, 60000);
  ck_assert_msg(memcmp(seen.order, "acA", 3) == 0,
                "busy_poll_us %lld: read %.3s; C's byte came before A's "
                "second and must be read first (\"acA\")",
                (long long)busy_poll_us, seen.order);

  close(a);
  close(c);
  weft_server_close(srv);
  weft_loop_group_stop(group);
  ck_assert_int_eq(weft_loop_group_join(group), 0);
  weft_loop_group_free(group);
}

/* Many small buffers in one flush: far more than the batch limit sends
 * (64 x 16 = 1024 buffers) and few enough bytes for the socket to take
 * them, so the limit, not a full socket, stops each batch. */
#define MANY_BUFS 6000
#define BUF_BYTES 8

static void written(void *arg, int status) {
  (void)arg;
  ck_assert_int_eq(status, 0);
}

static void many_active(weft_ctx *ctx) {
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  for (uint32_t i = 0; i < MANY_BUFS; i++) {
    weft_buf *b = weft_buf_alloc(pool, BUF_BYTES);
    ck_assert_ptr_nonnull(b);
    char text[BUF_BYTES + 1];
    snprintf(text, sizeof text, "%07u\n", i);
    memcpy(weft_buf_wptr(b), text, BUF_BYTES);
    b->writer_index += BUF_BYTES;
    /* A promise on each: a small write is not merged into a tail entry
     * that has one (channel/outbound.c), so each stays its own buffer. */
    weft_ctx_write(ctx, b, (weft_promise){written, NULL});
  }
  weft_ctx_flush(ctx);
  weft_ctx_fire_channel_active(ctx);
}

static const weft_handler many_handler = {.name = "many",
                                          .channel_active = many_active};

static void many_init(weft_channel *ch, void *arg) {
  (void)arg;
  th_add_last(ch, "many", &many_handler, NULL);
}

START_TEST(tcp_flush_beyond_the_batch_limit_arrives_whole) {
  weft_loop_group *group = th_group_start("wt-many", 1);
  char uri[128];
  weft_server *srv = th_server_bind(group, "tcp://127.0.0.1:0", many_init, NULL,
                                    uri, sizeof uri);
  int fd = th_connect_loopback(th_uri_port(uri));
  struct timeval tv = {.tv_sec = 60}; /* a stall, not a slow machine */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  static char got[MANY_BUFS * BUF_BYTES];
  size_t n = 0;
  while (n < sizeof got) {
    ssize_t r = recv(fd, got + n, sizeof got - n, 0);
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  ck_assert_msg(n == sizeof got, "%zu of %zu bytes arrived", n, sizeof got);
  for (uint32_t i = 0; i < MANY_BUFS; i++) {
    char text[BUF_BYTES + 1];
    snprintf(text, sizeof text, "%07u\n", i);
    ck_assert_msg(memcmp(got + i * BUF_BYTES, text, BUF_BYTES) == 0,
                  "buffer %u out of order", i);
  }
  close(fd);
  weft_server_close(srv);
  weft_loop_group_stop(group);
  ck_assert_int_eq(weft_loop_group_join(group), 0);
  weft_loop_group_free(group);
}
END_TEST

START_TEST(tcp_serves_a_spinning_loop_s_connections_in_arrival_order) {
  served_in_arrival_order(-1);
}
END_TEST

START_TEST(tcp_serves_a_sleeping_loop_s_connections_in_arrival_order) {
  served_in_arrival_order(0);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("arrival_order", "core", 120,
                  tcp_serves_a_spinning_loop_s_connections_in_arrival_order,
                  tcp_serves_a_sleeping_loop_s_connections_in_arrival_order,
                  tcp_flush_beyond_the_batch_limit_arrives_whole, NULL);
}
