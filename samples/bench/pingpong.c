/* weft-pingpong: 16 B ping-pong round trips and pipelined message rate over
 * loopback, for weft's transports beside the raw-socket floor.
 *
 *   weft-pingpong raw-busy  [options]   plain sockets, recv(MSG_DONTWAIT) spin
 *   weft-pingpong raw-block [options]   plain sockets, blocking recv
 *   weft-pingpong weft -o transport.name=tcp|uring -o loop.busy_poll_us=N
 *
 * Options: -n ROUND_TRIPS (default 20000, after 2000 warm-up), -w WINDOW
 * (messages in flight in the pipelined phase, default 64), -t SECONDS (of
 * the pipelined phase, default 1), -s SIZE (message bytes, default 16).
 *
 * Server and client run in this process on two threads pinned to CPU 1 and
 * CPU 0 (in weft mode: two loop groups of one loop each). Both ends are the
 * same kind, so "weft" measures weft on both sides against the raw floor.
 * Output is one line of key=value pairs:
 *
 *   mode=weft transport=uring busy_poll_us=20 size=16 p50_us=... p99_us=...
 *   msgs_per_s=...
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <weft/weft.h>

#include "bench_util.h"

#define WARMUP 2000
#define MAX_SIZE 4096

typedef struct params {
  const char *mode;
  char transport[16];
  int busy_poll_us;
  long round_trips;
  int window;
  double seconds;
  size_t size;
} params;

/* Results, written by whichever thread measures. */
typedef struct results {
  double p50_us, p99_us;
  double msgs_per_s;
} results;

static void percentiles(uint64_t *rtt, long n, results *r) {
  qsort(rtt, (size_t)n, sizeof rtt[0], bench_cmp_u64);
  r->p50_us = (double)rtt[n / 2] / 1000.0;
  r->p99_us = (double)rtt[(n * 99) / 100] / 1000.0;
}

static void die(const char *what) {
  fprintf(stderr, "weft-pingpong: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* ---- raw sockets ---- */

static int raw_listen(uint16_t *port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sin;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sin, sizeof sin) < 0 || listen(fd, 8) < 0 ||
      getsockname(fd, (struct sockaddr *)&sin, &sl) < 0)
    die("listen");
  *port = ntohs(sin.sin_port);
  return fd;
}

static void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Receives at least 1 byte: spinning with MSG_DONTWAIT or blocking. */
static ssize_t raw_recv(int fd, void *p, size_t n, bool busy) {
  for (;;) {
    ssize_t r = recv(fd, p, n, busy ? MSG_DONTWAIT : 0);
    if (r >= 0 || (errno != EAGAIN && errno != EINTR))
      return r;
  }
}

static void raw_send(int fd, const void *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      die("send");
    }
    p = (const uint8_t *)p + w;
    n -= (size_t)w;
  }
}

typedef struct raw_server {
  int lfd;
  bool busy;
} raw_server;

/* Echoes every byte until EOF. */
static void *raw_server_main(void *arg) {
  raw_server *s = arg;
  bench_pin_self(1);
  int fd = accept(s->lfd, NULL, NULL);
  if (fd < 0)
    die("accept");
  nodelay(fd);
  static uint8_t buf[65536];
  for (;;) {
    ssize_t r = raw_recv(fd, buf, sizeof buf, s->busy);
    if (r <= 0)
      break;
    raw_send(fd, buf, (size_t)r);
  }
  close(fd);
  return NULL;
}

static void recv_exact(int fd, uint8_t *p, size_t n, bool busy) {
  while (n > 0) {
    ssize_t r = raw_recv(fd, p, n, busy);
    if (r <= 0)
      die("recv");
    p += r;
    n -= (size_t)r;
  }
}

