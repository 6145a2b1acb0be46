/* SPDX-License-Identifier: Apache-2.0 */
/* bench_raw_tls.c: OpenSSL alone, the floor of weft-bench's +tls rows, as
 * raw-busy and raw-block are the floor of the plaintext ones. A raw-tls
 * connection is a TCP socket with an SSL over it (SSL_set_fd: OpenSSL's
 * socket BIO reads and writes the socket itself): SSL_connect or
 * SSL_accept once connected, then SSL_read and SSL_write where the raw
 * setups recv and send. raw-tls-block leaves the socket blocking and
 * blocks in SSL_read; raw-tls-busy makes it nonblocking and spins on
 * SSL_read while it says SSL_ERROR_WANT_READ, as raw-busy spins on
 * recv(MSG_DONTWAIT). Both ends' contexts take weft's TLS policy
 * (handlers/tls_context.c), so the handshake negotiates what the +tls
 * rows do: TLS 1.3 and AES-128-GCM. Records are always encrypted in user
 * space (--tls-ktls is for the weft setups).
 *
 * The client's SSL does not retry reads on its own (SSL_MODE_AUTO_RETRY
 * cleared): a read that found only the server's session tickets returns
 * SSL_ERROR_WANT_READ instead of blocking for data, so a client that
 * only looks whether an answer is there (bench_tls_take) never blocks. */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "bench.h"

/* weft's TLS 1.3 suites in its order (handlers/tls_context.c) */
#define TLS_SUITES                                                             \
  "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"                             \
  "TLS_CHACHA20_POLY1305_SHA256"
#define TLS_NAME "localhost" /* the name make-certs.sh's server.pem has */

/* OpenSSL's reason for the last failure (its first queued error, the
 * root cause), or errno's, into buf; the error queue is cleared. */
static const char *tls_reason(char *buf, size_t len) {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0)
    snprintf(buf, len, "%s", errno != 0 ? strerror(errno) : "no reason");
  else
    ERR_error_string_n(e, buf, len);
  return buf;
}

/* "weft-bench: WHAT: reason", exit `code`. */
static _Noreturn void tls_die(const char *what, int code) {
  char why[256];
  fprintf(stderr, "weft-bench: %s: %s\n", what, tls_reason(why, sizeof why));
  exit(code);
}

/* ---- contexts ---- */

