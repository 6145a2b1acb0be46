/* SPDX-License-Identifier: Apache-2.0 */
/* The channel integration suite: real connections over loopback, run once
 * per transport (Netty's testsuite module is the model). The transport comes
 * from WEFT_TEST_TRANSPORT (default "tcp"); tests/CMakeLists.txt registers
 * this file once per transport.
 *
 * Every test starts its own loop group, checks what it is about, and ends
 * with weft_loop_group_join() == 0: no buffer leaked (WEFT_LEAK_DETECT=1).
 * Waits have generous timeouts and no test asserts on tight timings: the
 * machine running them may be small, shared and noisy.
 *
 * WEFT_TEST_SCALE (a factor, default 1) scales the bytes of the 100-client
 * echo test, so slow builds (sanitizers) can run it smaller.
 */
#include "harness_scale.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/pipeline.h>
#include <weft/transport_plugin.h>

#define MIB (1024u * 1024u)
#define PENDING 1 /* a status not yet reported (statuses are <= 0) */

/* ---- environment ---- */

/* Tests that talk to weft with plain kernel sockets on the other end need
 * a transport that is TCP on the wire (tcp, uring): SOCKET_OPTS says so. */
static bool transport_speaks_tcp(void) {
  const weft_transport_ops *ops =
      weft_transport_find(th_transport_name(), NULL, 0);
  return ops != NULL && (ops->caps & WEFT_TRANSPORT_CAP_SOCKET_OPTS);
}

static bool transport_has(uint32_t cap) {
  const weft_transport_ops *ops =
      weft_transport_find(th_transport_name(), NULL, 0);
  return ops != NULL && (ops->caps & cap);
}

#define SKIP_UNLESS(cond) TH_SKIP_UNLESS(cond)

/* Typed loads for assertions: functions, not macros, so a failing Check
 * assertion prints "ldi(&p.closed) == 1" rather than the atomic's expansion. */
static int ldi(atomic_int *p) { return atomic_load(p); }
static size_t ldz(atomic_size_t *p) { return atomic_load(p); }
static long long ldll(atomic_llong *p) { return atomic_load(p); }

/* ---- the seeded byte stream ----
 * Byte i of stream `seed` is byte (i % 8) of splitmix64(seed, i / 8): any
 * range can be produced or checked without state. */

static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void stream_fill(uint64_t seed, uint64_t off, uint8_t *dst, size_t n) {
  uint64_t block = splitmix64(seed ^ ((off >> 3) * 0xd1b54a32d192ed03ull));
  for (size_t i = 0; i < n; i++, off++) {
    if ((off & 7) == 0)
      block = splitmix64(seed ^ ((off >> 3) * 0xd1b54a32d192ed03ull));
    dst[i] = (uint8_t)(block >> ((off & 7) * 8));
  }
}

/* Index of the first byte of dst[0..n) that differs from the stream at
 * `off`, or n. */
static size_t stream_check(uint64_t seed, uint64_t off, const uint8_t *src,
                           size_t n) {
  uint8_t want[4096];
  for (size_t done = 0; done < n;) {
    size_t k = n - done < sizeof want ? n - done : sizeof want;
    stream_fill(seed, off + done, want, k);
    if (memcmp(want, src + done, k) != 0)
      for (size_t i = 0; i < k; i++)
        if (want[i] != src[done + i])
          return done + i;
    done += k;
  }
  return n;
}

static uint64_t rng_next(uint64_t *s) {
  *s += 1;
  return splitmix64(*s);
}

/* A write size from 1 B to 64 KiB, log-uniform: tiny writes are as common
 * as large ones. */
static size_t rng_write_size(uint64_t *s) {
  uint64_t r = rng_next(s);
  size_t max = (size_t)1 << (r % 17); /* 1 .. 64 Ki */
  return 1 + (size_t)((r >> 8) % max);
}

/* ---- an echo server with counters ---- */

typedef struct server_stats {
  atomic_int active;
  atomic_int inactive;
  atomic_int exceptions;
  atomic_int inactive_after_exception;
  atomic_int last_err;
  atomic_llong bytes;
} server_stats;

typedef struct echo_conn {
  server_stats *st;
  bool saw_exception;
} echo_conn;

static void echo_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static void echo_active(weft_ctx *ctx) {
  echo_conn *e = weft_ctx_state(ctx);
  atomic_fetch_add(&e->st->active, 1);
}

static void echo_inactive(weft_ctx *ctx) {
  echo_conn *e = weft_ctx_state(ctx);
  if (e->saw_exception)
    atomic_fetch_add(&e->st->inactive_after_exception, 1);
  atomic_fetch_add(&e->st->inactive, 1);
}

static void echo_read(weft_ctx *ctx, void *msg) {
  echo_conn *e = weft_ctx_state(ctx);
  atomic_fetch_add(&e->st->bytes, (long long)weft_buf_readable(msg));
  weft_ctx_write(ctx, msg, WEFT_PROMISE_NONE);
}

static void echo_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

/* Back-pressure: stop reading while the echo cannot be sent, so a client
 * that does not read cannot make the server queue without bound. */
static void echo_writability(weft_ctx *ctx, bool writable) {
  weft_channel_set_option(weft_ctx_channel(ctx), WEFT_OPT_AUTO_READ,
                          writable ? 1 : 0);
}

