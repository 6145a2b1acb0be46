/* SPDX-License-Identifier: Apache-2.0 */
/* The io_uring transport's own behaviours, beyond the shared channel suite:
 * the provided buffer ring running dry under a reader that holds every
 * buffer, zero-copy sends, and the probe's message and the tcp fallback
 * when io_uring is blocked (a seccomp filter in a child process).
 *
 * Each test is recorded as skipped (th_skip) where io_uring cannot run on
 * the host. */
#include "harness_scale.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/pipeline.h>
#include <weft/transport_plugin.h>

#include "transports/uring/uring.h"

#define MIB (1024u * 1024u)

/* False, with the check `check` recorded as skipped, where io_uring
 * cannot run on this host. */
static bool uring_runs_here(const char *check) {
  char why[256] = "";
  if (weft_transport_find("uring", why, sizeof why) != NULL)
    return true;
  th_skip(check, "io_uring cannot run here: %s", why);
  return false;
}

/* ---- the seeded byte stream: byte i is a function of (seed, i) ---- */

static uint8_t stream_byte(uint64_t i) {
  uint64_t x = (i / 8) * 0x9e3779b97f4a7c15ull + 0x1234567ull;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return (uint8_t)(x >> ((i % 8) * 8));
}

static void stream_fill(uint64_t off, uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    p[i] = stream_byte(off + i);
}

static bool stream_ok(uint64_t off, const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != stream_byte(off + i))
      return false;
  return true;
}

/* ---- a server handler: hoards buffers, or echoes ---- */

#define MAX_HELD 4096

typedef struct sink {
  bool echo; /* echo what arrives instead of checking it */
  /* hoarding (loop thread only, read by the test after `done`) */
  weft_buf *held[MAX_HELD];
  uint64_t held_off[MAX_HELD];
  int n_held;
  bool hoarding;                /* still holding everything */
  int max_held_ring;            /* most provided-ring buffers held at once */
  uint64_t received;            /* bytes, in order */
  bool corrupt;                 /* a byte differed from the stream */
  weft__uring_stats at_release; /* counters when the hoard was released */
  weft__uring_stats at_end;
  weft_loop_stats loop_at_end;
  atomic_int done; /* the channel went inactive */
} sink;

static void release_hoard(sink *s) {
  for (int i = 0; i < s->n_held; i++) {
    /* The slot must not have been reused while held. */
    if (!stream_ok(s->held_off[i], weft_buf_rptr(s->held[i]),
                   weft_buf_readable(s->held[i])))
      s->corrupt = true;
    weft_buf_release(s->held[i]);
  }
  s->n_held = 0;
  s->hoarding = false;
}

static void sink_read(weft_ctx *ctx, void *msg) {
  sink *s = weft_ctx_state(ctx);
  weft_buf *b = msg;
  if (s->echo) {
    weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
    return;
  }
  size_t n = weft_buf_readable(b);
  if (!stream_ok(s->received, weft_buf_rptr(b), n))
    s->corrupt = true;
  uint64_t off = s->received;
  s->received += n;
  if (!s->hoarding || s->n_held == MAX_HELD) {
    weft_buf_release(b);
    return;
  }
  s->held_off[s->n_held] = off;
  s->held[s->n_held++] = b;
  weft__uring_stats st;
  if (weft__uring_stats_get(weft_channel_loop(weft_ctx_channel(ctx)), &st) < 0)
    return;
  if ((int)st.bufs_out > s->max_held_ring)
    s->max_held_ring = (int)st.bufs_out;
  /* The ring ran dry (the multishot recv ended with ENOBUFS) and reading
   * went on anyway: give everything back. */
  if (st.enobufs > 0 && st.bufs_out == st.buf_count && st.plain_recvs > 0) {
    s->at_release = st;
    release_hoard(s);
  }
}

