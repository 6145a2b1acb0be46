/* SPDX-License-Identifier: Apache-2.0 */
/* The KV service in cluster mode under concurrent clients: the CLUSTER
 * commands that walk the whole store (COUNTKEYSINSLOT, GETKEYSINSLOT,
 * SETSLOT ... NODE) against transactions and writers on other loops. A
 * server of two loops in this process (tcp), clients on plain sockets
 * speaking RESP from their own threads, so each connection's commands run
 * on the loop the server gave it (round-robin: two connections, two
 * loops).
 *
 * Watchdogs are progress-based: a test fails when no reply at all arrived
 * for STALL_MS, never for a total time. */
#include "harness.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <weft/config.h>
#include <weft/error.h>
#include <weft/loop.h>

#include "server.h"

/* No reply for this long while replies are due: the server is stuck (a
 * deadlock holds its loops for ever; a loaded machine answers within a
 * fraction of this). */
#define STALL_MS 30000

/* ---- a server of two loops as node "a" of a two-node cluster ---- */

typedef struct node {
  weft_loop_group *group;
  kv_server *server;
  int port; /* RESP */
} node;

static void cluster_key(kv_server_options *o, const char *k, const char *v) {
  char err[512] = "";
  ck_assert_msg(kv_cluster_config_key(&o->cluster, k, v, err, sizeof err) == 0,
                "[cluster] %s = %s: %s", k, v, err);
}

/* Node "a" serves every slot; "b" (never started) is where MOVED points. */
static void node_start(node *n) {
  weft_loop_options lo;
  weft_loop_options_init(&lo);
  lo.n_loops = 2;
  lo.busy_poll_us = 0;
  lo.pin = false;
  ck_assert_int_eq(weft_loop_group_new(&n->group, &lo), 0);
  ck_assert_int_eq(weft_loop_group_start(n->group), 0);
  weft_config cfg;
  weft_config_init(&cfg);
  snprintf(cfg.transport, sizeof cfg.transport, "tcp");
  kv_server_options o;
  kv_server_options_init(&o);
  snprintf(o.rpc_listen, sizeof o.rpc_listen, "127.0.0.1:0");
  snprintf(o.resp_listen, sizeof o.resp_listen, "127.0.0.1:0");
  cluster_key(&o, "enabled", "yes");
  cluster_key(&o, "myself", "a");
  cluster_key(&o, "node", "a 127.0.0.1:1 slots=0-16383");
  cluster_key(&o, "node", "b 127.0.0.1:2");
  ck_assert_int_eq(kv_server_bind(&n->server, n->group, &cfg, &o), 0);
  char uri[WEFT_CONFIG_URI_MAX + 32];
  ck_assert_int_eq(kv_server_address(n->server, 1, uri, sizeof uri), 0);
  n->port = atoi(strrchr(uri, ':') + 1);
}

static void node_stop(node *n) {
  weft_loop_group_stop(n->group);
  ck_assert_int_eq(weft_loop_group_join(n->group), 0);
  kv_server_close(n->server);
  weft_loop_group_free(n->group);
}

/* ---- a RESP client on a blocking socket ---- */

typedef struct peer {
  int fd;
  size_t len, off;
  char buf[4096];
} peer;

static void peer_connect(peer *p, const node *n) {
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)n->port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  p->fd = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(p->fd, 0);
  ck_assert_int_eq(connect(p->fd, (struct sockaddr *)&a, sizeof a), 0);
  int one = 1;
  setsockopt(p->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  p->len = p->off = 0;
}

/* Sends `line` as an inline command (words split on spaces). */
static void peer_send(peer *p, const char *line) {
  th_write_all(p->fd, line, strlen(line));
}

static int peer_byte(peer *p) {
  if (p->off == p->len) {
    ssize_t n;
    do
      n = recv(p->fd, p->buf, sizeof p->buf, 0);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
      return -1;
    p->len = (size_t)n;
    p->off = 0;
  }
  return (unsigned char)p->buf[p->off++];
}

/* One line without its CRLF; false at the end of the stream. */
static bool peer_line(peer *p, char *line, size_t cap) {
  size_t n = 0;
  for (int c; (c = peer_byte(p)) >= 0;) {
    if (c == '\n' && n > 0 && line[n - 1] == '\r') {
      line[n - 1] = '\0';
      return true;
    }
    if (n + 1 < cap)
      line[n++] = (char)c;
  }
  return false;
}

/* Reads one whole reply; copies its first line into `first` (`cap`
 * bytes). False when the connection ended. */