static void echo_exception(weft_ctx *ctx, int err, const char *reason) {
  (void)reason;
  echo_conn *e = weft_ctx_state(ctx);
  e->saw_exception = true;
  atomic_store(&e->st->last_err, err);
  atomic_fetch_add(&e->st->exceptions, 1);
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static const weft_handler echo_handler = {
    .name = "echo",
    .handler_removed = echo_removed,
    .channel_active = echo_active,
    .channel_inactive = echo_inactive,
    .channel_read = echo_read,
    .channel_read_complete = echo_read_complete,
    .writability_changed = echo_writability,
    .exception_caught = echo_exception};

static void echo_init(weft_channel *ch, void *arg) {
  echo_conn *e = calloc(1, sizeof *e);
  ck_assert_ptr_nonnull(e);
  e->st = arg;
  th_add_last(ch, "echo", &echo_handler, e);
}

/* A loop group, and optionally an echo server on it. */
typedef struct fixture {
  weft_loop_group *group;
  weft_server *srv;
  server_stats st;
  char uri[300]; /* the server's bound address */
  uint16_t port;
} fixture;

static void group_start(fixture *f, const char *name) {
  weft_loop_options opts;
  weft_loop_options_init(&opts);
  opts.n_loops = th_suite_loops();
  opts.name = name;
  /* Over UCX the client's and the server's workers share this process,
   * where UCX 1.13 can abort (docs/transports/ucx.md, "Many workers in one
   * process"): pinned, as before loops stopped being pinned by default
   * (issue 32), both groups' loops share the first CPU. Unpinned, 9 of 10
   * runs passed and one timed out unexplained on the loaded machine. */
  opts.pin = strcmp(th_transport_name(), "ucx") == 0;
  ck_assert_int_eq(weft_loop_group_new(&f->group, &opts), 0);
  ck_assert_int_eq(weft_loop_group_start(f->group), 0);
}

static void server_start(fixture *f, const char *name) {
  memset(f, 0, sizeof *f);
  group_start(f, name);
  char listen[64];
  snprintf(listen, sizeof listen, "%s://%s:0", th_transport_name(),
           th_test_host());
  f->srv = th_server_bind(f->group, listen, echo_init, &f->st, f->uri,
                          sizeof f->uri);
  const char *colon = strrchr(f->uri, ':');
  ck_assert_ptr_nonnull(colon);
  f->port = (uint16_t)atoi(colon + 1);
  ck_assert_uint_ne(f->port, 0);
}

/* Stops everything; every buffer must be back in its pool. */
static void fixture_stop(fixture *f) {
  if (f->srv != NULL)
    weft_server_close(f->srv);
  weft_loop_group_stop(f->group);
  ck_assert_int_eq(weft_loop_group_join(f->group), 0);
  weft_loop_group_free(f->group);
}

/* ---- a streaming echo client ----
 * Sends `total` bytes of its seeded stream in randomly sized writes with
 * random flush points, never more than `limit`, pausing while the channel
 * is unwritable; checks that every echoed byte comes back in order; closes
 * once all came back. */

typedef struct stream_client {
  uint64_t seed;
  uint64_t rng;        /* write sizes and flush points */
  size_t total;        /* bytes to send and receive */
  size_t sent;         /* loop thread */
  size_t received;     /* loop thread */
  atomic_size_t limit; /* send at most this many (raised by the test) */
  weft_channel *ch;    /* loop thread; NULL once inactive */
  bool pumping, repump;
  atomic_int state; /* 0 running, 1 done, -1 failed (see why) */
  atomic_int connect_status;
  atomic_size_t received_pub; /* `received`, for the test thread */
  char why[200];
} stream_client;

static void client_fail(stream_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void client_fail(stream_client *c, const char *fmt, ...) {
  if (atomic_load(&c->state) != 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->why, sizeof c->why, fmt, ap);
  va_end(ap);
  atomic_store(&c->state, -1); /* publishes why */
  if (c->ch != NULL)
    weft_channel_close(c->ch, WEFT_PROMISE_NONE);
}

static void client_write_done(void *arg, int status) {
  if (status != 0)
    client_fail(arg, "a write failed: %s", weft_err_name(status));
}

/* One round: write while writable, then flush what was written. */
static void pump_once(stream_client *c) {
  weft_channel *ch = c->ch;
  weft_pool *pool = weft_loop_pool(weft_channel_loop(ch));
  size_t limit = atomic_load(&c->limit);
  if (limit > c->total)
    limit = c->total;
  while (c->sent < limit && weft_channel_is_writable(ch) &&
         weft_channel_is_active(ch)) {
    size_t n = rng_write_size(&c->rng);
    if (n > limit - c->sent)
      n = limit - c->sent;
    weft_buf *b = weft_buf_alloc(pool, n);
    ck_assert_ptr_nonnull(b);
    stream_fill(c->seed, c->sent, weft_buf_wptr(b), n);
    b->writer_index += n;
    c->sent += n;
    weft_channel_write(ch, b, (weft_promise){client_write_done, c});
    if (rng_next(&c->rng) % 4 == 0)
      weft_channel_flush(ch);
  }
  if (weft_channel_is_active(ch))
    weft_channel_flush(ch);
}

/* Writability can come back inside our own flush; then go round again
 * instead of nesting. */
static void pump(stream_client *c) {
  if (c->pumping) {
    c->repump = true;
    return;
  }
  c->pumping = true;
  do {
    c->repump = false;
    if (c->ch != NULL)
      pump_once(c);
  } while (c->repump);
  c->pumping = false;
}

static void pump_task(void *arg) { pump(arg); }

static void client_closed(void *arg, int status) {
  stream_client *c = arg;
  int running = 0;
  if (status == 0)
    atomic_compare_exchange_strong(&c->state, &running, 1);
  else
    client_fail(c, "close failed: %s", weft_err_name(status));
}

static void client_active(weft_ctx *ctx) {
  stream_client *c = weft_ctx_state(ctx);
  c->ch = weft_ctx_channel(ctx);
  pump(c);
}

static void client_read(weft_ctx *ctx, void *msg) {
  stream_client *c = weft_ctx_state(ctx);
  weft_buf *b = msg;
  size_t n = weft_buf_readable(b);
  size_t bad = stream_check(c->seed, c->received, weft_buf_rptr(b), n);
  if (bad < n)
    client_fail(c, "byte %zu of the echo differs", c->received + bad);
  else if (c->received + n > c->total)
    client_fail(c, "%zu bytes echoed, %zu sent", c->received + n, c->total);
  c->received += n;
  atomic_store(&c->received_pub, c->received);
  weft_buf_release(b);
  if (c->received == c->total && atomic_load(&c->state) == 0)
    weft_channel_close(weft_ctx_channel(ctx), (weft_promise){client_closed, c});
}

static void client_writability(weft_ctx *ctx, bool writable) {
  if (writable)
    pump(weft_ctx_state(ctx));
}

static void client_inactive(weft_ctx *ctx) {
  stream_client *c = weft_ctx_state(ctx);
  if (c->received < c->total)
    client_fail(c, "closed after %zu of %zu bytes came back", c->received,
                c->total);
  c->ch = NULL;
}

static void client_exception(weft_ctx *ctx, int err, const char *reason) {
  client_fail(weft_ctx_state(ctx), "exception %s: %s", weft_err_name(err),
              reason != NULL ? reason : "");
}

static const weft_handler client_handler = {
    .name = "stream-client",
    .channel_active = client_active,
    .channel_inactive = client_inactive,
    .channel_read = client_read,
    .writability_changed = client_writability,
    .exception_caught = client_exception};

static void client_init(weft_channel *ch, void *arg) {
  th_add_last(ch, "client", &client_handler, arg);
}

static void client_connected(weft_channel *ch, int status, void *arg) {
  stream_client *c = arg;
  (void)ch;
  atomic_store(&c->connect_status, status);
  if (status != 0)
    client_fail(c, "connect failed: %s", weft_err_name(status));
}

static void client_setup(stream_client *c, uint64_t seed, size_t total) {
  memset(c, 0, sizeof *c);
  c->seed = seed;
  c->rng = seed * 31 + 7;
  c->total = total;
  atomic_init(&c->limit, total);
  atomic_init(&c->state, 0);
  atomic_init(&c->connect_status, PENDING);
  atomic_init(&c->received_pub, 0);
}

/* Connects `c` to `uri` on `loop` (NULL: the group's next loop). */
static void client_connect(fixture *f, stream_client *c, const char *uri,
                           weft_loop *loop) {
  weft_bootstrap b = th_bootstrap(f->group, loop, uri, client_init, c);
  b.on_connect = client_connected;
  b.connect_arg = c;
  /* 100 clients connect at once: on a loaded 2-core machine a UCX connect
   * (its CM exchange, wire-up, HELLO and perhaps a REDIRECT, all on busy
   * loops) took more than the 10 s default ("client 8: connect failed:
   * ETIMEDOUT"). A refused or failed connect still reports at once; 60 s
   * only bounds one that hangs. */
  b.options.connect_timeout_ms = 60000;
  ck_assert_int_eq(weft_bootstrap_connect(&b), 0);
}

static bool clients_finished(stream_client *cs, int n) {
  for (int i = 0; i < n; i++)
    if (ldi(&cs[i].state) == 0)
      return false;
  return true;
}

/* Waits for the clients while any of them makes progress: false after
 * 30 s in which none received a byte, however long the whole echo takes.
 * A fixed 110 s ran out under TSan beside stress-ng --cpu 2 on a loaded
 * machine with the clients still moving (2.2 of 2.5 MiB echoed). */
static bool clients_finish(stream_client *cs, int n) {
  size_t last = 0;
  uint64_t moved = th_now_ms();
  while (!clients_finished(cs, n)) {
    size_t total = 0;
    for (int i = 0; i < n; i++)
      total += ldz(&cs[i].received_pub);
    if (total != last) {
      last = total;
      moved = th_now_ms();
    } else if (th_now_ms() - moved > 30000) {
      return false;
    }
    th_sleep_ms(10);
  }
  return true;
}

/* n clients each echo `bytes` through one server, all at once. */
static void run_echo(const char *group_name, int n, size_t bytes) {
  fixture f;
  server_start(&f, group_name);
  stream_client *cs = calloc((size_t)n, sizeof *cs);
  ck_assert_ptr_nonnull(cs);
  for (int i = 0; i < n; i++) {
    client_setup(&cs[i], 0x5eed0000u + (uint64_t)i, bytes);
    client_connect(&f, &cs[i], f.uri, NULL);
  }
  bool finished = clients_finish(cs, n);
  for (int i = 0; i < n; i++)
    ck_assert_msg(ldi(&cs[i].state) == 1,
                  "client %d: %s (sent %zu, received %zu of %zu)", i,
                  ldi(&cs[i].state) == 0 ? "still running" : cs[i].why,
                  cs[i].sent, ldz(&cs[i].received_pub), bytes);
  ck_assert(finished);
  /* Each client closed after its last byte: the server sees every EOF. */
  ASSERT_EVENTUALLY(ldi(&f.st.inactive) == n, 10000);
  ck_assert_int_eq(ldi(&f.st.active), n);
  ck_assert_int_eq(ldi(&f.st.exceptions), 0);
  ck_assert_int_eq(ldll(&f.st.bytes), (long long)bytes * n);
  fixture_stop(&f);
  free(cs);
}

START_TEST(channel_echo_10mb_one_client) { run_echo("wt-echo1", 1, 10 * MIB); }
END_TEST

START_TEST(channel_echo_10mb_two_clients) { run_echo("wt-echo2", 2, 10 * MIB); }
END_TEST

START_TEST(channel_echo_10mb_100_clients) {
  size_t bytes = (size_t)(10.0 * MIB * th_test_scale());
  run_echo("wt-echo100", 100, bytes > 0 ? bytes : 1);
}
END_TEST

/* ---- plain kernel sockets for the other end ---- */

/* th_raw_connect and th_listen_loopback: harness_scale.h. */

/* ---- reset ---- */

START_TEST(channel_reset_midstream_closes_only_that_channel) {
  SKIP_UNLESS(transport_speaks_tcp());
  fixture f;
  server_start(&f, "wt-reset");
  /* The survivor streams in two halves: the second only after the reset. */
  stream_client c;
  client_setup(&c, 0xabcdef, 2 * MIB);
  atomic_store(&c.limit, MIB);
  weft_loop *survivor_loop = weft_loop_group_get(f.group, 1);
  client_connect(&f, &c, f.uri, survivor_loop);
  ASSERT_EVENTUALLY(ldz(&c.received_pub) == MIB, 30000);

  /* The victim: sends, sees its echo start, then resets (SO_LINGER 0). */
  int fd = th_raw_connect(f.port);
  static uint8_t block[64 * 1024];
  stream_fill(42, 0, block, sizeof block);
  th_write_all(fd, block, sizeof block);
  uint8_t echo[16];
  ck_assert_int_gt(read(fd, echo, sizeof echo), 0);
  struct linger lg = {.l_onoff = 1, .l_linger = 0};
  ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  close(fd);

  ASSERT_EVENTUALLY(ldi(&f.st.inactive) == 1, 10000);
  ck_assert_int_eq(ldi(&f.st.exceptions), 1);
  ck_assert_int_eq(ldi(&f.st.inactive_after_exception), 1);
  int err = ldi(&f.st.last_err);
  ck_assert_msg(err == WEFT_ECONNRESET || err == WEFT_EPIPE,
                "server saw %s, expected ECONNRESET or EPIPE",
                weft_err_name(err));

  /* The survivor is untouched and streams on. */
  ck_assert_int_eq(ldi(&c.state), 0);
  atomic_store(&c.limit, 2 * MIB);
  ck_assert_int_eq(weft_loop_execute(survivor_loop, pump_task, &c), 0);
  ASSERT_EVENTUALLY(ldi(&c.state) != 0, 30000);
  ck_assert_msg(ldi(&c.state) == 1, "survivor: %s", c.why);
  ASSERT_EVENTUALLY(ldi(&f.st.inactive) == 2, 10000);
  ck_assert_int_eq(ldi(&f.st.exceptions), 1);
  fixture_stop(&f);
}
END_TEST

/* ---- socket options ---- */

/* What the loop threads read back; -100 = not read yet. */
typedef struct sockopt_seen {
  atomic_int server_nodelay;       /* accepted: child_options tcp_nodelay = 0 */
  atomic_int client_nodelay;       /* the default */
  atomic_int client_rcvbuf_ok;     /* SO_RCVBUF >= the 64 KiB asked */
  atomic_int client_nodelay_after; /* after setting 0 on the live socket */
  atomic_int bad_value;            /* SO_SNDBUF = 0 */
  atomic_int bad_bool;             /* TCP_NODELAY = 2 */
  atomic_int other_option;         /* a non-socket option through the store */
} sockopt_seen;

static int get_opt(weft_channel *ch, weft_channel_option opt) {
  int64_t v = -1;
  int rc = weft_channel_get_option(ch, opt, &v);
  return rc < 0 ? rc : (int)v;
}

static void sockopt_server_active(weft_ctx *ctx) {
  sockopt_seen *seen = weft_ctx_state(ctx);
  atomic_store(&seen->server_nodelay,
               get_opt(weft_ctx_channel(ctx), WEFT_OPT_TCP_NODELAY));
}

static const weft_handler sockopt_server_handler = {
    .name = "sockopt", .channel_active = sockopt_server_active};

static void sockopt_server_init(weft_channel *ch, void *arg) {
  th_add_last(ch, "sockopt", &sockopt_server_handler, arg);
}

static void sockopt_client_init(weft_channel *ch, void *arg) {
  (void)ch;
  (void)arg;
}

static void sockopt_connected(weft_channel *ch, int status, void *arg) {
  sockopt_seen *seen = arg;
  if (status != 0) {
    atomic_store(&seen->client_nodelay, status);
    return;
  }
  atomic_store(&seen->client_nodelay, get_opt(ch, WEFT_OPT_TCP_NODELAY));
  atomic_store(&seen->client_rcvbuf_ok,
               get_opt(ch, WEFT_OPT_SO_RCVBUF) >= 64 * 1024);
  ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_TCP_NODELAY, 0), 0);
  atomic_store(&seen->client_nodelay_after, get_opt(ch, WEFT_OPT_TCP_NODELAY));
  atomic_store(&seen->bad_value,
               weft_channel_set_option(ch, WEFT_OPT_SO_SNDBUF, 0));
  atomic_store(&seen->bad_bool,
               weft_channel_set_option(ch, WEFT_OPT_TCP_NODELAY, 2));
  atomic_store(&seen->other_option, get_opt(ch, WEFT_OPT_AUTO_READ));
}

