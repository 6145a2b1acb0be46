/* SPDX-License-Identifier: Apache-2.0 */
/* The io_uring transport's half-close must be done before its channel's
 * close lets the socket's descriptor number go. IORING_OP_SHUTDOWN always
 * runs in io-wq, whose worker looks the fd up by number when it gets to
 * the request, and the close's ASYNC_CANCEL by fd does not catch it there:
 * on a loaded machine the close ran first and the half-close hit the next
 * socket given that number (test_kv_uring's protected-mode case: a client
 * just accepted saw the FIN before Redis' DENIED error).
 *
 * The test makes that order certain instead of rare: on the loop's thread
 * (io-wq is per task) it allows one io-wq worker and keeps it busy with an
 * open of a FIFO that no one writes, so a ring shutdown would wait behind
 * it. A channel then writes, half-closes and closes; a socket of the test
 * is put at the freed number (dup2), the FIFO is opened to free the
 * worker, and a NOP queued behind everything says when io-wq is done. The
 * test's socket must still be open for writing: its peer sees no FIN.
 *
 * And a close right after a flushed zero-copy write (which makes the
 * close linger until the kernel is done with the buffers) must let the
 * write go before its FIN: the half-close of a lingering close is a
 * plain shutdown(2) now, so the queued send is submitted first.
 *
 * Recorded as skipped where io_uring cannot run or the kernel cannot limit
 * io-wq's workers (IORING_REGISTER_IOWQ_MAX_WORKERS, Linux 5.15). */
#include "harness_scale.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <liburing.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/pipeline.h>
#include <weft/transport_plugin.h>

#define WAIT_CAP_MS 60000 /* a generous cap on each wait for progress */
#define FD_SCAN_MAX 4096  /* descriptors searched for the server's socket */

enum { OP_BLOCKER = 1, OP_MARKER = 2 };

typedef struct half_close {
  weft_loop *loop;
  _Atomic(weft_channel *) ch; /* the accepted channel, retained */
  atomic_int written;         /* its write's promise ran */
  struct io_uring ring;       /* the test's ring, made on the loop thread */
  char fifo[64];
} half_close;

static void hc_active(weft_ctx *ctx) {
  half_close *h = weft_ctx_state(ctx);
  atomic_store(&h->ch, weft_channel_retain(weft_ctx_channel(ctx)));
  weft_ctx_fire_channel_active(ctx);
}

static const weft_handler hc_handler = {.name = "half-close",
                                        .channel_active = hc_active};

static void hc_init(weft_channel *ch, void *arg) {
  th_add_last(ch, "half-close", &hc_handler, arg);
}

/* Loop thread: one io-wq worker of each kind for this thread, the bounded
 * one held by an open of the FIFO (IOSQE_ASYNC: straight to io-wq, where
 * it blocks until a writer opens). Returns 0, or why the kernel refused. */
static int block_io_wq(void *arg) {
  half_close *h = arg;
  int rc = io_uring_queue_init(8, &h->ring, 0);
  if (rc < 0)
    return rc;
  unsigned limits[2] = {1, 1}; /* bounded, unbounded */
  rc = io_uring_register_iowq_max_workers(&h->ring, limits);
  if (rc < 0) {
    io_uring_queue_exit(&h->ring);
    return rc;
  }
  struct io_uring_sqe *sqe = io_uring_get_sqe(&h->ring);
  io_uring_prep_openat(sqe, AT_FDCWD, h->fifo, O_RDONLY | O_CLOEXEC, 0);
  sqe->flags |= IOSQE_ASYNC;
  io_uring_sqe_set_data64(sqe, OP_BLOCKER);
  rc = io_uring_submit(&h->ring);
  return rc == 1 ? 0 : rc;
}

static void written(void *arg, int status) {
  (void)status;
  atomic_store((atomic_int *)arg, 1);
}

/* Loop thread: a few bytes, then the half-close after them. */
static int write_and_half_close(void *arg) {
  half_close *h = arg;
  weft_channel *ch = atomic_load(&h->ch);
  weft_buf *b = weft_buf_alloc(weft_loop_pool(h->loop), 5);
  if (b == NULL || weft_buf_write_bytes(b, "first", 5) < 0) {
    weft_buf_release(b);
    return WEFT_ENOMEM;
  }
  weft_channel_write(ch, b, (weft_promise){written, &h->written});
  weft_channel_shutdown_output(ch, WEFT_PROMISE_NONE);
  return 0;
}

