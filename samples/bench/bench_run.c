/* weft-bench: Observatory-style microbenchmarks over every transport, each
 * beside the plain-socket floor measured in the same run.
 *
 *   weft-bench [-c SPEC]... [-p PATTERNS] [-s SIZES] [-r REPS] [options]
 *
 * A configuration (-c, repeatable) is `raw-busy` (plain sockets, spinning
 * on recv(MSG_DONTWAIT)), `raw-block` (plain sockets, blocking recv), or a
 * weft transport with its busy-poll window: `tcp:20`, `uring:0`, `ucx`
 * (busy_poll_us from -f FILE / WEFT_LOOP_BUSY_POLL_US / the default 20).
 * Without -c: raw-busy, raw-block, and the transport and window of the
 * config file (-f, [transport] name, [loop] busy_poll_us) and WEFT_*
 * variables, at that window and at 0.
 *
 * Patterns (-p, comma list; default all):
 *   pingpong  one message in flight; every round trip recorded: p50, p90,
 *             p99, p99.9, p99.99, max, mean
 *   stream    unidirectional: the client sends, the server counts and
 *             answers one byte per unit (256 KiB, or one message if
 *             larger); the measurement ends at the reply to the last unit
 *   bidir     echo with 256 KiB (at least 2 messages) in flight: payload
 *             bytes both ways per second
 *   rate      echo, N connections x M messages in flight (--rate 1x64,4x16)
 *             of --rate-size bytes (16): messages per second
 *   connect   connect, a 16 B hello, the server closes, the client sees
 *             EOF; one at a time: connections per second
 *   idle      --idle-conns (100) connections doing nothing for
 *             --idle-seconds (3): the server's CPU time, % of one core
 *
 * What weft-pingpong measured (before it merged into this program) is the
 * pingpong and rate patterns of one configuration: `weft-pingpong MODE -n N
 * -w W -t S -s B` is `weft-bench -c CONFIG -p pingpong,rate -s B --rate 1xW
 * --rate-size B -n N -t S -r 1`, CONFIG raw-busy, raw-block or (for mode
 * weft) TRANSPORT:BUSY_POLL_US; scripts/bench-transports.sh and
 * scripts/bench-ucx.sh run it so and read the CSV.
 *
 * Every measurement runs its phases in order: connect all, prepare (the
 * 16 B hello telling the server what to do), warm-up (not measured; round
 * trips or --warm-seconds), measure, clean up (close, wait for the
 * server's side). Repetitions (-r) are interleaved: repetition 1 of every
 * point and configuration, then repetition 2, ...; each row reports the
 * median and the min..max of its repetitions.
 *
 * Roles: by default server and client run in this process, the server's
 * thread or loop pinned to CPU 1 and the client's to CPU 0. `--role
 * server` serves one configuration on --host:--port until SIGINT/SIGTERM;
 * `--role client` measures against it (same -c; --server-pid PID to
 * measure the idle server's CPU). --host is the address to listen on and
 * connect to (RoCE cannot use 127.0.0.1).
 *
 * Output: markdown tables on stdout (with the ratio of every weft row to
 * the raw rows of the same point) and the targets; --csv FILE,
 * --json FILE, --md FILE (the tables again); a progress line on stderr
 * (--progress, default when stderr is a terminal).
 */

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
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
#include "report.h"

#define MAX_CONFIGS 16
#define MAX_SIZES 24
#define MAX_RATES 8
#define CHUNK 65536           /* weft buffer (the pool's largest), bytes */
#define TXMAX 1048576         /* largest raw send or recv, bytes */
#define STREAM_UNIT 262144    /* bytes the server acknowledges at once */
#define BIDIR_INFLIGHT 262144 /* bytes in flight per connection, bidir */
#define HELLO_MAGIC 0x776e6231u
#define RUN_TIMEOUT_S 120

/* ---- what the client tells the server: 16 bytes before any payload ---- */

enum { SRV_ECHO = 1, SRV_SINK = 2, SRV_CLOSE = 3 };

typedef struct hello {
  uint32_t magic;
  uint32_t mode; /* SRV_* */
  uint64_t unit; /* SRV_SINK: answer one byte per `unit` bytes */
} hello;

_Static_assert(sizeof(hello) == 16, "the hello is 16 bytes on the wire");

enum pattern { P_PINGPONG, P_STREAM, P_BIDIR, P_RATE, P_CONNECT, P_IDLE, P_N };
static const char *const pattern_names[P_N] = {"pingpong", "stream",  "bidir",
                                               "rate",     "connect", "idle"};

/* ---- options and configurations ---- */

typedef struct session session;

typedef struct bench_config {
  char label[40];
  char mode[12]; /* weft, raw-busy, raw-block */
  char transport[16];
  int busy_poll_us;
  bool raw, busy; /* raw: busy = spin */
  session *s;
} bench_config;

typedef struct rate_point {
  int conns, window;
} rate_point;

typedef struct opts {
  bench_config configs[MAX_CONFIGS];
  int n_configs;
  bool patterns[P_N];
  size_t sizes[MAX_SIZES];
  int n_sizes;
  rate_point rates[MAX_RATES];
  int n_rates;
  size_t rate_size;
  int reps;
  long iters, warmup;
  double seconds, warm_seconds;
  int idle_conns;
  double idle_seconds;
  enum { ROLE_BOTH, ROLE_SERVER, ROLE_CLIENT } role;
  char host[64];
  int port;
  pid_t server_pid;
  const char *csv, *json, *md;
  bool progress, quiet;
  char excludes[MAX_CONFIGS][32]; /* -x TRANSPORT:PATTERN */
  int n_excludes;
} opts;

/* One thing to measure. */
typedef struct point {
  enum pattern pattern;
  size_t size;
  int conns, window;
  long warm, iters; /* pingpong round trips */
} point;

/* What one repetition measured. */
typedef struct result {
  bench_latency lat;
  bool has_lat;
  double msgs_per_s, mb_per_s, conns_per_s, cpu_pct; /* < 0: not measured */
} result;

static opts O;

static void die(const char *what) {
  fprintf(stderr, "weft-bench: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void fail(const char *fmt, const char *arg) {
  fprintf(stderr, "weft-bench: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(2);
}

/* ---- server CPU time ---- */

/* Linux's clock id for a thread's CPU time (CPUCLOCK_SCHED, per thread):
 * works for any thread of this process, without its pthread_t. */
static clockid_t thread_clock(pid_t tid) {
  return (clockid_t)(((unsigned)~tid) << 3) | 6;
}

static uint64_t clock_ns(clockid_t clk) {
  struct timespec ts;
  if (clock_gettime(clk, &ts) < 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the server: the other process (--server-pid), or the sum
 * over this process's threads whose name starts with `prefix`. */
static uint64_t server_cpu_ns(const char *prefix) {
  if (O.server_pid > 0) {
    clockid_t clk;
    return clock_getcpuclockid(O.server_pid, &clk) == 0 ? clock_ns(clk) : 0;
  }
  DIR *d = opendir("/proc/self/task");
  if (d == NULL)
    return 0;
  uint64_t sum = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[300], comm[32] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
      continue;
    if (fgets(comm, sizeof comm, f) != NULL &&
        strncmp(comm, prefix, strlen(prefix)) == 0)
      sum += clock_ns(thread_clock((pid_t)atoi(e->d_name)));
    fclose(f);
  }
  closedir(d);
  return sum;
}

/* ---- sessions: a configuration's server and client side ---- */

struct session {
  bench_config *cf;
  int idx;
  char prefix[16]; /* server thread names start with this */
  /* raw */
  int lfd;
  pthread_t accept_thread;
  struct sockaddr_in addr; /* where the client connects */
  /* weft */
  weft_loop_group *sg, *cg;
  weft_server *srv;
  char uri[300];
};

static ssize_t raw_recv(int fd, void *p, size_t n, bool busy) {
  for (;;) {
    ssize_t r = recv(fd, p, n, busy ? MSG_DONTWAIT : 0);
    if (r >= 0 || (errno != EAGAIN && errno != EINTR))
      return r;
  }
}

static int raw_send_all(int fd, const void *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN)
        continue;
      return -1;
    }
    p = (const uint8_t *)p + w;
    n -= (size_t)w;
  }
  return 0;
}