START_TEST(channel_socket_options_reach_the_socket) {
  SKIP_UNLESS(transport_speaks_tcp());
  fixture f;
  memset(&f, 0, sizeof f);
  group_start(&f, "wt-sockopt");
  sockopt_seen seen;
  atomic_int *all[] = {&seen.server_nodelay,   &seen.client_nodelay,
                       &seen.client_rcvbuf_ok, &seen.client_nodelay_after,
                       &seen.bad_value,        &seen.bad_bool,
                       &seen.other_option};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    atomic_init(all[i], -100);

  char listen[64];
  snprintf(listen, sizeof listen, "%s://127.0.0.1:0", th_transport_name());
  weft_server_bootstrap sb = {.group = f.group,
                              .listen = listen,
                              .child_init = sockopt_server_init,
                              .child_init_arg = &seen};
  weft_channel_config_init(&sb.child_options);
  sb.child_options.tcp_nodelay = 0; /* stored, applied at accept */
  ck_assert_int_eq(weft_server_bind(&f.srv, &sb), 0);
  ck_assert_int_eq(weft_server_address(f.srv, f.uri, sizeof f.uri), 0);

  weft_bootstrap b =
      th_bootstrap(f.group, NULL, f.uri, sockopt_client_init, NULL);
  b.on_connect = sockopt_connected;
  b.connect_arg = &seen;
  b.options.so_rcvbuf = 64 * 1024; /* stored before the socket exists */
  ck_assert_int_eq(weft_bootstrap_connect(&b), 0);

  ASSERT_EVENTUALLY(ldi(&seen.other_option) != -100 &&
                        ldi(&seen.server_nodelay) != -100,
                    10000);
  ck_assert_int_eq(ldi(&seen.server_nodelay), 0);
  ck_assert_int_eq(ldi(&seen.client_nodelay), 1);
  ck_assert_int_eq(ldi(&seen.client_rcvbuf_ok), 1);
  ck_assert_int_eq(ldi(&seen.client_nodelay_after), 0);
  ck_assert_int_eq(ldi(&seen.bad_value), WEFT_EINVAL);
  ck_assert_int_eq(ldi(&seen.bad_bool), WEFT_EINVAL);
  ck_assert_int_eq(ldi(&seen.other_option), 1); /* auto-read, the core's */
  fixture_stop(&f);
}
END_TEST

