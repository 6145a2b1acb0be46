/* SPDX-License-Identifier: Apache-2.0 */
/* An LD_PRELOAD probe for wrk (keep-alive, one request in flight per
 * connection): where a request's latency goes, and in what order the
 * server answered. Built and loaded by bench-http.sh with ORDER=1.
 *
 * For every request it takes three times, all CLOCK_REALTIME (the
 * kernel's receive timestamps are in that clock):
 *   tw  wrk's write(2) of the request returned;
 *   ta  the response's first segment reached wrk's socket (SO_TIMESTAMPNS,
 *       the kernel's stamp at receive, read with recvmsg in place of the
 *       read(2) wrk makes);
 *   tr  wrk's read of it returned.
 * A = ta - tw is the server and the network, B = tr - ta is the time the
 * response waited in wrk's socket for wrk (its own queue: wrk is near
 * its CPU's limit in bench-http.sh). At exit it prints one line to
 * stderr ("order: ..."), over the requests of the run less its first and
 * last 0.2 s:
 *   T, A, B        p50 and p99 in µs;
 *   srv-inv p99    for each response, how many requests written after its
 *                  own reached wrk before it (0 for a server that answers
 *                  in the order the requests arrived);
 *   wrk-inv p99    for each response, how many that arrived after it wrk
 *                  read before it (wrk's own order);
 *   turns p99      responses wrk read between a request's write and its
 *                  response: with wrk the bottleneck, the latency in units
 *                  of wrk's work per response, which the machine's other
 *                  load does not stretch (63 = each other connection once).
 * The probe costs wrk a recvmsg in place of a read and three clock reads
 * per request: the same for every server measured.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_FD 4096       /* fds followed; wrk -c64 uses a few dozen */
#define MAX_LOG 4000000u  /* requests logged (96 MB at most) */
#define EDGE_NS 200000000 /* 0.2 s left out at each end (ramp, stop) */

typedef struct req {
  uint64_t tw, ta, tr, turns;
} req;

static ssize_t (*real_read)(int, void *, size_t);
static ssize_t (*real_write)(int, const void *, size_t);
static uint64_t write_ns[MAX_FD], write_turn[MAX_FD], turns;
static unsigned char pending[MAX_FD], stamping[MAX_FD];
static req *log_v;
static size_t n_log;

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

__attribute__((constructor)) static void order_init(void) {
  real_read = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
  real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
  log_v = calloc(MAX_LOG, sizeof *log_v);
}

ssize_t write(int fd, const void *b, size_t n) {
  ssize_t r = real_write(fd, b, n);
  if (r > 0 && fd > 2 && fd < MAX_FD && !pending[fd]) {
    pending[fd] = 1;
    write_ns[fd] = now_ns();
    write_turn[fd] = turns;
  }
  return r;
}

/* recvmsg with the receive timestamp; 0 in *ta when there is none. */
static ssize_t read_stamped(int fd, void *b, size_t n, uint64_t *ta) {
  if (!stamping[fd]) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    stamping[fd] = 1;
  }
  struct iovec iov = {b, n};
  char cbuf[128];
  struct msghdr m = {.msg_iov = &iov,
                     .msg_iovlen = 1,
                     .msg_control = cbuf,
                     .msg_controllen = sizeof cbuf};
  ssize_t r = recvmsg(fd, &m, 0);
  *ta = 0;
  for (struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&m) : NULL; c != NULL;
       c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
      struct timespec ts;
      memcpy(&ts, CMSG_DATA(c), sizeof ts);
      *ta = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    }
  }
  return r;
}

ssize_t read(int fd, void *b, size_t n) {
  if (fd <= 2 || fd >= MAX_FD || !pending[fd])
    return real_read(fd, b, n);
  uint64_t ta;
  ssize_t r = read_stamped(fd, b, n, &ta);
  if (r <= 0)
    return r;
  pending[fd] = 0;
  uint64_t tr = now_ns();
  if (log_v != NULL && n_log < MAX_LOG && ta >= write_ns[fd] && ta <= tr)
    log_v[n_log++] = (req){write_ns[fd], ta, tr, turns - write_turn[fd]};
  turns++;
  return r;
}