static int recv_exact(int fd, void *p, size_t n, bool busy) {
  while (n > 0) {
    ssize_t r = raw_recv(fd, p, n, busy);
    if (r <= 0)
      return -1;
    p = (uint8_t *)p + r;
    n -= (size_t)r;
  }
  return 0;
}

static void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

typedef struct raw_conn {
  int fd;
  hello h;
  bool busy;
  char name[16];
} raw_conn;

static uint8_t zeros[TXMAX];

/* Echoes, or counts and answers one byte per unit, until EOF. */
static void *raw_conn_main(void *arg) {
  raw_conn *rc = arg;
  pthread_setname_np(pthread_self(), rc->name);
  bench_pin_self(1);
  uint8_t *buf = malloc(TXMAX);
  uint64_t count = 0, acked = 0;
  for (;;) {
    ssize_t r = raw_recv(rc->fd, buf, TXMAX, rc->busy);
    if (r <= 0)
      break;
    if (rc->h.mode == SRV_ECHO) {
      if (raw_send_all(rc->fd, buf, (size_t)r) < 0)
        break;
      continue;
    }
    count += (uint64_t)r;
    uint64_t due = count / rc->h.unit - acked;
    acked += due;
    for (size_t k; due > 0; due -= k) {
      k = due > TXMAX ? TXMAX : (size_t)due;
      if (raw_send_all(rc->fd, zeros, k) < 0)
        goto out;
    }
  }
out:
  free(buf);
  close(rc->fd);
  free(rc);
  return NULL;
}

/* Accepts, reads the hello (a CLOSE is handled here, so the connect rate
 * is not a thread-creation rate), and starts a thread per connection. */
static void *raw_accept_main(void *arg) {
  session *s = arg;
  char name[16];
  snprintf(name, sizeof name, "%.8sacc", s->prefix);
  pthread_setname_np(pthread_self(), name);
  bench_pin_self(1);
  for (;;) {
    int fd = accept(s->lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      return NULL; /* the listener was shut down */
    }
    nodelay(fd);
    hello h;
    if (recv_exact(fd, &h, sizeof h, false) < 0 || h.magic != HELLO_MAGIC ||
        h.mode == SRV_CLOSE || (h.mode == SRV_SINK && h.unit == 0)) {
      close(fd);
      continue;
    }
    raw_conn *rc = malloc(sizeof *rc);
    *rc = (raw_conn){.fd = fd, .h = h, .busy = s->cf->busy};
    snprintf(rc->name, sizeof rc->name, "%.8sraw", s->prefix);
    pthread_t t;
    if (pthread_create(&t, NULL, raw_conn_main, rc) != 0) {
      close(fd);
      free(rc);
      continue;
    }
    pthread_detach(t);
  }
}

static void fill_addr(struct sockaddr_in *sin, int port) {
  *sin = (struct sockaddr_in){.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, O.host, &sin->sin_addr) != 1)
    fail("--host %s: not an IPv4 address", O.host);
}

static void raw_session_start(session *s) {
  fill_addr(&s->addr, O.port);
  if (O.role == ROLE_CLIENT)
    return;
  int one = 1;
  socklen_t sl = sizeof s->addr;
  s->lfd = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(s->lfd, (struct sockaddr *)&s->addr, sizeof s->addr) < 0 ||
      listen(s->lfd, 1024) < 0 ||
      getsockname(s->lfd, (struct sockaddr *)&s->addr, &sl) < 0)
    die("listen");
  if (pthread_create(&s->accept_thread, NULL, raw_accept_main, s) != 0)
    die("pthread_create");
}

static void raw_session_stop(session *s) {
  if (O.role == ROLE_CLIENT)
    return;
  shutdown(s->lfd, SHUT_RDWR);
  pthread_join(s->accept_thread, NULL);
  close(s->lfd);
}

/* -- weft's server: the hello, then echo, count or close -- */

typedef struct srv_conn {
  uint8_t hdr[sizeof(hello)];
  size_t hlen;
  hello h;
  uint64_t count, acked;
} srv_conn;

static void send_zeros(weft_ctx *ctx, uint64_t n) {
  weft_pool *pool = weft_loop_pool(weft_channel_loop(weft_ctx_channel(ctx)));
  while (n > 0) {
    size_t k = n > CHUNK ? CHUNK : (size_t)n;
    weft_buf *b = weft_buf_alloc(pool, k);
    if (b == NULL)
      return;
    memset(weft_buf_wptr(b), 0, k);
    b->writer_index += k;
    weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
    n -= k;
  }
}

/* Takes hello bytes from `b`; returns 1 when the hello is complete and
 * valid, 0 when more is needed, -1 when it is not a hello. */
static int srv_take_hello(srv_conn *s, weft_buf *b) {
  size_t n = sizeof s->hdr - s->hlen;
  if (n > weft_buf_readable(b))
    n = weft_buf_readable(b);
  weft_buf_read_bytes(b, s->hdr + s->hlen, n);
  s->hlen += n;
  if (s->hlen < sizeof s->hdr)
    return 0;
  memcpy(&s->h, s->hdr, sizeof s->h);
  if (s->h.magic != HELLO_MAGIC || s->h.mode < SRV_ECHO ||
      s->h.mode > SRV_CLOSE || (s->h.mode == SRV_SINK && s->h.unit == 0))
    return -1;
  return 1;
}

static void srv_read(weft_ctx *ctx, void *msg) {
  srv_conn *s = weft_ctx_state(ctx);
  weft_buf *b = msg;
  if (s->hlen < sizeof s->hdr) {
    int rc = srv_take_hello(s, b);
    if (rc <= 0 || s->h.mode == SRV_CLOSE || weft_buf_readable(b) == 0) {
      weft_buf_release(b);
      if (rc < 0 || (rc > 0 && s->h.mode == SRV_CLOSE))
        weft_ctx_close(ctx, WEFT_PROMISE_NONE);
      return;
    }
  }
  if (s->h.mode == SRV_ECHO) {
    weft_ctx_write(ctx, b, WEFT_PROMISE_NONE);
    return;
  }
  s->count += weft_buf_readable(b);
  weft_buf_release(b);
  uint64_t due = s->count / s->h.unit - s->acked;
  if (due > 0) {
    send_zeros(ctx, due);
    s->acked += due;
  }
}

static void srv_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

static void srv_removed(weft_ctx *ctx) { free(weft_ctx_state(ctx)); }

static const weft_handler srv_handler = {.name = "bench-server",
                                         .handler_removed = srv_removed,
                                         .channel_read = srv_read,
                                         .channel_read_complete =
                                             srv_read_complete};

static void srv_init(weft_channel *ch, void *arg) {
  (void)arg;
  srv_conn *s = calloc(1, sizeof *s);
  if (s == NULL ||
      weft_pipeline_add_last(weft_channel_pipeline(ch), "bench-server",
                             &srv_handler, s) < 0) {
    free(s);
    weft_channel_close(ch, WEFT_PROMISE_NONE);
  }
}

static void pin_task(void *arg) { bench_pin_self((int)(intptr_t)arg); }

static weft_loop_group *group_new(const bench_config *cf, int cpu,
                                  const char *name) {
  weft_loop_options o;
  weft_loop_options_init(&o);
  o.n_loops = 1;
  o.pin = false; /* two groups: each loop pinned to its own CPU below */
  o.busy_poll_us = cf->busy_poll_us;
  o.name = name;
  weft_loop_group *g;
  if (weft_loop_group_new(&g, &o) < 0 || weft_loop_group_start(g) < 0)
    fail("cannot start a loop group for %s", cf->label);
  weft_loop_execute(weft_loop_group_get(g, 0), pin_task, (void *)(intptr_t)cpu);
  return g;
}

