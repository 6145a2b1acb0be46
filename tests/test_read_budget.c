/* SPDX-License-Identifier: Apache-2.0 */
/* The read budget (docs/architecture.md, "Read budget"), over the
 * transport in WEFT_TEST_TRANSPORT (tcp, uring): two channels on one
 * server loop, one peer floods without a pause, the other plays
 * ping-pong. The flooded channel may fire at most its budget of reads per
 * loop iteration (counted with the loop's iteration counter), the
 * ping-pong completes its rounds while the flood goes on, and every
 * flooded byte arrives once, in order, whatever the budget (down to one
 * read per iteration).
 *
 * The peers are plain blocking sockets on threads of their own: both
 * transports are TCP on the wire. No assertion is on time: waits poll for
 * progress with generous caps.
 */
#include "harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <weft/bootstrap.h>
#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/pipeline.h>
#include <weft/transport_plugin.h>

#define FLOOD_CHUNK 65536 /* bytes per write of the flooding peer */
#define PING_ROUNDS 200   /* round trips the ping-pong peer makes */

/* Byte i of the flood is a function of i alone, so the server checks any
 * stretch without state. */
static uint8_t flood_byte(uint64_t i) {
  uint64_t x = (i / 8) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return (uint8_t)(x >> ((i % 8) * 8));
}

/* What the server's loop records; the test thread reads it at the end. */
typedef struct budget_run {
  int64_t max_messages, max_bytes; /* the children's budget; -1 = default */
  bool yield;                      /* the flood's handler yields per read */
  /* loop thread */
  weft_channel *flood_ch, *ping_ch;
  uint64_t iter;          /* loop iteration of the flood's last read */
  uint64_t reads_in_iter; /* the flood's reads in that iteration */
  uint64_t since_ping;    /* the flood's reads since the ping's last */
  uint64_t flood_off;     /* flood bytes checked so far */
  /* published */
  atomic_ullong max_per_iter; /* most flood reads in one iteration */
  atomic_ullong max_between;  /* most flood reads between two pings */
  atomic_ullong flood_reads;  /* all of them */
  atomic_ullong flood_bytes;  /* bytes received in order */
  atomic_int flood_bad;       /* a byte out of order or wrong */
  atomic_int flood_eof;       /* the flood's channel went inactive */
  atomic_int ping_reads;      /* reads of the ping channel */
  atomic_int channels;        /* channels accepted */
  atomic_int opt_err;         /* setting the budget failed */
  atomic_int yields, resumes; /* weft_channel_yield_read, and the
                                 read-resumed events that followed */
} budget_run;

static uint64_t loop_iterations(weft_loop *loop) {
  weft_loop_stats st;
  weft_loop_stats_get(loop, &st);
  return st.iterations;
}

static void atomic_max(atomic_ullong *m, uint64_t v) {
  if (v > atomic_load(m))
    atomic_store(m, v);
}

static void flood_read(budget_run *r, weft_channel *ch, weft_buf *b) {
  uint64_t it = loop_iterations(weft_channel_loop(ch));
  r->reads_in_iter = it == r->iter ? r->reads_in_iter + 1 : 1;
  r->iter = it;
  atomic_max(&r->max_per_iter, r->reads_in_iter);
  atomic_max(&r->max_between, ++r->since_ping);
  atomic_fetch_add(&r->flood_reads, 1);
  const uint8_t *p = weft_buf_rptr(b);
  size_t n = weft_buf_readable(b);
  for (size_t i = 0; i < n; i++)
    if (p[i] != flood_byte(r->flood_off + i)) {
      atomic_store(&r->flood_bad, 1);
      break;
    }
  r->flood_off += n;
  atomic_store(&r->flood_bytes, r->flood_off);
}

static void budget_read(weft_ctx *ctx, void *msg) {
  budget_run *r = weft_ctx_state(ctx);
  weft_channel *ch = weft_ctx_channel(ctx);
  weft_buf *b = msg;
  if (ch == r->flood_ch) {
    flood_read(r, ch, b);
    weft_buf_release(b);
    if (r->yield && weft_channel_is_reading(ch) &&
        weft_channel_yield_read(ch) == 0)
      atomic_fetch_add(&r->yields, 1);
    return;
  }
  r->since_ping = 0;
  atomic_fetch_add(&r->ping_reads, 1);
  weft_ctx_write(ctx, b, WEFT_PROMISE_NONE); /* the pong */
}

static void budget_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static void budget_inactive(weft_ctx *ctx) {
  budget_run *r = weft_ctx_state(ctx);
  if (weft_ctx_channel(ctx) == r->flood_ch)
    atomic_store(&r->flood_eof, 1);
  weft_ctx_fire_channel_inactive(ctx);
}