/* ---- the summary at exit ---- */

static const uint64_t *sort_key;
static int by_key(const void *a, const void *b) {
  uint64_t x = sort_key[*(const uint32_t *)a];
  uint64_t y = sort_key[*(const uint32_t *)b];
  return x < y ? -1 : x > y;
}

static uint32_t *order_by(const uint64_t *key, size_t n) {
  uint32_t *idx = malloc(n * sizeof *idx);
  for (size_t i = 0; i < n; i++)
    idx[i] = (uint32_t)i;
  sort_key = key;
  qsort(idx, n, sizeof *idx, by_key);
  return idx;
}

/* For each element, taken in the order of `first`, the elements taken
 * before it whose `then` is greater: inversions, counted with a Fenwick
 * tree over the ranks of `then`. */
static void inversions(const uint64_t *first, const uint64_t *then, size_t n,
                       uint64_t *out) {
  uint32_t *by_first = order_by(first, n), *by_then = order_by(then, n);
  uint32_t *rank = malloc(n * sizeof *rank);
  uint64_t *tree = calloc(n + 1, sizeof *tree);
  for (size_t i = 0; i < n; i++)
    rank[by_then[i]] = (uint32_t)i + 1;
  for (size_t k = 0; k < n; k++) {
    uint32_t e = by_first[k];
    uint64_t below = 0;
    for (size_t i = rank[e]; i > 0; i -= i & -i)
      below += tree[i];
    out[e] = k - below;
    for (size_t i = rank[e]; i <= n; i += i & -i)
      tree[i]++;
  }
  free(by_first);
  free(by_then);
  free(rank);
  free(tree);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static uint64_t pct(const uint64_t *v, size_t n, double q) {
  uint64_t *c = malloc(n * sizeof *c);
  memcpy(c, v, n * sizeof *c);
  qsort(c, n, sizeof *c, cmp_u64);
  uint64_t r = c[(size_t)(q * (double)(n - 1))];
  free(c);
  return r;
}

__attribute__((destructor)) static void order_report(void) {
  if (log_v == NULL || n_log < 100)
    return;
  uint64_t t0 = log_v[0].tw, t1 = log_v[n_log - 1].tr;
  size_t n = 0;
  for (size_t i = 0; i < n_log; i++)
    if (log_v[i].tw > t0 + EDGE_NS && log_v[i].tr + EDGE_NS < t1)
      log_v[n++] = log_v[i];
  if (n < 100)
    return;
  uint64_t *col = malloc(8 * n * sizeof *col);
  uint64_t *tw = col, *ta = col + n, *tr = col + 2 * n, *T = col + 3 * n;
  uint64_t *A = col + 4 * n, *B = col + 5 * n, *srv = col + 6 * n,
           *cli = col + 7 * n;
  uint64_t *turn = malloc(n * sizeof *turn);
  for (size_t i = 0; i < n; i++) {
    tw[i] = log_v[i].tw;
    ta[i] = log_v[i].ta;
    tr[i] = log_v[i].tr;
    T[i] = (tr[i] - tw[i]) / 1000;
    A[i] = (ta[i] - tw[i]) / 1000;
    B[i] = (tr[i] - ta[i]) / 1000;
    turn[i] = log_v[i].turns;
  }
  inversions(ta, tw, n, srv); /* arrived before requests written earlier */
  inversions(tr, ta, n, cli); /* read before responses that arrived earlier */
  fprintf(stderr,
          "order: n %zu T p50/p99 %lu/%lu us A(server+net) %lu/%lu B(in wrk) "
          "%lu/%lu srv-inv p99 %lu wrk-inv p99 %lu turns p50/p99 %lu/%lu\n",
          n, pct(T, n, .5), pct(T, n, .99), pct(A, n, .5), pct(A, n, .99),
          pct(B, n, .5), pct(B, n, .99), pct(srv, n, .99), pct(cli, n, .99),
          pct(turn, n, .5), pct(turn, n, .99));
  free(col);
  free(turn);
}
