/* UCX transport behaviours the shared channel suite does not cover: a slow
 * receiver (flow control), a peer process that vanishes, and a multi-loop
 * server under connection churn from another process.
 *
 * The UCX settings come from the environment (UCX_TLS,
 * WEFT_TRANSPORT_UCX_ERROR_MODE), as tests/CMakeLists.txt registers them.
 */
#include "harness.h"

#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#include <ucp/api/ucp.h>

extern char **environ;

#define KIB 1024u
#define WRITE_SIZE (16u * KIB)
#define HIGH_WATERMARK (64u * KIB) /* the channel default */
#define TOTAL_BYTES (8u * 1024u * KIB)

/* The vanishing peer runs these helpers outside any Check test, where a
 * Check assertion (even one that holds) exits the process. */
static bool in_child;
#define REQUIRE(expr)                                                          \
  do {                                                                         \
    if (in_child) {                                                            \
      if (!(expr))                                                             \
        abort();                                                               \
    } else {                                                                   \
      ck_assert(expr);                                                         \
    }                                                                          \
  } while (0)

static size_t window_bytes(void) {
  const char *w = getenv("WEFT_TRANSPORT_UCX_WINDOW");
  return w != NULL ? (size_t)strtoull(w, NULL, 10) : 1024u * KIB;
}

/* Byte i of the test stream. */
static uint8_t stream_byte(uint64_t i) {
  return (uint8_t)(i * 131u + (i >> 9));
}

static weft_loop_group *group_new_n(const char *name, int n_loops) {
  weft_loop_options opts;
  weft_loop_options_init(&opts);
  opts.n_loops = n_loops;
  opts.name = name;
  weft_loop_group *g;
  REQUIRE(weft_loop_group_new(&g, &opts) == 0);
  REQUIRE(weft_loop_group_start(g) == 0);
  return g;
}

static weft_loop_group *group_new(const char *name) {
  return group_new_n(name, 1);
}

static void group_end(weft_loop_group *g) {
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0); /* nothing leaked */
  weft_loop_group_free(g);
}

/* ---- the reader: starts with auto-read off, checks every byte ---- */

typedef struct reader {
  weft_channel *ch; /* loop thread; set at init */
  bool paused;      /* start with auto-read off */
  atomic_size_t received;
  atomic_int bad;
  atomic_int inactive;
  atomic_int exceptions;
  atomic_int last_err;
} reader;

static void reader_read(weft_ctx *ctx, void *msg) {
  reader *r = weft_ctx_state(ctx);
  weft_buf *b = msg;
  size_t got = atomic_load(&r->received);
  const uint8_t *p = weft_buf_rptr(b);
  for (size_t i = 0; i < weft_buf_readable(b); i++)
    if (p[i] != stream_byte(got + i))
      atomic_store(&r->bad, 1);
  atomic_fetch_add(&r->received, weft_buf_readable(b));
  weft_buf_release(b);
}

static void reader_inactive(weft_ctx *ctx) {
  atomic_store(&((reader *)weft_ctx_state(ctx))->inactive, 1);
}

