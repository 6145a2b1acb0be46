/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers for socket-backed transports (tcp, uring), declared in
 * transport_plugin.h: a listening socket for an endpoint, a socket's addresses
 * as text, socket options (set now when the socket exists, stored until it
 * does), and the accept guard that closes new connections at the fd limit. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <weft/clock.h>
#include <weft/error.h>
#include <weft/log.h>
#include <weft/timer.h>
#include <weft/transport_plugin.h>

enum { NODELAY, SNDBUF, RCVBUF, KEEPALIVE, COUNT };

/* Where `opt` lives in weft_sockopts and which setsockopt it is. */
static bool lookup(weft_channel_option opt, int *idx, int *level, int *name) {
  switch (opt) {
  case WEFT_OPT_TCP_NODELAY:
    *idx = NODELAY, *level = IPPROTO_TCP, *name = TCP_NODELAY;
    return true;
  case WEFT_OPT_SO_SNDBUF:
    *idx = SNDBUF, *level = SOL_SOCKET, *name = SO_SNDBUF;
    return true;
  case WEFT_OPT_SO_RCVBUF:
    *idx = RCVBUF, *level = SOL_SOCKET, *name = SO_RCVBUF;
    return true;
  case WEFT_OPT_SO_KEEPALIVE:
    *idx = KEEPALIVE, *level = SOL_SOCKET, *name = SO_KEEPALIVE;
    return true;
  default:
    return false;
  }
}

static bool is_boolean(int idx) { return idx == NODELAY || idx == KEEPALIVE; }

static int neg_errno(void) { return errno > 0 ? -errno : WEFT_EIO; }

/* ---- listening ---- */

/* Creates, binds and starts listening on one resolved address. */
static int listen_one(const struct addrinfo *ai, int backlog, int type_flags,
                      int *out) {
  int one = 1, err;
  int fd = socket(ai->ai_family, ai->ai_socktype | type_flags, ai->ai_protocol);
  if (fd < 0)
    return neg_errno();
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, backlog) < 0) {
    err = neg_errno();
    close(fd);
    return err;
  }
  *out = fd;
  return 0;
}

int weft_socket_listen(const weft_endpoint *ep, int backlog, int type_flags,
                       int *fd) {
  struct addrinfo *res;
  int err = weft_endpoint_resolve(ep, true, &res);
  if (err < 0)
    return err;
  int got = -1;
  for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
    if ((err = listen_one(ai, backlog, type_flags, &got)) == 0)
      break;
  freeaddrinfo(res);
  if (got < 0)
    return err < 0 ? err : WEFT_EADDRNOTAVAIL;
  *fd = got;
  return 0;
}

int weft_socket_address(int fd, bool peer, char *buf, size_t len) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int rc = peer ? getpeername(fd, (struct sockaddr *)&ss, &sl)
                : getsockname(fd, (struct sockaddr *)&ss, &sl);
  if (rc < 0)
    return neg_errno();
  return weft_sockaddr_format((struct sockaddr *)&ss, buf, len);
}

/* ---- options ---- */

static int setsockopt_int(int fd, int level, int name, int v) {
  return setsockopt(fd, level, name, &v, sizeof v) < 0 ? neg_errno() : 0;
}

int weft_sockopts_set(weft_sockopts *s, int fd, weft_channel_option opt,
                      int64_t v) {
  int idx, level, name;
  if (!lookup(opt, &idx, &level, &name))
    return WEFT_ENOTSUP;
  if (is_boolean(idx) ? (v != 0 && v != 1) : (v <= 0 || v > INT_MAX))
    return WEFT_EINVAL;
  if (fd >= 0) {
    int err = setsockopt_int(fd, level, name, (int)v);
    if (err < 0)
      return err;
  }
  s->value[idx] = (int)v;
  s->isset |= (uint8_t)(1u << idx);
  return 0;
}

