/* SPDX-License-Identifier: Apache-2.0 */
/* MIGRATE (samples/kv/cluster_migrate.c, migrate_conn.c) against targets
 * the test controls: a listening socket that accepts and never answers
 * (every loop of the source keeps serving meanwhile, and new connections
 * are accepted), one that answers like an HTTP server (the key stays),
 * one whose answer the test holds while another client rewrites the key
 * (it is not deleted); the timeout's cap; the default allow-list, the
 * refusal of AUTH in clear, of host names and of MIGRATE inside MULTI; and
 * a real second weft node, plaintext and over TLS; a key whose TTL runs
 * out between the readings of its value and of its TTL (a stepped store
 * clock), for MIGRATE and for COPY. RESP over plain sockets, so the TCP
 * transports only. */
#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <weft/config.h>
#include <weft/error.h>
#include <weft/loop.h>
#include <weft/transport_plugin.h>

#include "server.h"

#define LONG_WAIT_MS 60000 /* a reply that never comes fails the test */

/* ---- servers ---- */

typedef struct node {
  kv_server *srv;
  int port;      /* RESP's (or RESP over TLS's) */
  int resp_port; /* plaintext RESP's */
} node;

static weft_loop_group *group_start(void) {
  weft_loop_options lo;
  weft_loop_options_init(&lo);
  lo.n_loops = 2; /* a loop besides the MIGRATE's, which must not wait */
  lo.busy_poll_us = 0;
  lo.pin = false;
  weft_loop_group *g;
  ck_assert_int_eq(weft_loop_group_new(&g, &lo), 0);
  ck_assert_int_eq(weft_loop_group_start(g), 0);
  return g;
}

/* Options for a RESP-only server on 127.0.0.1, port 0. */
static void options(kv_server_options *o) {
  kv_server_options_init(o);
  o->rpc_listen[0] = '\0';
  strcpy(o->resp_listen, "127.0.0.1:0");
}

static void node_start(node *n, weft_loop_group *g, const kv_server_options *o,
                       int listener) {
  weft_config cfg;
  weft_config_init(&cfg);
  snprintf(cfg.transport, sizeof cfg.transport, "%s", th_transport_name());
  ck_assert_int_eq(kv_server_bind(&n->srv, g, &cfg, o), 0);
  char uri[WEFT_CONFIG_URI_MAX + 32];
  ck_assert_int_eq(kv_server_address(n->srv, listener, uri, sizeof uri), 0);
  n->port = atoi(strrchr(uri, ':') + 1);
  ck_assert_int_eq(kv_server_address(n->srv, KV_LISTENER_RESP, uri, sizeof uri),
                   0);
  n->resp_port = atoi(strrchr(uri, ':') + 1);
}

/* The loops first (the servers' channels close with them), then the
 * servers, as server.h says. */
static void stop_all(weft_loop_group *g, node *nodes, size_t n) {
  weft_loop_group_stop(g);
  ck_assert_int_eq(weft_loop_group_join(g), 0);
  for (size_t i = 0; i < n; i++)
    kv_server_close(nodes[i].srv);
  weft_loop_group_free(g);
}

/* ---- clients and fake targets: plain sockets ---- */

typedef struct peer {
  int fd;
  size_t len, off;
  char buf[4096];
} peer;

static void peer_open(peer *p, int port) {
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ck_assert_int_ge(p->fd, 0);
  ck_assert_int_eq(connect(p->fd, (struct sockaddr *)&sin, sizeof sin), 0);
  struct timeval tv = {.tv_sec = LONG_WAIT_MS / 1000};
  setsockopt(p->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  p->len = p->off = 0;
}

/* Sends an inline command (printf-style, CRLF added). */
static void peer_send(peer *p, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 2, fmt, ap);
  va_end(ap);
  memcpy(line + n, "\r\n", 2);
  th_write_all(p->fd, line, (size_t)n + 2);
}

/* The next line without CRLF; fails the test on a close or LONG_WAIT_MS
 * without one. */
