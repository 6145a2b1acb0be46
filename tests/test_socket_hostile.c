/* SPDX-License-Identifier: Apache-2.0 */
/* Hostile peers on the socket transports (tcp, uring), beside the
 * transport-neutral hostile-peer suite (test_hostile.c), one run per
 * transport (WEFT_TEST_TRANSPORT; tests/CMakeLists.txt registers this file
 * as test_socket_hostile_tcp and test_socket_hostile_uring):
 *
 *   - a server out of file descriptors closes each new connection at once
 *     (the client sees EOF or a reset, not a hang), keeps serving the
 *     connections it has, logs at most once per second, and serves new
 *     connections again once descriptors are free. The server runs in a
 *     forked child with a low RLIMIT_NOFILE; the clients are this process.
 *   - stopping a loop group while clients that never read leave sends in
 *     flight (and a connect hangs on a full backlog) joins with 0, no leak
 *     and no "did not complete" line, in well under a second.
 *
 * TH_SHOW_LOG=1 prints the server child's log even when the test passes.
 */
#include "harness_scale.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/loop.h>
#include <weft/pipeline.h>
#include <weft/transport_plugin.h>

/* Plain kernel sockets on the other end need a transport that is TCP on
 * the wire (tcp, uring): SOCKET_OPTS says so. */
static bool transport_speaks_tcp(void) {
  const weft_transport_ops *ops =
      weft_transport_find(th_transport_name(), NULL, 0);
  return ops != NULL && (ops->caps & WEFT_TRANSPORT_CAP_SOCKET_OPTS);
}

/* Skips the rest of a test (it passes) when `cond` is false, saying why. */
#define SKIP_UNLESS(cond)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s: skipped on transport %s (needs %s)\n", __func__,    \
              th_transport_name(), #cond);                                     \
      return;                                                                  \
    }                                                                          \
  } while (0)

/* Plain kernel sockets (th_connect_timeout, th_listen_loopback) and the
 * echo server (th_batch_echo_init): harness_scale.h. */

/* ======================================================================
 * Out of file descriptors
 * ====================================================================== */

/* Descriptors the server may open beyond the ones open when it starts:
 * the loops' epoll sets, eventfds and rings, the listener and its spare,
 * and a handful of connections. */
#define FD_HEADROOM 24
#define ANSWER_MS 3000 /* a client that waits longer hangs */
#define MAX_CLIENTS 200

/* What one client saw. */
enum answer { SERVED, REFUSED, HUNG };

/* Sends a line on `fd` and reads the echo: SERVED, REFUSED (EOF or reset:
 * the server closed the connection), or HUNG (no answer in ANSWER_MS). */
static enum answer ping(int fd) {
  static const char msg[] = "ping\n";
  if (send(fd, msg, sizeof msg - 1, MSG_NOSIGNAL) < 0)
    return errno == EAGAIN ? HUNG : REFUSED; /* EPIPE, ECONNRESET */
  char buf[sizeof msg];
  size_t got = 0;
  while (got < sizeof msg - 1) {
    ssize_t n = recv(fd, buf + got, sizeof msg - 1 - got, 0);
    if (n == 0)
      return REFUSED;
    if (n < 0)
      return errno == EAGAIN || errno == EWOULDBLOCK ? HUNG : REFUSED;
    got += (size_t)n;
  }
  return memcmp(buf, msg, got) == 0 ? SERVED : REFUSED;
}

/* The lowest fd limit that leaves `free_slots` descriptor numbers free
 * (a new descriptor takes the lowest free number below the limit). */
static int limit_leaving(int free_slots) {
  int fd = 0;
  for (int left = free_slots; left > 0; fd++)
    if (fcntl(fd, F_GETFD) < 0)
      left--;
  return fd;
}

/* The guard's lines: every line that closed connections says how many, "(N
 * closed so far)" or "(N more closed since the last message)". */
static const char *const count_phrases[] = {
    " closed so far)", " more closed since the last message)"};

/* Sums the connections the log lines account for. */
static long logged_refusals(const char *log) {
  long total = 0;
  for (size_t k = 0; k < 2; k++)
    for (const char *p = log; (p = strstr(p, count_phrases[k])) != NULL; p++) {
      const char *q = p;
      while (q > log && q[-1] >= '0' && q[-1] <= '9')
        q--;
      total += atol(q);
    }
  return total;
}

