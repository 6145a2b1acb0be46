/* SPDX-License-Identifier: Apache-2.0 */
/* DUMP, RESTORE (and RESTORE-ASKING) and MIGRATE: moving keys between
 * servers, for Redis Cluster's slot migration (cluster.h) and on their own.
 *
 * The payload DUMP writes and RESTORE reads is weft's, not Redis' RDB
 * encoding: the 4 bytes "WKV" 0x01, then the value's bytes (every value
 * here is a string). RESTORE refuses anything else with Redis' own error,
 * so a redis-server's DUMP is never stored as garbage, and weft and
 * redis-server cannot MIGRATE to each other.
 *
 * MIGRATE is synchronous, as Redis': the loop that runs it connects to the
 * target (a blocking socket with the command's timeout), sends AUTH and one
 * RESTORE-ASKING per key, reads the replies, and deletes the keys the
 * target took (unless COPY), all with the stripes of those keys locked
 * (kv_txn; inside EXEC, whose transaction holds every stripe then). Commands of
 * those stripes on other loops wait meanwhile, and the cluster gate (cluster.c)
 * reads keys under the same locks, so no write lands on a key that has just
 * left. A target that does not answer in time leaves every key here (IOERR);
 * one that answered for some keys has them, and they are deleted here. Two
 * servers that MIGRATE to each other at the same moment can wait on each
 * other's locks until the timeout.
 */
#include "command_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <weft/error.h>

#include "cluster.h"

static const char payload_magic[4] = {'W', 'K', 'V', 1};

/* DUMP key: the value in weft's payload, or nil. */
void kv_cmd_dump(const kv_call *c) {
  kv_blob *v = NULL;
  int rc = kv_get(c->store, c->argv[0].ptr, c->argv[0].len, &v);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  if (rc == 0)
    return c->ops->null(c->w);
  char *p = malloc(sizeof payload_magic + v->len);
  if (p == NULL) {
    kv_blob_release(v);
    return kv_reply_store_error(c, WEFT_ENOMEM);
  }
  memcpy(p, payload_magic, sizeof payload_magic);
  memcpy(p + sizeof payload_magic, v->data, v->len);
  c->ops->bulk(c->w, p, sizeof payload_magic + v->len, NULL);
  free(p);
  kv_blob_release(v);
}

/* RESTORE key ttl payload [REPLACE] [ABSTTL], and RESTORE-ASKING (the
 * same; the gate lets it into a slot being imported). ttl in ms, 0 = no
 * TTL; ABSTTL: a Unix time in ms. */
void kv_cmd_restore(const kv_call *c) {
  bool replace = false, abs = false;
  for (size_t i = 3; i < c->argc; i++) {
    if (kv_arg_is(&c->argv[i], "REPLACE"))
      replace = true;
    else if (kv_arg_is(&c->argv[i], "ABSTTL"))
      abs = true;
    else
      return kv_reply_syntax(c);
  }
  int64_t ttl;
  if (!kv_parse_i64(&c->argv[1], &ttl))
    return kv_reply_not_integer(c);
  if (ttl < 0)
    return c->ops->error(c->w, "ERR Invalid TTL value, must be >= 0");
  const kv_arg *p = &c->argv[2];
  if (p->len < sizeof payload_magic ||
      memcmp(p->ptr, payload_magic, sizeof payload_magic) != 0)
    return c->ops->error(c->w,
                         "ERR DUMP payload version or checksum are wrong");
  const kv_arg *key = &c->argv[0];
  if (abs && ttl != 0) {
    ttl -= kv_unix_ms();
    if (ttl <= 0) { /* expired already: Redis creates nothing */
      int rc = replace ? kv_del(c->store, 1, key) : 0;
      return rc < 0 ? kv_reply_store_error(c, rc) : c->ops->simple(c->w, "OK");
    }
  }
  kv_set_options o = {.flags = replace ? 0 : KV_SET_NX,
                      .ttl_ms = ttl > KV_TTL_MAX_MS ? KV_TTL_MAX_MS : ttl};
  int rc = kv_set(c->store, key->ptr, key->len,
                  (const char *)p->ptr + sizeof payload_magic,
                  p->len - sizeof payload_magic, &o);
  if (rc < 0)
    return kv_reply_store_error(c, rc);
  if (rc == 0)
    return c->ops->error(c->w, "BUSYKEY Target key name already exists.");
  c->ops->simple(c->w, "OK");
}

/* ---- MIGRATE ---- */

/** MIGRATE's parsed arguments. */
typedef struct migrate_args {
  char host[KV_CLUSTER_HOST_MAX];
  char port[8];
  int64_t timeout_ms;
  bool copy, replace;
  const kv_arg *user, *password; /* AUTH / AUTH2, or NULL */
  const kv_arg *keys;            /* into the call's argv */
  size_t n_keys;
} migrate_args;