static void sink_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static void sink_inactive(weft_ctx *ctx) {
  sink *s = weft_ctx_state(ctx);
  release_hoard(s);
  weft_loop *loop = weft_channel_loop(weft_ctx_channel(ctx));
  weft__uring_stats_get(loop, &s->at_end);
  weft_loop_stats_get(loop, &s->loop_at_end);
  atomic_store(&s->done, 1);
}

static const weft_handler sink_handler = {.name = "sink",
                                          .channel_read = sink_read,
                                          .channel_read_complete =
                                              sink_read_complete,
                                          .channel_inactive = sink_inactive};

static void sink_init(weft_channel *ch, void *arg) {
  th_add_last(ch, "sink", &sink_handler, arg);
}

typedef struct server {
  weft_loop_group *group;
  weft_server *srv;
  uint16_t port;
} server;

/* A server of one loop with `busy_poll_us` (-1: the default). */
static void server_start_polling(server *sv, sink *s, int busy_poll_us) {
  weft_loop_options opts;
  weft_loop_options_init(&opts);
  opts.n_loops = 1;
  if (busy_poll_us >= 0)
    opts.busy_poll_us = busy_poll_us;
  opts.name = "wt-uring";
  ck_assert_int_eq(weft_loop_group_new(&sv->group, &opts), 0);
  ck_assert_int_eq(weft_loop_group_start(sv->group), 0);
  char uri[300];
  sv->srv = th_server_bind(sv->group, "uring://127.0.0.1:0", sink_init, s, uri,
                           sizeof uri);
  sv->port = th_uri_port(uri);
  ck_assert_uint_ne(sv->port, 0);
}

static void server_start(server *sv, sink *s) {
  server_start_polling(sv, s, -1);
}

static void server_stop(server *sv) {
  weft_server_close(sv->srv);
  weft_loop_group_stop(sv->group);
  ck_assert_int_eq(weft_loop_group_join(sv->group), 0);
  weft_loop_group_free(sv->group);
}

/* ---- the provided buffer ring running dry ---- */

START_TEST(uring_recv_holding_every_buffer_loses_no_byte) {
  setenv("WEFT_TRANSPORT_URING_BUF_COUNT", "8", 1);
  setenv("WEFT_TRANSPORT_URING_BUF_SIZE", "4096", 1);
  if (!uring_runs_here(__func__))
    return;
  enum { TOTAL = 4 * MIB, CHUNK = 1000 }; /* odd size: slots fill unevenly */
  sink *s = calloc(1, sizeof *s);
  ck_assert_ptr_nonnull(s);
  s->hoarding = true;
  server sv;
  server_start(&sv, s);
  int fd = th_raw_connect(sv.port);
  static uint8_t chunk[CHUNK];
  for (uint64_t off = 0; off < TOTAL; off += CHUNK) {
    size_t n = TOTAL - off < CHUNK ? (size_t)(TOTAL - off) : CHUNK;
    stream_fill(off, chunk, n);
    th_write_all(fd, chunk, n);
  }
  close(fd);
  ck_assert_msg(WAIT_UNTIL(atomic_load(&s->done) != 0, 30000),
                "the server saw no EOF");
  server_stop(&sv);

  ck_assert_msg(!s->corrupt, "a received byte differs from the stream");
  ck_assert_uint_eq(s->received, TOTAL);
  ck_assert_int_eq(s->max_held_ring, 8); /* the whole ring was held */
  ck_assert_uint_ge(s->at_release.enobufs, 1);
  ck_assert_uint_ge(s->at_release.plain_recvs, 1);
  ck_assert_uint_eq(s->at_end.bufs_out, 0); /* every slot came back */
  /* After the release the ring was used again. */
  ck_assert_uint_gt(s->at_end.recv_bufs, s->at_release.recv_bufs);
  free(s);
}
END_TEST

/* ---- the blocking loop sleeps in the ring ---- */

