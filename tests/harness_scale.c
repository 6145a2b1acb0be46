/* SPDX-License-Identifier: Apache-2.0 */
/* The many-connections fixtures of harness_scale.h. */
#include "harness_scale.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <weft/buf.h>
#include <weft/channel.h>
#include <weft/error.h>
#include <weft/loop.h>

/* ---- loops, limits, sockets ---- */

weft_loop_group *th_loops_start(const char *name, int n, bool pin) {
  weft_loop_options opts;
  weft_loop_options_init(&opts);
  opts.n_loops = n;
  opts.name = name;
  opts.pin = pin;
  weft_loop_group *g;
  if (weft_loop_group_new(&g, &opts) != 0)
    return NULL;
  if (weft_loop_group_start(g) != 0) {
    weft_loop_group_free(g);
    return NULL;
  }
  return g;
}

int th_raise_fd_limit(rlim_t want, rlim_t *hard) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return -1;
  *hard = rl.rlim_max;
  if (rl.rlim_cur >= want)
    return 0;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
    return -1;
  rl.rlim_cur = want;
  return setrlimit(RLIMIT_NOFILE, &rl);
}

int th_set_fd_limit(rlim_t cur) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return -1;
  rl.rlim_cur = cur;
  return setrlimit(RLIMIT_NOFILE, &rl) == 0 ? 0 : -1;
}

uint16_t th_uri_port(const char *uri) {
  const char *colon = strrchr(uri, ':');
  return colon != NULL ? (uint16_t)atoi(colon + 1) : 0;
}

int th_connect_timeout(uint16_t port, unsigned timeout_ms) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  struct timeval tv = {.tv_sec = timeout_ms / 1000,
                       .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&sin, sizeof sin) < 0) {
    int err = -errno;
    close(fd);
    return err;
  }
  return fd;
}

int th_raw_connect(uint16_t port) {
  int fd = th_connect_timeout(port, 20000);
  ck_assert_msg(fd >= 0, "connect to 127.0.0.1:%u: %s", port, strerror(-fd));
  return fd;
}

int th_listen_loopback(int backlog, uint16_t *port) {
  int fd = th_bind_loopback(port);
  ck_assert_int_eq(listen(fd, backlog), 0);
  return fd;
}

/* Writes back what arrives... */
static void batch_echo_read(weft_ctx *ctx, void *msg) {
  weft_ctx_write(ctx, msg, WEFT_PROMISE_NONE);
}

/* ...and flushes it once per batch. */
static void batch_echo_read_complete(weft_ctx *ctx) { weft_ctx_flush(ctx); }

void th_close_on_exception(weft_ctx *ctx, int err, const char *reason) {
  (void)err;
  (void)reason;
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static const weft_handler batch_echo_handler = {
    .name = "echo",
    .channel_read = batch_echo_read,
    .channel_read_complete = batch_echo_read_complete,
    .exception_caught = th_close_on_exception};

void th_batch_echo_init(weft_channel *ch, void *arg) {
  (void)arg;
  weft_pipeline_add_last(weft_channel_pipeline(ch), "echo", &batch_echo_handler,
                         NULL);
}

/* ---- a server in a child process ---- */

void th_child_start(th_child *c, void (*serve)(int in, int out)) {
  int to[2], from[2];
  ck_assert_int_eq(pipe(to), 0);
  ck_assert_int_eq(pipe(from), 0);
  c->pid = fork();
  ck_assert_int_ge(c->pid, 0);
  if (c->pid == 0) {
    close(to[1]);
    close(from[0]);
    serve(to[0], from[1]);
    _exit(1); /* serve does not return */
  }
  close(to[0]);
  close(from[1]);
  c->to = to[1];
  c->from = from[0];
  ssize_t got = read(c->from, c->uri, sizeof c->uri - 1);
  ck_assert_msg(got > 0, "the server did not start");
  c->uri[got] = '\0';
}

void th_child_finish(th_child *c) {
  close(c->to); /* the server stops */
  int st = 0;
  ck_assert_int_eq(waitpid(c->pid, &st, 0), c->pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "the server process ended with status 0x%x", st);
  close(c->from);
}

void th_child_log_to(const char *path) {
  int fd = open(path, O_WRONLY | O_APPEND);
  if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0)
    _exit(6);
  close(fd);
}