static void peer_line(peer *p, char *line, size_t cap) {
  size_t n = 0;
  for (;;) {
    if (p->off == p->len) {
      ssize_t r = recv(p->fd, p->buf, sizeof p->buf, 0);
      ck_assert_msg(r > 0, "no reply line: %s",
                    r == 0 ? "closed" : strerror(errno));
      p->len = (size_t)r;
      p->off = 0;
    }
    char c = p->buf[p->off++];
    if (c == '\n' && n > 0 && line[n - 1] == '\r') {
      line[n - 1] = '\0';
      return;
    }
    ck_assert_uint_lt(n + 1, cap);
    line[n++] = c;
  }
}

/* Asserts the next reply line is `want`. */
static void peer_expect(peer *p, const char *want) {
  char line[1024];
  peer_line(p, line, sizeof line);
  ck_assert_str_eq(line, want);
}

/* Asserts the next reply line starts with `prefix`. */
static void peer_expect_prefix(peer *p, const char *prefix) {
  char line[1024];
  peer_line(p, line, sizeof line);
  ck_assert_msg(strncmp(line, prefix, strlen(prefix)) == 0,
                "reply '%s', want '%s...'", line, prefix);
}

/* True when a reply byte waits to be read (without waiting). */
static bool peer_has_reply(peer *p) {
  struct pollfd pfd = {.fd = p->fd, .events = POLLIN};
  return p->off < p->len || poll(&pfd, 1, 0) == 1;
}

static void peer_close(peer *p) { close(p->fd); }

/* A target: a socket listening on 127.0.0.1 (accepts are the kernel's:
 * a connect completes without the test doing anything). */
static int target_listen(int *port) {
  uint16_t p;
  int fd = th_bind_loopback(&p);
  ck_assert_int_eq(listen(fd, 16), 0);
  *port = p;
  return fd;
}

/* The next connection to the target, within LONG_WAIT_MS. */
static int target_accept(int lfd) {
  struct pollfd pfd = {.fd = lfd, .events = POLLIN};
  ck_assert_msg(poll(&pfd, 1, LONG_WAIT_MS) == 1, "MIGRATE never connected");
  int fd = accept(lfd, NULL, NULL);
  ck_assert_int_ge(fd, 0);
  return fd;
}

/* Reads from an accepted target connection into `got` (`cap` bytes, NUL
 * terminated) until `needle` came (the source's commands), within
 * LONG_WAIT_MS. */
static void target_read_until(int fd, const char *needle, char *got,
                              size_t cap) {
  size_t n = 0;
  uint64_t end = th_now_ms() + LONG_WAIT_MS;
  while (th_now_ms() < end) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 100) != 1)
      continue;
    ssize_t r = recv(fd, got + n, cap - 1 - n, 0);
    ck_assert_int_gt(r, 0);
    n += (size_t)r;
    got[n] = '\0';
    if (memmem(got, n, needle, strlen(needle)) != NULL)
      return;
  }
  ck_abort_msg("the target never received '%s'", needle);
}

static void target_wait_for(int fd, const char *needle) {
  char got[8192];
  target_read_until(fd, needle, got, sizeof got);
}

/* Options of node a of a cluster config that also lists node b at
 * 127.0.0.1:`b_port` (a serves every slot; its own port is not used). */
static void cluster_options(kv_server_options *o, int b_port) {
  options(o);
  char line[128], err[256];
  snprintf(line, sizeof line, "b 127.0.0.1:%d", b_port);
  const char *kv[][2] = {{"enabled", "yes"},
                         {"myself", "a"},
                         {"node", "a 127.0.0.1:1 slots=0-16383"},
                         {"node", line}};
  for (size_t i = 0; i < 4; i++)
    ck_assert_msg(kv_server_config_section(o, "cluster", kv[i][0], kv[i][1],
                                           err, sizeof err) == 0,
                  "%s", err);
}

/* A source with a fake target: the group, the source (MIGRATE may reach
 * any host, or, with `cluster`, node b of its cluster config, which is the
 * target), a socket listening for the target, and the MIGRATE's client
 * `a` with k = v set. */