/* A blocking (busy_poll_us 0) echo of one small message at a time: the
 * loop sleeps in io_uring_enter (weft_source_ops sleep), so each message
 * costs the server two system calls, an enter for the reply and the
 * sleep's, where epoll_pwait2 on the ring's eventfd and two enters made
 * three. Counted, not timed: enters plus the loop's sleeps outside the
 * ring (epoll) per message. */
START_TEST(uring_blocking_echo_sleeps_in_the_ring) {
  if (!uring_runs_here(__func__))
    return;
  enum { MSGS = 300, SIZE = 16 };
  sink *s = calloc(1, sizeof *s);
  ck_assert_ptr_nonnull(s);
  s->echo = true;
  server sv;
  server_start_polling(&sv, s, 0);
  int fd = th_raw_connect(sv.port);
  uint8_t msg[SIZE], back[SIZE];
  for (int i = 0; i < MSGS; i++) {
    memset(msg, 'a' + i % 26, sizeof msg);
    th_write_all(fd, msg, sizeof msg);
    size_t got = 0;
    while (got < sizeof back) {
      ssize_t r = read(fd, back + got, sizeof back - got);
      ck_assert_msg(r > 0, "read: %s", r < 0 ? strerror(errno) : "EOF");
      got += (size_t)r;
    }
    ck_assert_int_eq(memcmp(back, msg, sizeof msg), 0);
  }
  close(fd);
  ck_assert_msg(WAIT_UNTIL(atomic_load(&s->done) != 0, 30000),
                "the server saw no EOF");
  server_stop(&sv);

  const weft__uring_stats *u = &s->at_end;
  uint64_t epoll_sleeps = s->loop_at_end.sleeps - u->sleeps;
  fprintf(stderr,
          "uring blocking echo: %llu enters (%llu sleeps in the ring), "
          "%llu epoll sleeps for %d messages\n",
          (unsigned long long)u->enters, (unsigned long long)u->sleeps,
          (unsigned long long)epoll_sleeps, MSGS);
  /* Two per message, and a margin for the accept, the close and wake-ups
   * with nothing to do. */
  ck_assert_msg(u->enters + epoll_sleeps <= 2 * MSGS + MSGS / 4,
                "%llu enters and %llu epoll sleeps for %d messages",
                (unsigned long long)u->enters, (unsigned long long)epoll_sleeps,
                MSGS);
  /* It slept in the ring (not before every message: a request that comes
   * while the loop still reaps its reply's completion is polled). */
  ck_assert_msg(u->sleeps > 0, "no sleep in the ring for %d messages", MSGS);
  free(s);
}
END_TEST

/* ---- zero-copy sends ---- */

static void echo_round_trip(server *sv, size_t total) {
  int fd = th_raw_connect(sv->port);
  uint8_t *out = malloc(total), *in = malloc(total);
  ck_assert_ptr_nonnull(out);
  ck_assert_ptr_nonnull(in);
  stream_fill(0, out, total);
  size_t sent = 0, got = 0;
  /* Interleave so neither side's socket buffer fills for good. */
  while (got < total) {
    if (sent < total) {
      size_t n = total - sent < 65536 ? total - sent : 65536;
      th_write_all(fd, out + sent, n);
      sent += n;
    }
    while (got < sent) {
      ssize_t r = read(fd, in + got, total - got);
      ck_assert_msg(r > 0, "read: %s", r < 0 ? strerror(errno) : "EOF");
      got += (size_t)r;
      if (sent < total)
        break;
    }
  }
  ck_assert_int_eq(memcmp(in, out, total), 0);
  close(fd);
  free(out);
  free(in);
}

