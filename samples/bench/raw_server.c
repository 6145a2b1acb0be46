/* SPDX-License-Identifier: Apache-2.0 */
/* raw_server.c: weft-bench's raw server, the plain-socket floor of every
 * server-side row. One thread, pinned to CPU 1, runs epoll over the
 * listener and every connection (nonblocking sockets, level-triggered):
 * raw-busy spins on epoll_wait(.., 0), raw-block waits with -1. Each
 * connection first reads the client's 16 B hello (bench.h), then until
 * EOF echoes what it reads (SRV_ECHO: recv up to BENCH_TXMAX, send it
 * back) or counts it and answers one zero byte per unit (SRV_SINK); a
 * CLOSE hello closes at once. A send that does not take everything
 * leaves the rest in the connection's backlog (at most one recv's worth:
 * the connection is not read while its backlog is non-empty, so the
 * client's window cannot grow it), and the connection waits for EPOLLOUT
 * instead of EPOLLIN until the backlog is gone.
 *
 * One thread, not one per connection: on this 2-core machine a thread per
 * connection has its connections' threads preempt each other on CPU 1
 * (issue 17), which is no floor of anything. */

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"

#define RAW_EVENTS 256 /* epoll events taken per wait */

typedef struct raw_conn {
  int fd;
  hello h;
  size_t hlen;           /* hello bytes read so far */
  uint64_t count;        /* SINK: payload bytes received */
  uint64_t acked;        /* SINK: answer bytes queued so far */
  uint64_t owed_zeros;   /* SINK: answer bytes not yet sent */
  uint8_t *backlog;      /* ECHO: bytes not yet sent (malloc'd on demand) */
  size_t back_off;       /* first unsent byte of backlog */
  size_t back_len;       /* end of the unsent bytes of backlog */
  bool want_out;         /* registered for EPOLLOUT (else EPOLLIN) */
  struct raw_conn *next; /* every connection, for the stop */
  struct raw_conn **pprev;
} raw_conn;

typedef struct raw_server {
  session *s;
  int ep;
  bool busy;
  uint8_t *rx; /* one receive buffer for every connection */
  raw_conn *conns;
} raw_server;

/* epoll data of the two fds that are not connections */
static char listener_tag, stop_tag;

static bool conn_pending(const raw_conn *c) {
  return c->back_off < c->back_len || c->owed_zeros > 0;
}

/* Interest follows the backlog: EPOLLOUT while there is one, else EPOLLIN.
 * Returns -1 when epoll refuses (the connection is then closed). */