void th_child_print_log(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return;
  char line[512];
  while (fgets(line, sizeof line, f) != NULL)
    fprintf(stderr, "server: %s", line);
  fclose(f);
}

bool th_child_aborted_with(th_child *c, const char *log, const char *needle) {
  int st = 0;
  for (int i = 0; waitpid(c->pid, &st, WNOHANG) != c->pid; i++) {
    if (i == 1000)
      return false; /* still running: not an abort */
    th_sleep_ms(10);
  }
  if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT)
    return false;
  FILE *f = fopen(log, "r");
  if (f == NULL)
    return false;
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, f) != NULL)
    found = strstr(line, needle) != NULL;
  fclose(f);
  return found;
}

weft_server *th_child_bind(weft_loop_group *g, const char *listen,
                           weft_channel_init_cb init, int backlog) {
  weft_server_bootstrap sb = {
      .group = g, .listen = listen, .child_init = init, .backlog = backlog};
  weft_channel_config_init(&sb.child_options);
  weft_server *srv;
  return weft_server_bind(&srv, &sb) == 0 ? srv : NULL;
}

/* Room for the line of TH_CHILD_COUNTERS_MAX counters: 20 digits and a
 * sign or separator each, the '\n' and the NUL. */
#define COUNTERS_LINE (TH_CHILD_COUNTERS_MAX * 21 + 2)

/* The child's answer to one query: the line of `counters` on `out`, in
 * one write so that it arrives whole (under PIPE_BUF). */
static void answer_query(int out, th_child_counters_cb counters) {
  long long v[TH_CHILD_COUNTERS_MAX];
  int n = counters(v);
  if (n < 0 || n > TH_CHILD_COUNTERS_MAX)
    _exit(4);
  char line[COUNTERS_LINE];
  int len = 0;
  for (int i = 0; i < n; i++)
    len += snprintf(line + len, sizeof line - (size_t)len, "%s%lld",
                    i > 0 ? " " : "", v[i]);
  line[len++] = '\n';
  if (write(out, line, (size_t)len) != len)
    _exit(4);
}

_Noreturn void th_child_serve(weft_loop_group *g, weft_server *srv, int in,
                              int out, th_child_counters_cb counters) {
  char uri[300];
  if (weft_server_address(srv, uri, sizeof uri) != 0 ||
      write(out, uri, strlen(uri)) != (ssize_t)strlen(uri))
    _exit(4);
  char c;
  while (read(in, &c, 1) > 0)
    if (counters != NULL)
      answer_query(out, counters);
  weft_server_close(srv);
  weft_loop_group_stop(g);
  int rc = weft_loop_group_join(g);
  weft_loop_group_free(g);
  _exit(rc == 0 ? 0 : 5);
}

/* Reads from `fd` into `line` (`size` bytes with the NUL) until a '\n',
 * waiting at most TH_CHILD_QUERY_MS in all: the line's length without the
 * NUL, or -1 on EOF, an error, the cap or a line too long. */
static int read_answer(int fd, char *line, size_t size) {
  uint64_t deadline = th_now_ms() + TH_CHILD_QUERY_MS;
  size_t len = 0;
  while (len == 0 || line[len - 1] != '\n') {
    uint64_t now = th_now_ms();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (now >= deadline || len + 1 >= size)
      return -1;
    int ready = poll(&p, 1, (int)(deadline - now));
    if (ready < 0 && errno == EINTR)
      continue; /* the deadline still holds */
    if (ready <= 0)
      return -1;
    ssize_t got = read(fd, line + len, size - 1 - len);
    if (got <= 0)
      return -1;
    len += (size_t)got;
  }
  line[len] = '\0';
  return (int)len;
}