/* Lines the guard wrote: at most one per second. */
static int guard_lines(void) {
  return th_log_count("closing new connections") +
         th_log_count("descriptors are free again") +
         th_log_count("for a moment") + th_log_count("listener closed");
}

/* The server child: lowers its fd limit, runs an echo server, writes its
 * port to `up`, waits for the parent's count of refused clients on `down`,
 * stops, and checks its log. Exit status: 0, or what went wrong. */
static int fd_limit_server(int up, int down) {
  int limit = limit_leaving(FD_HEADROOM);
  if (th_set_fd_limit((rlim_t)limit) != 0)
    return 10;
  th_log_capture_start();
  weft_log_set_level(WEFT_LOG_INFO);
  uint64_t t0 = th_now_ms();

  weft_loop_group *group = th_loops_start("wt-emfile", 2, false);
  if (group == NULL)
    return 11;
  char listen[64], uri[128];
  snprintf(listen, sizeof listen, "%s://127.0.0.1:0", th_transport_name());
  weft_server *srv = th_child_bind(group, listen, th_batch_echo_init, 0);
  if (srv == NULL || weft_server_address(srv, uri, sizeof uri) < 0)
    return 12;
  uint16_t port = th_uri_port(uri);
  if (write(up, &port, sizeof port) != sizeof port)
    return 13;

  long refused = -1;
  if (read(down, &refused, sizeof refused) != sizeof refused)
    return 14;
  weft_server_close(srv);
  weft_loop_group_stop(group);
  if (weft_loop_group_join(group) != 0)
    return 15;
  weft_loop_group_free(group);
  th_log_capture_stop();

  const char *log = th_log_text();
  char first[64];
  snprintf(first, sizeof first, "too many open files (limit %d)", limit);
  int status = 0;
  if (th_log_count(first) == 0)
    status = 20; /* the line names the limit */
  else if (th_log_count("ulimit -n") == 0)
    status = 21; /* and the way out */
  else if (logged_refusals(log) != refused)
    status = 22; /* every refused connection is counted in some line */
  if (status != 0 || getenv("TH_SHOW_LOG"))
    fprintf(stderr, "server log (%ld refused):\n%s", refused, log);
  /* The once-per-second rule: the parent's burst closed 9 connections in
   * well under a second, and it all took a few seconds. */
  double secs = (double)(th_now_ms() - t0) / 1000.0;
  int lines = guard_lines();
  if (status == 0 && (lines < 2 || lines > (int)secs + 2)) {
    fprintf(stderr, "%d lines from the guard in %.1f s:\n%s", lines, secs, log);
    status = 23;
  }
  return status;
}

/* Connects a client and pings it: SERVED, REFUSED or HUNG; a connect that
 * fails counts as REFUSED. The socket stays open in `*fd` when SERVED. */
static enum answer try_client(uint16_t port, int *fd) {
  *fd = th_connect_timeout(port, ANSWER_MS);
  if (*fd < 0)
    return REFUSED;
  enum answer a = ping(*fd);
  if (a != SERVED) {
    close(*fd);
    *fd = -1;
  }
  return a;
}