/* ---- addresses ---- */

typedef struct addr_seen {
  char remote[80], local[80];
  atomic_int status; /* PENDING until the callback filled the strings */
} addr_seen;

static void addr_connected(weft_channel *ch, int status, void *arg) {
  addr_seen *seen = arg;
  if (status == 0) {
    int rc = weft_channel_remote_address(ch, seen->remote, sizeof seen->remote);
    if (rc == 0)
      rc = weft_channel_local_address(ch, seen->local, sizeof seen->local);
    status = rc;
  }
  atomic_store(&seen->status, status);
}

START_TEST(channel_addresses_and_address_in_use) {
  SKIP_UNLESS(transport_speaks_tcp());
  fixture f;
  server_start(&f, "wt-addr");

  /* A second listener on the bound port is refused, and says why. */
  weft_server_bootstrap sb = {.group = f.group,
                              .listen = f.uri,
                              .child_init = echo_init,
                              .child_init_arg = &f.st};
  weft_channel_config_init(&sb.child_options);
  weft_server *second = NULL;
  ck_assert_int_eq(weft_server_bind(&second, &sb), WEFT_EADDRINUSE);

  addr_seen seen = {.status = PENDING};
  weft_bootstrap b =
      th_bootstrap(f.group, NULL, f.uri, sockopt_client_init, NULL);
  b.on_connect = addr_connected;
  b.connect_arg = &seen;
  ck_assert_int_eq(weft_bootstrap_connect(&b), 0);
  ASSERT_EVENTUALLY(ldi(&seen.status) != PENDING, 10000);
  ck_assert_int_eq(ldi(&seen.status), 0);
  char want[80];
  snprintf(want, sizeof want, "127.0.0.1:%u", (unsigned)f.port);
  ck_assert_str_eq(seen.remote, want);
  ck_assert_msg(strncmp(seen.local, "127.0.0.1:", 10) == 0 &&
                    strcmp(seen.local, want) != 0,
                "local address %s", seen.local);
  fixture_stop(&f);
}
END_TEST