bool th_child_query(th_child *c, long long *v, int n) {
  if (n < 1 || n > TH_CHILD_COUNTERS_MAX || write(c->to, "q", 1) != 1)
    return false;
  char line[COUNTERS_LINE];
  if (read_answer(c->from, line, sizeof line) < 0)
    return false;
  char *p = line;
  for (int i = 0; i < n; i++) {
    char *end;
    errno = 0;
    v[i] = strtoll(p, &end, 10);
    if (end == p || errno != 0 || *end != (i + 1 < n ? ' ' : '\n'))
      return false; /* not a number, or more or fewer than n of them */
    p = end + 1;
  }
  return true;
}

_Noreturn void th_child_echo_server(const char *name, int n_loops,
                                    const char *listen,
                                    weft_channel_init_cb init, int backlog,
                                    int in, int out) {
  weft_loop_group *g = th_loops_start(name, n_loops, false);
  if (g == NULL)
    _exit(2);
  weft_server *srv = th_child_bind(g, listen, init, backlog);
  if (srv == NULL)
    _exit(3);
  th_child_serve(g, srv, in, out, NULL);
}

/* ---- a fleet of echoing clients ---- */

uint8_t th_pattern(long long i) { return (uint8_t)(i * 31 + (i >> 9)); }

/* Writes one TH_MSG-byte message of `c`'s tag. Loop thread. */
static void send_msg(th_client *c) {
  if (c->ch == NULL)
    return;
  weft_buf *b =
      weft_buf_alloc(weft_loop_pool(weft_channel_loop(c->ch)), TH_MSG);
  if (b == NULL)
    return;
  memset(b->base, c->tag, TH_MSG);
  b->writer_index = TH_MSG;
  weft_channel_write_and_flush(c->ch, b, WEFT_PROMISE_NONE);
}

void th_client_send_task(void *arg) { send_msg(arg); }

void th_client_close_task(void *arg) {
  th_client *c = arg;
  if (c->ch != NULL)
    weft_channel_close(c->ch, WEFT_PROMISE_NONE);
}

static void written(void *arg, int status) {
  if (status == 0)
    atomic_fetch_add(&((th_client *)arg)->posted, 1);
}

/* Writes `c->count` messages of `c->size` bytes at once, each flushed. */
static void send_all(th_client *c) {
  weft_pool *pool = weft_loop_pool(weft_channel_loop(c->ch));
  for (int m = 0; m < c->count; m++) {
    weft_buf *b = weft_buf_alloc(pool, (size_t)c->size);
    ck_assert_ptr_nonnull(b);
    for (int i = 0; i < c->size; i++)
      b->base[i] =
          c->patterned ? th_pattern((long long)m * c->size + i) : c->tag;
    b->writer_index = (size_t)c->size;
    weft_channel_write_and_flush(c->ch, b, (weft_promise){written, c});
  }
}

static void client_active(weft_ctx *ctx) {
  th_client *c = weft_ctx_state(ctx);
  c->ch = weft_ctx_channel(ctx);
  if (c->count > 0)
    send_all(c);
  else if (c->pingpong)
    send_msg(c);
}

static void client_read(weft_ctx *ctx, void *msg) {
  th_client *c = weft_ctx_state(ctx);
  weft_buf *b = msg;
  size_t n = weft_buf_readable(b);
  for (size_t i = 0; i < n; i++)
    if (weft_buf_rptr(b)[i] !=
        (c->patterned ? th_pattern(c->offset + (long long)i) : c->tag))
      atomic_store(&c->bad, 1);
  c->offset += (long long)n;
  weft_buf_release(b);
  atomic_fetch_add(&c->echoed, (long long)n);
  for (c->partial += (long long)n; c->partial >= TH_MSG; c->partial -= TH_MSG) {
    atomic_fetch_add(&c->rounds, 1);
    if (c->pingpong && atomic_load(&c->fl->run))
      send_msg(c);
  }
}

static void client_exception(weft_ctx *ctx, int err, const char *reason) {
  th_client *c = weft_ctx_state(ctx);
  fprintf(stderr, "client %u: %s: %s\n", c->tag, weft_err_name(err), reason);
  atomic_fetch_add(&c->exceptions, 1);
  weft_ctx_close(ctx, WEFT_PROMISE_NONE);
}