static int conn_interest(raw_server *x, raw_conn *c) {
  bool out = conn_pending(c);
  if (out == c->want_out)
    return 0;
  struct epoll_event ev = {.events = out ? EPOLLOUT : EPOLLIN, .data.ptr = c};
  c->want_out = out;
  return epoll_ctl(x->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void conn_close(raw_conn *c) {
  close(c->fd); /* also leaves the epoll set */
  *c->pprev = c->next;
  if (c->next != NULL)
    c->next->pprev = c->pprev;
  free(c->backlog);
  free(c);
}

/* Sends p[0..n) without waiting; the bytes sent, or -1 on an error other
 * than "would block". */
static ssize_t send_some(int fd, const void *p, size_t n) {
  for (;;) {
    ssize_t w = send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w >= 0)
      return w;
    if (errno == EAGAIN)
      return 0;
    if (errno != EINTR)
      return -1;
  }
}

/* Sends what the backlog holds (echo bytes, then owed zeros) until the
 * socket takes no more; -1 on error. */
static int conn_send_backlog(raw_conn *c) {
  while (c->back_off < c->back_len) {
    ssize_t w =
        send_some(c->fd, c->backlog + c->back_off, c->back_len - c->back_off);
    if (w <= 0)
      return (int)w;
    c->back_off += (size_t)w;
  }
  c->back_off = c->back_len = 0;
  while (c->owed_zeros > 0) {
    size_t k = c->owed_zeros > BENCH_TXMAX ? BENCH_TXMAX : c->owed_zeros;
    ssize_t w = send_some(c->fd, bench_zeros, k);
    if (w <= 0)
      return (int)w;
    c->owed_zeros -= (uint64_t)w;
  }
  return 0;
}

/* Echoes n bytes of p: what the socket does not take goes to the
 * backlog (empty here, as the connection is read only then). */
static int conn_echo(raw_conn *c, const uint8_t *p, size_t n) {
  ssize_t w = send_some(c->fd, p, n);
  if (w < 0)
    return -1;
  if ((size_t)w == n)
    return 0;
  if (c->backlog == NULL && (c->backlog = malloc(BENCH_TXMAX)) == NULL)
    return -1;
  c->back_off = 0;
  c->back_len = n - (size_t)w;
  memcpy(c->backlog, p + w, c->back_len);
  return 0;
}

/* Reads the hello's next bytes; -1 when the connection is to close (not a
 * hello, a CLOSE, EOF or an error), 0 otherwise. */
static int conn_read_hello(raw_conn *c) {
  ssize_t r = recv(c->fd, (uint8_t *)&c->h + c->hlen, sizeof c->h - c->hlen,
                   MSG_DONTWAIT);
  if (r < 0)
    return errno == EAGAIN || errno == EINTR ? 0 : -1;
  if (r == 0)
    return -1;
  c->hlen += (size_t)r;
  if (c->hlen < sizeof c->h)
    return 0;
  const hello *h = &c->h;
  if (h->magic != BENCH_HELLO_MAGIC ||
      (h->mode != SRV_ECHO && h->mode != SRV_SINK) ||
      (h->mode == SRV_SINK && h->unit == 0))
    return -1; /* CLOSE included: the client waits for this EOF */
  return 0;
}

/* One recv and what it asks for; -1 when the connection is to close. */
static int conn_read(raw_server *x, raw_conn *c) {
  if (c->hlen < sizeof c->h)
    return conn_read_hello(c);
  ssize_t r = recv(c->fd, x->rx, BENCH_TXMAX, MSG_DONTWAIT);
  if (r < 0)
    return errno == EAGAIN || errno == EINTR ? 0 : -1;
  if (r == 0)
    return -1;
  if (c->h.mode == SRV_ECHO)
    return conn_echo(c, x->rx, (size_t)r);
  c->count += (uint64_t)r;
  uint64_t due = c->count / c->h.unit - c->acked;
  c->acked += due;
  c->owed_zeros += due;
  return conn_send_backlog(c);
}

static void conn_event(raw_server *x, raw_conn *c, uint32_t events) {
  int rc = 0;
  if (c->want_out)
    rc = conn_send_backlog(c);
  else if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
    rc = conn_read(x, c);
  if (rc < 0 || conn_interest(x, c) < 0)
    conn_close(c);
}

/* Accepts every pending connection into the epoll set, and reads each
 * one's hello at once: a client sends it right after connecting, so it
 * is usually there, and a connect-and-close client (the connect pattern)
 * then costs one wake-up of this thread, not two. */
static void accept_all(raw_server *x) {
  for (;;) {
    int fd = accept4(x->s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      return; /* EAGAIN, or out of fds: the rest wait in the backlog */
    }
    bench_raw_nodelay(fd);
    raw_conn *c = calloc(1, sizeof *c);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (c == NULL || epoll_ctl(x->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
      close(fd);
      free(c);
      continue;
    }
    c->fd = fd;
    if (bench_opt.plain_echo) { /* no hello: echo from byte 0 */
      c->hlen = sizeof c->h;
      c->h.mode = SRV_ECHO;
    }
    c->next = x->conns;
    c->pprev = &x->conns;
    if (x->conns != NULL)
      x->conns->pprev = &c->next;
    x->conns = c;
    conn_event(x, c, EPOLLIN);
  }
}

static int add_fd(int ep, int fd, void *tag) {
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = tag};
  return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

/* Waits (or spins) and handles what came; false once the stop fd fired. */
static bool serve_once(raw_server *x, struct epoll_event *evs) {
  int n = epoll_wait(x->ep, evs, RAW_EVENTS, x->busy ? 0 : -1);
  for (int i = 0; i < n; i++) {
    void *p = evs[i].data.ptr;
    if (p == &stop_tag)
      return false;
    if (p == &listener_tag)
      accept_all(x);
    else
      conn_event(x, p, evs[i].events);
  }
  return true;
}

void *bench_server_raw_main(void *arg) {
  session *s = arg;
  bench_raw_server_thread(s, "raw");
  raw_server x = {.s = s, .busy = s->cf->busy};
  struct epoll_event *evs = calloc(RAW_EVENTS, sizeof *evs);
  x.rx = malloc(BENCH_TXMAX);
  x.ep = epoll_create1(EPOLL_CLOEXEC);
  if (evs == NULL || x.rx == NULL || x.ep < 0 ||
      add_fd(x.ep, s->lfd, &listener_tag) < 0 ||
      add_fd(x.ep, s->stop_fd, &stop_tag) < 0)
    bench_die("raw server setup");
  while (serve_once(&x, evs))
    ;
  while (x.conns != NULL)
    conn_close(x.conns);
  close(x.ep);
  free(x.rx);
  free(evs);
  return NULL;
}