/* ---- parsed endpoints (weft_server_bind_endpoint and
 * weft_bootstrap_connect_endpoint read no URI text) ---- */

static void status_connected(weft_channel *ch, int status, void *arg) {
  if (status == 0)
    weft_channel_close(ch, WEFT_PROMISE_NONE);
  atomic_store((atomic_int *)arg, status);
}

static void nothing_init(weft_channel *ch, void *arg) {
  (void)ch;
  (void)arg;
}

START_TEST(channel_bind_and_connect_parsed_endpoint) {
  fixture f;
  memset(&f, 0, sizeof f);
  group_start(&f, "wt-parsed");
  weft_endpoint ep = {.port = 0};
  snprintf(ep.transport, sizeof ep.transport, "%s", th_transport_name());
  snprintf(ep.host, sizeof ep.host, "%s", th_test_host());
  weft_server_bootstrap sb = {.group = f.group,
                              .listen = "not read",
                              .child_init = echo_init,
                              .child_init_arg = &f.st};
  weft_channel_config_init(&sb.child_options);
  ck_assert_int_eq(weft_server_bind_endpoint(&f.srv, &sb, NULL), WEFT_EINVAL);
  ck_assert_int_eq(weft_server_bind_endpoint(&f.srv, &sb, &ep), 0);
  ck_assert_int_eq(weft_server_address(f.srv, f.uri, sizeof f.uri), 0);
  weft_endpoint to;
  ck_assert_int_eq(weft_endpoint_parse(f.uri, &to, NULL, 0), 0);
  ck_assert_str_eq(to.transport, th_transport_name());
  ck_assert_uint_ne(to.port, 0);

  atomic_int status = PENDING;
  weft_bootstrap b =
      th_bootstrap(f.group, NULL, "not read", nothing_init, NULL);
  b.on_connect = status_connected;
  b.connect_arg = &status;
  ck_assert_int_eq(weft_bootstrap_connect_endpoint(&b, NULL), WEFT_EINVAL);
  ck_assert_int_eq(weft_bootstrap_connect_endpoint(&b, &to), 0);
  ASSERT_EVENTUALLY(ldi(&status) != PENDING, 10000);
  ck_assert_int_eq(ldi(&status), 0);
  fixture_stop(&f);
}
END_TEST

/* ---- connect refused ---- */

START_TEST(channel_connect_refused_reports_econnrefused) {
  SKIP_UNLESS(transport_speaks_tcp());
  fixture f;
  memset(&f, 0, sizeof f);
  group_start(&f, "wt-refuse");
  uint16_t port;
  int lfd = th_listen_loopback(16, &port);
  close(lfd); /* nothing listens on `port` now */
  char uri[64];
  snprintf(uri, sizeof uri, "%s://127.0.0.1:%u", th_transport_name(),
           (unsigned)port);
  stream_client c;
  client_setup(&c, 1, 1);
  client_connect(&f, &c, uri, NULL);
  ASSERT_EVENTUALLY(ldi(&c.connect_status) != PENDING, 10000);
  ck_assert_int_eq(ldi(&c.connect_status), WEFT_ECONNREFUSED);
  fixture_stop(&f);
}
END_TEST

/* ---- idle server ---- */

/* CPU time (utime + stime, clock ticks) of this process's threads whose
 * name starts with `prefix`; `*threads` gets how many matched. */
static long threads_cpu_ticks(const char *prefix, int *threads) {
  long ticks = 0;
  *threads = 0;
  DIR *d = opendir("/proc/self/task");
  ck_assert_ptr_nonnull(d);
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] == '.')
      continue;
    char path[300], line[512];
    snprintf(path, sizeof path, "/proc/self/task/%s/stat", de->d_name);
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
      continue;
    char *ok = fgets(line, sizeof line, fp);
    fclose(fp);
    char *open = ok != NULL ? strchr(line, '(') : NULL;
    char *close_paren = ok != NULL ? strrchr(line, ')') : NULL;
    if (open == NULL || close_paren == NULL ||
        strncmp(open + 1, prefix, strlen(prefix)) != 0)
      continue;
    /* After ") ": state, then 10 fields, then utime and stime. */
    unsigned long utime = 0, stime = 0;
    if (sscanf(close_paren + 2,
               "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
               &stime) == 2) {
      ticks += (long)(utime + stime);
      (*threads)++;
    }
  }
  closedir(d);
  return ticks;
}

/* A poke of an idle loop: on the loop thread, notes the loop's sleeps so
 * far, so that the test can wait for the next one (the loop back asleep). */
typedef struct poke {
  weft_loop *loop;
  _Atomic uint64_t sleeps; /* UINT64_MAX until the task ran */
} poke;

static void poke_task(void *arg) {
  poke *p = arg;
  atomic_store(&p->sleeps, th_loop_stats(p->loop).sleeps);
}

/* Wakes `loop` with a task and waits until it has run and the loop has
 * gone to sleep again: progress, however late a loaded machine lets it
 * come (a fixed pause between pokes let a starved loop take several pokes
 * in one wake-up, and the count of sleeps then fell short: seen in TSan
 * at load 7). A loop that never sleeps again fails here. */
