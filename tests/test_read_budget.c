/* SPDX-License-Identifier: Apache-2.0 */
/* The read budget (docs/architecture.md, "Read budget"), over the
 * transport in WEFT_TEST_TRANSPORT (tcp, uring, ucx, verbs): two channels
 * on one server loop, one peer floods without a pause, the other plays
 * ping-pong. The flooded channel may fire at most its budget of reads per
 * loop iteration (counted with the loop's iteration counter), and no read
 * once the iteration's reads reached its byte budget; the ping-pong
 * completes its rounds while the flood goes on, and every flooded byte
 * arrives once, in order, whatever the budget (down to one read per
 * iteration).
 *
 * The peers of tcp and uring are plain blocking sockets on threads of
 * their own (both transports are TCP on the wire); those of ucx and verbs
 * are channels of the same transport on a client loop group of one loop.
 * No assertion is on time: waits poll for progress with generous caps.
 */
#include "harness.h"
#include "harness_scale.h"

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
  bool stall; /* the flood's first read blocks the loop until `release` */
  atomic_int release; /* set once the flood's peer has closed */
  /* loop thread */
  weft_channel *flood_ch, *ping_ch;
  uint64_t iter;          /* loop iteration of the flood's last read */
  uint64_t reads_in_iter; /* the flood's reads in that iteration */
  uint64_t bytes_in_iter; /* and their bytes */
  uint64_t since_ping;    /* the flood's reads since the ping's last */
  uint64_t flood_off;     /* flood bytes checked so far */
  /* published */
  atomic_ullong max_per_iter; /* most flood reads in one iteration */
  atomic_ullong max_before;   /* most flood bytes an iteration had fired
                                 before one of its reads */
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

static void atomic_max(atomic_ullong *m, uint64_t v) {
  if (v > atomic_load(m))
    atomic_store(m, v);
}