static void weft_session_start(session *s) {
  bench_config *cf = s->cf;
  char name[16];
  snprintf(s->uri, sizeof s->uri, "%s://%s:%d", cf->transport, O.host, O.port);
  if (O.role != ROLE_CLIENT) {
    /* the loop's thread is "wb<idx>s-0", which the prefix matches */
    snprintf(name, sizeof name, "wb%ds", s->idx);
    s->sg = group_new(cf, 1, name);
    weft_server_bootstrap sb = {
        .group = s->sg, .listen = s->uri, .child_init = srv_init};
    weft_channel_config_init(&sb.child_options);
    if (weft_server_bind(&s->srv, &sb) < 0 ||
        weft_server_address(s->srv, s->uri, sizeof s->uri) < 0)
      fail("cannot listen on %s", s->uri);
  }
  if (O.role != ROLE_SERVER) {
    snprintf(name, sizeof name, "wb%dc", s->idx);
    s->cg = group_new(cf, 0, name);
  }
}

static void group_end(weft_loop_group *g) {
  if (g == NULL)
    return;
  weft_loop_group_stop(g);
  weft_loop_group_join(g);
  weft_loop_group_free(g);
}

static void weft_session_stop(session *s) {
  group_end(s->cg);
  if (s->srv != NULL)
    weft_server_close(s->srv);
  group_end(s->sg);
}

static void session_start(bench_config *cf, int idx) {
  session *s = calloc(1, sizeof *s);
  if (s == NULL)
    die("calloc");
  s->cf = cf;
  s->idx = idx;
  s->lfd = -1;
  /* weft names its loop threads "<name>-<i>": "wb3s-0" */
  snprintf(s->prefix, sizeof s->prefix, "wb%ds-", idx);
  cf->s = s;
  if (cf->raw)
    raw_session_start(s);
  else
    weft_session_start(s);
}

static void session_stop(bench_config *cf) {
  if (cf->raw)
    raw_session_stop(cf->s);
  else
    weft_session_stop(cf->s);
  free(cf->s);
  cf->s = NULL;
}

/* ---- the raw client ---- */

static uint8_t rxbuf[TXMAX];

static int raw_connect(session *s, const hello *h) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    die("socket");
  if (connect(fd, (struct sockaddr *)&s->addr, sizeof s->addr) < 0)
    die("connect");
  nodelay(fd);
  if (raw_send_all(fd, h, sizeof *h) < 0)
    die("send");
  return fd;
}

static void raw_close(int fd, bool busy) {
  shutdown(fd, SHUT_WR);
  while (raw_recv(fd, rxbuf, sizeof rxbuf, busy) > 0)
    ;
  close(fd);
}

/* Sends n bytes and receives n back. Small messages: one send, then a
 * blocking (or spinning) recv, as a plain echo client does; large ones
 * receive while sending so neither side's buffers fill up. */