static void reader_exception(weft_ctx *ctx, int err, const char *reason) {
  reader *r = weft_ctx_state(ctx);
  (void)reason;
  atomic_store(&r->last_err, err);
  atomic_fetch_add(&r->exceptions, 1);
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static const weft_handler reader_handler = {.name = "reader",
                                            .channel_read = reader_read,
                                            .channel_inactive = reader_inactive,
                                            .exception_caught =
                                                reader_exception};

static void reader_init(weft_channel *ch, void *arg) {
  reader *r = arg;
  r->ch = ch;
  if (r->paused)
    ck_assert_int_eq(weft_channel_set_option(ch, WEFT_OPT_AUTO_READ, 0), 0);
  ck_assert_int_eq(weft_pipeline_add_last(weft_channel_pipeline(ch), "reader",
                                          &reader_handler, r),
                   0);
}

static weft_server *reader_server(weft_loop_group *g, reader *r, char *uri,
                                  size_t len) {
  return th_server_bind(g, "ucx://127.0.0.1:0", reader_init, r, uri, len);
}

static void start_reading(void *arg) {
  reader *r = arg;
  weft_channel_set_option(r->ch, WEFT_OPT_AUTO_READ, 1);
}

/* ---- the flooder: writes while writable ---- */

typedef struct flooder {
  weft_channel *ch;
  size_t sent;                 /* loop thread */
  atomic_size_t sent_pub;      /* `sent` for the test thread */
  atomic_size_t limit;         /* bytes to send at most */
  atomic_int went_unwritable;  /* writability_changed(false) was seen */
  atomic_size_t max_live_bufs; /* the loop pool's live buffers, at most */
  atomic_int connect_status;
  atomic_int write_failed;
  atomic_int inactive;
} flooder;

static void flood_write_done(void *arg, int status) {
  if (status != 0)
    atomic_store(&((flooder *)arg)->write_failed, status);
}

static void flood(flooder *fl) {
  weft_channel *ch = fl->ch;
  if (ch == NULL)
    return; /* inactive already */
  weft_pool *pool = weft_loop_pool(weft_channel_loop(ch));
  size_t limit = atomic_load(&fl->limit);
  while (fl->sent < limit && weft_channel_is_active(ch) &&
         weft_channel_is_writable(ch)) {
    size_t n = limit - fl->sent < WRITE_SIZE ? limit - fl->sent : WRITE_SIZE;
    weft_buf *b = weft_buf_alloc(pool, n);
    if (b == NULL) {
      atomic_store(&fl->write_failed, WEFT_ENOMEM);
      break;
    }
    uint8_t *p = weft_buf_wptr(b);
    for (size_t i = 0; i < n; i++)
      p[i] = stream_byte(fl->sent + i);
    b->writer_index += n;
    fl->sent += n;
    weft_channel_write(ch, b, (weft_promise){flood_write_done, fl});
    weft_channel_flush(ch);
  }
  atomic_store(&fl->sent_pub, fl->sent);
  weft_pool_stats st;
  weft_pool_stats_get(pool, &st);
  if (st.live > atomic_load(&fl->max_live_bufs))
    atomic_store(&fl->max_live_bufs, st.live);
}

static void flooder_active(weft_ctx *ctx) {
  flooder *fl = weft_ctx_state(ctx);
  fl->ch = weft_ctx_channel(ctx);
  flood(fl);
}

static void flooder_writability(weft_ctx *ctx, bool writable) {
  flooder *fl = weft_ctx_state(ctx);
  if (!writable)
    atomic_store(&fl->went_unwritable, 1);
  else
    flood(fl);
}

static void flooder_inactive(weft_ctx *ctx) {
  flooder *fl = weft_ctx_state(ctx);
  fl->ch = NULL;
  atomic_store(&fl->inactive, 1);
}

static const weft_handler flooder_handler = {
    .name = "flooder",
    .channel_active = flooder_active,
    .channel_inactive = flooder_inactive,
    .writability_changed = flooder_writability};

static void flooder_init(weft_channel *ch, void *arg) {
  REQUIRE(weft_pipeline_add_last(weft_channel_pipeline(ch), "flooder",
                                 &flooder_handler, arg) == 0);
}

static void flooder_connected(weft_channel *ch, int status, void *arg) {
  (void)ch;
  atomic_store(&((flooder *)arg)->connect_status, status);
}

static void close_task(void *arg) {
  flooder *fl = arg;
  weft_channel *ch = fl->ch;
  if (ch == NULL)
    return;
  /* Outside any event nobody else holds a reference across the close. */
  weft_channel_retain(ch);
  weft_channel_close(ch, WEFT_PROMISE_NONE);
  weft_channel_release(ch);
}

static void flooder_connect(weft_loop_group *g, flooder *fl, const char *uri) {
  weft_bootstrap b = {.group = g,
                      .connect = uri,
                      .init = flooder_init,
                      .init_arg = fl,
                      .on_connect = flooder_connected,
                      .connect_arg = fl};
  weft_channel_config_init(&b.options);
  REQUIRE(weft_bootstrap_connect(&b) == 0);
}

START_TEST(ucx_slow_receiver_bounds_sender_and_loses_nothing) {
  weft_loop_group *gs = group_new("wu-srv");
  weft_loop_group *gc = group_new("wu-cli");
  reader r = {.paused = true};
  char uri[320];
  weft_server *srv = reader_server(gs, &r, uri, sizeof uri);
  flooder fl = {0};
  atomic_init(&fl.limit, TOTAL_BYTES);
  atomic_init(&fl.connect_status, 1);
  flooder_connect(gc, &fl, uri);
  ck_assert(WAIT_UNTIL(atomic_load(&fl.connect_status) != 1, 10000));
  ck_assert_int_eq(atomic_load(&fl.connect_status), 0);

  /* The reader does not read for 2 s: the flooder must stall. */
  th_sleep_ms(2000);
  size_t stalled_at = atomic_load(&fl.sent_pub);
  size_t bound = window_bytes() + HIGH_WATERMARK + WRITE_SIZE;
  ck_assert_int_eq(atomic_load(&fl.went_unwritable), 1);
  ck_assert_uint_eq(atomic_load(&r.received), 0);
  ck_assert_msg(stalled_at <= bound,
                "the sender handed off %zu bytes to a reader that does not "
                "read (bound %zu)",
                stalled_at, bound);
  ck_assert_msg(atomic_load(&fl.max_live_bufs) <= bound / WRITE_SIZE + 64,
                "the sender's pool held %zu buffers",
                atomic_load(&fl.max_live_bufs));

  /* Reading again: every byte arrives, in order. */
  ck_assert_int_eq(
      weft_loop_execute(weft_loop_group_get(gs, 0), start_reading, &r), 0);
  ck_assert(WAIT_UNTIL(atomic_load(&r.received) == TOTAL_BYTES, 60000));
  ck_assert_int_eq(atomic_load(&r.bad), 0);
  ck_assert_int_eq(atomic_load(&fl.write_failed), 0);
  ck_assert_int_eq(
      weft_loop_execute(weft_loop_group_get(gc, 0), close_task, &fl), 0);
  ck_assert(WAIT_UNTIL(atomic_load(&r.inactive) == 1, 10000));
  ck_assert_int_eq(atomic_load(&r.exceptions), 0);
  weft_server_close(srv);
  group_end(gc);
  group_end(gs);
}
END_TEST

/* ---- a peer process that vanishes ---- */

/* Runs this test binary again as a child with `var`=`uri` in its
 * environment and waits for it; returns its wait status. */
static int run_child(const char *var, const char *uri) {
  char env_uri[400];
  snprintf(env_uri, sizeof env_uri, "%s=%s", var, uri);
  size_t n = 0;
  while (environ[n] != NULL)
    n++;
  char **envp = calloc(n + 2, sizeof *envp);
  ck_assert_ptr_nonnull(envp);
  memcpy(envp, environ, n * sizeof *envp);
  envp[n] = env_uri;
  char *argv[] = {"test_ucx", NULL};
  pid_t pid;
  ck_assert_int_eq(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, envp),
                   0);
  free(envp);
  int wstatus;
  ck_assert_int_eq(waitpid(pid, &wstatus, 0), pid);
  return wstatus;
}