/* Loop thread: closes the channel and drops the test's reference. */
static int close_channel(void *arg) {
  half_close *h = arg;
  weft_channel *ch = atomic_exchange(&h->ch, NULL);
  weft_channel_close(ch, WEFT_PROMISE_NONE);
  weft_channel_release(ch);
  return 0;
}

/* Loop thread: a NOP into the same io-wq, behind whatever waits there. */
static int queue_marker(void *arg) {
  half_close *h = arg;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&h->ring);
  io_uring_prep_nop(sqe);
  sqe->flags |= IOSQE_ASYNC;
  io_uring_sqe_set_data64(sqe, OP_MARKER);
  int rc = io_uring_submit(&h->ring);
  return rc == 1 ? 0 : rc;
}

static void wait_flag(atomic_int *flag, const char *what) {
  uint64_t start = th_now_ms();
  while (!atomic_load(flag)) {
    ck_assert_msg(th_now_ms() - start < WAIT_CAP_MS, "no progress: %s", what);
    th_sleep_ms(1);
  }
}

/* The descriptor of this process whose socket is the other end of the
 * connected socket `peer`. */
static int find_other_end(int peer) {
  struct sockaddr_in mine, theirs, a, b;
  socklen_t len = sizeof mine;
  ck_assert_int_eq(getsockname(peer, (struct sockaddr *)&mine, &len), 0);
  len = sizeof theirs;
  ck_assert_int_eq(getpeername(peer, (struct sockaddr *)&theirs, &len), 0);
  for (int fd = 0; fd < FD_SCAN_MAX; fd++) {
    socklen_t la = sizeof a, lb = sizeof b;
    if (fd == peer || getsockname(fd, (struct sockaddr *)&a, &la) != 0 ||
        getpeername(fd, (struct sockaddr *)&b, &lb) != 0 ||
        a.sin_family != AF_INET)
      continue;
    if (a.sin_port == theirs.sin_port && b.sin_port == mine.sin_port)
      return fd;
  }
  ck_abort_msg("the server's socket is not among this process's fds");
  return -1;
}

/* A connected TCP pair of plain sockets: `*client`, `*server`. */
static void socket_pair(int *client, int *server) {
  uint16_t port;
  int l = th_bind_loopback(&port);
  ck_assert_int_eq(listen(l, 1), 0);
  *client = th_connect_loopback(port);
  *server = accept(l, NULL, NULL);
  ck_assert_int_ge(*server, 0);
  close(l);
}

/* Reaps the test ring until the marker's CQE; closes what the blocker's
 * open returned. */
static void wait_marker(half_close *h) {
  bool marker = false;
  while (!marker) {
    struct io_uring_cqe *cqe;
    struct __kernel_timespec ts = {.tv_sec = WAIT_CAP_MS / 1000};
    ck_assert_int_eq(io_uring_wait_cqe_timeout(&h->ring, &cqe, &ts), 0);
    if (io_uring_cqe_get_data64(cqe) == OP_BLOCKER && cqe->res >= 0)
      close(cqe->res);
    marker = io_uring_cqe_get_data64(cqe) == OP_MARKER;
    io_uring_cqe_seen(&h->ring, cqe);
  }
}