static int raw_exchange(int fd, size_t n, bool busy) {
  size_t sent = 0, got = 0;
  while (sent < n) {
    size_t k = n - sent > TXMAX ? TXMAX : n - sent;
    ssize_t w = send(fd, zeros, k, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      sent += (size_t)w;
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR)
      return -1;
    ssize_t r = recv(fd, rxbuf, sizeof rxbuf, MSG_DONTWAIT);
    if (r > 0)
      got += (size_t)r;
    else if (r == 0 || (errno != EAGAIN && errno != EINTR))
      return -1;
    else if (!busy)
      poll(&(struct pollfd){.fd = fd, .events = POLLIN | POLLOUT}, 1, -1);
  }
  while (got < n) {
    size_t want = n - got > sizeof rxbuf ? sizeof rxbuf : n - got;
    ssize_t r = raw_recv(fd, rxbuf, want, busy);
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

static void raw_pingpong(session *s, const point *pt, result *res) {
  bool busy = s->cf->busy;
  int fd = raw_connect(s, &(hello){HELLO_MAGIC, SRV_ECHO, 0});
  uint64_t *rtt = malloc(sizeof *rtt * (size_t)pt->iters);
  if (rtt == NULL)
    die("malloc");
  for (long i = -pt->warm; i < pt->iters; i++) {
    uint64_t t0 = bench_now_ns();
    if (raw_exchange(fd, pt->size, busy) < 0)
      die("ping-pong");
    if (i >= 0)
      rtt[i] = bench_now_ns() - t0;
  }
  res->has_lat = bench_latency_of(rtt, (size_t)pt->iters, &res->lat) == 0;
  free(rtt);
  raw_close(fd, busy);
}

enum { PH_WARM, PH_MEASURE, PH_DRAIN, PH_DONE };

/* Echo with `window` messages in flight on each connection: refills in
 * one send per read, as weft's flush gathers its writes. */
typedef struct raw_echo {
  int fd;
  uint64_t tosend; /* bytes queued for sending */
  size_t partial;  /* bytes of a message not yet complete */
  long outstanding;
} raw_echo;

static void raw_echo_run(session *s, const point *pt, result *res) {
  bool busy = s->cf->busy;
  int n = pt->conns;
  raw_echo *c = calloc((size_t)n, sizeof *c);
  struct pollfd *pfd = calloc((size_t)n, sizeof *pfd);
  for (int i = 0; i < n; i++) {
    c[i].fd = raw_connect(s, &(hello){HELLO_MAGIC, SRV_ECHO, 0});
    c[i].tosend = (uint64_t)pt->window * pt->size;
    c[i].outstanding = pt->window;
  }
  int phase = PH_WARM;
  uint64_t start = bench_now_ns(), t0 = 0, t1 = 0, msgs = 0;
  uint64_t warm_end = start + (uint64_t)(O.warm_seconds * 1e9), end = 0;
  while (phase != PH_DONE) {
    bool progress = false;
    for (int i = 0; i < n && phase != PH_DONE; i++) {
      raw_echo *e = &c[i];
      if (e->tosend > 0) {
        size_t k = e->tosend > TXMAX ? TXMAX : (size_t)e->tosend;
        ssize_t w = send(e->fd, zeros, k, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
          e->tosend -= (uint64_t)w;
          progress = true;
        }
      }
      /* one connection with nothing to send: block in recv, no poll */
      int flags = !busy && n == 1 && e->tosend == 0 ? 0 : MSG_DONTWAIT;
      if (e->outstanding == 0)
        continue;
      ssize_t r = recv(e->fd, rxbuf, sizeof rxbuf, flags);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
        die("echo recv");
      if (r < 0)
        continue;
      progress = true;
      e->partial += (size_t)r;
      long k = (long)(e->partial / pt->size);
      e->partial %= pt->size;
      e->outstanding -= k;
      uint64_t now = bench_now_ns();
      if (phase == PH_WARM && now >= warm_end) {
        phase = PH_MEASURE;
        t0 = now;
        end = now + (uint64_t)(O.seconds * 1e9);
      } else if (phase >= PH_MEASURE) {
        msgs += (uint64_t)k;
      }
      if (phase == PH_MEASURE && now >= end)
        phase = PH_DRAIN;
      if (phase < PH_DRAIN) {
        e->tosend += (uint64_t)k * pt->size;
        e->outstanding += k;
      }
    }
    if (phase == PH_DRAIN) {
      int drained = 0;
      for (int i = 0; i < n; i++)
        drained += c[i].outstanding == 0;
      if (drained == n) {
        t1 = bench_now_ns();
        phase = PH_DONE;
      }
    }
    if (!progress && !busy && phase != PH_DONE && n > 1) {
      for (int i = 0; i < n; i++)
        pfd[i] = (struct pollfd){
            .fd = c[i].fd,
            .events = (short)(POLLIN | (c[i].tosend ? POLLOUT : 0))};
      poll(pfd, (nfds_t)n, -1);
    }
  }
  double secs = (double)(t1 - t0) / 1e9;
  res->msgs_per_s = (double)msgs / secs;
  res->mb_per_s = (double)msgs * (double)pt->size *
                  (pt->pattern == P_BIDIR ? 2.0 : 1.0) / secs / 1e6;
  for (int i = 0; i < n; i++)
    raw_close(c[i].fd, busy);
  free(pfd);
  free(c);
}

static uint64_t stream_unit(size_t size) {
  return size >= STREAM_UNIT ? size : STREAM_UNIT / size * size;
}

/* Sends in batches until the time is up, then up to the
 * next unit; the server's last one-byte answer ends the measurement. */
static void raw_stream(session *s, const point *pt, result *res) {
  bool busy = s->cf->busy;
  uint64_t unit = stream_unit(pt->size);
  int fd = raw_connect(s, &(hello){HELLO_MAGIC, SRV_SINK, unit});
  /* a message per send from 64 KiB up (to 1 MiB), 64 KiB batches below */
  size_t batch = pt->size >= TXMAX   ? TXMAX
                 : pt->size >= CHUNK ? pt->size
                                     : CHUNK / pt->size * pt->size;
  uint64_t sent = 0, units = 0, units0 = 0, t0 = 0, t1 = 0, end = 0;
  uint64_t warm_end = bench_now_ns() + (uint64_t)(O.warm_seconds * 1e9);
  int phase = PH_WARM;
  while (phase != PH_DONE) {
    uint64_t left = phase == PH_DRAIN ? (unit - sent % unit) % unit : batch;
    if (left > 0) {
      size_t k = left > batch ? batch : (size_t)left;
      ssize_t w = send(fd, zeros, k, (busy ? MSG_DONTWAIT : 0) | MSG_NOSIGNAL);
      if (w > 0)
        sent += (uint64_t)w;
      else if (errno != EAGAIN && errno != EINTR)
        die("stream send");
    }
    int flags = left == 0 && !busy ? 0 : MSG_DONTWAIT;
    ssize_t r = recv(fd, rxbuf, sizeof rxbuf, flags);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
      die("stream recv");
    if (r < 0)
      continue;
    units += (uint64_t)r;
    uint64_t now = bench_now_ns();
    if (phase == PH_WARM && now >= warm_end) {
      phase = PH_MEASURE;
      t0 = now;
      units0 = units;
      end = now + (uint64_t)(O.seconds * 1e9);
    } else if (phase == PH_MEASURE && now >= end) {
      phase = PH_DRAIN;
    }
    if (phase == PH_DRAIN && units * unit == sent) {
      t1 = now;
      phase = PH_DONE;
    }
  }
  double secs = (double)(t1 - t0) / 1e9;
  double bytes = (double)(units - units0) * (double)unit;
  res->mb_per_s = bytes / secs / 1e6;
  res->msgs_per_s = bytes / (double)pt->size / secs;
  raw_close(fd, busy);
}

static void raw_connect_rate(session *s, result *res) {
  bool busy = s->cf->busy;
  uint64_t start = bench_now_ns(), t0 = 0, count = 0;
  uint64_t warm_end = start + (uint64_t)(O.warm_seconds * 1e9);
  uint64_t end = warm_end + (uint64_t)(O.seconds * 1e9), now;
  while ((now = bench_now_ns()) < end) {
    if (t0 == 0 && now >= warm_end)
      t0 = now;
    int fd = raw_connect(s, &(hello){HELLO_MAGIC, SRV_CLOSE, 0});
    while (raw_recv(fd, rxbuf, sizeof rxbuf, busy) > 0)
      ;
    close(fd);
    count += t0 != 0;
  }
  res->conns_per_s = (double)count / ((double)(bench_now_ns() - t0) / 1e9);
}

static void measure_idle_cpu(session *s, result *res) {
  uint64_t c0 = server_cpu_ns(s->prefix), w0 = bench_now_ns();
  struct timespec ts = {
      (time_t)O.idle_seconds,
      (long)((O.idle_seconds - (double)(time_t)O.idle_seconds) * 1e9)};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
  uint64_t c1 = server_cpu_ns(s->prefix), w1 = bench_now_ns();
  res->cpu_pct = 100.0 * (double)(c1 - c0) / (double)(w1 - w0);
}

static void raw_idle(session *s, const point *pt, result *res) {
  int *fd = malloc(sizeof *fd * (size_t)pt->conns);
  for (int i = 0; i < pt->conns; i++)
    fd[i] = raw_connect(s, &(hello){HELLO_MAGIC, SRV_ECHO, 0});
  /* the server threads have read the hello once a byte echoes back */
  for (int i = 0; i < pt->conns; i++)
    if (raw_exchange(fd[i], 1, false) < 0)
      die("idle echo");
  measure_idle_cpu(s, res);
  for (int i = 0; i < pt->conns; i++)
    raw_close(fd[i], false);
  free(fd);
}

static void raw_measure(session *s, const point *pt, result *res) {
  switch (pt->pattern) {
  case P_PINGPONG:
    raw_pingpong(s, pt, res);
    break;
  case P_STREAM:
    raw_stream(s, pt, res);
    break;
  case P_BIDIR:
  case P_RATE:
    raw_echo_run(s, pt, res);
    break;
  case P_CONNECT:
    raw_connect_rate(s, res);
    break;
  case P_IDLE:
    raw_idle(s, pt, res);
    break;
  default:
    break;
  }
}

/* ---- the weft client: every pattern as a state machine on its loop ---- */

typedef struct wrun wrun;

typedef struct wconn {
  wrun *run;
  weft_ctx *ctx;
  weft_channel *ch;
  size_t got;       /* bytes of the current reply / partial message */
  long outstanding; /* echo: messages in flight */
  uint64_t sent;    /* stream: payload bytes written */
  uint64_t units;   /* stream: answers received */
  bool gone;        /* closed (counted in run->closed) */
  bool pumping;     /* stream: in stream_pump */
  bool queued;      /* stream: a stream_pump_task is queued */
} wconn;

struct wrun {
  const point *pt;
  weft_loop *loop;
  const char *uri;
  wconn *c;
  int n;
  uint64_t unit;
  int connected, drained, phase;
  uint64_t warm_end, end, t0, t1;
  uint64_t msgs, units, units0, count;
  uint64_t *rtt;
  long i;
  uint64_t tsend;
  int error;
  /* main thread <-> loop */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int ready;   /* idle: all connected */
  int closed;  /* connections gone */
  int barrier; /* the loop ran every task queued before barrier_task */
};

static void run_signal(wrun *r, int *field, int value) {
  pthread_mutex_lock(&r->mu);
  *field = value;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* Waits until *field >= value; false on timeout. */
static bool run_wait(wrun *r, int *field, int value) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += RUN_TIMEOUT_S;
  bool ok = true;
  pthread_mutex_lock(&r->mu);
  while (*field < value && ok)
    ok = pthread_cond_timedwait(&r->cv, &r->mu, &dl) != ETIMEDOUT;
  pthread_mutex_unlock(&r->mu);
  return ok;
}

static void close_all(wrun *r) {
  for (int i = 0; i < r->n; i++)
    if (!r->c[i].gone && r->c[i].ch != NULL)
      weft_channel_close(r->c[i].ch, WEFT_PROMISE_NONE);
  /* a channel still connecting is closed when its channel_active sees
   * PH_DONE (client_active) */
}

static void close_all_task(void *arg) { close_all(arg); }

static void barrier_task(void *arg) {
  wrun *r = arg;
  run_signal(r, &r->barrier, 1);
}

static void run_fail(wrun *r, int err) {
  if (r->error == 0)
    r->error = err;
  r->phase = PH_DONE;
  close_all(r);
}

static void write_msg(wconn *c) {
  weft_pool *pool = weft_loop_pool(c->run->loop);
  for (size_t off = 0, size = c->run->pt->size; off < size;) {
    size_t k = size - off > CHUNK ? CHUNK : size - off;
    weft_buf *b = weft_buf_alloc(pool, k);
    if (b == NULL) {
      run_fail(c->run, WEFT_ENOMEM);
      return;
    }
    b->writer_index += k;
    weft_ctx_write(c->ctx, b, WEFT_PROMISE_NONE);
    off += k;
  }
}

static void write_hello(wconn *c, uint32_t mode, uint64_t unit) {
  weft_buf *b = weft_buf_alloc(weft_loop_pool(c->run->loop), sizeof(hello));
  if (b == NULL) {
    run_fail(c->run, WEFT_ENOMEM);
    return;
  }
  hello h = {HELLO_MAGIC, mode, unit};
  weft_buf_write_bytes(b, &h, sizeof h);
  weft_ctx_write(c->ctx, b, WEFT_PROMISE_NONE);
}

/* stream: writes while the channel is writable; in the drain phase only up
 * to the end of the current unit. */
static bool stream_wants(const wconn *c) {
  const wrun *r = c->run;
  return !c->gone && r->phase != PH_DONE &&
         (r->phase != PH_DRAIN || c->sent % r->unit != 0);
}

static void stream_pump_task(void *arg);

/* stream: writes while the channel is writable, in the drain phase only up
 * to the end of the current unit. At most PUMP_BUDGET bytes per call, so
 * the loop gets to read the server's answers (which move the phases); if
 * the channel is still writable then, a task continues. */
#define PUMP_BUDGET (4 * CHUNK)
static void stream_pump(wconn *c) {
  wrun *r = c->run;
  if (c->pumping || c->queued)
    return;
  c->pumping = true;
  uint64_t budget = 0;
  while (budget < PUMP_BUDGET && stream_wants(c) &&
         weft_channel_is_writable(c->ch)) {
    while (stream_wants(c) && weft_channel_is_writable(c->ch)) {
      write_msg(c);
      c->sent += r->pt->size;
      budget += r->pt->size;
    }
    weft_ctx_flush(c->ctx);
  }
  c->pumping = false;
  if (stream_wants(c) && weft_channel_is_writable(c->ch)) {
    c->queued = true;
    weft_loop_execute(r->loop, stream_pump_task, c);
  }
}

static void stream_pump_task(void *arg) {
  wconn *c = arg;
  c->queued = false;
  stream_pump(c);
}

static void run_start(wrun *r) {
  uint64_t now = bench_now_ns();
  r->phase = PH_WARM;
  r->warm_end = now + (uint64_t)(O.warm_seconds * 1e9);
  switch (r->pt->pattern) {
  case P_PINGPONG:
    r->i = -r->pt->warm;
    r->tsend = bench_now_ns();
    write_msg(&r->c[0]);
    weft_ctx_flush(r->c[0].ctx);
    break;
  case P_RATE:
  case P_BIDIR:
    for (int i = 0; i < r->n; i++) {
      for (int k = 0; k < r->pt->window; k++)
        write_msg(&r->c[i]);
      r->c[i].outstanding = r->pt->window;
      weft_ctx_flush(r->c[i].ctx);
    }
    break;
  case P_STREAM:
    for (int i = 0; i < r->n; i++)
      stream_pump(&r->c[i]);
    break;
  case P_IDLE:
    run_signal(r, &r->ready, 1);
    break;
  default:
    break;
  }
}

static void client_active(weft_ctx *ctx) {
  wconn *c = weft_ctx_state(ctx);
  wrun *r = c->run;
  c->ctx = ctx;
  /* held until inactive: close_all closes channels outside their own
   * callbacks, where only a reference keeps them alive */
  c->ch = weft_channel_retain(weft_ctx_channel(ctx));
  enum pattern p = r->pt->pattern;
  if (r->phase == PH_DONE) { /* the run failed while this one connected */
    weft_ctx_close(ctx, WEFT_PROMISE_NONE);
    return;
  }
  write_hello(c,
              p == P_STREAM    ? SRV_SINK
              : p == P_CONNECT ? SRV_CLOSE
                               : SRV_ECHO,
              r->unit);
  weft_ctx_flush(ctx);
  if (p != P_CONNECT && ++r->connected == r->n)
    run_start(r);
}

static void pingpong_read(wrun *r, wconn *c, size_t n) {
  c->got += n;
  if (c->got < r->pt->size)
    return;
  c->got = 0;
  uint64_t t = bench_now_ns();
  if (r->i >= 0)
    r->rtt[r->i] = t - r->tsend;
  if (++r->i == r->pt->iters) {
    r->phase = PH_DONE;
    close_all(r);
    return;
  }
  r->tsend = bench_now_ns();
  write_msg(c);
  weft_ctx_flush(c->ctx);
}

static void echo_finish_if_drained(wrun *r) {
  for (int i = 0; i < r->n; i++)
    if (r->c[i].outstanding > 0)
      return;
  r->t1 = bench_now_ns();
  r->phase = PH_DONE;
  close_all(r);
}

static void echo_read(wrun *r, wconn *c, size_t n) {
  c->got += n;
  long k = (long)(c->got / r->pt->size);
  c->got %= r->pt->size;
  c->outstanding -= k;
  uint64_t now = bench_now_ns();
  if (r->phase == PH_WARM && now >= r->warm_end) {
    r->phase = PH_MEASURE;
    r->t0 = now;
    r->end = now + (uint64_t)(O.seconds * 1e9);
  } else if (r->phase >= PH_MEASURE) {
    r->msgs += (uint64_t)k;
  }
  if (r->phase == PH_MEASURE && now >= r->end)
    r->phase = PH_DRAIN;
  if (r->phase == PH_DRAIN) {
    echo_finish_if_drained(r);
    return;
  }
  for (long j = 0; j < k; j++)
    write_msg(c);
  c->outstanding += k;
  if (k > 0)
    weft_ctx_flush(c->ctx);
}

static void stream_read(wrun *r, wconn *c, size_t n) {
  c->units += n;
  r->units += n;
  uint64_t now = bench_now_ns();
  if (r->phase == PH_WARM && now >= r->warm_end) {
    r->phase = PH_MEASURE;
    r->t0 = now;
    r->units0 = r->units;
    r->end = now + (uint64_t)(O.seconds * 1e9);
  } else if (r->phase == PH_MEASURE && now >= r->end) {
    r->phase = PH_DRAIN;
  }
  stream_pump(c);
  if (r->phase != PH_DRAIN)
    return;
  for (int i = 0; i < r->n; i++)
    if (r->c[i].units * r->unit != r->c[i].sent)
      return;
  r->t1 = now;
  r->phase = PH_DONE;
  close_all(r);
}

static void client_read(weft_ctx *ctx, void *msg) {
  wconn *c = weft_ctx_state(ctx);
  wrun *r = c->run;
  size_t n = weft_buf_readable(msg);
  weft_buf_release(msg);
  if (r->phase == PH_DONE)
    return;
  switch (r->pt->pattern) {
  case P_PINGPONG:
    pingpong_read(r, c, n);
    break;
  case P_RATE:
  case P_BIDIR:
    echo_read(r, c, n);
    break;
  case P_STREAM:
    stream_read(r, c, n);
    break;
  default:
    break;
  }
}

static void client_writability(weft_ctx *ctx, bool writable) {
  wconn *c = weft_ctx_state(ctx);
  if (writable && c->run->pt->pattern == P_STREAM)
    stream_pump(c);
}

static void connect_next(wrun *r);

static void release_task(void *arg) { weft_channel_release(arg); }

static void conn_gone(wrun *r, wconn *c) {
  c->gone = true;
  pthread_mutex_lock(&r->mu);
  r->closed++;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void client_inactive(weft_ctx *ctx) {
  wconn *c = weft_ctx_state(ctx);
  wrun *r = c->run;
  if (c->gone)
    return;
  if (c->ch != NULL) {
    /* Released from a task, not here: inactive runs inside
     * weft_channel_close, which still touches the pipeline after the
     * handlers return, so the last reference must outlive that call. */
    weft_loop_execute(r->loop, release_task, c->ch);
    c->ch = NULL;
  }
  if (r->pt->pattern == P_CONNECT && r->phase != PH_DONE) {
    /* one connection set up and torn down: count it, start the next */
    uint64_t now = bench_now_ns();
    if (r->phase == PH_WARM && now >= r->warm_end) {
      r->phase = PH_MEASURE;
      r->t0 = now;
      r->end = now + (uint64_t)(O.seconds * 1e9);
    } else if (r->phase == PH_MEASURE) {
      r->count++;
      if (now >= r->end) {
        r->t1 = now;
        r->phase = PH_DONE;
      }
    }
    if (r->phase != PH_DONE) {
      *c = (wconn){.run = r};
      connect_next(r);
      return;
    }
  } else if (r->phase != PH_DONE && r->pt->pattern != P_IDLE) {
    run_fail(r, WEFT_ECONNRESET); /* the server went away mid-run */
  }
  conn_gone(r, c);
}

static void client_exception(weft_ctx *ctx, int err, const char *reason) {
  fprintf(stderr, "weft-bench: channel error: %s (%s)\n", reason,
          weft_strerror(err));
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static const weft_handler client_handler = {
    .name = "bench-client",
    .channel_active = client_active,
    .channel_inactive = client_inactive,
    .channel_read = client_read,
    .writability_changed = client_writability,
    .exception_caught = client_exception};

static void client_init(weft_channel *ch, void *arg) {
  weft_pipeline_add_last(weft_channel_pipeline(ch), "bench-client",
                         &client_handler, arg);
}

static void on_connect(weft_channel *ch, int status, void *arg) {
  (void)ch;
  wconn *c = arg;
  if (status >= 0)
    return;
  fprintf(stderr, "weft-bench: connect to %s: %s\n", c->run->uri,
          weft_strerror(status));
  run_fail(c->run, status);
  if (!c->gone)
    conn_gone(c->run, c);
}

static int connect_one(wrun *r, wconn *c) {
  weft_bootstrap b = {.loop = r->loop,
                      .connect = r->uri,
                      .init = client_init,
                      .init_arg = c,
                      .on_connect = on_connect,
                      .connect_arg = c};
  weft_channel_config_init(&b.options);
  return weft_bootstrap_connect(&b);
}

static void connect_next(wrun *r) {
  int rc = connect_one(r, &r->c[0]);
  if (rc < 0) {
    run_fail(r, rc);
    conn_gone(r, &r->c[0]);
  }
}

static void connect_start_task(void *arg) {
  wrun *r = arg;
  r->warm_end = bench_now_ns() + (uint64_t)(O.warm_seconds * 1e9);
  r->phase = PH_WARM;
  connect_next(r);
}

static void weft_measure(session *s, const point *pt, result *res) {
  wrun r = {.pt = pt,
            .loop = weft_loop_group_get(s->cg, 0),
            .uri = s->uri,
            .n = pt->pattern == P_CONNECT ? 1 : pt->conns,
            .unit = stream_unit(pt->size ? pt->size : 1),
            .phase = PH_WARM};
  pthread_mutex_init(&r.mu, NULL);
  pthread_cond_init(&r.cv, NULL);
  r.c = calloc((size_t)r.n, sizeof *r.c);
  if (pt->pattern == P_PINGPONG)
    r.rtt = malloc(sizeof *r.rtt * (size_t)pt->iters);
  if (r.c == NULL || (pt->pattern == P_PINGPONG && r.rtt == NULL))
    die("calloc");
  for (int i = 0; i < r.n; i++)
    r.c[i].run = &r;
  if (pt->pattern == P_CONNECT) {
    weft_loop_execute(r.loop, connect_start_task, &r);
  } else {
    for (int i = 0; i < r.n; i++)
      if (connect_one(&r, &r.c[i]) < 0)
        fail("cannot connect to %s", r.uri);
  }
  if (pt->pattern == P_IDLE) {
    if (!run_wait(&r, &r.ready, 1))
      fail("%s: idle connections did not all connect", r.uri);
    measure_idle_cpu(s, res);
    weft_loop_execute(r.loop, close_all_task, &r);
  }
  if (!run_wait(&r, &r.closed, r.n))
    fail("%s: timed out", r.uri);
  /* Tasks run in order: once this one ran, no queued stream_pump_task
   * can touch r any more. */
  weft_loop_execute(r.loop, barrier_task, &r);
  if (!run_wait(&r, &r.barrier, 1))
    fail("%s: the client loop does not run tasks", r.uri);
  if (r.error != 0) {
    fprintf(stderr, "weft-bench: %s %s: %s\n", s->cf->label,
            pattern_names[pt->pattern], weft_strerror(r.error));
    exit(1);
  }
  double secs = (double)(r.t1 - r.t0) / 1e9;
  if (pt->pattern == P_PINGPONG)
    res->has_lat = bench_latency_of(r.rtt, (size_t)pt->iters, &res->lat) == 0;
  else if (pt->pattern == P_RATE || pt->pattern == P_BIDIR) {
    res->msgs_per_s = (double)r.msgs / secs;
    res->mb_per_s = (double)r.msgs * (double)pt->size *
                    (pt->pattern == P_BIDIR ? 2.0 : 1.0) / secs / 1e6;
  } else if (pt->pattern == P_STREAM) {
    double bytes = (double)(r.units - r.units0) * (double)r.unit;
    res->mb_per_s = bytes / secs / 1e6;
    res->msgs_per_s = bytes / (double)pt->size / secs;
  } else if (pt->pattern == P_CONNECT) {
    res->conns_per_s = (double)r.count / secs;
  }
  free(r.rtt);
  free(r.c);
  pthread_cond_destroy(&r.cv);
  pthread_mutex_destroy(&r.mu);
}

/* ---- the run: points x configurations x repetitions ---- */

static long scaled(long n, size_t size, long floor) {
  long v = size > 4096 ? (long)((double)n * 4096.0 / (double)size) : n;
  return v < floor ? floor : v;
}

static int make_points(point *pts, int max) {
  int n = 0;
  for (int p = 0; p < P_N; p++) {
    if (!O.patterns[p])
      continue;
    point base = {.pattern = (enum pattern)p, .conns = 1};
    if (p == P_PINGPONG || p == P_STREAM || p == P_BIDIR) {
      for (int i = 0; i < O.n_sizes && n < max; i++) {
        point q = base;
        q.size = O.sizes[i];
        q.iters = scaled(O.iters, q.size, 200);
        q.warm = scaled(O.warmup, q.size, 20);
        if (p == P_PINGPONG)
          q.window = 1;
        else if (p == P_BIDIR)
          q.window =
              q.size * 2 > BIDIR_INFLIGHT ? 2 : (int)(BIDIR_INFLIGHT / q.size);
        pts[n++] = q;
      }
    } else if (p == P_RATE) {
      for (int i = 0; i < O.n_rates && n < max; i++) {
        point q = base;
        q.size = O.rate_size;
        q.conns = O.rates[i].conns;
        q.window = O.rates[i].window;
        pts[n++] = q;
      }
    } else if (n < max) {
      if (p == P_IDLE)
        base.conns = O.idle_conns;
      pts[n++] = base;
    }
  }
  return n;
}

/* raw-busy with many idle connections would be that many spinning
 * threads: not a floor of anything. */
static bool applies(const bench_config *cf, const point *pt) {
  if (pt->pattern == P_IDLE && cf->raw && cf->busy)
    return false;
  char key[48];
  snprintf(key, sizeof key, "%s:%s", cf->raw ? cf->mode : cf->transport,
           pattern_names[pt->pattern]);
  for (int i = 0; i < O.n_excludes; i++)
    if (strcmp(O.excludes[i], key) == 0)
      return false;
  return true;
}

static void row_init(bench_row *row, const bench_config *cf, const point *pt) {
  memset(row, 0, sizeof *row);
  snprintf(row->config, sizeof row->config, "%s", cf->label);
  snprintf(row->mode, sizeof row->mode, "%s", cf->mode);
  snprintf(row->transport, sizeof row->transport, "%s",
           cf->raw ? "-" : cf->transport);
  row->busy_poll_us = cf->busy_poll_us;
  snprintf(row->pattern, sizeof row->pattern, "%s", pattern_names[pt->pattern]);
  row->size = pt->size;
  row->conns = pt->conns;
  row->window = pt->window;
}

static void row_add(bench_row *row, const result *res) {
  if (res->has_lat)
    bench_row_add_latency(row, &res->lat);
  if (res->msgs_per_s >= 0)
    bench_row_add(row, BENCH_MSGS, res->msgs_per_s);
  if (res->mb_per_s >= 0)
    bench_row_add(row, BENCH_MBPS, res->mb_per_s);
  if (res->conns_per_s >= 0)
    bench_row_add(row, BENCH_CONNS, res->conns_per_s);
  if (res->cpu_pct >= 0)
    bench_row_add(row, BENCH_CPU, res->cpu_pct);
}

static void progress(int done, int total, int rep, const point *pt,
                     const bench_config *cf, uint64_t started) {
  if (!O.progress)
    return;
  double el = (double)(bench_now_ns() - started) / 1e9;
  double eta = done > 0 ? el / done * (total - done) : 0;
  fprintf(stderr,
          "\r[%d/%d] rep %d/%d %-8s %8zu B %-14s %4.0f s, ~%.0f s left ",
          done + 1, total, rep + 1, O.reps, pattern_names[pt->pattern],
          pt->size, cf->label, el, eta);
  fflush(stderr);
}

static void read_load(double v[3]) {
  FILE *f = fopen("/proc/loadavg", "r");
  v[0] = v[1] = v[2] = -1;
  if (f != NULL) {
    if (fscanf(f, "%lf %lf %lf", &v[0], &v[1], &v[2]) != 3)
      v[0] = v[1] = v[2] = -1;
    fclose(f);
  }
}

static void write_outputs(const bench_row *rows, size_t n, bench_meta *meta) {
  if (O.csv != NULL) {
    FILE *f = fopen(O.csv, "w");
    if (f == NULL)
      die(O.csv);
    bench_csv_header(f);
    for (size_t i = 0; i < n; i++)
      bench_csv_row(f, &rows[i]);
    fclose(f);
  }
  if (O.json != NULL) {
    FILE *f = fopen(O.json, "w");
    if (f == NULL)
      die(O.json);
    bench_json(f, meta, rows, n);
    fclose(f);
  }
  FILE *outs[2] = {O.quiet ? NULL : stdout,
                   O.md != NULL ? fopen(O.md, "w") : NULL};
  for (int k = 0; k < 2; k++) {
    if (outs[k] == NULL)
      continue;
    bench_table(outs[k], rows, n);
    fputs("Targets (ratios from this run):\n\n", outs[k]);
    bench_targets(outs[k], rows, n);
    fprintf(outs[k],
            "\nLoad average before: %.2f %.2f %.2f, after: %.2f "
            "%.2f %.2f (%d CPUs).\n",
            meta->load_before[0], meta->load_before[1], meta->load_before[2],
            meta->load_after[0], meta->load_after[1], meta->load_after[2],
            meta->cpus);
    if (k == 1)
      fclose(outs[k]);
  }
}

static void run_client(const char *command) {
  point pts[P_N * MAX_SIZES];
  int np = make_points(pts, (int)(sizeof pts / sizeof pts[0]));
  size_t nrows = (size_t)np * (size_t)O.n_configs;
  bench_row *rows = calloc(nrows, sizeof *rows);
  if (rows == NULL)
    die("calloc");
  for (int p = 0; p < np; p++)
    for (int k = 0; k < O.n_configs; k++)
      row_init(&rows[p * O.n_configs + k], &O.configs[k], &pts[p]);
  bench_meta meta = {.command = command,
                     .cpus = (int)sysconf(_SC_NPROCESSORS_ONLN)};
  char started[32];
  time_t t = time(NULL);
  strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%S%z", localtime(&t));
  meta.started = started;
  read_load(meta.load_before);
  bench_pin_self(0); /* the raw client runs on this thread */
  int total = O.reps * np * O.n_configs, done = 0;
  uint64_t t0 = bench_now_ns();
  for (int rep = 0; rep < O.reps; rep++)
    for (int p = 0; p < np; p++)
      for (int k = 0; k < O.n_configs; k++, done++) {
        bench_config *cf = &O.configs[k];
        if (!applies(cf, &pts[p]))
          continue;
        progress(done, total, rep, &pts[p], cf, t0);
        result res = {
            .msgs_per_s = -1, .mb_per_s = -1, .conns_per_s = -1, .cpu_pct = -1};
        if (cf->raw)
          raw_measure(cf->s, &pts[p], &res);
        else
          weft_measure(cf->s, &pts[p], &res);
        row_add(&rows[p * O.n_configs + k], &res);
      }
  if (O.progress)
    fputc('\n', stderr);
  read_load(meta.load_after);
  /* drop rows of points a configuration does not apply to */
  size_t kept = 0;
  for (size_t i = 0; i < nrows; i++) {
    bench_row_finish(&rows[i]);
    if (applies(&O.configs[i % (size_t)O.n_configs],
                &pts[i / (size_t)O.n_configs]))
      rows[kept++] = rows[i];
  }
  write_outputs(rows, kept, &meta);
  free(rows);
}

static void run_server(void) {
  bench_config *cf = &O.configs[0];
  if (cf->raw)
    printf("weft-bench: %s serving on %s:%u\n", cf->label, O.host,
           (unsigned)ntohs(cf->s->addr.sin_port));
  else
    printf("weft-bench: %s serving on %s\n", cf->label, cf->s->uri);
  fflush(stdout);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig;
  sigwait(&set, &sig);
}

/* ---- command line ---- */

static void usage(void) {
  fputs(
      "usage: weft-bench [options]\n"
      "  -c SPEC         raw-busy | raw-block | TRANSPORT[:BUSY_POLL_US]\n"
      "                  (repeatable; e.g. -c raw-busy -c tcp:20 -c uring:0)\n"
      "  -f FILE         weft config file ([loop] busy_poll_us, [transport])\n"
      "  -p LIST         patterns: pingpong,stream,bidir,rate,connect,idle\n"
      "  -s LIST         sizes, e.g. 16,256,4K,64K,1M (max 16M)\n"
      "  -r N            repetitions (median and min..max reported; 3)\n"
      "  -n N            ping-pong round trips per repetition (20000; fewer\n"
      "                  above 4 KiB, at least 200)\n"
      "  -w N            warm-up round trips (2000, scaled the same)\n"
      "  -t SECONDS      measured time per repetition, other patterns (0.5)\n"
      "  --warm-seconds S   warm-up of the timed patterns (0.1)\n"
      "  --rate LIST     rate points CONNSxWINDOW (1x64,4x16)\n"
      "  --rate-size N   message size of the rate pattern (16)\n"
      "  --idle-conns N  (100)   --idle-seconds S (3)\n"
      "  --role both|server|client   --host ADDR (127.0.0.1)   --port N\n"
      "  --server-pid PID   client role: the server process, for idle CPU\n"
      "  -x TRANSPORT:PATTERN   skip a pattern for a transport (or raw mode)\n"
      "  --csv FILE --json FILE --md FILE   --progress --no-progress -q\n",
      stderr);
  exit(2);
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k')
    v *= 1024, end++;
  else if (*end == 'M' || *end == 'm')
    v *= 1048576, end++;
  if (end == s || *end != '\0' || v < 1 || v > 16 * 1048576.0)
    fail("bad size %s", s);
  return (size_t)v;
}

static void add_config(const char *spec, int default_bp) {
  if (O.n_configs == MAX_CONFIGS)
    fail("too many configurations (at %s)", spec);
  bench_config *cf = &O.configs[O.n_configs++];
  memset(cf, 0, sizeof *cf);
  if (strcmp(spec, "raw-busy") == 0 || strcmp(spec, "raw-block") == 0) {
    cf->raw = true;
    cf->busy = spec[4] == 'b' && spec[5] == 'u';
    cf->busy_poll_us = cf->busy ? -1 : 0;
    snprintf(cf->mode, sizeof cf->mode, "%s", spec);
    snprintf(cf->label, sizeof cf->label, "%s", spec);
    snprintf(cf->transport, sizeof cf->transport, "tcp");
    return;
  }
  const char *colon = strchr(spec, ':');
  size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
  if (len == 0 || len >= sizeof cf->transport)
    fail("bad configuration %s", spec);
  memcpy(cf->transport, spec, len);
  cf->busy_poll_us = colon ? atoi(colon + 1) : default_bp;
  if (cf->busy_poll_us < -1)
    fail("bad busy-poll window in %s", spec);
  snprintf(cf->mode, sizeof cf->mode, "weft");
  snprintf(cf->label, sizeof cf->label, "%s bp=%d", cf->transport,
           cf->busy_poll_us);
}

static void split(const char *list, void (*each)(const char *item)) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save))
    each(tok);
}

static void each_pattern(const char *s) {
  for (int p = 0; p < P_N; p++)
    if (strcmp(s, pattern_names[p]) == 0) {
      O.patterns[p] = true;
      return;
    }
  fail("unknown pattern %s", s);
}

static void each_size(const char *s) {
  if (O.n_sizes == MAX_SIZES)
    fail("too many sizes (at %s)", s);
  O.sizes[O.n_sizes++] = parse_size(s);
}

static void each_rate(const char *s) {
  int c = 0, w = 0;
  if (O.n_rates == MAX_RATES || sscanf(s, "%dx%d", &c, &w) != 2 || c < 1 ||
      w < 1 || c > 1000)
    fail("bad rate point %s (CONNSxWINDOW)", s);
  O.rates[O.n_rates++] = (rate_point){c, w};
}

enum {
  OPT_WARM_SECONDS = 256,
  OPT_RATE,
  OPT_RATE_SIZE,
  OPT_IDLE_CONNS,
  OPT_IDLE_SECONDS,
  OPT_ROLE,
  OPT_HOST,
  OPT_PORT,
  OPT_SERVER_PID,
  OPT_CSV,
  OPT_JSON,
  OPT_MD,
  OPT_PROGRESS,
  OPT_NO_PROGRESS,
};

static const struct option long_opts[] = {
    {"warm-seconds", required_argument, NULL, OPT_WARM_SECONDS},
    {"rate", required_argument, NULL, OPT_RATE},
    {"rate-size", required_argument, NULL, OPT_RATE_SIZE},
    {"idle-conns", required_argument, NULL, OPT_IDLE_CONNS},
    {"idle-seconds", required_argument, NULL, OPT_IDLE_SECONDS},
    {"role", required_argument, NULL, OPT_ROLE},
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"server-pid", required_argument, NULL, OPT_SERVER_PID},
    {"csv", required_argument, NULL, OPT_CSV},
    {"json", required_argument, NULL, OPT_JSON},
    {"md", required_argument, NULL, OPT_MD},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {NULL, 0, NULL, 0}};