typedef struct fixture {
  weft_loop_group *g;
  node src;
  int lfd, tport;
  peer a;
} fixture;

/* `cap_ms` 0 keeps the default cap. */
static void fixture_start(fixture *f, unsigned cap_ms, bool cluster) {
  f->g = group_start();
  f->lfd = target_listen(&f->tport);
  kv_server_options o;
  if (cluster) {
    cluster_options(&o, f->tport);
  } else {
    options(&o);
    o.migrate_any_host = true;
  }
  if (cap_ms > 0)
    o.migrate_timeout_max_ms = cap_ms;
  node_start(&f->src, f->g, &o, KV_LISTENER_RESP);
  peer_open(&f->a, f->src.port);
  peer_send(&f->a, "SET k v");
  peer_expect(&f->a, "+OK");
}

static void fixture_stop(fixture *f) {
  peer_close(&f->a);
  close(f->lfd);
  stop_all(f->g, &f->src, 1);
}

/* ---- the tests ---- */

/* A target that accepts and never answers: while the MIGRATE waits (its
 * reply not come), PING answers on two more connections, which round-robin
 * puts on both loops (one of them the MIGRATE's), and on a connection made
 * meanwhile. Then the target goes: IOERR, and the key stays. Before the
 * fix the MIGRATE's loop blocked in poll() with the key's stripe locked:
 * the PING on it came after the MIGRATE's reply. */
START_TEST(kv_migrate_silent_target_blocks_no_loop) {
  fixture f;
  fixture_start(&f, 0, false);
  peer b, c, d;
  peer_open(&b, f.src.port);
  peer_open(&c, f.src.port);
  peer_send(&f.a, "MIGRATE 127.0.0.1 %d k 0 8000", f.tport);
  int t = target_accept(f.lfd); /* the MIGRATE is waiting now */
  target_wait_for(t, "RESTORE-ASKING");
  peer_send(&b, "PING");
  peer_send(&c, "GET k"); /* the key's stripe is not held either */
  peer_expect(&b, "+PONG");
  peer_expect(&c, "$1");
  peer_expect(&c, "v");
  peer_open(&d, f.src.port);
  peer_send(&d, "PING");
  peer_expect(&d, "+PONG");
  ck_assert_msg(!peer_has_reply(&f.a), "MIGRATE answered before the PINGs");
  close(t); /* the target goes without answering */
  peer_expect_prefix(&f.a, "-IOERR");
  peer_send(&f.a, "GET k");
  peer_expect(&f.a, "$1");
  peer_expect(&f.a, "v");
  peer_close(&b), peer_close(&c), peer_close(&d);
  fixture_stop(&f);
}
END_TEST

/* MIGRATE's timeout is clamped to [kv] migrate_timeout_max_ms: with a cap
 * of 200 ms, a timeout of 10 minutes to a silent target fails in well
 * under a minute (before the fix it waited the 10 minutes). */
START_TEST(kv_migrate_timeout_clamped_to_cap) {
  fixture f;
  fixture_start(&f, 200, false);
  uint64_t t0 = th_now_ms();
  peer_send(&f.a, "MIGRATE 127.0.0.1 %d k 0 600000", f.tport);
  peer_expect_prefix(&f.a, "-IOERR");
  ck_assert_uint_lt(th_now_ms() - t0, LONG_WAIT_MS);
  peer_send(&f.a, "EXISTS k");
  peer_expect(&f.a, ":1");
  fixture_stop(&f);
}
END_TEST

/* By default MIGRATE reaches only the [cluster] node lines: a standalone
 * server refuses every target, with the setting to change; a host name is
 * refused (no DNS on a loop); AUTH goes in clear to no other host than
 * loopback; MIGRATE inside MULTI fails the transaction. No connect is
 * made for any of them. */