static void client_inactive(weft_ctx *ctx) {
  ((th_client *)weft_ctx_state(ctx))->ch = NULL;
}

static const weft_handler client_handler = {.name = "client",
                                            .channel_active = client_active,
                                            .channel_read = client_read,
                                            .channel_inactive = client_inactive,
                                            .exception_caught =
                                                client_exception};

void th_client_init(weft_channel *ch, void *arg) {
  th_add_last(ch, "client", &client_handler, arg);
}

static void client_connected(weft_channel *ch, int status, void *arg) {
  (void)ch;
  th_client *c = arg;
  atomic_store(&c->status, status);
  atomic_fetch_add(&c->fl->settled, 1);
}

void th_client_connect(th_client *c, const char *uri,
                       weft_channel_init_cb init) {
  atomic_init(&c->status, 1);
  weft_bootstrap b =
      th_bootstrap(NULL, weft_loop_group_get(c->fl->g, 0), uri, init, c);
  b.on_connect = client_connected;
  b.connect_arg = c;
  b.options.connect_timeout_ms = 60000; /* a crowd of handshakes */
  ck_assert_int_eq(weft_bootstrap_connect(&b), 0);
}

int th_fleet_connect_count(th_fleet *fl, th_client *cs, int n, const char *uri,
                           int inflight, void (*first)(void *arg), void *arg) {
  for (int i = 0; i < n; i++) {
    cs[i].fl = fl;
    cs[i].tag = (uint8_t)(i * 7 + 1);
    while (i - atomic_load(&fl->settled) >= inflight)
      th_sleep_ms(1);
    th_client_connect(&cs[i], uri, th_client_init);
    if (i == 0 && first != NULL) {
      ASSERT_EVENTUALLY(atomic_load(&fl->settled) == 1, 60000);
      th_sleep_ms(200);
      first(arg);
    }
  }
  ASSERT_EVENTUALLY(atomic_load(&fl->settled) == n, 180000);
  int failed = 0;
  for (int i = 0; i < n; i++)
    if (atomic_load(&cs[i].status) != 0 && failed++ == 0)
      fprintf(stderr, "client %d: connect failed: %s\n", i,
              weft_err_name(atomic_load(&cs[i].status)));
  return failed;
}

void th_fleet_connect(th_fleet *fl, th_client *cs, int n, const char *uri,
                      int inflight, void (*first)(void *arg), void *arg) {
  int failed = th_fleet_connect_count(fl, cs, n, uri, inflight, first, arg);
  ck_assert_msg(failed == 0, "%d of %d connects failed", failed, n);
}

void th_fleet_echo_round(th_fleet *fl, th_client *cs, int n, long long want,
                         unsigned max_ms) {
  weft_loop *loop = weft_loop_group_get(fl->g, 0);
  for (int i = 0; i < n; i++)
    ck_assert_int_eq(weft_loop_execute(loop, th_client_send_task, &cs[i]), 0);
  uint64_t deadline = th_now_ms() + max_ms;
  int done = 0;
  while (th_now_ms() < deadline) {
    done = 0;
    for (int i = 0; i < n; i++)
      done += atomic_load(&cs[i].echoed) >= want;
    if (done == n)
      break;
    th_sleep_ms(20);
  }
  ck_assert_msg(done == n, "%d of %d clients got their echo", done, n);
}

void th_fleet_assert_clean(th_client *cs, int n) {
  for (int i = 0; i < n; i++) {
    ck_assert_int_eq(atomic_load(&cs[i].bad), 0);
    ck_assert_int_eq(atomic_load(&cs[i].exceptions), 0);
  }
}

void th_fleet_stop(th_fleet *fl) {
  weft_loop_group_stop(fl->g);
  ck_assert_int_eq(weft_loop_group_join(fl->g), 0);
  weft_loop_group_free(fl->g);
  fl->g = NULL;
}