/* Parses MIGRATE host port key|"" db timeout [options] into `a`; NULL, or
 * the error reply's text. */
static const char *migrate_parse(const kv_call *c, migrate_args *a) {
  const kv_arg *v = c->argv;
  int64_t db;
  *a = (migrate_args){.keys = &v[2], .n_keys = 1};
  if (v[0].len == 0 || v[0].len >= sizeof a->host || v[1].len == 0 ||
      v[1].len >= sizeof a->port)
    return "ERR syntax error";
  memcpy(a->host, v[0].ptr, v[0].len);
  memcpy(a->port, v[1].ptr, v[1].len);
  if (!kv_parse_i64(&v[3], &db) || !kv_parse_i64(&v[4], &a->timeout_ms))
    return "ERR value is not an integer or out of range";
  if (db != 0)
    return "ERR DB index is out of range"; /* one database here */
  if (a->timeout_ms <= 0)
    a->timeout_ms = 1000; /* Redis' default for 0 */
  for (size_t i = 5; i < c->argc; i++) {
    if (kv_arg_is(&v[i], "COPY")) {
      a->copy = true;
    } else if (kv_arg_is(&v[i], "REPLACE")) {
      a->replace = true;
    } else if (kv_arg_is(&v[i], "AUTH") && i + 1 < c->argc) {
      a->password = &v[++i];
    } else if (kv_arg_is(&v[i], "AUTH2") && i + 2 < c->argc) {
      a->user = &v[++i];
      a->password = &v[++i];
    } else if (kv_arg_is(&v[i], "KEYS")) {
      if (v[2].len != 0)
        return "ERR When using MIGRATE KEYS option, the key argument must "
               "be set to the empty string";
      a->keys = &v[i + 1];
      a->n_keys = c->argc - i - 1;
      break;
    } else {
      return "ERR syntax error";
    }
  }
  return NULL;
}

/* A connected blocking socket to host:port whose connect, reads and
 * writes each time out after `ms`, or -1. */