static bool peer_reply(peer *p, char *first, size_t cap) {
  char line[512];
  if (!peer_line(p, line, sizeof line))
    return false;
  if (first != NULL) {
    size_t n = strlen(line) < cap ? strlen(line) : cap - 1;
    memcpy(first, line, n);
    first[n] = '\0';
  }
  long n = strtol(line + 1, NULL, 10);
  if (line[0] == '$' && n >= 0) {
    for (long i = 0; i < n + 2; i++)
      if (peer_byte(p) < 0)
        return false;
  } else if (line[0] == '*' || line[0] == '=' || line[0] == '%') {
    for (long i = 0; i < (line[0] == '%' ? 2 * n : n); i++)
      if (!peer_reply(p, NULL, 0))
        return false;
  }
  return true;
}

/* Sends `cmd` and returns its reply's first line in `out`. */
static void peer_call(peer *p, const char *cmd, char *out, size_t cap) {
  peer_send(p, cmd);
  ck_assert_msg(peer_reply(p, out, cap), "no reply to %s", cmd);
}

/* ---- watchdog ---- */

/* Replies counted by the client threads; the test thread fails the test
 * when none arrives for STALL_MS while the clients still run. */
typedef struct progress {
  _Atomic uint64_t replies;
  _Atomic int running;
} progress;

static void watch(progress *pg, const char *what) {
  uint64_t seen = atomic_load(&pg->replies), since = th_now_ms();
  while (atomic_load(&pg->running) > 0) {
    th_sleep_ms(50);
    uint64_t now = atomic_load(&pg->replies);
    if (now != seen) {
      seen = now;
      since = th_now_ms();
    }
    ck_assert_msg(th_now_ms() - since < STALL_MS,
                  "%s: no reply for %d ms after %llu replies: the server is "
                  "stuck",
                  what, STALL_MS, (unsigned long long)now);
  }
}

/* Fills the store with `n` keys of a slot nobody in the tests uses, so
 * that a walk of the store takes long enough for the races to show. */
static void fill(peer *p, int n) {
  char cmd[64], r[64];
  for (int i = 0; i < n; i += 100) {
    for (int j = i; j < i + 100 && j < n; j++) {
      snprintf(cmd, sizeof cmd, "SET {pad}%d x\r\n", j);
      peer_send(p, cmd);
    }
    for (int j = i; j < i + 100 && j < n; j++)
      ck_assert(peer_reply(p, r, sizeof r));
  }
}

/* Starts node `n` with `keys` padding keys, `p` connected to it. */
static void start_filled(node *n, peer *p, int keys) {
  node_start(n);
  peer_connect(p, n);
  fill(p, keys);
}

static void stop_filled(node *n, peer *p) {
  close(p->fd);
  node_stop(n);
}

/* A client thread's end: its connection closed, one client less running. */
static void *client_done(peer *p, progress *pg) {
  close(p->fd);
  atomic_fetch_sub(&pg->running, 1);
  return NULL;
}

/* ---- 1: a transaction whose commands walk the whole store ---- */

/* What each transaction runs after its SET: every command that walks all
 * stripes, the CLUSTER ones and the keyspace ones, in turn. SETSLOT 1
 * NODE b walks the store (giving a slot away checks it holds no keys);
 * the next transaction takes slot 1 back. */
static const char *const walks[] = {
    "CLUSTER COUNTKEYSINSLOT 0",
    "CLUSTER GETKEYSINSLOT 0 10",
    "CLUSTER SETSLOT 1 NODE b",
    "CLUSTER SETSLOT 1 NODE a",
    "KEYS {nomatch}*",
    "SCAN 0 COUNT 1000",
    "DBSIZE",
};

typedef struct txn_client {
  progress *pg;
  int id, rounds;
  node *n;
} txn_client;

static void *txn_loop(void *arg) {
  txn_client *tc = arg;
  peer p;
  peer_connect(&p, tc->n);
  char cmd[256], r[128];
  size_t nw = sizeof walks / sizeof walks[0];
  for (int i = 0; i < tc->rounds; i++) {
    /* Each client its own keys, so the two transactions hold different
     * stripes (the ABBA needs that), and a different walk each round. */
    snprintf(cmd, sizeof cmd, "MULTI\r\nSET {t}%d.%d v\r\n%s\r\nEXEC\r\n",
             tc->id, i % 97, walks[(size_t)(i + tc->id) % nw]);
    peer_send(&p, cmd);
    for (int k = 0; k < 4; k++) {
      if (!peer_reply(&p, r, sizeof r))
        goto out;
      atomic_fetch_add(&tc->pg->replies, 1);
    }
    if (strcmp(r, "*2") != 0)
      break; /* an EXEC refused: the assertion below reports it */
  }
out:
  return client_done(&p, tc->pg);
}

/* Two clients on two loops, each running MULTI; SET {t}...; <a command
 * that walks every stripe>; EXEC over and over. EXEC once locked only the
 * SET's stripe and the walk then took every other one in order: an ABBA
 * between the two loops that stopped the server for ever (debug builds
 * abort on store_internal.h's assertion instead). */
