/* Helpers for socket-backed transports (tcp, uring), declared in
 * transport_plugin.h: a listening socket for an endpoint, a socket's addresses
 * as text, and socket options (set now when the socket exists, stored until it
 * does). */
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include <weft/error.h>
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