static void poke_until_asleep(weft_loop *loop) {
  static poke p;
  p.loop = loop;
  atomic_store(&p.sleeps, UINT64_MAX);
  ck_assert_int_eq(weft_loop_execute(loop, poke_task, &p), 0);
  ASSERT_EVENTUALLY(atomic_load(&p.sleeps) != UINT64_MAX, 20000);
  ASSERT_EVENTUALLY(th_loop_stats(loop).sleeps > atomic_load(&p.sleeps), 20000);
}

/* Idle connections to the server of `f`: raw sockets where the transport
 * speaks TCP, else weft client channels on a group of their own (named
 * "wtquiet", so its threads are not counted as the server's). */
typedef struct idle_clients {
  bool raw;
  int fds[100];
  fixture client;
  stream_client cs[100];
} idle_clients;

static void idle_clients_open(idle_clients *ic, fixture *f, int n) {
  ck_assert_int_le(n, 100);
  ic->raw = transport_speaks_tcp();
  if (!ic->raw) {
    memset(&ic->client, 0, sizeof ic->client);
    group_start(&ic->client, "wtquiet");
  }
  for (int i = 0; i < n; i++) {
    if (ic->raw) {
      ic->fds[i] = th_raw_connect(f->port);
      continue;
    }
    /* A client with nothing to send: it connects and stays quiet. */
    client_setup(&ic->cs[i], (uint64_t)i, 0);
    client_connect(&ic->client, &ic->cs[i], f->uri, NULL);
  }
}

static void idle_clients_close(idle_clients *ic, int n) {
  if (ic->raw) {
    for (int i = 0; i < n; i++)
      close(ic->fds[i]);
    return;
  }
  /* Stopping the client group closes its channels. */
  fixture_stop(&ic->client);
}

START_TEST(channel_idle_server_sleeps) {
  /* Fewer connections where each is a pair of channels in one process
   * (and, for verbs, a pair of QPs in an emulated VM). */
  const int CONNS = transport_speaks_tcp() ? 100 : 20;
  enum { POKES = 10 };
  fixture f;
  server_start(&f, "wtidle");
  static idle_clients ic;
  idle_clients_open(&ic, &f, CONNS);
  ASSERT_EVENTUALLY(ldi(&f.st.active) == CONNS, 20000);
  th_sleep_ms(200); /* let the accept burst settle */

  const int loops = weft_loop_group_size(f.group);
  ck_assert_int_le(loops, 2);
  weft_loop_stats before[2], after[2];
  int threads;
  for (int i = 0; i < loops; i++)
    weft_loop_stats_get(weft_loop_group_get(f.group, i), &before[i]);
  long cpu_before = threads_cpu_ticks("wtidle", &threads);
  ck_assert_int_eq(threads, loops);
  uint64_t t0 = th_now_ms();
  /* A task now and then wakes each loop: an idle loop must go back to
   * sleep after each, not spin. */
  for (int p = 0; p < POKES; p++) {
    th_sleep_ms(100);
    for (int i = 0; i < loops; i++)
      poke_until_asleep(weft_loop_group_get(f.group, i));
  }
  th_sleep_ms(50);
  double secs = (double)(th_now_ms() - t0) / 1000.0;
  for (int i = 0; i < loops; i++)
    weft_loop_stats_get(weft_loop_group_get(f.group, i), &after[i]);
  long cpu = threads_cpu_ticks("wtidle", &threads) - cpu_before;

  for (int i = 0; i < loops; i++) {
    uint64_t iters = after[i].iterations - before[i].iterations;
    uint64_t sleeps = after[i].sleeps - before[i].sleeps;
    ck_assert_msg(sleeps >= POKES / 2,
                  "loop %d slept %llu times in %.2f s with %d wake-ups", i,
                  (unsigned long long)sleeps, secs, POKES);
    /* After each wake-up the loop busy-polls for busy_poll_us (20 µs, some
     * 100 iterations here) before it sleeps again; a spinning loop makes
     * millions per second. */
    double bound = 1000.0 * secs + 1000.0 * (double)sleeps;
    ck_assert_msg((double)iters < bound,
                  "loop %d: %llu iterations in %.2f s while idle (%llu "
                  "sleeps; bound %.0f)",
                  i, (unsigned long long)iters, secs,
                  (unsigned long long)sleeps, bound);
  }
  /* Idle loops for about a second: well under a tenth of a CPU each
   * (ticks are 10 ms; a spinning loop would show ~100 per second). */
  long hz = sysconf(_SC_CLK_TCK);
  ck_assert_msg((double)cpu < 0.1 * loops * (double)hz * secs,
                "the idle loops used %ld ticks (%ld/s) in %.2f s", cpu, hz,
                secs);

  idle_clients_close(&ic, CONNS);
  ASSERT_EVENTUALLY(ldi(&f.st.inactive) == CONNS, 20000);
  ck_assert_int_eq(ldi(&f.st.exceptions), 0);
  fixture_stop(&f);
}
END_TEST

/* ---- a scripted client for single behaviours ---- */

typedef enum probe_mode {
  PROBE_PROMISE,     /* write, check pending, flush, wait for the echo */
  PROBE_AFTER_CLOSE, /* an unflushed write and a write after close */
  PROBE_WATERMARK,   /* 3 x 32 KiB without flush, then flush */
  PROBE_HALF_CLOSE,  /* 1 MiB then shutdown_output; read the reply */
  PROBE_LISTEN       /* send nothing; read what the server says */
} probe_mode;

typedef struct probe {
  probe_mode mode;
  size_t expect;   /* bytes to receive */
  size_t received; /* loop thread */
  uint64_t seed;   /* what is received (PROBE_HALF_CLOSE) */
  atomic_int connect_status;
  atomic_int write_status; /* the first write's promise */
  atomic_int unflushed_status;
  atomic_int late_status; /* a write after close */
  atomic_int shutdown_status;
  atomic_int closed; /* the close promise ran (1) */
  atomic_int inactive;
  atomic_int pending_before_flush; /* the promise waited for the flush */
  atomic_int writable_at_high;     /* writable with exactly high queued */
  atomic_int writable_above_high;
  atomic_int events[8]; /* writability events: 1 true, 0 false */
  atomic_int n_events;
  atomic_size_t received_pub;
  atomic_int bad; /* a received byte differed */
} probe;

static void status_cb(void *arg, int status) {
  atomic_store((atomic_int *)arg, status);
}