static void run_raw(const params *pp, bool busy, results *res) {
  uint16_t port;
  raw_server s = {.lfd = raw_listen(&port), .busy = busy};
  pthread_t t;
  pthread_create(&t, NULL, raw_server_main, &s);
  bench_pin_self(0);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&sin, sizeof sin) < 0)
    die("connect");
  nodelay(fd);
  uint8_t msg[MAX_SIZE] = {1}, in[65536];
  uint64_t *rtt = malloc(sizeof *rtt * (size_t)pp->round_trips);
  for (long i = -WARMUP; i < pp->round_trips; i++) {
    uint64_t t0 = bench_now_ns();
    raw_send(fd, msg, pp->size);
    recv_exact(fd, in, pp->size, busy);
    if (i >= 0)
      rtt[i] = bench_now_ns() - t0;
  }
  percentiles(rtt, pp->round_trips, res);
  free(rtt);
  /* Pipelined: keep `window` messages in flight, count echoes. */
  for (int i = 0; i < pp->window; i++)
    raw_send(fd, msg, pp->size);
  if ((size_t)pp->window * pp->size > 65536) {
    fprintf(stderr, "weft-pingpong: window * size must be <= 64 KiB\n");
    exit(2);
  }
  uint64_t bytes = 0, end = bench_now_ns() + (uint64_t)(pp->seconds * 1e9);
  uint64_t t0 = bench_now_ns();
  size_t partial = 0;
  while (bench_now_ns() < end) {
    ssize_t r = raw_recv(fd, in, sizeof in, busy);
    if (r <= 0)
      die("recv");
    bytes += (uint64_t)r;
    partial += (size_t)r;
    size_t msgs = partial / pp->size;
    partial %= pp->size;
    /* Refill the window in one send, as weft's flush gathers its writes. */
    static uint8_t refill[65536];
    raw_send(fd, refill, msgs * pp->size);
  }
  res->msgs_per_s =
      (double)(bytes / pp->size) / ((double)(bench_now_ns() - t0) / 1e9);
  shutdown(fd, SHUT_WR);
  while (raw_recv(fd, in, sizeof in, busy) > 0)
    ;
  close(fd);
  pthread_join(t, NULL);
  close(s.lfd);
}

/* ---- weft ---- */

static void echo_read(weft_ctx *ctx, void *msg) {
  weft_ctx_write(ctx, msg, WEFT_PROMISE_NONE);
}
static void echo_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static const weft_handler echo_handler = {.name = "echo",
                                          .channel_read = echo_read,
                                          .channel_read_complete =
                                              echo_read_complete};

static void echo_init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "echo", &echo_handler,
                         NULL);
}

/* The client: ping-pong phase, then pipelined phase, on its loop. */
typedef struct client {
  const params *pp;
  results *res;
  uint64_t *rtt;
  long i; /* round trip number, from -WARMUP */
  uint64_t t0;
  size_t got; /* bytes of the current reply / partial message */
  bool pipelined;
  uint64_t msgs, pipe_t0, pipe_end;
  atomic_int done;
} client;

static void send_msgs(weft_ctx *ctx, client *c, int n) {
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  for (int k = 0; k < n; k++) {
    weft_buf *b = weft_buf_alloc(pool, c->pp->size);
    memset(weft_buf_wptr(b), 1, c->pp->size);
    b->writer_index += c->pp->size;
    weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
  }
  weft_ctx_flush(ctx);
}

static void start_pipelined(weft_ctx *ctx, client *c) {
  percentiles(c->rtt, c->pp->round_trips, c->res);
  c->pipelined = true;
  c->got = 0;
  c->pipe_t0 = bench_now_ns();
  c->pipe_end = c->pipe_t0 + (uint64_t)(c->pp->seconds * 1e9);
  send_msgs(ctx, c, c->pp->window);
}

static void client_active(weft_ctx *ctx) {
  client *c = weft_ctx_state(ctx);
  c->t0 = bench_now_ns();
  send_msgs(ctx, c, 1);
}

static void client_read(weft_ctx *ctx, void *msg) {
  client *c = weft_ctx_state(ctx);
  c->got += weft_buf_readable(msg);
  weft_buf_release(msg);
  if (c->pipelined) {
    size_t n = c->got / c->pp->size;
    c->got %= c->pp->size;
    c->msgs += n;
    if (bench_now_ns() >= c->pipe_end) {
      if (!atomic_load(&c->done)) {
        c->res->msgs_per_s =
            (double)c->msgs / ((double)(bench_now_ns() - c->pipe_t0) / 1e9);
        atomic_store(&c->done, 1);
        weft_ctx_close(ctx, WEFT_PROMISE_NONE);
      }
      return;
    }
    send_msgs(ctx, c, (int)n);
    return;
  }
  if (c->got < c->pp->size)
    return;
  c->got = 0;
  uint64_t t = bench_now_ns();
  if (c->i >= 0)
    c->rtt[c->i] = t - c->t0;
  if (++c->i == c->pp->round_trips) {
    start_pipelined(ctx, c);
    return;
  }
  c->t0 = bench_now_ns();
  send_msgs(ctx, c, 1);
}

static const weft_handler client_handler = {.name = "client",
                                            .channel_active = client_active,
                                            .channel_read = client_read};

static void client_init(weft_channel *ch, void *arg) {
  weft_pipeline_add_last(weft_channel_pipeline(ch), "client", &client_handler,
                         arg);
}

static void pin_task(void *arg) { bench_pin_self((int)(intptr_t)arg); }