/* The child: connects, sends 256 KiB, then dies without closing. */
static void vanishing_child(const char *uri) {
  weft_loop_group *g = group_new("wu-child");
  flooder fl = {0};
  atomic_init(&fl.limit, 256u * KIB);
  atomic_init(&fl.connect_status, 1);
  flooder_connect(g, &fl, uri);
  WAIT_UNTIL(atomic_load(&fl.sent_pub) == 256u * KIB, 10000);
  th_sleep_ms(200);
  kill(getpid(), SIGKILL);
}

START_TEST(ucx_vanished_peer_fires_exception_and_inactive) {
  weft_loop_group *gs = group_new("wu-srv");
  reader r = {0};
  char uri[320];
  weft_server *srv = reader_server(gs, &r, uri, sizeof uri);

  int wstatus = run_child("WEFT_UCX_TEST_CHILD", uri);
  ck_assert(WIFSIGNALED(wstatus));

  ck_assert_msg(WAIT_UNTIL(atomic_load(&r.inactive) == 1, 30000),
                "the server channel stayed open after its peer died");
  ck_assert_int_eq(atomic_load(&r.exceptions), 1);
  int err = atomic_load(&r.last_err);
  ck_assert_msg(err == WEFT_ECONNRESET || err == WEFT_ETIMEDOUT ||
                    err == WEFT_EIO,
                "server saw %s", weft_err_name(err));
  ck_assert_uint_le(atomic_load(&r.received), 256u * KIB);
  ck_assert_int_eq(atomic_load(&r.bad), 0);
  weft_server_close(srv);
  group_end(gs);
}
END_TEST

/* ---- a multi-loop server under connection churn ----
 * UCX before 1.18 aborts in async.c when a listener's connection request is
 * accepted on another worker while the listener's worker still holds a
 * missed socket event for it (docs/transports/ucx.md); the plugin then keeps
 * accepted channels on the listener's loop. The clients run in another process,
 * as in a real deployment, so the server's loops are the only workers here. */

#define CHURN_ROUNDS 10
#define CHURN_CONNS 20
#define CHURN_BYTES (4u * KIB)

typedef struct churn_server {
  weft_loop *listener_loop;
  atomic_int active, inactive, exceptions, off_loop;
  atomic_size_t bytes;
} churn_server;

static void churn_read(weft_ctx *ctx, void *msg) {
  churn_server *cs = weft_ctx_state(ctx);
  atomic_fetch_add(&cs->bytes, weft_buf_readable(msg));
  weft_buf_release(msg);
}

static void churn_active(weft_ctx *ctx) {
  churn_server *cs = weft_ctx_state(ctx);
  if (weft_channel_loop(weft_ctx_channel(ctx)) != cs->listener_loop)
    atomic_fetch_add(&cs->off_loop, 1);
  atomic_fetch_add(&cs->active, 1);
}