int weft_sockopts_get(const weft_sockopts *s, int fd, weft_channel_option opt,
                      int64_t *v) {
  int idx, level, name;
  if (!lookup(opt, &idx, &level, &name))
    return WEFT_ENOTSUP;
  if (fd >= 0) {
    int val = 0;
    socklen_t len = sizeof val;
    if (getsockopt(fd, level, name, &val, &len) < 0)
      return neg_errno();
    *v = is_boolean(idx) ? val != 0 : val;
    return 0;
  }
  if (s->isset & (1u << idx)) {
    *v = s->value[idx];
    return 0;
  }
  switch (idx) {
  case NODELAY:
    *v = 1;
    return 0;
  case KEEPALIVE:
    *v = 0;
    return 0;
  default:
    return WEFT_ENOTCONN; /* the kernel's default is known once it exists */
  }
}

int weft_sockopts_apply(weft_sockopts *s, int fd) {
  if (!(s->isset & (1u << NODELAY))) {
    s->value[NODELAY] = 1;
    s->isset |= 1u << NODELAY;
  }
  static const weft_channel_option all[COUNT] = {
      WEFT_OPT_TCP_NODELAY, WEFT_OPT_SO_SNDBUF, WEFT_OPT_SO_RCVBUF,
      WEFT_OPT_SO_KEEPALIVE};
  for (int i = 0; i < COUNT; i++) {
    int idx, level, name;
    if (!(s->isset & (1u << i)) || !lookup(all[i], &idx, &level, &name))
      continue;
    int err = setsockopt_int(fd, level, name, s->value[idx]);
    if (err < 0)
      return err;
  }
  return 0;
}

/* ---- accepting at the fd limit ---- */

#define GUARD_LOG_INTERVAL_NS 1000000000ull /* one line per second at most */

/* The spare descriptor: the one closed to make room for an accept. */
static int open_spare(void) { return open("/dev/null", O_RDONLY | O_CLOEXEC); }