static void parse_long(int opt) {
  switch (opt) {
  case OPT_WARM_SECONDS:
    O.warm_seconds = atof(optarg);
    break;
  case OPT_RATE:
    O.n_rates = 0;
    split(optarg, each_rate);
    break;
  case OPT_RATE_SIZE:
    O.rate_size = parse_size(optarg);
    break;
  case OPT_IDLE_CONNS:
    O.idle_conns = atoi(optarg);
    break;
  case OPT_IDLE_SECONDS:
    O.idle_seconds = atof(optarg);
    break;
  case OPT_ROLE:
    O.role = strcmp(optarg, "server") == 0   ? ROLE_SERVER
             : strcmp(optarg, "client") == 0 ? ROLE_CLIENT
             : strcmp(optarg, "both") == 0   ? ROLE_BOTH
                                             : (usage(), ROLE_BOTH);
    break;
  case OPT_HOST:
    snprintf(O.host, sizeof O.host, "%s", optarg);
    break;
  case OPT_PORT:
    O.port = atoi(optarg);
    break;
  case OPT_SERVER_PID:
    O.server_pid = (pid_t)atoi(optarg);
    break;
  case OPT_CSV:
    O.csv = optarg;
    break;
  case OPT_JSON:
    O.json = optarg;
    break;
  case OPT_MD:
    O.md = optarg;
    break;
  case OPT_PROGRESS:
    O.progress = true;
    break;
  case OPT_NO_PROGRESS:
    O.progress = false;
    break;
  default:
    usage();
  }
}