/* weft's policy: apply_policy of handlers/tls_context.c, at TLS 1.3. */
static SSL_CTX *ctx_with_policy(bool server) {
  SSL_CTX *x = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (x == NULL || SSL_CTX_set_min_proto_version(x, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_max_proto_version(x, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_ciphersuites(x, TLS_SUITES) != 1)
    tls_die("raw-tls: TLS context", 2);
  SSL_CTX_set_options(x, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(x, SSL_MODE_RELEASE_BUFFERS);
  return x;
}

/* --tls-certs/NAME, or exit 2 saying which file did not load. */
static void cert_path(char *buf, size_t len, const char *name) {
  if ((size_t)snprintf(buf, len, "%s/%s", bench_opt.tls_certs, name) >= len)
    bench_fail("--tls-certs %s: too long a path", bench_opt.tls_certs);
}

static void load_server_files(SSL_CTX *x) {
  char cert[PATH_MAX], key[PATH_MAX], what[PATH_MAX + 16];
  cert_path(cert, sizeof cert, "server.pem");
  cert_path(key, sizeof key, "server.key");
  snprintf(what, sizeof what, "--tls-certs: %s", cert);
  if (SSL_CTX_use_certificate_chain_file(x, cert) != 1)
    tls_die(what, 2);
  snprintf(what, sizeof what, "--tls-certs: %s", key);
  if (SSL_CTX_use_PrivateKey_file(x, key, SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(x) != 1)
    tls_die(what, 2);
}

static void load_client_files(SSL_CTX *x) {
  char ca[PATH_MAX], what[PATH_MAX + 16];
  cert_path(ca, sizeof ca, "ca.pem");
  snprintf(what, sizeof what, "--tls-certs: %s", ca);
  if (SSL_CTX_load_verify_locations(x, ca, NULL) != 1)
    tls_die(what, 2);
  SSL_CTX_set_verify(x, SSL_VERIFY_PEER, NULL);
}

struct ssl_ctx_st *bench_tls_ctx_new(bool server) {
  SSL_CTX *x = ctx_with_policy(server);
  if (server)
    load_server_files(x);
  else
    load_client_files(x);
  return x;
}

void bench_tls_ctx_free(struct ssl_ctx_st *ctx) { SSL_CTX_free(ctx); }

/* ---- one connection ---- */

/* Whether a failed call (rc) only has to be made again: the nonblocking
 * socket had nothing to read or no room, or a record carried no data. */
static bool tls_again(SSL *ssl, int rc) {
  int e = SSL_get_error(ssl, rc);
  return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE;
}

int bench_tls_handshake(raw_link *l, bool server, char *why, size_t len) {
  for (;;) {
    int rc = server ? SSL_accept(l->ssl) : SSL_connect(l->ssl);
    if (rc == 1)
      return 0;
    if (!tls_again(l->ssl, rc)) {
      long v = SSL_get_verify_result(l->ssl);
      char reason[200];
      tls_reason(reason, sizeof reason);
      snprintf(why, len, "%s%s%s", reason, v != X509_V_OK ? ": " : "",
               v != X509_V_OK ? X509_verify_cert_error_string(v) : "");
      return -1;
    }
  }
}

/* The first handshake of a setup: its protocol and cipher on stderr, as
 * the weft client prints them (bench_client.c). */
static void tell_cipher(session *s, SSL *ssl) {
  if (atomic_exchange(&s->tls_told, true))
    return;
  fprintf(stderr, "weft-bench: %s: TLS %s, cipher %s, user-space records\n",
          s->cf->label, SSL_get_version(ssl), SSL_get_cipher_name(ssl));
}

raw_link bench_tls_link_open(session *s, uint32_t mode, uint64_t unit) {
  raw_link l = {.fd = bench_raw_dial(s), .busy = s->cf->busy};
  if (l.busy && fcntl(l.fd, F_SETFL, fcntl(l.fd, F_GETFL) | O_NONBLOCK) < 0)
    bench_die("fcntl");
  l.ssl = SSL_new(s->ssl_client);
  if (l.ssl == NULL || SSL_set_fd(l.ssl, l.fd) != 1 ||
      SSL_set_tlsext_host_name(l.ssl, TLS_NAME) != 1 ||
      SSL_set1_host(l.ssl, TLS_NAME) != 1)
    tls_die("raw-tls: SSL_new", 1);
  SSL_clear_mode(l.ssl, SSL_MODE_AUTO_RETRY);
  char why[400];
  if (bench_tls_handshake(&l, false, why, sizeof why) < 0) {
    fprintf(stderr, "weft-bench: %s: TLS handshake: %s\n", s->cf->label, why);
    exit(1);
  }
  tell_cipher(s, l.ssl);
  hello h = {BENCH_HELLO_MAGIC, mode, unit};
  if (!bench_opt.plain_echo && bench_tls_send_all(&l, &h, sizeof h) < 0)
    tls_die("raw-tls: hello", 1);
  return l;
}

int bench_tls_send(raw_link *l, const void *p, size_t n) {
  int w = SSL_write(l->ssl, p, (int)n);
  if (w > 0)
    return w;
  return tls_again(l->ssl, w) ? 0 : -1;
}

int bench_tls_send_all(raw_link *l, const void *p, size_t n) {
  int w;
  while ((w = bench_tls_send(l, p, n)) == 0)
    ;
  return w < 0 ? -1 : 0;
}

/* One SSL_read: bytes, 0 when it only has to be made again, -1 at EOF
 * (close_notify or not) or on an error. */
static int read_once(SSL *ssl, void *p, size_t n) {
  int r = SSL_read(ssl, p, n > INT_MAX ? INT_MAX : (int)n);
  if (r > 0)
    return r;
  return tls_again(ssl, r) ? 0 : -1;
}

int bench_tls_recv(raw_link *l, void *p, size_t n) {
  int r;
  while ((r = read_once(l->ssl, p, n)) == 0)
    ;
  return r;
}

int bench_tls_take(raw_link *l, void *p, size_t n) {
  /* a blocking socket is read only when poll says a record has begun */
  if (!l->busy && !SSL_has_pending(l->ssl) &&
      poll(&(struct pollfd){.fd = l->fd, .events = POLLIN}, 1, 0) <= 0)
    return 0;
  return read_once(l->ssl, p, n);
}

/* Adds to *got what came without waiting; -1 at EOF or on an error. */
static int take_all(raw_link *l, size_t *got) {
  int r;
  while ((r = bench_tls_take(l, bench_rxbuf, sizeof bench_rxbuf)) > 0)
    *got += (size_t)r;
  return r;
}

/* Small messages: one SSL_write, then SSL_read until the echo is back.
 * Larger ones go in BENCH_CHUNK pieces, taking what came back after each,
 * so neither side's socket buffers fill up with echo nobody reads. */
int bench_tls_exchange(raw_link *l, size_t n) {
  size_t sent = 0, got = 0;
  while (sent < n) {
    size_t k = n - sent > BENCH_CHUNK ? BENCH_CHUNK : n - sent;
    int w = bench_tls_send(l, bench_zeros, k);
    if (w < 0)
      return -1;
    sent += (size_t)w;
    if (sent < n && take_all(l, &got) < 0)
      return -1;
  }
  while (got < n) {
    size_t want = n - got > sizeof bench_rxbuf ? sizeof bench_rxbuf : n - got;
    int r = bench_tls_recv(l, bench_rxbuf, want);
    if (r < 0)
      return -1;
    got += (size_t)r;
  }
  return 0;
}

void bench_tls_end(raw_link *l) {
  SSL_shutdown(l->ssl); /* close_notify; the peer's is drained with EOF */
  SSL_free(l->ssl);
  l->ssl = NULL;
  ERR_clear_error();
}