START_TEST(kv_migrate_refusals_are_clear_errors) {
  weft_loop_group *g = group_start();
  node n[2];
  kv_server_options o;
  options(&o);
  node_start(&n[0], g, &o, KV_LISTENER_RESP);
  o.migrate_any_host = true;
  node_start(&n[1], g, &o, KV_LISTENER_RESP);
  int tport, lfd = target_listen(&tport);
  peer a, b;
  peer_open(&a, n[0].port);
  peer_open(&b, n[1].port);
  peer_send(&a, "SET k v");
  peer_expect(&a, "+OK");
  peer_send(&a, "MIGRATE 127.0.0.1 %d k 0 1000", tport);
  peer_expect_prefix(&a, "-ERR MIGRATE target 127.0.0.1:");
  peer_send(&b, "SET k v");
  peer_expect(&b, "+OK");
  peer_send(&b, "MIGRATE localhost %d k 0 1000", tport);
  peer_expect_prefix(&b, "-ERR MIGRATE needs a numeric IP address");
  peer_send(&b, "MIGRATE 192.0.2.1 %d k 0 1000 AUTH pw", tport);
  peer_expect_prefix(&b, "-ERR MIGRATE sends AUTH only over TLS");
  peer_send(&b, "MULTI");
  peer_expect(&b, "+OK");
  peer_send(&b, "MIGRATE 127.0.0.1 %d k 0 1000", tport);
  peer_expect_prefix(&b, "-ERR MIGRATE is not allowed inside MULTI");
  peer_send(&b, "EXEC");
  peer_expect_prefix(&b, "-EXECABORT");
  struct pollfd pfd = {.fd = lfd, .events = POLLIN};
  ck_assert_int_eq(poll(&pfd, 1, 0), 0); /* nothing connected */
  peer_send(&a, "GET k");
  peer_expect(&a, "$1");
  peer_close(&a), peer_close(&b);
  close(lfd);
  stop_all(g, n, 2);
}
END_TEST

/* A target that answers what is not RESP (an HTTP server's 400) fails
 * the MIGRATE and the key stays. Before the fix any line not starting with
 * '-' counted as the key taken, and it was deleted. */