/* The config file and WEFT_* variables: the default transport and window. */
static void load_weft_config(const char *path, weft_config *cfg) {
  char err[512];
  weft_config_init(cfg);
  if ((path != NULL &&
       weft_config_load(cfg, path, NULL, NULL, err, sizeof err) < 0) ||
      weft_config_apply_env(cfg, NULL, NULL, NULL, err, sizeof err) < 0)
    fail("%s", err);
}

static void parse_args(int argc, char **argv, char **specs, int *n_specs,
                       const char **file) {
  int opt;
  while ((opt = getopt_long(argc, argv, "c:f:p:s:r:n:w:t:x:qh", long_opts,
                            NULL)) != -1) {
    switch (opt) {
    case 'c':
      if (*n_specs == MAX_CONFIGS)
        fail("too many configurations (at %s)", optarg);
      specs[(*n_specs)++] = optarg;
      break;
    case 'f':
      *file = optarg;
      break;
    case 'p':
      memset(O.patterns, 0, sizeof O.patterns);
      split(optarg, each_pattern);
      break;
    case 's':
      O.n_sizes = 0;
      split(optarg, each_size);
      break;
    case 'r':
      O.reps = atoi(optarg);
      break;
    case 'n':
      O.iters = atol(optarg);
      break;
    case 'w':
      O.warmup = atol(optarg);
      break;
    case 't':
      O.seconds = atof(optarg);
      break;
    case 'q':
      O.quiet = true;
      break;
    case 'x':
      if (O.n_excludes == MAX_CONFIGS || strchr(optarg, ':') == NULL)
        fail("bad -x %s (TRANSPORT:PATTERN, at most 16)", optarg);
      snprintf(O.excludes[O.n_excludes++], sizeof O.excludes[0], "%s", optarg);
      break;
    case 'h':
      usage();
      break;
    default:
      parse_long(opt);
    }
  }
  if (optind != argc)
    usage();
}