static int dial(const char *host, const char *port, int64_t ms) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
  if (getaddrinfo(host, port, &hints, &res) != 0)
    return -1;
  int fd =
      socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  bool ok = fd >= 0 && (connect(fd, res->ai_addr, res->ai_addrlen) == 0 ||
                        errno == EINPROGRESS);
  freeaddrinfo(res);
  struct pollfd pfd = {.fd = fd, .events = POLLOUT};
  int err = 0, rc;
  socklen_t len = sizeof err;
  if (ok) {
    do
      rc = poll(&pfd, 1, ms > INT32_MAX ? INT32_MAX : (int)ms);
    while (rc < 0 && errno == EINTR);
    ok = rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
         err == 0;
  }
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  ok = ok && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
       setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0 &&
       fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0;
  if (!ok && fd >= 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Writes every byte of `iov` (`n` entries, changed); false on an error or
 * the timeout. */
static bool send_all(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++, n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
  return true;
}

/** One word of a command to send: the bytes of `a` then of `b`. */
typedef struct word {
  const void *a;
  size_t alen;
  const void *b;
  size_t blen;
} word;

#define WORDS_MAX 5 /* the longest command MIGRATE sends */

/* Sends one command of `argc` (<= WORDS_MAX) words. */
static bool send_command(int fd, size_t argc, const word *argv) {
  char head[WORDS_MAX + 1][24];
  struct iovec iov[1 + 4 * WORDS_MAX];
  int n = 0;
  iov[n].iov_base = head[0];
  iov[n++].iov_len = (size_t)snprintf(head[0], 24, "*%zu\r\n", argc);
  for (size_t i = 0; i < argc; i++) {
    const word *w = &argv[i];
    iov[n].iov_base = head[i + 1];
    iov[n++].iov_len =
        (size_t)snprintf(head[i + 1], 24, "$%zu\r\n", w->alen + w->blen);
    iov[n++] = (struct iovec){(void *)w->a, w->alen};
    if (w->blen > 0)
      iov[n++] = (struct iovec){(void *)w->b, w->blen};
    iov[n++] = (struct iovec){"\r\n", 2};
  }
  return send_all(fd, iov, n);
}

/** The target's reply lines (every reply MIGRATE waits for is one line). */
typedef struct reply_reader {
  int fd;
  char buf[4096];
  size_t len, off;
} reply_reader;

/* The next reply line into `line` (without CRLF, cut to `cap`), or false
 * on an error, the timeout, or a line longer than the buffer. */
static bool read_line(reply_reader *r, char *line, size_t cap) {
  for (;;) {
    char *end = memchr(r->buf + r->off, '\n', r->len - r->off);
    if (end != NULL) {
      size_t l = (size_t)(end - (r->buf + r->off));
      if (l > 0 && end[-1] == '\r')
        l--;
      snprintf(line, cap, "%.*s", (int)l, r->buf + r->off);
      r->off = (size_t)(end - r->buf) + 1;
      return true;
    }
    if (r->off > 0) { /* compact, so a line always has the whole buffer */
      memmove(r->buf, r->buf + r->off, r->len - r->off);
      r->len -= r->off;
      r->off = 0;
    }
    if (r->len == sizeof r->buf)
      return false;
    ssize_t n = recv(r->fd, r->buf + r->len, sizeof r->buf - r->len, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    r->len += (size_t)n;
  }
}

/** One key MIGRATE sends. */
typedef struct migrate_key {
  const kv_arg *key;
  kv_blob *value;
  int64_t ttl_ms; /* 0 = none */
  bool moved;     /* the target took it */
} migrate_key;

/* Sends AUTH and the keys, and reads the replies: a key the target took
 * is marked `moved`. Returns NULL, or the error reply's text (in `err`,
 * `cap` bytes) for the first failure. */
static const char *transfer(const migrate_args *a, migrate_key *k, size_t n,
                            char *err, size_t cap) {
  int fd = dial(a->host, a->port, a->timeout_ms);
  if (fd < 0)
    return "IOERR error or timeout connecting to the client";
  bool ok = true;
  if (a->password != NULL) {
    word w[3] = {{"AUTH", 4, NULL, 0}};
    size_t words = 1;
    if (a->user != NULL)
      w[words++] = (word){a->user->ptr, a->user->len, NULL, 0};
    w[words++] = (word){a->password->ptr, a->password->len, NULL, 0};
    ok = send_command(fd, words, w);
  }
  /* Pipelined: the replies are a few bytes each, so the socket buffers
   * hold them while the commands are still being sent. */
  for (size_t i = 0; i < n && ok; i++) {
    char ttl[24];
    word w[5] = {
        {"RESTORE-ASKING", 14, NULL, 0},
        {k[i].key->ptr, k[i].key->len, NULL, 0},
        {ttl, (size_t)snprintf(ttl, sizeof ttl, "%lld", (long long)k[i].ttl_ms),
         NULL, 0},
        {payload_magic, sizeof payload_magic, k[i].value->data,
         k[i].value->len},
        {"REPLACE", 7, NULL, 0}};
    ok = send_command(fd, a->replace ? 5 : 4, w);
  }
  reply_reader r = {.fd = fd};
  char line[256];
  const char *failed = ok ? NULL
                          : "IOERR error or timeout writing to target "
                            "instance";
  /* AUTH's reply, then one per key. */
  for (size_t i = a->password != NULL ? 0 : 1; i <= n && failed == NULL; i++) {
    if (!read_line(&r, line, sizeof line)) {
      failed = "IOERR error or timeout reading to target instance";
    } else if (line[0] == '-') {
      snprintf(err, cap, "ERR Target instance replied with error: %s",
               line + 1);
      failed = err;
    } else if (i > 0) {
      k[i - 1].moved = true;
    }
  }
  close(fd);
  return failed;
}

/* MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH password]
 * [AUTH2 username password] [KEYS key ...]: see the top of the file. */
void kv_cmd_migrate(const kv_call *c) {
  migrate_args a;
  const char *bad = migrate_parse(c, &a);
  if (bad != NULL)
    return c->ops->error(c->w, bad);
  migrate_key *k = calloc(a.n_keys > 0 ? a.n_keys : 1, sizeof *k);
  if (k == NULL)
    return kv_reply_store_error(c, WEFT_ENOMEM);
  /* In EXEC, its transaction holds every stripe already
   * (kv_command_add_keys): a second one cannot nest in it (kv_txn_lock). */
  bool own = !c->sess->in_exec;
  kv_txn t;
  kv_txn_init(&t, c->store);
  for (size_t i = 0; i < a.n_keys; i++)
    kv_txn_add_key(&t, a.keys[i].ptr, a.keys[i].len);
  if (own)
    kv_txn_lock(&t);
  size_t n = 0;
  for (size_t i = 0; i < a.n_keys; i++) {
    const kv_arg *key = &a.keys[i];
    int64_t ttl = -1;
    if (kv_get(c->store, key->ptr, key->len, &k[n].value) == 1 &&
        kv_pttl(c->store, key->ptr, key->len, &ttl) >= 0) {
      k[n].key = key;
      k[n++].ttl_ms = ttl > 0 ? ttl : 0;
    } else {
      kv_blob_release(k[n].value);
      k[n].value = NULL;
    }
  }
  char err[320];
  const char *failed = n > 0 ? transfer(&a, k, n, err, sizeof err) : NULL;
  for (size_t i = 0; i < n; i++) {
    if (k[i].moved && !a.copy)
      kv_del(c->store, 1, k[i].key);
    kv_blob_release(k[i].value);
  }
  if (own)
    kv_txn_unlock(&t);
  free(k);
  if (failed != NULL)
    c->ops->error(c->w, failed);
  else
    c->ops->simple(c->w, n > 0 ? "OK" : "NOKEY");
}
