/* SPDX-License-Identifier: Apache-2.0 */
/* bench_raw.c: plain-socket helpers of weft-bench's raw configurations,
 * the floor every weft row is compared with: receiving spinning or
 * blocking, sending all, connecting with the hello, closing, and the
 * send-n-receive-n exchange of a round trip. Used by the raw server
 * (raw_server.c) and the raw client of every pattern; a raw_link is the
 * same connection over plain sockets or OpenSSL (bench_raw_tls.c), for
 * the patterns the raw-tls setups run. */

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench.h"
#include "bench_util.h"

uint8_t bench_zeros[BENCH_TXMAX];
uint8_t bench_rxbuf[BENCH_TXMAX];

ssize_t bench_raw_recv(int fd, void *p, size_t n, bool busy) {
  for (;;) {
    ssize_t r = recv(fd, p, n, busy ? MSG_DONTWAIT : 0);
    if (r >= 0 || (errno != EAGAIN && errno != EINTR))
      return r;
  }
}

int bench_raw_send_all(int fd, const void *p, size_t n) {
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

int bench_raw_recv_exact(int fd, void *p, size_t n, bool busy) {
  while (n > 0) {
    ssize_t r = bench_raw_recv(fd, p, n, busy);
    if (r <= 0)
      return -1;
    p = (uint8_t *)p + r;
    n -= (size_t)r;
  }
  return 0;
}

void bench_raw_server_thread(session *s, const char *suffix) {
  char name[16];
  snprintf(name, sizeof name, "%.8s%.7s", s->prefix, suffix);
  pthread_setname_np(pthread_self(), name);
  bench_pin_self(1);
  /* nonblocking: a client gone between readiness and accept blocks
   * nothing */
  if (fcntl(s->lfd, F_SETFL, fcntl(s->lfd, F_GETFL) | O_NONBLOCK) < 0)
    bench_die("raw server: listener");
}

void bench_raw_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int bench_raw_dial(session *s) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    bench_die("socket");
  if (connect(fd, (struct sockaddr *)&s->addr, sizeof s->addr) < 0)
    bench_die("connect");
  bench_raw_nodelay(fd);
  return fd;
}

int bench_raw_connect(session *s, uint32_t mode, uint64_t unit) {
  hello h = {BENCH_HELLO_MAGIC, mode, unit};
  int fd = bench_raw_dial(s);
  if (!bench_opt.plain_echo && bench_raw_send_all(fd, &h, sizeof h) < 0)
    bench_die("send");
  return fd;
}

raw_link bench_raw_link_open(session *s, uint32_t mode, uint64_t unit) {
  if (s->cf->tls)
    return bench_tls_link_open(s, mode, unit);
  return (raw_link){.fd = bench_raw_connect(s, mode, unit),
                    .busy = s->cf->busy};
}

int bench_raw_link_exchange(raw_link *l, size_t n) {
  return l->ssl != NULL ? bench_tls_exchange(l, n)
                        : bench_raw_exchange(l->fd, n, l->busy);
}

void bench_raw_link_close(raw_link *l) {
  if (l->ssl != NULL)
    bench_tls_end(l);
  bench_raw_close(l->fd, l->busy);
}

void bench_raw_drain(int fd, bool busy) {
  while (bench_raw_recv(fd, bench_rxbuf, sizeof bench_rxbuf, busy) > 0)
    ;
}

void bench_raw_close(int fd, bool busy) {
  shutdown(fd, SHUT_WR);
  bench_raw_drain(fd, busy);
  close(fd);
}

/* Receives what is there without waiting; false on EOF or error. When
 * nothing is there and not busy, waits until fd is readable or writable. */
static bool exchange_recv(int fd, size_t *got, bool busy) {
  ssize_t r = recv(fd, bench_rxbuf, sizeof bench_rxbuf, MSG_DONTWAIT);
  if (r > 0)
    *got += (size_t)r;
  else if (r == 0 || (errno != EAGAIN && errno != EINTR))
    return false;
  else if (!busy)
    poll(&(struct pollfd){.fd = fd, .events = POLLIN | POLLOUT}, 1, -1);
  return true;
}

/* Small messages: one send, then a blocking (or spinning) recv, as a
 * plain echo client does; large ones receive while sending so neither
 * side's buffers fill up. */
int bench_raw_exchange(int fd, size_t n, bool busy) {
  size_t sent = 0, got = 0;
  while (sent < n) {
    size_t k = n - sent > BENCH_TXMAX ? BENCH_TXMAX : n - sent;
    ssize_t w = send(fd, bench_zeros, k, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      sent += (size_t)w;
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR)
      return -1;
    if (!exchange_recv(fd, &got, busy))
      return -1;
  }
  while (got < n) {
    size_t want = n - got > sizeof bench_rxbuf ? sizeof bench_rxbuf : n - got;
    ssize_t r = bench_raw_recv(fd, bench_rxbuf, want, busy);
    if (r <= 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}