START_TEST(hostile_fd_limit_closes_new_connections_and_recovers) {
  SKIP_UNLESS(transport_speaks_tcp());
  int up[2], down[2];
  ck_assert_int_eq(pipe2(up, O_CLOEXEC), 0);
  ck_assert_int_eq(pipe2(down, O_CLOEXEC), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    _exit(fd_limit_server(up[1], down[0]));
  }
  close(up[1]);
  close(down[0]);
  uint16_t port = 0;
  ck_assert_int_eq(read(up[0], &port, sizeof port), (ssize_t)sizeof port);

  /* Clients until the server is out of descriptors: the first one it
   * cannot serve is closed at once. */
  int served[MAX_CLIENTS];
  int n_served = 0;
  long refused = 0;
  enum answer a = SERVED;
  while (n_served < MAX_CLIENTS) {
    int fd;
    a = try_client(port, &fd);
    if (a != SERVED)
      break;
    served[n_served++] = fd;
  }
  ck_assert_msg(a != HUNG,
                "client %d hung for %d ms: the server out of descriptors "
                "neither served nor closed it",
                n_served + 1, ANSWER_MS);
  ck_assert_msg(a == REFUSED, "%d clients served: no fd limit reached",
                n_served);
  refused++;
  ck_assert_int_ge(n_served, 2);

  /* A burst of new clients while the limit lasts: each closed at once. */
  int burst[8];
  for (int i = 0; i < 8; i++)
    burst[i] = th_connect_timeout(port, ANSWER_MS);
  for (int i = 0; i < 8; i++) {
    if (burst[i] < 0) {
      refused++;
      continue;
    }
    enum answer b = ping(burst[i]);
    ck_assert_msg(b != HUNG, "burst client %d hung at the fd limit", i);
    ck_assert_msg(b == REFUSED, "burst client %d was served at the fd limit",
                  i);
    refused++;
    close(burst[i]);
  }

  /* The connections the server has are still served. */
  for (int i = 0; i < n_served; i++)
    ck_assert_msg(ping(served[i]) == SERVED,
                  "client %d not served while at the limit", i);

  /* A second later, one more: its line carries the count of the burst. */
  th_sleep_ms(1100);
  int fd;
  ck_assert_int_eq(try_client(port, &fd), REFUSED);
  refused++;

  /* Descriptors free up: new clients are served again (the server closes
   * its ends of the two as it reads their EOF). */
  close(served[--n_served]);
  close(served[--n_served]);
  uint64_t deadline = th_now_ms() + 10000;
  for (;;) {
    a = try_client(port, &fd);
    ck_assert_msg(a != HUNG, "a client hung after descriptors were freed");
    if (a == SERVED)
      break;
    refused++;
    ck_assert_msg(th_now_ms() < deadline,
                  "no client served 10 s after descriptors were freed");
    th_sleep_ms(20);
  }
  served[n_served++] = fd;

  for (int i = 0; i < n_served; i++)
    close(served[i]);
  ck_assert_int_eq(write(down[1], &refused, sizeof refused),
                   (ssize_t)sizeof refused);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "the server child failed: status %d (see its log above)",
                WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
  close(up[0]);
  close(down[1]);
}
END_TEST

/* ======================================================================
 * Stop with unsent output
 * ====================================================================== */

/* A server that writes to each client until its channel is unwritable, and
 * again each time it is writable: with a client that never reads, sends
 * stay in flight and the outbound queue stays full. Every other channel
 * writes 64 B buffers (one gathered sendmsg of many), the others 128 KiB
 * ones (zero copy on uring). The last channel closes itself as soon as it
 * is stuck, before the stop, with its bytes unacknowledged in the kernel. */
#define FLOOD_CLIENTS 4

typedef struct flood {
  atomic_int channels;
  atomic_int stuck; /* channels that went unwritable */
} flood;

typedef struct flood_conn {
  flood *f;
  size_t chunk;
  bool close_when_stuck;
  bool was_stuck;
} flood_conn;

/* Writes chunks until the channel is unwritable, then flushes. */
static void flood_write(weft_ctx *ctx) {
  flood_conn *c = weft_ctx_state(ctx);
  weft_channel *ch = weft_ctx_channel(ctx);
  weft_pool *pool = weft_loop_pool(weft_channel_loop(ch));
  while (weft_channel_is_writable(ch) && weft_channel_is_active(ch)) {
    weft_buf *b = weft_buf_alloc(pool, c->chunk);
    if (b == NULL)
      break;
    memset(weft_buf_wptr(b), 'x', c->chunk);
    b->writer_index += c->chunk;
    weft_channel_write(ch, b, WEFT_PROMISE_NONE);
  }
  weft_channel_flush(ch);
}

/* The flood starts as soon as the channel is active. */
static void flood_active(weft_ctx *ctx) { flood_write(ctx); }

/* Closes channel `arg` and drops the reference the caller took. */
static void close_task(void *arg) {
  weft_channel_close(arg, WEFT_PROMISE_NONE);
  weft_channel_release(arg);
}

/* Counts a channel that got stuck (closing it if it is the one to close)
 * and writes again when it is writable. */
static void flood_writability(weft_ctx *ctx, bool writable) {
  flood_conn *c = weft_ctx_state(ctx);
  if (!writable && !c->was_stuck) {
    c->was_stuck = true;
    atomic_fetch_add(&c->f->stuck, 1);
    if (c->close_when_stuck) {
      /* From a task: this may run inside channel_active. */
      weft_channel *ch = weft_channel_retain(weft_ctx_channel(ctx));
      if (weft_loop_execute(weft_channel_loop(ch), close_task, ch) < 0)
        weft_channel_release(ch);
    }
  }
  if (writable && weft_channel_is_active(weft_ctx_channel(ctx)))
    flood_write(ctx);
}