static void budget_user_event(weft_ctx *ctx, void *event) {
  budget_run *r = weft_ctx_state(ctx);
  if (event == &weft_event_read_resumed && weft_ctx_channel(ctx) == r->flood_ch)
    atomic_fetch_add(&r->resumes, 1);
  weft_ctx_fire_user_event(ctx, event);
}

static const weft_handler budget_handler = {
    .name = "budget",
    .channel_read = budget_read,
    .channel_read_complete = budget_read_complete,
    .channel_inactive = budget_inactive,
    .user_event = budget_user_event,
    .exception_caught = th_echo_exception};

/* The first channel accepted is the flood's, the second the ping's (the
 * test connects them in that order). */
static void budget_init(weft_channel *ch, void *arg) {
  budget_run *r = arg;
  int64_t v = 0;
  if (weft_channel_get_option(ch, WEFT_OPT_MAX_MESSAGES_PER_READ, &v) != 0 ||
      v != WEFT_MAX_MESSAGES_PER_READ_DEFAULT ||
      weft_channel_get_option(ch, WEFT_OPT_MAX_BYTES_PER_READ, &v) != 0 ||
      v != WEFT_MAX_BYTES_PER_READ_DEFAULT ||
      weft_channel_set_option(ch, WEFT_OPT_MAX_MESSAGES_PER_READ, 0) !=
          WEFT_EINVAL ||
      weft_channel_set_option(ch, WEFT_OPT_MAX_BYTES_PER_READ,
                              (int64_t)WEFT_MAX_BYTES_PER_READ_MAX + 1) !=
          WEFT_EINVAL)
    atomic_store(&r->opt_err, 1);
  int n = atomic_fetch_add(&r->channels, 1);
  if (n == 0)
    r->flood_ch = ch;
  else
    r->ping_ch = ch;
  if ((r->max_messages > 0 &&
       weft_channel_set_option(ch, WEFT_OPT_MAX_MESSAGES_PER_READ,
                               r->max_messages) != 0) ||
      (r->max_bytes > 0 &&
       weft_channel_set_option(ch, WEFT_OPT_MAX_BYTES_PER_READ, r->max_bytes) !=
           0))
    atomic_store(&r->opt_err, 1);
  ck_assert_int_eq(weft_pipeline_add_last(weft_channel_pipeline(ch), "budget",
                                          &budget_handler, r),
                   0);
}

/* ---- the peers ---- */

typedef struct peers {
  int flood_fd, ping_fd;
  size_t flood_min;   /* bytes the flood sends at least */
  atomic_size_t sent; /* bytes it sent: until the pings are done */
  atomic_int ping_done, ping_failed;
} peers;