START_TEST(uring_send_zc_above_threshold_keeps_order) {
  setenv("WEFT_TRANSPORT_URING_SEND_ZC_MIN", "1024", 1);
  if (!uring_runs_here(__func__))
    return;
  sink *s = calloc(1, sizeof *s);
  ck_assert_ptr_nonnull(s);
  s->echo = true;
  server sv;
  server_start(&sv, s);
  echo_round_trip(&sv, 4 * MIB);
  ck_assert_msg(WAIT_UNTIL(atomic_load(&s->done) != 0, 20000),
                "the server saw no EOF");
  server_stop(&sv);
  /* Loopback copies anyway and says so; the channel then sends plainly. */
  ck_assert_uint_ge(s->at_end.zc_sends, 1);
  fprintf(stderr, "uring zc: %llu zero-copy sends, %llu copied, %llu plain\n",
          (unsigned long long)s->at_end.zc_sends,
          (unsigned long long)s->at_end.zc_copied,
          (unsigned long long)s->at_end.sends);
  free(s);
}
END_TEST

/* ---- io_uring blocked: the message, and the fallback ---- */

/* Makes io_uring_setup fail with EPERM in this process, as Docker's default
 * seccomp profile does. */
static int block_io_uring(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return -1;
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* Exit codes of the child: 0 = as expected. */
enum {
  CHILD_OK,
  CHILD_NO_SECCOMP = 10,
  CHILD_FOUND,
  CHILD_BAD_WHY,
  CHILD_NOT_FOUND,
  CHILD_ECHO_FAILED
};

static int child_blocked(void) {
  if (block_io_uring() < 0)
    return CHILD_NO_SECCOMP;
  char why[256] = "";
  if (weft_transport_find("uring", why, sizeof why) != NULL)
    return CHILD_FOUND;
  fprintf(stderr, "probe says: %s\n", why);
  if (strcasestr(why, "operation not permitted") == NULL ||
      strstr(why, "seccomp") == NULL || strstr(why, "transport=tcp") == NULL)
    return CHILD_BAD_WHY;
  return CHILD_OK;
}

static int child_fallback(void) {
  if (block_io_uring() < 0)
    return CHILD_NO_SECCOMP;
  setenv("WEFT_TRANSPORT_URING_FALLBACK", "tcp", 1);
  const weft_transport_ops *ops = weft_transport_find("uring", NULL, 0);
  if (ops == NULL)
    return CHILD_NOT_FOUND;
  if (strcmp(ops->name, "tcp") != 0) /* the registry hands out the fallback */
    return CHILD_FOUND;
  sink *s = calloc(1, sizeof *s);
  s->echo = true;
  server sv;
  server_start(&sv, s);
  echo_round_trip(&sv, 256 * 1024);
  bool echoed = WAIT_UNTIL(atomic_load(&s->done) != 0, 20000);
  server_stop(&sv);
  free(s);
  return echoed ? CHILD_OK : CHILD_ECHO_FAILED;
}

static int run_child(int (*fn)(void)) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    _exit(fn());
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status), "child died (status 0x%x)", status);
  return WEXITSTATUS(status);
}

/* The check `check`: `child` must report CHILD_OK, or the check is
 * skipped where no seccomp filter can be installed. */
static void expect_child_ok(const char *check, int (*child)(void)) {
  int rc = run_child(child);
  if (rc == CHILD_NO_SECCOMP) {
    th_skip(check, "cannot install a seccomp filter here");
    return;
  }
  ck_assert_int_eq(rc, CHILD_OK);
}

START_TEST(uring_probe_blocked_by_seccomp_names_cause_and_tcp) {
  expect_child_ok(__func__, child_blocked);
}
END_TEST

START_TEST(uring_fallback_env_runs_over_tcp_when_blocked) {
  expect_child_ok(__func__, child_fallback);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("uring");
  th_add_case(s, "buffer_ring", 120,
              uring_recv_holding_every_buffer_loses_no_byte,
              uring_send_zc_above_threshold_keeps_order, NULL);
  th_add_case(s, "sleep", 120, uring_blocking_echo_sleeps_in_the_ring, NULL);
  th_add_case(s, "probe", 120,
              uring_probe_blocked_by_seccomp_names_cause_and_tcp,
              uring_fallback_env_runs_over_tcp_when_blocked, NULL);
  return s;
}