static void churn_inactive(weft_ctx *ctx) {
  atomic_fetch_add(&((churn_server *)weft_ctx_state(ctx))->inactive, 1);
}

static void churn_exception(weft_ctx *ctx, int err, const char *reason) {
  (void)err;
  (void)reason;
  atomic_fetch_add(&((churn_server *)weft_ctx_state(ctx))->exceptions, 1);
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static const weft_handler churn_handler = {.name = "churn",
                                           .channel_active = churn_active,
                                           .channel_read = churn_read,
                                           .channel_inactive = churn_inactive,
                                           .exception_caught = churn_exception};

static void churn_init(weft_channel *ch, void *arg) {
  ck_assert_int_eq(weft_pipeline_add_last(weft_channel_pipeline(ch), "churn",
                                          &churn_handler, arg),
                   0);
}

/* The child: CHURN_ROUNDS rounds of CHURN_CONNS connections at once, each
 * sends CHURN_BYTES and closes. Exits 0 when every connect succeeded and
 * every channel closed without a failed write. */
static void churn_child(const char *uri) {
  weft_loop_group *g = group_new("wu-churn");
  static flooder fl[CHURN_CONNS];
  for (int round = 0; round < CHURN_ROUNDS; round++) {
    memset(fl, 0, sizeof fl);
    for (int i = 0; i < CHURN_CONNS; i++) {
      atomic_init(&fl[i].limit, CHURN_BYTES);
      atomic_init(&fl[i].connect_status, 1);
      flooder_connect(g, &fl[i], uri);
    }
    for (int i = 0; i < CHURN_CONNS; i++) {
      REQUIRE(WAIT_UNTIL(atomic_load(&fl[i].connect_status) != 1, 10000));
      REQUIRE(atomic_load(&fl[i].connect_status) == 0);
      REQUIRE(WAIT_UNTIL(atomic_load(&fl[i].sent_pub) == CHURN_BYTES, 10000));
      REQUIRE(weft_loop_execute(weft_loop_group_get(g, 0), close_task,
                                &fl[i]) == 0);
    }
    for (int i = 0; i < CHURN_CONNS; i++) {
      REQUIRE(WAIT_UNTIL(atomic_load(&fl[i].inactive) == 1, 10000));
      REQUIRE(atomic_load(&fl[i].write_failed) == 0);
    }
  }
  weft_loop_group_stop(g);
  REQUIRE(weft_loop_group_join(g) == 0);
  weft_loop_group_free(g);
  _exit(0);
}

static bool ucx_moves_conn_requests(void) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return major > 1 || (major == 1 && minor >= 18);
}

START_TEST(ucx_multi_loop_server_survives_connection_churn) {
  weft_loop_group *gs = group_new_n("wu-srv", 2);
  churn_server cs = {.listener_loop = weft_loop_group_get(gs, 0)};
  char uri[320];
  weft_server *srv =
      th_server_bind(gs, "ucx://127.0.0.1:0", churn_init, &cs, uri, sizeof uri);

  int wstatus = run_child("WEFT_UCX_TEST_CHURN", uri);
  ck_assert_msg(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
                "the churning client failed (wait status 0x%x)", wstatus);
  int total = CHURN_ROUNDS * CHURN_CONNS;
  ck_assert_msg(WAIT_UNTIL(atomic_load(&cs.inactive) == total, 20000),
                "%d of %d server channels closed", atomic_load(&cs.inactive),
                total);
  ck_assert_int_eq(atomic_load(&cs.active), total);
  ck_assert_int_eq(atomic_load(&cs.exceptions), 0);
  ck_assert_uint_eq(atomic_load(&cs.bytes), (size_t)total * CHURN_BYTES);
  if (!ucx_moves_conn_requests())
    ck_assert_int_eq(atomic_load(&cs.off_loop), 0);
  weft_server_close(srv);
  group_end(gs);
}
END_TEST

Suite *weft_test_suite(void) {
  const char *child = getenv("WEFT_UCX_TEST_CHILD");
  if (child != NULL) {
    in_child = true;
    vanishing_child(child);
    _exit(1); /* not reached: the child kills itself */
  }
  const char *churn = getenv("WEFT_UCX_TEST_CHURN");
  if (churn != NULL) {
    in_child = true;
    churn_child(churn);
  }
  Suite *s = suite_create("ucx");
  TCase *tc = tcase_create("flow");
  tcase_set_timeout(tc, 120);
  th_add_tests(tc, ucx_slow_receiver_bounds_sender_and_loses_nothing,
               ucx_vanished_peer_fires_exception_and_inactive,
               ucx_multi_loop_server_survives_connection_churn, NULL);
  suite_add_tcase(s, tc);
  return s;
}