static void set_defaults(void) {
  O.reps = 3;
  O.iters = 20000;
  O.warmup = 2000;
  O.seconds = 0.5;
  O.warm_seconds = 0.1;
  O.rate_size = 16;
  O.idle_conns = 100;
  O.idle_seconds = 3;
  O.progress = isatty(STDERR_FILENO);
  snprintf(O.host, sizeof O.host, "127.0.0.1");
  for (int p = 0; p < P_N; p++)
    O.patterns[p] = true;
  static const size_t sizes[] = {16, 256, 4096, 65536, 1048576};
  O.n_sizes = 5;
  memcpy(O.sizes, sizes, sizeof sizes);
  O.rates[0] = (rate_point){1, 64};
  O.rates[1] = (rate_point){4, 16};
  O.n_rates = 2;
}

static void check_options(void) {
  if (O.reps < 1 || O.reps > BENCH_MAX_REPS || O.iters < 1 || O.warmup < 0 ||
      O.seconds <= 0 || O.warm_seconds < 0 || O.idle_conns < 1 ||
      O.idle_seconds <= 0 || O.port < 0 || O.port > 65535)
    usage();
  if (O.role != ROLE_BOTH && O.n_configs != 1)
    fail("%s", "--role server/client takes exactly one -c configuration");
  if (O.role != ROLE_BOTH && O.port == 0)
    fail("%s", "--role server/client needs --port");
}