static weft_loop_group *group_new(const params *pp, int cpu, const char *name) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = 1;
  o.pin = false; /* two groups: pin each loop to its own CPU below */
  o.busy_poll_us = pp->busy_poll_us;
  o.name = name;
  weft_loop_group *g;
  if (weft_loop_group_new(&g, &o) < 0 || weft_loop_group_start(g) < 0) {
    fprintf(stderr, "weft-pingpong: cannot start a loop group\n");
    exit(1);
  }
  weft_loop_execute(weft_loop_group_get(g, 0), pin_task, (void *)(intptr_t)cpu);
  return g;
}

static void run_weft(const params *pp, results *res) {
  weft_loop_group *sg = group_new(pp, 1, "pp-srv");
  weft_loop_group *cg = group_new(pp, 0, "pp-cli");
  char listen[64], uri[300];
  snprintf(listen, sizeof listen, "%s://127.0.0.1:0", pp->transport);
  weft_server_bootstrap sb = {
      .group = sg, .listen = listen, .child_init = echo_init};
  weft_channel_config_init(&sb.child_options);
  weft_server *srv;
  if (weft_server_bind(&srv, &sb) < 0 ||
      weft_server_address(srv, uri, sizeof uri) < 0) {
    fprintf(stderr, "weft-pingpong: cannot listen on %s\n", listen);
    exit(1);
  }
  client c = {.pp = pp, .res = res, .i = -WARMUP};
  c.rtt = malloc(sizeof *c.rtt * (size_t)pp->round_trips);
  weft_bootstrap b = {
      .group = cg, .connect = uri, .init = client_init, .init_arg = &c};
  weft_channel_config_init(&b.options);
  if (weft_bootstrap_connect(&b) < 0) {
    fprintf(stderr, "weft-pingpong: cannot connect to %s\n", uri);
    exit(1);
  }
  while (!atomic_load(&c.done)) {
    struct timespec ts = {.tv_nsec = 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  weft_loop_group_stop(cg);
  weft_loop_group_join(cg);
  weft_server_close(srv);
  weft_loop_group_stop(sg);
  weft_loop_group_join(sg);
  weft_loop_group_free(cg);
  weft_loop_group_free(sg);
  free(c.rtt);
}

/* ---- main ---- */

static void usage(void) {
  fprintf(stderr, "usage: weft-pingpong raw-busy|raw-block|weft [-o "
                  "transport.name=tcp|uring] [-o loop.busy_poll_us=N] [-n "
                  "ROUND_TRIPS] [-w WINDOW] [-t SECONDS] [-s SIZE]\n");
  exit(2);
}

static void set_option(params *pp, const char *kv) {
  if (strncmp(kv, "transport.name=", 15) == 0)
    snprintf(pp->transport, sizeof pp->transport, "%s", kv + 15);
  else if (strncmp(kv, "loop.busy_poll_us=", 18) == 0)
    pp->busy_poll_us = atoi(kv + 18);
  else
    usage();
}

int main(int argc, char **argv) {
  if (argc < 2)
    usage();
  params pp = {.mode = argv[1],
               .transport = "tcp",
               .busy_poll_us = WEFT_BUSY_POLL_US_DEFAULT,
               .round_trips = 20000,
               .window = 64,
               .seconds = 1.0,
               .size = 16};
  int opt;
  optind = 2;
  while ((opt = getopt(argc, argv, "o:n:w:t:s:")) != -1) {
    switch (opt) {
    case 'o':
      set_option(&pp, optarg);
      break;
    case 'n':
      pp.round_trips = atol(optarg);
      break;
    case 'w':
      pp.window = atoi(optarg);
      break;
    case 't':
      pp.seconds = atof(optarg);
      break;
    case 's':
      pp.size = (size_t)atol(optarg);
      break;
    default:
      usage();
    }
  }
  if (pp.round_trips < 1 || pp.window < 1 || pp.size < 1 ||
      pp.size > MAX_SIZE || pp.seconds <= 0)
    usage();
  results r = {0};
  if (strcmp(pp.mode, "raw-busy") == 0)
    run_raw(&pp, true, &r);
  else if (strcmp(pp.mode, "raw-block") == 0)
    run_raw(&pp, false, &r);
  else if (strcmp(pp.mode, "weft") == 0)
    run_weft(&pp, &r);
  else
    usage();
  bool raw = strncmp(pp.mode, "raw", 3) == 0;
  printf("mode=%s transport=%s busy_poll_us=%d size=%zu p50_us=%.2f "
         "p99_us=%.2f msgs_per_s=%.0f\n",
         pp.mode, raw ? "-" : pp.transport, raw ? -1 : pp.busy_poll_us, pp.size,
         r.p50_us, r.p99_us, r.msgs_per_s);
  return 0;
}