static weft_buf *filled(weft_channel *ch, uint64_t seed, uint64_t off,
                        size_t n) {
  weft_buf *b = weft_buf_alloc(weft_loop_pool(weft_channel_loop(ch)), n);
  ck_assert_ptr_nonnull(b);
  stream_fill(seed, off, weft_buf_wptr(b), n);
  b->writer_index += n;
  return b;
}

static void probe_closed(void *arg, int status) {
  probe *p = arg;
  (void)status;
  atomic_store(&p->closed, 1);
}

/* The close promise runs once the channel is CLOSED: a write now must fail
 * through its promise. */
static void probe_closed_then_write(void *arg, int status) {
  void **a = arg;
  probe *p = a[0];
  weft_channel *ch = a[1];
  (void)status;
  weft_channel_write(ch, filled(ch, 9, 0, 10),
                     (weft_promise){status_cb, &p->late_status});
  atomic_store(&p->closed, 1);
}

static void probe_active(weft_ctx *ctx) {
  probe *p = weft_ctx_state(ctx);
  weft_channel *ch = weft_ctx_channel(ctx);
  switch (p->mode) {
  case PROBE_PROMISE:
  case PROBE_AFTER_CLOSE:
    weft_channel_write(ch, filled(ch, 1, 0, 5),
                       (weft_promise){status_cb, &p->write_status});
    atomic_store(&p->pending_before_flush,
                 atomic_load(&p->write_status) == PENDING);
    weft_channel_flush(ch);
    break;
  case PROBE_WATERMARK:
    for (int i = 0; i < 3; i++) {
      weft_channel_write(ch, filled(ch, 1, (uint64_t)i * 32768, 32768),
                         WEFT_PROMISE_NONE);
      if (i == 1)
        atomic_store(&p->writable_at_high, weft_channel_is_writable(ch));
    }
    atomic_store(&p->writable_above_high, weft_channel_is_writable(ch));
    weft_channel_flush(ch);
    break;
  case PROBE_HALF_CLOSE:
    for (size_t off = 0; off < MIB; off += 65536)
      weft_channel_write(ch, filled(ch, 1, off, 65536), WEFT_PROMISE_NONE);
    weft_channel_shutdown_output(
        ch, (weft_promise){status_cb, &p->shutdown_status});
    break;
  case PROBE_LISTEN:
    break;
  }
}

static void probe_read(weft_ctx *ctx, void *msg) {
  probe *p = weft_ctx_state(ctx);
  weft_channel *ch = weft_ctx_channel(ctx);
  weft_buf *b = msg;
  size_t n = weft_buf_readable(b);
  if (stream_check(p->seed, p->received, weft_buf_rptr(b), n) != n)
    atomic_store(&p->bad, 1);
  p->received += n;
  atomic_store(&p->received_pub, p->received);
  weft_buf_release(b);
  if (p->received < p->expect || p->mode == PROBE_HALF_CLOSE)
    return;
  if (p->mode == PROBE_AFTER_CLOSE) {
    /* Written, never flushed: fails when the channel closes. */
    weft_channel_write(ch, filled(ch, 9, 0, 10),
                       (weft_promise){status_cb, &p->unflushed_status});
    static void *args[2];
    args[0] = p;
    args[1] = ch;
    weft_channel_close(ch, (weft_promise){probe_closed_then_write, args});
  } else {
    weft_channel_close(ch, (weft_promise){probe_closed, p});
  }
}

static void probe_writability(weft_ctx *ctx, bool writable) {
  probe *p = weft_ctx_state(ctx);
  int i = atomic_fetch_add(&p->n_events, 1);
  if (i < 8)
    atomic_store(&p->events[i], writable);
}

static void probe_inactive(weft_ctx *ctx) {
  probe *p = weft_ctx_state(ctx);
  atomic_store(&p->inactive, 1);
}

static const weft_handler probe_handler = {.name = "probe",
                                           .channel_active = probe_active,
                                           .channel_inactive = probe_inactive,
                                           .channel_read = probe_read,
                                           .writability_changed =
                                               probe_writability};

static void probe_init(weft_channel *ch, void *arg) {
  th_add_last(ch, "probe", &probe_handler, arg);
}

static void probe_setup(probe *p, probe_mode mode, size_t expect) {
  memset(p, 0, sizeof *p);
  p->mode = mode;
  p->expect = expect;
  p->seed = 1;
  atomic_init(&p->connect_status, PENDING);
  atomic_init(&p->write_status, PENDING);
  atomic_init(&p->unflushed_status, PENDING);
  atomic_init(&p->late_status, PENDING);
  atomic_init(&p->shutdown_status, PENDING);
}

static void probe_connect(fixture *f, probe *p, const char *uri) {
  th_connect(f->group, NULL, uri, probe_init, p, &p->connect_status);
}

START_TEST(channel_write_promise_completes_after_flush) {
  fixture f;
  server_start(&f, "wt-promise");
  probe p;
  probe_setup(&p, PROBE_PROMISE, 5);
  probe_connect(&f, &p, f.uri);
  ASSERT_EVENTUALLY(ldi(&p.closed) == 1, 10000);
  ck_assert_int_eq(ldi(&p.connect_status), 0);
  ck_assert_int_eq(ldi(&p.pending_before_flush), 1);
  ck_assert_int_eq(ldi(&p.write_status), 0);
  ck_assert_int_eq(ldi(&p.bad), 0);
  ck_assert_uint_eq(ldz(&p.received_pub), 5);
  fixture_stop(&f);
}
END_TEST

START_TEST(channel_write_after_close_fails_eclosed) {
  fixture f;
  server_start(&f, "wt-closed");
  probe p;
  probe_setup(&p, PROBE_AFTER_CLOSE, 5);
  probe_connect(&f, &p, f.uri);
  ASSERT_EVENTUALLY(ldi(&p.closed) == 1, 10000);
  ck_assert_int_eq(ldi(&p.write_status), 0);
  ck_assert_int_eq(ldi(&p.unflushed_status), WEFT_ECLOSED);
  ck_assert_int_eq(ldi(&p.late_status), WEFT_ECLOSED);
  fixture_stop(&f);
}
END_TEST