START_TEST(kv_cluster_exec_with_store_walk_never_deadlocks) {
  node n;
  peer p;
  start_filled(&n, &p, 3000);
  progress pg = {0};
  int rounds = (int)(400 * th_test_scale()) + 20;
  txn_client tc[2];
  pthread_t th[2];
  atomic_store(&pg.running, 2);
  for (int i = 0; i < 2; i++) {
    tc[i] = (txn_client){.pg = &pg, .id = i, .rounds = rounds, .n = &n};
    ck_assert_int_eq(pthread_create(&th[i], NULL, txn_loop, &tc[i]), 0);
  }
  watch(&pg, "MULTI/EXEC with store walks");
  for (int i = 0; i < 2; i++)
    pthread_join(th[i], NULL);
  ck_assert_uint_eq(atomic_load(&pg.replies), 2ull * 4 * (uint64_t)rounds);
  stop_filled(&n, &p);
}
END_TEST

/* ---- 2: SETSLOT NODE against a writer ---- */

typedef struct writer {
  progress *pg;
  node *n;
  _Atomic int stop;
} writer;

/* SET {s}<i>, then once it is answered DEL it, over and over, with i
 * cycling so the keys fall on many stripes: the slot holds a key about
 * half the time. MOVED replies (the slot is given away) are fine. */
static void *writer_loop(void *arg) {
  writer *w = arg;
  peer p;
  peer_connect(&p, w->n);
  char cmd[128], r[128];
  for (unsigned i = 0; !atomic_load(&w->stop); i++) {
    snprintf(cmd, sizeof cmd, "%s {s}%u%s\r\n", i % 2 ? "DEL" : "SET",
             i / 2 % 211, i % 2 ? "" : " v");
    peer_send(&p, cmd);
    if (!peer_reply(&p, r, sizeof r))
      break;
    atomic_fetch_add(&w->pg->replies, 1);
  }
  return client_done(&p, w->pg);
}

/* SETSLOT <slot> NODE b while a client on the other loop writes keys of
 * that slot: once it answers OK the node must hold no key of the slot
 * (every later write is MOVED to b), else an acknowledged SET would sit
 * here unreachable behind MOVED. The check once walked the store without
 * locks and changed the owner after: a SET landing in between was
 * stranded. The walk takes long (the padding keys), so the window was
 * wide; now the check and the change are one step under every stripe
 * lock. */
START_TEST(kv_cluster_setslot_node_never_strands_a_write) {
  node n;
  peer p;
  start_filled(&n, &p, 20000);
  char r[128];
  peer_call(&p, "CLUSTER KEYSLOT s\r\n", r, sizeof r);
  ck_assert_str_eq(r, ":3828");
  progress pg = {0};
  writer w = {.pg = &pg, .n = &n};
  atomic_store(&pg.running, 1);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, writer_loop, &w), 0);
  int given = 0, refused = 0;
  int want = (int)(30 * th_test_scale()) + 5;
  uint64_t seen = 0, since = th_now_ms();
  while (given < want) {
    peer_call(&p, "CLUSTER SETSLOT 3828 NODE b\r\n", r, sizeof r);
    if (strcmp(r, "+OK") == 0) {
      given++;
      /* Given away: no key of the slot may be here, now or later. */
      char count[64];
      peer_call(&p, "CLUSTER COUNTKEYSINSLOT 3828\r\n", count, sizeof count);
      ck_assert_msg(strcmp(count, ":0") == 0,
                    "SETSLOT NODE b answered OK, yet %s keys of the slot are "
                    "here, behind MOVED (round %d)",
                    count + 1, given);
      peer_call(&p, "CLUSTER SETSLOT 3828 NODE a\r\n", r, sizeof r);
      ck_assert_str_eq(r, "+OK");
    } else {
      ck_assert_msg(strstr(r, "still hold keys") != NULL, "SETSLOT: %s", r);
      refused++;
    }
    /* Let the writer land a SET or two before the next try. */
    uint64_t now = atomic_load(&pg.replies);
    while (now == atomic_load(&pg.replies) && th_now_ms() - since < STALL_MS)
      usleep(100);
    if (now != seen)
      seen = now, since = th_now_ms();
    ck_assert_msg(th_now_ms() - since < STALL_MS, "the writer is stuck");
  }
  atomic_store(&w.stop, 1);
  watch(&pg, "the writer's end");
  pthread_join(th, NULL);
  ck_assert_int_gt(refused + given, 0);
  stop_filled(&n, &p);
}
END_TEST

Suite *weft_test_suite(void) {
  return th_suite("kv_cluster_locks", "core", 280,
                  kv_cluster_exec_with_store_walk_never_deadlocks,
                  kv_cluster_setslot_node_never_strands_a_write, NULL);
}