START_TEST(uring_half_close_then_close_spares_next_socket) {
  char why[256] = "";
  if (weft_transport_find("uring", why, sizeof why) == NULL) {
    th_skip(__func__, "io_uring cannot run here: %s", why);
    return;
  }
  half_close *h = calloc(1, sizeof *h);
  ck_assert_ptr_nonnull(h);
  snprintf(h->fifo, sizeof h->fifo, "/tmp/weft-hc-%d", (int)getpid());
  unlink(h->fifo);
  ck_assert_int_eq(mkfifo(h->fifo, 0600), 0);
  weft_loop_group *g = th_group_start("wt-hc", 1);
  h->loop = weft_loop_group_next(g);
  char uri[300];
  weft_server *srv =
      th_server_bind(g, "uring://127.0.0.1:0", hc_init, h, uri, sizeof uri);
  int rc = weft_loop_call(h->loop, block_io_wq, h);
  if (rc < 0) {
    th_skip(__func__, "cannot hold io-wq's worker: %s", strerror(-rc));
  } else {
    int a = th_connect_loopback(th_uri_port(uri));
    uint64_t start = th_now_ms();
    while (atomic_load(&h->ch) == NULL) {
      ck_assert_msg(th_now_ms() - start < WAIT_CAP_MS, "no accept");
      th_sleep_ms(1);
    }
    int x = find_other_end(a);
    int victim, victim_peer;
    socket_pair(&victim_peer, &victim);
    ck_assert_int_eq(weft_loop_call(h->loop, write_and_half_close, h), 0);
    char got[8];
    ck_assert_int_eq(recv(a, got, 5, MSG_WAITALL), 5);
    ck_assert_int_eq(memcmp(got, "first", 5), 0);
    wait_flag(&h->written, "the write's promise");
    ck_assert_int_eq(weft_loop_call(h->loop, close_channel, h), 0);
    start = th_now_ms(); /* the ring's close has run */
    while (fcntl(x, F_GETFD) >= 0) {
      ck_assert_msg(th_now_ms() - start < WAIT_CAP_MS, "fd %d not closed", x);
      th_sleep_ms(1);
    }
    ck_assert_int_eq(dup2(victim, x), x); /* the next owner of the number */
    close(victim);
    ck_assert_int_eq(weft_loop_call(h->loop, queue_marker, h), 0);
    int w = open(h->fifo, O_WRONLY | O_CLOEXEC); /* frees the worker */
    ck_assert_int_ge(w, 0);
    wait_marker(h);
    close(w);
    char c;
    ssize_t n = recv(victim_peer, &c, 1, MSG_DONTWAIT);
    ck_assert_msg(n < 0 && errno == EAGAIN,
                  "the socket given fd %d after the close was half-closed "
                  "(its peer read %zd)",
                  x, n);
    th_write_all(x, "ok", 2); /* and its output still works */
    ck_assert_int_eq(recv(victim_peer, got, 2, MSG_WAITALL), 2);
    close(x);
    close(victim_peer);
    close(a);
    io_uring_queue_exit(&h->ring);
  }
  unlink(h->fifo);
  weft_server_close(srv);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
  free(h);
}
END_TEST

/* Larger than transport.uring.send_zc_min (64 KiB): a zero-copy send,
 * so the close that follows it lingers. */
#define ZC_BYTES (256 * 1024)

static void zc_active(weft_ctx *ctx) {
  weft_channel *ch = weft_ctx_channel(ctx);
  weft_buf *b = weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)), ZC_BYTES);
  ck_assert_ptr_nonnull(b);
  for (size_t i = 0; i < ZC_BYTES; i++)
    weft_buf_wptr(b)[i] = (uint8_t)(i * 7);
  b->writer_index += ZC_BYTES;
  weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
  weft_ctx_flush(ctx);
  weft_ctx_close(ctx, WEFT_PROMISE_NONE); /* in the same turn */
  weft_ctx_fire_channel_active(ctx);
}

static const weft_handler zc_handler = {.name = "zc-close",
                                        .channel_active = zc_active};

static void zc_init(weft_channel *ch, void *arg) {
  (void)arg;
  th_add_last(ch, "zc-close", &zc_handler, NULL);
}

START_TEST(uring_lingering_close_sends_the_flushed_write_first) {
  char why[256] = "";
  if (weft_transport_find("uring", why, sizeof why) == NULL) {
    th_skip(__func__, "io_uring cannot run here: %s", why);
    return;
  }
  weft_loop_group *g = th_group_start("wt-zc", 1);
  char uri[300];
  weft_server *srv =
      th_server_bind(g, "uring://127.0.0.1:0", zc_init, NULL, uri, sizeof uri);
  int fd = th_connect_loopback(th_uri_port(uri));
  static uint8_t got[ZC_BYTES + 1];
  size_t n = 0;
  for (;;) {
    ssize_t r = recv(fd, got + n, sizeof got - n, 0);
    if (r <= 0)
      break;
    n += (size_t)r;
  }
  ck_assert_msg(n == ZC_BYTES, "%zu of %d bytes before the close", n, ZC_BYTES);
  for (size_t i = 0; i < ZC_BYTES; i++)
    ck_assert_uint_eq(got[i], (uint8_t)(i * 7));
  close(fd);
  weft_server_close(srv);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("uring_half_close", "uring_half_close", 120,
                  uring_half_close_then_close_spares_next_socket,
                  uring_lingering_close_sends_the_flushed_write_first, NULL);
}