START_TEST(channel_watermark_unwritable_above_high_fires_writability) {
  fixture f;
  server_start(&f, "wt-wmark");
  probe p;
  probe_setup(&p, PROBE_WATERMARK, 3 * 32768);
  probe_connect(&f, &p, f.uri);
  ASSERT_EVENTUALLY(ldi(&p.closed) == 1, 10000);
  ck_assert_int_eq(ldi(&p.bad), 0);
  /* 64 KiB queued is not above the 64 KiB high watermark; 96 KiB is. */
  ck_assert_int_eq(ldi(&p.writable_at_high), 1);
  ck_assert_int_eq(ldi(&p.writable_above_high), 0);
  ck_assert_int_eq(ldi(&p.n_events), 2);
  ck_assert_int_eq(ldi(&p.events[0]), 0);
  ck_assert_int_eq(ldi(&p.events[1]), 1);
  fixture_stop(&f);
}
END_TEST

START_TEST(channel_half_close_peer_reads_eof_and_replies) {
  SKIP_UNLESS(transport_speaks_tcp() &&
              transport_has(WEFT_TRANSPORT_CAP_HALF_CLOSE));
  fixture f;
  memset(&f, 0, sizeof f);
  group_start(&f, "wt-half");
  uint16_t port;
  int lfd = th_listen_loopback(16, &port);
  char uri[64];
  snprintf(uri, sizeof uri, "%s://127.0.0.1:%u", th_transport_name(),
           (unsigned)port);
  probe p;
  probe_setup(&p, PROBE_HALF_CLOSE, MIB);
  p.seed = 2; /* the reply's stream */
  probe_connect(&f, &p, uri);

  int fd = accept(lfd, NULL, NULL);
  ck_assert_int_ge(fd, 0);
  struct timeval tv = {.tv_sec = 20};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  /* The peer reads the whole request, then EOF... */
  static uint8_t buf[65536];
  size_t got = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    ck_assert_msg(n >= 0, "read: %s", strerror(errno));
    if (n == 0)
      break;
    ck_assert_uint_eq(stream_check(1, got, buf, (size_t)n), (size_t)n);
    got += (size_t)n;
  }
  ck_assert_uint_eq(got, MIB);
  /* ...and still sends its reply, which the half-closed channel reads. */
  for (size_t off = 0; off < MIB; off += sizeof buf) {
    stream_fill(2, off, buf, sizeof buf);
    th_write_all(fd, buf, sizeof buf);
  }
  close(fd);
  close(lfd);
  ASSERT_EVENTUALLY(ldi(&p.inactive) == 1, 20000);
  ck_assert_int_eq(ldi(&p.shutdown_status), 0);
  ck_assert_uint_eq(ldz(&p.received_pub), MIB);
  ck_assert_int_eq(ldi(&p.bad), 0);
  fixture_stop(&f);
}
END_TEST

/* ---- a server that speaks first ----
 * Writes its greeting as soon as the channel is active, before the client
 * sent anything (as SMTP or a Redis replica's handshake do): messages of
 * several sizes, so every send protocol a transport has (UCX: short, bcopy,
 * rendezvous) leaves a freshly accepted channel. */

static const size_t greeting_sizes[] = {10, 200, 3000, 70000};
#define GREETING_BYTES (10 + 200 + 3000 + 70000)
#define GREETING_SEED 3

static void greeter_active(weft_ctx *ctx) {
  weft_channel *ch = weft_ctx_channel(ctx);
  uint64_t off = 0;
  for (size_t i = 0; i < sizeof greeting_sizes / sizeof greeting_sizes[0];
       i++) {
    weft_channel_write(ch, filled(ch, GREETING_SEED, off, greeting_sizes[i]),
                       WEFT_PROMISE_NONE);
    weft_channel_flush(ch);
    off += greeting_sizes[i];
  }
  weft_ctx_fire_channel_active(ctx);
}

static const weft_handler greeter_handler = {.name = "greeter",
                                             .channel_active = greeter_active};

static void greeter_init(weft_channel *ch, void *arg) {
  (void)arg;
  th_add_last(ch, "greeter", &greeter_handler, NULL);
}

#define GREETED_CLIENTS 20

START_TEST(channel_server_speaks_first_every_client_hears_it) {
  fixture f;
  memset(&f, 0, sizeof f);
  group_start(&f, "wt-greet");
  char listen[64];
  snprintf(listen, sizeof listen, "%s://%s:0", th_transport_name(),
           th_test_host());
  f.srv =
      th_server_bind(f.group, listen, greeter_init, NULL, f.uri, sizeof f.uri);
  /* One after another: each connection is fresh when the server writes. */
  for (int i = 0; i < GREETED_CLIENTS; i++) {
    probe p;
    probe_setup(&p, PROBE_LISTEN, GREETING_BYTES);
    p.seed = GREETING_SEED;
    probe_connect(&f, &p, f.uri);
    ck_assert_msg(WAIT_UNTIL(ldi(&p.closed) == 1, 10000),
                  "client %d heard %zu of %d greeting bytes", i,
                  ldz(&p.received_pub), GREETING_BYTES);
    ck_assert_int_eq(ldi(&p.connect_status), 0);
    ck_assert_int_eq(ldi(&p.bad), 0);
    ck_assert_uint_eq(ldz(&p.received_pub), GREETING_BYTES);
  }
  fixture_stop(&f);
}
END_TEST

Suite *weft_test_suite(void) {
  Suite *s = suite_create("channel");
  /* A transport this host cannot run (no RDMA device for verbs) is a skip
   * with its probe's reason, not a failure. */
  th_require_transport();
  /* The echoes fail when they stop moving (clients_finish), not at a
   * wall time: the timeout only bounds a loaded machine's slowest run. */
  th_add_case(s, "echo", 900, channel_echo_10mb_one_client,
              channel_echo_10mb_two_clients, channel_echo_10mb_100_clients,
              NULL);

  th_add_case(
      s, "lifecycle", 0, channel_reset_midstream_closes_only_that_channel,
      channel_connect_refused_reports_econnrefused,
      channel_socket_options_reach_the_socket,
      channel_addresses_and_address_in_use,
      channel_bind_and_connect_parsed_endpoint, channel_idle_server_sleeps,
      channel_write_promise_completes_after_flush,
      channel_write_after_close_fails_eclosed,
      channel_watermark_unwritable_above_high_fires_writability,
      channel_half_close_peer_reads_eof_and_replies,
      channel_server_speaks_first_every_client_hears_it, NULL);
  return s;
}