static void join_args(int argc, char **argv, char *out, size_t len) {
  size_t off = 0;
  out[0] = '\0';
  for (int i = 0; i < argc && off < len; i++)
    off +=
        (size_t)snprintf(out + off, len - off, "%s%s", i ? " " : "", argv[i]);
}

int main(int argc, char **argv) {
  char command[1024];
  join_args(argc, argv, command, sizeof command);
  set_defaults();
  char *specs[MAX_CONFIGS];
  int n_specs = 0;
  const char *file = NULL;
  parse_args(argc, argv, specs, &n_specs, &file);
  weft_config cfg;
  load_weft_config(file, &cfg);
  for (int i = 0; i < n_specs; i++)
    add_config(specs[i], cfg.loop.busy_poll_us);
  if (n_specs == 0) {
    char spec[40];
    add_config("raw-busy", 0);
    add_config("raw-block", 0);
    snprintf(spec, sizeof spec, "%s:%d", cfg.transport, cfg.loop.busy_poll_us);
    add_config(spec, 0);
    if (cfg.loop.busy_poll_us != 0) {
      snprintf(spec, sizeof spec, "%s:0", cfg.transport);
      add_config(spec, 0);
    }
  }
  check_options();
  signal(SIGPIPE, SIG_IGN);
  if (O.role == ROLE_SERVER) {
    /* sigwait needs the signals blocked in every thread: block first */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
  }
  for (int k = 0; k < O.n_configs; k++)
    session_start(&O.configs[k], k);
  if (O.role == ROLE_SERVER)
    run_server();
  else
    run_client(command);
  for (int k = 0; k < O.n_configs; k++)
    session_stop(&O.configs[k]);
  return 0;
}