START_TEST(kv_migrate_non_resp_reply_keeps_key) {
  fixture f;
  fixture_start(&f, 0, false);
  peer_send(&f.a, "MIGRATE 127.0.0.1 %d k 0 8000", f.tport);
  int t = target_accept(f.lfd);
  target_wait_for(t, "RESTORE-ASKING");
  static const char http[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: "
                             "0\r\nConnection: close\r\n\r\n";
  th_write_all(t, http, sizeof http - 1);
  peer_expect_prefix(&f.a, "-IOERR target instance sent a reply that is not "
                           "RESP");
  peer_send(&f.a, "GET k");
  peer_expect(&f.a, "$1");
  peer_expect(&f.a, "v");
  close(t);
  fixture_stop(&f);
}
END_TEST

/* A key written while its MIGRATE waits for the target is not deleted
 * when the target then takes the old value; an untouched key of the same
 * MIGRATE is. Before the fix the write waited for the MIGRATE (the
 * stripe was locked across the round trip), so it never answered while
 * the target held its reply. */
START_TEST(kv_migrate_key_changed_meanwhile_not_deleted) {
  fixture f;
  fixture_start(&f, 0, false);
  peer b;
  peer_open(&b, f.src.port);
  peer_send(&f.a, "MSET k v other w");
  peer_expect(&f.a, "+OK");
  char cmd[160], port[8];
  int pl = snprintf(port, sizeof port, "%d", f.tport);
  int len = snprintf(cmd, sizeof cmd,
                     "*9\r\n$7\r\nMIGRATE\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n"
                     "$0\r\n\r\n$1\r\n0\r\n$4\r\n8000\r\n$4\r\nKEYS\r\n"
                     "$1\r\nk\r\n$5\r\nother\r\n",
                     pl, port);
  th_write_all(f.a.fd, cmd, (size_t)len);
  int t = target_accept(f.lfd);
  target_wait_for(t, "other");
  peer_send(&b, "SET k changed");
  peer_expect(&b, "+OK");
  th_write_all(t, "+OK\r\n+OK\r\n", 10);
  peer_expect(&f.a, "+OK");
  peer_send(&f.a, "GET k");
  peer_expect(&f.a, "$7");
  peer_expect(&f.a, "changed");
  peer_send(&f.a, "EXISTS other");
  peer_expect(&f.a, ":0");
  close(t);
  peer_close(&b);
  fixture_stop(&f);
}
END_TEST

/* MIGRATE to a real weft node of the cluster config (no migrate_any_host):
 * the key moves with its TTL, COPY keeps it, BUSYKEY without REPLACE, and
 * a command pipelined after MIGRATE in the same write answers after it and
 * sees its effect. */
START_TEST(kv_migrate_to_weft_node) {
  weft_loop_group *g = group_start();
  node n[2];
  kv_server_options o;
  options(&o);
  node_start(&n[1], g, &o, KV_LISTENER_RESP); /* the target */
  cluster_options(&o, n[1].port);
  node_start(&n[0], g, &o, KV_LISTENER_RESP);
  peer a, b;
  peer_open(&a, n[0].port);
  peer_open(&b, n[1].port);
  peer_send(&a, "SET k v PX 600000");
  peer_expect(&a, "+OK");
  peer_send(&a, "SET c w");
  peer_expect(&a, "+OK");
  char both[256];
  int len =
      snprintf(both, sizeof both,
               "MIGRATE 127.0.0.1 %d k 0 8000\r\nEXISTS k\r\n", n[1].port);
  th_write_all(a.fd, both, (size_t)len);
  peer_expect(&a, "+OK");
  peer_expect(&a, ":0");
  /* More than a batch (16) pipelined behind it: held, then run in order
   * once it answered (the decoder's rest after the channel reads again). */
  char many[2048];
  len = snprintf(many, sizeof many, "MIGRATE 127.0.0.1 %d c 0 8000 COPY\r\n",
                 n[1].port);
  for (int i = 0; i < 40; i++)
    len += snprintf(many + len, sizeof many - (size_t)len, "INCR n\r\n");
  th_write_all(a.fd, many, (size_t)len);
  peer_expect(&a, "+OK");
  for (int i = 1; i <= 40; i++) {
    char want[8];
    snprintf(want, sizeof want, ":%d", i);
    peer_expect(&a, want);
  }
  peer_send(&b, "DEL c");
  peer_expect(&b, ":1");
  peer_send(&b, "GET k");
  peer_expect(&b, "$1");
  peer_expect(&b, "v");
  peer_send(&b, "PTTL k");
  char line[64];
  peer_line(&b, line, sizeof line);
  ck_assert_msg(line[0] == ':' && atol(line + 1) > 500000, "PTTL %s", line);
  peer_send(&a, "MIGRATE 127.0.0.1 %d c 0 8000 COPY", n[1].port);
  peer_expect(&a, "+OK");
  peer_send(&a, "MIGRATE 127.0.0.1 %d c 0 8000", n[1].port);
  peer_expect_prefix(&a, "-ERR Target instance replied with error: BUSYKEY");
  peer_send(&a, "MIGRATE 127.0.0.1 %d c 0 8000 REPLACE", n[1].port);
  peer_expect(&a, "+OK");
  peer_send(&a, "MIGRATE 127.0.0.1 %d c 0 8000", n[1].port);
  peer_expect(&a, "+NOKEY");
  peer_send(&b, "GET c");
  peer_expect(&b, "$1");
  peer_expect(&b, "w");
  peer_close(&a), peer_close(&b);
  stop_all(g, n, 2);
}
END_TEST

/* In cluster mode, while the key's slot is marked MIGRATING, a write to a
 * key in flight gets TRYAGAIN (it would be undone when the target's copy
 * becomes the key), a read is served, and once the target took the key
 * the write is sent on with ASK. */
START_TEST(kv_migrate_write_in_flight_gets_tryagain) {
  fixture f;
  fixture_start(&f, 0, true);
  peer b;
  peer_open(&b, f.src.port);
  peer_send(&f.a, "CLUSTER KEYSLOT k");
  char slot[32];
  peer_line(&f.a, slot, sizeof slot);
  peer_send(&f.a, "CLUSTER SETSLOT %s MIGRATING b", slot + 1);
  peer_expect(&f.a, "+OK");
  peer_send(&f.a, "MIGRATE 127.0.0.1 %d k 0 8000", f.tport);
  int t = target_accept(f.lfd);
  target_wait_for(t, "RESTORE-ASKING");
  peer_send(&b, "DEL k");
  peer_expect_prefix(&b, "-TRYAGAIN");
  peer_send(&b, "GET k");
  peer_expect(&b, "$1");
  peer_expect(&b, "v");
  th_write_all(t, "+OK\r\n", 5);
  peer_expect(&f.a, "+OK");
  peer_send(&b, "DEL k");
  peer_expect_prefix(&b, "-ASK ");
  close(t);
  peer_close(&b);
  fixture_stop(&f);
}
END_TEST

/* ---- a key that expires while MIGRATE reads it ---- */

/* The source's store clock (kv_store_set_clock): frozen at clock_ns; once
 * armed, its `clock_jump_at`-th reading from then on (1-based) and every
 * later one see it 10 s on. */
static _Atomic uint64_t clock_ns;
static _Atomic int clock_jump_at;

static uint64_t stepped_clock(void *arg) {
  (void)arg;
  int left = atomic_load(&clock_jump_at);
  while (left > 0 &&
         !atomic_compare_exchange_weak(&clock_jump_at, &left, left - 1))
    ;
  if (left == 1)
    atomic_fetch_add(&clock_ns, 10 * 1000000000ull);
  return atomic_load(&clock_ns);
}

static int set_stepped_clock(void *store) {
  kv_store_set_clock(store, stepped_clock, NULL);
  return 0;
}

static int loop_noop(void *arg) {
  (void)arg;
  return 0;
}

/* Installs stepped_clock in `srv`'s store from loop 0 (whose expiry timer
 * reads it), then passes every other loop once, so each reads the new
 * clock after the write (the loop calls order them). */
static void install_stepped_clock(weft_loop_group *g, kv_server *srv) {
  atomic_store(&clock_ns, 1000 * 1000000000ull);
  atomic_store(&clock_jump_at, 0);
  ck_assert_int_eq(weft_loop_call(weft_loop_group_get(g, 0), set_stepped_clock,
                                  kv_server_store(srv)),
                   0);
  for (int i = 1; i < weft_loop_group_size(g); i++)
    ck_assert_int_eq(weft_loop_call(weft_loop_group_get(g, i), loop_noop, NULL),
                     0);
}

/* A group and a RESP source on it with stepped_clock and few expiry
 * passes (each reads the clock), MIGRATE reaching any host. */
static weft_loop_group *stepped_source(node *src) {
  weft_loop_group *g = group_start();
  kv_server_options o;
  options(&o);
  o.migrate_any_host = true;
  o.expire_hz = 1;
  node_start(src, g, &o, KV_LISTENER_RESP);
  install_stepped_clock(g, src->srv);
  return g;
}

/* The TTL argument of the RESTORE-ASKING of key `k` in what the target
 * read (`...$1 k $n <ttl> $n WKV...`). */
static long restore_ttl(const char *got) {
  const char *p = strstr(got, "RESTORE-ASKING\r\n$1\r\nk\r\n$");
  ck_assert_msg(p != NULL, "no RESTORE-ASKING of k in '%s'", got);
  p = strchr(p + strlen("RESTORE-ASKING\r\n$1\r\nk\r\n$"), '\n');
  ck_assert_ptr_nonnull(p);
  return atol(p + 1);
}

/* A key with a TTL that expires between MIGRATE's reading of its value
 * and of its TTL (the store clock jumps 10 s at the second reading) is
 * sent with the TTL it had when its value was read, never as persistent.
 * Before the fix MIGRATE read them with kv_get then kv_pttl: the second
 * found the key expired and it went with TTL 0, which RESTORE takes as
 * none. An expiry pass that reads the clock first makes the key expired
 * for MIGRATE at once (NOKEY): it is set again and the step tried again. */
START_TEST(kv_migrate_key_expiring_meanwhile_keeps_ttl) {
  int tport;
  int lfd = target_listen(&tport);
  node src;
  weft_loop_group *g = stepped_source(&src);
  peer a;
  peer_open(&a, src.port);
  int t = -1;
  for (int tries = 0; t < 0; tries++) {
    ck_assert_int_lt(tries, 50);
    peer_send(&a, "SET k v PX 1000");
    peer_expect(&a, "+OK");
    atomic_store(&clock_jump_at, 2);
    peer_send(&a, "MIGRATE 127.0.0.1 %d k 0 8000", tport);
    struct pollfd pfd[2] = {{.fd = a.fd, .events = POLLIN},
                            {.fd = lfd, .events = POLLIN}};
    ck_assert_int_gt(poll(pfd, 2, LONG_WAIT_MS), 0);
    if (pfd[1].revents & POLLIN)
      t = target_accept(lfd);
    else
      peer_expect(&a, "+NOKEY"); /* an expiry pass took the reading */
  }
  char got[8192];
  target_read_until(t, "WKV", got, sizeof got);
  long ttl = restore_ttl(got);
  ck_assert_msg(ttl > 0 && ttl <= 1000, "the key was sent with TTL %ld", ttl);
  th_write_all(t, "+OK\r\n", 5);
  peer_expect(&a, "+OK");
  close(t);
  peer_close(&a);
  close(lfd);
  stop_all(g, &src, 1);
}
END_TEST

/* COPY reads its source's value and TTL as MIGRATE does: a source that
 * expires between the two readings (the clock jumps 10 s at the second)
 * is copied with the TTL it had, not as a key without one. Before the fix
 * the copy had no TTL (PTTL -1): it would never expire. */
START_TEST(kv_copy_key_expiring_meanwhile_keeps_ttl) {
  node src;
  weft_loop_group *g = stepped_source(&src);
  peer a;
  peer_open(&a, src.port);
  char line[64];
  for (int tries = 0;; tries++) {
    ck_assert_int_lt(tries, 50);
    peer_send(&a, "SET k v PX 1000");
    peer_expect(&a, "+OK");
    atomic_store(&clock_jump_at, 2);
    peer_send(&a, "COPY k c REPLACE");
    peer_line(&a, line, sizeof line);
    if (strcmp(line, ":1") == 0)
      break;
    ck_assert_str_eq(line, ":0"); /* an expiry pass took the reading */
  }
  peer_send(&a, "PTTL c");
  peer_line(&a, line, sizeof line);
  ck_assert_msg(line[0] == ':' && atol(line + 1) > 0 && atol(line + 1) <= 1000,
                "the copy has PTTL %s", line);
  peer_close(&a);
  stop_all(g, &src, 1);
}
END_TEST

/* ---- TLS ---- */

#ifndef WEFT_TLS_MAKE_CERTS
#error "WEFT_TLS_MAKE_CERTS: the path of tests/tls/make-certs.sh"
#endif

/* Certificates of tests/tls/make-certs.sh in a new directory `dir`. */
static void make_certs(char *dir) {
  char cmd[512];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(cmd, sizeof cmd, "%s %s", WEFT_TLS_MAKE_CERTS, dir);
  ck_assert_int_eq(system(cmd), 0);
}

static void remove_certs(const char *dir) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* Options of a server serving RESP over TLS too (plaintext RESP stays, for
 * the test's own sockets), with the test CA, presenting client.pem when it
 * connects, and `pass` as requirepass ("" = none). */
static void tls_options(kv_server_options *o, const char *dir,
                        const char *pass) {
  options(o);
  strcpy(o->tls_listen, "127.0.0.1:0");
  snprintf(o->tls.cert_file, sizeof o->tls.cert_file, "%s/server.pem", dir);
  snprintf(o->tls.key_file, sizeof o->tls.key_file, "%s/server.key", dir);
  snprintf(o->tls.ca_file, sizeof o->tls.ca_file, "%s/ca.pem", dir);
  snprintf(o->tls_client_cert_file, sizeof o->tls_client_cert_file,
           "%s/client.pem", dir);
  snprintf(o->tls_client_key_file, sizeof o->tls_client_key_file,
           "%s/client.key", dir);
  snprintf(o->requirepass, sizeof o->requirepass, "%s", pass);
  o->migrate_any_host = true;
}

/* A server that serves TLS MIGRATEs over TLS: to another such node's TLS
 * port with AUTH (the target asks for a client certificate and checks
 * it), and to a plaintext listener what goes out is a TLS handshake, the
 * password nowhere in it. Before the fix AUTH went out in clear. */
START_TEST(kv_migrate_over_tls_never_sends_password_in_clear) {
  char dir[] = "/tmp/weft-kvmig-XXXXXX";
  make_certs(dir);
  weft_loop_group *g = group_start();
  node n[2];
  kv_server_options o;
  tls_options(&o, dir, "s3cret");
  node_start(&n[1], g, &o, KV_LISTENER_TLS); /* the target */
  tls_options(&o, dir, "");
  node_start(&n[0], g, &o, KV_LISTENER_RESP);
  peer a;
  peer_open(&a, n[0].port);
  peer_send(&a, "SET k v");
  peer_expect(&a, "+OK");
  peer_send(&a, "MIGRATE 127.0.0.1 %d k 0 8000 AUTH s3cret", n[1].port);
  peer_expect(&a, "+OK");
  peer_send(&a, "EXISTS k");
  peer_expect(&a, ":0");
  peer b;
  peer_open(&b, n[1].resp_port);
  peer_send(&b, "AUTH s3cret");
  peer_expect(&b, "+OK");
  peer_send(&b, "GET k");
  peer_expect(&b, "$1");
  peer_expect(&b, "v");
  peer_close(&b);
  /* To a plaintext listener: the bytes are a TLS record. */
  int tport, lfd = target_listen(&tport);
  peer_send(&a, "SET k2 v");
  peer_expect(&a, "+OK");
  peer_send(&a, "MIGRATE 127.0.0.1 %d k2 0 8000 AUTH s3cret", tport);
  int t = target_accept(lfd);
  unsigned char hello[4096];
  struct pollfd pfd = {.fd = t, .events = POLLIN};
  ck_assert_int_eq(poll(&pfd, 1, LONG_WAIT_MS), 1);
  ssize_t got = recv(t, hello, sizeof hello, 0);
  ck_assert_int_gt(got, 5);
  ck_assert_uint_eq(hello[0], 0x16); /* TLS handshake record */
  ck_assert_ptr_null(memmem(hello, (size_t)got, "s3cret", 6));
  ck_assert_ptr_null(memmem(hello, (size_t)got, "AUTH", 4));
  close(t);
  peer_expect_prefix(&a, "-IOERR");
  peer_send(&a, "EXISTS k2");
  peer_expect(&a, ":1");
  peer_close(&a);
  close(lfd);
  stop_all(g, n, 2);
  remove_certs(dir);
}
END_TEST

Suite *weft_test_suite(void) {
  if (!weft_transport_speaks_tcp(th_transport_name()))
    th_skip_program("RESP over plain sockets needs a TCP transport, not %s",
                    th_transport_name());
  return th_suite(
      "kv_migrate", "migrate", 240, kv_migrate_silent_target_blocks_no_loop,
      kv_migrate_timeout_clamped_to_cap, kv_migrate_refusals_are_clear_errors,
      kv_migrate_non_resp_reply_keeps_key,
      kv_migrate_key_changed_meanwhile_not_deleted, kv_migrate_to_weft_node,
      kv_migrate_write_in_flight_gets_tryagain,
      kv_migrate_key_expiring_meanwhile_keeps_ttl,
      kv_copy_key_expiring_meanwhile_keeps_ttl,
      kv_migrate_over_tls_never_sends_password_in_clear, NULL);
}