/* What ran out (`err`: -EMFILE or -ENFILE) into `buf`, and the way out. */
static const char *limit_text(int err, char *buf, size_t len) {
  if (err == -ENFILE) {
    snprintf(buf, len, "too many open files in the system");
    return "raise fs.file-max";
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    snprintf(buf, len, "too many open files (limit %llu)",
             (unsigned long long)rl.rlim_cur);
  else
    snprintf(buf, len, "too many open files");
  return "raise the fd limit with ulimit -n";
}

/* The count of a line: " (N closed so far)" when it opens a refusing spell,
 * else " (N more closed since the last message)"; empty for none. */
static void count_text(const weft_accept_guard *g, char *buf, size_t len) {
  buf[0] = '\0';
  if (g->refused > 0)
    snprintf(buf, len, " (%llu %s)", (unsigned long long)g->refused,
             g->logged_refusing ? "more closed since the last message"
                                : "closed so far");
}

/* Writes the line for the guard's state, if there is news: still or newly
 * refusing with connections closed, refusing ended, or a spell that began
 * and ended between two lines. */
static void guard_write(weft_accept_guard *g, uint64_t now) {
  char what[96], count[80];
  const char *fix = limit_text(g->err, what, sizeof what);
  count_text(g, count, sizeof count);
  if (g->refusing && g->refused > 0)
    weft_log(WEFT_LOG_WARN,
             "%s: accept: %s; closing new connections until descriptors are "
             "free; %s%s",
             g->name, what, fix, count);
  else if (!g->refusing && g->logged_refusing)
    weft_log(WEFT_LOG_WARN, "%s: accept: descriptors are free again%s", g->name,
             count);
  else if (!g->refusing && g->refused > 0)
    weft_log(WEFT_LOG_WARN, "%s: accept: %s for a moment%s; %s", g->name, what,
             count, fix);
  else
    return;
  g->logged_refusing = g->refusing;
  g->refused = 0;
  g->last_log_ns = now;
}

/* The report timer: the news of the second that just ended. */
static void guard_report(void *arg) { guard_write(arg, weft_now_ns()); }

/* Writes the news now if the last line is a second old, else arms the
 * report timer for when it is. */
static void guard_note(weft_accept_guard *g) {
  uint64_t now = weft_now_ns();
  if (g->last_log_ns == 0 || now - g->last_log_ns >= GUARD_LOG_INTERVAL_NS) {
    weft_timer_stop(&g->report);
    guard_write(g, now);
  } else if (!weft_timer_active(&g->report)) {
    weft_timer_start(&g->report, g->last_log_ns + GUARD_LOG_INTERVAL_NS - now,
                     0, guard_report, g);
  }
}

/* Logs, at most once per second, that accepting pauses: `err` when the
 * kernel is short of memory, or the fd limit with no spare to refuse with. */
static void guard_pause(weft_accept_guard *g, int err) {
  uint64_t now = weft_now_ns();
  if (g->last_log_ns != 0 && now - g->last_log_ns < GUARD_LOG_INTERVAL_NS)
    return;
  unsigned ms = (unsigned)(WEFT_ACCEPT_BACKOFF_NS / 1000000u);
  if (err == -EMFILE || err == -ENFILE) {
    char what[96];
    const char *fix = limit_text(err, what, sizeof what);
    weft_log(WEFT_LOG_WARN,
             "%s: accept: %s and no descriptor to spare for closing new "
             "connections; they wait in the backlog, accepting again in %u "
             "ms; %s",
             g->name, what, ms, fix);
  } else {
    weft_log(WEFT_LOG_WARN,
             "%s: accept: %s; new connections wait in the backlog, accepting "
             "again in %u ms",
             g->name, weft_strerror(err), ms);
  }
  g->last_log_ns = now;
}

void weft_accept_guard_init(weft_accept_guard *g, weft_loop *loop,
                            const char *name) {
  *g = (weft_accept_guard){
      .name = name, .spare_fd = open_spare(), .err = -EMFILE};
  weft_timer_init(loop, &g->report);
}

void weft_accept_guard_fini(weft_accept_guard *g) {
  weft_timer_stop(&g->report);
  if (g->refused > 0) {
    char count[80];
    count_text(g, count, sizeof count);
    weft_log(WEFT_LOG_WARN, "%s: accept: listener closed%s", g->name, count);
    g->refused = 0;
  }
  if (g->spare_fd >= 0)
    close(g->spare_fd);
  g->spare_fd = -1;
}

int weft_accept_guard_refuse(weft_accept_guard *g, int listen_fd, int err) {
  if (err != -EMFILE && err != -ENFILE) {
    guard_pause(g, err); /* ENOBUFS, ENOMEM: only time helps */
    return WEFT_EAGAIN;
  }
  g->err = err;
  /* Accept fails at the limit even when no connection waits. */
  struct pollfd pfd = {.fd = listen_fd, .events = POLLIN};
  int rc;
  do
    rc = poll(&pfd, 1, 0);
  while (rc < 0 && errno == EINTR);
  if (rc == 0 || (rc > 0 && !(pfd.revents & POLLIN)))
    return 0;
  if (g->spare_fd < 0)
    g->spare_fd = open_spare();
  if (rc < 0 || g->spare_fd < 0) {
    guard_pause(g, err);
    return WEFT_EAGAIN;
  }
  close(g->spare_fd);
  int fd;
  do
    fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  int accept_errno = errno;
  if (fd >= 0)
    close(fd); /* the client sees the connection closed */
  g->spare_fd = open_spare();
  if (fd < 0) {
    switch (accept_errno) {
    case EAGAIN:
      return 0;
    case ECONNABORTED: /* that one gave up: the next may wait */
    case EPROTO:
    case EPERM:
      return 1;
    default: /* another thread took the freed descriptor */
      guard_pause(g, -accept_errno);
      return WEFT_EAGAIN;
    }
  }
  g->refusing = true;
  g->refused++;
  guard_note(g);
  return 1;
}

void weft_accept_guard_accepted(weft_accept_guard *g) {
  if (g->spare_fd < 0)
    g->spare_fd = open_spare();
  if (!g->refusing)
    return;
  g->refusing = false;
  guard_note(g);
}