/* Frees the handler's state with the handler. */
static void flood_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler flood_handler = {
    .name = "flood",
    .handler_removed = flood_removed,
    .channel_active = flood_active,
    .writability_changed = flood_writability,
    .exception_caught = th_close_on_exception};

/* The flood server's child initializer: picks the chunk size and whether
 * the channel closes itself when stuck, by order of arrival. */
static void flood_init(weft_channel *ch, void *arg) {
  flood *f = arg;
  flood_conn *c = calloc(1, sizeof *c);
  ck_assert_ptr_nonnull(c);
  c->f = f;
  int i = atomic_fetch_add(&f->channels, 1);
  c->chunk = i % 2 == 0 ? 64 : 128 * 1024;
  c->close_when_stuck = i == FLOOD_CLIENTS - 1;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "flood", &flood_handler, c);
}

/* A client channel with no handler of its own. */
static void no_init(weft_channel *ch, void *arg) {
  (void)ch;
  (void)arg;
}

START_TEST(hostile_stop_with_unsent_output_joins_clean) {
  SKIP_UNLESS(transport_speaks_tcp());
  th_log_capture_start();
  weft_log_set_level(WEFT_LOG_INFO);
  weft_loop_group *group = th_group_start("wt-stop", 2);

  flood fl;
  atomic_init(&fl.channels, 0);
  atomic_init(&fl.stuck, 0);
  char listen[64], uri[128];
  snprintf(listen, sizeof listen, "%s://127.0.0.1:0", th_transport_name());
  weft_server *srv =
      th_server_bind(group, listen, flood_init, &fl, uri, sizeof uri);

  /* Clients that never read, with small receive buffers. */
  int fds[FLOOD_CLIENTS];
  for (int i = 0; i < FLOOD_CLIENTS; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fds[i], 0);
    int small = 4096;
    setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    struct sockaddr_in sin = {.sin_family = AF_INET,
                              .sin_port = htons(th_uri_port(uri)),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(connect(fds[i], (struct sockaddr *)&sin, sizeof sin), 0);
  }

  /* A connect that hangs: the peer's backlog is full, so its SYNs go
   * unanswered. */
  uint16_t full_port;
  int full = th_listen_loopback(0, &full_port);
  int filler = th_connect_timeout(full_port, 1000);
  ck_assert_int_ge(filler, 0);
  char full_uri[64];
  snprintf(full_uri, sizeof full_uri, "%s://127.0.0.1:%u", th_transport_name(),
           (unsigned)full_port);
  atomic_int connect_status;
  atomic_init(&connect_status, 1);
  th_connect(group, NULL, full_uri, no_init, NULL, &connect_status);

  ASSERT_EVENTUALLY(atomic_load(&fl.stuck) == FLOOD_CLIENTS, 10000);
  th_sleep_ms(200); /* the sends fill the sockets and wait there */
  ck_assert_int_eq(atomic_load(&connect_status), 1); /* still connecting */

  uint64_t t0 = th_now_ms();
  weft_loop_group_stop(group);
  int rc = weft_loop_group_join(group);
  uint64_t took = th_now_ms() - t0;
  th_log_capture_stop();
  ck_assert_msg(rc == 0, "join: %s; log:\n%s", weft_err_name(rc),
                th_log_text());
  ck_assert_msg(th_log_count("did not complete") == 0, "log:\n%s",
                th_log_text());
  ck_assert_msg(th_log_count("leaked") == 0, "log:\n%s", th_log_text());
  ck_assert_msg(took < 1000, "the stop took %llu ms", (unsigned long long)took);
  ck_assert_int_ne(atomic_load(&connect_status), 1); /* failed at the stop */

  weft_server_close(srv);
  weft_loop_group_free(group);
  for (int i = 0; i < FLOOD_CLIENTS; i++)
    close(fds[i]);
  close(filler);
  close(full);
}
END_TEST

Suite *weft_test_suite(void) {
  th_require_transport(); /* exits as skipped where it cannot run */
  return th_suite("hostile", "hostile", 60,
                  hostile_stop_with_unsent_output_joins_clean,
                  hostile_fd_limit_closes_new_connections_and_recovers, NULL);
}
