/* Socket options for socket-backed transports (tcp, uring): set now when
 * the socket exists, stored until it does (weft_sockopts in transport.h). */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <sys/socket.h>

#include <weft/error.h>
#include <weft/transport.h>

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
