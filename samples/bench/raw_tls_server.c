/* SPDX-License-Identifier: Apache-2.0 */
/* raw_tls_server.c: weft-bench's raw-tls server, the OpenSSL floor of the
 * +tls rows' server side (bench_raw_tls.c says how a connection is set
 * up). One thread, pinned to CPU 1, serves one connection at a time:
 * waits for a connection (or the stop fd), SSL_accept, reads the 16 B
 * hello, then until EOF echoes what each SSL_read gives (SRV_ECHO) or
 * counts it and answers one zero byte per unit (SRV_SINK), and closes
 * after its close_notify. raw-tls-block blocks in SSL_read and SSL_write
 * on a blocking socket; raw-tls-busy spins on them over a nonblocking one.
 *
 * One connection at a time is all the patterns the raw-tls setups run
 * need (pingpong and stream: one connection per measurement, closed
 * before the next), and it keeps the server at what a minimal blocking
 * SSL echo is. A connection whose handshake or hello fails is closed,
 * its reason on stderr; the server goes on. */

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "bench.h"

/* Reads exactly n bytes; -1 at EOF or on an error. */
static int recv_exact(raw_link *l, void *p, size_t n) {
  while (n > 0) {
    int r = bench_tls_recv(l, p, n);
    if (r < 0)
      return -1;
    p = (uint8_t *)p + r;
    n -= (size_t)r;
  }
  return 0;
}

/* The hello (or, with --plain-echo, echo from byte 0); false when the
 * connection is to close: not a hello, a CLOSE, EOF or an error. */
static bool read_hello(raw_link *l, hello *h) {
  if (bench_opt.plain_echo) {
    *h = (hello){BENCH_HELLO_MAGIC, SRV_ECHO, 0};
    return true;
  }
  if (recv_exact(l, h, sizeof *h) < 0)
    return false;
  return h->magic == BENCH_HELLO_MAGIC &&
         (h->mode == SRV_ECHO || (h->mode == SRV_SINK && h->unit > 0));
}

/* SRV_SINK: counts n more bytes and answers one zero byte per unit. */
static int sink(raw_link *l, const hello *h, uint64_t *count, size_t n) {
  uint64_t before = *count / h->unit;
  *count += n;
  for (uint64_t due = *count / h->unit - before; due > 0;) {
    size_t k = due > BENCH_CHUNK ? BENCH_CHUNK : (size_t)due;
    if (bench_tls_send_all(l, bench_zeros, k) < 0)
      return -1;
    due -= k;
  }
  return 0;
}

/* Echoes or counts what the client sends until EOF or an error. */
static void serve_records(raw_link *l, const hello *h, uint8_t *rx) {
  uint64_t count = 0;
  for (;;) {
    int r = bench_tls_recv(l, rx, BENCH_TXMAX);
    if (r < 0)
      return;
    int rc = h->mode == SRV_ECHO ? bench_tls_send_all(l, rx, (size_t)r)
                                 : sink(l, h, &count, (size_t)r);
    if (rc < 0)
      return;
  }
}

/* One connection, from SSL_accept to close. */
static void serve(session *s, int fd, uint8_t *rx) {
  raw_link l = {.fd = fd, .ssl = SSL_new(s->ssl_server), .busy = s->cf->busy};
  char why[400];
  hello h;
  bench_raw_nodelay(fd);
  if (l.ssl == NULL || SSL_set_fd(l.ssl, fd) != 1)
    fprintf(stderr, "weft-bench: %s server: SSL_new failed\n", s->cf->label);
  else if (bench_tls_handshake(&l, true, why, sizeof why) < 0)
    fprintf(stderr, "weft-bench: %s server: TLS handshake: %s\n", s->cf->label,
            why);
  else if (read_hello(&l, &h))
    serve_records(&l, &h, rx);
  if (l.ssl != NULL)
    bench_tls_end(&l);
  ERR_clear_error();
  close(fd);
}

/* Waits for a connection; its socket (nonblocking when busy), or -1 once
 * the stop fd fired. */
static int next_connection(session *s) {
  struct pollfd pf[2] = {{.fd = s->lfd, .events = POLLIN},
                         {.fd = s->stop_fd, .events = POLLIN}};
  int flags = SOCK_CLOEXEC | (s->cf->busy ? SOCK_NONBLOCK : 0);
  for (;;) {
    if (poll(pf, 2, -1) < 0 && errno != EINTR)
      bench_die("raw-tls server: poll");
    if (pf[1].revents != 0)
      return -1;
    int fd = accept4(s->lfd, NULL, NULL, flags);
    if (fd >= 0)
      return fd;
  }
}

void *bench_server_raw_tls_main(void *arg) {
  session *s = arg;
  bench_raw_server_thread(s, "tls");
  uint8_t *rx = malloc(BENCH_TXMAX);
  if (rx == NULL)
    bench_die("raw-tls server setup");
  for (int fd; (fd = next_connection(s)) >= 0;)
    serve(s, fd, rx);
  free(rx);
  return NULL;
}