static void flood_read(budget_run *r, weft_channel *ch, weft_buf *b) {
  uint64_t it = th_loop_stats(weft_channel_loop(ch)).iterations;
  if (it != r->iter) {
    r->reads_in_iter = 0;
    r->bytes_in_iter = 0;
  }
  r->iter = it;
  atomic_max(&r->max_per_iter, ++r->reads_in_iter);
  atomic_max(&r->max_before, r->bytes_in_iter);
  r->bytes_in_iter += weft_buf_readable(b);
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

/* Blocks the server's loop in the flood's first read until the peer has
 * sent everything and closed (up to a minute), then 0.2 s more for the
 * close to reach this side (verbs: rdma_cm's DISCONNECTED in the event
 * channel, beside the FIN and the messages in the CQ). Not an assertion:
 * a close that comes later only makes the case weaker. */
static void stall_loop(budget_run *r) {
  for (int i = 0; i < 60000 && !atomic_load(&r->release); i++)
    usleep(1000);
  usleep(200000);
}

static void budget_read(weft_ctx *ctx, void *msg) {
  budget_run *r = weft_ctx_state(ctx);
  weft_channel *ch = weft_ctx_channel(ctx);
  weft_buf *b = msg;
  if (ch == r->flood_ch) {
    if (r->stall && atomic_load(&r->flood_reads) == 0)
      stall_loop(r);
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
  th_add_last(ch, "budget", &budget_handler, r);
}

/* ---- the peers ---- */

typedef struct peers {
  size_t flood_min;   /* bytes the flood sends at least */
  atomic_size_t sent; /* bytes it sent: until the pings are done */
  atomic_int ping_done, ping_failed;
  /* sockets (tcp, uring) */
  int flood_fd, ping_fd;
  /* channels (ucx, verbs), on the client loop's thread */
  weft_loop *loop;
  weft_channel *flood_ch, *ping_ch; /* retained while active */
  atomic_int connected, connect_err;
  atomic_int flood_closed; /* the flood's channel went inactive */
  uint8_t *chunk;          /* FLOOD_CHUNK bytes, refilled per write */
  size_t written;          /* flood bytes written; sent: their promises done */
  bool stop;               /* the flood wrote its last byte */
  bool close_sent;         /* its close is queued */
  int rounds;              /* pings answered */
} peers;

/* Whether the transport's peers can be plain TCP sockets. */
static bool socket_peers(void) {
  return strcmp(th_transport_name(), "tcp") == 0 ||
         strcmp(th_transport_name(), "uring") == 0;
}

static void fill_chunk(uint8_t *chunk, size_t off) {
  for (size_t i = 0; i < FLOOD_CHUNK; i++)
    chunk[i] = flood_byte(off + i);
}

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
    fill_chunk(chunk, off);
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

/* Socket peers: connects the flood, then the ping-pong, floods (at least
 * p->flood_min bytes, and until the ping-pong is done), plays ping-pong
 * once the flood is under way, and waits for the server to see the
 * flood's end. */
static void run_socket_peers(budget_run *r, peers *p, uint16_t port) {
  p->flood_fd = connect_port(port);
  ASSERT_EVENTUALLY(atomic_load(&r->channels) == 1, 10000);
  p->ping_fd = connect_port(port);
  ASSERT_EVENTUALLY(atomic_load(&r->channels) == 2, 10000);
  ck_assert_int_eq(atomic_load(&r->opt_err), 0);

  pthread_t ft, pt;
  ck_assert_int_eq(pthread_create(&ft, NULL, flood_thread, p), 0);
  /* The ping-pong starts once the flood is under way. */
  ASSERT_EVENTUALLY(atomic_load(&r->flood_bytes) > 0, 10000);
  ck_assert_int_eq(pthread_create(&pt, NULL, ping_thread, p), 0);
  /* The flood goes on until the pings are done: they are answered between
   * the flood's reads, or never. */
  ASSERT_EVENTUALLY(atomic_load(&p->ping_done) == 1, 60000);
  pthread_join(pt, NULL);
  ASSERT_EVENTUALLY(atomic_load(&r->flood_eof) == 1, 120000);
  pthread_join(ft, NULL);
  close(p->flood_fd);
  close(p->ping_fd);
}

/* ---- channel peers (ucx, verbs): the same on the client loop ---- */

static void flood_close_task(void *arg) {
  peers *p = arg;
  weft_channel_close(p->flood_ch, WEFT_PROMISE_NONE);
}

/* The flood's close follows its last byte: once every write's promise is
 * done, its FIN goes behind them. A task, not from inside the promise. */
static void flood_maybe_close(peers *p) {
  if (!p->stop || p->close_sent || atomic_load(&p->sent) != p->written)
    return;
  p->close_sent = true;
  if (weft_loop_execute(p->loop, flood_close_task, p) < 0)
    atomic_store(&p->ping_failed, 1);
}

static void flood_written(void *arg, int status) {
  peers *p = arg;
  if (status < 0)
    atomic_store(&p->ping_failed, 1); /* an honest flood loses no byte */
  else
    atomic_fetch_add(&p->sent, FLOOD_CHUNK);
  flood_maybe_close(p);
}

/* Writes chunks while the flood's channel is writable; the writability
 * event brings it back. Stops once the pings are done and flood_min
 * bytes were written. */
static void flood_pump(peers *p) {
  weft_channel *ch = p->flood_ch;
  while (!p->stop && ch != NULL && weft_channel_is_writable(ch)) {
    if (p->written >= p->flood_min && atomic_load(&p->ping_done)) {
      p->stop = true;
      break;
    }
    fill_chunk(p->chunk, p->written);
    p->written += FLOOD_CHUNK;
    weft_channel_write_bytes(ch, p->chunk, FLOOD_CHUNK,
                             (weft_promise){flood_written, p});
  }
  if (ch != NULL)
    weft_channel_flush(ch);
  flood_maybe_close(p);
}

static void flood_writability(weft_ctx *ctx, bool writable) {
  if (writable)
    flood_pump(weft_ctx_state(ctx));
  weft_ctx_fire_writability_changed(ctx, writable);
}

static void ping_send(peers *p) {
  char c = (char)('a' + p->rounds % 26);
  weft_channel_write_bytes(p->ping_ch, &c, 1, WEFT_PROMISE_NONE);
  weft_channel_flush(p->ping_ch);
}

/* One pong: the next ping, or the ping-pong is done. */
static void ping_read(weft_ctx *ctx, void *msg) {
  peers *p = weft_ctx_state(ctx);
  weft_buf *b = msg;
  for (size_t i = 0; i < weft_buf_readable(b); i++)
    if (weft_buf_rptr(b)[i] != (uint8_t)('a' + p->rounds++ % 26))
      atomic_store(&p->ping_failed, 1);
  weft_buf_release(b);
  if (p->rounds < PING_ROUNDS)
    ping_send(p);
  else
    atomic_store(&p->ping_done, 1);
}

/* A peer's channel: kept (retained) while active, dropped when it closes
 * (a ping channel closing early fails the ping-pong). */
static weft_channel **peer_slot(peers *p, weft_ctx *ctx, bool *flood) {
  *flood = weft_ctx_handler(ctx)->channel_read == NULL;
  return *flood ? &p->flood_ch : &p->ping_ch;
}

static void peer_active(weft_ctx *ctx) {
  peers *p = weft_ctx_state(ctx);
  bool flood;
  *peer_slot(p, ctx, &flood) = weft_channel_retain(weft_ctx_channel(ctx));
  atomic_fetch_add(&p->connected, 1);
  weft_ctx_fire_channel_active(ctx);
}

static void peer_inactive(weft_ctx *ctx) {
  peers *p = weft_ctx_state(ctx);
  bool flood;
  weft_channel **slot = peer_slot(p, ctx, &flood);
  if (!flood && !atomic_load(&p->ping_done))
    atomic_store(&p->ping_failed, 1);
  if (flood)
    atomic_store(&p->flood_closed, 1);
  if (*slot != NULL)
    weft_channel_release(*slot);
  *slot = NULL;
  weft_ctx_fire_channel_inactive(ctx);
}

static const weft_handler flood_peer = {.name = "flood",
                                        .channel_active = peer_active,
                                        .channel_inactive = peer_inactive,
                                        .writability_changed =
                                            flood_writability,
                                        .exception_caught = th_echo_exception};

static const weft_handler ping_peer = {.name = "ping",
                                       .channel_active = peer_active,
                                       .channel_inactive = peer_inactive,
                                       .channel_read = ping_read,
                                       .exception_caught = th_echo_exception};

static void flood_peer_init(weft_channel *ch, void *arg) {
  th_add_last(ch, flood_peer.name, &flood_peer, arg);
}

static void ping_peer_init(weft_channel *ch, void *arg) {
  th_add_last(ch, ping_peer.name, &ping_peer, arg);
}

static void peer_connected(weft_channel *ch, int status, void *arg) {
  (void)ch;
  if (status < 0)
    atomic_store(&((peers *)arg)->connect_err, status);
}

static void peer_connect(weft_loop_group *g, peers *p, const char *uri,
                         weft_channel_init_cb init) {
  weft_bootstrap b = th_bootstrap(g, NULL, uri, init, p);
  b.on_connect = peer_connected;
  b.connect_arg = p;
  b.options.connect_timeout_ms = 60000; /* a loaded machine */
  ck_assert_int_eq(weft_bootstrap_connect(&b), 0);
}

static int flood_start_task(void *arg) {
  flood_pump(arg);
  return 0;
}

static int ping_start_task(void *arg) {
  ping_send(arg);
  return 0;
}

/* Channel peers: as run_socket_peers, with both peers' channels on one
 * client loop. */
static void run_channel_peers(budget_run *r, peers *p, const char *uri) {
  weft_loop_group *g = th_group_start("wt-peers", 1);
  p->loop = weft_loop_group_get(g, 0);
  p->chunk = malloc(FLOOD_CHUNK);
  ck_assert_ptr_nonnull(p->chunk);

  peer_connect(g, p, uri, flood_peer_init);
  ASSERT_EVENTUALLY(
      atomic_load(&p->connected) == 1 && atomic_load(&r->channels) == 1, 60000);
  peer_connect(g, p, uri, ping_peer_init);
  ASSERT_EVENTUALLY(
      atomic_load(&p->connected) == 2 && atomic_load(&r->channels) == 2, 60000);
  ck_assert_int_eq(atomic_load(&p->connect_err), 0);
  ck_assert_int_eq(atomic_load(&r->opt_err), 0);

  ck_assert_int_eq(weft_loop_call(p->loop, flood_start_task, p), 0);
  ASSERT_EVENTUALLY(atomic_load(&r->flood_bytes) > 0, 10000);
  ck_assert_int_eq(weft_loop_call(p->loop, ping_start_task, p), 0);
  ASSERT_EVENTUALLY(atomic_load(&p->ping_done) == 1 ||
                        atomic_load(&p->ping_failed) == 1,
                    60000);
  ck_assert_int_eq(atomic_load(&p->ping_failed), 0);
  ASSERT_EVENTUALLY(atomic_load(&r->flood_eof) == 1, 120000);
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  weft_loop_group_free(g);
  free(p->chunk);
}

/* A one-loop server whose children have the budget in `r`; its URI in
 * `uri`. */
static weft_loop_group *budget_server(budget_run *r, weft_server **srv,
                                      char *uri, size_t len) {
  weft_loop_group *group = th_group_start("wt-budget", 1);
  char listen[96];
  snprintf(listen, sizeof listen, "%s://%s:0", th_transport_name(),
           th_test_host());
  *srv = th_server_bind(group, listen, budget_init, r, uri, len);
  return group;
}

static void budget_server_stop(weft_loop_group *group, weft_server *srv) {
  weft_server_close(srv);
  weft_loop_group_stop(group);
  ck_assert_int_eq(weft_loop_group_join(group), 0);
  weft_loop_group_free(group);
}

/* Floods one channel (at least `min` bytes, and until the ping-pong is
 * done) and plays ping-pong on the other, both on a one-loop server whose
 * children have the budget in `r`. */
static void run_budget(budget_run *r, size_t min) {
  char uri[300];
  weft_server *srv;
  weft_loop_group *group = budget_server(r, &srv, uri, sizeof uri);

  peers p = {.flood_min = min};
  if (socket_peers())
    run_socket_peers(r, &p, th_uri_port(uri));
  else
    run_channel_peers(r, &p, uri);
  uint64_t flood_when_pinged = atomic_load(&r->flood_bytes);
  budget_server_stop(group, srv);

  fprintf(stderr,
          "%s: budget %lld msgs / %lld bytes: %llu flood reads, at most %llu "
          "per loop iteration (after at most %llu bytes in it), at most %llu "
          "between two pings; %llu flood bytes at the end of the pings, "
          "%zu sent\n",
          th_transport_name(), (long long)r->max_messages,
          (long long)r->max_bytes,
          (unsigned long long)atomic_load(&r->flood_reads),
          (unsigned long long)atomic_load(&r->max_per_iter),
          (unsigned long long)atomic_load(&r->max_before),
          (unsigned long long)atomic_load(&r->max_between),
          (unsigned long long)flood_when_pinged, atomic_load(&p.sent));
  ck_assert_int_eq(atomic_load(&p.ping_failed), 0);
  ck_assert_int_eq(atomic_load(&r->ping_reads) >= PING_ROUNDS, 1);
  ck_assert_int_eq(atomic_load(&r->flood_bad), 0);
  ck_assert_uint_eq(atomic_load(&r->flood_bytes), atomic_load(&p.sent));
  /* No read once the iteration's reads reached the byte budget. */
  size_t max_bytes =
      r->max_bytes > 0 ? (size_t)r->max_bytes : WEFT_MAX_BYTES_PER_READ_DEFAULT;
  ck_assert_uint_lt(atomic_load(&r->max_before), max_bytes);
}

/* One FLOOD_CHUNK of flood, then the peer's close, while the server's
 * loop is stalled in the flood's first read (r->stall): the rest of the
 * flood, its end and (verbs) rdma_cm's DISCONNECTED all wait for the
 * server at once. No ping-pong. */
static void run_close(budget_run *r) {
  char uri[300];
  weft_server *srv;
  weft_loop_group *group = budget_server(r, &srv, uri, sizeof uri);
  peers p = {.flood_min = FLOOD_CHUNK};
  atomic_store(&p.ping_done, 1); /* the flood stops at flood_min */
  weft_loop_group *g = NULL;
  p.chunk = malloc(FLOOD_CHUNK);
  ck_assert_ptr_nonnull(p.chunk);
  if (socket_peers()) {
    p.flood_fd = connect_port(th_uri_port(uri));
    ASSERT_EVENTUALLY(atomic_load(&r->channels) == 1, 10000);
    fill_chunk(p.chunk, 0);
    th_write_all(p.flood_fd, p.chunk, FLOOD_CHUNK); /* the socket holds it */
    atomic_store(&p.sent, FLOOD_CHUNK);
    close(p.flood_fd);
  } else {
    g = th_group_start("wt-peers", 1);
    p.loop = weft_loop_group_get(g, 0);
    peer_connect(g, &p, uri, flood_peer_init);
    ASSERT_EVENTUALLY(atomic_load(&p.connected) == 1 &&
                          atomic_load(&r->channels) == 1,
                      60000);
    ck_assert_int_eq(weft_loop_call(p.loop, flood_start_task, &p), 0);
    /* verbs: its FIN was delivered and it disconnected. */
    ASSERT_EVENTUALLY(atomic_load(&p.flood_closed) == 1, 60000);
  }
  atomic_store(&r->release, 1);
  ASSERT_EVENTUALLY(atomic_load(&r->flood_eof) == 1, 120000);
  if (g != NULL) {
    weft_loop_group_stop(g);
    ck_assert_int_eq(weft_loop_group_join(g), 0);
    weft_loop_group_free(g);
  }
  free(p.chunk);
  budget_server_stop(group, srv);
  fprintf(stderr,
          "%s: budget %lld msgs, through the close: %llu flood reads, at "
          "most %llu per loop iteration\n",
          th_transport_name(), (long long)r->max_messages,
          (unsigned long long)atomic_load(&r->flood_reads),
          (unsigned long long)atomic_load(&r->max_per_iter));
  ck_assert_int_eq(atomic_load(&p.ping_failed), 0);
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

/* The peer's flood, its end and its close reach a server that is busy
 * elsewhere (here: stalled in the first read): the budget holds through
 * the close too. Over verbs, rdma_cm's DISCONNECTED drained the CQ with
 * polls that each started a new read budget, and the channel fired every
 * message it held (up to VERBS_CREDITS, 16) in one loop iteration: the
 * flake of read_budget_one_message_keeps_order, whose flood ends with a
 * close. */
START_TEST(read_budget_one_message_through_the_close) {
  budget_run r = {.max_messages = 1, .max_bytes = -1, .stall = true};
  run_close(&r);
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
                  read_budget_one_message_through_the_close,
                  read_budget_yield_resumes_in_order, NULL);
}