static int connect_port(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons(port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  return fd;
}

static void *flood_thread(void *arg) {
  peers *p = arg;
  uint8_t *chunk = malloc(FLOOD_CHUNK);
  size_t off = 0;
  while (chunk != NULL && (off < p->flood_min || !atomic_load(&p->ping_done))) {
    for (size_t i = 0; i < FLOOD_CHUNK; i++)
      chunk[i] = flood_byte(off + i);
    th_write_all(p->flood_fd, chunk, FLOOD_CHUNK);
    off += FLOOD_CHUNK;
    atomic_store(&p->sent, off);
  }
  free(chunk);
  shutdown(p->flood_fd, SHUT_WR);
  return NULL;
}

static void *ping_thread(void *arg) {
  peers *p = arg;
  for (int i = 0; i < PING_ROUNDS; i++) {
    char c = (char)('a' + i % 26), got = 0;
    if (write(p->ping_fd, &c, 1) != 1 || read(p->ping_fd, &got, 1) != 1 ||
        got != c) {
      atomic_store(&p->ping_failed, 1);
      break;
    }
  }
  atomic_store(&p->ping_done, 1);
  return NULL;
}

/* Floods one channel (at least `min` bytes, and until the ping-pong is
 * done) and plays ping-pong on the other, both on a one-loop server whose
 * children have the budget in `r`. */
static void run_budget(budget_run *r, size_t min) {
  weft_loop_group *group;
  weft_loop_options opts;
  weft_loop_options_init(&opts);
  opts.n_loops = 1;
  opts.name = "wt-budget";
  ck_assert_int_eq(weft_loop_group_new(&group, &opts), 0);
  ck_assert_int_eq(weft_loop_group_start(group), 0);
  char listen[64], uri[300];
  snprintf(listen, sizeof listen, "%s://127.0.0.1:0", th_transport_name());
  weft_server *srv =
      th_server_bind(group, listen, budget_init, r, uri, sizeof uri);
  uint16_t port = (uint16_t)atoi(strrchr(uri, ':') + 1);

  peers p = {.flood_min = min};
  p.flood_fd = connect_port(port);
  ASSERT_EVENTUALLY(atomic_load(&r->channels) == 1, 10000);
  p.ping_fd = connect_port(port);
  ASSERT_EVENTUALLY(atomic_load(&r->channels) == 2, 10000);
  ck_assert_int_eq(atomic_load(&r->opt_err), 0);

  pthread_t ft, pt;
  ck_assert_int_eq(pthread_create(&ft, NULL, flood_thread, &p), 0);
  /* The ping-pong starts once the flood is under way. */
  ASSERT_EVENTUALLY(atomic_load(&r->flood_bytes) > 0, 10000);
  ck_assert_int_eq(pthread_create(&pt, NULL, ping_thread, &p), 0);
  /* The flood goes on until the pings are done: they are answered between
   * the flood's reads, or never. */
  ASSERT_EVENTUALLY(atomic_load(&p.ping_done) == 1, 60000);
  uint64_t flood_when_pinged = atomic_load(&r->flood_bytes);
  pthread_join(pt, NULL);
  ASSERT_EVENTUALLY(atomic_load(&r->flood_eof) == 1, 120000);
  pthread_join(ft, NULL);
  close(p.flood_fd);
  close(p.ping_fd);
  weft_server_close(srv);
  weft_loop_group_stop(group);
  ck_assert_int_eq(weft_loop_group_join(group), 0);
  weft_loop_group_free(group);

  fprintf(stderr,
          "%s: budget %lld msgs / %lld bytes: %llu flood reads, at most %llu "
          "per loop iteration, at most %llu between two pings; pings done at "
          "%llu of %zu flood bytes\n",
          th_transport_name(), (long long)r->max_messages,
          (long long)r->max_bytes,
          (unsigned long long)atomic_load(&r->flood_reads),
          (unsigned long long)atomic_load(&r->max_per_iter),
          (unsigned long long)atomic_load(&r->max_between),
          (unsigned long long)flood_when_pinged, atomic_load(&p.sent));
  ck_assert_int_eq(atomic_load(&p.ping_failed), 0);
  ck_assert_int_eq(atomic_load(&r->ping_reads) >= PING_ROUNDS, 1);
  ck_assert_int_eq(atomic_load(&r->flood_bad), 0);
  ck_assert_uint_eq(atomic_load(&r->flood_bytes), atomic_load(&p.sent));
}

static size_t flood_bytes(size_t base) {
  double s = th_test_scale();
  size_t n = (size_t)((double)base * (s > 0 ? s : 1));
  return n < 4 * FLOOD_CHUNK ? 4 * FLOOD_CHUNK : n;
}

START_TEST(read_budget_default_bounds_reads_per_iteration) {
  budget_run r = {.max_messages = -1, .max_bytes = -1};
  run_budget(&r, flood_bytes(64u << 20));
  ck_assert_uint_le(atomic_load(&r.max_per_iter),
                    WEFT_MAX_MESSAGES_PER_READ_DEFAULT);
}
END_TEST

START_TEST(read_budget_one_message_keeps_order) {
  budget_run r = {.max_messages = 1, .max_bytes = -1};
  run_budget(&r, flood_bytes(16u << 20));
  ck_assert_uint_eq(atomic_load(&r.max_per_iter), 1);
}
END_TEST

START_TEST(read_budget_one_byte_keeps_order) {
  budget_run r = {.max_messages = 1000, .max_bytes = 1};
  run_budget(&r, flood_bytes(16u << 20));
  ck_assert_uint_eq(atomic_load(&r.max_per_iter), 1);
}
END_TEST

/* A handler that yields after every read (weft_channel_yield_read, as the
 * KV server does once its work budget is spent): reading goes on after
 * each, with a read-resumed event, the bytes in order, the pings
 * answered. */
START_TEST(read_budget_yield_resumes_in_order) {
  budget_run r = {.max_messages = -1, .max_bytes = -1, .yield = true};
  run_budget(&r, flood_bytes(16u << 20));
  ck_assert_int_gt(atomic_load(&r.yields), 0);
  /* Every yield but perhaps one cut short by the EOF was resumed. */
  ck_assert_int_ge(atomic_load(&r.resumes) + 1, atomic_load(&r.yields));
  /* A yield ends the channel's reads of that iteration. */
  ck_assert_uint_eq(atomic_load(&r.max_per_iter), 1);
}
END_TEST

Suite *weft_test_suite(void) {
  th_require_transport();
  return th_suite("read_budget", "core", 300,
                  read_budget_default_bounds_reads_per_iteration,
                  read_budget_one_message_keeps_order,
                  read_budget_one_byte_keeps_order,
                  read_budget_yield_resumes_in_order, NULL);
}
